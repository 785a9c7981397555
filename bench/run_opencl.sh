#!/usr/bin/env bash
# The issue-3 figures, side by side in one run on this machine:
#   1. MATMUL: diffrt OpenCL (and the CPU reference ref, and the fast cpu) vs OpenBLAS cblas_sgemm
#      at 1024^3 and a 4096x1024 weight at T=1 and T=512;
#   2. DIFF_ATTN fused vs decomposed on OpenCL at T=S=1024, H=8, dk=64, dv=128;
#   3. end-to-end prefill and decode tokens/s of the largest fixture model,
#      OpenCL vs the CPU reference (ref) and the fast CPU backend (cpu).
# Usage: bench/run_opencl.sh [BUILD_DIR] [OUT_FILE]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OUT=${2:-bench/results/opencl-pocl-$(date +%Y%m%d).txt}
REPS=${REPS:-5}
D="$B/diffrt"
[ -x "$D" ] || { echo "no $D: build first (cmake -B $B && cmake --build $B)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
{
  echo "# diffrt OpenCL figures, $(date -u +%Y-%m-%dT%H:%MZ)"
  echo "# host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  "$D" info | sed 's/^/# /'
  echo
  echo "## 1. MATMUL (median of $REPS after 1 warm-up)"
  "$D" conform --perf --backend ref,cpu,opencl --op MATMUL --repeats "$REPS" --warmup 1
  if [ -x "$B/bench/bench_blas_sgemm" ]; then "$B/bench/bench_blas_sgemm" "$REPS"; else echo "(bench_blas_sgemm not built: no OpenBLAS)"; fi
  echo
  echo "## 2. DIFF_ATTN fused vs decomposed"
  "$D" conform --perf --backend opencl --op DIFF_ATTN --repeats 3 --warmup 1
  echo
  echo "## 3. end to end: largest fixture model, 32-token prompt + 31 decoded tokens"
  M=tests/fixtures/unilm_v1
  TOK=$(seq 3 34 | paste -sd,)
  for be in ref cpu opencl; do
    echo "### $be"
    for i in 1 2 3; do "$D" run --model "$M" --tokens "$TOK" -n 32 --temp 0 --no-stop --backend "$be" 2>&1 >/dev/null; done
  done
  echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT"
