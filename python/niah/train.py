#!/usr/bin/env python3
"""Train one of the three tiny NIAH models on generated haystacks.

    python3 python/niah/train.py --kind diff-v1 --out models/diff-v1-tiny
    python3 python/niah/train.py --kind diff-v2 --out models/diff-v2-tiny
    python3 python/niah/train.py --kind transformer --out models/transformer-tiny

All three see the same data in the same order (--data-seed), take the same number
of steps with the same optimiser settings and start from the same init rule
(--seed); their parameter counts are within 0.1% of each other (models.py).

Data (everything generated, nothing downloaded). Step t draws the haystack length
L_t = ctx_min + 16 * below(...) in {ctx_min, ctx_min + 16, ..., ctx} from the stream
seed_state(data_seed, 2^40, t); all sequences of that step use it. Training sequence i
(i = t * batch + b) is drawn from meta = seed_state(data_seed, i):
    N = 1 + below(min(MAX_N, max(1, (L - 24) // 24))),  R = 1 + below(min(N, 2)),
    depth = below(101),  r = below(R),
    h = generate.haystack(seed = data_seed + 1, L, N, R, depth, index = i)
and the sequence is
    <bos> haystack question prefix_r " <number_r>." <eos>        (an evaluation prompt
                                                                   for ctx L, answered)
followed, while the next one fits in ctx tokens, by question blocks about the same
haystack: j = below(N); names = [city_j], or (with probability 1/2 when N > 1) city_j and
one other needle's city in drawn order; block = " " + question(names) + " " +
prefix(city_j) + " <number_j>." <eos>. Short haystacks thus carry several blocks; a block
repeating an earlier question can be answered by copying the earlier answer, an easy
short-range version of the retrieval that gets copy-after-match heads started. With
--repeat K (default 0, not used for the bundled models) each filler sentence after the
first is replaced, with probability K/8, by a copy of an earlier one. A batch is
right-padded with <eos> to its longest sequence (padding carries no loss).

Loss. L = mean CE over every next-token prediction (language modelling on the haystack
too) + answer_weight (4) x mean CE over the answer targets only (" ", the digits, "." and
<eos> of every block). Both terms are logged, unweighted.

Init (models.init_): q/k projections N(0, 1/sqrt(D)), every other matrix N(0, 0.02).

Optimiser: AdamW lr 1e-3, betas (0.9, 0.95), weight decay 0.1 on matrices only, 100
warm-up steps then cosine decay to 10%, gradient clipping at 1.0; batch 32, 2400 steps.
torch threads: 2 by default (the thread count changes float reduction order, hence the
exact weights). (lr 3e-3 and answer weight 1 did not start retrieving within 1000 steps.)
"""

import argparse
import json
import math
import os
import shutil
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import generate as g  # noqa: E402
import models as M  # noqa: E402

MAX_N = 6


def make_sequence(count, tok, data_seed, ctx, seq_len, i, repeat_p):
    """Training sequence i: an evaluation prompt for context ctx (haystack + question +
    prefix), its answer and <eos>, then more question blocks about the same haystack until
    the next one would pass seq_len tokens. Returns (ids, answer_mask) as lists; the
    mask marks the positions whose NEXT token is an answer token (" ", digits, ".", <eos>)."""
    meta = g.Rng(g.seed_state(data_seed, i))
    N = 1 + meta.below(max(1, min(MAX_N, (ctx - 24) // 24)))
    R = 1 + meta.below(min(N, 2))
    depth = meta.below(101)
    r = meta.below(R)
    h = g.haystack(count, data_seed + 1, ctx, N, R, depth, i)
    # repeats: each filler sentence after the first is, with probability repeat_p/8,
    # replaced by a copy of a uniformly chosen earlier filler sentence (if the copy
    # fits the budget). Copyable text all over the haystack rewards induction
    # (copy-after-match) heads on every token, not only on the few answer tokens.
    pieces = list(h["pieces"])
    slack = ctx - h["budget_tokens"]
    fill = [j for j, k in enumerate(h["kinds"]) if k == "filler"]
    for n, j in enumerate(fill):
        if n == 0 or meta.below(8) >= repeat_p:
            continue
        src = pieces[fill[meta.below(n)]]
        d = count(src) - count(pieces[j])
        if d <= slack:
            pieces[j] = src
            slack -= d
    prompt = "".join(pieces) + h["question"] + h["prefixes"][r]
    ids = tok.encode(prompt).ids
    mask = [False] * len(ids)

    def answer(k):
        a = tok.encode(" " + h["numbers"][k] + ".", add_special_tokens=False).ids + [M.EOS_ID]
        mask[-1] = True
        ids.extend(a)
        mask.extend([True] * (len(a) - 1) + [False])

    answer(r)
    # more blocks until the next one would not fit: each asks about a needle j drawn
    # uniformly (answered before or not: a repeated question can be answered by copying
    # the earlier answer, which is what first teaches the model copy-after-match); its
    # question names j alone, or j and one other needle (order drawn)
    while True:
        j = meta.below(N)
        names = [h["cities"][j]]
        if N > 1 and meta.below(2):
            o = meta.below(N - 1)
            o = o if o < j else o + 1
            names.insert(meta.below(2), h["cities"][o])
        text = " " + g.question_text(names) + " " + g.prefix_text(h["cities"][j])
        b = tok.encode(text, add_special_tokens=False).ids
        need = len(b) + len(tok.encode(" " + h["numbers"][j] + ".",
                                       add_special_tokens=False).ids) + 1
        if len(ids) + need > seq_len:
            break
        ids.extend(b)
        mask.extend([False] * len(b))
        answer(j)
    return ids, mask


def make_batch(seqs, seq_len):
    """seqs: list of (ids, answer_mask). Returns input [B, seq_len] (right-padded with
    <eos>), targets [B, seq_len] (-100 = no loss) and the answer mask."""
    B = len(seqs)
    seq_len = max(len(s) for s, _ in seqs)
    x = torch.full((B, seq_len), M.EOS_ID, dtype=torch.long)
    y = torch.full((B, seq_len), -100, dtype=torch.long)
    am = torch.zeros((B, seq_len), dtype=torch.bool)
    for b, (s, m) in enumerate(seqs):
        assert len(s) <= seq_len
        x[b, :len(s)] = torch.tensor(s)
        y[b, :len(s) - 1] = torch.tensor(s[1:])
        am[b, :len(s)] = torch.tensor(m)
    return x, y, am


def step_ctx(data_seed, step, ctx_min, ctx):
    if ctx_min >= ctx:
        return ctx
    rng = g.Rng(g.seed_state(data_seed, 1 << 40, step))
    return ctx_min + 16 * rng.below((ctx - ctx_min) // 16 + 1)


def lr_at(step, steps, lr, warmup):
    if step < warmup:
        return lr * (step + 1) / warmup
    t = (step - warmup) / max(1, steps - warmup)
    return lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--kind", required=True, choices=M.KINDS)
    ap.add_argument("--out", required=True)
    ap.add_argument("--tokenizer", default=os.path.join(HERE, "tokenizer.json"))
    ap.add_argument("--ctx", type=int, default=192)
    ap.add_argument("--ctx-min", type=int, default=48,
                    help="each step draws its haystack length from ctx_min, ctx_min + 16, ..., ctx")
    ap.add_argument("--answer-weight", type=float, default=4.0)
    ap.add_argument("--repeat", type=int, default=0,
                    help="a filler sentence is a copy of an earlier one with probability REPEAT/8")
    ap.add_argument("--steps", type=int, default=2400)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--data-seed", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--log-every", type=int, default=25)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(args.tokenizer)
    count = g.TokenCounter(tok)
    vocab = tok.get_vocab_size()

    model = M.build(args.kind, vocab, args.ctx, attn="sdpa")
    M.init_(model, args.seed)
    if args.kind == "diff-v2":
        M.check_v2_batched(model, vocab)
    n_params = sum(p.numel() for p in model.parameters())
    print(f"{args.kind}: {n_params} parameters, vocab {vocab}, ctx {args.ctx}, "
          f"{args.steps} steps x batch {args.batch}", flush=True)

    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8)

    log = []
    t0 = time.time()
    acc_lm = acc_ans = acc_tok = 0.0
    n_acc = 0
    model.train()
    for step in range(args.steps):
        hay = step_ctx(args.data_seed, step, args.ctx_min, args.ctx)
        seqs = [make_sequence(count, tok, args.data_seed, hay, args.ctx, step * args.batch + b,
                              args.repeat)
                for b in range(args.batch)]
        x, y, am = make_batch(seqs, args.ctx)
        for grp in opt.param_groups:
            grp["lr"] = lr_at(step, args.steps, args.lr, args.warmup)
        logits = M.logits_batched(args.kind, model, x)
        ce = F.cross_entropy(logits.reshape(-1, vocab), y.reshape(-1), reduction="none",
                             ignore_index=-100).view(y.shape)
        valid = y != -100
        lm = ce[valid].mean()
        ans = ce[am].mean()
        loss = lm + args.answer_weight * ans
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            tok_ok = (logits.argmax(-1) == y)[am].float().mean()
        acc_lm += float(lm.detach())
        acc_ans += float(ans.detach())
        acc_tok += float(tok_ok)
        n_acc += 1
        if (step + 1) % args.log_every == 0 or step == 0 or step + 1 == args.steps:
            rec = dict(step=step + 1, lm_loss=acc_lm / n_acc, answer_loss=acc_ans / n_acc,
                       answer_token_acc=acc_tok / n_acc, lr=opt.param_groups[0]["lr"],
                       elapsed_s=round(time.time() - t0, 1))
            log.append(rec)
            print(json.dumps(rec), flush=True)
            acc_lm = acc_ans = acc_tok = 0.0
            n_acc = 0

    train_s = time.time() - t0
    model.eval()
    M.save(args.kind, model, args.out, vocab, args.ctx)
    shutil.copyfile(args.tokenizer, os.path.join(args.out, "tokenizer.json"))
    with open(os.path.join(args.out, "train_log.json"), "w") as f:
        json.dump(dict(kind=args.kind, params=n_params, vocab=vocab, ctx=args.ctx,
                       steps=args.steps, batch=args.batch, lr=args.lr, warmup=args.warmup,
                       seed=args.seed, data_seed=args.data_seed, threads=args.threads,
                       max_needles=MAX_N, ctx_min=args.ctx_min,
                       answer_weight=args.answer_weight, repeat=args.repeat,
                       train_seconds=round(train_s, 1),
                       torch=torch.__version__, argv=sys.argv[1:], log=log), f, indent=1)
        f.write("\n")
    print(f"saved {args.out} after {train_s:.0f} s", flush=True)


if __name__ == "__main__":
    main()
