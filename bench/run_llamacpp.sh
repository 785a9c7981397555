#!/usr/bin/env bash
# Issue 30's comparison with llama.cpp on one checkpoint, side by side in one
# run on this machine: a Llama of TinyLlama-1.1B's shapes (random f16
# weights, python/bench/make_models.py --llama-1b), as diffrt reads it
# (safetensors, and `diffrt quantize` q8_0 / q4_0 copies) and as llama.cpp
# reads it (GGUF written from the same safetensors by python/bench/make_gguf.py,
# then `llama-quantize --pure`, so every matrix is in the same type as
# diffrt's).
#
#   - per round and format, interleaved: `diffrt bench -p 512 -n 128 -r 1`
#     on cpu and `llama-bench -p 512 -n 128 -r 1`, both on THREADS threads;
#     pp512 and tg128 tokens/s;
#   - once per format and system: peak RSS (/usr/bin/time) of a RSS_PROMPT-
#     token prefill and 4 decode steps, beside the checkpoint's size;
#   - with DEPTH > 0 also tg128 at that depth, DEPTH tokens in the KV cache
#     first (`diffrt bench --depth`, `llama-bench -d`), both with KV caches of
#     type KV;
#   - a markdown table of medians (min-max over the rounds) in OUT_FILE.
#
# llama.cpp is built from PyPI's llama-cpp-python source package, which
# bundles it, in LLAMA_SRC (outside the repository; never committed).
#
# Usage: bench/run_llamacpp.sh [BUILD_DIR] [OUT_FILE]
#   THREADS  threads for both (default 2)     ROUNDS  interleaved rounds (default 3)
#   FORMATS  default "f16 q8_0 q4_0"          RSS_PROMPT  default 3000 (0: no RSS runs)
#   DEPTH    llama.cpp tg128 at this depth (default 0: none)
#   KV       KV cache type of both systems: f16 (default, both defaults),
#            q8_0 (llama-bench -ctk/-ctv q8_0 -fa 1: its quantized V cache
#            needs flash attention), f32
#   MODES    diffrt's cpu.precision values (default "f32"; "f32 int8" adds
#            the int8 mode for q8_0 / q4_0: x in one int8 level a block, as
#            llama.cpp's q8_0 activations; "bf16" the bf16 mode's prefill
#            GEMMs, for every format: x and w rounded to bf16 as llama.cpp's
#            f16 path rounds x to f16; f16 skips int8)
#   ROOFLINE 1: diffrt's f32-mode runs also measure the machine's peaks (bench's
#            probes: streaming read, GEMM); the table then gives both systems'
#            pp512 and tg128 as fractions of them, from the same bytes and
#            flops a token (diffrt bench's roofline: the two read the same
#            matrices in the same types). Default 0.
#   MODELS   checkpoints (default /tmp/diffrt-bench-models; made there when
#            missing: needs pip install -r python/requirements.txt)
#   LLAMA_SRC  where llama.cpp is unpacked and built (default /tmp/llamacpp)
#   LLAMA_CPP_PYTHON  the package version to download (default 0.3.36)
#   PYTHON   the interpreter with numpy, safetensors, torch (default python3)
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OUT=${2:-bench/results/llamacpp-1.1b-$(date +%Y%m%d).md}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
FORMATS=${FORMATS:-f16 q8_0 q4_0}
RSS_PROMPT=${RSS_PROMPT:-3000}
DEPTH=${DEPTH:-0}
KV=${KV:-f16}
case "$KV" in
f16) LKV=() ;;
f32) LKV=(-ctk f32 -ctv f32) ;;
q8_0) LKV=(-ctk q8_0 -ctv q8_0 -fa 1) ;;
*) echo "run_llamacpp: KV must be f32, f16 or q8_0, got \"$KV\"" >&2; exit 2 ;;
esac
MODES=${MODES:-f32}
ROOFLINE=${ROOFLINE:-0}
MODELS=${MODELS:-/tmp/diffrt-bench-models}
LLAMA_SRC=${LLAMA_SRC:-/tmp/llamacpp}
VER=${LLAMA_CPP_PYTHON:-0.3.36}
PY=${PYTHON:-python3}
D="$B/diffrt"
[ -x "$D" ] || { echo "run_llamacpp: no $D: build first (cmake -B $B && cmake --build $B)" >&2; exit 1; }
[ -x /usr/bin/time ] || { echo "run_llamacpp: /usr/bin/time is missing (Debian: apt-get install time)" >&2; exit 1; }
for f in $FORMATS; do
    case $f in f16 | q8_0 | q4_0) ;; *) echo "run_llamacpp: FORMATS: unknown format \"$f\" (f16, q8_0, q4_0)" >&2; exit 2 ;; esac
done
for m in $MODES; do
    case $m in f32 | int8 | bf16) ;; *) echo "run_llamacpp: MODES: unknown mode \"$m\" (f32, int8, bf16)" >&2; exit 2 ;; esac
done

# ---- llama.cpp, built once ---------------------------------------------------
LL="$LLAMA_SRC/llama_cpp_python-$VER/vendor/llama.cpp"
LB="$LL/build/bin/llama-bench"
LQ="$LL/build/bin/llama-quantize"
if [ ! -x "$LB" ] || [ ! -x "$LQ" ]; then
    mkdir -p "$LLAMA_SRC"
    if [ ! -d "$LL" ]; then
        echo "run_llamacpp: downloading llama-cpp-python $VER (source) into $LLAMA_SRC" >&2
        "$PY" -m pip download --no-binary :all: --no-deps -d "$LLAMA_SRC" "llama-cpp-python==$VER" >&2
        tar xzf "$LLAMA_SRC/llama_cpp_python-$VER.tar.gz" -C "$LLAMA_SRC"
    fi
    echo "run_llamacpp: building llama-bench and llama-quantize in $LL/build" >&2
    cmake -S "$LL" -B "$LL/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF \
        -DGGML_NATIVE=ON >&2
    cmake --build "$LL/build" -j"$(nproc)" --target llama-bench llama-quantize >&2
fi

# ---- the checkpoints -----------------------------------------------------------
M="$MODELS/llama-1.1b"
[ -f "$M/model.safetensors" ] || "$PY" python/bench/make_models.py --out "$MODELS" --llama-1b >&2
[ -f "$M.f16.gguf" ] || "$PY" python/bench/make_gguf.py --model "$M" --gguf-py "$LL/gguf-py" --out "$M.f16.gguf" >&2
for f in $FORMATS; do
    [ "$f" = f16 ] && continue
    [ -f "$M-$f/model.safetensors" ] || "$D" quantize --model "$M" --type "$f" --out "$M-$f" >&2
    [ -f "$M.$f.gguf" ] || "$LQ" --pure "$M.f16.gguf" "$M.$f.gguf" "$f" >&2
done
dir_of() { if [ "$1" = f16 ]; then echo "$M"; else echo "$M-$1"; fi; }

TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$(dirname "$OUT")"
export DIFFRT_THREADS=$THREADS

# "pp tg" tokens/s from diffrt bench's JSON / llama-bench's JSON ("nan" for a test not run)
diffrt_pp_tg() {
    "$PY" -c 'import json,sys; b=json.load(open(sys.argv[1]))["backends"][0]
print(*(b[t]["mean_tok_s"] if t in b else "nan" for t in ("pp", "tg")))' "$1"
}
# "peak_gbps peak_gflops bytes_per_token flops_per_token" of diffrt bench's JSON
diffrt_roofline() {
    "$PY" -c 'import json,sys; b=json.load(open(sys.argv[1]))["backends"][0]; r=b["roofline"]
print(b["peak"]["gbytes_per_s"], b["peak"]["gflops"], r["decode"]["bytes_per_token"], r["prefill"]["flops_per_token"])' "$1"
}
llama_pp_tg() {
    "$PY" -c 'import json,sys; r=json.load(open(sys.argv[1]))
pp=[x["avg_ts"] for x in r if x["n_prompt"]>0 and x["n_gen"]==0]
tg=[x["avg_ts"] for x in r if x["n_gen"]>0 and x["n_prompt"]==0]
print(pp[0] if pp else "nan", tg[0] if tg else "nan")' "$1"
}

# samples: one line per measurement, "system format measure value"
S="$TMP/samples"
: >"$S"
echo "run_llamacpp: $ROUNDS rounds of ${FORMATS// /, } on $THREADS threads (load $(cut -d' ' -f1-3 /proc/loadavg))" >&2
for r in $(seq 1 "$ROUNDS"); do
    for f in $FORMATS; do
        for mode in $MODES; do
            [ "$f" = f16 ] && [ "$mode" = int8 ] && continue
            sys=diffrt
            [ "$mode" = f32 ] || sys="diffrt-$mode"
            echo "run_llamacpp: round $r/$ROUNDS, $f: $sys" >&2
            peaks=(--peak-gbps 1 --peak-gflops 1)
            [ "$ROOFLINE" = 1 ] && [ "$mode" = f32 ] && peaks=()
            "$D" bench --model "$(dir_of "$f")" --backend cpu --threads "$THREADS" -p 512 -n 128 -r 1 \
                --kv-type "$KV" --set "cpu.precision=$mode" "${peaks[@]}" --json "$TMP/d.json" >"$TMP/d.txt" \
                2>"$TMP/d.err" || { cat "$TMP/d.err" >&2; exit 1; }
            read -r pp tg < <(diffrt_pp_tg "$TMP/d.json")
            echo "$sys $f pp512 $pp" >>"$S"
            echo "$sys $f tg128 $tg" >>"$S"
            if [ ${#peaks[@]} -eq 0 ]; then
                read -r gbps gflops bpt fpt < <(diffrt_roofline "$TMP/d.json")
                echo "peak $f gbps $gbps" >>"$S"
                echo "peak $f gflops $gflops" >>"$S"
                echo "peak $f bytes_tok $bpt" >>"$S"
                echo "peak $f flops_tok $fpt" >>"$S"
            fi
            if [ "$DEPTH" -gt 0 ] && [ "$mode" = f32 ]; then
                echo "run_llamacpp: round $r/$ROUNDS, $f: $sys, tg128 at depth $DEPTH" >&2
                "$D" bench --model "$(dir_of "$f")" --backend cpu --threads "$THREADS" -p 0 -n 128 -d "$DEPTH" -r 1 \
                    --kv-type "$KV" --peak-gbps 1 --peak-gflops 1 --json "$TMP/d.json" >"$TMP/d.txt" 2>"$TMP/d.err" ||
                    { cat "$TMP/d.err" >&2; exit 1; }
                read -r _ tg < <(diffrt_pp_tg "$TMP/d.json")
                echo "$sys $f tg128@$DEPTH $tg" >>"$S"
            fi
        done
        echo "run_llamacpp: round $r/$ROUNDS, $f: llama.cpp" >&2
        "$LB" -m "$M.$f.gguf" -t "$THREADS" -p 512 -n 128 -r 1 "${LKV[@]}" -o json >"$TMP/l.json" 2>"$TMP/l.err" ||
            { cat "$TMP/l.err" >&2; exit 1; }
        read -r pp tg < <(llama_pp_tg "$TMP/l.json")
        echo "llama.cpp $f pp512 $pp" >>"$S"
        echo "llama.cpp $f tg128 $tg" >>"$S"
        if [ "$DEPTH" -gt 0 ]; then
            "$LB" -m "$M.$f.gguf" -t "$THREADS" -p 0 -n 128 -d "$DEPTH" -r 1 "${LKV[@]}" -o json >"$TMP/l.json" 2>"$TMP/l.err" ||
                { cat "$TMP/l.err" >&2; exit 1; }
            read -r _ tg < <(llama_pp_tg "$TMP/l.json")
            echo "llama.cpp $f tg128@$DEPTH $tg" >>"$S"
        fi
    done
done

# peak RSS (KiB) of a long prefill + 4 decode steps, once per format and system
if [ "$RSS_PROMPT" -gt 0 ]; then
    for f in $FORMATS; do
        echo "run_llamacpp: peak RSS, $f, $RSS_PROMPT-token prompt" >&2
        /usr/bin/time -f "%M" -o "$TMP/rss" "$D" bench --model "$(dir_of "$f")" --backend cpu --threads "$THREADS" \
            -p "$RSS_PROMPT" -n 4 -r 1 --kv-type "$KV" --peak-gbps 1 --peak-gflops 1 >/dev/null 2>&1
        echo "diffrt $f rss_kib $(tail -n 1 "$TMP/rss")" >>"$S"
        /usr/bin/time -f "%M" -o "$TMP/rss" "$LB" -m "$M.$f.gguf" -t "$THREADS" -p "$RSS_PROMPT" -n 4 -r 1 \
            "${LKV[@]}" >/dev/null 2>&1
        echo "llama.cpp $f rss_kib $(tail -n 1 "$TMP/rss")" >>"$S"
    done
fi

# ---- the table -------------------------------------------------------------------
{
    echo "# diffrt vs llama.cpp, 1.1B Llama (TinyLlama's shapes, random weights), $(date -u +%Y-%m-%dT%H:%MZ)"
    echo
    echo "Command: \`THREADS=$THREADS ROUNDS=$ROUNDS FORMATS=\"$FORMATS\" MODES=\"$MODES\" RSS_PROMPT=$RSS_PROMPT DEPTH=$DEPTH KV=$KV ROOFLINE=$ROOFLINE bench/run_llamacpp.sh $B\`"
    echo "$("$D" --version | head -n 1); llama.cpp from llama-cpp-python $VER ($(git -C "$LL" rev-parse --short HEAD 2>/dev/null || echo 'source package'))."
    echo "Host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load after the run $(cut -d' ' -f1-3 /proc/loadavg)."
    echo "Checkpoints: $(du -sh "$M" | cut -f1) safetensors f16; GGUF $(for f in $FORMATS; do printf '%s %s ' "$f" "$(du -h "$M.$f.gguf" | cut -f1)"; done)"
    echo
    "$PY" - "$S" "$FORMATS" "$DEPTH" <<'PYEOF'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
fmts, depth = sys.argv[2].split(), int(sys.argv[3])
def vals(system, fmt, what):
    return [float(r[3]) for r in rows if r[0] == system and r[1] == fmt and r[2] == what]
def cell(v, unit=""):
    if not v: return "-"
    med = statistics.median(v)
    return f"{med:.1f}{unit}" + (f" ({min(v):.1f}-{max(v):.1f})" if len(v) > 1 else "")
measures = ["pp512", "tg128"] + ([f"tg128@{depth}"] if depth > 0 else [])
print("| format | measure | diffrt | llama.cpp | diffrt / llama.cpp |")
print("|---|---|---|---|---|")
for f in fmts:
    for m in measures:
        d, l = vals("diffrt", f, m), vals("llama.cpp", f, m)
        ratio = f"{statistics.median(d) / statistics.median(l):.2f}" if d and l else "-"
        print(f"| {f} | {m} tok/s | {cell(d)} | {cell(l)} | {ratio} |")
        for mode in ("int8", "bf16"):
            dm = vals("diffrt-" + mode, f, m)
            if dm and l:
                print(f"| {f} | {m} tok/s, diffrt cpu.precision={mode} | {cell(dm)} | {cell(l)} | {statistics.median(dm) / statistics.median(l):.2f} |")
    gbps, gflops = vals("peak", f, "gbps"), vals("peak", f, "gflops")
    if gbps and gflops:
        bpt, fpt = vals("peak", f, "bytes_tok")[0], vals("peak", f, "flops_tok")[0]
        for m, per, peak, unit in (("pp512", fpt, statistics.median(gflops), "GFLOP/s"),
                                   ("tg128", bpt, statistics.median(gbps), "GB/s")):
            d, l = vals("diffrt", f, m), vals("llama.cpp", f, m)
            if d and l:
                fd, fl = statistics.median(d) * per / (peak * 1e9), statistics.median(l) * per / (peak * 1e9)
                flag = lambda x: f"{x:.2f}" + (" (> 1.0: peak under-measured)" if x > 1.0 else "")
                print(f"| {f} | {m}, fraction of the measured peak ({peak:.1f} {unit}) | {flag(fd)} | {flag(fl)} | - |")
    d, l = vals("diffrt", f, "rss_kib"), vals("llama.cpp", f, "rss_kib")
    if d and l:
        print(f"| {f} | peak RSS, MiB | {d[0] / 1024:.0f} | {l[0] / 1024:.0f} | {d[0] / l[0]:.2f} |")
print()
print("Medians over the rounds (min-max in brackets); peak RSS from one run each.")
if any(r[0] == "peak" for r in rows):
    print("Peaks: medians of diffrt bench's probes over the rounds (best streaming read of its bandwidth")
    print("probes; best GEMM, x f32 and w in the model's dtype); a token's bytes and flops: diffrt bench's")
    print("roofline (docs/bench-json.md), the same for both systems.")
PYEOF
} >"$OUT"
cat "$OUT"
