#!/usr/bin/env python3
"""Load client for OpenAI-compatible servers (diffrt serve, llama-server):
sweeps concurrency and reports requests/s, output tokens/s, time to first
token and inter-token latency (p50/p99), and errors.

    python3 bench/serve_load.py --url http://127.0.0.1:8080 --concurrency 1,2,4,8,16 \\
        --requests 4 --max-tokens 64 --prompt-words 24 --json out.json

Each of C clients sends --requests streaming /v1/completions requests one
after the other (greedy, "ignore_eos": true so every request generates
exactly its max_tokens: --max-tokens, or with --spread S a length drawn
uniformly from [N(1-S), N(1+S)], which keeps the clients from arriving in
lockstep), each with its own prompt of --prompt-words
random words, or of --prompt-tokens random token ids (seeded; no two
requests share a prefix, so no server's prompt cache helps). TTFT is the time from sending to the first text chunk;
inter-token latency the gaps between chunks. Output tokens are counted from
the usage a server reports, else from --max-tokens when finish_reason is
"length". Output tok/s is over the whole sweep point; steady tok/s only
over the window in which every client has a request in flight (from the
last client's first text to the first client's end), which leaves out the
start (every prompt at once) and the tail (fewer clients than C, since
lengths differ). Standard library only.
"""

import argparse
import http.client
import json
import random
import sys
import threading
import time
import urllib.parse

WORDS = ("the of and a to in is was he for it with as his on be at by had are but from or have an they which one you "
         "were all we her she there would their will when who him been has more if no out do so can what up said "
         "about other into than its time only could new them man some these then two first may any like now my such "
         "make over our even most me state after also made many did must before back see through way where get much "
         "go well your know should down work year because come people just say each those take day good how long "
         "little very still own find").split()


def percentile(xs, q):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def one_request(host, port, body, timeout):
    """(ttft, [gaps], tokens, error or None, [chunk times], end time)"""
    c = http.client.HTTPConnection(host, port, timeout=timeout)
    t0 = time.perf_counter()
    try:
        c.request("POST", "/v1/completions", body=json.dumps(body), headers={"Content-Type": "application/json"})
        r = c.getresponse()
        if r.status != 200:
            return None, [], 0, f"HTTP {r.status}", [], time.perf_counter()
        ttft, last, gaps, chunks, usage, finish = None, None, [], 0, None, None
        times = []
        buf = b""
        while True:
            d = r.read1(65536) if hasattr(r, "read1") else r.read(1)
            if not d:
                break
            buf += d
            while b"\n\n" in buf:
                ev, buf = buf.split(b"\n\n", 1)
                for line in ev.split(b"\n"):
                    if not line.startswith(b"data: "):
                        continue
                    data = line[6:]
                    if data == b"[DONE]":
                        continue
                    j = json.loads(data)
                    if j.get("usage"):
                        usage = j["usage"]
                    for ch in j.get("choices") or []:
                        if ch.get("finish_reason"):
                            finish = ch["finish_reason"]
                        if ch.get("text"):
                            now = time.perf_counter()
                            if ttft is None:
                                ttft = now - t0
                            else:
                                gaps.append(now - last)
                            last = now
                            chunks += 1
                            times.append(now)
        if usage and usage.get("completion_tokens"):
            toks = usage["completion_tokens"]
        elif finish == "length":
            toks = body["max_tokens"]
        else:
            toks = chunks
        return ttft, gaps, toks, None, times, time.perf_counter()
    except Exception as e:  # noqa: BLE001
        return None, [], 0, type(e).__name__, [], time.perf_counter()
    finally:
        c.close()


def sweep_point(host, port, conc, a, seed):
    rnd = random.Random(seed)
    def prompt():
        if a.prompt_tokens:
            return [rnd.randrange(259, a.vocab) for _ in range(a.prompt_tokens)]
        return " ".join(rnd.choice(WORDS) for _ in range(a.prompt_words))

    def ntok():
        lo = max(1, round(a.max_tokens * (1 - a.spread)))
        hi = max(lo, round(a.max_tokens * (1 + a.spread)))
        return rnd.randint(lo, hi)

    bodies = [[{"prompt": prompt(), "max_tokens": ntok(),
                "temperature": 0, "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True},
                **({"model": a.model} if a.model else {})} for _ in range(a.requests)] for _ in range(conc)]
    res = [[] for _ in range(conc)]

    def client(i):
        for b in bodies[i]:
            res[i].append(one_request(host, port, b, a.timeout))

    ts = [threading.Thread(target=client, args=(i,)) for i in range(conc)]
    t0 = time.perf_counter()
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    wall = time.perf_counter() - t0
    flat = [r for rs in res for r in rs]
    ok = [r for r in flat if r[3] is None]
    ttft = [r[0] for r in ok if r[0] is not None]
    itl = [g for r in ok for g in r[1]]
    toks = sum(r[2] for r in ok)
    errs = {}
    for r in flat:
        if r[3]:
            errs[r[3]] = errs.get(r[3], 0) + 1
    # steady state: from the moment every client has its first text to the
    # moment the first client is done, every client has a request in flight
    # (the sweep's start, all prompts at once, and its tail, fewer clients
    # than C, are left out); chunks in that window, weighted by their
    # request's tokens per chunk
    steady = float("nan")
    firsts = [rs[0][4][0] for rs in res if rs and rs[0][4]]
    lasts = [rs[-1][5] for rs in res if rs]
    if len(firsts) == conc and lasts:
        ta, tb = max(firsts), min(lasts)
        if tb > ta:
            n = sum(sum(1 for t in r[4] if ta <= t <= tb) * r[2] / len(r[4]) for r in ok if r[4])
            steady = n / (tb - ta)
    return {"concurrency": conc, "requests": len(flat), "ok": len(ok), "errors": errs, "wall_s": wall,
            "requests_per_s": len(ok) / wall, "output_tok_per_s": toks / wall, "steady_tok_per_s": steady,
            "ttft_p50_ms": percentile(ttft, 0.5) * 1e3, "ttft_p99_ms": percentile(ttft, 0.99) * 1e3,
            "itl_p50_ms": percentile(itl, 0.5) * 1e3, "itl_p99_ms": percentile(itl, 0.99) * 1e3}


def table(rows, label):
    out = [f"{label}", "", "| clients | req/s | output tok/s | steady tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms | "
           "ITL p99 ms | errors |", "|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        e = ", ".join(f"{k} {v}" for k, v in r["errors"].items()) or "0"
        out.append(f"| {r['concurrency']} | {r['requests_per_s']:.2f} | {r['output_tok_per_s']:.1f} | "
                   f"{r['steady_tok_per_s']:.1f} | "
                   f"{r['ttft_p50_ms']:.0f} | {r['ttft_p99_ms']:.0f} | {r['itl_p50_ms']:.1f} | {r['itl_p99_ms']:.1f} | {e} |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--url", required=True)
    ap.add_argument("--concurrency", default="1,2,4,8,16")
    ap.add_argument("--requests", type=int, default=4, help="requests per client")
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--prompt-words", type=int, default=24)
    ap.add_argument("--spread", type=float, default=0,
                    help="max_tokens drawn uniformly from [N(1-S), N(1+S)] per request (0: every request N, so "
                         "clients stay in lockstep; vLLM's random dataset varies lengths the same way)")
    ap.add_argument("--prompt-tokens", type=int, default=0,
                    help="prompts of N random token ids in [259, --vocab) instead of words (no tokenizer involved)")
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--model", default=None)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--label", default="")
    ap.add_argument("--json", default=None)
    a = ap.parse_args()
    u = urllib.parse.urlparse(a.url)
    host, port = u.hostname, u.port or 80
    rows = []
    for conc in [int(x) for x in a.concurrency.split(",")]:
        r = sweep_point(host, port, conc, a, a.seed * 1000 + conc)
        rows.append(r)
        print(f"{a.label} clients {conc}: {r['output_tok_per_s']:.1f} tok/s (steady {r['steady_tok_per_s']:.1f}), "
              f"{r['requests_per_s']:.2f} req/s, "
              f"TTFT p50 {r['ttft_p50_ms']:.0f} ms, ITL p50 {r['itl_p50_ms']:.1f} ms, errors {r['errors'] or 0}",
              file=sys.stderr, flush=True)
    print(table(rows, a.label))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"url": a.url, "label": a.label, "max_tokens": a.max_tokens, "spread": a.spread,
                       "prompt_words": a.prompt_words,
                       "prompt_tokens": a.prompt_tokens,
                       "requests_per_client": a.requests, "rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
