#!/usr/bin/env bash
# The quality of q8_0 and q4_0 against the stored f16 weights, on the bundled
# models: each is quantized (diffrt quantize), then `diffrt niah` runs the 200
# single-needle prompts (seed 0, the training context) through the quantized
# model and, with --logits-vs, through the f16 model too; the table gives the
# quantized model's NIAH accuracy, the NMSE of the prompts' last-token logits
# against f16's, and how often their top-1 token agrees.
# usage: scripts/quant_table.sh [BUILD_DIR] [BACKEND]   (defaults: build, cpu)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
BE=${2:-cpu}
D="$B/diffrt"
[ -x "$D" ] || { echo "no $D: build first" >&2; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
echo "| model | weights | size (MiB) | NIAH accuracy | logits NMSE vs f16 (mean / max) | top-1 agreement vs f16 |"
echo "|---|---|---|---|---|---|"
for mdir in models/*/; do
  m=$(basename "$mdir")
  [ -f "$mdir/niah_python.json" ] || continue
  acc=$("$D" niah --model "$mdir" --backend "$BE" 2>/dev/null | sed -n 's/^overall *//p')
  echo "| $m | f16 (stored) | $(awk "BEGIN{printf \"%.2f\", $(stat -c %s "$mdir/model.safetensors")/1048576}") | $acc | - | - |"
  for t in q8_0 q4_0; do
    "$D" quantize --model "$mdir" --type $t --out "$TMP/$m-$t" 2>/dev/null
    out=$("$D" niah --model "$TMP/$m-$t" --backend "$BE" --logits-vs "$mdir" 2>/dev/null)
    acc=$(echo "$out" | sed -n 's/^overall *//p')
    nm=$(echo "$out" | sed -n 's/.*NMSE mean \([^,]*\), max \([^;]*\);.*/\1 \/ \2/p')
    t1=$(echo "$out" | sed -n 's/.*top-1 agreement \(.*\)$/\1/p')
    mib=$(awk "BEGIN{printf \"%.2f\", $(stat -c %s "$TMP/$m-$t/model.safetensors")/1048576}")
    echo "| $m | $t | $mib | $acc | $nm | $t1 |"
  done
done
