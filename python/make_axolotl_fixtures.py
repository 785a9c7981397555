#!/usr/bin/env python3
"""Golden fixtures for axolotl's differential transformer (model_type
"llama-differential", and the `dev` converter's plain "diffllama" output),
made by running axolotl's OWN modeling code.

No axolotl code is in this repository. Copy the source files into a folder
outside it first (SRC below), from these commits:

  SRC/axo_dt_main/{diff_attn.py,modeling_diff_attn.py}
      axolotl-ai-cloud/diff-transformer, branch main, 20acfc9a6cd5e0bc85139f14558892dee0d5496b
      (src/axolotl_diff_transformer/modeling/): no (1 - lambda_init) output scale,
      config has the `mirror_weights` key. Runs with transformers 4.48.1.
  SRC/axo_int_4f804f6/{diff_attn.py,modeling_diff_attn.py}
      axolotl-ai-cloud/axolotl 4f804f6d88bc4493934fea8944f05b1cfa9b7f9b (2025-01-10,
      src/axolotl/integrations/diff_transformer/): the last version before
      `mirror_weights` appeared; multiplies the attention output by
      (1 - lambda_init). Runs with transformers 4.47.1 (its pin).
  SRC/axo_dt_dev/convert.py
      axolotl-ai-cloud/diff-transformer, branch dev, fa67c11e7d7378b6d1a42ed00eaa35ecd168f53a
      (src/axolotl_diff_transformer/plugin/convert.py): converts a Llama into a
      plain transformers DiffLlama. Runs with transformers 4.48.1.
  SRC/stubs/axolotl/{__init__.py,logging_config.py}
      a stub `configure_logging()` that does nothing (convert.py imports it).

e.g. `git -C <diff-transformer clone> show main:src/axolotl_diff_transformer/modeling/diff_attn.py
> SRC/axo_dt_main/diff_attn.py`, and empty `__init__.py` files in each folder.

Each generation runs in the transformers version its code was written for,
so this script is run once per group, each time in its own venv:

  venv with transformers==4.48.1:  --group main   and  --group dev
  venv with transformers==4.47.1:  --group old
  venv with transformers 5.x:      --group tf5    (rewrites one fixture's config.json
                                                   the way transformers 5 writes it)

    python3 python/make_axolotl_fixtures.py --src SRC --group main --out tests/fixtures

Every fixture gets the files of tests/fixtures/README.md: config.json and
model.safetensors (what the family's save_pretrained writes) and
expected.safetensors (tokens, logits_prefill, logits_decode, greedy [16], and
logits_prefill_native for bf16). The weights are re-initialised like
make_fixtures.py does (activations O(1)); `lambda_init` keeps the value the
family's code gives it (0.8 - 0.6 exp(-0.3 l), 0 after a zero-init
conversion, rounded when stored in bf16). The expected outputs come from the
family's forward (eager attention, its cache handling through DynamicCache).
"""

import argparse
import copy
import json
import math
import os
import shutil
import sys

import torch
from safetensors.torch import load_file, save_file

PROMPT_LEN = 12
N_GREEDY = 16
PROMPT_TRIES = 64
MIN_GAP = 0.05
MIN_DISTINCT = 8
VOCAB = 256

LLAMA3_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                  "high_freq_factor": 4.0, "original_max_position_embeddings": 16}

TRANSFORMERS = {"main": "4.48.1", "dev": "4.48.1", "old": "4.47.1"}

# group: which source; split/subln: the config keys; dtype: storage
FIXTURES = [
    dict(name="axolotl_gqa", group="main", seed=2001, dtype="float32", heads=4, kv=2, hidden=64,
         ffn=64, layers=2, tied=False, rope_scaling=None, split=False, subln=True,
         covers="default layout (split_heads false: q/k doubled, first/second half of the rows "
                "are the two maps, V of width head_dim shared), GQA 4 heads / 2 kv heads, "
                "head_dim 16, sub-norm with weight, no output scale (mirror_weights key present), f32"),
    dict(name="axolotl_split_gqa", group="main", seed=2002, dtype="float32", heads=8, kv=4,
         hidden=64, ffn=64, layers=2, tied=False, rope_scaling=None, split=True, subln=True,
         covers="split_heads true: 8 heads -> 4 diff-heads, 4 kv heads -> 2 groups, head_dim 8, "
                "V regrouped to 2 head_dim, sub-norm over 2 head_dim, f32"),
    dict(name="axolotl_nosubln_mha", group="main", seed=2003, dtype="float32", heads=4, kv=4,
         hidden=64, ffn=64, layers=2, tied=False, rope_scaling=None, split=False, subln=False,
         covers="sublayer_norm false (no GROUPNORM), MHA 4 heads / 4 kv heads, f32"),
    dict(name="axolotl_split_nosubln", group="main", seed=2004, dtype="float32", heads=4, kv=2,
         hidden=64, ffn=64, layers=2, tied=True, rope_scaling=LLAMA3_SCALING, split=True,
         subln=False,
         covers="split_heads true without sub-norm, 4 heads / 2 kv heads (2 diff-heads, 1 group), "
                "tied embeddings, llama3 rope_scaling; config.json rewritten by transformers 5 "
                "(rope_parameters, dtype) by --group tf5"),
    dict(name="axolotl_zero_init", group="main", seed=2005, dtype="float32", heads=4, kv=2,
         hidden=64, ffn=64, layers=2, tied=False, rope_scaling=None, split=False, subln=False,
         zero_init=True,
         covers="LlamaDifferentialForCausalLM.from_llama(zero_init=True, sublayer_norm=False) of a "
                "random Llama: second q/k halves and lambda_q/k zero, stored lambda_init 0; "
                "reproduces the base Llama (checked), f32"),
    dict(name="axolotl_bf16", group="main", seed=2006, dtype="bfloat16", heads=4, kv=2, hidden=64,
         ffn=64, layers=2, tied=True, rope_scaling=LLAMA3_SCALING, split=False, subln=True,
         from_llama=True,
         covers="bf16 checkpoint (lambda_init stored rounded to bf16), tied embeddings and llama3 "
                "rope_scaling as Llama-3.2 1B/3B give them, GQA 4/2; made as axolotl converts: "
                "from_llama of a random tied Llama (the new q/k halves, lambda_q/k and subln keep "
                "the family's own init), so lm_head.weight is stored too, equal to the embedding "
                "(from_pretrained ties it and ignores it)"),
    dict(name="axolotl_scale_2501", group="old", seed=2007, dtype="float32", heads=4, kv=2,
         hidden=64, ffn=64, layers=2, tied=False, rope_scaling=None, split=False, subln=True,
         covers="axolotl 4f804f6 (2025-01-10): attention output times (1 - lambda_init) after "
                "the sub-norm; no mirror_weights key in config.json; GQA 4/2, f32"),
    dict(name="axolotl_scale_split_nosubln", group="old", seed=2008, dtype="float32", heads=4,
         kv=4, hidden=64, ffn=64, layers=2, tied=False, rope_scaling=None, split=True,
         subln=False,
         covers="axolotl 4f804f6: (1 - lambda_init) scale without sub-norm, split_heads true, "
                "MHA 4/4, f32"),
    dict(name="diffllama_axolotl_dev", group="dev", seed=2009, dtype="float32", heads=4, kv=2,
         hidden=64, ffn=64, layers=2, tied=False, rope_scaling=None,
         covers="diff-transformer dev's convert_to_diffllama of a random Llama (4 heads / 2 kv "
                "heads -> DiffLlama 8 / 4, second q/k/v halves and o_proj's second half zero): "
                "model_type diffllama, loaded by transformers' DiffLlama; f32"),
]

TF5_CONFIG = ["axolotl_split_nosubln"]

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16}


def reinit_(model, seed, tied):
    """As make_fixtures.py: embeddings N(0,1) (N(0, 1/sqrt(D)) when tied),
    Linear weights N(0, 1/sqrt(in)), norm weights 1 + 0.1 N(0,1), lambda_q/k
    N(0, 0.3). lambda_init (0-dim, not trainable) keeps the family's value."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            leaf = name.split(".")[-1]
            if leaf == "lambda_init":
                continue
            if name.endswith("embed_tokens.weight"):
                std = 1.0 / math.sqrt(p.shape[1]) if tied else 1.0
                p.copy_(torch.randn(p.shape, generator=g) * std)
            elif leaf in ("lambda_q1", "lambda_k1", "lambda_q2", "lambda_k2"):
                p.copy_(torch.randn(p.shape, generator=g) * 0.3)
            elif p.dim() == 1 and ("norm" in name or "subln" in name):
                p.copy_(1.0 + 0.1 * torch.randn(p.shape, generator=g))
            elif p.dim() == 2:
                p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(p.shape[1]))
            else:
                raise RuntimeError(f"no init rule for parameter {name} {tuple(p.shape)}")


def round_to_(model, dtype):
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(dtype).to(torch.float32))


class Runner:
    def __init__(self, model):
        self.model = model

    def new_cache(self):
        from transformers import DynamicCache
        return DynamicCache()

    def __call__(self, ids, cache=None):
        with torch.no_grad():
            out = self.model(input_ids=ids.long()[None], past_key_values=cache,
                             use_cache=cache is not None)
        return out.logits[0].float()


def run_reference(runner, tokens):
    prefill = runner(tokens)
    cache = runner.new_cache()
    decode = torch.stack([runner(tokens[t:t + 1], cache)[0] for t in range(len(tokens))])
    greedy, gaps = [], []
    last = decode[-1]
    for i in range(N_GREEDY):
        top2 = torch.topk(last, 2).values
        gaps.append(float(top2[0] - top2[1]))
        nxt = int(torch.argmax(last))
        greedy.append(nxt)
        if i + 1 < N_GREEDY:
            last = runner(torch.tensor([nxt]), cache)[0]
    return prefill, decode, torch.tensor(greedy, dtype=torch.int32), gaps


def llama_kwargs(spec):
    kw = dict(vocab_size=VOCAB, hidden_size=spec["hidden"], intermediate_size=spec["ffn"],
              num_hidden_layers=spec["layers"], num_attention_heads=spec["heads"],
              num_key_value_heads=spec["kv"], max_position_embeddings=64, rope_theta=10000.0,
              rope_scaling=copy.deepcopy(spec["rope_scaling"]), rms_norm_eps=1e-5,
              tie_word_embeddings=spec["tied"], bos_token_id=1, eos_token_id=2)
    return kw


def random_llama(spec):
    from transformers import LlamaConfig, LlamaForCausalLM
    cfg = LlamaConfig(**llama_kwargs(spec))
    cfg._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    m = LlamaForCausalLM(cfg).to(torch.float32).eval()
    reinit_(m, spec["seed"], spec["tied"])
    return m


def import_family(src, group):
    sys.path.insert(0, src)
    sys.path.insert(0, os.path.join(src, "stubs"))
    if group == "main":
        from axo_dt_main import modeling_diff_attn as md
        return md
    if group == "old":
        from axo_int_4f804f6 import modeling_diff_attn as md
        md.register_diff_attn()  # transformers 4.47 looks attention classes up by name
        return md
    if group == "dev":
        from axo_dt_dev import convert
        return convert
    raise SystemExit(f"unknown group {group}")


def build(spec, fam):
    """The model (float32) and the class that reloads it."""
    if spec["group"] == "dev":
        from transformers import DiffLlamaConfig, DiffLlamaForCausalLM
        llama = random_llama(spec)
        config = DiffLlamaConfig(**llama.config.__dict__)
        torch.manual_seed(spec["seed"] + 1)  # DiffLlama's own init of lambda_q/k
        model = fam.convert_to_diffllama(llama, config, zero_init=False, sublayer_norm=True,
                                         mirror_weights=False)
        return model.to(torch.float32).eval(), DiffLlamaForCausalLM, None
    cls, ccls = fam.LlamaDifferentialForCausalLM, fam.LlamaDifferentialConfig
    extra = dict(split_heads=spec["split"], sublayer_norm=spec["subln"])
    if spec.get("from_llama"):
        llama = random_llama(spec)
        config = ccls(**llama.config.__dict__, zero_init=False, mirror_weights=False, **extra)
        torch.manual_seed(spec["seed"] + 1)  # the family's init of what the conversion adds
        model = cls.from_llama(llama, config).to(torch.float32).eval()
        return model, cls, None
    if spec.get("zero_init"):
        llama = random_llama(spec)
        # as convert_diff_transformer does it
        config = ccls(**llama.config.__dict__, zero_init=True, mirror_weights=False, **extra)
        torch.manual_seed(spec["seed"] + 1)
        model = cls.from_llama(llama, config).to(torch.float32).eval()
        return model, cls, llama
    config = ccls(**llama_kwargs(spec), **extra)
    config._attn_implementation = "eager"
    torch.manual_seed(spec["seed"])
    model = cls(config).to(torch.float32).eval()
    # LlamaDifferentialForCausalLM replaces self.model after LlamaForCausalLM
    # tied lm_head to the replaced model's embedding; a tied checkpoint has no
    # lm_head.weight and from_pretrained ties it to the new one: tie it here
    # too, so the model run is the one the checkpoint holds
    model.tie_weights()
    if spec["tied"]:
        assert model.lm_head.weight is model.model.embed_tokens.weight
    reinit_(model, spec["seed"], spec["tied"])
    return model, cls, None


def make_one(spec, fam, out_root):
    name = spec["name"]
    d = os.path.join(out_root, name)
    if os.path.isdir(d):
        shutil.rmtree(d)
    os.makedirs(d)
    storage = DTYPES[spec["dtype"]]
    print(f"[{name}] {spec['covers']}")
    model, cls, base = build(spec, fam)
    attn0 = model.model.layers[0].self_attn
    print(f"    attention class {type(attn0).__module__}.{type(attn0).__name__}")
    if storage != torch.float32:
        round_to_(model, storage)

    best = None
    for attempt in range(PROMPT_TRIES):
        gtok = torch.Generator().manual_seed(spec["seed"] + 100 + attempt)
        tokens = torch.randint(3, VOCAB, (PROMPT_LEN,), generator=gtok, dtype=torch.int64)
        res = run_reference(Runner(model), tokens)
        gl = res[2].tolist()
        key = (2 not in gl, len(set(gl)) >= MIN_DISTINCT, min(res[3]))
        if best is None or key > best[0]:
            best = (key, attempt, tokens, res)
        if key[0] and key[1] and key[2] >= MIN_GAP:
            break
    _, attempt, tokens, (prefill, decode, greedy, gaps) = best
    print(f"    prompt seed {spec['seed'] + 100 + attempt} (candidate {attempt}): {tokens.tolist()}")
    expected = {"tokens": tokens.to(torch.int32), "logits_prefill": prefill.contiguous(),
                "logits_decode": decode.contiguous(), "greedy": greedy}
    if base is not None:
        bl = Runner(base)(tokens)
        print(f"    zero-init: max|converted - base Llama| = {float((bl - prefill).abs().max()):.3e}")
        if float((bl - prefill).abs().max()) > 1e-4:
            raise SystemExit(f"{name}: the zero-init conversion does not reproduce the base model")

    native_model = copy.deepcopy(model).to(storage) if storage != torch.float32 else model
    if storage != torch.float32:
        expected["logits_prefill_native"] = Runner(native_model)(tokens).float().contiguous()
    native_model.save_pretrained(d)
    gen_cfg = os.path.join(d, "generation_config.json")
    if os.path.exists(gen_cfg):
        os.remove(gen_cfg)
    save_file(expected, os.path.join(d, "expected.safetensors"), metadata={"format": "pt"})

    stored = load_file(os.path.join(d, "model.safetensors"))
    bad = [k for k, v in stored.items() if v.dtype != storage]
    assert not bad, f"tensors not in {storage}: {bad}"
    if spec.get("from_llama") and spec["tied"]:
        # what a tied conversion writes: lm_head.weight beside the embedding, equal to it
        assert torch.equal(stored["lm_head.weight"], stored["model.embed_tokens.weight"])
        print("    lm_head.weight stored, equal to model.embed_tokens.weight")
    li = {k: float(v) for k, v in stored.items() if k.endswith("lambda_init")}
    print(f"    stored lambda_init: {li}")
    re = cls.from_pretrained(d, torch_dtype=torch.float32, attn_implementation="eager").eval()
    reload_err = float((Runner(re)(tokens) - prefill).abs().max())
    pd = float((prefill - decode).abs().max())
    with open(os.path.join(d, "config.json")) as f:
        cj = json.load(f)
    keys = {k: cj.get(k, "(absent)") for k in ("model_type", "split_heads", "sublayer_norm",
                                               "zero_init", "mirror_weights", "head_dim",
                                               "torch_dtype", "tie_word_embeddings")}
    print(f"    config.json: {keys}")
    print(f"    {len(stored)} tensors, logit range [{float(prefill.min()):.2f}, {float(prefill.max()):.2f}]")
    print(f"    max|logits_prefill - logits_decode| = {pd:.3e}; reloaded: {reload_err:.3e}")
    print(f"    greedy: {greedy.tolist()}; min top-2 gap {min(gaps):.4f}; "
          f"distinct {len(set(greedy.tolist()))}")
    if "logits_prefill_native" in expected:
        nd = expected["logits_prefill_native"] - prefill
        nmse = float((nd ** 2).sum() / (prefill ** 2).sum())
        print(f"    native {spec['dtype']} prefill vs f32: max|diff| {float(nd.abs().max()):.3e}, "
              f"NMSE {nmse:.3e}")
    if pd > 1e-4 or reload_err > 1e-5:
        raise SystemExit(f"{name}: decode or reload disagrees with the prefill")
    size = sum(os.path.getsize(os.path.join(d, f)) for f in os.listdir(d))
    print(f"    {sorted(os.listdir(d))}, {size} bytes")


def rewrite_tf5(out_root):
    """config.json as transformers 5 writes it for a LlamaConfig subclass with
    the family's model_type and keys (rope_parameters, dtype)."""
    from transformers import LlamaConfig

    class LlamaDifferentialConfig(LlamaConfig):
        model_type = "llama-differential"

        def __init__(self, split_heads=False, sublayer_norm=True, zero_init=False,
                     mirror_weights=False, **kwargs):
            super().__init__(**kwargs)
            self.split_heads = split_heads
            self.sublayer_norm = sublayer_norm
            self.zero_init = zero_init
            self.mirror_weights = mirror_weights

    for name in TF5_CONFIG:
        path = os.path.join(out_root, name, "config.json")
        with open(path) as f:
            old = json.load(f)
        if "rope_parameters" in old:
            raise SystemExit(f"{path} is already in the transformers 5 form")
        cfg = LlamaDifferentialConfig.from_dict(old)
        cfg.save_pretrained(os.path.join(out_root, name))
        with open(path) as f:
            new = json.load(f)
        print(f"[{name}] config.json rewritten: rope_parameters={new.get('rope_parameters')}, "
              f"dtype={new.get('dtype')}, rope_scaling in it: {'rope_scaling' in new}, "
              f"torch_dtype in it: {'torch_dtype' in new}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--src", required=True, help="folder with the copied axolotl source files")
    ap.add_argument("--group", required=True, choices=["main", "old", "dev", "tf5"])
    ap.add_argument("--out", default="tests/fixtures")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    import transformers
    print(f"torch {torch.__version__}, transformers {transformers.__version__}")
    if args.group == "tf5":
        if not transformers.__version__.startswith("5."):
            raise SystemExit("--group tf5 needs transformers 5")
        rewrite_tf5(args.out)
        return
    if transformers.__version__ != TRANSFORMERS[args.group]:
        raise SystemExit(f"--group {args.group} needs transformers {TRANSFORMERS[args.group]}")
    fam = import_family(os.path.abspath(args.src), args.group)
    for spec in FIXTURES:
        if spec["group"] != args.group or (args.only and spec["name"] not in args.only):
            continue
        make_one(spec, fam, args.out)


if __name__ == "__main__":
    main()
