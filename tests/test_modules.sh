#!/usr/bin/env bash
# ctest test_modules: how the core finds and vets backend modules
# (runtime/drt_module.h). The CLI is run against a copy of libdiffrt.so in a
# scratch directory (LD_LIBRARY_PATH is searched before the CLI's RUNPATH),
# so the core's own directory holds no module and DIFFRT_BACKEND_PATH decides.
#
# usage: test_modules.sh CLI BUILD_DIR MODEL_DIR SCRATCH
set -uo pipefail
CLI=$1 BUILD=$2 MODEL=$3 SCRATCH=$4
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok   $*"; }

rm -rf "$SCRATCH" && mkdir -p "$SCRATCH/core" "$SCRATCH/junk" "$SCRATCH/wrong" "$SCRATCH/empty" || exit 1
soname=$(readelf -d "$BUILD/libdiffrt.so" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ -n "$soname" ] || { echo "FAIL: $BUILD/libdiffrt.so missing or without SONAME (static build?)"; exit 1; }
cp -L "$BUILD/$soname" "$SCRATCH/core/$soname"
modules=()
for m in "$BUILD"/libdiffrt-*.so; do
  [ -e "$m" ] && { n=$(basename "$m" .so); modules+=("${n#libdiffrt-}"); }
done
echo "modules in this build: ${modules[*]:-none}"

run() { LD_LIBRARY_PATH="$SCRATCH/core" "$@"; }
# (the checks grep to /dev/null, not with -q: under pipefail, grep -q leaving
# early can kill the writer with SIGPIPE and fail a check that matched)

# 1. the build tree: every module next to the core, loaded from there
out=$("$CLI" --version 2>&1)
for n in "${modules[@]}"; do
  real=$(readlink -f "$BUILD/libdiffrt-$n.so")
  echo "$out" | grep >/dev/null -E "^  $n +module $real;" && pass "$n loaded from the build directory" ||
    fail "$n: --version does not show module $real: $(echo "$out" | grep "^  $n")"
done
echo "$out" | grep >/dev/null -E "^  cpu +built in; available" || fail "cpu not built in: $out"

# 2. the core alone: each built module is reported missing, with the places searched
out=$(DIFFRT_BACKEND_PATH= run "$CLI" --version 2>&1)
echo "$out" | grep >/dev/null "module $SCRATCH/core" && fail "a module was found next to the copied core"
for n in "${modules[@]}"; do
  echo "$out" | grep >/dev/null -E "^  $n +compiled, module not loaded; unavailable: module libdiffrt-$n.so not found \(searched $SCRATCH/core" &&
    pass "$n missing: says not found and where it looked" || fail "$n missing: $(echo "$out" | grep "^  $n")"
done
# ... and diffrt still runs on the CPU
t=$(DIFFRT_BACKEND_PATH= run "$CLI" run --model "$MODEL" --tokens 1,2,3 -n 2 2>/dev/null) &&
  pass "run on cpu without any module: $t" || fail "run on cpu failed without modules"
if [ ${#modules[@]} -gt 0 ]; then
  n=${modules[0]}
  msg=$(DIFFRT_BACKEND_PATH= run "$CLI" run --model "$MODEL" --tokens 1,2,3 -n 2 --backend "$n" 2>&1 >/dev/null)
  rc=$?
  [ $rc -ne 0 ] && echo "$msg" | grep >/dev/null "backend $n unavailable: module libdiffrt-$n.so not found" &&
    pass "--backend $n without its module: one-line error (rc $rc)" || fail "--backend $n without module: rc $rc: $msg"
fi

# 3. DIFFRT_BACKEND_PATH: directories in order, the first that has the file wins
out=$(DIFFRT_BACKEND_PATH="$SCRATCH/empty:$BUILD" run "$CLI" --version 2>&1)
for n in "${modules[@]}"; do
  echo "$out" | grep >/dev/null -E "^  $n +module $(readlink -f "$BUILD")/libdiffrt-$n.so;" &&
    pass "$n found through DIFFRT_BACKEND_PATH" || fail "$n through DIFFRT_BACKEND_PATH: $(echo "$out" | grep "^  $n")"
done

# 4. files that are not modules: unavailable with the reason, nothing else breaks
printf 'not an ELF file\n' >"$SCRATCH/junk/libdiffrt-vulkan.so"
cp -L "$BUILD/$soname" "$SCRATCH/wrong/libdiffrt-opencl.so" # a real library without the entry point
out=$(DIFFRT_BACKEND_PATH="$SCRATCH/junk:$SCRATCH/wrong" run "$CLI" --version 2>&1)
rc=$?
[ $rc -eq 0 ] || fail "--version exits $rc with bad module files"
echo "$out" | grep >/dev/null -E "^  vulkan +.*(unavailable: )?.*libdiffrt-vulkan.so: (invalid ELF header|file too short)" &&
  pass "a junk libdiffrt-vulkan.so: unavailable, the loader's reason" || fail "junk module: $(echo "$out" | grep '^  vulkan')"
echo "$out" | grep >/dev/null -E "^  opencl +.*(unavailable: )?.*libdiffrt-opencl.so: no drt_backend_module_v1 entry point" &&
  pass "a library without the entry point: unavailable, says so" || fail "no-entry module: $(echo "$out" | grep '^  opencl')"
t=$(DIFFRT_BACKEND_PATH="$SCRATCH/junk:$SCRATCH/wrong" run "$CLI" run --model "$MODEL" --tokens 1,2,3 -n 2 2>/dev/null) &&
  pass "run on cpu with bad module files around" || fail "run on cpu failed with bad module files around"

rm -rf "$SCRATCH"
[ $fails -eq 0 ] && echo "test_modules: all passed" || echo "test_modules: $fails failed"
[ $fails -eq 0 ]
