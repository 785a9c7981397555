#!/usr/bin/env bash
# The issue-11 CPU figures, side by side in one run on this machine:
#   0. read bandwidth (bench_membw), the decode roofline's denominator;
#   1. end to end, ~134M DiffLlama and ~134M Llama (random f16 weights, made
#      by python/bench/make_models.py), 512-token prompt + 64 new tokens:
#      diffrt cpu, PyTorch/transformers f32 and bf16 interleaved round by round
#      on the same threads; diffrt ref and OpenCL (PoCL) once each (slow);
#      decode as a fraction of the roofline (bytes read per token / read
#      bandwidth); peak RSS of diffrt cpu against checkpoint + KV + logits row;
#   2. MATMUL: diffrt cpu vs OpenBLAS sgemm on the conform --perf shapes,
#      interleaved;
#   3. every conform --perf shape on cpu (fused vs decomposed DIFF_ATTN at
#      T=S=1024 among them);
#   4. ggml's CPU backend on the same op shapes, when GGML_BENCH names a peer
#      harness built beside the project (never built or fetched by this
#      script; see bench/results/README.md).
# Usage: bench/run_cpu.sh [BUILD_DIR] [OUT_FILE]
#   THREADS  threads for every system (default 2)
#   REPS     interleaved rounds (default 5)
#   MODELS   folder of the two checkpoints (default /tmp/diffrt-bench-models;
#            made there when missing: needs pip install -r python/requirements.txt)
#   GGML_BENCH  optional: path of a ggml peer harness taking THREADS REPS
set -euo pipefail
cd "$(dirname "$0")/.."
B=${1:-build}
OUT=${2:-bench/results/cpu-$(date +%Y%m%d).md}
THREADS=${THREADS:-2}
REPS=${REPS:-5}
MODELS=${MODELS:-/tmp/diffrt-bench-models}
D="$B/diffrt"
[ -x "$D" ] || { echo "run_cpu: no $D: build first (cmake -B $B && cmake --build $B)" >&2; exit 1; }
[ -x "$B/bench/bench_membw" ] || { echo "run_cpu: no $B/bench/bench_membw: build the bench targets" >&2; exit 1; }
python3 python/bench/make_models.py --out "$MODELS" >&2
export DIFFRT_THREADS=$THREADS OPENBLAS_NUM_THREADS=$THREADS OMP_NUM_THREADS=$THREADS
export TRANSFORMERS_VERBOSITY=error HF_HUB_DISABLE_PROGRESS_BARS=1
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir -p "$(dirname "$OUT")"

# "prefill: 512 tokens in 0.858 s (596.8 tok/s)" -> 596.8
toks() { sed -n "s/^$1: .*(\([0-9.]*\) tok\/s)/\1/p"; }
# median and min of the numbers on stdin
stats() { python3 -c 'import sys,statistics as s; v=[float(x) for x in sys.stdin.read().split()]; print("min %.1f median %.1f (n=%d)" % (min(v), s.median(v), len(v)) if v else "no data")'; }

{
echo "# diffrt CPU figures, $(date -u +%Y-%m-%dT%H:%MZ)"
echo
echo "Command: \`THREADS=$THREADS REPS=$REPS bash bench/run_cpu.sh $B\`"
echo
echo '```'
echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //'), load before: $(cut -d' ' -f1-3 /proc/loadavg)"
"$D" info | grep -A1 '^  cpu\|^  ref\|^  opencl' || true
python3 -c 'import torch, transformers; print("torch", torch.__version__, "transformers", transformers.__version__)'
echo '```'
echo
echo "## 0. Read bandwidth ($THREADS threads, 1 GiB, 7 repeats)"
echo '```'
"$B/bench/bench_membw" "$THREADS" 1024 7 | tee "$TMP/bw"
echo '```'

echo
echo "## 1. End to end: 512-token prompt, 64 new tokens, $THREADS threads"
for M in diffllama-134m llama-134m; do
  MD="$MODELS/$M"
  IDS=$(python3 python/bench/torch_bench.py --model "$MD" --prompt 512 --print-ids)
  echo
  echo "### $M"
  echo '```'
  for r in $(seq "$REPS"); do
    "$D" run --model "$MD" --tokens "$IDS" -n 65 --no-stop --ctx 577 2>"$TMP/e" >/dev/null
    toks prefill <"$TMP/e" >>"$TMP/$M.cpu.pre"; toks decode <"$TMP/e" >>"$TMP/$M.cpu.dec"
    # the bandwidth of this minute (it drifts on a shared machine), for the roofline
    "$B/bench/bench_membw" "$THREADS" 1024 3 | sed -n 's/.*median \([0-9.]*\).*/\1/p' >>"$TMP/$M.bw"
    if [ "$THREADS" -gt 1 ]; then
      DIFFRT_THREADS=1 "$D" run --model "$MD" --tokens "$IDS" -n 65 --no-stop --ctx 577 2>"$TMP/e" >/dev/null
      toks prefill <"$TMP/e" >>"$TMP/$M.cpu-1t.pre"; toks decode <"$TMP/e" >>"$TMP/$M.cpu-1t.dec"
    fi
    for dt in f32 bf16; do
      python3 python/bench/torch_bench.py --model "$MD" --threads "$THREADS" --dtype $dt --prompt 512 --new 64 --repeats 1 >"$TMP/t" 2>"$TMP/terr" ||
        { echo "torch $dt failed:"; cat "$TMP/terr"; }
      sed -n 's/.*prefill tok\/s: min \([0-9.]*\).*/\1/p' "$TMP/t" >>"$TMP/$M.torch-$dt.pre"
      sed -n 's/.*decode tok\/s: min \([0-9.]*\).*/\1/p' "$TMP/t" >>"$TMP/$M.torch-$dt.dec"
    done
    echo "round $r done (load $(cut -d' ' -f1 /proc/loadavg))"
  done
  for be in ref opencl; do
    if "$D" run --model "$MD" --tokens "$IDS" -n 65 --no-stop --ctx 577 --backend $be 2>"$TMP/e" >/dev/null; then
      toks prefill <"$TMP/e" >>"$TMP/$M.$be.pre"; toks decode <"$TMP/e" >>"$TMP/$M.$be.dec"
    else
      echo "$be: $(tail -1 "$TMP/e")"
    fi
  done
  /usr/bin/time -f '%M' -o "$TMP/rss" "$D" run --model "$MD" --tokens "$IDS" -n 65 --no-stop --ctx 577 2>/dev/null >/dev/null
  echo '```'
  echo
  echo "| system | prefill tok/s | decode tok/s |"
  echo "|---|---|---|"
  for sys in cpu cpu-1t torch-f32 torch-bf16 ref opencl; do
    [ -s "$TMP/$M.$sys.pre" ] || continue
    name=$sys; case $sys in cpu|ref|opencl) name="diffrt $sys";; cpu-1t) name="diffrt cpu, 1 thread";; esac
    echo "| $name | $(stats <"$TMP/$M.$sys.pre") | $(stats <"$TMP/$M.$sys.dec") |"
  done
  # napkin math of the roofline: every 2-D weight but the embedding is read once
  # per decode token, plus the f32 KV cache up to the mean decode position
  python3 - "$MD" "$TMP/$M.bw" "$TMP/$M.cpu.dec" "$TMP/rss" <<'PY'
import json, struct, sys, os, statistics
md, bwf, dec, rssf = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
bws = [float(x) for x in open(bwf).read().split()]
bw = statistics.median(bws)
cfg = json.load(open(os.path.join(md, "config.json")))
with open(os.path.join(md, "model.safetensors"), "rb") as f:
    n = struct.unpack("<Q", f.read(8))[0]
    hdr = json.loads(f.read(n))
size = {"F32": 4, "F16": 2, "BF16": 2}
wbytes = sum((e["data_offsets"][1] - e["data_offsets"][0]) for k, e in hdr.items()
             if k != "__metadata__" and len(e["shape"]) == 2 and "embed_tokens" not in k)
L, D = cfg["num_hidden_layers"], cfg["hidden_size"]
hd = cfg.get("head_dim") or D // cfg["num_attention_heads"]
kv_row = 2 * cfg["num_key_value_heads"] * hd * 4 * L   # K and V, f32, all layers
kv_read = kv_row * (512 + 32)                           # mean position over the 64 steps
per_tok = wbytes + kv_read
roof = bw * 1e9 / per_tok
d = [float(x) for x in open(dec).read().split()]
ck = os.path.getsize(os.path.join(md, "model.safetensors"))
kv_cap = kv_row * 577
rss = int(open(rssf).read().split()[-1]) * 1024
budget = ck + kv_cap + 4 * cfg["vocab_size"]
print()
print(f"Roofline: {wbytes/1e6:.1f} MB of weights + {kv_read/1e6:.1f} MB of KV cache read per decode token; "
      f"read bandwidth (median of the {len(bws)} rounds' measurements, {min(bws):.1f}-{max(bws):.1f}) {bw:.2f} GB/s "
      f"-> {roof:.1f} tok/s. diffrt cpu decode median {statistics.median(d):.1f} tok/s "
      f"= {statistics.median(d)/roof:.2f} of the roofline (best {max(d)/roof:.2f}).")
ratios = [x * per_tok / (b * 1e9) for x, b in zip(d, bws)]
print()
print("Per round, decode / the roofline of that round's bandwidth: " + ", ".join(f"{r:.2f}" for r in ratios))
print()
print(f"Peak RSS of diffrt cpu: {rss/2**20:.0f} MiB = {rss/budget:.2f} x (checkpoint {ck/2**20:.0f} MiB + "
      f"KV cache at --ctx 577 {kv_cap/2**20:.0f} MiB + one logits row).")
PY
done

echo
echo "## 2. MATMUL: diffrt cpu vs OpenBLAS sgemm ($THREADS threads, median of 5, interleaved $REPS rounds)"
echo '```'
for r in $(seq "$REPS"); do
  "$D" conform --perf --backend cpu --op MATMUL --repeats 5 --warmup 1 | grep '^MATMUL'
  if [ -x "$B/bench/bench_blas_sgemm" ]; then "$B/bench/bench_blas_sgemm" 5 | grep '^MATMUL'; fi
done | sort -s -k3,3 -k2,2
echo '```'

echo
echo "## 3. Every --perf shape on cpu (fused vs decomposed DIFF_ATTN at T=S=1024 among them)"
echo '```'
"$D" conform --perf --backend cpu --repeats 5 --warmup 1
echo '```'

if [ -n "${GGML_BENCH:-}" ] && [ -x "$GGML_BENCH" ]; then
  echo
  echo "## 4. ggml CPU backend, same shapes ($GGML_BENCH, $THREADS threads), interleaved with diffrt cpu"
  echo '```'
  for r in $(seq 3); do
    "$GGML_BENCH" "$THREADS" 5
    "$D" conform --perf --backend cpu --op MATMUL,ATTN,DIFF_ATTN --repeats 5 --warmup 1 | grep -E '^(MATMUL|ATTN|DIFF_ATTN) '
    # the bf16 mode (AVX512-BF16 dot products, as ggml uses for bf16 weights), where the CPU has it
    DIFFRT_CPU_PRECISION=bf16 "$D" conform --perf --backend cpu --op MATMUL --repeats 5 --warmup 1 2>/dev/null |
      grep -E '^MATMUL .*T=512 .*w=bf16' | sed 's/^MATMUL        cpu     /MATMUL        cpu-bf16/'
  done
  echo '```'
fi
echo
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT"
