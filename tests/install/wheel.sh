#!/usr/bin/env bash
# Checks the Python package as pip installs it (pyproject.toml,
# scikit-build-core; cmake/wheel.cmake):
#   1. in a fresh venv (python3 -m venv: pip only, not the system's
#      packages) the README's Python install command, run as written from
#      the checkout: pip builds libdiffrt.so, the backend modules and the CLI
#      and puts them inside the package, numpy with it;
#   2. the package's test suite (python/tests/test_diffrt.py) against the
#      installed package, from a directory where the checkout's python/ is
#      not importable, no DIFFRT_* variable set (DIFFRT_TEST_INSTALLED=1:
#      diffrt.__file__ inside the venv, the library, modules and CLI inside
#      the package, python -m diffrt run answers " 6019.");
#   3. the README's Python example, run as written from the checkout: it
#      prints " 6019.";
#   4. with --hide-vendor (root: a private mount namespace where an overlay
#      hides the vendor library of the first module built, e.g.
#      libOpenCL.so.1): diffrt.backends() and python -m diffrt --version say
#      that backend is unavailable and why, and the example still runs on cpu;
#   5. pip uninstall -y diffrt leaves no diffrt file in the venv;
#   6. with --dists, python -m build makes an sdist and a wheel (the wheel
#      built from the sdist), and the wheel installs into another fresh venv
#      with no compiler, CMake or index reachable (PATH holds the venv only;
#      --no-index --no-build-isolation), then runs the example.
# The build options are CMAKE_ARGS (default: OpenCL on, Vulkan and CUDA off:
# one module, the quickest to build, that PoCL runs in CI). Build jobs:
# JOBS (default nproc). Any failure prints one line naming the check and
# exits 1.
#
# usage: tests/install/wheel.sh [--hide-vendor] [--dists]
set -euo pipefail
usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }
SRC=$(cd "$(dirname "$0")/../.." && pwd)
HIDE=0
DISTS=0
for a in "$@"; do
  case "$a" in
    --hide-vendor) HIDE=1 ;;
    --dists) DISTS=1 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "wheel.sh: unknown argument $a" >&2; exit 2 ;;
  esac
done
WORK=$(mktemp -d "${TMPDIR:-/tmp}/diffrt-wheel.XXXXXX")
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL wheel: $*" >&2; exit 1; }
ok() { echo "ok   $*"; }
export CMAKE_ARGS=${CMAKE_ARGS:--DDIFFRT_OPENCL=ON -DDIFFRT_VULKAN=OFF -DDIFFRT_CUDA=OFF}
export CMAKE_BUILD_PARALLEL_LEVEL=${JOBS:-$(nproc)}
# what the installed package must find by itself
unset DIFFRT_LIBRARY DIFFRT_CLI DIFFRT_BACKEND_PATH PYTHONPATH
PY=${PYTHON:-python3}

# The README's Python section: its first sh block (the install command) and
# its first python block (the example)
section=$(awk '/^## /{p = ($0 ~ /^## Using diffrt from Python/)} p' "$SRC/README.md")
[ -n "$section" ] || fail "README.md has no '## Using diffrt from Python' section"
INSTALL_CMD=$(printf '%s\n' "$section" | awk '/^```sh$/{f=1; next} /^```/{if (f) exit} f')
EXAMPLE=$(printf '%s\n' "$section" | awk '/^```python$/{f=1; next} /^```/{if (f) exit} f')
printf '%s\n' "$EXAMPLE" >"$WORK/example.py"
case "$INSTALL_CMD" in
  "pip install ."*) ;;
  *) fail "the README's Python section does not start with pip install . (it has: $INSTALL_CMD)" ;;
esac
[ -n "$EXAMPLE" ] || fail "the README's Python section has no python example"

# ---- 1. pip install of the checkout in a fresh venv ------------------------
V=$WORK/venv
"$PY" -m venv "$V" || fail "$PY -m venv failed"
"$V/bin/python" -c "import numpy" 2>/dev/null && fail "the fresh venv already imports numpy"
SITE=$("$V/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['platlib'])")
before=$(git -C "$SRC" status --porcelain --untracked-files=all 2>/dev/null || true)
t0=$(date +%s)
(cd "$SRC" && PATH="$V/bin:$PATH" bash -c "$INSTALL_CMD") >"$WORK/install.log" 2>&1 ||
  { tail -40 "$WORK/install.log"; fail "$INSTALL_CMD (CMAKE_ARGS=$CMAKE_ARGS) failed in a fresh venv"; }
t1=$(date +%s)
for f in diffrt/__init__.py diffrt/__main__.py diffrt/lib/libdiffrt.so diffrt/bin/diffrt; do
  [ -e "$SITE/$f" ] || fail "$f is not in the venv's site-packages after pip install"
done
after=$(git -C "$SRC" status --porcelain --untracked-files=all 2>/dev/null || true)
[ "$before" = "$after" ] || fail "pip install changed the checkout: $(diff <(echo "$before") <(echo "$after") | head -5)"
MODULES=$(cd "$SITE/diffrt/lib" && ls libdiffrt-*.so 2>/dev/null | tr '\n' ' ')
ok "pip install . in a fresh venv ($((t1 - t0)) s, CMAKE_ARGS=$CMAKE_ARGS): diffrt/lib/libdiffrt.so, ${MODULES}diffrt/bin/diffrt, numpy $("$V/bin/python" -c 'import numpy; print(numpy.__version__)')"

# ---- 2. the package's tests against the installed package ------------------
mkdir -p "$WORK/run"
(cd "$WORK/run" && DIFFRT_TEST_INSTALLED=1 "$V/bin/python" "$SRC/python/tests/test_diffrt.py" >"$WORK/tests.log" 2>&1) ||
  { tail -40 "$WORK/tests.log"; fail "python/tests/test_diffrt.py against the installed package"; }
where=$(cd "$WORK/run" && "$V/bin/python" -c "import diffrt; print(diffrt.__file__)")
case "$where" in "$V"/*) ;; *) fail "import diffrt from $WORK/run gives $where, not the venv's" ;; esac
ok "python/tests/test_diffrt.py against the installed package ($(grep -E '^Ran ' "$WORK/tests.log")): diffrt from $where"

# ---- 3. the README's Python example, as written -----------------------------
(cd "$SRC" && "$V/bin/python" -c "$EXAMPLE" >"$WORK/example.txt" 2>"$WORK/example.err") ||
  { cat "$WORK/example.err"; fail "the README's Python example failed"; }
[ "$(cat "$WORK/example.txt")" = " 6019." ] || fail "the README's Python example printed \"$(cat "$WORK/example.txt")\", not \" 6019.\""
ok "the README's Python example prints \" 6019.\""

# ---- 4. a backend's vendor library missing ---------------------------------
if [ $HIDE = 1 ]; then
  first=$(cd "$SITE/diffrt/lib" && ls libdiffrt-*.so 2>/dev/null | head -1)
  [ -n "$first" ] || fail "--hide-vendor: the wheel has no backend module (CMAKE_ARGS=$CMAKE_ARGS)"
  name=${first#libdiffrt-}; name=${name%.so}
  vendor=$(ldd "$SITE/diffrt/lib/$first" | awk '$1 !~ /^(libdiffrt|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|linux-vdso|ld-linux)[.-]/ && $3 ~ /^\// {print $3; exit}')
  [ -n "$vendor" ] || fail "--hide-vendor: ldd finds no vendor library for $first"
  [ "$(id -u)" = 0 ] && command -v unshare >/dev/null || fail "--hide-vendor needs root and unshare (util-linux)"
  dir=$(dirname "$vendor")
  lib=$(basename "$vendor")
  cat >"$WORK/backend.py" <<'EOF'
import sys

import diffrt

b = {b.name: b for b in diffrt.backends()}[sys.argv[1]]
print(b.available, b.compiled_in, b.reason)
EOF
  # an overlay on the library's directory whose upper layer holds a whiteout
  # (character device 0/0) for it: the file is gone, nothing else is
  unshare --mount --propagation private sh -c "mount -t tmpfs none '$WORK/run' && mkdir '$WORK/run/u' '$WORK/run/w' && \
      mknod '$WORK/run/u/$lib' c 0 0 && \
      mount -t overlay overlay -o 'lowerdir=$dir,upperdir=$WORK/run/u,workdir=$WORK/run/w' '$dir' && \
      [ ! -e '$vendor' ] && cd '$SRC' && \
      '$V/bin/python' '$WORK/backend.py' '$name' && '$V/bin/python' -m diffrt --version && \
      '$V/bin/python' '$WORK/example.py'" \
      >"$WORK/hidden.txt" 2>&1 || { cat "$WORK/hidden.txt"; fail "with $vendor hidden the package did not start or run"; }
  grep -E "^False True .*$lib.*(No such file|cannot open)" "$WORK/hidden.txt" >/dev/null ||
    { cat "$WORK/hidden.txt"; fail "with $vendor hidden, diffrt.backends() does not say why $name is unavailable"; }
  grep -E "^  $name +compiled, module not loaded; unavailable: .*$lib" "$WORK/hidden.txt" >/dev/null ||
    { cat "$WORK/hidden.txt"; fail "with $vendor hidden, python -m diffrt --version does not say why $name is unavailable"; }
  [ "$(tail -1 "$WORK/hidden.txt")" = " 6019." ] || { cat "$WORK/hidden.txt"; fail "with $vendor hidden, the example did not print \" 6019.\""; }
  ok "$lib hidden: $name unavailable in diffrt.backends() and python -m diffrt --version ($(grep '^False' "$WORK/hidden.txt" | cut -d' ' -f3- | head -c 120)), the example runs"
fi

# ---- 5. uninstall ------------------------------------------------------------
"$V/bin/pip" uninstall -y diffrt >"$WORK/uninstall.log" 2>&1 || { cat "$WORK/uninstall.log"; fail "pip uninstall -y diffrt failed"; }
left=$(find "$V" -iname '*diffrt*' | head -5)
[ -z "$left" ] || fail "pip uninstall -y diffrt left: $left"
ok "pip uninstall -y diffrt leaves no diffrt file in the venv"

# ---- 6. sdist and wheel (python -m build), the wheel installed with no compiler
if [ $DISTS = 1 ]; then
  B=$WORK/build-venv
  "$PY" -m venv "$B" && "$B/bin/pip" install -q build >"$WORK/build-tools.log" 2>&1 ||
    { cat "$WORK/build-tools.log"; fail "pip install build failed"; }
  t0=$(date +%s)
  "$B/bin/python" -m build --outdir "$WORK/dist" "$SRC" >"$WORK/dists.log" 2>&1 ||
    { tail -40 "$WORK/dists.log"; fail "python -m build (sdist, then the wheel from it) failed"; }
  t1=$(date +%s)
  sdist=$(ls "$WORK"/dist/diffrt-*.tar.gz)
  wheel=$(ls "$WORK"/dist/diffrt-*.whl)
  ok "python -m build ($((t1 - t0)) s): $(basename "$sdist") ($(du -k "$sdist" | cut -f1) KiB), $(basename "$wheel") ($(du -k "$wheel" | cut -f1) KiB)"
  W=$WORK/wheel-venv
  "$PY" -m venv "$W" && "$W/bin/pip" install -q numpy >"$WORK/numpy.log" 2>&1 || { cat "$WORK/numpy.log"; fail "pip install numpy failed"; }
  # no compiler, no CMake, no index: the venv's own bin only
  env -u CC -u CMAKE_ARGS PATH="$W/bin" "$W/bin/pip" install --no-index --no-build-isolation "$wheel" >"$WORK/wheel-install.log" 2>&1 ||
    { cat "$WORK/wheel-install.log"; fail "the wheel does not install with no compiler and no index"; }
  ! grep -qiE "building wheel|running cmake" "$WORK/wheel-install.log" || fail "installing the wheel built something"
  (cd "$SRC" && "$W/bin/python" "$WORK/example.py" >"$WORK/wheel-example.txt" 2>&1) && [ "$(cat "$WORK/wheel-example.txt")" = " 6019." ] ||
    { cat "$WORK/wheel-example.txt"; fail "the README's example from the wheel's install"; }
  ok "the wheel installs into a fresh venv with no compiler or index (PATH=venv/bin, --no-index) and the example prints \" 6019.\""
fi
echo "wheel checks passed"
