#!/usr/bin/env bash
# What the differential attention costs at 1.1B: diffrt on a DiffLlama and a
# Llama of the same shapes (TinyLlama-1.1B's: hidden 2048, 22 layers, 32
# heads / 4 kv heads, ffn 5632, vocab 32000; random f16 weights,
# python/bench/make_models.py --llama-1b / --diffllama-1b), the same
# threads, interleaved round by round (the order alternates each round):
#   - per round and format: `diffrt bench -p 512 -n 128 -r 1` on each model,
#     and with DEPTH > 0 also tg128 at that depth;
#   - the overhead is DiffLlama's time per token over Llama's, minus 1
#     (Llama tok/s / DiffLlama tok/s - 1), from the medians and from the
#     best round of each;
#   - the per-op table of the last round's decode step on each model (from
#     bench's JSON: ms per op type), to show where a difference is spent.
# Usage: bench/run_diff_overhead.sh [BUILD_DIR] [OUT]
#   THREADS  threads (default 2)
#   ROUNDS   interleaved rounds (default 3)
#   FORMATS  weight formats (default "f16 q4_0"): q8_0 / q4_0 copies are made
#            with `diffrt quantize` beside the checkpoints when missing
#   DEPTH    also tg128 at this depth (default 0: none)
#   KV       KV cache type for both (default f16)
#   MODELS   checkpoints (default /tmp/diffrt-bench-models; made there when
#            missing, which needs torch and transformers)
#   PYTHON   the interpreter with json (and torch to make models; default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OUT=${2:-bench/results/diff-overhead-1.1b-$(date +%Y%m%d).md}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
FORMATS=${FORMATS:-f16 q4_0}
DEPTH=${DEPTH:-0}
KV=${KV:-f16}
MODELS=${MODELS:-/tmp/diffrt-bench-models}
PY=${PYTHON:-python3}
D="$B/diffrt"
[ -x "$D" ] || { echo "run_diff_overhead: no $D: build first (cmake -B $B && cmake --build $B)" >&2; exit 1; }
for f in $FORMATS; do
    case $f in f16 | q8_0 | q4_0) ;; *) echo "run_diff_overhead: FORMATS: unknown format \"$f\" (f16, q8_0, q4_0)" >&2; exit 2 ;; esac
done
case "$KV" in f32 | f16 | q8_0) ;; *) echo "run_diff_overhead: KV must be f32, f16 or q8_0, got \"$KV\"" >&2; exit 2 ;; esac

for m in llama diffllama; do
    [ -f "$MODELS/$m-1.1b/model.safetensors" ] || "$PY" python/bench/make_models.py --out "$MODELS" "--$m-1b" >&2
    for f in $FORMATS; do
        [ "$f" = f16 ] && continue
        [ -f "$MODELS/$m-1.1b-$f/model.safetensors" ] ||
            "$D" quantize --model "$MODELS/$m-1.1b" --type "$f" --out "$MODELS/$m-1.1b-$f" >&2
    done
done
dir_of() { if [ "$2" = f16 ]; then echo "$MODELS/$1-1.1b"; else echo "$MODELS/$1-1.1b-$2"; fi; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$(dirname "$OUT")"

# samples: "model format measure value", one line per measurement
S="$TMP/samples"
: >"$S"
pp_tg() {
    "$PY" -c 'import json,sys; b=json.load(open(sys.argv[1]))["backends"][0]
print(*(b[t]["mean_tok_s"] if t in b else "nan" for t in ("pp", "tg")))' "$1"
}
echo "run_diff_overhead: $ROUNDS rounds of ${FORMATS// /, } on $THREADS threads, KV $KV (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
for r in $(seq 1 "$ROUNDS"); do
    order="diffllama llama"
    [ $((r % 2)) -eq 0 ] && order="llama diffllama"
    for f in $FORMATS; do
        for m in $order; do
            echo "run_diff_overhead: round $r/$ROUNDS, $f, $m: pp512, tg128" >&2
            "$D" bench --model "$(dir_of $m "$f")" --backend cpu --threads "$THREADS" -p 512 -n 128 -r 1 \
                --kv-type "$KV" --peak-gbps 1 --peak-gflops 1 --json "$TMP/$m-$f.json" >"$TMP/d.txt" 2>"$TMP/d.err" ||
                { cat "$TMP/d.err" >&2; exit 1; }
            read -r pp tg < <(pp_tg "$TMP/$m-$f.json")
            echo "$m $f pp512 $pp" >>"$S"
            echo "$m $f tg128 $tg" >>"$S"
            if [ "$DEPTH" -gt 0 ]; then
                echo "run_diff_overhead: round $r/$ROUNDS, $f, $m: tg128 at depth $DEPTH" >&2
                "$D" bench --model "$(dir_of $m "$f")" --backend cpu --threads "$THREADS" -p 0 -n 128 -d "$DEPTH" -r 1 \
                    --kv-type "$KV" --peak-gbps 1 --peak-gflops 1 --json "$TMP/$m-$f-d.json" >"$TMP/d.txt" 2>"$TMP/d.err" ||
                    { cat "$TMP/d.err" >&2; exit 1; }
                read -r _ tg < <(pp_tg "$TMP/$m-$f-d.json")
                echo "$m $f tg128@$DEPTH $tg" >>"$S"
            fi
        done
    done
done

{
    echo "# DiffLlama against Llama of the same shapes, 1.1B, diffrt cpu, $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "Command: \`THREADS=$THREADS ROUNDS=$ROUNDS FORMATS=\"$FORMATS\" DEPTH=$DEPTH KV=$KV bench/run_diff_overhead.sh $B\`"
    echo
    echo "Host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load after: $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "diffrt $(git rev-parse --short HEAD 2>/dev/null || echo '?'); $ROUNDS interleaved rounds, tok/s min / median / max."
    echo
    "$PY" - "$S" "$TMP" "$FORMATS" <<'EOF'
import json, os, statistics, sys
samples, tmp, formats = sys.argv[1], sys.argv[2], sys.argv[3].split()
rows = [l.split() for l in open(samples) if l.strip()]
def vals(m, f, what):
    return [float(v) for mm, ff, ww, v in rows if (mm, ff, ww) == (m, f, what) and v != "nan"]
def cell(v):
    return f"{min(v):.2f} / {statistics.median(v):.2f} / {max(v):.2f}" if v else "-"
print("| format | measure | DiffLlama | Llama | DIFF overhead, medians | DIFF overhead, best rounds |")
print("|---|---|---|---|---|---|")
for f in formats:
    for what in sorted({w for _, ff, w, _ in rows if ff == f}, key=lambda w: (w != "pp512", w != "tg128", w)):
        d, l = vals("diffllama", f, what), vals("llama", f, what)
        ov = f"{(statistics.median(l) / statistics.median(d) - 1) * 100:+.1f}%" if d and l else "-"
        best = f"{(max(l) / max(d) - 1) * 100:+.1f}%" if d and l else "-"
        print(f"| {f} | {what} | {cell(d)} | {cell(l)} | {ov} | {best} |")
print()
print("Overhead = Llama tok/s / DiffLlama tok/s - 1 (time per token). The best")
print("rounds' ratio is the one least touched by this VM's swings in bandwidth.")
print()
print("Decode step by op type, the last round (ms; `diffrt bench`'s per-op table, run node by node):")
print()
for f in formats:
    ops = {}
    for m in ("diffllama", "llama"):
        p = os.path.join(tmp, f"{m}-{f}.json")
        if not os.path.exists(p):
            continue
        b = json.load(open(p))["backends"][0]
        for o in b.get("ops", {}).get("decode", {}).get("ops", []):
            ops.setdefault(o["op"], {})[m] = o["ms"]
    if not ops:
        continue
    print(f"| {f} decode | DiffLlama ms | Llama ms |")
    print("|---|---|---|")
    tot = {"diffllama": 0.0, "llama": 0.0}
    for op, v in sorted(ops.items(), key=lambda kv: -max(kv[1].values())):
        for m in tot:
            tot[m] += v.get(m, 0.0)
        print(f"| {op} | {v.get('diffllama', 0.0):.2f} | {v.get('llama', 0.0):.2f} |")
    print(f"| total | {tot['diffllama']:.2f} | {tot['llama']:.2f} |")
    print()
EOF
} >"$OUT"
cat "$OUT"
