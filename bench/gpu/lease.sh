#!/usr/bin/env bash
# Issue 31's whole GPU check in one call of the device tool, within a time
# budget: the stages of run.sh (without its build), conformance on NVIDIA's
# Vulkan driver, and diffrt bench on the 1B-class model (cuda and vulkan,
# --parallel 1,8,32), most valuable first, each under a time limit so that a
# hang costs one stage, not the lease.
#
# It runs a build made on the developer's machine (same x86-64, CUDA 13.0),
# carried in .gl/ (ignored by git):
#   .gl/b/    diffrt, libdiffrt.so*, libdiffrt-{cuda,vulkan,opencl}.so,
#             bench_gpu_ops, bench_gpu_decode_1b (copies from build-gpu/)
#   .gl/lib/  shared libraries the device image may lack (cJSON, PCRE2,
#             libmicrohttpd and its TLS chain, libcudart)
#   .gl/*.deb the Vulkan/GL loaders (the device tool's README)
#
#   BUDGET=500 bash bench/gpu/lease.sh     # seconds for all stages
#   STAGES="conform_vulkan gemv" bash bench/gpu/lease.sh   # only these
#
# Stages, in order: info conform_cuda conform_vulkan conform_kv conform_kv_q8_0 conform_fast gemv ops
# torch decode decode_gemv1 bench_cuda bench_cuda_fast bench_vulkan
# batch_step batch_step_unstaged batch_step_fast ncu_decode ncu_batch conform_vulkan_denorm
# conform_nograph perf_f32 perf_fast conform_fast_models.
#
# Output: $OUT/summary.txt (updated after every stage) and $OUT/results.tgz
# (every log and JSON file, under gpu-run/).
set -u
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT" || exit 1
FINAL=${OUT:-/tmp/gpu-lease-out}
mkdir -p "$FINAL"
R=/tmp/gpu-run
rm -rf "$R"
mkdir -p "$R"
BUDGET=${BUDGET:-500}
T0=$SECONDS
S=$R/summary.txt

note() { printf '%s\n' "$*" | tee -a "$S"; }
pack() {
    cp "$S" "$FINAL/summary.txt"
    tar czf "$FINAL/results.tgz" -C /tmp gpu-run 2>/dev/null
}
left() { echo $((BUDGET - (SECONDS - T0))); }

# stage NAME SECONDS CMD...: CMD's output in $R/NAME.log, under a limit of
# SECONDS (or what is left of the budget); exit status and time noted.
# Skipped when STAGES is set and does not name it.
stage() {
    local name=$1 lim=$2
    shift 2
    case " ${STAGES:-$name} " in *" $name "*) ;; *) return 0 ;; esac
    local l
    l=$(left)
    if [ "$l" -lt 15 ]; then
        note "-- $name: skipped, budget spent"
        return 0
    fi
    [ "$lim" -gt "$l" ] && lim=$l
    note "-- $name ($lim s max): $*"
    local t=$SECONDS
    timeout -k 5 "$lim" stdbuf -oL -eL "$@" >"$R/$name.log" 2>&1
    local rc=$?
    note "   exit $rc after $((SECONDS - t)) s"
    grep -iE 'fail|error|mismatch' "$R/$name.log" | head -n 15 | sed 's/^/   ! /' | tee -a "$S"
    tail -n "${TAILN:-12}" "$R/$name.log" | sed 's/^/   | /' | tee -a "$S"
    pack
    return 0
}

# the carried Vulkan loader, libraries, and the NVIDIA Vulkan ICD
if ! ldconfig -p | grep -q 'libvulkan\.so\.1'; then
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
fi
case ":$PATH:" in *:/usr/local/cuda/bin:*) ;; *) PATH=$PATH:/usr/local/cuda/bin ;; esac
cub=$(find /usr/local /opt /usr/lib -name 'libcublasLt.so.13*' 2>/dev/null | head -n 1)
LD_LIBRARY_PATH=$ROOT/.gl/b:$ROOT/.gl/lib${cub:+:$(dirname "$cub")}:/usr/local/cuda/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export LD_LIBRARY_PATH PYTHONUNBUFFERED=1
if ! ls /usr/share/vulkan/icd.d/nvidia* /etc/vulkan/icd.d/nvidia* >/dev/null 2>&1; then
    for j in /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json /usr/local/nvidia/share/vulkan/icd.d/*.json; do
        if [ -f "$j" ]; then
            export VK_DRIVER_FILES=$j
            break
        fi
    done
fi
B=$ROOT/.gl/b
M=/tmp/diffrt_1b
note "== diffrt GPU lease $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?'), budget $BUDGET s"
note "cublas: ${cub:-not found}; VK_DRIVER_FILES=${VK_DRIVER_FILES:-(loader default)}"
{
    nvidia-smi
    nvidia-smi --query-gpu=name,compute_cap,memory.total,clocks.max.sm,clocks.max.mem,driver_version --format=csv
    nvcc --version
    uname -a
    nproc
    ldd "$B/diffrt" "$B/libdiffrt-cuda.so" "$B/libdiffrt-vulkan.so"
} >"$R/device.txt" 2>&1
note "device: $(nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -n 1)"
grep 'not found' "$R/device.txt" | sed 's/^/missing: /' | tee -a "$S"

TAILN=0 stage info 30 "$B/diffrt" info
[ -f "$R/info.log" ] && sed -n '1,/^settings/p' "$R/info.log" | sed 's/^/   | /' | tee -a "$S"
stage conform_cuda 90 env DIFFRT_CUDA_VERBOSE=1 "$B/diffrt" conform --backend cpu,cuda \
    --require cpu,cuda --models tests/fixtures --json "$R/conform_cuda.json"
stage conform_vulkan 120 "$B/diffrt" conform --require vulkan --backend vulkan \
    --models tests/fixtures --json "$R/conform_vulkan.json"
# the f16 and q8_0 KV caches on the GPU's drivers (KV cases and model sessions)
stage conform_kv 90 "$B/diffrt" conform --backend cuda,vulkan --require cuda,vulkan --kv-type f16 \
    --op KV_WRITE,ATTN,DIFF_ATTN --models tests/fixtures --json "$R/conform_kv_f16.json"
stage conform_kv_q8_0 90 "$B/diffrt" conform --backend cuda,vulkan --require cuda,vulkan --kv-type q8_0 \
    --op KV_WRITE,ATTN,DIFF_ATTN --models models --json "$R/conform_kv_q8_0.json"
stage conform_fast 90 cmake -DEXE="$B/diffrt" -DFIXTURES="$ROOT/tests/fixtures" \
    -DOUT="$R/conform_fast.json" -P backends/cuda/emu/check_fast.cmake
TAILN=24 stage gemv 90 "$B/bench_gpu_ops" --gemv-only --json "$R/gemv.json"
stage ops 60 "$B/bench_gpu_ops" --skip-gemv --json "$R/ops.json"
stage torch 90 python3 bench/gpu/torch_ref.py --json "$R/torch_ref.json" --ours "$R/ops.json"
stage decode 120 "$B/bench_gpu_decode_1b" --dir "$M" --json "$R/decode_1b.json"
stage decode_gemv1 60 env DIFFRT_CUDA_GEMV=1 "$B/bench_gpu_decode_1b" --dir "$M" --json "$R/decode_1b_gemv1.json"
TAILN=30 stage bench_cuda 100 "$B/diffrt" bench --model "$M" --backend cuda -p 512 -n 128 -r 3 \
    --parallel 1,8,32 --json "$R/bench_cuda.json"
TAILN=8 stage bench_cuda_fast 100 env DIFFRT_CUDA_PRECISION=fast "$B/diffrt" bench --model "$M" --backend cuda \
    -p 512 -n 128 -r 3 --parallel 1,8,32 --json "$R/bench_cuda_fast.json"
TAILN=30 stage bench_vulkan 100 "$B/diffrt" bench --model "$M" --backend vulkan -p 512 -n 128 -r 3 \
    --json "$R/bench_vulkan.json"
stage batch_step 90 "$B/bench_gpu_batch_step" --model "$M" --seqs 1,8,32 --prompt 512 --steps 16 \
    --json "$R/batch_step.json"
stage batch_step_unstaged 90 env DIFFRT_CUDA_STAGED=0 "$B/bench_gpu_batch_step" --model "$M" --seqs 1,8,32 \
    --prompt 512 --steps 16 --json "$R/batch_step_unstaged.json"
stage batch_step_fast 90 env DIFFRT_CUDA_PRECISION=fast "$B/bench_gpu_batch_step" --model "$M" --seqs 1,8,32 \
    --prompt 512 --steps 16 --json "$R/batch_step_fast.json"
# kernel times of a decode step (Nsight Compute, one pass per kernel): one
# sequence, and 32 (short prompts keep the prefill kernels few)
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -n 1)
if [ -n "$NCU" ]; then
    TAILN=40 stage ncu_decode 100 "$NCU" --metrics gpu__time_duration.sum --print-summary per-kernel \
        "$B/bench_gpu_batch_step" --model "$M" --seqs 1 --prompt 16 --steps 4
    TAILN=40 stage ncu_batch 100 "$NCU" --metrics gpu__time_duration.sum --print-summary per-kernel \
        "$B/bench_gpu_batch_step" --model "$M" --seqs 32 --prompt 16 --steps 4
else
    note "-- ncu: not found"
fi
stage conform_vulkan_denorm 60 env DIFFRT_VULKAN_DENORM=force "$B/diffrt" conform --backend vulkan --op MATMUL
stage conform_nograph 60 env DIFFRT_CUDA_GRAPH=0 "$B/diffrt" conform --backend cpu,cuda \
    --require cpu,cuda --models tests/fixtures --json "$R/conform_nograph.json"
stage perf_f32 60 "$B/diffrt" conform --perf --backend cuda --json "$R/perf_f32.json"
stage perf_fast 60 env DIFFRT_CUDA_PRECISION=fast "$B/diffrt" conform --perf --backend cuda \
    --json "$R/perf_fast.json"
stage conform_fast_models 60 env DIFFRT_CUDA_PRECISION=fast "$B/diffrt" conform --backend cpu,cuda \
    --models tests/fixtures --json "$R/conform_fast_models.json"
note "== done after $((SECONDS - T0)) s"
pack
