#!/bin/sh
# Rebuild everything under python/niah and models/ from nothing (run from the repository
# root; CPU only, 29-36 minutes of training per model on 2 cores). Each step is also usable alone.
set -eu

# 1. tokenizer (trained on generated text) and the generator's test vectors
python3 python/niah/tokenizer.py --out python/niah/tokenizer.json
python3 python/niah/generate.py --tokenizer python/niah/tokenizer.json \
    --samples-out python/niah/samples.jsonl

# 2. the three models: same data, steps, seeds and optimiser (train.py defaults)
for kind in diff-v1 diff-v2 transformer; do
    name=$kind-tiny
    python3 python/niah/train.py --kind $kind --out models/$name
    # 3. NIAH in PyTorch: default settings (N=1, R=1, ctx = training context, depths
    #    0..100, 40 samples, seed 0) with attention -> models/$name/niah_python.json
    python3 python/niah/eval.py --model models/$name --attention
    # the multi-needle grid -> models/$name/niah_grid.json
    python3 python/niah/grid.py --model models/$name
    python3 python/niah/example_prompt.py --model models/$name
    python3 python/niah/model_card.py models/$name
done
