#!/usr/bin/env bash
# The README's test command: set up, build with warnings as errors (every
# backend on AUTO), run the whole ctest suite.
#   BUILD_DIR   build folder (default build)
#   CMAKE_ARGS  extra configure arguments (e.g. -DDIFFRT_SANITIZE=ON)
#   CTEST_ARGS  extra ctest arguments (e.g. -LE niah_models)
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
BUILD_DIR=${BUILD_DIR:-build}
# shellcheck disable=SC2086
cmake -B "$BUILD_DIR" -DDIFFRT_WERROR=ON ${CMAKE_ARGS:-}
cmake --build "$BUILD_DIR" -j"$(nproc)"
# shellcheck disable=SC2086
ctest --test-dir "$BUILD_DIR" --output-on-failure -j"$(nproc)" ${CTEST_ARGS:-}
