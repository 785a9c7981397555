#!/usr/bin/env bash
# Issue 16's figures, side by side in one sitting on this machine:
#   1. MATMUL at conform --perf's shapes on vulkan and opencl, with the
#      kernel variant each ran; opencl again through CLBlast
#      (DIFFRT_OPENCL_GEMM=clblast) when the build has it;
#   2. peers when given (never built here): ggml's Vulkan backend on the same
#      driver ($GGML_VK_BENCH: a program taking "REPS vk" that prints one
#      line per shape) and a standalone CLBlast SGEMM ($CLBLAST_BENCH REPS);
#   3. fused vs decomposed DIFF_ATTN (prefill T=S=1024 and decode S=1024),
#      PERMUTE and the elementwise ops on both backends;
#   4. a tiny model's decode on vulkan and opencl (diffrt bench).
# Rounds are interleaved (diffrt, peers, diffrt ...); load is printed
# before and after each round.
# usage: REPS=5 ROUNDS=2 [GGML_VK_BENCH=...] [CLBLAST_BENCH=...] bench/run_vk_ocl.sh [BUILD_DIR] [OUT]
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OUT=${2:-bench/results/vk-ocl-$(date +%Y%m%d).txt}
REPS=${REPS:-5}
ROUNDS=${ROUNDS:-2}
D="$B/diffrt"
[ -x "$D" ] || { echo "no $D: build first (cmake -B $B && cmake --build $B)" >&2; exit 1; }
mkdir -p "$(dirname "$OUT")"
{
  echo "# diffrt Vulkan / OpenCL figures, $(date -u +%Y-%m-%dT%H:%MZ), commit $("$D" --version | head -1)"
  echo "# host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
  "$D" info | sed 's/^/# /'
  for r in $(seq 1 "$ROUNDS"); do
    echo
    echo "## round $r (load before: $(cut -d' ' -f1-3 /proc/loadavg))"
    echo "### MATMUL, diffrt (median of $REPS after 1 warm-up)"
    "$D" conform --perf --backend vulkan,opencl --op MATMUL --repeats "$REPS" --warmup 1
    if "$D" info | grep -q "^  opencl  available"; then
      echo "### MATMUL, diffrt opencl through CLBlast (DIFFRT_OPENCL_GEMM=clblast; f32 weights only)"
      DIFFRT_OPENCL_GEMM=clblast "$D" conform --perf --backend opencl --op MATMUL --repeats "$REPS" --warmup 1 || true
    fi
    if [ -n "${GGML_VK_BENCH:-}" ]; then
      echo "### MATMUL, ggml Vulkan ($GGML_VK_BENCH $REPS vk)"
      GGML_VK_VISIBLE_DEVICES=0 "$GGML_VK_BENCH" "$REPS" vk
    fi
    if [ -n "${CLBLAST_BENCH:-}" ]; then
      echo "### MATMUL, CLBlast standalone ($CLBLAST_BENCH $REPS)"
      "$CLBLAST_BENCH" "$REPS"
    fi
    echo "### DIFF_ATTN fused vs decomposed, PERMUTE, elementwise"
    "$D" conform --perf --backend vulkan,opencl --op DIFF_ATTN,PERMUTE,ADD,SWIGLU --repeats 3 --warmup 1
    echo "### tiny model decode (diff-v1-tiny, 128-token prompt, 64 decoded)"
    "$D" bench --model models/diff-v1-tiny --backend vulkan,opencl -p 128 -n 64 -r 3 --md 2>/dev/null || true
    echo "# load after round $r: $(cut -d' ' -f1-3 /proc/loadavg)"
  done
} 2>&1 | tee "$OUT"
