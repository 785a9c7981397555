#!/usr/bin/env bash
# Issue 17's decode-speed figures, side by side in one run on this machine:
# the ~134M DiffLlama of python/bench/make_models.py (f16) and its q8_0 and
# q4_0 copies (diffrt quantize), decoded on the cpu backend (the q8_0 and
# q4_0 GEMVs on int8 dot products where the CPU has them, and the block kernel,
# DIFFRT_CPU_QDOT=0; and the checkpoint read into memory, DIFFRT_NO_MMAP=1)
# and on OpenCL, rounds interleaved:
#   - read bandwidth (bench_membw) each round: the roofline's denominator;
#   - `diffrt run` decode tok/s (32-token prompt, 64 new tokens);
#   - once at the end, `diffrt bench` per model (its own roofline against the
#     peaks it measures, and the per-op decode times).
# The roofline here: tok/s x weight bytes per token / bench_membw's median,
# with the weight bytes those `diffrt bench` counts (docs/bench-json.md).
# Usage: bench/run_quant.sh [BUILD_DIR] [OUT_FILE]
#   THREADS  threads (default 2)   ROUNDS  interleaved rounds (default 3)
#   MODELS   folder of the checkpoints (default /tmp/diffrt-bench-models;
#            made there when missing: needs pip install -r python/requirements.txt)
#   BACKENDS  default "cpu opencl"
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OUT=${2:-bench/results/quant-speed-$(date +%Y%m%d).txt}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
MODELS=${MODELS:-/tmp/diffrt-bench-models}
BACKENDS=${BACKENDS:-cpu opencl}
D="$B/diffrt"
[ -x "$D" ] || { echo "run_quant: no $D: build first (cmake -B $B && cmake --build $B)" >&2; exit 1; }
[ -x "$B/bench/bench_membw" ] || { echo "run_quant: no $B/bench/bench_membw: build the bench targets" >&2; exit 1; }
M="$MODELS/diffllama-134m"
[ -f "$M/model.safetensors" ] || python3 python/bench/make_models.py --out "$MODELS" >&2
for t in q8_0 q4_0; do
    [ -f "$M-$t/model.safetensors" ] || "$D" quantize --model "$M" --type "$t" --out "$M-$t" >&2
done
export DIFFRT_THREADS=$THREADS
PROMPT=$(seq -s, 1 32)
mkdir -p "$(dirname "$OUT")"

# "decode:  64 tokens in 0.5 s (128.0 tok/s)" -> 128.0
decode_toks() { sed -n 's/^decode: .*(\([0-9.]*\) tok\/s)/\1/p'; }

{
    echo "# diffrt q8_0 / q4_0 decode, $(date -u +%Y-%m-%dT%H:%MZ), $("$D" --version | head -1)"
    echo "# command: THREADS=$THREADS ROUNDS=$ROUNDS bench/run_quant.sh $B"
    echo "# host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    "$D" info | grep -A1 '^  cpu\|^  opencl' | sed 's/^/# /' || true
    for r in $(seq 1 "$ROUNDS"); do
        echo
        echo "## round $r (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
        "$B/bench/bench_membw" "$THREADS" 1024 3
        for be in $BACKENDS; do
            for t in f16 q8_0 q4_0; do
                m=$M
                [ "$t" = f16 ] || m="$M-$t"
                # settings side by side: the defaults, then on cpu the
                # checkpoint read into memory instead of mapped, and for
                # q8_0 / q4_0 the block kernel instead of the int8-dot one
                modes="default"
                [ "$be" = cpu ] && modes="$modes DIFFRT_NO_MMAP=1"
                [ "$be" = cpu ] && [ "$t" != f16 ] && modes="$modes DIFFRT_CPU_QDOT=0"
                for mode in $modes; do
                    e=()
                    [ "$mode" = default ] || e=("$mode")
                    v=$(env ${e[@]+"${e[@]}"} "$D" run --model "$m" --backend "$be" --tokens "$PROMPT" -n 65 --no-stop \
                        2>&1 >/dev/null | decode_toks || true)
                    echo "decode $be $t $mode ${v:-failed} tok/s"
                done
            done
        done
        echo "# load after round $r: $(cut -d' ' -f1-3 /proc/loadavg)"
    done
    echo
    echo "## diffrt bench (-p 32 -n 64 -r 3), per model"
    for t in f16 q8_0 q4_0; do
        m=$M
        [ "$t" = f16 ] || m="$M-$t"
        # shellcheck disable=SC2086
        "$D" bench --model "$m" --backend "$(echo $BACKENDS | tr ' ' ,)" -p 32 -n 64 -r 3 2>/dev/null || true
    done
} 2>&1 | tee "$OUT"
