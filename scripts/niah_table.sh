#!/usr/bin/env bash
# The NIAH results table of docs/results.md: every bundled model (models/*/) on every
# backend given, measured by `diffrt niah` (N=1, R=1, the model's training
# context, 40 samples x depths 0,25,50,75,100, seed 0, --attention) beside
# the PyTorch run of the same prompts (models/*/niah_python.json).
#   bash scripts/niah_table.sh [BUILD_DIR] [BACKENDS] [MODEL_DIR...]
#   (defaults: build, cpu,opencl,vulkan, every models/*/ with a niah_python.json)
# Prints a markdown table on stdout; the full diffrt output of each run goes
# to BUILD_DIR/niah_table/MODEL_BACKEND.txt.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${1:-build}
BACKENDS=${2:-cpu,opencl,vulkan}
shift $(($# < 2 ? $# : 2))
MODELS=("$@")
[ ${#MODELS[@]} -gt 0 ] || MODELS=(models/*/)
DIFFRT=$BUILD_DIR/diffrt
[ -x "$DIFFRT" ] || { echo "niah_table: $DIFFRT not built" >&2; exit 2; }
mkdir -p "$BUILD_DIR/niah_table"

field() { # summary field of a niah_python.json (indent-1 JSON: summary keys sit at 2 spaces)
  grep -m1 "^  \"$2\":" "$1" | sed -E 's/.*: *([-0-9.eE+]+),?/\1/'
}

echo "| model | backend | diffrt accuracy | PyTorch accuracy | per-sample agreement | attention to answer | attention to noise |"
echo "|---|---|---|---|---|---|---|"
for dir in "${MODELS[@]}"; do
  dir=${dir%/}
  ref=$dir/niah_python.json
  [ -f "$ref" ] || { echo "niah_table: $ref missing (python3 python/niah/eval.py --model $dir --attention)" >&2; exit 2; }
  name=$(basename "$dir")
  py_acc=$(field "$ref" accuracy)
  IFS=, read -ra bes <<< "$BACKENDS"
  for be in "${bes[@]}"; do
    out=$BUILD_DIR/niah_table/${name}_$be.txt
    echo "niah_table: $name on $be ..." >&2
    rc=0
    "$DIFFRT" niah --model "$dir" --backend "$be" --attention --compare "$ref" --no-fallback \
      > "$out" 2> "$out.log" || rc=$?
    if [ "$rc" -gt 1 ]; then
      echo "niah_table: $name on $be failed (exit $rc):" >&2
      tail -3 "$out.log" >&2
      exit 1
    fi
    acc=$(awk '$1 == "overall" {print $2, $3}' "$out")
    agree=$(sed -nE 's/.*answers ([0-9]+\/[0-9]+).*/\1/p' "$out")
    read -r att_a att_n < <(awk '$1 == "all" {print $2, $3}' "$out")
    printf '| %s | %s | %s | %.3f | %s | %s | %s |\n' "$name" "$be" "$acc" "$py_acc" "$agree" "$att_a" "$att_n"
  done
done
