#!/usr/bin/env bash
# Issue 27's batched-decode figures, side by side in one run:
#   1. cpu, the 134M DiffLlama f16: aggregate decode of 8 sequences against 1
#      (diffrt bench --parallel 1,8);
#   2. cpu, a 1.1B Llama at q4_0 (TinyLlama's shapes, random weights):
#      diffrt bench --parallel 1,8, in the f32 mode and in the int8 mode
#      (x in one int8 level, as llama.cpp's q8_0 activations), against
#      llama-batched-bench on the same checkpoint, same threads, rounds
#      interleaved;
#   3. opencl and vulkan (PoCL, lavapipe here), the 134M f16: 8 against 1;
#   4. one sequence, the build before batching against this one (prefill
#      and decode through drt_session), rounds interleaved.
#
#   MODELS=/tmp/bench-models LLAMA_BIN=.../llama.cpp/build/bin BEFORE=.../build \
#     bash bench/run_batched.sh [BUILD_DIR] [OUT]
#
# MODELS holds diffllama-134m (python/bench/make_models.py), llama-1.1b-q4_0
# (make_models.py --llama-1b, then diffrt quantize --type q4_0) and
# llama-1.1b-q4_0.gguf (python/bench/make_gguf.py, then llama-quantize --pure
# ... q4_0). LLAMA_BIN has llama-batched-bench (llama.cpp from PyPI's
# llama-cpp-python source package, built outside the repository); without it
# part 2 runs diffrt alone. BEFORE is the build directory of the commit before
# batching (7579289); without it part 4 is skipped. ROUNDS (default 3), REPS
# (default 3), THREADS (default 2), SKIP (parts to skip, e.g. "3"). Raw output
# goes to OUT (default bench/results/batched-<date>.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-bench/results/batched-$(date -u +%Y%m%d).txt}
MODELS=${MODELS:?set MODELS to the folder of the benchmark models}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-3}
THREADS=${THREADS:-2}
SKIP=${SKIP:-}
D=$BUILD/diffrt
[ -x "$D" ] || { echo "run_batched: $D is not built" >&2; exit 2; }
exec > >(tee "$OUT") 2>&1

say() { printf '\n== %s (%s; %s)\n' "$1" "$(date -u +%H:%M:%S)" "$(uptime | sed 's/.*load/load/')"; }
skip() { case ",$SKIP," in *",$1,"*) return 0 ;; esac; return 1; }

echo "run_batched: $(git rev-parse --short HEAD) $(date -u +%FT%TZ), $(nproc) CPUs, threads $THREADS, rounds $ROUNDS x $REPS reps"
grep -m1 'model name' /proc/cpuinfo

for r in $(seq 1 "$ROUNDS"); do
    if ! skip 1; then
        say "round $r: 1. cpu diffllama-134m f16, --parallel 1,8 (pp32, tg64)"
        "$D" bench --model "$MODELS/diffllama-134m" --backend cpu --threads "$THREADS" -p 32 -n 64 -r "$REPS" \
            --parallel 1,8 2>/dev/null | sed -n '/^parallel/,$p'
    fi
    if ! skip 2; then
        for prec in f32 int8; do
            say "round $r: 2. cpu llama-1.1b q4_0, diffrt --parallel 1,8 (pp32, tg64), cpu.precision=$prec"
            "$D" bench --model "$MODELS/llama-1.1b-q4_0" --backend cpu --threads "$THREADS" -p 32 -n 64 -r "$REPS" \
                --set cpu.precision=$prec --parallel 1,8 2>/dev/null | sed -n '/^parallel/,$p'
        done
        if [ -n "${LLAMA_BIN:-}" ]; then
            say "round $r: 2. llama-batched-bench, the same checkpoint as GGUF q4_0 (pp32, tg64)"
            "$LLAMA_BIN/llama-batched-bench" -m "$MODELS/llama-1.1b-q4_0.gguf" -c 2048 -b 512 -ub 512 \
                -npp 32 -ntg 64 -npl 1,8 -t "$THREADS" 2>&1 | grep -E '^\|'
        fi
    fi
    if ! skip 3; then
        say "round $r: 3. opencl and vulkan diffllama-134m f16, --parallel 1,8 (pp32, tg32)"
        "$D" bench --model "$MODELS/diffllama-134m" --backend opencl,vulkan -p 32 -n 32 -r 2 \
            --parallel 1,8 2>/dev/null | sed -n '/^parallel/,$p'
    fi
    if ! skip 4 && [ -n "${BEFORE:-}" ]; then
        for b in before after; do
            bin=$D
            [ $b = before ] && bin=$BEFORE/diffrt
            say "round $r: 4. one sequence, $b: cpu diffllama-134m f16 (pp512, tg64)"
            "$bin" bench --model "$MODELS/diffllama-134m" --backend cpu --threads "$THREADS" -p 512 -n 64 \
                -r "$REPS" 2>/dev/null | grep -E '^cpu '
        done
    fi
done
