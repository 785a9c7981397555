#!/usr/bin/env bash
# Installs what diffrt needs to build and test on Debian/Ubuntu (apt-get).
# Only missing packages are installed; run as root or with sudo available.
set -euo pipefail

PKGS=(
  build-essential cmake pkg-config
  ninja-build             # scripts/test.sh builds with Ninja (make works too)
  libcjson-dev            # config.json / safetensors headers
  libpcre2-dev            # tokenizer split regex
  libopenblas-dev         # the CPU GEMM the benchmarks compare against
  ocl-icd-opencl-dev opencl-headers pocl-opencl-icd clinfo libclblast-dev   # OpenCL (PoCL on CPU)
  libvulkan-dev glslc mesa-vulkan-drivers vulkan-tools vulkan-validationlayers  # Vulkan (lavapipe on CPU)
  curl                    # diffrt serve's tests
  python3 python3-numpy   # the Python package's test (ctest python_binding) runs /usr/bin/python3
                          # when the python3 first on PATH has no numpy (tests/CMakeLists.txt)
)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all packages present"
  exit 0
fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "setup: need root (or sudo) to install: ${missing[*]}" >&2; exit 1; }
  SUDO=sudo
fi
echo "setup: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
