#!/usr/bin/env bash
# The DIFF paper's quantization claims, measured on the bundled models:
#   1. Table 5: activation statistics (diffrt analyze): top-1, top-10 and
#      median |value| of the attention logits and of the hidden states over
#      the 200 NIAH prompts, on the reference backend;
#   2. Fig. 8: NIAH accuracy (200 prompts, N=1, R=1, seed 0) with the
#      attention logits quantized to 16/8/6/4 bits before the softmax
#      (diffrt niah --backend ref --attn-bits B: symmetric, per-row absmax).
# usage: scripts/paper_table.sh [BUILD_DIR] [SAMPLES per depth, default 40]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
K=${2:-40}
D="$B/diffrt"
[ -x "$D" ] || { echo "no $D: build first" >&2; exit 1; }
echo "## Activation statistics (Table 5): \`diffrt analyze --model DIR --samples $K\`"
echo
echo "| model | activation | top-1 abs | top-10 abs | median abs |"
echo "|---|---|---|---|---|"
for mdir in models/*/; do
  m=$(basename "$mdir")
  [ -f "$mdir/niah_python.json" ] || continue
  "$D" analyze --model "$mdir" --samples "$K" 2>/dev/null | awk -v m="$m" '
    /^attention logits|^  map|^hidden states/ {
      n = NF; name = $1; for (i = 2; i <= n - 4; i++) name = name " " $i;
      printf "| %s | %s | %s | %s | %s |\n", m, name, $(n-3), $(n-2), $(n-1) }'
done
echo
echo "## NIAH accuracy with low-bit attention logits (Fig. 8): \`diffrt niah --model DIR --backend ref --attn-bits B --samples $K\`"
echo
echo "| model | f64 (none) | 16 bits | 8 bits | 6 bits | 4 bits | 3 bits | 2 bits |"
echo "|---|---|---|---|---|---|---|---|"
for mdir in models/*/; do
  m=$(basename "$mdir")
  [ -f "$mdir/niah_python.json" ] || continue
  row="| $m"
  for bits in none 16 8 6 4 3 2; do
    args=()
    [ "$bits" = none ] || args=(--attn-bits "$bits")
    acc=$("$D" niah --model "$mdir" --backend ref --samples "$K" "${args[@]}" 2>/dev/null | sed -n 's/^overall *\([0-9.]*\).*/\1/p')
    row="$row | $acc"
  done
  echo "$row |"
done
