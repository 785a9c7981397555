#!/usr/bin/env bash
# Issue 28's server figures, side by side in one run (rounds interleaved):
#   1. cpu, the 134M DiffLlama f16 behind diffrt serve --parallel 8: the
#      concurrency sweep 1,2,4,8,16 (bench/serve_load.py): aggregate output
#      tok/s at 8 clients against 1, and TTFT at 8 clients against 1
#      (32-token prompts);
#   2. cpu, the 1.1B Llama at q4_0: diffrt serve --parallel 8 against
#      llama.cpp's llama-server -np 8 on the same checkpoint (GGUF q4_0, as
#      bench/run_batched.sh), same threads, 8 clients (and 1);
#   3. 500 idle connections to diffrt serve: /health latency (min/median of
#      20) and the RSS they cost.
#
#   MODELS=/tmp/bench-models LLAMA_BIN=.../llama.cpp/build/bin \
#     bash bench/run_serve.sh [BUILD_DIR] [OUT_PREFIX]
#
# MODELS as bench/run_batched.sh (diffllama-134m, llama-1.1b-q4_0,
# llama-1.1b-q4_0.gguf), the two diffrt models with a placeholder
# tokenizer.json (python/bench/make_placeholder_tokenizer.py DIR; prompts are
# 32 random token ids, so no tokenizer is involved in either server). LLAMA_BIN holds llama-server (llama.cpp from PyPI's
# llama-cpp-python source package, built outside the repository: cmake
# -DLLAMA_BUILD_SERVER=ON, target llama-server); without it part 2 runs
# diffrt alone. diffrt runs the 1.1B in both cpu.precision modes: f32, and
# int8 (x in one int8 level, as llama.cpp's q8_0 activations). ROUNDS
# (default 3), THREADS (default 2), REQS (requests per client, default 4),
# NTOK (tokens per request, default 64), SPREAD (each request's max_tokens
# uniform in NTOK x [1-S, 1+S], default 0.5; 0 keeps the clients in
# lockstep: serve_load.py --spread), CTX (positions per slot, default 256), SKIP (parts to skip, e.g. "2"),
# CONC (part 1's client counts, default 1,2,4,8,16), BASE (another build
# directory, e.g. of an older commit: part 1 then runs its diffrt serve too,
# right after this build's in each round, labelled "base"). Raw output and JSON
# go to OUT_PREFIX.txt and OUT_PREFIX-*.json (default
# bench/results/serve-<date>).
set -uo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PREFIX=${2:-bench/results/serve-$(date -u +%Y%m%d)}
MODELS=${MODELS:?set MODELS to the folder of the benchmark models}
ROUNDS=${ROUNDS:-3}
THREADS=${THREADS:-2}
REQS=${REQS:-4}
NTOK=${NTOK:-64}
CTX=${CTX:-256}
SPREAD=${SPREAD:-0.5}
SKIP=${SKIP:-}
CONC=${CONC:-1,2,4,8,16}
BASE=${BASE:-}
D=$BUILD/diffrt
PY=${PYTHON:-python3}
[ -x "$D" ] || { echo "run_serve: $D is not built" >&2; exit 2; }
[ -z "$BASE" ] || [ -x "$BASE/diffrt" ] || { echo "run_serve: $BASE/diffrt is not built" >&2; exit 2; }
exec > >(tee "$PREFIX.txt") 2>&1
TMP=$(mktemp -d)
PID=
cleanup() { [ -n "$PID" ] && kill "$PID" 2>/dev/null; wait 2>/dev/null; rm -rf "$TMP"; }
trap cleanup EXIT

say() { printf '\n== %s (%s; %s)\n' "$1" "$(date -u +%H:%M:%S)" "$(uptime | sed 's/.*load/load/')"; }
skip() { case ",$SKIP," in *",$1,"*) return 0 ;; esac; return 1; }

# start_diffrt MODEL_DIR [PRECISION] [DIFFRT]: diffrt serve on a free port; sets PORT and PID
start_diffrt() {
    rm -f "$TMP/ready"
    "${3:-$D}" serve --model "$1" --set "cpu.precision=${2:-f32}" --threads "$THREADS" --parallel 8 --ctx "$CTX" \
        --port 0 --ready-file "$TMP/ready" \
        --max-conns-per-ip 1024 --queue 64 > "$TMP/server.log" 2>&1 &
    PID=$!
    for _ in $(seq 600); do [ -s "$TMP/ready" ] && break; sleep 0.1; done
    [ -s "$TMP/ready" ] || { echo "run_serve: diffrt serve did not start:"; cat "$TMP/server.log"; exit 1; }
    PORT=$(awk '{print $2}' "$TMP/ready")
}

# start_llama GGUF: llama-server -np 8 with the same context per slot
start_llama() {
    PORT=$((20000 + RANDOM % 20000))
    "$LLAMA_BIN/llama-server" -m "$1" -t "$THREADS" -tb "$THREADS" -np 8 -c $((CTX * 8)) -b 512 -ub 512 \
        --host 127.0.0.1 --port "$PORT" > "$TMP/server.log" 2>&1 &
    PID=$!
    for _ in $(seq 600); do curl -sf "127.0.0.1:$PORT/health" > /dev/null && break; sleep 0.1; done
    curl -sf "127.0.0.1:$PORT/health" > /dev/null || { echo "run_serve: llama-server did not start:"; tail "$TMP/server.log"; exit 1; }
}

stop_server() { kill -TERM "$PID"; wait "$PID" 2>/dev/null; PID=; }

load() { # LABEL CONCURRENCY JSON
    "$PY" bench/serve_load.py --url "http://127.0.0.1:$PORT" --concurrency "$2" --requests "$REQS" \
        --max-tokens "$NTOK" --spread "$SPREAD" --prompt-tokens 32 --vocab 32000 --label "$1" --json "$3"
}

echo "run_serve: $(git rev-parse --short HEAD) $(date -u +%FT%TZ), $(nproc) CPUs, threads $THREADS, rounds $ROUNDS, $REQS requests x $NTOK tokens (spread $SPREAD) per client"
grep -m1 'model name' /proc/cpuinfo

for r in $(seq 1 "$ROUNDS"); do
    if ! skip 1; then
        say "round $r: 1. diffrt serve, diffllama-134m f16, --parallel 8"
        start_diffrt "$MODELS/diffllama-134m"
        load "diffrt 134m r$r" "$CONC" "$PREFIX-134m-r$r.json"
        stop_server
        if [ -n "$BASE" ]; then
            say "round $r: 1. the base build's diffrt serve ($BASE), diffllama-134m f16, --parallel 8"
            start_diffrt "$MODELS/diffllama-134m" f32 "$BASE/diffrt"
            load "base 134m r$r" "$CONC" "$PREFIX-134m-base-r$r.json"
            stop_server
        fi
    fi
    if ! skip 2; then
        for prec in f32 int8; do
            say "round $r: 2. diffrt serve, llama-1.1b q4_0, --parallel 8, cpu.precision=$prec"
            start_diffrt "$MODELS/llama-1.1b-q4_0" $prec
            load "diffrt $prec 1.1b-q4_0 r$r" 1,8 "$PREFIX-1b-diffrt-$prec-r$r.json"
            stop_server
        done
        if [ -n "${LLAMA_BIN:-}" ]; then
            say "round $r: 2. llama-server -np 8, llama-1.1b q4_0 GGUF"
            start_llama "$MODELS/llama-1.1b-q4_0.gguf"
            load "llama-server 1.1b-q4_0 r$r" 1,8 "$PREFIX-1b-llama-r$r.json"
            stop_server
        fi
    fi
done

if ! skip 3; then
    say "3. 500 idle connections to diffrt serve (diffllama-134m)"
    start_diffrt "$MODELS/diffllama-134m"
    "$PY" - "$PORT" "$PID" <<'PYEOF'
import socket, statistics, sys, time
port, pid = int(sys.argv[1]), int(sys.argv[2])
def rss():
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
def health():
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    while s.recv(4096):
        pass
    s.close()
    return (time.perf_counter() - t0) * 1e3
base = [health() for _ in range(20)]
r0 = rss()
socks = [socket.create_connection(("127.0.0.1", port)) for _ in range(500)]
for s in socks[:250]:
    s.sendall(b"GET /health HTTP/1.1\r\nHo")  # half a request: slowloris
time.sleep(0.5)
held = [health() for _ in range(20)]
r1 = rss()
print(f"/health idle: min {min(base):.2f} ms, median {statistics.median(base):.2f} ms")
print(f"/health with 500 connections open (250 idle, 250 half a request): min {min(held):.2f} ms, "
      f"median {statistics.median(held):.2f} ms, max {max(held):.2f} ms")
print(f"RSS {r0:.1f} MiB -> {r1:.1f} MiB (+{r1 - r0:.1f} MiB)")
for s in socks:
    s.close()
PYEOF
    stop_server
fi
