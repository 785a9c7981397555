#!/usr/bin/env python3
"""Write MODEL_CARD.md for one trained model directory from its train_log.json,
niah_python.json (eval.py --attention, default settings) and niah_grid.json
(grid.py; python/niah/make_all.sh runs all of them).

    python3 python/niah/model_card.py models/diff-v1-tiny
"""

import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import models as M  # noqa: E402

LAYOUT = {
    "diff-v1": ("diffllama", "Hugging Face DiffLlama (transformers' DiffLlamaForCausalLM)",
                "DIFF Transformer V1: {heads} sub-heads of {head_dim} = {dh} diff-heads "
                "(q1/q2/k1/k2 width {head_dim}, V width {dv}), {kv_heads} kv heads, lambda = "
                "exp(lq1.lk1) - exp(lq2.lk2) + lambda_init, GroupNorm x (1 - lambda_init)"),
    "diff-v2": ("diff_transformer_v2", "the authors' DIFF V2 module (python/diff_modules.py "
                "DiffTransformerLM)",
                "DIFF V2: {heads} query heads of {head_dim} = {dh} diff-heads, {kv_heads} kv "
                "heads, token-wise lambda = sigmoid(lambda_proj x), no GroupNorm; interleaved RoPE"),
    "transformer": ("llama", "Hugging Face Llama (transformers' LlamaForCausalLM)",
                    "baseline Transformer: {heads} heads of {head_dim}, {kv_heads} kv heads"),
}


def main():
    d = sys.argv[1]
    name = os.path.basename(os.path.normpath(d))
    with open(os.path.join(d, "train_log.json")) as f:
        tl = json.load(f)
    with open(os.path.join(d, "niah_python.json")) as f:
        ev = json.load(f)["summary"]
    grid = None
    if os.path.exists(os.path.join(d, "niah_grid.json")):
        with open(os.path.join(d, "niah_grid.json")) as f:
            grid = json.load(f)
    kind = tl["kind"]
    s = M.shape(kind)
    mt, layout, arch = LAYOUT[kind]
    dh = s["heads"] // 2 if kind != "transformer" else s["heads"]
    arch = arch.format(dh=dh, dv=2 * s["head_dim"], **s)
    size = os.path.getsize(os.path.join(d, "model.safetensors"))
    first, last = tl["log"][0], tl["log"][-1]
    cmd = "python3 python/niah/train.py " + " ".join(tl["argv"])

    L = []
    w = L.append
    w(f"# {name}\n")
    w(f"A tiny {kind} model trained from scratch for diffrt's multi-needle retrieval "
      f"evaluation (`diffrt niah`, docs/niah_spec.md). It is a test model: it knows only the "
      f"generated haystack language below.\n")
    w("| | |\n|---|---|")
    w(f"| layout | `model_type: \"{mt}\"`, {layout} |")
    w(f"| architecture | {arch} |")
    w(f"| shape | {s['layers']} layers, width {s['hidden']}, FFN {s['ffn']} (SwiGLU), RMSNorm eps "
      f"{s['rms_norm_eps']}, RoPE theta {s['rope_theta']:.0f}, tied embeddings, vocab {tl['vocab']} |")
    w(f"| parameters | {tl['params']:,} |")
    w(f"| weights | `model.safetensors`, float16, {size:,} bytes |")
    w(f"| context | trained on sequences of up to {tl['ctx']} tokens "
      f"(`max_position_embeddings` {tl['ctx']}) |")
    w(f"| tokenizer | `tokenizer.json`: byte-level BPE trained on generated text "
      f"(python/niah/tokenizer.py), digits split one per token, `<bos>` = 0 added by the "
      f"post-processor, `<eos>` = 1 |")
    w("")
    w("## Data\n")
    w("Everything is generated (python/niah/generate.py, nothing downloaded): haystacks of "
      "filler sentences from a fixed grammar, needles \"The magic number of <city> is "
      "<number>.\" (64 cities, 4-7 digit numbers) and questions \"What is the magic number of "
      "<city>? The magic number of <city> is\". Training sequence i has a haystack of L tokens "
      f"(L drawn per step from {tl.get('ctx_min', 48)}, {tl.get('ctx_min', 48) + 16}, ..., "
      f"{tl['ctx']}), N = 1..min({tl['max_needles']}, (L - 24) / 24) needles, R = 1 or 2 "
      "queried, depth 0..100%: an evaluation prompt exactly as docs/niah_spec.md builds it, "
      "followed by the answer and `<eos>`, then, while they fit in "
      f"{tl['ctx']} tokens, more question/answer blocks about the same haystack (a block may "
      "repeat an earlier question: copying the earlier answer is the easy, short-range "
      "version of the task that gets copy-after-match heads started). The exact recipe is "
      "the docstring of python/niah/train.py.\n")
    w("Loss: mean cross-entropy over all next-token predictions + "
      f"{tl.get('answer_weight', 4.0):g} x mean cross-entropy over the answer tokens (\" \", "
      "the digits, \".\", `<eos>`); the log shows both terms unweighted.\n")
    w("## Training\n")
    w("| | |\n|---|---|")
    w(f"| command | `{cmd}` |")
    w(f"| steps | {tl['steps']} x batch {tl['batch']} |")
    w(f"| optimiser | AdamW lr {tl['lr']} (warm-up {tl['warmup']}, cosine to 10%), betas "
      f"(0.9, 0.95), weight decay 0.1 on matrices, clip 1.0 |")
    w(f"| seeds | init `--seed {tl['seed']}`, data `--data-seed {tl['data_seed']}`; torch "
      f"threads {tl['threads']} (the thread count changes float summation order) |")
    w(f"| time | {tl['train_seconds'] / 60:.1f} min on a shared 2-core CPU, torch {tl['torch']} |")
    w(f"| loss at start (step {first['step']}) | LM {first['lm_loss']:.3f}, answer "
      f"{first['answer_loss']:.3f}, answer-token accuracy {first['answer_token_acc']:.3f} |")
    w(f"| loss at end (mean of steps {last['step'] - 24}..{last['step']}) | LM "
      f"{last['lm_loss']:.3f}, answer {last['answer_loss']:.3f}, answer-token accuracy "
      f"{last['answer_token_acc']:.3f} |")
    w("\nThe full loss curve is in `train_log.json`.\n")
    w("## NIAH accuracy (PyTorch, this checkpoint as stored)\n")
    w(f"`python3 python/niah/eval.py --model models/{name} --attention` (defaults: N = "
      f"{ev['needles']}, R = {ev['queries']}, ctx {ev['ctx'][0]}, depths "
      f"{','.join(map(str, ev['depths']))}, {ev['samples']} samples per depth, seed "
      f"{ev['seed']}); per-sample answers in `niah_python.json`. Greedy, at most "
      f"{ev['max_new_tokens']} new tokens; correct iff the leading digits equal the number.\n")
    w("| depth | accuracy | attention to answer | attention to noise |")
    w("|---|---|---|---|")
    for r in ev["per_depth"]:
        w(f"| {r['depth']}% | {r['accuracy']:.3f} | {r['attn_answer']:.4f} | "
          f"{r['attn_noise']:.4f} |")
    w(f"| all | **{ev['accuracy']:.3f}** | {ev['attn_answer']:.4f} | {ev['attn_noise']:.4f} |")
    w("\nAttention: at the last prompt token, summed over the answer needle's tokens / over "
      "the rest of the context, averaged over heads and layers (diff models: the "
      "differential map A1 - lambda A2), docs/niah_spec.md section 7.\n")
    if grid:
        w("### Multi-needle (paper Table 2 style)\n")
        w(f"Accuracy averaged over depths {','.join(map(str, grid['depths']))}, "
          f"{grid['samples']} samples per depth, seed {grid['seed']}:\n")
        ctxs = sorted({c["ctx"] for c in grid["cells"]})
        w("| N | R | " + " | ".join(f"ctx {c}" for c in ctxs) + " |")
        w("|---|---|" + "---|" * len(ctxs))
        keys = []
        for c in grid["cells"]:
            if (c["needles"], c["queries"]) not in keys:
                keys.append((c["needles"], c["queries"]))
        for n, r in keys:
            vals = []
            for cx in ctxs:
                m = [c for c in grid["cells"] if c["needles"] == n and c["queries"] == r
                     and c["ctx"] == cx]
                vals.append(f"{m[0]['accuracy']:.3f}" if m else "")
            w(f"| {n} | {r} | " + " | ".join(vals) + " |")
        w(f"\nMade by `{grid['command']}`. With N needles a model that copies one of the N "
          "numbers without regard to the city scores about 1/N; R = 2 asks each haystack twice "
          "(the first and the second needle).\n")
    if os.path.exists(os.path.join(d, "prompt.txt")):
        import example_prompt as X
        ex = X.example(d)
        w("## Running it in diffrt\n")
        w(f"`prompt.txt` is evaluation prompt seed 2026, N = 1, depth 50% at ctx "
          f"{ex['ctx']} ({ex['prompt_tokens']} tokens, `python3 python/niah/example_prompt.py "
          f"--model models/{name}`); it asks for the magic number of {ex['city']}, which is "
          f"{ex['answer']}.\n")
        w("```sh")
        w(f"./build/diffrt run --model models/{name} --prompt-file models/{name}/prompt.txt")
        w(f"./build/diffrt niah --model models/{name} --attention --backend cpu "
          f"--compare models/{name}/niah_python.json")
        w("```\n")
    with open(os.path.join(d, "MODEL_CARD.md"), "w") as f:
        f.write("\n".join(L).rstrip() + "\n")


if __name__ == "__main__":
    main()
