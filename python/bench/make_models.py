#!/usr/bin/env python3
"""Make two random-weight checkpoints for the CPU benchmark, with no download.

    python3 python/bench/make_models.py --out DIR [--tiny]

writes
    DIR/diffllama-134m   HF DiffLlama (DiffLlamaForCausalLM, model_type "diffllama")
    DIR/llama-134m       HF Llama (LlamaForCausalLM), the same shapes without the
                         differential attention
each as config.json + model.safetensors (float16, save_pretrained with
safe_serialization=True). Both: hidden 768, 12 layers, 12 heads / 12 kv heads
(head_dim 64), ffn 2048, vocab 32000, 2048 positions, untied lm_head,
rope_theta 10000. Parameter counts: Llama 134,105,856; DiffLlama 134,108,928
(+ 4 lambda vectors of 64 per layer). ffn 2048 is what puts them at ~134M.

Weights are the models' own init (normal, std 0.02; DiffLlama's lambda_q1..k2
from normal(0, lambda_std_dev=0.1)), under a fixed seed, so the files are the
same on every run with the same torch version. They are for timing only: the
outputs are meaningless.

--tiny writes DIR/diffllama-tiny and DIR/llama-tiny instead (hidden 64, 2 layers,
4 heads, ffn 160, vocab 256) to test scripts quickly.

--llama-1b writes DIR/llama-1.1b only: TinyLlama-1.1B's shapes (hidden 2048,
22 layers, 32 heads / 4 kv heads, ffn 5632, vocab 32000, 2048 positions,
untied lm_head), 1,100,048,384 parameters, for the batched decode against
llama.cpp (bench/run_batched.sh).

--diffllama-1b writes DIR/diffllama-1.1b only: a DiffLlama of the same shapes
(+ 4 lambda vectors of 64 per layer), to measure the differential
attention's cost at 1.1B against DIR/llama-1.1b (bench/run_diff_overhead.sh).

A model whose directory already holds model.safetensors and config.json is
skipped. DiffLlama constraint: num_key_value_heads must be even (transformers
splits V into two halves along kv heads, and pairs head h with head h + H/2).
"""

import argparse
import os

import torch

SEED = 1234

SHAPES = {
    "134m": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 num_key_value_heads=12, head_dim=64, intermediate_size=2048,
                 vocab_size=32000, max_position_embeddings=2048),
    "1.1b": dict(hidden_size=2048, num_hidden_layers=22, num_attention_heads=32,
                 num_key_value_heads=4, head_dim=64, intermediate_size=5632,
                 vocab_size=32000, max_position_embeddings=2048),
    "tiny": dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=4, head_dim=16, intermediate_size=160,
                 vocab_size=256, max_position_embeddings=2048),
}


def make(kind, shape, path):
    from transformers import DiffLlamaConfig, DiffLlamaForCausalLM, LlamaConfig, LlamaForCausalLM

    if os.path.isfile(os.path.join(path, "model.safetensors")) and \
            os.path.isfile(os.path.join(path, "config.json")):
        print(f"{path}: model.safetensors and config.json exist, skipped")
        return
    cfg_cls, model_cls = {"diffllama": (DiffLlamaConfig, DiffLlamaForCausalLM),
                          "llama": (LlamaConfig, LlamaForCausalLM)}[kind]
    cfg = cfg_cls(**SHAPES[shape], tie_word_embeddings=False, initializer_range=0.02,
                  rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                  bos_token_id=1, eos_token_id=2)
    if kind == "diffllama" and cfg.num_key_value_heads % 2 != 0:
        raise SystemExit(f"{path}: num_key_value_heads must be even for DiffLlama, "
                         f"got {cfg.num_key_value_heads}")
    torch.manual_seed(SEED)
    model = model_cls(cfg).eval()  # post_init runs the model's own init (incl. lambdas)
    n = sum(p.numel() for p in model.parameters())
    model = model.to(torch.float16)
    model.config.dtype = "float16"
    model.save_pretrained(path, safe_serialization=True)
    size = os.path.getsize(os.path.join(path, "model.safetensors"))
    print(f"{path}: {kind}, {n:,} parameters, model.safetensors {size:,} bytes "
          f"({size / 2**20:.1f} MiB)")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory to write the model folders into")
    ap.add_argument("--tiny", action="store_true", help="tiny shapes, to test scripts")
    ap.add_argument("--llama-1b", action="store_true", help="only a Llama of TinyLlama-1.1B's shapes")
    ap.add_argument("--diffllama-1b", action="store_true", help="only a DiffLlama of TinyLlama-1.1B's shapes")
    args = ap.parse_args()
    if args.diffllama_1b:
        make("diffllama", "1.1b", os.path.join(args.out, "diffllama-1.1b"))
        return
    if args.llama_1b:
        make("llama", "1.1b", os.path.join(args.out, "llama-1.1b"))
        return
    shape = "tiny" if args.tiny else "134m"
    for kind in ("diffllama", "llama"):
        make(kind, shape, os.path.join(args.out, f"{kind}-{shape}"))


if __name__ == "__main__":
    main()
