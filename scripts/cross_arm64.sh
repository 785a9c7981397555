#!/usr/bin/env bash
# The arm64 check CI runs: cross-build diffrt for arm64 (CPU backends only,
# warnings as errors) and run conform on the cpu backend's NEON and portable
# kernel sets against the reference, every op case and fixture model, under
# qemu-aarch64. One thread: this qemu-user hangs in pthread_create/join, so
# the pool (ISA-independent, tested natively) is not exercised here.
#   BUILD_DIR  build folder (default build-arm64)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-arm64}
PKGS=(gcc-aarch64-linux-gnu libc6-dev-arm64-cross qemu-user libcjson-dev:arm64 libpcre2-dev:arm64)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO=sudo
if ! dpkg --print-foreign-architectures | grep -qx arm64; then
  $SUDO dpkg --add-architecture arm64
fi
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "cross_arm64: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi
L=/usr/lib/aarch64-linux-gnu
cmake -B "$BUILD_DIR" -DCMAKE_TOOLCHAIN_FILE=cmake/aarch64-linux-gnu.cmake -DDIFFRT_WERROR=ON \
  -DDIFFRT_OPENCL=OFF -DDIFFRT_VULKAN=OFF -DDIFFRT_CUDA=OFF \
  -DCJSON_LIBRARY=$L/libcjson.so -DCJSON_INCLUDE_DIR=/usr/include \
  -DPCRE2_LIBRARY=$L/libpcre2-8.so -DPCRE2_INCLUDE_DIR=/usr/include
cmake --build "$BUILD_DIR" -j"$(nproc)" --target diffrt_cli
RUN=(qemu-aarch64 -L /usr/aarch64-linux-gnu "$BUILD_DIR/diffrt")
"${RUN[@]}" info | grep -A1 '^  cpu'
for isa in neon generic; do
  echo "== arm64 cpu, $isa kernels"
  DIFFRT_THREADS=1 DIFFRT_CPU_ISA=$isa "${RUN[@]}" conform --backend cpu --require cpu --models tests/fixtures | tail -1
done
