#!/usr/bin/env python3
"""Writes one retrieval prompt for the README's main-job command.

    python3 python/niah/example_prompt.py --model models/diff-v1-tiny

The prompt is evaluation prompt (seed, ctx, N, R, depth, index 0, query 0) of
docs/niah_spec.md, ctx defaulting to the model's training context. It is written to
MODEL/prompt.txt exactly as `diffrt run --prompt-file` reads it (no trailing
newline); the needle's number, which a retrieving model answers, goes to stdout.
"""

import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as g  # noqa: E402


def example(model_dir, seed=2026, ctx=None, needles=1, depth=50):
    """The example prompt record (eval_set's) for model_dir."""
    with open(os.path.join(model_dir, "config.json")) as f:
        ctx = ctx or json.load(f)["max_position_embeddings"]
    count = g.TokenCounter(os.path.join(model_dir, "tokenizer.json"))
    return g.eval_set(count, seed, [ctx], needles, 1, [depth], 1)[0]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--seed", type=int, default=2026)
    ap.add_argument("--ctx", type=int, default=None)
    ap.add_argument("--needles", type=int, default=1)
    ap.add_argument("--depth", type=int, default=50)
    ap.add_argument("--out", default=None, help="default MODEL/prompt.txt")
    args = ap.parse_args()
    s = example(args.model, args.seed, args.ctx, args.needles, args.depth)
    out = args.out or os.path.join(args.model, "prompt.txt")
    with open(out, "w") as f:
        f.write(s["prompt"])
    print(f"{out}: {s['prompt_tokens']} tokens, asks for the magic number of {s['city']}; "
          f"answer {s['answer']}", file=sys.stderr)
    print(s["answer"])


if __name__ == "__main__":
    main()
