#!/usr/bin/env bash
# The README's test command: set up, build with warnings as errors (every
# backend on AUTO), run the ctest suite without the tests labelled slow
# (every op, backend and model is still checked: tests/README.md).
#   --all       the whole suite, label slow too (what CI runs)
#   BUILD_DIR   build folder (default build)
#   CMAKE_ARGS  extra configure arguments (e.g. -DDIFFRT_SANITIZE=ON)
#   CTEST_ARGS  extra ctest arguments (default -LE slow; --all: none)
set -euo pipefail
cd "$(dirname "$0")/.."
case "${1:-}" in
  --all) CTEST_ARGS=${CTEST_ARGS:-} ;;
  "") CTEST_ARGS=${CTEST_ARGS:--LE slow} ;;
  -h | --help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "test.sh: unknown argument \"$1\" (valid: --all)" >&2; exit 2 ;;
esac
bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
# Ninja where it is installed (setup.sh installs it): one build graph for
# the whole tree, so every core stays busy to the end (a fresh build on 2
# cores: 2 min 16 s). A build folder configured before keeps its generator
# (cmake refuses a second one there).
GEN=()
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ] && command -v ninja >/dev/null; then GEN=(-G Ninja); fi
# shellcheck disable=SC2086
cmake -B "$BUILD_DIR" "${GEN[@]}" -DDIFFRT_WERROR=ON ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
# shellcheck disable=SC2086
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" ${CTEST_ARGS:-}
