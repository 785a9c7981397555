#!/usr/bin/env python3
"""Build the tokenizer fixtures under tests/tokenizer/ (nothing is downloaded).

    python3 python/make_tokenizer_fixtures.py [--out tests/tokenizer]

Writes
  corpus.txt           the test corpus: one case per line. In a line, \\n \\r
                       \\t and \\\\ stand for newline, carriage return, tab and
                       backslash (so one line can hold "\\n\\n\\n"); every other
                       character is literal, trailing spaces included.
  gpt2.json            a GPT-2 style byte-level BPE: ByteLevel pre-tokenizer
                       with its own regex (use_regex=true), <|endoftext|>,
                       ByteLevel post-processor and decoder.
  llama3.json          a Llama-3 style one: Split(Llama-3 regex, Isolated) then
                       ByteLevel(use_regex=false), ignore_merges, special tokens
                       <|begin_of_text|> <|end_of_text|> <|eot_id|> ..., and a
                       TemplateProcessing post-processor that adds BOS.
  flags.json           a RoBERTa-like one for the less common paths: ByteLevel
                       with add_prefix_space, merges in the old "a b" string
                       form, RobertaProcessing (<s> ... </s>), added tokens with
                       lstrip / rstrip / single_word, a normalized non-special
                       added token and one whose id is not in the model vocab.
  bytes256.json        the 256 byte tokens and nothing else (no merges, no
                       special tokens): ids fit the V = 256 fixture models, so
                       the CLI's text mode can be tested on them.
  expected_<name>.json what the `tokenizers` library gives for each corpus line
                       (and for the whole corpus file as one text): ids with and
                       without special tokens, with special tokens read as
                       text (encode_special_tokens), decode with and without
                       skip_special_tokens; plus single-id and random-id
                       decodes (these split UTF-8 characters across tokens).

Each tokenizer is trained with `tokenizers` on text generated here from a fixed
seed. The committed files were made with tokenizers 0.23.3; rerunning the
script with that version reproduces them byte for byte (it checks the training
is deterministic by training twice).
"""

import argparse
import json
import os
import random

import tokenizers
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
from tokenizers import processors, trainers

LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# --------------------------------------------------------------------------
# The corpus. Each entry is one test case (real newlines allowed: they are
# escaped when written).

CORPUS = [
    # ASCII prose
    "The quick brown fox jumps over the lazy dog.",
    "Hello, world! This is a test of the tokenizer; it should work.",
    "In 1879, the population was 12,345 and by 2024 it had grown to 9,876,543.",
    "A long sentence that goes on and on, with commas, semicolons; colons: and dashes - "
    "all the way to the end of the line, because tokenizers must handle length too.",
    "",
    # contractions, lower and upper case
    "I'm sure you're right, they've gone, she'll come, he'd know, it's fine, don't worry.",
    "I'M SURE YOU'RE RIGHT, THEY'VE GONE, SHE'LL COME, HE'D KNOW, IT'S FINE, DON'T.",
    "It'S mIxEd: We'Re, They'Ve, I'M, You'Ll, He'D, Can'T",
    "'s 't 're 've 'm 'll 'd '' 'x 'S 'T",
    "rock 'n' roll, the '90s, ma'am, y'all'd've",
    "it'\u017f (long s) and x'\u212a (kelvin)",
    # digits and numbers
    "0 1 12 123 1234 12345 123456 1234567 12345678 123456789 1234567890",
    "pi=3.14159265358979323846264338327950288419716939937510",
    "+1 (555) 010-9999, 2024-01-31T23:59:59Z, 0x7fffffff, 1e-10, -42",
    "99999999999999999999999999999999999999999999999999999999999999999999",
    "\u0661\u0662\u0663 \u0968\u0966\u0968\u096a \u2460\u2461 \u00bd \u2153 \uff11\uff12\uff13",
    # whitespace runs
    "two  spaces,   three,    four,     five",
    "trailing spaces   ",
    "   leading spaces",
    "\ttab\t\tdouble tab\t",
    "line one\nline two",
    "paragraph\n\nnext paragraph\n\n\nthird after three newlines",
    "\n",
    "\n\n\n",
    "   ",
    " ",
    "a \n b \t c \r\n d",
    "windows\r\nline\r\nendings\r\n",
    "mixed \t \n \t  \n\n  end  \n",
    "  \n  \n",
    "word\n   \n",
    # unicode whitespace and invisibles
    "non\u00a0breaking\u00a0space and ideographic\u3000space",
    "line\u2028separator and para\u2029graph and next\u0085line",
    "zero\u200bwidth\u200bspace and bom\ufeffinside",
    "mongolian\u180evowel\u180e\u180eseparator, the \u180ehello x \u180e \u180e\u180e",
    "file\u001cgroup\u001drecord\u001eunit\u001fsep",
    "vt\u000bff\u000cend",
    # punctuation runs
    "Wait... what?!?! No!!! Really??? Yes---really.",
    "--> <== => :: ;; ,, .. !! ?? (( )) [[ ]] {{ }} <> </>",
    "#include <stdio.h>\nint main(void) { return printf(\"%d\\n\", 42) > 0 ? 0 : 1; }",
    "def f(x): return x**2 // 3 % 7  # comment",
    "https://example.com/path/to/page?query=1&other=two#frag",
    "email: someone@example.org, @handle, #hashtag, $100, 50%, a_b_c",
    "\"double\" 'single' `back` \u201ccurly\u201d \u2018curly\u2019 \u00abguillemets\u00bb",
    "~!@#$%^&*()_+-=[]{}|;:,./<>?",
    # CJK
    "\u4f60\u597d\uff0c\u4e16\u754c\uff01\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u3002",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3068\u30ab\u30bf\u30ab\u30ca\u3001"
    "\u3072\u3089\u304c\u306a\u3002",
    "\ud55c\uad6d\uc5b4 \ud14d\uc2a4\ud2b8\uc785\ub2c8\ub2e4.",
    "mixed \u4e2d\u6587and English\u6df7\u5408text 123\u4e2a",
    # emoji
    "emoji: \U0001F600 \U0001F680 \U0001F389\U0001F389\U0001F389",
    "family \U0001F468\u200d\U0001F469\u200d\U0001F467\u200d\U0001F466 and "
    "couple \U0001F469\u200d\u2764\ufe0f\u200d\U0001F468",
    "skin tones \U0001F44D\U0001F3FB \U0001F44D\U0001F3FD \U0001F44D\U0001F3FF "
    "\U0001F9D1\U0001F3FE\u200d\U0001F4BB",
    "flags \U0001F1EF\U0001F1F5\U0001F1FA\U0001F1F8 keycap 1\ufe0f\u20e3 #\ufe0f\u20e3",
    "\u2764\ufe0f\u2764\u263a\ufe0f",
    # combining marks and scripts
    "cafe\u0301 vs caf\u00e9, nai\u0308ve, A\u030a",
    "Z\u0324\u0354\u0367\u0311\u0343a\u0356\u032d\u0308\u0307l\u036e\u0312\u036bg\u030c"
    "\u0317\u035a\u031ao\u0319\u0314\u036e\u0307\u0350\u0307",
    "\u0928\u092e\u0938\u094d\u0924\u0947 \u0926\u0941\u0928\u093f\u092f\u093e",
    "\u0e2a\u0e27\u0e31\u0e2a\u0e14\u0e35\u0e0a\u0e32\u0e27\u0e42\u0e25\u0e01",
    "\u041f\u0440\u0438\u0432\u0435\u0442, \u043c\u0438\u0440! \u0393\u03b5\u03b9\u03ac "
    "\u03c3\u03bf\u03c5",
    # RTL
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd! (Hebrew) and \u0627\u0644\u0639\u0631"
    "\u0628\u064a\u0629 123",
    "\u200fRTL mark\u200e and LTR mark, \u202eoverride\u202c",
    # other symbols
    "\u20ac100 \u00a3200 \u00a5300 \u20b9400 \u00a9 \u00ae \u2122 \u00b0C",
    "\u2200x\u2208\u211d: x\u00b2 \u2265 0 \u2227 \u221a4 = 2 \u2192 \u221e",
    "\U0001D400\U0001D401 \U00010348 \U0001F0A1 ancient \U00013000",
    # special tokens embedded in text
    "Hello<|endoftext|>world",
    "<|endoftext|>",
    "<|endoftext|><|endoftext|> two in a row",
    "<|begin_of_text|>Start of text",
    "text then <|end_of_text|> and more",
    "a <|eot_id|> b<|eot_id|>c",
    "<|end_of_text|><|begin_of_text|>",
    "almost special: <|end_of_tex <|endoftext| <|begin_of_text",
    "<s>roberta</s> and <mask> and <pad>",
    "fill the <mask>.   <mask>   here",
    "[SW] alone, x[SW]y glued, a [SW]b, [SW]",
    "new line<nl>   after, and <nl>",
    "hello world and hello  world and say hello world!",
    # a long line
    " ".join(["repetition"] * 40),
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "Supercalifragilisticexpialidocious antidisestablishmentarianism",
]


def escape_line(s):
    out = s.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")
    return out


def unescape_line(s):
    out, i = [], 0
    while i < len(s):
        c = s[i]
        if c == "\\":
            nxt = s[i + 1]
            out.append({"n": "\n", "r": "\r", "t": "\t", "\\": "\\"}[nxt])
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


# --------------------------------------------------------------------------
# Training text: generated from a small grammar and a few scripts.

WORDS = ("the of and to in is was for on that with as by at from his her it be are this "
         "have not but had they you which one we all were there been their has would "
         "when who will more no if out so said what up its about into than them can "
         "only other new some could time these two may then do first any my now such "
         "like our over man me even most made after also did many before must through "
         "back years where much your way well down should because each just those "
         "people how too little state good very make world still own see men work long "
         "get here between both life being under never day same another know while last "
         "might us great old year off come since against go came right used take three "
         "hello number magic city river mountain token model attention noise signal "
         "transformer differential softmax retrieval needle haystack").split()
NAMES = "Alice Bob Carol Dave Eve Mallory Oscar Peggy Trent Victor Walter Paris Tokyo".split()
CONTRACTIONS = ["'s", "'t", "'re", "'ve", "'m", "'ll", "'d"]
SCRIPTS = [
    "\u4f60\u597d\u4e16\u754c\u8fd9\u662f\u4e00\u4e2a\u6d4b\u8bd5\u4e2d\u6587\u6587\u672c",
    "\u65e5\u672c\u8a9e\u306e\u30c6\u30ad\u30b9\u30c8\u3067\u3059",
    "\ud55c\uad6d\uc5b4\ud14d\uc2a4\ud2b8",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u0442\u0435\u043a\u0441\u0442",
    "\u0645\u0631\u062d\u0628\u0627 \u0628\u0627\u0644\u0639\u0627\u0644\u0645",
    "\u05e9\u05dc\u05d5\u05dd \u05e2\u05d5\u05dc\u05dd",
    "caf\u00e9 na\u00efve r\u00e9sum\u00e9 \u00fcber stra\u00dfe",
    "\U0001F600\U0001F680\U0001F44D\U0001F3FD\U0001F468\u200d\U0001F469\u200d\U0001F467",
]


def training_text(seed, n_lines):
    rng = random.Random(seed)
    lines = []
    for _ in range(n_lines):
        kind = rng.random()
        if kind < 0.6:
            n = rng.randint(4, 18)
            ws = []
            for _ in range(n):
                r = rng.random()
                if r < 0.08:
                    ws.append(rng.choice(NAMES))
                elif r < 0.14:
                    ws.append(str(rng.randint(0, 10 ** rng.randint(1, 7))))
                elif r < 0.2:
                    ws.append(rng.choice(WORDS) + rng.choice(CONTRACTIONS))
                else:
                    ws.append(rng.choice(WORDS))
            s = " ".join(ws)
            s = s[0].upper() + s[1:] + rng.choice([".", "!", "?", ",", ";", "..."])
        elif kind < 0.8:
            s = rng.choice(SCRIPTS)
        elif kind < 0.83:
            # U+180E (Mongolian vowel separator) is not White_Space, but PCRE2's
            # \s takes it: merges across " \u180e" make that difference show
            s = "%s \u180e%s" % (rng.choice(WORDS), rng.choice(WORDS))
        elif kind < 0.9:
            s = "def %s(%s):\n    return %s + %d\n" % (rng.choice(WORDS), rng.choice(WORDS),
                                                   rng.choice(WORDS), rng.randint(0, 999))
        else:
            s = "The magic number of %s is %d.\n\n" % (rng.choice(NAMES), rng.randint(0, 99999))
        lines.append(s)
    return lines


def train(pre_tok, vocab_size, specials, ignore_merges, seed):
    tok = Tokenizer(models.BPE(ignore_merges=ignore_merges))
    tok.pre_tokenizer = pre_tok
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=specials,
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(training_text(seed, 6000), tr)
    return tok


def build_gpt2():
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True), 1200,
                ["<|endoftext|>"], False, 1)
    tok.post_processor = processors.ByteLevel(trim_offsets=True)
    return tok


LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
                   "<|reserved_special_token_1|>", "<|eot_id|>"]


def build_llama3(ignore_merges=True):
    pre = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(LLAMA3_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False),
    ])
    tok = train(pre, 1500, [], ignore_merges, 2)
    # Like the real Llama-3 vocab, give it whole words that no merge sequence
    # builds, so that ignore_merges decides how they are encoded.
    j = json.loads(tok.to_str())
    for w in ["\u0120Supercalifragilisticexpialidocious", "\u0120antidisestablishmentarianism",
              "repetition"]:
        j["model"]["vocab"].setdefault(w, len(j["model"]["vocab"]))
    tok = Tokenizer.from_str(json.dumps(j))
    # Llama-3 puts its special tokens after the model vocab: add them as added tokens.
    tok.add_special_tokens(LLAMA3_SPECIALS)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single="<|begin_of_text|> $A",
                                      pair="<|begin_of_text|> $A <|begin_of_text|> $B:1",
                                      special_tokens=[("<|begin_of_text|>", bos)]),
    ])
    return tok


def build_flags():
    tok = train(pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True), 900,
                ["<s>", "<pad>", "</s>", "<unk>"], False, 3)
    tok.add_special_tokens([AddedToken("<mask>", lstrip=True, rstrip=False, special=True,
                                       normalized=False)])
    tok.add_tokens([
        AddedToken("[SW]", single_word=True, normalized=False),
        AddedToken("<nl>", rstrip=True, normalized=False),
        AddedToken(" world", normalized=True),
        AddedToken("hello world", normalized=True, lstrip=True),
    ])
    tok.post_processor = processors.RobertaProcessing(("</s>", tok.token_to_id("</s>")),
                                                      ("<s>", tok.token_to_id("<s>")),
                                                      trim_offsets=True, add_prefix_space=True)
    j = json.loads(tok.to_str())
    # the old serialisation of merges: "a b" strings
    j["model"]["merges"] = [a + " " + b for a, b in j["model"]["merges"]]
    return Tokenizer.from_str(json.dumps(j)), j


def text_field(s):
    """A decoded string for the JSON: as is, or {"hex": ...} when it holds a
    NUL, which the C side's JSON strings cannot carry."""
    return {"hex": s.encode("utf-8").hex()} if "\x00" in s else s


def build_bytes256():
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=256, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator(["x"], tr)
    assert tok.get_vocab_size() == 256 and not json.loads(tok.to_str())["model"]["merges"]
    return tok


def expected(tok, texts):
    cases = []
    for line, text in texts:
        ids = tok.encode(text).ids
        ids_plain = tok.encode(text, add_special_tokens=False).ids
        tok.encode_special_tokens = True  # transformers' split_special_tokens: special tokens read as text
        ids_split = tok.encode(text).ids
        tok.encode_special_tokens = False
        cases.append({
            "line": line,
            "text": text,
            "ids": ids,
            "ids_no_special": ids_plain,
            "ids_split_special": ids_split,
            "decode": text_field(tok.decode(ids, skip_special_tokens=False)),
            "decode_skip_special": text_field(tok.decode(ids, skip_special_tokens=True)),
        })
    return cases


def decode_cases(tok, seed):
    """Single ids (every id) and random id runs: decodes that cut UTF-8 apart."""
    rng = random.Random(seed)
    n = tok.get_vocab_size(with_added_tokens=True)
    out = []
    singles = [[i] for i in range(n)]
    runs = [[rng.randrange(n) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    for ids in singles + runs:
        out.append({"ids": ids,
                    "decode": text_field(tok.decode(ids, skip_special_tokens=False)),
                    "decode_skip_special": text_field(tok.decode(ids, skip_special_tokens=True))})
    return out


def dumps(obj):
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def write_json(path, obj):
    """Compact JSON; lists of cases get one case per line (readable diffs)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write("{\n")
        items = list(obj.items())
        for k, (key, val) in enumerate(items):
            f.write(dumps(key) + ":")
            if isinstance(val, list) and val and isinstance(val[0], dict):
                f.write("[\n" + ",\n".join(dumps(v) for v in val) + "\n]")
            else:
                f.write(dumps(val))
            f.write(",\n" if k + 1 < len(items) else "\n")
        f.write("}\n")


def main():
    ap = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    ap.add_argument("--out", default=os.path.join(here, "..", "tests", "tokenizer"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)

    for s in CORPUS:
        assert unescape_line(escape_line(s)) == s
        assert "\x00" not in s
    corpus_path = os.path.join(args.out, "corpus.txt")
    with open(corpus_path, "w", encoding="utf-8", newline="\n") as f:
        for s in CORPUS:
            f.write(escape_line(s) + "\n")
    with open(corpus_path, encoding="utf-8", newline="") as f:
        whole = f.read()
    texts = [(i + 1, s) for i, s in enumerate(CORPUS)] + [(0, whole)]  # line 0: the whole file

    gpt2 = build_gpt2()
    llama3 = build_llama3()
    flags, flags_json = build_flags()
    built = {"gpt2": (gpt2, json.loads(gpt2.to_str())),
             "llama3": (llama3, json.loads(llama3.to_str())),
             "flags": (flags, flags_json),
             "bytes256": (build_bytes256(), json.loads(build_bytes256().to_str()))}

    # The training must be deterministic, or the committed files could not be remade.
    assert build_gpt2().to_str() == gpt2.to_str(), "BPE training is not deterministic"
    # ignore_merges must matter on this corpus, or the test could not catch it
    no_ignore = build_llama3(ignore_merges=False)
    assert no_ignore.get_vocab() == llama3.get_vocab()
    differ = [i for i, s in texts if no_ignore.encode(s).ids != llama3.encode(s).ids]
    assert differ, "ignore_merges changes nothing on the corpus"
    print("ignore_merges changes lines %s" % differ[:10])

    for name, (tok, j) in built.items():
        # the C side reads this very file: check it loads back to the same thing
        again = Tokenizer.from_str(json.dumps(j))
        for _, s in texts:
            assert again.encode(s).ids == tok.encode(s).ids
        path = os.path.join(args.out, name + ".json")
        write_json(path, j)
        exp = {"tokenizer": name + ".json", "tokenizers_version": tokenizers.__version__,
               "cases": expected(tok, texts), "decode_cases": decode_cases(tok, 7)}
        write_json(os.path.join(args.out, "expected_" + name + ".json"), exp)
        print("%s: vocab %d, %d bytes" % (name, tok.get_vocab_size(), os.path.getsize(path)))


if __name__ == "__main__":
    main()
