#!/usr/bin/env bash
# Issue 17's decode-speed figures, side by side in one run on this machine:
# the ~134M DiffLlama of python/bench/make_models.py (f16) and its q8_0 and
# q4_0 copies (diffrt quantize), decoded on the cpu backend (the q8_0 and
# q4_0 GEMVs on int8 dot products where the CPU has them, on repacked weights;
# on the checkpoint's layout, DIFFRT_CPU_REPACK=0; the block kernel,
# DIFFRT_CPU_QDOT=0; and the checkpoint read into memory, DIFFRT_NO_MMAP=1)
# and on OpenCL, rounds interleaved:
#   - per backend, model and setting, `diffrt bench -p 0 -n 64 -r 3`:
#     tg64 tok/s (mean of 3) and its roofline fraction, tok/s x bytes per
#     token / bandwidth, with the bytes per token of docs/bench-json.md
#     (every 2-D weight once at its dtype's bytes, one embedding row, and the
#     f32 K/V cache up to the mean decode position);
#   - the bandwidth: read bandwidth (bench_membw, 2 MiB pages) measured right
#     before and right after that run, the larger of the two (this host's
#     bandwidth swings by 2x within minutes; one figure per round put some
#     fractions above 1);
#   - at the end, per (backend, model, setting), the median, min and max over
#     the rounds of both, then `diffrt bench` per model once (the peaks it
#     measures itself, and the per-op decode times).
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
# read bandwidth now: the median of 3 passes of bench_membw (2 MiB pages)
membw() { "$B/bench/bench_membw" "$THREADS" 1024 3 | sed -n 's/.* median \([0-9.]*\) .*/\1/p'; }
mkdir -p "$(dirname "$OUT")"

{
    echo "# diffrt q8_0 / q4_0 decode, $(date -u +%Y-%m-%dT%H:%MZ), $("$D" --version | head -1)"
    echo "# command: THREADS=$THREADS ROUNDS=$ROUNDS bench/run_quant.sh $B"
    echo "# host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
    "$D" info | grep -A1 '^  cpu\|^  opencl' | sed 's/^/# /' || true
    for r in $(seq 1 "$ROUNDS"); do
        echo
        echo "## round $r (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
        for be in $BACKENDS; do
            for t in f16 q8_0 q4_0; do
                m=$M
                [ "$t" = f16 ] || m="$M-$t"
                # settings side by side: the defaults, then on cpu the
                # checkpoint read into memory instead of mapped, and for
                # q8_0 / q4_0 the int8-dot GEMV on the checkpoint's layout
                # instead of the repacked one, and the block kernel
                modes="default"
                [ "$be" = cpu ] && modes="$modes DIFFRT_NO_MMAP=1"
                [ "$be" = cpu ] && [ "$t" != f16 ] && modes="$modes DIFFRT_CPU_REPACK=0 DIFFRT_CPU_QDOT=0"
                for mode in $modes; do
                    e=()
                    [ "$mode" = default ] || e=("$mode")
                    # CSV: backend,device,test,n_tokens,repetitions,mean_tok_s,sd_tok_s,
                    # roofline_fraction,roofline_flag,peak,peak_unit (the device may hold commas)
                    bw0=$(membw)
                    row=$(env ${e[@]+"${e[@]}"} "$D" bench --model "$m" --backend "$be" -p 0 -n 64 -r 3 \
                        --peak-gbps "$bw0" --csv 2>/dev/null | awk -F, '$(NF-8) == "tg64" {print $(NF-5), $(NF-3)}' || true)
                    bw1=$(membw)
                    set -- ${row:-failed -}
                    # against the larger of the two bandwidths
                    read -r bw fr < <(awk -v a="$bw0" -v b="$bw1" -v f="$2" \
                        'BEGIN { m = a > b ? a : b; if (f == "-") print m, "-"; else printf "%.2f %.4f\n", m, f * a / m }')
                    echo "decode $be $t $mode $1 tok/s roofline $fr of $bw GB/s (bench_membw before $bw0, after $bw1)"
                done
            done
        done
        echo "# load after round $r: $(cut -d' ' -f1-3 /proc/loadavg)"
    done
    echo
    echo "## summary over the $ROUNDS rounds: tok/s and roofline fraction, median (min-max)"
} 2>&1 | tee "$OUT"
# the rows above, grouped by backend, model and setting
awk '$1 == "decode" && $5 != "failed" {
        k = $2 " " $3 " " $4; n[k]++; tok[k, n[k]] = $5; fr[k, n[k]] = $8
     }
     function med(a, k, c,   i, j, t, v) {
         for (i = 1; i <= c; i++) v[i] = a[k, i]
         for (i = 2; i <= c; i++) for (j = i; j > 1 && v[j - 1] > v[j]; j--) { t = v[j]; v[j] = v[j - 1]; v[j - 1] = t }
         return sprintf("%s (%s-%s)", c % 2 ? v[(c + 1) / 2] : (v[c / 2] + v[c / 2 + 1]) / 2, v[1], v[c])
     }
     END { for (k in n) printf "%-36s %s tok/s   roofline %s\n", k, med(tok, k, n[k]), med(fr, k, n[k]) }' \
    "$OUT" | sort | tee -a "$OUT"
{
    echo
    echo "## diffrt bench (-p 32 -n 64 -r 3), per model"
    for t in f16 q8_0 q4_0; do
        m=$M
        [ "$t" = f16 ] || m="$M-$t"
        # shellcheck disable=SC2086
        "$D" bench --model "$m" --backend "$(echo $BACKENDS | tr ' ' ,)" -p 32 -n 64 -r 3 2>/dev/null || true
    done
} 2>&1 | tee -a "$OUT"
