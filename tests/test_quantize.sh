#!/usr/bin/env bash
# ctest test_quantize: diffrt quantize end to end on the bundled models.
#   - q8_0 and q4_0 of each model: written, loaded back, `info` names the dtype;
#   - the argument rules: no overwrite without --force, not into the model
#     directory, an unknown --type;
#   - the output directory is written whole or not at all (issue 25): an
#     existing non-empty --out (any file, a sharded model's index) is refused
#     and untouched; --force replaces it as a whole (no stale file survives);
#     a symlinked --out, or symlinks in it, are never written through; a
#     failure during the run (a non-finite weight, a full disk, a kill) leaves
#     the previous output byte-identical and nothing loadable half written;
#     the next run removes the temps killed runs left, and nothing else (not
#     a near name, a file, a symlink, a newer or a locked temp);
#   - conform --models on the quantized directories (one run over all six;
#     quick: --quick, the batch cases on one of each architecture):
#     every required backend computes what the reference computes on the
#     same blocks;
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
rm -rf "$SCRATCH" && mkdir -p "$SCRATCH/q" || exit 1

for mdir in "$MODELS"/*/; do
  m=$(basename "$mdir")
  [ -f "$mdir/niah_python.json" ] || continue
  for t in q8_0 q4_0; do
    out="$SCRATCH/q/$m-$t"
    if ! "$CLI" quantize --model "$mdir" --type "$t" --out "$out" 2>"$SCRATCH/q.err"; then
      fail "$m $t: quantize failed: $(tail -1 "$SCRATCH/q.err")"; continue
    fi
    grep -q "tensors to $t" "$SCRATCH/q.err" || fail "$m $t: no summary line on stderr"
    "$CLI" info --model "$out" | grep >/dev/null -E "weight dtype +$t" && pass "$m $t: written, info says $t" ||
      fail "$m $t: info does not say $t: $("$CLI" info --model "$out" | grep -i dtype)"
    for f in config.json tokenizer.json; do cmp -s "$mdir/$f" "$out/$f" || fail "$m $t: $f not copied"; done
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
# every required backend against the reference on the quantized models
cq=""
[ "$QUICK" = quick ] && cq=--quick
n_q=$(find "$SCRATCH/q" -mindepth 1 -maxdepth 1 -type d | wc -l)
[ "$n_q" -eq 6 ] || fail "$n_q quantized models, want 6"
if "$CLI" conform --op none --require "$REQUIRE" $cq --models "$SCRATCH/q" >"$SCRATCH/c.out" 2>&1; then
  pass "conform --models $cq on the $n_q quantized models, $REQUIRE: $(grep -m1 passed "$SCRATCH/c.out")"
else
  fail "conform --models on the quantized models: $(grep -m3 -E 'FAIL|error' "$SCRATCH/c.out")"
fi

m=diff-v1-tiny
out="$SCRATCH/q/$m-q8_0"
msg=$("$CLI" quantize --model "$MODELS/$m" --type q8_0 --out "$out" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep >/dev/null "already exists and is not empty; pass --force" &&
  pass "no overwrite without --force" ||
  fail "overwrite without --force: rc $rc: $msg"
"$CLI" quantize --model "$MODELS/$m" --type q8_0 --out "$out" --force 2>/dev/null && pass "--force replaces" ||
  fail "--force did not replace"
msg=$("$CLI" quantize --model "$MODELS/$m" --type q8_0 --out "$MODELS/$m" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep >/dev/null "is the model directory itself" && pass "refuses --out = --model" ||
  fail "--out = --model: rc $rc: $msg"
msg=$("$CLI" quantize --model "$MODELS/$m" --type q5_1 --out "$SCRATCH/x" 2>&1); rc=$?
[ $rc -eq 2 ] && echo "$msg" | grep >/dev/null "must be q8_0 or q4_0" && pass "unknown --type: one line, exit 2" ||
  fail "--type q5_1: rc $rc: $msg"

# ---- the output directory: whole or not at all ----
X="$SCRATCH/dirs"
mkdir -p "$X"
src="$MODELS/$m"
# every path under $1 with its type and link target, and every file's checksum
tree_sig() { (cd "$1" && find . -printf '%p %y %l\n' | LC_ALL=C sort && find . -type f -exec cksum {} + | LC_ALL=C sort); }
# dot-named entries in $X: temp directories left behind
leftovers() { find "$X" -maxdepth 1 -name '.*' ! -name . -printf '%f '; }
# quantize into $X/$2 with the rest of the arguments; rc and msg set
q() { local model=$1 o=$2; shift 2; msg=$("$CLI" quantize --model "$model" --type q8_0 --out "$X/$o" "$@" 2>&1); rc=$?; }
# check NAME WANT_RC MESSAGE: the exit status, the message, no temp left
check() {
  local l
  l=$(leftovers)
  if [ $rc -eq "$2" ] && echo "$msg" | grep >/dev/null -- "$3" && [ -z "$l" ]; then pass "$1"
  else fail "$1: rc $rc (want $2), want \"$3\", temps left: [$l]: $(echo "$msg" | tail -2)"; fi
}
same_tree() { [ "$(tree_sig "$2")" = "$3" ] && pass "$1: untouched" || fail "$1: $2 changed"; }

# an existing directory holding anything is refused without --force
mkdir "$X/notes" && echo "keep me" >"$X/notes/notes.txt"
sig=$(tree_sig "$X/notes")
q "$src" notes
check "non-empty --out with an unrelated file: refused" 2 "already exists and is not empty; pass --force"
same_tree "non-empty --out with an unrelated file" "$X/notes" "$sig"
# ... such as a sharded model (its index and config), which was deleted before
mkdir "$X/sharded" && cp "$src/config.json" "$X/sharded/" &&
  echo '{"metadata":{},"weight_map":{"a":"model-00001-of-00002.safetensors"}}' >"$X/sharded/model.safetensors.index.json"
sig=$(tree_sig "$X/sharded")
q "$src" sharded
check "--out holding a sharded model's index: refused" 2 "already exists and is not empty"
same_tree "--out holding a sharded model's index" "$X/sharded" "$sig"
# an empty directory is fine to fill
mkdir "$X/empty"
q "$src" empty
check "empty existing --out: written" 0 "tensors to q8_0"
[ -f "$X/empty/model.safetensors" ] && [ ! -L "$X/empty" ] || fail "empty --out: no model.safetensors in it"

# generation_config.json (eos ids) and tokenizer_config.json (chat
# template) come along when present
gen="$X/gen-src"
mkdir "$gen" && cp "$src/config.json" "$src/model.safetensors" "$src/tokenizer.json" "$gen/" &&
  echo '{"eos_token_id": [1]}' >"$gen/generation_config.json" &&
  echo '{"chat_template": "<|im_start|>"}' >"$gen/tokenizer_config.json"
q "$gen" gen
check "a model with generation_config.json and tokenizer_config.json: written" 0 "tensors to q8_0"
for f in generation_config.json tokenizer_config.json; do
  cmp -s "$gen/$f" "$X/gen/$f" && pass "$f copied" || fail "$f not copied"
done

# --force replaces the directory as a whole: a model without tokenizer.json
# over one with it (and a stray file) leaves neither behind
notok="$X/notok-src"
mkdir "$notok" && cp "$src/config.json" "$src/model.safetensors" "$notok/"
mkdir "$X/whole" && cp "$src/tokenizer.json" "$X/whole/" && echo stale >"$X/whole/stale.txt"
q "$notok" whole --force
check "--force over a full --out: written" 0 "tensors to q8_0"
listing=$(cd "$X/whole" && ls -A | tr '\n' ' ')
[ "$listing" = "config.json model.safetensors " ] && pass "--force: no stale file survives ($listing)" ||
  fail "--force left old files: $listing"
"$CLI" info --model "$X/whole" | grep >/dev/null -E "weight dtype +q8_0" || fail "--force: the new model does not load"

# a symlink as --out is refused (with --force too), its target untouched
q "$src" real
mkdir "$X/real-copy" && cp "$X/real/"* "$X/real-copy/"
ln -s real "$X/link"
sig=$(tree_sig "$X/real")
q "$src" link --force
check "--out a symlink: refused" 2 "is a symbolic link"
same_tree "--out a symlink, its target" "$X/real" "$sig"
[ -L "$X/link" ] || fail "--out a symlink: the link was replaced"
# symlinks inside --out are never written through: --force replaces them
echo "victim bytes" >"$X/victim"
mkdir "$X/links" && ln -s ../victim "$X/links/model.safetensors" && ln -s ../victim "$X/links/config.json" &&
  ln -s ../victim "$X/links/tokenizer.json"
q "$src" links --force
check "--out holding symlinks, --force: written" 0 "tensors to q8_0"
[ "$(cat "$X/victim")" = "victim bytes" ] && pass "symlinks in --out: not written through" ||
  fail "symlinks in --out: written through to their target"
[ ! -L "$X/links/model.safetensors" ] && [ ! -L "$X/links/config.json" ] ||
  fail "symlinks in --out: still symlinks after --force"

# the model directory is never the output, nor inside it, however spelled
mkdir -p "$X/outer" && cp -r "$notok" "$X/outer/src"
sig=$(tree_sig "$X/outer")
msg=$("$CLI" quantize --model "$X/outer/src" --type q8_0 --out "$X/outer/src/../src/" --force 2>&1); rc=$?
check "--out = --model through ..: refused" 2 "is the model directory itself"
msg=$("$CLI" quantize --model "$X/outer/src" --type q8_0 --out "$X/outer" --force 2>&1); rc=$?
check "--out containing --model: refused" 2 "contains the model directory"
same_tree "--out containing --model" "$X/outer" "$sig"
ln -s outer/src "$X/srclink"
msg=$("$CLI" quantize --model "$X/outer/src" --type q8_0 --out "$X/srclink" --force 2>&1); rc=$?
check "--out = --model through a symlink: refused" 2 "symbolic link"
same_tree "--out = --model through a symlink" "$X/outer" "$sig"
# --out inside the model directory is fine: the model's own files unchanged
sig=$(tree_sig "$X/outer/src")
msg=$("$CLI" quantize --model "$X/outer/src" --type q8_0 --out "$X/outer/src/q8" 2>&1); rc=$?
check "--out inside --model: written" 0 "tensors to q8_0"
rm -rf "$X/outer/src/q8"
same_tree "--out inside --model, the model" "$X/outer/src" "$sig"

# a failure during the run leaves the previous output byte-identical and no
# half-written directory. (1) a non-finite weight, found while quantizing
nan="$X/nan-src"
mkdir "$nan" && cp "$src/config.json" "$src/model.safetensors" "$nan/"
f="$nan/model.safetensors"
hlen=$(od -An -t u8 -N 8 "$f" | tr -d ' ')
entry=$(dd if="$f" bs=1 skip=8 count="$hlen" 2>/dev/null | grep -o '"[a-z_.0-9]*proj\.weight":{[^}]*}' | tail -1)
dtype=$(echo "$entry" | grep -o '"dtype":"[A-Z0-9]*"' | cut -d'"' -f4)
off=$(echo "$entry" | grep -o '"data_offsets":\[[0-9]*' | grep -o '[0-9]*$')
case $dtype in F32) nanb='\377\377\377\177' ;; *) nanb='\377\177' ;; esac # NaN, little-endian
printf "$nanb" | dd of="$f" bs=1 seek=$((8 + hlen + off)) conv=notrunc 2>/dev/null
sig=$(tree_sig "$X/real")
q "$nan" real --force
check "a NaN weight mid-run: fails" 1 "non-finite value"
same_tree "a NaN weight mid-run, the previous output" "$X/real" "$sig"
# (2) a full disk: a 512 KiB file size limit, SIGXFSZ ignored, so the write
# of model.safetensors (~1 MiB) fails with EFBIG
msg=$(trap '' XFSZ; ulimit -f 512; "$CLI" quantize --model "$src" --type q8_0 --out "$X/real" --force 2>&1); rc=$?
check "a full disk mid-write: fails" 1 "File too large"
same_tree "a full disk mid-write, the previous output" "$X/real" "$sig"
# (3) killed mid-write (SIGXFSZ): only a dot-named temp is left, and the
# previous output still loads
msg=$(ulimit -f 512; "$CLI" quantize --model "$src" --type q8_0 --out "$X/real" --force 2>&1); rc=$?
l=$(leftovers)
[ $rc -gt 128 ] && [[ "$l" == .real.tmp.* ]] && pass "killed mid-write: exit $rc, only the temp $l left" ||
  fail "killed mid-write: rc $rc, left: [$l]"
same_tree "killed mid-write, the previous output" "$X/real" "$sig"
"$CLI" info --model "$X/real" | grep >/dev/null -E "weight dtype +q8_0" && cmp -s "$X/real/model.safetensors" \
  "$X/real-copy/model.safetensors" && pass "killed mid-write: the previous output loads" ||
  fail "killed mid-write: the previous output does not load"
# (4) the next run for that target removes what killed runs left, and only
# that: the exact name of a temp of this target, a directory (not through a
# symlink), changed before the run began, not locked by a live run
killed=${l% }
mkdir "$X/.real.tmp.Ab12Cd" && echo x >"$X/.real.tmp.Ab12Cd/model.safetensors" # stale, as a kill leaves it
mkdir "$X/.real.tmp.abc12" "$X/.real.tmp.abc1234" "$X/.real.tmp.ab-12c" "$X/.realx.tmp.abc123" \
  "$X/.real.old.abc123" "$X/real.tmp.abc123" "$X/.real.tmp.locked" "$X/.real.tmp.future" "$X/victim-dir"
echo keep >"$X/victim-dir/keep.txt"
echo file >"$X/.real.tmp.file12"                  # a file, not a directory
ln -s victim-dir "$X/.real.tmp.link12"            # a symlink to a directory
touch -d "@$(($(date +%s) + 3600))" "$X/.real.tmp.future" # made after this run began
# a live run's: the lock held by the sleep itself (exec), its output off
# ctest's pipe, so the kill below ends both and ctest does not wait 60 s
# for a sleep that still holds the pipe open
(exec 9<"$X/.real.tmp.locked" && flock 9 && exec sleep 60) >/dev/null 2>&1 </dev/null & holder=$!
for _ in $(seq 50); do flock -n "$X/.real.tmp.locked" true 2>/dev/null || break; sleep 0.1; done
q "$src" real --force
kill $holder 2>/dev/null; wait $holder 2>/dev/null
l=$(leftovers)
want=".real.old.abc123 .real.tmp.ab-12c .real.tmp.abc12 .real.tmp.abc1234 .real.tmp.file12 .real.tmp.future "
want+=".real.tmp.link12 .real.tmp.locked .realx.tmp.abc123 "
got=$(echo "$l" | tr ' ' '\n' | LC_ALL=C sort | tr '\n' ' ' | sed 's/^ //')
[ $rc -eq 0 ] && [ "$got" = "$want" ] && echo "$msg" | grep >/dev/null "removed .*/$killed, left by a run" &&
  echo "$msg" | grep >/dev/null "removed .*/.real.tmp.Ab12Cd" && [ -f "$X/victim-dir/keep.txt" ] &&
  [ -d "$X/real.tmp.abc123" ] && pass "the next run removes the killed runs' temps, nothing else" ||
  fail "the next run: rc $rc, left [$got], want [$want]: $msg"
rm -rf "$X"/.real.* "$X/real.tmp.abc123" "$X"/.realx.*

rm -rf "$SCRATCH"
[ $fails -eq 0 ] && echo "test_quantize: all passed" || echo "test_quantize: $fails failed"
[ $fails -eq 0 ]
