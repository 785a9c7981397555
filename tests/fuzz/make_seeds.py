#!/usr/bin/env python3
"""Writes the fuzz harnesses' seed corpora, tests/fuzz/corpus/<harness>/, from
the bundled fixtures (tests/fixtures, tests/tokenizer, models/*/config.json).
Python standard library only; the output is the same on every run.

    python3 tests/fuzz/make_seeds.py            # rewrites tests/fuzz/corpus

Every seed is small (a few KB at most): a fuzzer mutates small inputs faster.
The input format of each harness is in its source (tests/fuzz/fuzz_*.c)."""
import json
import os
import shutil
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIX = os.path.join(ROOT, "tests", "fixtures")
TOK = os.path.join(ROOT, "tests", "tokenizer")
OUT = os.path.join(ROOT, "tests", "fuzz", "corpus")

# fuzz_config.c picks fixtures[byte 0 % 8] in this order
FIXTURES = ["diff_v2", "diff_v2_bf16", "hf_diffllama_f16", "hf_diffllama_gqa",
            "hf_llama_bf16", "hf_llama_gqa", "unilm_v1", "mlx_diff"]
# fuzz_tokenizer.c: bundled tokenizer k = bits 2-3 of byte 0
TOKENIZERS = ["gpt2", "llama3", "flags", "bytes256"]
SIZES = {"F32": 4, "F16": 2, "BF16": 2, "I32": 4}


def put(harness, name, data):
    if isinstance(data, str):
        data = data.encode()
    assert len(data) <= 8192, (harness, name, len(data))
    d = os.path.join(OUT, harness)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data)


def read_st(path):
    with open(path, "rb") as f:
        raw = f.read()
    n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:], raw


def st_bytes(tensors, metadata=None, pad=True):
    """tensors: list of (name, dtype, shape, bytes) -> a safetensors file as
    drt_st_write makes it (contiguous, header padded to 8 bytes)."""
    h, data = {}, b""
    if metadata is not None:
        h["__metadata__"] = metadata
    for name, dt, shape, b in tensors:
        h[name] = {"dtype": dt, "shape": shape, "data_offsets": [len(data), len(data) + len(b)]}
        data += b
    text = json.dumps(h, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def raw_header(h, data=b""):
    text = json.dumps(h, separators=(",", ":")).encode()
    return struct.pack("<Q", len(text)) + text + data


def seeds_safetensors():
    f32 = lambda *v: struct.pack("<%df" % len(v), *v)
    put("safetensors", "one_f32.st", st_bytes([("w", "F32", [2, 3], f32(1, 2, 3, 4, 5, 6))]))
    put("safetensors", "all_dtypes.st", st_bytes([
        ("a.f32", "F32", [2], f32(1, -2)),
        ("b.f16", "F16", [3], struct.pack("<3H", 0x3C00, 0xC000, 0x7E00)),
        ("c.bf16", "BF16", [1, 2], struct.pack("<2H", 0x3F80, 0xFF80)),
        ("d.i32", "I32", [2, 1, 1, 1], struct.pack("<2i", 7, -7)),
        ("e.empty", "F32", [0, 4], b""),
        ("f.scalar", "F32", [], f32(3.5)),
    ], metadata={"format": "pt"}))
    put("safetensors", "empty_header.st", struct.pack("<Q", 2) + b"{}")
    put("safetensors", "metadata_only.st", st_bytes([], metadata={"format": "pt", "x": "y"}))
    put("safetensors", "unpadded.st", st_bytes([("x", "F16", [4], b"\0" * 8)], pad=False))
    # real tensors of a fixture, re-packed: its names, shapes and bytes
    h, data, raw = read_st(os.path.join(FIX, "hf_diffllama_f16", "model.safetensors"))
    keep = ["model.layers.0.self_attn.lambda_q1", "model.layers.0.self_attn.lambda_k1",
            "model.norm.weight"]
    ts = []
    for k in keep:
        e = h[k]
        b0, b1 = e["data_offsets"]
        ts.append((k, e["dtype"], e["shape"], data[b0:b1]))
    put("safetensors", "fixture_3_tensors.st", st_bytes(ts, metadata={"format": "pt"}))
    # the first bytes of two real files: header length past the end
    for fx in ("unilm_v1", "hf_llama_bf16"):
        _, _, raw = read_st(os.path.join(FIX, fx, "model.safetensors"))
        put("safetensors", "truncated_%s.st" % fx, raw[:1536])
    # each a rejected file of one kind
    put("safetensors", "bad_overlap.st", raw_header({
        "a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
        "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}, b"\0" * 12))
    put("safetensors", "bad_size.st", raw_header({
        "a": {"dtype": "F16", "shape": [3], "data_offsets": [0, 8]}}, b"\0" * 8))
    put("safetensors", "bad_dtype.st", raw_header({
        "a": {"dtype": "F65", "shape": [1], "data_offsets": [0, 8]}}, b"\0" * 8))
    # a standard dtype diffrt does not compute with: read into the foreign list
    put("safetensors", "foreign_u64.st", raw_header({
        "opt.step": {"dtype": "U64", "shape": [], "data_offsets": [0, 8]},
        "w": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}, b"\0" * 16))
    put("safetensors", "bad_5dims.st", raw_header({
        "a": {"dtype": "F32", "shape": [1, 1, 1, 1, 1], "data_offsets": [0, 4]}}, b"\0" * 4))
    # empty: the zero comes first, so no product overflows on the way
    put("safetensors", "huge_empty.st", raw_header({
        "a": {"dtype": "F32", "shape": [0, 9007199254740992, 9007199254740992],
              "data_offsets": [0, 0]}}))
    put("safetensors", "bad_header_len.st", struct.pack("<Q", 2**63) + b"{}")


def seeds_config():
    for i, fx in enumerate(FIXTURES):
        with open(os.path.join(FIX, fx, "config.json"), "rb") as f:
            cfg = f.read()
        put("config", fx + ".json", bytes([i]) + cfg)
        c = json.loads(cfg)
        # only the fields the loader needs
        need = ["model_type", "vocab_size", "hidden_size", "intermediate_size",
                "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                "tie_word_embeddings", "model"]
        put("config", fx + "_minimal.json",
            bytes([i]) + json.dumps({k: c[k] for k in need if k in c}).encode())
    # transformers 4 spellings of RoPE on a transformers 5 fixture
    i = FIXTURES.index("hf_diffllama_gqa")
    with open(os.path.join(FIX, "hf_diffllama_gqa", "config.json")) as f:
        c = json.load(f)
    p = c.pop("rope_parameters")
    c["rope_theta"] = p.pop("rope_theta")
    c["rope_scaling"] = p
    put("config", "hf_diffllama_gqa_tf4.json", bytes([i]) + json.dumps(c).encode())
    # the bundled models' configs, on a fixture of the same model_type
    by_type = {}
    for i, fx in enumerate(FIXTURES):
        with open(os.path.join(FIX, fx, "config.json")) as f:
            by_type.setdefault(json.load(f).get("model_type"), i)
    models = os.path.join(ROOT, "models")
    for m in sorted(os.listdir(models)):
        p = os.path.join(models, m, "config.json")
        if not os.path.exists(p):
            continue
        with open(p, "rb") as f:
            cfg = f.read()
        i = by_type.get(json.loads(cfg)["model_type"])
        if i is not None:
            put("config", "model_" + m + ".json", bytes([i]) + cfg)


def seeds_index():
    # fuzz_index.c: hf_llama_bf16's tensors, name-sorted, tensor i in shard i % 3
    h, _, _ = read_st(os.path.join(FIX, "hf_llama_bf16", "model.safetensors"))
    names = sorted(k for k in h if k != "__metadata__")
    shard = lambda s: "model-%05d-of-00003.safetensors" % (s + 1)
    wm = {n: shard(i % 3) for i, n in enumerate(names)}
    total = sum(h[n]["data_offsets"][1] - h[n]["data_offsets"][0] for n in names)
    idx = lambda w, **kw: json.dumps(dict(kw, weight_map=w), indent=1)
    put("index", "good.json", idx(wm, metadata={"total_size": total}))
    put("index", "good_compact.json", json.dumps({"weight_map": wm}, separators=(",", ":")))
    w = dict(wm)
    w[names[0]] = shard(1)
    put("index", "wrong_shard.json", idx(w))
    put("index", "missing_tensor.json", idx({k: v for k, v in wm.items() if k != names[-1]}))
    put("index", "one_shard.json", idx({k: v for k, v in wm.items() if v == shard(0)}))
    w = dict(wm)
    w["model.norm.weight"] = "extra.safetensors"
    w["extra.only"] = "extra.safetensors"
    put("index", "extra_dup.json", idx(w))
    put("index", "sub_dir.json", idx({k: "sub/" + v for k, v in wm.items() if v == shard(0)}))
    put("index", "dot_dot.json", idx({names[0]: "../sharded/" + shard(0)}))
    for f in ("empty.safetensors", "garbage.safetensors", "short.bin", "dir.safetensors",
              "missing.safetensors", "", "/etc/passwd"):
        put("index", "file_%s.json" % (f.strip("/").replace("/", "_").replace(".", "_") or "empty_name"),
            idx({"extra.only": f}))
    put("index", "empty_map.json", idx({}))
    put("index", "not_object.json", json.dumps({"weight_map": [shard(0)]}))


def tok_byte0(mode, k=0, add_special=0, skip=0):
    return bytes([mode | k << 2 | add_special << 4 | skip << 5])


def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs, n = bs[:], 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


def shrink_tokenizer(j, alphabet, max_vocab=110):
    """A small tokenizer.json with the same pre-tokenizer, post-processor and
    added tokens as j: the byte tokens of `alphabet`, the merges among them
    (in j's order) up to max_vocab entries, ids renumbered densely, added
    token ids and post-processor ids recomputed as HF would."""
    b2u = bytes_to_unicode()
    m = j["model"]
    vocab = m["vocab"]
    keep = [b2u[b] for b in sorted(set(alphabet.encode()))]
    keep += [a["content"] for a in j["added_tokens"] if a["content"] in vocab]
    kept = set(keep)
    merges = []
    for e in m["merges"]:
        a, b = e.split(" ", 1) if isinstance(e, str) else e
        if a in kept and b in kept and a + b in vocab:
            if a + b not in kept:
                if len(keep) >= max_vocab:
                    continue
                keep.append(a + b)
                kept.add(a + b)
            merges.append(e)
    order = sorted(kept, key=lambda s: vocab[s])
    new_vocab = {s: i for i, s in enumerate(order)}
    ids, max_id = {}, -1
    for a in j["added_tokens"]:
        c = a["content"]
        if c in ids:
            continue
        if c in new_vocab:
            i = new_vocab[c]
        else:
            i = max_id + 1 if max_id >= len(new_vocab) or not new_vocab else len(new_vocab)
        ids[c] = i
        max_id = max(max_id, i)
    out = json.loads(json.dumps(j))
    out["model"]["vocab"] = new_vocab
    out["model"]["merges"] = merges
    for a in out["added_tokens"]:
        a["id"] = ids[a["content"]]

    def fix_post(p):
        if not p:
            return
        if p.get("type") == "Sequence":
            for q in p["processors"]:
                fix_post(q)
        for key in ("cls", "sep"):
            if key in p:
                p[key][1] = ids.get(p[key][0], new_vocab.get(p[key][0], 0))
        for name, st in p.get("special_tokens", {}).items():
            st["ids"] = [ids.get(t, new_vocab.get(t, 0)) for t in st["tokens"]]
    fix_post(out.get("post_processor"))
    return json.dumps(out, separators=(",", ":"), ensure_ascii=False).encode()


def unescape(s):
    """corpus.txt: \\n \\r \\t \\\\ stand for newline, CR, tab, backslash"""
    out, i = [], 0
    while i < len(s):
        if s[i] == "\\" and i + 1 < len(s):
            out.append({"n": "\n", "r": "\r", "t": "\t"}.get(s[i + 1], s[i + 1]))
            i += 2
        else:
            out.append(s[i])
            i += 1
    return "".join(out)


def seeds_tokenizer():
    lines = []
    with open(os.path.join(TOK, "corpus.txt"), encoding="utf-8") as f:
        for ln in f.read().split("\n"):
            if ln:
                lines.append(unescape(ln).encode())
    # mode 0: tokenizer.json files, NUL, text
    with open(os.path.join(TOK, "bytes256.json"), "rb") as f:
        put("tokenizer", "json_bytes256", tok_byte0(0) + f.read() + b"\0" + lines[0])
    alphabet = "abcdefghijklmnopqrstuvwxyz ABCHW.,'!?\n0123456789"
    for k, name in enumerate(TOKENIZERS[:3]):
        with open(os.path.join(TOK, name + ".json"), encoding="utf-8") as f:
            j = json.load(f)
        put("tokenizer", "json_mini_" + name,
            tok_byte0(0, 0, k & 1, k >> 1) + shrink_tokenizer(j, alphabet) + b"\0" + lines[k + 1])
    # mode 1: corpus lines on each bundled tokenizer
    for i, ln in enumerate(lines[:16]):
        k = i % 4
        put("tokenizer", "encode_%s_%02d" % (TOKENIZERS[k], i), tok_byte0(1, k, i >> 2 & 1, i >> 3 & 1) + ln)
    # mode 2: the ids HF gave for a few lines, int16 little-endian
    for k, name in enumerate(TOKENIZERS):
        with open(os.path.join(TOK, "expected_%s.json" % name), encoding="utf-8") as f:
            exp = json.load(f)
        cases = exp["cases"] if isinstance(exp, dict) and "cases" in exp else exp
        n = 0
        for c in cases if isinstance(cases, list) else []:
            ids = c.get("ids") if isinstance(c, dict) else None
            if not ids or n >= 3:
                continue
            put("tokenizer", "decode_%s_%d" % (name, n),
                tok_byte0(2, k, 0, n & 1) + struct.pack("<%dh" % len(ids[:400]), *ids[:400]))
            n += 1
    # mode 3: bytes streamed one at a time, UTF-8 cut apart
    for k, name in enumerate(TOKENIZERS):
        put("tokenizer", "stream_%s" % name, tok_byte0(3, k, 0, k & 1) + lines[(5 * k + 3) % len(lines)])
    put("tokenizer", "stream_invalid_utf8", tok_byte0(3, 3) + b"a\xe4\xb8\xff\xf0\x9f\x98b\xc3")


# fuzz_request.c: byte 0 picks the endpoint (modulo 4), the rest is the body
ENDPOINTS = ["completions", "chat", "tokenize", "detokenize"]


def seeds_request():
    def req(name, ep, body):
        if not isinstance(body, (str, bytes)):
            body = json.dumps(body, separators=(",", ":"))
        if isinstance(body, str):
            body = body.encode()
        put("request", name, bytes([ENDPOINTS.index(ep)]) + body)

    user = [{"role": "user", "content": "Hello"}]
    req("completions_text", "completions", {"model": "m", "prompt": "Once upon a time", "max_tokens": 16})
    req("completions_ids", "completions", {"prompt": [1, 2, 999], "max_tokens": 4, "seed": 42})
    req("completions_all", "completions", {
        "model": "m", "prompt": "x", "max_tokens": 100, "temperature": 0.7, "top_p": 0.9, "top_k": 40,
        "seed": 18446744073709551615, "stop": ["\n", "END"], "stream": True,
        "stream_options": {"include_usage": True}, "ignore_eos": False, "n": 1, "echo": False,
        "logprobs": None, "suffix": None, "presence_penalty": 0, "logit_bias": {}, "user": "u"})
    req("completions_batch_of_one", "completions", {"prompt": [[5, 6]]})
    req("completions_nulls", "completions", '{"prompt":"x","stop":null,"seed":null,"temperature":null}')
    req("completions_escapes", "completions", '{"prompt":"a\\u00e9\\ud83d\\ude00\\n\\"\\\\"}')
    req("completions_bad_text", "completions", '{"prompt":"a\\u0000b\\ud800c"}')
    req("completions_raw_utf8", "completions", b'{"prompt":"\xe4\xb8\xad\xff\xc0\xaf"}')
    req("completions_numbers", "completions",
        '{"prompt":"x","max_tokens":1.5e1,"seed":1e19,"top_k":-1,"temperature":1e999}')
    req("completions_dup", "completions", '{"prompt":"a","prompt":"b","Prompt":1}')
    req("completions_deep", "completions", '{"prompt":"x","x":' + "[" * 70 + "]" * 70 + "}")
    req("chat_simple", "chat", {"model": "m", "messages": user})
    req("chat_all_roles", "chat", {"messages": [
        {"role": "developer", "content": "d"}, {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {"role": "assistant", "content": None, "tool_calls": []}, {"role": "user", "content": ""}],
        "max_completion_tokens": 8, "max_tokens": 9, "stream": True, "stream_options": {}})
    req("chat_unsupported", "chat", {"messages": user, "tools": [{"type": "function"}],
                                     "response_format": {"type": "json_object"}})
    req("chat_image", "chat", {"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:"}}]}]})
    req("chat_tool_role", "chat", {"messages": [{"role": "tool", "content": "x"}]})
    req("tokenize_content", "tokenize", {"content": "Hello world", "add_special": False})
    req("tokenize_prompt", "tokenize", {"prompt": "Hi", "model": "m"})
    req("detokenize", "detokenize", {"tokens": [1, 2, 3, 0, 999]})
    req("detokenize_bad", "detokenize", {"tokens": [-1, 1000, 1.5]})
    req("not_object", "completions", "[]")
    req("truncated", "chat", '{"messages":[{"role":"user","content":"x')
    # byte 0 with bit 7: raw bytes off a socket, for the framing layer (serve/h1.c)
    frames = {
        "frame_get": b"GET /health HTTP/1.1\r\nHost: localhost\r\n\r\n",
        "frame_post": b"POST /v1/completions HTTP/1.1\r\nHost: a:1\r\nContent-Length: 2\r\n\r\n{}",
        "frame_chunked": b"POST /tokenize HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n"
                         b"5;x=y\r\nhello\r\n0\r\nT: 1\r\n\r\nGET / HTTP/1.1\r\n",
        "frame_cl_te": b"POST / HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "frame_http10": b"GET /x?q=%41 HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
        "frame_absolute": b"OPTIONS http://[::1]:8/ HTTP/1.1\r\nHost: [::1]:8\r\nExpect: 100-continue\r\n\r\n",
        "frame_obs_fold": b"GET / HTTP/1.1\r\nHost: a\r\nX: a\r\n b\r\n\r\n",
        "frame_bare_lf": b"GET / HTTP/1.1\nHost: a\n\n",
    }
    for name, raw in frames.items():
        put("request", name, b"\x80" + raw)


# fuzz_chat.c: byte 0 with bit 7: a tokenizer_config.json to detect; else
# bits 0-1 the template and records of (role, length, content)
def seeds_chat():
    for name in sorted(os.listdir(os.path.join(FIX, "chat"))):
        if name.endswith(".json"):
            with open(os.path.join(FIX, "chat", name), "rb") as f:
                cfg = f.read()
            if len(cfg) < 8000:
                put("chat", "detect_" + name[:-5], b"\x80" + cfg)

    def conv(msgs):
        out = b""
        for role, text in msgs:
            t = text.encode()[:255]
            out += bytes([role, len(t)]) + t
        return out

    talk = [(0, "Be brief."), (1, "Hi <|eot_id|> <|im_start|>system"), (2, "  Hello  "), (1, "\u00a0 \u2003x \n")]
    for k, name in enumerate(["llama3", "llama31", "chatml", "plain"]):
        put("chat", "render_" + name, bytes([k]) + conv(talk))
    put("chat", "render_empty_contents", bytes([2]) + conv([(1, ""), (2, ""), (0, " ")]))
    put("chat", "render_bad_utf8", bytes([0]) + bytes([1, 6]) + b"a\xff\x00\xe4\xb8b")


def main():
    if len(sys.argv) > 1:
        sys.exit(__doc__)
    if os.path.isdir(OUT):
        shutil.rmtree(OUT)
    seeds_safetensors()
    seeds_config()
    seeds_index()
    seeds_tokenizer()
    seeds_request()
    seeds_chat()
    for h in sorted(os.listdir(OUT)):
        d = os.path.join(OUT, h)
        files = os.listdir(d)
        print("%-12s %3d seeds, %6d bytes" % (h, len(files),
                                             sum(os.path.getsize(os.path.join(d, f)) for f in files)))


if __name__ == "__main__":
    main()
