#!/usr/bin/env python3
"""Train the byte-level BPE tokenizer of the tiny NIAH models (nothing downloaded).

    python3 python/niah/tokenizer.py --out /tmp/niah/tokenizer.json

The training text is generated here (generate.py's grammar, cities and needle /
question templates, splitmix64 seed 20250), so the result is reproducible: the
script trains twice and checks both files are identical.

Layout of the tokenizer (all supported by diffrt's text/):
  normalizer     none
  pre_tokenizer  Sequence[ Split(\\p{N}, Isolated),  ByteLevel(add_prefix_space=false,
                 use_regex=true) ]   -- every digit is its own pre-token, so numbers are
                 spelled digit by digit (and " 1234" is " " + "1" "2" "3" "4")
  model          BPE, vocab_size 1024, special tokens <bos>=0, <eos>=1
  post_processor TemplateProcessing: single = "<bos> $A" (encode adds BOS)
  decoder        ByteLevel
"""

import argparse
import hashlib
import os
import sys

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import generate as g  # noqa: E402

VOCAB = 1024
SEED = 20250
N_LINES = 20000


def corpus():
    rng = g.Rng(g.seed_state(SEED))
    lines = []
    for _ in range(N_LINES):
        parts = []
        n = 3 + rng.below(6)
        for _ in range(n):
            parts.append(g.filler_sentence(rng))
        c = g.CITIES[rng.below(len(g.CITIES))]
        k = g.N_DIGITS_MIN + rng.below(g.N_DIGITS_MAX - g.N_DIGITS_MIN + 1)
        num = str(10 ** (k - 1) + rng.below(9 * 10 ** (k - 1)))
        parts.insert(rng.below(n + 1), g.needle_text(c, num))
        c2 = g.CITIES[rng.below(len(g.CITIES))]
        nq = 1 + rng.below(3)
        qc = [c] + [g.CITIES[rng.below(len(g.CITIES))] for _ in range(nq - 1)]
        parts.append(g.question_text(qc))
        parts.append(g.prefix_text(c) + " " + num + ".")
        parts.append(g.prefix_text(c2))
        lines.append(" " + " ".join(parts))
    return lines


def build(lines):
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(r"\p{N}"), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
    ])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=["<bos>", "<eos>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                  show_progress=False)
    tok.train_from_iterator(lines, trainer=trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<bos> $A", special_tokens=[("<bos>", tok.token_to_id("<bos>"))])
    return tok


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    lines = corpus()
    a = build(lines).to_str(pretty=True)
    b = build(lines).to_str(pretty=True)
    if a != b:
        raise SystemExit("tokenizer training is not deterministic")
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    with open(args.out, "w") as f:
        f.write(a)
    tok = Tokenizer.from_str(a)
    print(f"vocab {tok.get_vocab_size()}, sha256 {hashlib.sha256(a.encode()).hexdigest()[:16]}",
          file=sys.stderr)
    for s in [" The magic number of Copenhagen is 4720391.", " " + g.filler_sentence(g.Rng(1)),
              " What are the magic numbers of Paris, Kyiv and Seoul?"]:
        e = tok.encode(s)
        print(f"{len(e.ids):3d} {e.tokens}", file=sys.stderr)


if __name__ == "__main__":
    main()
