#!/usr/bin/env python3
"""Writes NIAH prompts for the server's tests (tests/serve/): the evaluation
prompts of docs/niah_spec.md for one bundled model, with their answers.

    python3 python/serve/make_niah_prompts.py --model models/diff-v1-tiny \
        --out tests/fixtures/serve/niah_diff-v1-tiny.json

Needs the `tokenizers` package (python/niah/generate.py counts tokens with it).
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "niah"))
import generate as g  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=7)
    ap.add_argument("--samples", type=int, default=4)
    args = ap.parse_args()
    with open(os.path.join(args.model, "config.json")) as f:
        ctx = json.load(f)["max_position_embeddings"]
    count = g.TokenCounter(os.path.join(args.model, "tokenizer.json"))
    recs = g.eval_set(count, args.seed, [ctx], 1, 1, [0, 25, 50, 75, 100], args.samples)
    out = [{"prompt": r["prompt"], "answer": r["answer"], "depth": r["depth"]} for r in recs]
    with open(args.out, "w") as f:
        json.dump({"model": os.path.basename(os.path.normpath(args.model)), "seed": args.seed, "prompts": out}, f,
                  indent=1)
        f.write("\n")
    print(f"{args.out}: {len(out)} prompts")


if __name__ == "__main__":
    main()
