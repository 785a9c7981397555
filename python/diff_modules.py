"""Reference PyTorch modules for the two diffrt-native checkpoint layouts.

These are the SOURCE implementations the golden fixtures are computed with
(see make_fixtures.py). They are deliberately plain: one sequence, no batch
dimension, eager attention with an explicit causal mask, and a tiny KV cache
so that token-by-token decoding can be checked against a full prefill.

Which equations each part follows
---------------------------------
Decoder (both layouts, docs/design.md section 4):
    h   = x + Attn(RMSNorm_1(x))
    out = h + down( silu(gate(RMSNorm_2(h))) * up(RMSNorm_2(h)) )
  then a final RMSNorm and the LM head (the embedding matrix when tied).
  RMSNorm(x) = x * rsqrt(mean(x^2) + eps) * w, the normalisation done in
  float32 and cast back to the activation dtype before the weight multiply
  (as the authors' rms_norm.py and HF LlamaRMSNorm do).

RoPE: INTERLEAVED (GPT-J) style, as the authors call
  apply_rotary_emb(..., interleaved=True): for every head, the pair
  (x[2i], x[2i+1]) is rotated by angle pos * inv_freq[i]:
      y[2i]   = x[2i] cos - x[2i+1] sin
      y[2i+1] = x[2i] sin + x[2i+1] cos
  inv_freq[i] = 1 / theta^(2i/d), then modified by rope_scaling exactly as
  transformers' modeling_rope_utils computes it (llama3: wavelength-based
  smoothing; linear: inv_freq / factor). cos/sin and the rotation itself are
  computed in float32, the result is cast back to the activation dtype.

DiffV1Attention: Differential Transformer V1, arXiv 2410.05258 eq. (1)-(3)
  and the authors' multihead_flashdiff_1.py (the GQA pairing of the flash
  versions, NOT the naive multihead_diffattn.py):
      q = q_proj(x) -> [T, 2H, dk],  k = k_proj(x) -> [T, 2G, dk],
      v = v_proj(x) -> [T, G, 2dk];  rope on q and k
      q -> [T, H, 2, dk]: q1 = q[:, :, 0], q2 = q[:, :, 1];  k likewise (G groups)
      diff-head h reads kv group g = h // (H / G)
      A_i = softmax(q_i k_i^T / sqrt(dk) + causal mask)          (eq. 1)
      lambda = exp(lq1 . lk1) - exp(lq2 . lk2) + lambda_init       (eq. 2)
      lambda_init = 0.8 - 0.6 exp(-0.3 * layer_idx), 0-based layer_idx
      O_h = (A_1 - lambda A_2) V_g                                 (eq. 1)
      O_h = (1 - lambda_init) * subln(O_h)   subln = RMSNorm(2dk, eps=1e-5, weight)  (eq. 3)
      out = out_proj(concat_h O_h)

DiffV2Attention: DIFF V2 (the authors' Diff-Transformer-V2 README pseudocode /
  multihead_flashdiffv2.py):
      q = q_proj(x) -> [T, 2H, d],  k = k_proj(x) -> [T, G, d],  v -> [T, G, d]
      rope on q and k
      attn = causal GQA softmax attention over the 2H query heads, query head n
             reads kv head n // (2H / G), scale 1/sqrt(d)  -> [T, 2H, d]
      attn1 = attn[:, 0::2], attn2 = attn[:, 1::2]
      lam = sigmoid(lambda_proj(x))   [T, H]   (x = the attention input, i.e. normed hidden)
      out = o_proj( (attn1 - lam[..., None] * attn2).reshape(T, H d) )
  No GroupNorm, no lambda_init.

Softmax is computed in float32 (row max subtracted by torch.softmax) and the
probabilities are cast back to the activation dtype, as HF's eager attention
does.
"""

import math

import torch
import torch.nn.functional as F
from torch import nn


# --------------------------------------------------------------------------
# RoPE
# --------------------------------------------------------------------------

def rope_inv_freq(head_dim, theta, rope_scaling=None):
    """inv_freq [head_dim/2] float32, with HF's llama3 / linear scaling."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.int64).to(torch.float32) / head_dim))
    if rope_scaling is None:
        return inv
    kind = rope_scaling.get("rope_type", rope_scaling.get("type"))
    if kind in (None, "default"):
        return inv
    if kind == "linear":
        return inv / rope_scaling["factor"]
    if kind == "llama3":
        factor = rope_scaling["factor"]
        lo = rope_scaling["low_freq_factor"]
        hi = rope_scaling["high_freq_factor"]
        old_ctx = rope_scaling["original_max_position_embeddings"]
        lo_wavelen = old_ctx / lo
        hi_wavelen = old_ctx / hi
        wavelen = 2 * math.pi / inv
        # long wavelengths: divided by factor; short ones: unchanged
        scaled = torch.where(wavelen > lo_wavelen, inv / factor, inv)
        # in between: interpolate linearly in old_ctx / wavelen
        smooth = (old_ctx / wavelen - lo) / (hi - lo)
        smoothed = (1 - smooth) * scaled / factor + smooth * scaled
        medium = (wavelen >= hi_wavelen) & (wavelen <= lo_wavelen)
        return torch.where(medium, smoothed, scaled)
    raise ValueError(f"unsupported rope_scaling type {kind!r}")


def rope_cos_sin(inv_freq, positions):
    """cos, sin float32 [T, d/2] for integer positions [T]."""
    ang = positions.to(torch.float32)[:, None] * inv_freq[None, :].to(torch.float32)
    return ang.cos(), ang.sin()


def apply_rope_interleaved(x, cos, sin):
    """x [T, n, d]; rotates pairs (2i, 2i+1) by the angles in cos/sin [T, d/2]."""
    dtype = x.dtype
    xf = x.to(torch.float32)
    x0 = xf[..., 0::2]
    x1 = xf[..., 1::2]
    c = cos[:, None, :]
    s = sin[:, None, :]
    y0 = x0 * c - x1 * s
    y1 = x0 * s + x1 * c
    return torch.stack((y0, y1), dim=-1).flatten(-2).to(dtype)


# --------------------------------------------------------------------------
# building blocks
# --------------------------------------------------------------------------

class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        xf = x.to(torch.float32)
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return y.to(x.dtype) * self.weight


class MLP(nn.Module):
    def __init__(self, dim, ffn):
        super().__init__()
        self.gate_proj = nn.Linear(dim, ffn, bias=False)
        self.up_proj = nn.Linear(dim, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class KVCache:
    """Per-layer K (after RoPE) and V of all past positions."""

    def __init__(self, n_layers):
        self.k = [None] * n_layers
        self.v = [None] * n_layers
        self.length = 0  # number of positions already stored (p0 for the next call)

    def append(self, layer, k, v):
        if self.k[layer] is None:
            self.k[layer], self.v[layer] = k, v
        else:
            self.k[layer] = torch.cat((self.k[layer], k), dim=0)
            self.v[layer] = torch.cat((self.v[layer], v), dim=0)
        return self.k[layer], self.v[layer]


def causal_mask(T, S, p0):
    """[T, S] additive mask: query t (position p0+t) sees keys j <= p0+t."""
    t = torch.arange(T)[:, None] + p0
    j = torch.arange(S)[None, :]
    m = torch.zeros(T, S, dtype=torch.float32)
    return m.masked_fill(j > t, float("-inf"))


def softmax_attention(q, k, v, p0, scale):
    """q [T, n, dq], k [S, n, dq], v [S, n, dv] (kv already expanded to n heads).
    Returns [T, n, dv] in q's dtype. Scores and softmax in float32 after a
    matmul in the activation dtype (as HF eager)."""
    T, S = q.shape[0], k.shape[0]
    scores = torch.einsum("tnd,snd->nts", q, k) * scale
    scores = scores.to(torch.float32) + causal_mask(T, S, p0)[None]
    probs = torch.softmax(scores, dim=-1).to(q.dtype)
    return torch.einsum("nts,snd->tnd", probs, v)


def lambda_init_fn(layer_idx):
    return 0.8 - 0.6 * math.exp(-0.3 * layer_idx)


# --------------------------------------------------------------------------
# attention: V1 and V2
# --------------------------------------------------------------------------

class DiffV1Attention(nn.Module):
    SUBLN_EPS = 1e-5

    def __init__(self, cfg, layer_idx):
        super().__init__()
        D = cfg["hidden_size"]
        self.H = cfg["num_attention_heads"]      # diff-heads
        self.G = cfg["num_key_value_heads"]      # kv groups
        self.dk = cfg["head_dim"]
        assert self.H % self.G == 0
        self.layer_idx = layer_idx
        self.lambda_init = lambda_init_fn(layer_idx)
        self.q_proj = nn.Linear(D, 2 * self.H * self.dk, bias=False)
        self.k_proj = nn.Linear(D, 2 * self.G * self.dk, bias=False)
        self.v_proj = nn.Linear(D, 2 * self.G * self.dk, bias=False)
        self.out_proj = nn.Linear(2 * self.H * self.dk, D, bias=False)
        self.lambda_q1 = nn.Parameter(torch.zeros(self.dk))
        self.lambda_k1 = nn.Parameter(torch.zeros(self.dk))
        self.lambda_q2 = nn.Parameter(torch.zeros(self.dk))
        self.lambda_k2 = nn.Parameter(torch.zeros(self.dk))
        self.subln = RMSNorm(2 * self.dk, eps=self.SUBLN_EPS)

    def lambda_full(self):
        l1 = torch.exp(torch.sum(self.lambda_q1.float() * self.lambda_k1.float()))
        l2 = torch.exp(torch.sum(self.lambda_q2.float() * self.lambda_k2.float()))
        return l1 - l2 + self.lambda_init

    def forward(self, x, cos, sin, cache, p0):
        T = x.shape[0]
        H, G, dk = self.H, self.G, self.dk
        q = self.q_proj(x).view(T, 2 * H, dk)
        k = self.k_proj(x).view(T, 2 * G, dk)
        v = self.v_proj(x).view(T, G, 2 * dk)
        q = apply_rope_interleaved(q, cos, sin)
        k = apply_rope_interleaved(k, cos, sin)
        if cache is not None:
            k, v = cache.append(self.layer_idx, k, v)
        S = k.shape[0]
        q = q.reshape(T, H, 2, dk)
        k = k.reshape(S, G, 2, dk)
        rep = H // G
        k1 = k[:, :, 0].repeat_interleave(rep, dim=1)   # [S, H, dk]
        k2 = k[:, :, 1].repeat_interleave(rep, dim=1)
        vv = v.repeat_interleave(rep, dim=1)             # [S, H, 2dk]
        scale = dk ** -0.5
        a1 = softmax_attention(q[:, :, 0], k1, vv, p0, scale)   # [T, H, 2dk]
        a2 = softmax_attention(q[:, :, 1], k2, vv, p0, scale)
        lam = self.lambda_full().to(x.dtype)
        o = a1 - lam * a2
        o = self.subln(o) * (1 - self.lambda_init)
        return self.out_proj(o.reshape(T, 2 * H * dk))


class DiffV2Attention(nn.Module):
    def __init__(self, cfg, layer_idx):
        super().__init__()
        D = cfg["hidden_size"]
        nq = cfg["num_attention_heads"]          # 2H query heads
        assert nq % 2 == 0
        self.H = nq // 2                         # diff-heads
        self.G = cfg["num_key_value_heads"]
        self.d = cfg["head_dim"]
        assert nq % self.G == 0 and (nq // self.G) % 2 == 0, \
            "query heads 2j, 2j+1 must share one kv head"
        self.layer_idx = layer_idx
        self.q_proj = nn.Linear(D, 2 * self.H * self.d, bias=False)
        self.k_proj = nn.Linear(D, self.G * self.d, bias=False)
        self.v_proj = nn.Linear(D, self.G * self.d, bias=False)
        self.o_proj = nn.Linear(self.H * self.d, D, bias=False)
        self.lambda_proj = nn.Linear(D, self.H, bias=False)

    def forward(self, x, cos, sin, cache, p0):
        T = x.shape[0]
        H, G, d = self.H, self.G, self.d
        q = self.q_proj(x).view(T, 2 * H, d)
        k = self.k_proj(x).view(T, G, d)
        v = self.v_proj(x).view(T, G, d)
        q = apply_rope_interleaved(q, cos, sin)
        k = apply_rope_interleaved(k, cos, sin)
        if cache is not None:
            k, v = cache.append(self.layer_idx, k, v)
        rep = (2 * H) // G
        kk = k.repeat_interleave(rep, dim=1)     # [S, 2H, d]
        vv = v.repeat_interleave(rep, dim=1)
        attn = softmax_attention(q, kk, vv, p0, d ** -0.5)   # [T, 2H, d]
        attn1, attn2 = attn[:, 0::2], attn[:, 1::2]
        lam = torch.sigmoid(self.lambda_proj(x))             # [T, H]
        o = attn1 - lam[..., None] * attn2
        return self.o_proj(o.reshape(T, H * d))


# --------------------------------------------------------------------------
# the decoder
# --------------------------------------------------------------------------

class DecoderLayer(nn.Module):
    def __init__(self, cfg, layer_idx, attn_cls):
        super().__init__()
        D, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = RMSNorm(D, eps)
        self.self_attn = attn_cls(cfg, layer_idx)
        self.post_attention_layernorm = RMSNorm(D, eps)
        self.mlp = MLP(D, cfg["intermediate_size"])

    def forward(self, x, cos, sin, cache, p0):
        h = x + self.self_attn(self.input_layernorm(x), cos, sin, cache, p0)
        return h + self.mlp(self.post_attention_layernorm(h))


class _Backbone(nn.Module):
    def __init__(self, cfg, attn_cls):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        self.layers = nn.ModuleList(
            DecoderLayer(cfg, i, attn_cls) for i in range(cfg["num_hidden_layers"]))
        self.norm = RMSNorm(cfg["hidden_size"], cfg["rms_norm_eps"])


class DiffTransformerLM(nn.Module):
    """model_type diff_transformer_v1 or diff_transformer_v2; parameter names
    are those of the checkpoint layout (state_dict() is the checkpoint)."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = dict(cfg)
        mt = cfg["model_type"]
        attn_cls = {"diff_transformer_v1": DiffV1Attention,
                    "diff_transformer_v2": DiffV2Attention}[mt]
        self.model = _Backbone(cfg, attn_cls)
        self.tied = bool(cfg["tie_word_embeddings"])
        if not self.tied:
            self.lm_head = nn.Linear(cfg["hidden_size"], cfg["vocab_size"], bias=False)
        self.register_buffer(
            "inv_freq",
            rope_inv_freq(cfg["head_dim"], cfg["rope_theta"], cfg.get("rope_scaling")),
            persistent=False)

    def new_cache(self):
        return KVCache(len(self.model.layers))

    def forward(self, ids, cache=None):
        """ids [T] (long). With a cache, positions continue from cache.length
        and the cache is extended. Returns float32 logits [T, V]."""
        p0 = cache.length if cache is not None else 0
        T = ids.shape[0]
        cos, sin = rope_cos_sin(self.inv_freq.float(), torch.arange(p0, p0 + T))
        x = self.model.embed_tokens(ids)
        for layer in self.model.layers:
            x = layer(x, cos, sin, cache, p0)
        x = self.model.norm(x)
        w = self.model.embed_tokens.weight if self.tied else self.lm_head.weight
        logits = x @ w.t()
        if cache is not None:
            cache.length += T
        return logits.float()
