#!/usr/bin/env python3
"""The server's client tests (ctest serve_*): `diffrt serve` on loopback,
driven over HTTP by the standard library.

    python3 tests/serve/test_serve.py --diffrt build/diffrt --models models [CASE ...]

Each case starts its own server (a free port, the bundled tiny models),
runs bounded requests and checks statuses, bodies and /metrics; a failure
names the case and what differed. Cases: equivalence (N concurrent greedy
requests = N `diffrt run` calls; the NIAH answers), stream (SSE framing),
errors, auth, cors, limits (413, 431, 408, slowloris, idle), protocol
(keep-alive, pipelining, HTTP/1.0, Expect), disconnect (queued, prefill,
mid-stream, non-streaming), flood (503 past the queue), slow_reader, drain
(SIGTERM), tokenizer_threads (bodies tokenized off the HTTP thread),
idle_conns, soak (mixed clients with random disconnects; fds and
RSS before and after); and issue 42's: framing (RFC 9112 over raw
sockets, half-closed clients), hosts (DNS rebinding, cross-site simple
requests), nul_text (U+0000 in answers, stream = whole), special_tokens,
hostile_tokenizer (a backtracking regex), lifecycle (signals).
"""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from srv import Server, closed_by_peer, raw_request, read_response, sse_events  # noqa: E402

A = None  # the parsed arguments
FAILS = []


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def model(name="diff-v1-tiny"):
    return os.path.join(A.models, name)


def niah(name="diff-v1-tiny"):
    with open(os.path.join(A.fixtures, f"niah_{name}.json")) as f:
        return json.load(f)["prompts"]


def run_cli(mdl, prompt, n):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(prompt)
    try:
        out = subprocess.run([A.diffrt, "run", "--model", mdl, "--prompt-file", f.name, "-n", str(n), "--temp", "0"],
                             capture_output=True, timeout=120)
    finally:
        os.unlink(f.name)
    check(out.returncode == 0, f"diffrt run failed: {out.stderr.decode()[-500:]}")
    t = out.stdout.decode()
    return t[:-1] if t.endswith("\n") else t


def complete(S, prompt, n, **kw):
    body = {"prompt": prompt, "max_tokens": n, "temperature": 0, **kw}
    s, h, b = S.post("/v1/completions", body)
    check(s == 200, f"status {s}: {b[:300]}")
    return json.loads(b)


# ---- cases ----------------------------------------------------------------


def case_equivalence():
    """N concurrent greedy requests give the text of N `diffrt run` calls, and
    the bundled diff-v1 model still retrieves its needles through the server."""
    prompts = niah()
    want = [run_cli(model(), p["prompt"], 8) for p in prompts]
    S = Server(A.diffrt, model(), "--parallel", "4", "--metrics")
    try:
        got = [None] * len(prompts)

        def work(i):
            got[i] = complete(S, prompts[i]["prompt"], 8)

        ts = [threading.Thread(target=work, args=(i,)) for i in range(len(prompts))]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        right = 0
        for i, p in enumerate(prompts):
            text = got[i]["choices"][0]["text"]
            check(text == want[i].rstrip("\n") or text + "\n" == want[i],
                  f"prompt {i} (depth {p['depth']}): server {text!r}, diffrt run {want[i]!r}")
            digits = "".join(ch for ch in text.strip() if ch.isdigit())
            right += digits == p["answer"]
            u = got[i]["usage"]
            check(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"], f"usage {u}")
        check(right == len(prompts), f"{right}/{len(prompts)} needles retrieved through the server")
        m = S.metrics()
        check(m["diffrt:num_requests_running"] == 0, "requests still running")
        done = sum(m[f'diffrt:request_success_total{{finished_reason="{r}"}}'] for r in ("stop", "length"))
        check(done == len(prompts), f"{done} requests counted as finished")
    finally:
        check(S.stop() == 0, "exit status after SIGTERM")


def case_stream():
    """SSE framing: chunks, [DONE], usage, the concatenated text equals the
    non-streaming text; a chat stream opens with the role."""
    p = niah()[0]["prompt"]
    S = Server(A.diffrt, model(), "--chat-template", "plain")
    try:
        whole = complete(S, p, 8)["choices"][0]["text"]
        s, h, b = S.post("/v1/completions", {"prompt": p, "max_tokens": 8, "temperature": 0, "stream": True,
                                             "stream_options": {"include_usage": True}})
        check(s == 200 and h.get("content-type") == "text/event-stream", f"status {s} {h}")
        check(h.get("cache-control") == "no-cache", f"headers {h}")
        ev = sse_events(b)
        check(ev[-1] == "[DONE]", f"last event {ev[-1]!r}")
        chunks = [json.loads(e) for e in ev[:-1]]
        ids = {c["id"] for c in chunks}
        check(len(ids) == 1, f"ids {ids}")
        check(chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] >= 1, f"usage chunk {chunks[-1]}")
        check(all("usage" in c and c["usage"] is None for c in chunks[:-1]), "usage: null on every chunk")
        fin = chunks[-2]["choices"][0]
        check(fin["finish_reason"] in ("stop", "length") and fin["text"] == "", f"final chunk {fin}")
        text = "".join(c["choices"][0]["text"] for c in chunks[:-1])
        check(text == whole, f"stream {text!r} vs whole {whole!r}")
        # chat
        s, h, b = S.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "hello"}], "max_tokens": 5,
                                                  "stream": True, "temperature": 0})
        ev = sse_events(b)
        first = json.loads(ev[0])
        check(first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"] == {"role": "assistant",
                                                                                              "content": ""},
              f"first chat chunk {first}")
        check(ev[-1] == "[DONE]", "chat [DONE]")
        last = json.loads(ev[-2])
        check(last["choices"][0]["delta"] == {} and last["choices"][0]["finish_reason"], f"last chat chunk {last}")
        # a stop string ends the text before it, and is never sent
        stop = whole[3:5] if len(whole) >= 5 else whole[-1]
        r = complete(S, p, 8, stop=[stop])
        t = r["choices"][0]["text"]
        check(stop not in t and whole.startswith(t) and r["choices"][0]["finish_reason"] == "stop",
              f"stop {stop!r}: {t!r} from {whole!r}")
        s, h, b = S.post("/v1/completions", {"prompt": p, "max_tokens": 8, "temperature": 0, "stream": True,
                                             "stop": stop})
        t2 = "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(b)[:-1])
        check(t2 == t, f"streamed with stop {t2!r} vs {t!r}")
    finally:
        check(S.stop() == 0, "exit status")


def case_errors():
    """Bad requests: 400 with an OpenAI error object naming the field; 404,
    405; never a 5xx."""
    S = Server(A.diffrt, model())
    try:
        p = niah()[0]["prompt"]
        cases = [
            ("/v1/completions", b"{", 400, None),
            ("/v1/completions", b"[]", 400, None),
            ("/v1/completions", b"5", 400, None),
            ("/v1/completions", b"null", 400, None),
            ("/v1/completions", b"", 400, None),
            ("/v1/completions", b"[" * 10000 + b"]" * 10000, 400, None),
            ("/v1/completions", json.dumps({"prompt": "x", "temperature": 999999}).encode(), 400, "temperature"),
            ("/v1/completions", json.dumps({"prompt": "x", "temperature": -1}).encode(), 400, "temperature"),
            ("/v1/completions", b'{"prompt": "x", "temperature": 1e999}', 400, "temperature"),
            ("/v1/completions", json.dumps({"prompt": "x", "top_p": 0}).encode(), 400, "top_p"),
            ("/v1/completions", b'{"prompt": "x", "top_p": 0.5, "top_p": 1}', 400, None),
            ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 0}).encode(), 400, "max_tokens"),
            ("/v1/completions", json.dumps({"prompt": "x", "max_tokens": -1}).encode(), 400, "max_tokens"),
            ("/v1/completions", json.dumps({"prompt": "x", "seed": 1.5}).encode(), 400, "seed"),
            ("/v1/completions", json.dumps({"prompt": [-1]}).encode(), 400, "prompt"),
            ("/v1/completions", json.dumps({"prompt": [100000]}).encode(), 400, "prompt"),
            ("/v1/completions", json.dumps({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]}).encode(), 400, "stop"),
            ("/v1/completions", json.dumps({"prompt": "x", "stop": {"a": 1}}).encode(), 400, "stop"),
            ("/v1/completions", json.dumps({"prompt": "x", "n": 2}).encode(), 400, "n"),
            ("/v1/completions", json.dumps({"prompt": "x", "tools": [{"type": "function"}]}).encode(), 400, "tools"),
            ("/v1/completions", b'{"prompt": "a\\u0000b"}', 400, "prompt"),
            ("/v1/completions", b'{"prompt": "\\ud800"}', 400, "prompt"),
            ("/v1/completions", b'{"prompt": "\xff\xfe"}', 400, "prompt"),
            ("/v1/completions", json.dumps({"prompt": p * 3}).encode(), 400, "prompt"),
            ("/v1/completions", json.dumps({"prompt": p, "max_tokens": 100}).encode(), 400, "prompt"),
            ("/v1/completions", json.dumps({"prompt": "x", "model": "gpt-4"}).encode(), 404, "model"),
            ("/v1/chat/completions", json.dumps({"messages": []}).encode(), 400, "messages"),
            ("/v1/chat/completions", json.dumps({"messages": "hi"}).encode(), 400, "messages"),
            ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": 5}]}).encode(), 400, None),
            ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "hi"}]}).encode(), 400,
             "messages"),  # no chat template
            ("/detokenize", json.dumps({"tokens": [1, 100000]}).encode(), 400, "tokens"),
            ("/tokenize", json.dumps({"content": 5}).encode(), 400, None),
        ]
        for i, (path, body, status, param) in enumerate(cases):
            s, h, b = S.post(path, body)
            check(s == status, f"case {i} {path} {body[:60]!r}: status {s} (want {status}): {b[:200]!r}")
            e = json.loads(b)["error"]
            check(isinstance(e["message"], str) and e["type"], f"case {i}: error object {e}")
            check(len(e["message"]) < 400, f"case {i}: message of {len(e['message'])} bytes")
            if param:
                check(e["param"] and e["param"].startswith(param), f"case {i} {body[:60]!r}: param {e['param']!r}, want {param}")
        s, _, b = S.request("GET", "/nope")
        check(s == 404 and json.loads(b)["error"]["type"] == "not_found_error", f"unknown path {s}")
        s, h, b = S.request("GET", "/v1/completions")
        check(s == 405 and h.get("allow") == "POST", f"GET /v1/completions {s} {h}")
        s, _, b = S.request("BREW", "/health")
        check(s == 405, f"BREW {s}")
        s, j = S.json("GET", "/v1/models/diff-v1-tiny")
        check(s == 200 and j["id"] == "diff-v1-tiny" and j["meta"]["slots"] == 4, f"/v1/models/diff-v1-tiny {s} {j}")
        s, _, b = S.request("GET", "/v1/models/nope")
        check(s == 404 and json.loads(b)["error"]["code"] == "model_not_found", f"/v1/models/nope {s} {b[:100]}")
        s, _, b = S.request("GET", "/metrics")
        check(s == 404, f"/metrics without --metrics: {s}")
        s, _, b = S.request("OPTIONS", "/v1/completions")
        check(s == 405, f"OPTIONS without CORS: {s}")
        # tokenize / detokenize round trip
        s, j = S.json("POST", "/tokenize", {"content": "The magic number"})
        check(s == 200 and j["count"] == len(j["tokens"]) and j["max_model_len"] > 0, f"tokenize {j}")
        s, d = S.json("POST", "/detokenize", {"tokens": j["tokens"]})
        check(s == 200 and d["content"].endswith("The magic number"), f"detokenize {d}")
        # a top_p below float's range: the top token, not a 400
        s, _, b = S.post("/v1/completions", {"prompt": "The", "max_tokens": 2, "top_p": 1e-50})
        check(s == 200, f"top_p 1e-50: {s} {b[:200]}")
        s, h, b = S.request("GET", "/health")
        check(s == 200, "health after the bad requests")
    finally:
        check(S.stop() == 0, "exit status")


def case_auth():
    keys = tempfile.NamedTemporaryFile("w", delete=False)
    keys.write("\n  sk-one  \nsk-two\n")
    keys.close()
    S = Server(A.diffrt, model(), "--api-key-file", keys.name, "--metrics")
    try:
        body = {"prompt": "The", "max_tokens": 2}
        s, h, b = S.post("/v1/completions", body)
        check(s == 401 and h.get("www-authenticate") == "Bearer", f"no key: {s} {h}")
        check(json.loads(b)["error"]["type"] == "authentication_error", f"no key body {b}")
        s, _, _ = S.post("/v1/completions", body, {"Authorization": "Bearer sk-on"})
        check(s == 401, f"wrong key {s}")
        s, _, _ = S.post("/v1/completions", body, {"Authorization": "sk-one"})
        check(s == 401, f"no Bearer {s}")
        s, _, _ = S.post("/v1/completions?api_key=sk-one", body)
        check(s in (401, 404), f"key in the query string {s}")
        for k in ("sk-one", "sk-two"):
            s, _, b = S.post("/v1/completions", body, {"Authorization": "Bearer " + k})
            check(s == 200, f"key {k}: {s} {b[:200]}")
        s, _, _ = S.request("GET", "/health")
        check(s == 200, f"/health without a key {s}")
        s, _, _ = S.request("GET", "/metrics")
        check(s == 401, f"/metrics without a key {s}")
        s, _, _ = S.request("GET", "/v1/models")
        check(s == 401, f"/v1/models without a key {s}")
    finally:
        os.unlink(keys.name)
        check(S.stop() == 0, "exit status")


def case_cors():
    S = Server(A.diffrt, model(), "--cors-origin", "http://app.example")
    try:
        s, h, _ = S.request("OPTIONS", "/v1/completions", headers={"Origin": "http://app.example"})
        check(s == 204 and h.get("access-control-allow-origin") == "http://app.example", f"preflight {s} {h}")
        check("POST" in h.get("access-control-allow-methods", ""), f"methods {h}")
        s, h, _ = S.request("GET", "/health", headers={"Origin": "http://evil.example"})
        check("access-control-allow-origin" not in h, f"another origin got CORS headers: {h}")
        s, h, _ = S.request("GET", "/health", headers={"Origin": "http://app.example"})
        check(h.get("access-control-allow-origin") == "http://app.example", f"allowed origin {h}")
        # the OpenAI JavaScript SDK's preflight asks for its own headers: each is allowed
        want = ("authorization, content-type, x-stainless-os, x-stainless-lang, x-stainless-package-version, "
                "x-stainless-runtime, x-stainless-runtime-version, x-stainless-arch, x-stainless-retry-count, "
                "x-stainless-timeout, openai-organization, openai-project")
        s, h, _ = S.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "http://app.example", "Access-Control-Request-Method": "POST",
            "Access-Control-Request-Headers": want})
        allowed = {x.strip().lower() for x in h.get("access-control-allow-headers", "").split(",")}
        check(s == 204 and all(x.strip() in allowed for x in want.split(",")), f"the SDK's preflight: {s} {h}")
        s, h, _ = S.request("OPTIONS", "/v1/chat/completions", headers={
            "Origin": "http://app.example", "Access-Control-Request-Headers": "x\"y"})
        check(s in (204, 400), f"a preflight asking for a non-header: {s}")
    finally:
        check(S.stop() == 0, "exit status")


def case_limits():
    """413 before the body is read, a chunked body past the limit, 431 for
    huge headers, 408 for a slow body, slowloris and idle sockets cost only
    a descriptor and are closed."""
    S = Server(A.diffrt, model(), "--max-body", "4K", "--idle-timeout", "2", "--body-timeout", "2", "--metrics")
    try:
        s, _, b = S.post("/v1/completions", b"x" * 5000)
        check(s == 413, f"5000-byte body: {s}")
        sk = S.sock()
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 2000000000\r\n\r\n")
        r = read_response(sk)
        check(r and r[0] == 413, f"Content-Length 2e9: {r}")
        sk.close()
        sk = S.sock()
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n")
        for _ in range(5):
            try:
                sk.sendall(b"400\r\n" + b"x" * 1024 + b"\r\n")
            except OSError:
                break
        try:
            sk.sendall(b"0\r\n\r\n")
        except OSError:
            pass
        r = read_response(sk)
        check(r and r[0] == 413, f"chunked past the limit: {r}")
        sk.close()
        sk = S.sock()
        sk.sendall(b"GET /health?x=" + b"a" * 40000 + b" HTTP/1.1\r\nHost: localhost\r\n\r\n")
        r = read_response(sk)
        check(r and r[0] == 414, f"40 KB URL: {r}")
        sk.close()
        sk = S.sock()
        sk.sendall(b"GET /health HTTP/1.1\r\nHost: localhost\r\nX-Big: " + b"a" * 40000 + b"\r\n\r\n")
        r = read_response(sk)
        check(r and r[0] == 431, f"40 KB header: {r}")
        sk.close()
        # slow body: the headers, then 1 byte a second
        sk = S.sock()
        sk.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: localhost\r\nContent-Length: 100\r\n\r\n")
        t0 = time.time()
        r = None
        for _ in range(8):
            try:
                sk.sendall(b" ")
            except OSError:
                break
            time.sleep(0.6)
            sk.setblocking(False)
            try:
                d = sk.recv(65536, socket.MSG_PEEK)
                if d is not None:
                    break
            except BlockingIOError:
                pass
            finally:
                sk.setblocking(True)
        r = read_response(sk, 5)
        check(r is None, f"slow body: the connection was not closed: {r}")
        check(time.time() - t0 < 8, "slow body not cut within 8 s")
        sk.close()
        # slowloris and idle sockets: closed after --idle-timeout, /health answers meanwhile
        idle = [S.sock() for _ in range(20)]
        for sk in idle[:10]:
            sk.sendall(b"GET /health HTTP/1.1\r\nHo")
        s, _, _ = S.request("GET", "/health", timeout=5)
        check(s == 200, "health with 20 slow sockets open")
        for i, sk in enumerate(idle):
            check(closed_by_peer(sk, 6), f"idle socket {i} still open 6 s after --idle-timeout 2")
            sk.close()
    finally:
        check(S.stop() == 0, "exit status")


def case_protocol():
    S = Server(A.diffrt, model())
    try:
        sk = S.sock()
        body = json.dumps({"prompt": "The", "max_tokens": 2}).encode()
        for _ in range(3):  # keep-alive
            sk.sendall(raw_request("POST", "/v1/completions", body))
            r = read_response(sk)
            check(r and r[0] == 200, f"keep-alive: {r}")
        sk.sendall(raw_request("GET", "/health") + raw_request("GET", "/v1/models"))  # pipelined
        r1, r2 = read_response(sk), read_response(sk)
        check(r1 and r1[0] == 200 and r2 and r2[0] == 200 and b"diff-v1-tiny" in r2[2], f"pipelined {r1} {r2}")
        sk.close()
        sk = S.sock()
        sk.sendall(b"GET /health HTTP/1.0\r\n\r\n")
        r = read_response(sk)
        check(r and r[0] == 200, f"HTTP/1.0 {r}")
        sk.close()
        sk = S.sock()
        sk.sendall(raw_request("POST", "/v1/completions", b"", {"Content-Length": str(len(body)),
                                                               "Expect": "100-continue"}))
        first = read_response(sk, 5)
        check(first and first[0] == 100, f"Expect: 100-continue: {first!r}")
        sk.sendall(body)
        rest = read_response(sk)
        check(rest and rest[0] == 200, f"after 100-continue: {rest}")
        sk.close()
        sk = S.sock()
        sk.sendall(b"\x16\x03\x01garbage\r\n\r\n")
        r = read_response(sk)
        check(r is None or r[0] == 400, f"garbage request line: {r}")
        sk.close()
        s, _, _ = S.request("GET", "/health")
        check(s == 200, "health after the quirks")
    finally:
        check(S.stop() == 0, "exit status")


def open_stream(S, body):
    sk = S.sock()
    sk.sendall(raw_request("POST", "/v1/completions", json.dumps(body).encode()))
    return sk


def case_disconnect():
    """A client that leaves while queued, during prefill, mid-stream or on a
    non-streaming request frees its slot within a step."""
    S = Server(A.diffrt, model(), "--parallel", "1", "--batch-tokens", "8", "--step-delay", "40", "--metrics")
    try:
        long = {"prompt": "The", "max_tokens": 150, "ignore_eos": True, "temperature": 0}
        p = niah()[0]["prompt"]
        gone = 0
        # mid-stream
        sk = open_stream(S, {**long, "stream": True})
        sk.settimeout(10)
        got = b""
        while got.count(b"data: ") < 3:
            got += sk.recv(4096)
        sk.close()
        gone += 1
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 0, 3)
        S.wait_metric("diffrt:client_disconnects_total", lambda v: v == gone, 3)
        # non-streaming
        sk = open_stream(S, long)
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 1, 5)
        sk.close()
        gone += 1
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 0, 3)
        S.wait_metric("diffrt:client_disconnects_total", lambda v: v == gone, 3)
        # during prefill: 180 prompt tokens at 8 rows a 40 ms step
        sk = open_stream(S, {"prompt": p, "max_tokens": 5, "stream": True})
        m = S.wait_metric("diffrt:num_requests_running", lambda v: v == 1, 5)
        check(m["diffrt:generation_tokens_total"] == m.get("diffrt:generation_tokens_total"), "")
        sk.close()
        gone += 1
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 0, 3)
        S.wait_metric("diffrt:client_disconnects_total", lambda v: v == gone, 3)
        # queued behind a running request
        a = open_stream(S, {**long, "stream": True})
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 1, 5)
        b = open_stream(S, long)
        S.wait_metric("diffrt:num_requests_waiting", lambda v: v == 1, 5)
        b.close()
        gone += 1
        S.wait_metric("diffrt:num_requests_waiting", lambda v: v == 0, 3)
        m = S.metrics()
        check(m["diffrt:num_requests_running"] == 1, "the running request was disturbed")
        a.close()
        gone += 1
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 0, 3)
        S.wait_metric("diffrt:client_disconnects_total", lambda v: v == gone, 3)
        s, _, b2 = S.post("/v1/completions", {"prompt": "The", "max_tokens": 3})
        check(s == 200, f"a request after the disconnects: {s} {b2[:200]}")
    finally:
        check(S.stop() == 0, "exit status")


def case_flood():
    """Past slots + queue: 503 with Retry-After at once."""
    S = Server(A.diffrt, model(), "--parallel", "1", "--queue", "2", "--step-delay", "40", "--metrics")
    try:
        long = {"prompt": "The", "max_tokens": 100, "ignore_eos": True}
        held = [open_stream(S, long)]
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 1, 5)
        held += [open_stream(S, long) for _ in range(2)]
        S.wait_metric("diffrt:num_requests_waiting", lambda v: v == 2, 5)
        for i in range(5):
            t0 = time.time()
            s, h, b = S.post("/v1/completions", long, timeout=10)
            check(s == 503 and h.get("retry-after") == "1", f"flood request {i}: {s} {h}")
            check(json.loads(b)["error"]["type"] == "unavailable_error", f"flood body {b[:200]}")
            check(time.time() - t0 < 5, "503 was not immediate")
        m = S.metrics()
        check(m['diffrt:request_rejected_total{reason="queue_full"}'] == 5, "queue_full count")
        for sk in held:
            sk.close()
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 0, 5)
        S.wait_metric("diffrt:num_requests_waiting", lambda v: v == 0, 5)
    finally:
        check(S.stop() == 0, "exit status")


def case_deadline():
    """--timeout counts from arrival, queue included: a running request ends
    with finish_reason "length" at its deadline, and one that waited behind
    it gets only what is left of its own."""
    S = Server(A.diffrt, model(), "--parallel", "1", "--timeout", "1", "--step-delay", "40", "--metrics")
    try:
        long = {"prompt": "The", "max_tokens": 150, "ignore_eos": True}
        out = {}

        def run(k):
            out[k] = S.post("/v1/completions", long, timeout=30)

        ts = [threading.Thread(target=run, args=(k,)) for k in range(2)]
        t0 = time.time()
        for t in ts:
            t.start()
            time.sleep(0.1)
        for t in ts:
            t.join()
        check(time.time() - t0 < 10, "the deadline did not end the requests")
        s0, _, b0 = out[0]
        r0 = json.loads(b0)
        check(s0 == 200 and r0["choices"][0]["finish_reason"] == "length" and r0["usage"]["completion_tokens"] < 150,
              f"the running request: {s0} {b0[:200]}")
        s1, h1, b1 = out[1]
        r1 = json.loads(b1)
        check(s1 == 200 and r1["choices"][0]["finish_reason"] == "length" and
              r1["usage"]["completion_tokens"] < r0["usage"]["completion_tokens"], f"the waiting one: {s1} {b1[:200]}")
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 0, 3)
    finally:
        check(S.stop() == 0, "exit status")


def case_slow_reader():
    """A client that never reads its stream does not hold up the others, and
    is dropped once it leaves --max-unread bytes unread (the socket buffers
    made small with the debug --sndbuf so that they fill)."""
    S = Server(A.diffrt, model(), "--parallel", "2", "--max-unread", "1K", "--sndbuf", "4096", "--metrics")
    try:
        # the receive buffer set before connecting, so the window the
        # server sees is small from the start
        sk = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1024)
        sk.settimeout(30)
        sk.connect((S.host, S.port))
        body = {"prompt": "The", "max_tokens": 180, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True}}
        sk.sendall(raw_request("POST", "/v1/completions", json.dumps(body).encode()))
        for i in range(3):
            s, _, b = S.post("/v1/completions", {"prompt": "The", "max_tokens": 8}, timeout=20)
            check(s == 200, f"request {i} beside a slow reader: {s}")
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 0, 10)
        m = S.metrics()
        aborted = m['diffrt:request_success_total{finished_reason="abort"}']
        check(aborted == 1, f"the slow reader was not dropped: {aborted} requests aborted")
        sk.close()
    finally:
        check(S.stop() == 0, "exit status")


def case_drain():
    """SIGTERM: /health turns 503, new work is refused, the running stream
    finishes, the process exits 0."""
    S = Server(A.diffrt, model(), "--step-delay", "20", "--grace", "20")
    sk = open_stream(S, {"prompt": "The", "max_tokens": 60, "ignore_eos": True, "stream": True})
    time.sleep(0.3)
    S.p.send_signal(15)
    t0 = time.time()
    while True:
        s, _, _ = S.request("GET", "/health", timeout=5)
        if s == 503:
            break
        check(time.time() - t0 < 5, "health still 200 5 s after SIGTERM")
        time.sleep(0.02)
    s, h, _ = S.post("/v1/completions", {"prompt": "The", "max_tokens": 2})
    check(s == 503, f"a new request while draining: {s}")
    r = read_response(sk, 30)
    ev = sse_events(r[2]) if r else []
    check(r and ev and ev[-1] == "[DONE]", f"the in-flight stream did not finish: {r and r[2][-200:]}")
    check(json.loads(ev[-2])["choices"][0]["finish_reason"] == "length", f"drained stream: {ev[-2]}")
    sk.close()
    rc = S.stop()
    check(rc == 0, f"exit status {rc}")
    # grace 0: cancelled with an error event
    S = Server(A.diffrt, model(), "--step-delay", "50", "--grace", "0")
    sk = open_stream(S, {"prompt": "The", "max_tokens": 150, "ignore_eos": True, "stream": True})
    time.sleep(0.3)
    S.p.send_signal(15)
    r = read_response(sk, 30)
    ev = sse_events(r[2]) if r else []
    check(ev and ev[-1] == "[DONE]" and "error" in json.loads(ev[-2]), f"cancelled stream: {ev[-2:]}")
    sk.close()
    check(S.stop() == 0, "exit status with --grace 0")


def untied_copy(prefix, head=None, embed=None):
    """A copy of diff-v1-tiny in a temporary folder with its LM head untied
    from the embedding (a table of its own, lm_head.weight); head(rows) and
    embed(rows) may change the two tables, given as lists of row bytes.
    Returns the folder."""
    import shutil
    import struct
    d = tempfile.mkdtemp(prefix=prefix)
    shutil.copy(os.path.join(model(), "tokenizer.json"), d)
    with open(os.path.join(model(), "config.json")) as f:
        cfg = json.load(f)
    cfg["tie_word_embeddings"] = False
    with open(os.path.join(d, "config.json"), "w") as f:
        json.dump(cfg, f)
    with open(os.path.join(model(), "model.safetensors"), "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    h = json.loads(raw[8:8 + n])
    data = bytearray(raw[8 + n:])
    e = h["model.embed_tokens.weight"]
    check(e["dtype"] == "F16", "the embedding is not f16")
    a, b = e["data_offsets"]
    V, dim = e["shape"]
    rows = [bytes(data[a + i * dim * 2:a + (i + 1) * dim * 2]) for i in range(V)]
    head_rows = head(list(rows)) if head else rows
    if embed:
        data[a:b] = b"".join(embed(list(rows)))
    h["lm_head.weight"] = {"dtype": "F16", "shape": e["shape"], "data_offsets": [len(data), len(data) + b - a]}
    data += b"".join(head_rows)
    hj = json.dumps(h).encode()
    hj += b" " * (-len(hj) % 8)
    with open(os.path.join(d, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(hj)) + hj + data)
    return d


def poisoned_model(token):
    """A copy of diff-v1-tiny whose embedding row `token` is NaN: a forward
    holding that token has non-finite logits. The LM head is untied first
    (the clean table stored as lm_head.weight), so other prompts stay
    finite."""
    def nan_row(rows):
        rows[token] = b"\x00\x7e" * (len(rows[token]) // 2)
        return rows
    return untied_copy("drt-nan-", embed=nan_row)


def permuted_model(seed):
    """A copy of diff-v1-tiny whose LM head (untied from the embedding) has
    its rows permuted: the token the model means comes out as another one,
    so what it writes runs over the whole byte-level vocabulary. The digits,
    which this model writes most, come out as the tokens of the bytes
    0x00..0x09 (NUL first); the other rows are shuffled with `seed`."""
    with open(os.path.join(model(), "tokenizer.json")) as f:
        vocab = json.load(f)["model"]["vocab"]
    byte_tok = [vocab[chr(256 + b)] for b in range(10)]  # GPT-2's byte map: 0x00.. are U+0100..
    digit_tok = [vocab[str(k)] for k in range(10)]

    def permute(rows):
        # head[i] = embed[src[i]]: token i is written where the model means src[i]
        V = len(rows)
        rest = [t for t in range(V) if t not in byte_tok and t not in digit_tok]
        shuffled = rest[:]
        random.Random(seed).shuffle(shuffled)
        src = list(range(V))
        for t, u in zip(rest, shuffled):
            src[t] = u
        for bt, dt in zip(byte_tok, digit_tok):
            src[bt], src[dt] = dt, bt
        return [rows[src[i]] for i in range(V)]

    return untied_copy("drt-perm-", head=permute), byte_tok


def case_nul_text():
    """Every text carries its whole content: a model that writes the token of
    byte 0x00 (and any other byte-level token, its LM head permuted) gets
    U+0000 in its answers, as \\u0000 in the JSON, and the streamed text
    equals the non-streamed text of the same request, over random prompts,
    seeds and temperatures; /detokenize keeps NULs too."""
    import shutil
    seed = 4242
    d, byte_tok = permuted_model(seed)
    S = Server(A.diffrt, d, "--chat-template", "plain", "--parallel", "4")
    rng = random.Random(seed)
    prompts = ["The magic number", "Manila", "The magic number of Seoul is", niah()[0]["prompt"][:300]]
    try:
        s, j = S.json("POST", "/detokenize", {"tokens": byte_tok[:3] + [byte_tok[0]]})
        check(s == 200 and j["content"] == "\x00\x01\x02\x00" and j["prompt"] == j["content"], f"detokenize: {j}")
        nuls = 0
        for i in range(24):
            chat = i % 4 == 3
            body = {"max_tokens": rng.choice([8, 24, 40]), "temperature": rng.choice([0, 0.7, 1.5]), "seed": i,
                    "top_k": rng.choice([0, 40])}
            p = rng.choice(prompts)
            if chat:
                body["messages"] = [{"role": "user", "content": p}]
            else:
                body["prompt"] = p
            path = "/v1/chat/completions" if chat else "/v1/completions"
            s, _, whole = S.post(path, body)
            check(s == 200, f"case {i} (seed {seed}, {body}): {s} {whole[:200]}")
            c = json.loads(whole)["choices"][0]
            text = c["message"]["content"] if chat else c["text"]
            s, _, raw = S.post(path, {**body, "stream": True})
            ev = sse_events(raw)
            check(s == 200 and ev[-1] == "[DONE]", f"case {i}: stream {s} {raw[-200:]}")
            parts = [json.loads(e)["choices"][0] for e in ev[:-1]]
            streamed = "".join((x["delta"].get("content", "") if chat else x["text"]) for x in parts)
            check(streamed == text, f"case {i} (seed {seed}, {body}): streamed {streamed!r} != whole {text!r}")
            check(b"\\u0000" in whole or "\x00" not in text, f"case {i}: NUL not escaped: {whole[:200]}")
            u = json.loads(whole)["usage"]["completion_tokens"]
            check(u >= 1, f"case {i}: {u} completion tokens")
            nuls += text.count("\x00")
        check(nuls > 0, f"no answer held a NUL (seed {seed}): the test does not test it")
    finally:
        check(S.stop() == 0, "exit status")
        shutil.rmtree(d, ignore_errors=True)


def case_special_tokens():
    """Special tokens come from the template only: "<eos>" a user writes in a
    prompt, a message or /tokenize is text, unless the request opts in with
    "parse_special": true (completions and /tokenize; chat refuses it)."""
    S = Server(A.diffrt, model(), "--chat-template", "plain")
    try:
        s, j = S.json("POST", "/tokenize", {"content": "a<eos>b"})
        check(s == 200 and 1 not in j["tokens"] and j["tokens"][0] == 0, f"/tokenize of '<eos>': {j}")
        s, j2 = S.json("POST", "/tokenize", {"content": "a<eos>b", "parse_special": True})
        check(s == 200 and j2["tokens"].count(1) == 1 and j2["count"] < j["count"], f"parse_special: {j2}")
        s, j3 = S.json("POST", "/tokenize", {"content": "a<bos>b", "add_special": False, "parse_special": False})
        check(s == 200 and 0 not in j3["tokens"], f"'<bos>' in text, add_special false: {j3}")

        def prompt_tokens(path, body):
            s, _, b = S.post(path, {**body, "max_tokens": 1, "temperature": 0})
            check(s == 200, f"{path} {body}: {s} {b[:200]}")
            return json.loads(b)["usage"]["prompt_tokens"]

        as_text = prompt_tokens("/v1/completions", {"prompt": "Hi<eos><bos>"})
        as_ids = prompt_tokens("/v1/completions", {"prompt": "Hi<eos><bos>", "parse_special": True})
        check(as_text > as_ids + 2, f"completions: '<eos><bos>' as text {as_text} tokens, as ids {as_ids}")
        # the chat template (plain) renders "User: Hi<eos>\nAssistant:": the user's <eos> stays text
        chat = prompt_tokens("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hi<eos>"}]})
        rendered = "User: Hi<eos>\nAssistant:"
        check(chat == prompt_tokens("/v1/completions", {"prompt": rendered}), f"chat: {chat} prompt tokens")
        check(chat != prompt_tokens("/v1/completions", {"prompt": rendered, "parse_special": True}),
              "chat: the user's <eos> was read as the token")
        s, _, b = S.post("/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "parse_special": True})
        check(s == 400 and json.loads(b)["error"]["param"] == "parse_special", f"chat with parse_special: {s} {b}")
    finally:
        check(S.stop() == 0, "exit status")


def hostile_tokenizer_model():
    """diff-v1-tiny with a tokenizer.json whose Split regex backtracks: a
    word of n letters costs n^2 steps to pre-tokenize."""
    import shutil
    d = tempfile.mkdtemp(prefix="drt-regex-")
    for f in ("config.json", "model.safetensors"):
        os.symlink(os.path.abspath(os.path.join(model(), f)), os.path.join(d, f))
    with open(os.path.join(model(), "tokenizer.json")) as f:
        tj = json.load(f)
    tj["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "\\p{L}*!|."}, "behavior": "Isolated", "invert": False},
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}]}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tj, f)
    return d


def case_hostile_tokenizer():
    """Bounded work on the HTTP side: a tokenizer whose regex backtracks
    holds a tokenizer thread at most --tokenize-timeout (a 400 naming the
    cause), /tokenize is bounded by the context, other requests and /health
    are served meanwhile, and SIGTERM during such work exits promptly."""
    import shutil
    d = hostile_tokenizer_model()
    word = "a" * 400000  # a body under --max-body 1M, minutes of backtracking
    S = Server(A.diffrt, d, "--tokenize-timeout", "1", "--tokenizer-threads", "2")
    try:
        for path, body, param in (("/tokenize", {"content": word}, "content"),
                                  ("/v1/completions", {"prompt": word, "max_tokens": 1}, "prompt")):
            t0 = time.time()
            s, _, b = S.post(path, body, timeout=30)
            dt = time.time() - t0
            check(s == 400 and json.loads(b)["error"]["param"] == param, f"{path}: {s} {b[:300]}")
            check(dt < 8, f"{path}: answered after {dt:.1f} s with --tokenize-timeout 1")
        # while one thread is held, the other serves; /health never waits
        res = {}
        th = threading.Thread(target=lambda: res.setdefault("r", S.post("/tokenize", {"content": word}, timeout=30)))
        th.start()
        time.sleep(0.2)
        t0 = time.time()
        s, _, _ = S.request("GET", "/health", timeout=5)
        check(s == 200 and time.time() - t0 < 1, f"/health while a tokenizer thread is held: {s}")
        s, _, b = S.post("/v1/completions", {"prompt": "The", "max_tokens": 2}, timeout=30)
        check(s == 200, f"a completion while a tokenizer thread is held: {s} {b[:200]}")
        th.join(30)
        check(res.get("r", (0,))[0] == 400, f"the held request: {res}")
        # /tokenize past the context
        s, _, b = S.post("/tokenize", {"content": "x " * 1000})
        check(s == 400 and "context" in json.loads(b)["error"]["message"], f"/tokenize past the context: {s} {b}")
    finally:
        check(S.stop() == 0, "exit status")
    # SIGTERM while a tokenizer thread is deep in the regex (no time limit)
    S = Server(A.diffrt, d, "--tokenize-timeout", "0")
    try:
        sk = S.sock()
        sk.sendall(raw_request("POST", "/tokenize", json.dumps({"content": word}).encode()))
        time.sleep(0.5)
        t0 = time.time()
        rc = S.stop(timeout=20)
        check(rc == 0 and time.time() - t0 < 10, f"SIGTERM during a hostile tokenize: exit {rc} after "
                                                  f"{time.time() - t0:.1f} s")
        sk.close()
    finally:
        shutil.rmtree(d, ignore_errors=True)


def case_lifecycle():
    """SIGTERM while the model loads ends the process at once (nothing to
    drain, no ready file); a second SIGINT during a drain cancels what is in
    flight now; a third signal ends the process."""
    d = tempfile.mkdtemp(prefix="drt-life-")
    try:
        ready = os.path.join(d, "ready")
        # --prep-delay does not slow loading; a FIFO as the API key file does: it blocks until written
        fifo = os.path.join(d, "keys")
        os.mkfifo(fifo)
        p = subprocess.Popen([A.diffrt, "serve", "--model", model(), "--port", "0", "--ready-file", ready,
                              "--api-key-file", fifo], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        time.sleep(0.5)
        t0 = time.time()
        p.send_signal(15)
        try:
            out, _ = p.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            out, _ = p.communicate()
            check(False, "SIGTERM while starting: not acted on within 10 s")
        check(p.returncode == 0 and time.time() - t0 < 5 and not os.path.exists(ready),
              f"SIGTERM while starting: exit {p.returncode} after {time.time() - t0:.1f} s: {out.decode()[-300:]}")
        check(b"before the server was ready" in out, f"startup stop message: {out.decode()[-300:]}")
    finally:
        import shutil
        shutil.rmtree(d, ignore_errors=True)
    S = Server(A.diffrt, model(), "--step-delay", "50", "--grace", "60")
    sk = open_stream(S, {"prompt": "The", "max_tokens": 150, "ignore_eos": True, "stream": True})
    time.sleep(0.3)
    S.p.send_signal(2)
    time.sleep(0.3)
    t0 = time.time()
    S.p.send_signal(2)
    r = read_response(sk, 30)
    ev = sse_events(r[2]) if r else []
    check(time.time() - t0 < 5 and ev and ev[-1] == "[DONE]" and "error" in json.loads(ev[-2]),
          f"a second SIGINT: the stream was not cancelled at once ({time.time() - t0:.1f} s): {ev[-2:]}")
    sk.close()
    try:
        rc = S.p.wait(15)  # it exits by itself (a signal more would be the third)
    except subprocess.TimeoutExpired:
        rc = "none within 15 s"
    S.stop()
    check(rc == 0, f"exit status after two SIGINTs: {rc}")


def case_numeric():
    """Non-finite logits fail only the requests of that forward (500,
    x-should-retry: false; an error event in a stream); the server goes on."""
    d = poisoned_model(500)
    S = Server(A.diffrt, d, "--metrics", *A.backend_args)
    try:
        s, h, b = S.post("/v1/completions", {"prompt": [1, 2, 500, 3], "max_tokens": 4})
        check(s == 500 and h.get("x-should-retry") == "false", f"poisoned prompt: {s} {h} {b[:200]}")
        check(json.loads(b)["error"]["type"] == "server_error", f"poisoned body {b[:200]}")
        s, h, b = S.post("/v1/completions", {"prompt": [1, 2, 500, 3], "max_tokens": 4, "stream": True})
        ev = sse_events(b)
        check(s == 200 and ev[-1] == "[DONE]" and "error" in json.loads(ev[-2]), f"poisoned stream: {ev[-2:]}")
        s, _, b = S.post("/v1/completions", {"prompt": [1, 2, 3], "max_tokens": 4})
        check(s == 200, f"a clean request after the failures: {s} {b[:200]}")
        m = S.metrics()
        check(m['diffrt:request_success_total{finished_reason="error"}'] == 2, "error count")
    finally:
        check(S.stop() == 0, "exit status")
        import shutil
        shutil.rmtree(d, ignore_errors=True)


def case_eos():
    """Every eos id of generation_config.json stops generation (Llama-3 lists
    three): a copy of diff-v1-tiny whose generation_config.json adds the id
    of the answer's first token stops before it; ignore_eos does not."""
    import shutil
    d = tempfile.mkdtemp(prefix="drt-eos-")
    for f in ("config.json", "tokenizer.json", "model.safetensors"):
        shutil.copy(os.path.join(model(), f), d)
    with open(os.path.join(model(), "prompt.txt")) as f:
        prompt = f.read()
    S = Server(A.diffrt, model())
    try:
        whole = complete(S, prompt, 8)["choices"][0]["text"]
        s, j = S.json("POST", "/tokenize", {"content": whole, "add_special": False})
        check(s == 200 and j["tokens"], f"tokenize {j}")
    finally:
        check(S.stop() == 0, "exit status")
    with open(os.path.join(d, "config.json")) as f:
        eos = json.load(f)["eos_token_id"]
    with open(os.path.join(d, "generation_config.json"), "w") as f:
        json.dump({"eos_token_id": [eos, j["tokens"][0]]}, f)
    S = Server(A.diffrt, d)
    try:
        r = complete(S, prompt, 8)
        check(r["choices"][0]["text"] == "" and r["choices"][0]["finish_reason"] == "stop",
              f"generation_config.json's second eos id did not stop: {r['choices'][0]}")
        r = complete(S, prompt, 8, ignore_eos=True)
        check(r["choices"][0]["text"].startswith(whole) and r["choices"][0]["finish_reason"] == "length",
              f"ignore_eos: {r['choices'][0]}")
    finally:
        check(S.stop() == 0, "exit status")
        shutil.rmtree(d, ignore_errors=True)


def case_idle_conns():
    """500 idle connections (per-IP limit raised): /health still answers."""
    S = Server(A.diffrt, model(), "--max-conns-per-ip", "600", "--idle-timeout", "60")
    socks = []
    try:
        rss0 = S.rss_kib()
        for _ in range(500):
            socks.append(S.sock())
        t0 = time.time()
        s, _, _ = S.request("GET", "/health", timeout=10)
        dt = time.time() - t0
        check(s == 200, f"/health with 500 idle connections: {s}")
        print(f"  500 idle connections: /health in {dt * 1000:.1f} ms, RSS +{(S.rss_kib() - rss0) / 1024:.1f} MiB")
    finally:
        for sk in socks:
            sk.close()
        check(S.stop() == 0, "exit status")


def case_tokenizer_threads():
    """Bodies are parsed and tokenized off the HTTP thread: while two
    /tokenize requests sit 1.5 s each on the two tokenizer threads
    (--prep-delay), /health answers at once and both finish together; a
    request still being tokenized at SIGTERM is answered 503 and the server
    exits 0."""
    S = Server(A.diffrt, model(), "--tokenizer-threads", "2", "--prep-delay", "1500")
    try:
        took = [None, None]

        def tok(i):
            t0 = time.time()
            s, j = S.json("POST", "/tokenize", {"content": "The capital of France", "add_special": False})
            check(s == 200 and j["count"] > 0, f"tokenize {i}: {s} {j}")
            took[i] = time.time() - t0

        t0 = time.time()
        ts = [threading.Thread(target=tok, args=(i,)) for i in range(2)]
        for t in ts:
            t.start()
        time.sleep(0.3)
        h0 = time.time()
        s, _, _ = S.request("GET", "/health", timeout=10)
        dt = time.time() - h0
        check(s == 200 and dt < 0.8, f"/health took {dt:.2f} s while two bodies were being tokenized")
        for t in ts:
            t.join()
        total = time.time() - t0
        check(None not in took, "a /tokenize did not finish")
        check(total < 2.9, f"two 1.5 s preparations on two threads took {total:.2f} s (one after the other?)")
    finally:
        check(S.stop() == 0, "exit status")
    # SIGTERM while a completion is on a tokenizer thread
    S = Server(A.diffrt, model(), "--tokenizer-threads", "1", "--prep-delay", "1000", "--grace", "5")
    res = {}

    def post():
        res["r"] = S.post("/v1/completions", {"prompt": "The", "max_tokens": 4}, timeout=30)

    t = threading.Thread(target=post)
    t.start()
    time.sleep(0.3)
    S.p.send_signal(15)
    t.join(30)
    check("r" in res, "no answer to a request tokenized during the drain")
    check(res["r"][0] == 503, f"a request tokenized during the drain: {res['r'][0]} {res['r'][2][:200]}")
    check(S.stop() == 0, "exit status after a drain with a request on a tokenizer thread")


def case_soak():
    """Mixed clients (streaming or not, chat, bad requests, random
    disconnects) for --soak-seconds; descriptors and RSS before and after."""
    S = Server(A.diffrt, model(), "--parallel", "4", "--chat-template", "plain", "--metrics")
    try:
        prompts = [p["prompt"] for p in niah()]
        S.request("GET", "/health")
        fd0, rss0 = S.fds(), S.rss_kib()
        stop = time.time() + A.soak_seconds
        errors = []

        def client(k):
            rnd = random.Random(k)
            while time.time() < stop:
                kind = rnd.randrange(5)
                try:
                    if kind == 0:
                        complete(S, rnd.choice(prompts), rnd.randrange(1, 9))
                    elif kind == 1:
                        s, _, b = S.post("/v1/completions", {"prompt": rnd.choice(prompts), "max_tokens": 8,
                                                             "stream": True})
                        check(s == 200 and sse_events(b)[-1] == "[DONE]", f"stream {s}")
                    elif kind == 2:
                        s, _, _ = S.post("/v1/chat/completions",
                                         {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4})
                        check(s == 200, f"chat {s}")
                    elif kind == 3:
                        s, _, _ = S.post("/v1/completions", b'{"prompt": 5}')
                        check(s == 400, f"bad {s}")
                    else:
                        sk = open_stream(S, {"prompt": rnd.choice(prompts), "max_tokens": 20, "stream": True})
                        time.sleep(rnd.random() * 0.05)
                        sk.close()
                except Exception as e:  # noqa: BLE001
                    errors.append(f"client {k}: {e}")
                    return

        ts = [threading.Thread(target=client, args=(k,)) for k in range(A.soak_clients)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        check(not errors, "; ".join(errors[:3]))
        S.wait_metric("diffrt:num_requests_running", lambda v: v == 0, 10)
        S.wait_metric("diffrt:num_requests_waiting", lambda v: v == 0, 10)
        time.sleep(0.5)
        fd1, rss1 = S.fds(), S.rss_kib()
        m = S.metrics()
        print(f"  soak: {A.soak_clients} clients x {A.soak_seconds} s, "
              f"{int(sum(v for k, v in m.items() if k.startswith('diffrt:request_success_total')))} requests, "
              f"fds {fd0} -> {fd1}, RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB")
        check(fd1 <= fd0 + 2, f"descriptors grew from {fd0} to {fd1}")
        check(rss1 - rss0 < A.soak_rss_mib * 1024, f"RSS grew {(rss1 - rss0) / 1024:.1f} MiB (> {A.soak_rss_mib})")
    finally:
        check(S.stop() == 0, "exit status after the soak")


# raw exchanges with an ambiguous or broken frame: (name, bytes, status);
# each is answered with that status and the connection is closed, and no
# request hidden in the bytes after the bad frame is ever answered
SMUGGLE_TAIL = b"GET /v1/models HTTP/1.1\r\nHost: localhost\r\n\r\n"
FRAMING = [
    ("CL and TE", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 49\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("TE and CL", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n"
     b"Content-Length: 3\r\n\r\n0\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("two lengths", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 18\r\nContent-Length: 0\r\n\r\n"
     b'{"content": "ab"}\n' + SMUGGLE_TAIL, 400),
    ("a length list", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length: 18, 0\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("space before colon", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nContent-Length : 47\r\n\r\n" + SMUGGLE_TAIL,
     400),
    ("obs-fold", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nX: y\r\n Content-Length: 47\r\n\r\n" + SMUGGLE_TAIL,
     400),
    ("gzip, chunked", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
     501),
    ("chunked, gzip", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked, gzip\r\n\r\n", 501),
    ("xchunked", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: xchunked\r\n\r\n0\r\n\r\n", 501),
    ("chunked twice", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n"
     b"Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("TE in HTTP/1.0", b"POST /tokenize HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("a bad chunk size", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"0x11\r\n" + b'{"content": "ab"}\r\n0\r\n\r\n' + SMUGGLE_TAIL, 400),
    ("a bare LF in a chunk", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
     b'11\n{"content": "ab"}\r\n0\r\n\r\n' + SMUGGLE_TAIL, 400),
    ("chunk data too long", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n"
     b'2\r\n{"content": "ab"}\r\n0\r\n\r\n' + SMUGGLE_TAIL, 400),
    ("a bare LF head", b"GET /health HTTP/1.1\nHost: localhost\n\n" + SMUGGLE_TAIL, 400),
    ("a bare CR", b"GET /health HTTP/1.1\r\nHost: localhost\r\nX: a\rb\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("NUL in the target", b"GET /health\x00/x HTTP/1.1\r\nHost: localhost\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("%00 in the target", b"GET /health%00 HTTP/1.1\r\nHost: localhost\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("%00 in the query", b"GET /health?a=%00 HTTP/1.1\r\nHost: localhost\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("NUL in a value", b"GET /health HTTP/1.1\r\nHost: localhost\r\nX: a\x00b\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("NUL in Host", b"GET /health HTTP/1.1\r\nHost: local\x00host\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("no Host", b"GET /health HTTP/1.1\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("two Hosts", b"GET /health HTTP/1.1\r\nHost: localhost\r\nHost: evil\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("a bad Host", b"GET /health HTTP/1.1\r\nHost: a b\r\n\r\n" + SMUGGLE_TAIL, 400),
    ("HTTP/2.0", b"GET /health HTTP/2.0\r\nHost: localhost\r\n\r\n", 505),
    ("Expect: other", b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nExpect: 200-ok\r\nContent-Length: 2\r\n\r\n{}",
     417),
]


def case_framing():
    """HTTP framing as RFC 9112 says, over raw sockets: every ambiguous or
    broken frame gets its status and a closed connection, and the request
    hidden after it is never answered; good frames (chunked, pipelined,
    identical repeated lengths) still work; a client that half-closes after
    its request gets its answer, streamed or whole."""
    S = Server(A.diffrt, model(), "--metrics")
    try:
        for name, raw, status in FRAMING:
            sk = S.sock()
            sk.sendall(raw)
            r = read_response(sk, 10)
            check(r and r[0] == status, f"{name}: {r and r[0]} (want {status}): {r and r[2][:200]}")
            check(r[1].get("connection") == "close", f"{name}: no Connection: close ({r[1]})")
            e = json.loads(r[2])["error"]
            check(e["message"] and e["type"], f"{name}: error body {r[2][:200]}")
            check(closed_by_peer(sk, 5), f"{name}: the connection stayed open (a smuggled request could follow)")
            sk.close()
        # good frames
        body = b'{"content": "The magic"}'
        sk = S.sock()
        chunked = b"".join(b"%x\r\n%s\r\n" % (len(body[i:i + 5]), body[i:i + 5]) for i in range(0, len(body), 5))
        sk.sendall(b"POST /tokenize HTTP/1.1\r\nHost: localhost\r\nTransfer-Encoding: chunked\r\n\r\n" + chunked +
                   b"0\r\nX-Trailer: 1\r\n\r\n" + raw_request("POST", "/tokenize", body, {"Content-Length": "%d, %d" %
                                                                                          (len(body), len(body))}))
        r1, r2 = read_response(sk), read_response(sk)
        check(r1 and r1[0] == 200 and r2 and r2[0] == 200 and json.loads(r1[2]) == json.loads(r2[2]),
              f"chunked then pipelined: {r1} {r2}")
        sk.close()
        # answered from the head while the client waits for 100 Continue: the body may never come, so
        # the connection closes (were it kept, the next request would be read as that body)
        sk = S.sock()
        sk.sendall(b"POST /nope HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n")
        r = read_response(sk, 10)
        check(r and r[0] == 404 and r[1].get("connection") == "close" and closed_by_peer(sk, 5),
              f"an early answer to Expect: 100-continue: {r}")
        sk.close()
        # an early answer to a small body of known length: the body is dropped, the connection kept
        sk = S.sock()
        sk.sendall(b"POST /nope HTTP/1.1\r\nHost: localhost\r\nContent-Length: 5\r\n\r\nhello" +
                   raw_request("GET", "/health"))
        r1, r2 = read_response(sk, 10), read_response(sk, 10)
        check(r1 and r1[0] == 404 and r2 and r2[0] == 200, f"an early answer, then the next request: {r1} {r2}")
        sk.close()
        # a half close: the request, then shutdown(SHUT_WR); the answer still comes
        want = complete(S, "The", 6, ignore_eos=True)["choices"][0]["text"]
        for stream in (False, True):
            sk = S.sock()
            sk.sendall(raw_request("POST", "/v1/completions", json.dumps(
                {"prompt": "The", "max_tokens": 6, "temperature": 0, "ignore_eos": True, "stream": stream}).encode()))
            sk.shutdown(socket.SHUT_WR)
            r = read_response(sk, 30)
            while r and r[0] == 100:  # the server's probe of a half-closed client
                r = read_response(sk, 30)
            check(r and r[0] == 200, f"half close (stream {stream}): {r}")
            text = "".join(json.loads(e)["choices"][0]["text"] for e in sse_events(r[2])[:-1]) if stream else \
                json.loads(r[2])["choices"][0]["text"]
            check(text == want, f"half close (stream {stream}): {text!r}, want {want!r}")
            sk.close()
        m = S.metrics()
        check(m["diffrt:client_disconnects_total"] == 0, f"half-closed clients counted as gone: {m}")
    finally:
        check(S.stop() == 0, "exit status")


def case_hosts():
    """DNS rebinding and cross-site simple requests: on loopback without an
    API key, a Host that is not localhost, an IP address or an --allow-host
    name is 403; a POST from a foreign Origin needs Content-Type:
    application/json (a browser sends anything else without a preflight)."""
    body = json.dumps({"prompt": "The", "max_tokens": 2}).encode()

    def status(S, host, path="/health", method="GET", headers=None, b=b""):
        sk = S.sock()
        sk.sendall(raw_request(method, path, b, {"Host": host, **(headers or {})}))
        r = read_response(sk, 30)
        sk.close()
        return r and r[0], r and r[2]

    S = Server(A.diffrt, model())
    try:
        port = S.port
        for host in ("localhost", f"localhost:{port}", f"127.0.0.1:{port}", "127.0.0.2", "[::1]", f"[::1]:{port}",
                     "app.localhost:1", "LOCALHOST", "10.1.2.3", ""):
            st, b = status(S, host)
            check(st == 200, f"Host {host!r}: {st} {b[:200] if b else b}")
        for host in ("evil.example", f"evil.example:{port}", "localhost.evil.example", "127.0.0.1.nip.io",
                     "xlocalhost"):
            st, b = status(S, host)
            check(st == 403 and json.loads(b)["error"]["code"] == "host_not_allowed", f"Host {host!r}: {st} {b}")
            st, _ = status(S, host, "/v1/completions", "POST", {"Content-Type": "application/json"}, body)
            check(st == 403, f"Host {host!r} POST: {st}")
        # a foreign page's simple POST (text/plain, a form, no type) is refused; JSON passes (a browser
        # preflights it, and the preflight fails without --cors-origin)
        for ct in ("text/plain", "application/x-www-form-urlencoded", "multipart/form-data; boundary=x", None):
            h = {"Origin": "http://evil.example"}
            if ct:
                h["Content-Type"] = ct
            st, b = status(S, "localhost", "/v1/completions", "POST", h, body)
            check(st == 403 and json.loads(b)["error"]["code"] == "cross_site_request", f"Origin + {ct}: {st} {b}")
            st, _ = status(S, "localhost", "/tokenize", "POST", h, b'{"content": "a"}')
            check(st == 403, f"/tokenize from a foreign Origin with {ct}: {st}")
        st, _ = status(S, "localhost", "/v1/completions", "POST",
                       {"Origin": "http://evil.example", "Content-Type": "Application/JSON; charset=utf-8"}, body)
        check(st == 200, f"a foreign Origin with a JSON body: {st}")
        st, _ = status(S, f"localhost:{port}", "/v1/completions", "POST",
                       {"Origin": f"http://localhost:{port}", "Content-Type": "text/plain"}, body)
        check(st == 200, f"the same origin: {st}")
        st, _ = status(S, "localhost", "/v1/completions", "POST", {"Content-Type": "text/plain"}, body)
        check(st == 200, f"no Origin (curl -d): {st}")
        s, _, _ = S.request("OPTIONS", "/v1/completions", headers={"Origin": "http://evil.example"})
        check(s == 405, f"a preflight without --cors-origin: {s}")
    finally:
        check(S.stop() == 0, "exit status")
    S = Server(A.diffrt, model(), "--allow-host", "models.example,.corp.example")
    try:
        for host, want in (("models.example", 200), ("a.corp.example", 200), ("corp.example:80", 200),
                           ("evil.example", 403), ("localhost", 200)):
            st, _ = status(S, host)
            check(st == want, f"--allow-host, Host {host!r}: {st} (want {want})")
    finally:
        check(S.stop() == 0, "exit status")
    keys = tempfile.NamedTemporaryFile("w", delete=False)
    keys.write("sk-1\n")
    keys.close()
    S = Server(A.diffrt, model(), "--api-key-file", keys.name)
    try:
        st, _ = status(S, "evil.example")
        check(st == 200, f"with an API key the Host is not checked: {st}")
        st, _ = status(S, "evil.example", "/v1/models", headers={"Authorization": "bearer   sk-1"})
        check(st == 200, f"the auth scheme in another case, several spaces: {st}")
        st, _ = status(S, "evil.example", "/v1/models", headers={"Authorization": "Basic sk-1"})
        check(st == 401, f"another auth scheme: {st}")
    finally:
        os.unlink(keys.name)
        check(S.stop() == 0, "exit status")


CASES = {k[5:]: v for k, v in globals().items() if k.startswith("case_")}


def main():
    global A
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--diffrt", required=True)
    ap.add_argument("--models", required=True)
    ap.add_argument("--fixtures", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures",
                                                        "serve"))
    ap.add_argument("--soak-seconds", type=float, default=10)
    ap.add_argument("--soak-clients", type=int, default=16)
    ap.add_argument("--soak-rss-mib", type=float, default=64, help="the RSS growth the soak allows")
    ap.add_argument("--backend", default=None, help="for the numeric case (default cpu)")
    ap.add_argument("cases", nargs="*", help=" ".join(CASES))
    A = ap.parse_args()
    A.backend_args = ["--backend", A.backend] if A.backend else []
    todo = A.cases or list(CASES)
    for c in todo:
        if c not in CASES:
            print(f"unknown case {c}; cases: {' '.join(CASES)}")
            return 2
    for c in todo:
        t0 = time.time()
        try:
            CASES[c]()
            print(f"PASS {c} ({time.time() - t0:.1f} s)")
        except Exception as e:  # noqa: BLE001
            FAILS.append(c)
            print(f"FAIL {c}: {e}")
    print(f"{len(todo) - len(FAILS)}/{len(todo)} cases passed")
    return 1 if FAILS else 0


if __name__ == "__main__":
    sys.exit(main())
