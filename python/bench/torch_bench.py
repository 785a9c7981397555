#!/usr/bin/env python3
"""PyTorch/transformers side of the CPU benchmark: prefill and decode tokens/s.

    python3 python/bench/torch_bench.py --model DIR --threads N --dtype f32|bf16 \
        --prompt 512 --new 64 --repeats R [--json FILE]
    python3 python/bench/torch_bench.py --model DIR --prompt 512 --print-ids

DIR is a Hugging Face checkpoint (e.g. from make_models.py). The model is loaded
with AutoModelForCausalLM.from_pretrained(DIR, dtype=f32|bf16), on CPU, with
torch.set_num_threads(N) and set_num_interop_threads(1), and run under
torch.inference_mode() with transformers' default attention implementation.

The prompt is the token ids [(i * 7919 + 13) % vocab for i in range(prompt)]
(vocab from DIR/config.json; no tokenizer). --print-ids prints them as a comma
list and exits, for `diffrt run --tokens`.

One round:
  prefill  one forward over the whole prompt with use_cache=True and
           logits_to_keep=1 (the last row only, as generate() does);
           prefill tok/s = prompt / time of that call
  decode   `new` greedy steps, each one forward of one token with
           past_key_values; decode tok/s = new / time of those calls
One warm-up round is run first and not counted, then R rounds. Prints

  torch f32 threads=2 prefill tok/s: min 123.4 median 130.1
  torch f32 threads=2 decode tok/s: min 12.3 median 13.0

and, with --json, the same numbers (plus every round's) and the torch and
transformers versions.
"""

import argparse
import json
import os
import statistics
import time


def prompt_ids(model_dir, n):
    with open(os.path.join(model_dir, "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    return [(i * 7919 + 13) % vocab for i in range(n)]


def one_round(model, torch, ids, n_new):
    x = torch.tensor([ids])
    t0 = time.perf_counter()
    out = model(input_ids=x, use_cache=True, logits_to_keep=1)
    t_prefill = time.perf_counter() - t0
    past = out.past_key_values
    tok = out.logits[:, -1].argmax(-1, keepdim=True)
    t0 = time.perf_counter()
    for _ in range(n_new):
        out = model(input_ids=tok, past_key_values=past, use_cache=True)
        past = out.past_key_values
        tok = out.logits[:, -1].argmax(-1, keepdim=True)
    t_decode = time.perf_counter() - t0
    return len(ids) / t_prefill, n_new / t_decode


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="HF checkpoint directory")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--dtype", choices=["f32", "bf16"], default="f32")
    ap.add_argument("--prompt", type=int, default=512, help="prompt length in tokens")
    ap.add_argument("--new", type=int, default=64, help="decode steps")
    ap.add_argument("--repeats", type=int, default=3, help="measured rounds after one warm-up")
    ap.add_argument("--json", help="write the results to this file")
    ap.add_argument("--print-ids", action="store_true", help="print the prompt ids and exit")
    args = ap.parse_args()

    ids = prompt_ids(args.model, args.prompt)
    if args.print_ids:
        print(",".join(map(str, ids)))
        return

    import torch
    import transformers
    from transformers import AutoModelForCausalLM

    torch.set_num_interop_threads(1)
    torch.set_num_threads(args.threads)
    dtype = {"f32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    with torch.inference_mode():
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype).eval()
        one_round(model, torch, ids, args.new)  # warm-up
        rounds = [one_round(model, torch, ids, args.new) for _ in range(args.repeats)]

    res = {"impl": "torch", "model": args.model, "dtype": args.dtype, "threads": args.threads,
           "prompt": args.prompt, "new": args.new, "repeats": args.repeats,
           "attn_implementation": model.config._attn_implementation,
           "torch": torch.__version__, "transformers": transformers.__version__}
    for i, name in enumerate(("prefill", "decode")):
        v = [r[i] for r in rounds]
        res[name + "_tok_s"] = {"min": min(v), "median": statistics.median(v), "all": v}
        print(f"torch {args.dtype} threads={args.threads} {name} tok/s: "
              f"min {min(v):.1f} median {statistics.median(v):.1f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
