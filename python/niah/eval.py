#!/usr/bin/env python3
"""Multi-needle retrieval evaluation (docs/niah_spec.md) of a saved checkpoint in PyTorch.

    python3 python/niah/eval.py --model models/diff-v1-tiny [--needles 1 --queries 1
        --ctx 128 --depths 0,25,50,75,100 --samples 40 --seed 0] [--attention] [--out F]

The checkpoint is loaded the way it is saved (transformers' DiffLlama / Llama
classes, eager attention, f16 weights computed in f32; diff_modules.py's V2
module for diff_transformer_v2). For every prompt the model decodes greedily,
at most 12 new tokens, stopping at <eos>; the answer is the leading run of
digits of the decoded text (skip_special_tokens, leading spaces stripped) and
is correct iff it equals the needle's number.

Writes a JSON with the settings, one record per prompt (generated ids and text,
parsed answer, correct, the smallest top-2 logit gap along the greedy path) and
accuracy per ctx x depth. With --attention also, at the last prompt token,
attention to the answer span and to the rest of the context, averaged over
(diff-)heads and layers (docs/niah_spec.md, "Attention"). With the default
settings the file is MODEL/niah_python.json; otherwise pass --out (or nothing is
written). The committed MODEL/niah_python.json files were made with --attention.
"""

import argparse
import json
import os
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as g  # noqa: E402
import models as M  # noqa: E402

DEFAULTS = dict(needles=1, queries=1, ctx=None, depths="0,25,50,75,100", samples=40, seed=0)


def parse_answer(text):
    s = text.lstrip(" ")
    i = 0
    while i < len(s) and "0" <= s[i] <= "9":
        i += 1
    return s[:i]


def attention_stats(rows, span, question_start):
    """rows [L, H, T] float64 for the last query position. Returns mean over layers and
    heads of: sum over the answer span [a0, a1), sum over the rest of the context
    [0, question_start) minus the span."""
    a0, a1 = span
    ans = rows[:, :, a0:a1].sum(-1)
    ctx = rows[:, :, :question_start].sum(-1)
    return float(ans.mean()), float((ctx - ans).mean())


def eos_ids(model_dir):
    """Every id that ends an answer (docs/niah_spec.md section 6): config.json's
    eos_token_id, then generation_config.json's (optional), each an id or a
    list, as drt_model_eos_ids collects them."""
    ids = []
    for name in ("config.json", "generation_config.json"):
        path = os.path.join(model_dir, name)
        if name != "config.json" and not os.path.exists(path):
            continue
        with open(path) as f:
            v = json.load(f).get("eos_token_id")
        for i in (v if isinstance(v, list) else [] if v is None else [v]):
            if i not in ids:
                ids.append(i)
    return ids


def evaluate(model_dir, kind, model, tok, needles, queries, ctxs, depths, samples, seed,
             attention=False, quiet=False):
    """Runs the evaluation set; returns (summary dict, per-prompt records)."""
    count = g.TokenCounter(tok)
    eos = eos_ids(model_dir)
    runner = M.Runner(kind, model)
    prompts = g.eval_set(count, seed, ctxs, needles, queries, depths, samples)
    recs = []
    t0 = time.time()
    for i, s in enumerate(prompts):
        ids = tok.encode(s["prompt"]).ids
        assert len(ids) == s["prompt_tokens"]
        gen, gaps = runner.greedy(ids, g.MAX_NEW_TOKENS, eos)
        text = tok.decode(gen, skip_special_tokens=True)
        pred = parse_answer(text)
        rec = dict(ctx=s["ctx"], depth=s["depth"], index=s["index"], query=s["query"],
                   city=s["city"], answer=s["answer"], prompt_tokens=s["prompt_tokens"],
                   generated_ids=gen, generated_text=text, predicted=pred,
                   correct=pred == s["answer"], min_gap=round(min(gaps), 4))
        if attention:
            rows = M.last_row_maps(kind, model, ids)
            a, n = attention_stats(rows, s["answer_span"], s["question_start"])
            rec.update(answer_span=s["answer_span"], question_start=s["question_start"],
                       attn_answer=a, attn_noise=n)
        recs.append(rec)
        if not quiet and ((i + 1) % 50 == 0 or i + 1 == len(prompts)):
            print(f"  {i + 1}/{len(prompts)} prompts, {time.time() - t0:.0f} s", file=sys.stderr)

    table = []
    for ctx in ctxs:
        for d in depths:
            rs = [r for r in recs if r["ctx"] == ctx and r["depth"] == d]
            row = dict(ctx=ctx, depth=d, n=len(rs), accuracy=sum(r["correct"] for r in rs) / len(rs))
            if attention:
                row["attn_answer"] = sum(r["attn_answer"] for r in rs) / len(rs)
                row["attn_noise"] = sum(r["attn_noise"] for r in rs) / len(rs)
            table.append(row)
    overall = sum(r["correct"] for r in recs) / len(recs)
    summary = dict(model=os.path.normpath(model_dir), kind=kind, needles=needles,
                   queries=queries, ctx=ctxs, depths=depths, samples=samples,
                   seed=seed, max_new_tokens=g.MAX_NEW_TOKENS, n_prompts=len(recs),
                   accuracy=overall, per_depth=table)
    if attention:
        summary["attn_answer"] = sum(r["attn_answer"] for r in recs) / len(recs)
        summary["attn_noise"] = sum(r["attn_noise"] for r in recs) / len(recs)
    return summary, recs


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--needles", type=int, default=DEFAULTS["needles"])
    ap.add_argument("--queries", type=int, default=DEFAULTS["queries"])
    ap.add_argument("--ctx", default=None, help="comma list (default: the model's "
                    "max_position_embeddings, i.e. its training context)")
    ap.add_argument("--depths", default=DEFAULTS["depths"])
    ap.add_argument("--samples", type=int, default=DEFAULTS["samples"])
    ap.add_argument("--seed", type=int, default=DEFAULTS["seed"])
    ap.add_argument("--attention", action="store_true")
    ap.add_argument("--out")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(args.model, "tokenizer.json"))
    kind, model = M.load(args.model)
    with open(os.path.join(args.model, "config.json")) as f:
        cfg = json.load(f)
    ctxs = [int(x) for x in args.ctx.split(",")] if args.ctx else \
        [min(cfg["max_position_embeddings"], 4096)]
    depths = [int(x) for x in args.depths.split(",")]
    default = (args.needles == DEFAULTS["needles"] and args.queries == DEFAULTS["queries"]
               and args.ctx is None and args.depths == DEFAULTS["depths"]
               and args.samples == DEFAULTS["samples"] and args.seed == DEFAULTS["seed"])
    out_path = args.out or (os.path.join(args.model, "niah_python.json") if default else None)

    summary, recs = evaluate(args.model, kind, model, tok, args.needles, args.queries, ctxs,
                             depths, args.samples, args.seed, args.attention, args.quiet)
    table = summary["per_depth"]
    overall = summary["accuracy"]
    print(f"{summary['model']} ({kind}) N={args.needles} R={args.queries} seed={args.seed}: "
          f"accuracy {overall:.3f} over {len(recs)} prompts")
    for row in table:
        extra = (f"  attn answer {row['attn_answer']:.3f} noise {row['attn_noise']:.3f}"
                 if args.attention else "")
        print(f"  ctx {row['ctx']:5d} depth {row['depth']:3d}%: {row['accuracy']:.3f} "
              f"({row['n']}){extra}")
    if out_path:
        with open(out_path, "w") as f:
            json.dump(dict(summary=summary, samples=recs), f, indent=1)
            f.write("\n")
        print(f"wrote {out_path}", file=sys.stderr)


if __name__ == "__main__":
    main()
