#!/usr/bin/env python3
"""Create the diff-mlx golden fixtures under tests/fixtures/ with diff-mlx's
own code (guygrigsby/diff-mlx: model.py, config.py, checkpoint.py).

    python3 -m venv /tmp/venv-mlx && /tmp/venv-mlx/bin/pip install "mlx[cpu]" numpy safetensors
    /tmp/venv-mlx/bin/python python/make_mlx_fixtures.py \
        --src /tmp/diff-mlx-src --out tests/fixtures

--src is a directory holding diff-mlx's model.py, config.py and
checkpoint.py (not part of this repository; tests/fixtures/README.md names
the commit the committed fixtures were made from). Nothing here re-derives
the model: the weights are made by diff-mlx's Transformer, written by its
save_checkpoint / save_run_metadata, read back by its load_checkpoint, and
every expected output is diff-mlx's Transformer.__call__.

For every fixture:
  1. Transformer(cfg, variant) with mx.random.seed(seed); the parameters are
     then redrawn (model.update) so activations are O(1) and no weight is a
     trivial 1: embeddings N(0, 1/sqrt(D)) (the model ties them), linear
     weights N(0, 1/sqrt(in)), RMSNorm scales 1 + 0.1 N(0, 1), lambda_*
     N(0, 0.3).
  2. The "opt" fixture takes one AdamW step (mlx.optimizers, as diff-mlx's
     optim.make_adamw does) on the mean logit, so the checkpoint carries the
     optimizer state (opt.step is U64, opt.learning_rate a F32 scalar,
     opt.<param>.m / .v) exactly as train.py writes latest.safetensors.
  3. The checkpoint is written: save_checkpoint (keys "model.<path>", with or
     without "opt.<path>") or, for the legacy fixture, the unprefixed names
     that load_checkpoint still reads (mx.save_safetensors of the flattened
     parameters). config.json is save_run_metadata's {"model", "train"}.
  4. The checkpoint is reloaded with load_checkpoint into a fresh
     Transformer, and that model produces expected.safetensors:
        tokens          int32 [12]      the prompt (random ids in [3, V))
        logits_prefill  float32 [12, V] one forward over the prompt
        logits_decode   float32 [12, V] row t = last-position logits of a
                                        forward over tokens[:t+1] (diff-mlx
                                        has no KV cache)
        greedy          int32 [32]      32 argmax tokens after the prompt,
                                        each from a full forward
        logits_prefill_native float32 [12, V] (amp_dtype bfloat16 only) the
                                        prefill with diff-mlx computing in
                                        bfloat16; the others are computed with
                                        amp_dtype float32 on the same weights
"""

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import asdict

import numpy as np
from safetensors.numpy import save_file

PROMPT_LEN = 12
N_GREEDY = 32
VOCAB = 256
PROMPT_TRIES = 64
MIN_GAP = 0.05
MIN_DISTINCT = 8

# name: (variant, file name, writer, seed, model config overrides)
#   writer "ckpt": save_checkpoint without optimizer state ("model." names)
#   writer "ckpt_opt": save_checkpoint with AdamW state ("model." + "opt.")
#   writer "legacy": unprefixed names (older checkpoints)
FIXTURES = {
    "mlx_diff": ("diff", "model.safetensors", "ckpt", 31, {}),
    "mlx_diff_opt": ("diff", "latest.safetensors", "ckpt_opt", 32, {}),
    "mlx_diff_legacy": ("diff", "model.safetensors", "legacy", 33, {}),
    "mlx_vanilla": ("vanilla", "latest.safetensors", "ckpt", 34, {}),
    "mlx_diff_amp_bf16": ("diff", "model.safetensors", "ckpt", 35, {"amp_dtype": "bfloat16"}),
}

DESCRIPTIONS = {
    "mlx_diff": "diff variant, model.safetensors, \"model.\" names, no optimizer state",
    "mlx_diff_opt": "diff variant, latest.safetensors (the published name), \"model.\" names + AdamW \"opt.\" "
                    "state (U64 step)",
    "mlx_diff_legacy": "diff variant, model.safetensors, unprefixed names (older checkpoints)",
    "mlx_vanilla": "vanilla variant (plain MHA, interleaved RoPE), latest.safetensors, \"model.\" names",
    "mlx_diff_amp_bf16": "diff variant trained with amp_dtype bfloat16 (f32 weights, bf16 compute), as diff-mlx's "
                         "stage1/stage2 configs",
}


def model_config(ModelConfig, **over):
    return ModelConfig(dim=64, n_layers=2, n_heads_vanilla=4, qk_head_dim=16, vocab_size=VOCAB,
                       mlp_intermediate=96, block_size=64, rope_base=10000.0, rms_eps=1e-5, **over)


def reinit(model, mx, tree_flatten, tree_unflatten, D):
    new = []
    for name, p in tree_flatten(model.parameters()):
        if name == "tok_embed.weight":
            v = mx.random.normal(p.shape) * (1.0 / np.sqrt(D))
        elif name.endswith(".scale"):
            v = 1.0 + 0.1 * mx.random.normal(p.shape)
        elif ".lambda_" in name:
            v = 0.3 * mx.random.normal(p.shape)
        elif name.endswith(".weight") and p.ndim == 2:
            v = mx.random.normal(p.shape) * (1.0 / np.sqrt(p.shape[1]))
        else:
            raise SystemExit(f"unexpected parameter {name}")
        new.append((name, v.astype(mx.float32)))
    model.update(tree_unflatten(new))


def logits_of(model, mx, ids):
    out = model(mx.array([list(ids)], dtype=mx.int32))
    return np.array(out[0].astype(mx.float32))


def greedy_of(model, mx, prompt):
    seq, gaps = list(prompt), []
    for _ in range(N_GREEDY):
        last = logits_of(model, mx, seq)[-1]
        top = np.sort(last)[-2:]
        gaps.append(float(top[1] - top[0]))
        seq.append(int(np.argmax(last)))
    return seq[len(prompt):], min(gaps)


def pick_prompt(model, mx, seed):
    """The first of seeds seed+100, ... whose greedy path has top-2 gap >=
    MIN_GAP and >= MIN_DISTINCT distinct tokens; else the best one."""
    best = None
    for k in range(PROMPT_TRIES):
        rng = np.random.default_rng(seed + 100 + k)
        prompt = rng.integers(3, VOCAB, size=PROMPT_LEN).tolist()
        g, gap = greedy_of(model, mx, prompt)
        ok = gap >= MIN_GAP and len(set(g)) >= MIN_DISTINCT
        if best is None or (ok, gap) > (best[3], best[2]):
            best = (prompt, g, gap, ok)
        if ok:
            break
    return best


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--src", required=True, help="directory with diff-mlx's model.py, config.py, checkpoint.py")
    ap.add_argument("--out", required=True)
    ap.add_argument("--only", nargs="*")
    a = ap.parse_args()
    sys.path.insert(0, os.path.abspath(a.src))
    import mlx.core as mx
    import mlx.nn as nn
    import mlx.optimizers as optim
    from mlx.utils import tree_flatten, tree_unflatten

    import checkpoint as ck
    from config import ModelConfig, TrainConfig
    from model import Transformer

    for name, (variant, fname, writer, seed, over) in FIXTURES.items():
        if a.only and name not in a.only:
            continue
        cfg = model_config(ModelConfig, **over)
        mx.random.seed(seed)
        model = Transformer(cfg, variant=variant)
        reinit(model, mx, tree_flatten, tree_unflatten, cfg.dim)
        opt_state = None
        if writer == "ckpt_opt":
            opt = optim.AdamW(learning_rate=1e-3, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1)
            loss_and_grad = nn.value_and_grad(model, lambda m, x: m(x).mean())
            _, grads = loss_and_grad(model, mx.array([[5, 6, 7, 8]], dtype=mx.int32))
            opt.update(model, grads)
            mx.eval(model.parameters(), opt.state)
            opt_state = opt.state

        d = os.path.join(a.out, name)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        path = os.path.join(d, fname)
        if writer == "legacy":
            mx.save_safetensors(path, dict(ck._flatten(model.parameters())))
        else:
            ck.save_checkpoint(model.parameters(), step=1, ckpt_path=path, optim_state=opt_state)
        with tempfile.TemporaryDirectory() as run_dir:
            train = TrainConfig(peak_lr=6e-4, warmup_steps=10, total_tokens=1000, micro_batch=1)
            ck.save_run_metadata(run_dir, cfg, asdict(train), git_hash="0" * 40, git_dirty=False,
                                 mlx_version=mx.__version__, seed=seed, data_meta={})
            shutil.copy(os.path.join(run_dir, "config.json"), os.path.join(d, "config.json"))

        # reload with diff-mlx's own reader into a fresh model: that is the reference
        params, _, opt_back = ck.load_checkpoint(path)
        assert (opt_back is not None) == (writer == "ckpt_opt")
        # the reference runs in float32 (amp_dtype only sets diff-mlx's compute
        # dtype; the weights are f32 either way); a bf16-compute model gives
        # logits_prefill_native, as for the f16/bf16 fixtures
        ref = Transformer(model_config(ModelConfig, **dict(over, amp_dtype="float32")), variant=variant)
        ref.update(params)
        native = None
        if cfg.amp_dtype != "float32":
            native = Transformer(cfg, variant=variant)
            native.update(params)
        a_sd = dict(tree_flatten(model.parameters()))
        b_sd = dict(tree_flatten(ref.parameters()))
        assert a_sd.keys() == b_sd.keys()
        for k in a_sd:
            assert np.array_equal(np.array(a_sd[k]), np.array(b_sd[k])), k

        prompt, greedy, gap, ok = pick_prompt(ref, mx, seed)
        prefill = logits_of(ref, mx, prompt)
        decode = np.stack([logits_of(ref, mx, prompt[:t + 1])[-1] for t in range(PROMPT_LEN)])
        assert np.array_equal(np.array(greedy_of(ref, mx, prompt)[0]), np.array(greedy))
        # written with the safetensors package: its header is padded so the
        # data is aligned, which the tests that read these tensors in place
        # rely on (mx.save_safetensors does not pad; the checkpoints above
        # keep diff-mlx's own unpadded layout, which the loader copes with)
        expected = {
            "tokens": np.array(prompt, dtype=np.int32),
            "logits_prefill": prefill.astype(np.float32),
            "logits_decode": decode.astype(np.float32),
            "greedy": np.array(greedy, dtype=np.int32),
        }
        note = ""
        if native is not None:
            nat = logits_of(native, mx, prompt)
            expected["logits_prefill_native"] = nat.astype(np.float32)
            nmse = float(np.sum((nat - prefill) ** 2) / np.sum(prefill ** 2))
            same = int(np.sum(np.argmax(nat, -1) == np.argmax(prefill, -1)))
            note = (f" native ({cfg.amp_dtype}) vs f32 prefill: max {np.abs(nat - prefill).max():.1e} "
                    f"NMSE {nmse:.1e} argmax {same}/{PROMPT_LEN}")
        save_file(expected, os.path.join(d, "expected.safetensors"))
        size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
        print(f"{name:18s} {variant:7s} {fname:18s} max|prefill-decode| {np.abs(prefill - decode).max():.1e} "
              f"min top-2 gap {gap:.3f}{'' if ok else ' (best)'} logits in [{prefill.min():.2f}, "
              f"{prefill.max():.2f}] {size // 1024} KB{note}")


if __name__ == "__main__":
    main()
