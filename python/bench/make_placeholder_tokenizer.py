#!/usr/bin/env python3
"""Writes a placeholder tokenizer.json for a random-weight benchmark model
(python/bench/make_models.py makes none), so that `diffrt serve` can run it.

    python3 python/bench/make_placeholder_tokenizer.py /tmp/bench-models/llama-1.1b-q4_0

A byte-level BPE of the config's vocabulary size, laid out as
python/bench/make_gguf.py's placeholder for llama.cpp: <unk>, <s>, </s>
(ids 0-2, special), 256 single-byte tokens, then "t<i>" for every id after,
and no merges: any text encodes byte by byte, and every generated id
decodes to some text, so a stream has one chunk per token in both servers.
Text through it means nothing (the weights are random). Standard library
only.
"""

import json
import os
import sys


def byte_alphabet():
    """GPT-2's byte-level alphabet: byte b -> one printable character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAC + 1)) + list(range(0xAE, 0xFF + 1))
    out, n = {}, 0
    for b in range(256):
        if b in keep:
            out[b] = chr(b)
        else:
            out[b] = chr(256 + n)
            n += 1
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    d = sys.argv[1]
    with open(os.path.join(d, "config.json")) as f:
        cfg = json.load(f)
    V = cfg["vocab_size"]
    alpha = byte_alphabet()
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    for b in range(256):
        vocab[alpha[b]] = len(vocab)
    while len(vocab) < V:
        vocab[f"t{len(vocab)}"] = len(vocab)
    special = [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False, "normalized": False,
                "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])]
    tok = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": special, "normalizer": None,
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
           "post_processor": None,
           "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
           "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                     "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                     "vocab": vocab, "merges": []}}
    with open(os.path.join(d, "tokenizer.json"), "w") as f:
        json.dump(tok, f)
    print(f"{d}/tokenizer.json: placeholder byte-level BPE, vocab {V}")


if __name__ == "__main__":
    main()
