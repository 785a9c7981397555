#!/usr/bin/env bash
# ctest test_quantize: diffrt quantize end to end on the bundled models.
#   - q8_0 and q4_0 of each model: written, loaded back, `info` names the dtype;
#   - the argument rules: no overwrite without --force, not into the model
#     directory, an unknown --type;
#   - conform --models on the quantized directories: every required backend
#     computes what the reference computes on the same blocks;
#   - retrieval: q8_0 answers like PyTorch's f16 model (niah_python.json) on
#     >= 98% of the 200 NIAH prompts on cpu, so its accuracy is within 0.02
#     of f16's; q4_0's agreement is printed.
# usage: test_quantize.sh CLI MODELS_DIR SCRATCH REQUIRE [quick]
#   quick: no NIAH runs (the sanitizer pass and the quick subset)
set -uo pipefail
CLI=$1 MODELS=$2 SCRATCH=$3 REQUIRE=$4 QUICK=${5:-}
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
pass() { echo "ok   $*"; }
# (checks grep to /dev/null, not with -q: under pipefail, grep -q leaving
# early can kill the writer with SIGPIPE and fail a check that matched)
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH" || exit 1

for mdir in "$MODELS"/*/; do
  m=$(basename "$mdir")
  [ -f "$mdir/niah_python.json" ] || continue
  for t in q8_0 q4_0; do
    out="$SCRATCH/$m-$t"
    if ! "$CLI" quantize --model "$mdir" --type "$t" --out "$out" 2>"$SCRATCH/q.err"; then
      fail "$m $t: quantize failed: $(tail -1 "$SCRATCH/q.err")"; continue
    fi
    grep -q "tensors to $t" "$SCRATCH/q.err" || fail "$m $t: no summary line on stderr"
    "$CLI" info --model "$out" | grep >/dev/null -E "weight dtype +$t" && pass "$m $t: written, info says $t" ||
      fail "$m $t: info does not say $t: $("$CLI" info --model "$out" | grep -i dtype)"
    for f in config.json tokenizer.json; do cmp -s "$mdir/$f" "$out/$f" || fail "$m $t: $f not copied"; done
    # every required backend against the reference on the quantized model
    if "$CLI" conform --op none --require "$REQUIRE" --models "$out" >"$SCRATCH/c.out" 2>&1; then
      pass "$m $t: conform --models on $REQUIRE: $(tail -1 "$SCRATCH/c.out")"
    else
      fail "$m $t: conform --models: $(grep -m3 FAIL "$SCRATCH/c.out")"
    fi
    # retrieval against PyTorch's f16 answers
    [ "$QUICK" = quick ] && continue
    agree=0.98
    [ $t = q4_0 ] && agree=0
    if "$CLI" niah --model "$out" --backend cpu --compare "$mdir/niah_python.json" --min-agree $agree \
        >"$SCRATCH/n.out" 2>&1; then
      pass "$m $t: niah vs PyTorch f16: $(grep -m1 -i 'agree' "$SCRATCH/n.out") ($(grep -m1 -i 'accuracy' "$SCRATCH/n.out"))"
    else
      fail "$m $t: niah agreement below $agree: $(grep -m1 -i 'agree' "$SCRATCH/n.out")"
    fi
  done
done

m=diff-v1-tiny
out="$SCRATCH/$m-q8_0"
msg=$("$CLI" quantize --model "$MODELS/$m" --type q8_0 --out "$out" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep >/dev/null "already exists; pass --force" && pass "no overwrite without --force" ||
  fail "overwrite without --force: rc $rc: $msg"
"$CLI" quantize --model "$MODELS/$m" --type q8_0 --out "$out" --force 2>/dev/null && pass "--force replaces" ||
  fail "--force did not replace"
msg=$("$CLI" quantize --model "$MODELS/$m" --type q8_0 --out "$MODELS/$m" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep >/dev/null "is the model directory itself" && pass "refuses --out = --model" ||
  fail "--out = --model: rc $rc: $msg"
msg=$("$CLI" quantize --model "$MODELS/$m" --type q5_1 --out "$SCRATCH/x" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep >/dev/null "must be q8_0 or q4_0" && pass "unknown --type: one line, exit 2" ||
  fail "--type q5_1: rc $rc: $msg"

rm -rf "$SCRATCH"
[ $fails -eq 0 ] && echo "test_quantize: all passed" || echo "test_quantize: $fails failed"
[ $fails -eq 0 ]
