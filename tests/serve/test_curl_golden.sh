#!/usr/bin/env bash
# ctest serve_curl_golden: `curl -N` against diffrt serve, byte for byte
# against the golden SSE transcripts in tests/fixtures/serve/*.sse (the
# bundled diff-v1 model, greedy; "id" and "created" normalized). With
# --update the transcripts are written instead.
# usage: tests/serve/test_curl_golden.sh DIFFRT MODELS_DIR [--update]
set -euo pipefail
diffrt=$1 models=$2 update=${3:-}
here=$(cd "$(dirname "$0")" && pwd)
gold=$here/../fixtures/serve
tmp=$(mktemp -d)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$tmp"; }
trap cleanup EXIT
"$diffrt" serve --model "$models/diff-v1-tiny" --port 0 --ready-file "$tmp/ready" --chat-template plain \
    > "$tmp/log" 2>&1 &
pid=$!
for _ in $(seq 300); do [ -s "$tmp/ready" ] && break; sleep 0.1; done
[ -s "$tmp/ready" ] || { echo "serve_curl_golden: the server did not start:"; cat "$tmp/log"; exit 1; }
url=http://127.0.0.1:$(awk '{print $2}' "$tmp/ready")
prompt=$(sed 's/\\/\\\\/g; s/"/\\"/g' "$models/diff-v1-tiny/prompt.txt" | tr -d '\n')
norm() { sed -E 's/"id":"(chat)?cmpl-[0-9a-f]+"/"id":"ID"/g; s/"created":[0-9]+/"created":0/g'; }
fails=0
check() { # NAME PATH BODY
    curl -sN --max-time 60 "$url$2" -H 'Content-Type: application/json' -d "$3" | norm > "$tmp/$1.sse"
    if [ "$update" = --update ]; then
        cp "$tmp/$1.sse" "$gold/$1.sse"
        echo "serve_curl_golden: wrote $gold/$1.sse"
    elif cmp -s "$tmp/$1.sse" "$gold/$1.sse"; then
        echo "PASS $1"
    else
        echo "FAIL $1: the stream differs from tests/fixtures/serve/$1.sse:"
        diff "$gold/$1.sse" "$tmp/$1.sse" | head -20
        fails=$((fails + 1))
    fi
}
check completion_stream /v1/completions \
    "{\"prompt\": \"$prompt\", \"max_tokens\": 8, \"temperature\": 0, \"stream\": true}"
check completion_stream_usage /v1/completions \
    "{\"prompt\": \"$prompt\", \"max_tokens\": 8, \"temperature\": 0, \"stream\": true, \"stream_options\": {\"include_usage\": true}}"
check completion_stream_stop /v1/completions \
    "{\"prompt\": \"$prompt\", \"max_tokens\": 8, \"temperature\": 0, \"stream\": true, \"stop\": \"19\"}"
check chat_stream /v1/chat/completions \
    '{"messages": [{"role": "user", "content": "What is the magic number of Manila?"}], "max_tokens": 6, "temperature": 0, "stream": true}'
check completion_whole /v1/completions \
    "{\"prompt\": \"$prompt\", \"max_tokens\": 8, \"temperature\": 0}"
check error_stream_bad_value /v1/completions \
    '{"prompt": "x", "stream": true, "temperature": 3}'
kill -TERM "$pid"
wait "$pid" || { echo "FAIL: the server's exit status after SIGTERM was $?"; exit 1; }
pid=
[ "$fails" -eq 0 ] || exit 1
