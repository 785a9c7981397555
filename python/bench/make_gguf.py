#!/usr/bin/env python3
"""Write an HF Llama checkpoint (config.json + model.safetensors, f16) as a
GGUF file of the same weights, for llama.cpp beside diffrt on one model.

    python3 python/bench/make_gguf.py --model DIR --gguf-py PATH --out FILE

PATH is llama.cpp's gguf-py folder (PyPI's llama-cpp-python source package
bundles it under vendor/llama.cpp/gguf-py). The weights are written as they
are (f16), with the q and k rows of every head permuted as llama.cpp's own
converter (convert_hf_to_gguf.py, LlamaModel.permute) does: HF's rotate_half
RoPE pairs (i, i + d/2), llama.cpp's GGUF llama pairs (2i, 2i + 1). Quantize
the file with `llama-quantize --pure FILE OUT q4_0` so that every matrix,
the embedding and output included, is q4_0 as `diffrt quantize` makes it.

The checkpoints of python/bench/make_models.py have no tokenizer; the GGUF
gets a placeholder SentencePiece vocabulary of the config's size (<unk>,
<s>, </s>, the 256 byte tokens, then "t<i>"), enough for llama-batched-bench,
which draws random token ids. Text through it means nothing.
"""

import argparse
import json
import os
import sys

import numpy as np


def permute(w, n_head, n_head_kv):
    """llama.cpp's LlamaModel.permute: rows of each head from (i, i + d/2)
    pairs to (2i, 2i + 1) pairs."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", required=True, help="an HF Llama directory (config.json, model.safetensors)")
    ap.add_argument("--gguf-py", required=True, help="llama.cpp's gguf-py folder")
    ap.add_argument("--out", required=True, help="the GGUF file to write")
    a = ap.parse_args()
    sys.path.insert(0, a.gguf_py)
    import gguf  # noqa: E402
    from safetensors.numpy import load_file  # noqa: E402

    with open(os.path.join(a.model, "config.json")) as f:
        cfg = json.load(f)
    if cfg.get("model_type") != "llama":
        raise SystemExit(f"{a.model}: model_type {cfg.get('model_type')!r}, not llama")
    H, G = cfg["num_attention_heads"], cfg.get("num_key_value_heads", cfg["num_attention_heads"])
    D, L, V = cfg["hidden_size"], cfg["num_hidden_layers"], cfg["vocab_size"]
    hd = cfg.get("head_dim", D // H)
    theta = (cfg.get("rope_parameters") or {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    st = load_file(os.path.join(a.model, "model.safetensors"))

    w = gguf.GGUFWriter(a.out, "llama")
    w.add_name(os.path.basename(os.path.normpath(a.model)))
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(D)
    w.add_block_count(L)
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(H)
    w.add_head_count_kv(G)
    w.add_rope_dimension_count(hd)
    w.add_rope_freq_base(float(theta))
    w.add_layer_norm_rms_eps(float(cfg.get("rms_norm_eps", 1e-6)))
    w.add_vocab_size(V)
    w.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    # the placeholder SentencePiece vocabulary
    toks, scores, types = ["<unk>", "<s>", "</s>"], [0.0, 0.0, 0.0], [2, 3, 3]
    for b in range(256):
        toks.append(f"<0x{b:02X}>")
        scores.append(0.0)
        types.append(6)
    while len(toks) < V:
        toks.append(f"t{len(toks)}")
        scores.append(-float(len(toks)))
        types.append(1)
    w.add_tokenizer_model("llama")
    w.add_token_list(toks[:V])
    w.add_token_scores(scores[:V])
    w.add_token_types(types[:V])
    w.add_bos_token_id(cfg.get("bos_token_id", 1))
    w.add_eos_token_id(cfg.get("eos_token_id", 2))

    def put(name, arr):
        w.add_tensor(name, np.ascontiguousarray(arr))

    put("token_embd.weight", st["model.embed_tokens.weight"])
    put("output_norm.weight", st["model.norm.weight"].astype(np.float32))
    put("output.weight", st.get("lm_head.weight", st["model.embed_tokens.weight"]))
    for i in range(L):
        p = f"model.layers.{i}."
        put(f"blk.{i}.attn_norm.weight", st[p + "input_layernorm.weight"].astype(np.float32))
        put(f"blk.{i}.attn_q.weight", permute(st[p + "self_attn.q_proj.weight"], H, H))
        put(f"blk.{i}.attn_k.weight", permute(st[p + "self_attn.k_proj.weight"], H, G))
        put(f"blk.{i}.attn_v.weight", st[p + "self_attn.v_proj.weight"])
        put(f"blk.{i}.attn_output.weight", st[p + "self_attn.o_proj.weight"])
        put(f"blk.{i}.ffn_norm.weight", st[p + "post_attention_layernorm.weight"].astype(np.float32))
        put(f"blk.{i}.ffn_gate.weight", st[p + "mlp.gate_proj.weight"])
        put(f"blk.{i}.ffn_up.weight", st[p + "mlp.up_proj.weight"])
        put(f"blk.{i}.ffn_down.weight", st[p + "mlp.down_proj.weight"])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    print(f"{a.out}: llama, {L} layers, dim {D}, {H} heads / {G} kv heads, vocab {V}, f16")


if __name__ == "__main__":
    main()
