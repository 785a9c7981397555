#!/usr/bin/env bash
# Every C, CUDA and C++ source the repository tracks is as clang-format 14
# writes it with the project's .clang-format (CI runs this; CONTRIBUTING.md).
#   bash scripts/check_format.sh          check: the files that differ, exit 1
#   bash scripts/check_format.sh --fix    format them in place
# Installs clang-format-14 with apt-get when it is missing (root or sudo).
set -euo pipefail
cd "$(dirname "$0")/.."
FMT=$(command -v clang-format-14 || true)
if [ -z "$FMT" ] && command -v apt-get >/dev/null; then
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO=sudo
  echo "check_format.sh: installing clang-format-14"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends clang-format-14
  FMT=$(command -v clang-format-14 || true)
fi
[ -n "$FMT" ] || { echo "check_format.sh: clang-format-14 not found" >&2; exit 1; }
mapfile -t files < <(git ls-files '*.c' '*.h' '*.cu' '*.cuh' '*.cc')
if [ "${1:-}" = "--fix" ]; then
  "$FMT" -i --style=file "${files[@]}"
  exit 0
fi
bad=0
for f in "${files[@]}"; do
  if ! "$FMT" --style=file "$f" | cmp -s "$f" -; then
    echo "check_format.sh: $f is not as clang-format writes it (bash scripts/check_format.sh --fix)" >&2
    bad=1
  fi
done
[ $bad -eq 0 ] && echo "check_format.sh: ${#files[@]} files formatted"
exit $bad
