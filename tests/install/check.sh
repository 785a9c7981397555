#!/usr/bin/env bash
# Checks diffrt as a library, from a build directory already built:
#   1. cmake --install into a fresh prefix puts every file where it belongs
#      (bin/diffrt, libdiffrt.so with its SONAME, the backend modules,
#      include/diffrt/, the CMake package, diffrt.pc);
#   2. libdiffrt.so exports drt_* symbols only;
#   3. neither bin/diffrt nor libdiffrt.so needs a vendor library (ldd);
#   4. an outside program builds against the prefix through find_package and
#      through pkg-config, and generates on a bundled model the same text as
#      the installed `diffrt run`;
#   5. with --hide-cuda (root: a private mount namespace with the CUDA
#      toolkit's library directory emptied) the installed diffrt still starts,
#      reports cuda unavailable with the loader's reason, and runs on cpu;
#   6. with --subproject, a project that add_subdirectory()s this checkout
#      builds and runs the same program.
# Any failure prints one line naming the check and exits 1.
#
# usage: tests/install/check.sh BUILD_DIR [--hide-cuda] [--subproject]
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
[ $# -ge 1 ] || { usage >&2; exit 2; }
case "$1" in -h|--help) usage; exit 0 ;; esac
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "$1" && pwd)
shift
HIDE_CUDA=0
SUBPROJECT=0
for a in "$@"; do
  case "$a" in
    --hide-cuda) HIDE_CUDA=1 ;;
    --subproject) SUBPROJECT=1 ;;
    *) echo "check.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/diffrt-install.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
P=$WORK/prefix
fail() { echo "FAIL install: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }

MODEL=$SRC/models/diff-v1-tiny
PROMPT="The magic number of Oslo is 4417. The weather was calm and the market was busy. What is the magic number of Oslo? The magic number of Oslo is"
N=8

# ---- 1. install ------------------------------------------------------------
cmake --install "$BUILD" --prefix "$P" >"$WORK/install.log" 2>&1 || { cat "$WORK/install.log"; fail "cmake --install $BUILD failed"; }
LIBDIR=$(cd "$P" && dirname "$(find lib* -name 'libdiffrt.so' | head -1)")
[ -n "$LIBDIR" ] || fail "no libdiffrt.so under $P/lib*"
for f in bin/diffrt "$LIBDIR/libdiffrt.so" include/diffrt/diffrt.h include/diffrt/tokenizer.h \
         "$LIBDIR/cmake/diffrt/diffrtConfig.cmake" "$LIBDIR/cmake/diffrt/diffrtConfigVersion.cmake" \
         "$LIBDIR/pkgconfig/diffrt.pc"; do
  [ -e "$P/$f" ] || fail "$f not installed"
done
SONAME=$(readelf -d "$P/$LIBDIR/libdiffrt.so" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$SONAME" ] && [ -e "$P/$LIBDIR/$SONAME" ] || fail "libdiffrt.so has no SONAME, or $SONAME is not installed"
[ "$(readlink -f "$P/$LIBDIR/libdiffrt.so")" != "$P/$LIBDIR/libdiffrt.so" ] || fail "libdiffrt.so is not a link to the versioned file"
# every module the build made is installed
for m in "$BUILD"/libdiffrt-*.so; do
  [ -e "$m" ] || continue
  [ -e "$P/$LIBDIR/$(basename "$m")" ] || fail "module $(basename "$m") built but not installed"
done
ok "install: bin/diffrt, $LIBDIR/$SONAME, $(cd "$P/$LIBDIR" && ls libdiffrt-*.so 2>/dev/null | tr '\n' ' ')include/diffrt, cmake package, diffrt.pc"

# ---- 2. exported symbols ---------------------------------------------------
bad=$(nm -D --defined-only "$P/$LIBDIR/libdiffrt.so" | awk '$2 ~ /[TDBRVW]/ {print $3}' | grep -v '^drt_' || true)
[ -z "$bad" ] || fail "libdiffrt.so exports symbols without the drt_ prefix: $(echo $bad | head -c 300)"
ok "libdiffrt.so exports $(nm -D --defined-only "$P/$LIBDIR/libdiffrt.so" | awk '$2 ~ /[TDBRVW]/' | wc -l) symbols, all drt_*"

# ---- 3. no vendor library on the core or the CLI ---------------------------
VENDOR='libcuda|libcudart|libcublas|libOpenCL|libvulkan|libclblast|libnvrtc'
for f in "$P/bin/diffrt" "$P/$LIBDIR/libdiffrt.so"; do
  if ldd "$f" | grep -E "$VENDOR"; then fail "$f links a vendor library (above)"; fi
done
ok "ldd: no vendor library in bin/diffrt or libdiffrt.so"

# the installed CLI finds its library and modules through its own RUNPATH
"$P/bin/diffrt" --version >"$WORK/version.txt" 2>&1 || { cat "$WORK/version.txt"; fail "installed diffrt --version failed"; }
for m in "$P/$LIBDIR"/libdiffrt-*.so; do
  [ -e "$m" ] || continue
  name=$(basename "$m" .so); name=${name#libdiffrt-}
  grep -E "^  $name +module $P/$LIBDIR/libdiffrt-$name.so" "$WORK/version.txt" >/dev/null ||
    grep -E "^  $name +compiled, module not loaded; unavailable: .*libdiffrt-$name.so" "$WORK/version.txt" >/dev/null ||
    { cat "$WORK/version.txt"; fail "installed diffrt --version does not show the installed $name module"; }
done
ok "installed diffrt --version lists the installed modules"

# the reference text: the installed CLI
(cd "$WORK" && "$P/bin/diffrt" run --model "$MODEL" --prompt "$PROMPT" -n $N >"$WORK/cli.txt" 2>"$WORK/cli.err") ||
  { cat "$WORK/cli.err"; fail "installed diffrt run failed"; }
[ -s "$WORK/cli.txt" ] || fail "installed diffrt run printed nothing"

# ---- 4. outside consumers ----------------------------------------------------
cmake -S "$SRC/tests/install/consumer" -B "$WORK/c-cmake" -DCMAKE_PREFIX_PATH="$P" \
  -DCMAKE_BUILD_TYPE=Release >"$WORK/c-cmake.log" 2>&1 &&
  cmake --build "$WORK/c-cmake" >>"$WORK/c-cmake.log" 2>&1 || { cat "$WORK/c-cmake.log"; fail "find_package(diffrt) consumer does not build"; }
"$WORK/c-cmake/consumer" "$MODEL" "$PROMPT" $N >"$WORK/c-cmake.txt" 2>"$WORK/c-cmake.err" ||
  { cat "$WORK/c-cmake.err"; fail "find_package consumer failed to run"; }
cmp -s "$WORK/cli.txt" "$WORK/c-cmake.txt" ||
  fail "find_package consumer printed \"$(cat "$WORK/c-cmake.txt")\", diffrt run printed \"$(cat "$WORK/cli.txt")\""
ok "find_package(diffrt) consumer builds and prints what diffrt run prints: \"$(tr -d '\n' <"$WORK/cli.txt")\""

export PKG_CONFIG_PATH="$P/$LIBDIR/pkgconfig"
pkg-config --exists diffrt || fail "pkg-config does not find diffrt.pc in $PKG_CONFIG_PATH"
# shellcheck disable=SC2046
cc -std=c11 -O2 -o "$WORK/c-pc" "$SRC/tests/install/consumer/main.c" $(pkg-config --cflags --libs diffrt) \
  -Wl,-rpath,"$P/$LIBDIR" 2>"$WORK/c-pc.log" || { cat "$WORK/c-pc.log"; fail "pkg-config consumer does not build"; }
"$WORK/c-pc" "$MODEL" "$PROMPT" $N >"$WORK/c-pc.txt" 2>"$WORK/c-pc.err" || { cat "$WORK/c-pc.err"; fail "pkg-config consumer failed to run"; }
cmp -s "$WORK/cli.txt" "$WORK/c-pc.txt" || fail "pkg-config consumer printed \"$(cat "$WORK/c-pc.txt")\""
ok "pkg-config consumer ($(pkg-config --libs diffrt)) builds and prints the same text"
if ldd "$WORK/c-pc" | grep -E "$VENDOR"; then fail "the consumer links a vendor library (above)"; fi

# ---- 5. the same install with the CUDA libraries absent --------------------
if [ $HIDE_CUDA = 1 ]; then
  [ -e "$P/$LIBDIR/libdiffrt-cuda.so" ] || fail "--hide-cuda: this build has no CUDA module to check"
  # the directories the CUDA module's vendor libraries resolve from now
  dirs=$(ldd "$P/$LIBDIR/libdiffrt-cuda.so" | awk '/libcudart|libcublas/ {print $3}' | xargs -r -n1 readlink -f | xargs -r -n1 dirname | sort -u)
  [ -n "$dirs" ] || fail "--hide-cuda: ldd finds no libcudart/libcublas for libdiffrt-cuda.so (already absent?)"
  command -v unshare >/dev/null || fail "--hide-cuda needs unshare (util-linux)"
  mounts=""
  for d in $dirs; do mounts="$mounts mount -t tmpfs none '$d' &&"; done
  unshare --mount --propagation private sh -c "$mounts \
      '$P/bin/diffrt' --version >'$WORK/nocuda-version.txt' 2>&1 && \
      cd '$WORK' && '$P/bin/diffrt' run --model '$MODEL' --prompt '$PROMPT' -n $N >'$WORK/nocuda.txt' 2>'$WORK/nocuda.err'" ||
    { cat "$WORK/nocuda-version.txt" "$WORK/nocuda.err" 2>/dev/null; fail "with the CUDA libraries hidden ($dirs) diffrt did not start or run"; }
  grep -E "^  cuda +compiled, module not loaded; unavailable: .*(libcudart|libcublas).*(No such file|cannot open)" \
    "$WORK/nocuda-version.txt" >/dev/null ||
    { cat "$WORK/nocuda-version.txt"; fail "with the CUDA libraries hidden, --version does not say why cuda is unavailable"; }
  cmp -s "$WORK/cli.txt" "$WORK/nocuda.txt" || fail "with the CUDA libraries hidden, run printed \"$(cat "$WORK/nocuda.txt")\""
  ok "CUDA libraries hidden ($(echo $dirs)): diffrt starts, runs on cpu, and says: $(grep '^  cuda' "$WORK/nocuda-version.txt" | sed 's/^ *//' | head -c 200)"
fi

# ---- 6. as a subproject ----------------------------------------------------
if [ $SUBPROJECT = 1 ]; then
  cmake -S "$SRC/tests/install/subproject" -B "$WORK/sub" -DDIFFRT_SOURCE_DIR="$SRC" \
    -DCMAKE_BUILD_TYPE=Release -DDIFFRT_OPENCL=OFF -DDIFFRT_VULKAN=OFF -DDIFFRT_CUDA=OFF >"$WORK/sub.log" 2>&1 &&
    cmake --build "$WORK/sub" -j "${JOBS:-$(nproc)}" >>"$WORK/sub.log" 2>&1 || { tail -30 "$WORK/sub.log"; fail "add_subdirectory(diffrt) project does not build"; }
  [ ! -e "$WORK/sub/diffrt/tests" ] || fail "the subproject build built diffrt's tests (BUILD_TESTING should be off there)"
  "$WORK/sub/consumer" "$MODEL" "$PROMPT" $N >"$WORK/sub.txt" 2>"$WORK/sub.err" || { cat "$WORK/sub.err"; fail "subproject consumer failed to run"; }
  cmp -s "$WORK/cli.txt" "$WORK/sub.txt" || fail "subproject consumer printed \"$(cat "$WORK/sub.txt")\""
  ok "add_subdirectory(diffrt) project builds (tests off) and prints the same text"
fi
echo "install checks passed"
