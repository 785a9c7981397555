"""The three tiny NIAH models: construction, batched training forward, saving,
loading, greedy decoding and attention maps.

kinds
  diff-v1      transformers' DiffLlamaForCausalLM (HF DiffLlama layout, model_type diffllama)
  diff-v2      python/diff_modules.py's DiffTransformerLM (model_type diff_transformer_v2)
  transformer  transformers' LlamaForCausalLM (model_type llama)

The checkpoints are saved as the layouts' own code saves them (save_pretrained for
the HF classes, the module's state_dict for V2) and loaded back the same way for
evaluation, so what eval.py measures is what diffrt loads.
"""

import json
import math
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import diff_modules as dm  # noqa: E402

KINDS = ("diff-v1", "diff-v2", "transformer")
BOS_ID, EOS_ID = 0, 1

# Shared shape: width D, L layers, RoPE theta 10000, tied embeddings.
# Attention parameters per layer (D = 128, d = 32):
#   transformer  4 heads of 32, 2 kv heads            q 128x128, k,v 128x64, o 128x128
#   diff-v1      4 sub-heads of 32 = 2 diff-heads (dk 32, dv 64), 2 kv heads: the same
#                matrices, plus lambda_q1/k1/q2/k2 (4 x 32)
#   diff-v2      8 query heads of 32 = 4 diff-heads, 2 kv heads: q is 128x256 (twice the
#                baseline's), o 128x128, plus lambda_proj 4x128; its FFN is narrower so the
#                total parameter count stays within 1% of the others.
BASE = dict(hidden=128, layers=4, head_dim=32, kv_heads=2, ffn=384, rope_theta=10000.0,
            rms_norm_eps=1e-5)


def shape(kind):
    s = dict(BASE)
    if kind == "diff-v2":
        s["heads"] = 8
        # +D*H*d (q) + H*D (lambda_proj) per layer over the baseline; 3*D*dF per layer saved
        extra = s["hidden"] * 4 * s["head_dim"] + 4 * s["hidden"]
        s["ffn"] = BASE["ffn"] - round(extra / (3 * s["hidden"]))
    else:
        s["heads"] = 4
    return s


def hf_config(kind, vocab, ctx):
    from transformers import DiffLlamaConfig, LlamaConfig
    s = shape(kind)
    cls = DiffLlamaConfig if kind == "diff-v1" else LlamaConfig
    cfg = cls(vocab_size=vocab, hidden_size=s["hidden"], intermediate_size=s["ffn"],
              num_hidden_layers=s["layers"], num_attention_heads=s["heads"],
              num_key_value_heads=s["kv_heads"], head_dim=s["head_dim"],
              max_position_embeddings=ctx, rms_norm_eps=s["rms_norm_eps"],
              rope_parameters={"rope_type": "default", "rope_theta": s["rope_theta"]},
              tie_word_embeddings=True, bos_token_id=BOS_ID, eos_token_id=EOS_ID,
              pad_token_id=None)
    return cfg


def v2_config(vocab, ctx, dtype="float16"):
    s = shape("diff-v2")
    return {
        "model_type": "diff_transformer_v2",
        "vocab_size": vocab,
        "hidden_size": s["hidden"],
        "intermediate_size": s["ffn"],
        "num_hidden_layers": s["layers"],
        "num_attention_heads": s["heads"],
        "num_key_value_heads": s["kv_heads"],
        "head_dim": s["head_dim"],
        "rms_norm_eps": s["rms_norm_eps"],
        "rope_theta": s["rope_theta"],
        "rope_scaling": None,
        "max_position_embeddings": ctx,
        "tie_word_embeddings": True,
        "torch_dtype": dtype,
        "bos_token_id": BOS_ID,
        "eos_token_id": EOS_ID,
    }


def build(kind, vocab, ctx, attn="sdpa"):
    if kind == "diff-v2":
        return dm.DiffTransformerLM(v2_config(vocab, ctx))
    from transformers import DiffLlamaForCausalLM, LlamaForCausalLM
    cfg = hf_config(kind, vocab, ctx)
    cls = DiffLlamaForCausalLM if kind == "diff-v1" else LlamaForCausalLM
    m = cls(cfg)
    m.set_attn_implementation(attn)
    return m


def init_(model, seed):
    """The same initialisation for all three (named_parameters order, one generator):
    q_proj and k_proj N(0, 1/sqrt(in)), so that the initial attention logits are O(1)
    (with transformers' 0.02 at width 128 they are ~0.01: every map starts uniform and
    the QK product sits at a saddle that takes thousands of steps to leave); embedding and
    every other Linear N(0, 0.02); RMSNorm weights 1; DIFF V1 lambda_q1..k2 N(0, 0.1)
    (transformers' lambda_std_dev)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.split(".")[-1]
            mod = name.split(".")[-2] if "." in name else ""
            if leaf in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            elif p.dim() == 1:
                p.fill_(1.0)
            elif mod in ("q_proj", "k_proj"):
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            else:
                p.copy_(torch.randn(p.shape, generator=g) * 0.02)


# --------------------------------------------------------------------------
# batched forward for training
# --------------------------------------------------------------------------


def _v2_batched(model, ids):
    """Batched forward of dm.DiffTransformerLM (diff_transformer_v2) with its own parameters:
    the same equations as DiffV2Attention.forward (interleaved RoPE, query heads 2j/2j+1 on
    one kv head, sigmoid(lambda_proj(x)) per token), SDPA for the two softmax maps.
    check_v2_batched() verifies it against the module's own (unbatched) forward."""
    B, T = ids.shape
    cos, sin = dm.rope_cos_sin(model.inv_freq.float(), torch.arange(T))
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]

    def rope(x):  # [B, T, n, d], interleaved pairs
        x0, x1 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)

    x = model.model.embed_tokens(ids)
    for layer in model.model.layers:
        a = layer.self_attn
        h = layer.input_layernorm(x)
        H, G, d = a.H, a.G, a.d
        q = rope(a.q_proj(h).view(B, T, 2 * H, d)).transpose(1, 2)
        k = rope(a.k_proj(h).view(B, T, G, d)).transpose(1, 2)
        v = a.v_proj(h).view(B, T, G, d).transpose(1, 2)
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        o = o.transpose(1, 2)  # [B, T, 2H, d]
        lam = torch.sigmoid(a.lambda_proj(h))  # [B, T, H]
        o = o[:, :, 0::2] - lam[..., None] * o[:, :, 1::2]
        x = x + a.o_proj(o.reshape(B, T, H * d))
        x = x + layer.mlp(layer.post_attention_layernorm(x))
    x = model.model.norm(x)
    return x @ model.model.embed_tokens.weight.t()


def logits_batched(kind, model, ids):
    if kind == "diff-v2":
        return _v2_batched(model, ids)
    return model(input_ids=ids).logits


def check_v2_batched(model, vocab, seed=0):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, vocab, (2, 40), generator=g)
    with torch.no_grad():
        b = _v2_batched(model, ids)
        for i in range(2):
            ref = model(ids[i])
            err = float((b[i] - ref).abs().max())
            if err > 1e-4 * max(1.0, float(ref.abs().max())):
                raise SystemExit(f"batched V2 forward disagrees with diff_modules: {err:.3e}")


# --------------------------------------------------------------------------
# save / load
# --------------------------------------------------------------------------


def save(kind, model, out_dir, vocab, ctx):
    """f16 model.safetensors + config.json in the layout of `kind`."""
    from safetensors.torch import save_file
    os.makedirs(out_dir, exist_ok=True)
    if kind == "diff-v2":
        sd = {k: v.detach().to(torch.float16).contiguous() for k, v in model.state_dict().items()}
        assert "lm_head.weight" not in sd
        save_file(sd, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
        with open(os.path.join(out_dir, "config.json"), "w") as f:
            json.dump(v2_config(vocab, ctx), f, indent=2)
            f.write("\n")
    else:
        import copy
        m16 = copy.deepcopy(model).to(torch.float16)
        m16.save_pretrained(out_dir)
        gc = os.path.join(out_dir, "generation_config.json")
        if os.path.exists(gc):
            os.remove(gc)


def kind_of(model_dir):
    with open(os.path.join(model_dir, "config.json")) as f:
        mt = json.load(f)["model_type"]
    return {"diffllama": "diff-v1", "diff_transformer_v2": "diff-v2", "llama": "transformer"}[mt]


def load(model_dir):
    """Loads a checkpoint as its layout's code does; weights f16 -> computed in f32."""
    kind = kind_of(model_dir)
    if kind == "diff-v2":
        from safetensors.torch import load_file
        with open(os.path.join(model_dir, "config.json")) as f:
            cfg = json.load(f)
        m = dm.DiffTransformerLM(cfg)
        m.load_state_dict({k: v.float() for k, v in
                           load_file(os.path.join(model_dir, "model.safetensors")).items()},
                          strict=True)
    else:
        from transformers import AutoModelForCausalLM
        m = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32,
                                                 attn_implementation="eager")
    return kind, m.eval()


# --------------------------------------------------------------------------
# inference: greedy decoding with a KV cache
# --------------------------------------------------------------------------


class Runner:
    def __init__(self, kind, model):
        self.kind, self.model = kind, model

    def new_cache(self):
        if self.kind == "diff-v2":
            return self.model.new_cache()
        from transformers import DynamicCache
        return DynamicCache(config=self.model.config)

    @torch.no_grad()
    def __call__(self, ids, cache):
        """ids: list of ints; returns f32 logits of the last position."""
        t = torch.tensor(ids, dtype=torch.long)
        if self.kind == "diff-v2":
            return self.model(t, cache)[-1].float()
        out = self.model(input_ids=t[None], past_key_values=cache, use_cache=True)
        return out.logits[0, -1].float()

    def greedy(self, ids, max_new, eos):
        """Greedy continuation: up to max_new tokens, stopping after (and not returning) any
        id of eos (a collection of ids).
        Also returns the top-2 logit gap at each step (a near tie can flip between
        implementations)."""
        cache = self.new_cache()
        logits = self(ids, cache)
        out, gaps = [], []
        for _ in range(max_new):
            top = torch.topk(logits, 2)
            gaps.append(float(top.values[0] - top.values[1]))
            nxt = int(torch.argmax(logits))
            if nxt in eos:
                break
            out.append(nxt)
            logits = self(out[-1:], cache)
        return out, gaps


# --------------------------------------------------------------------------
# attention maps at the last query position (Table 3 quantities)
# --------------------------------------------------------------------------


@torch.no_grad()
def last_row_maps(kind, model, ids):
    """For the last position of the prompt `ids`: per layer, per (diff-)head, the attention
    row over all positions, float64 [L, H, T]. Differential maps for the diff models:
    A1 - lambda A2 (V1: lambda per layer; V2: lambda[t_last, h] = sigmoid(lambda_proj x)).
    Computed from each layer's input hidden state, with the layout's own projections."""
    t = torch.tensor(ids, dtype=torch.long)
    T = len(ids)
    rows = []
    if kind == "diff-v2":
        cos, sin = dm.rope_cos_sin(model.inv_freq.float(), torch.arange(T))
        x = model.model.embed_tokens(t)
        for layer in model.model.layers:
            a = layer.self_attn
            h = layer.input_layernorm(x)
            H, G, d = a.H, a.G, a.d
            q = dm.apply_rope_interleaved(a.q_proj(h).view(T, 2 * H, d), cos, sin)
            k = dm.apply_rope_interleaved(a.k_proj(h).view(T, G, d), cos, sin)
            rep = (2 * H) // G
            kk = k.repeat_interleave(rep, dim=1)                       # [T, 2H, d]
            s = torch.einsum("nd,snd->ns", q[-1], kk).float() * d ** -0.5
            p = torch.softmax(s, dim=-1).double()                       # [2H, T]
            lam = torch.sigmoid(a.lambda_proj(h[-1])).double()          # [H]
            rows.append(p[0::2] - lam[:, None] * p[1::2])
            x = layer(x, cos, sin, None, 0)
        return torch.stack(rows)

    out = model(input_ids=t[None], output_hidden_states=True)
    hs = out.hidden_states  # embeddings, then after each layer
    rot = model.model.rotary_emb
    pos = torch.arange(T)[None]
    for li, layer in enumerate(model.model.layers):
        a = layer.self_attn
        h = layer.input_layernorm(hs[li])
        cos, sin = rot(h, pos)
        nh = model.config.num_attention_heads
        kv = model.config.num_key_value_heads
        hd = a.head_dim
        q = a.q_proj(h).view(1, T, nh, hd).transpose(1, 2)
        k = a.k_proj(h).view(1, T, kv, hd).transpose(1, 2)
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        k = k.repeat_interleave(nh // kv, dim=1)                        # [1, nh, T, hd]
        s = torch.einsum("nd,nsd->ns", q[0, :, -1], k[0]).float() * hd ** -0.5
        p = torch.softmax(s, dim=-1).double()                           # [nh, T]
        if kind == "diff-v1":
            lam = (math.exp(float((a.lambda_q1.float() * a.lambda_k1.float()).sum()))
                   - math.exp(float((a.lambda_q2.float() * a.lambda_k2.float()).sum()))
                   + a.lambda_init)
            rows.append(p[: nh // 2] - lam * p[nh // 2:])
        else:
            rows.append(p)
    return torch.stack(rows)
