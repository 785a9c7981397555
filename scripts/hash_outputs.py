#!/usr/bin/env python3
"""Hashes what diffrt computes on the bundled models, to show that a change
that should not change results (a file moved, a function split) did not.

    python3 scripts/hash_outputs.py BUILD_DIR [--out FILE]

For each model of models/ and each of ref and cpu: greedy and sampled
generation from a text prompt (`diffrt run`), a NIAH run with --attention
(`diffrt niah --json`, 5 samples per depth) and, once, `diffrt conform
--json` over the op cases and the models. Timings, paths and the host are
dropped from the JSON before hashing; every other value is kept. Prints
one "sha256  name" line per output and a total, so two runs diff line by
line. Uses the standard library only."""
import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROMPT = "The quick brown fox jumps over the lazy dog. Once upon a time"
# keys whose values change from run to run or machine to machine
DROP = {
    "seconds", "ms", "elapsed_s", "wall_s", "time_s", "tok_s", "tokens_per_s", "host", "hostname", "date",
    "started", "finished", "timestamp", "version", "commit", "git", "cpu", "cpu_model", "threads", "path",
    "model_dir", "json", "out", "device_name", "driver", "build", "diffrt", "started_at", "options", "duration",
}


def strip(v):
    if isinstance(v, dict):
        return {k: strip(x) for k, x in sorted(v.items())
                if k not in DROP and not k.endswith(("_s", "_ms", "_us"))
                and not (k == "model" and isinstance(x, str) and "/" in x)}  # the directory, not a name
    if isinstance(v, list):
        return [strip(x) for x in v]
    return v


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if p.returncode != 0:
        sys.exit("hash_outputs: %s exited %d:\n%s" % (" ".join(cmd), p.returncode, p.stderr.decode(errors="replace")))
    return p.stdout


def digest(b):
    return hashlib.sha256(b).hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("build", help="the build directory (holds the diffrt binary)")
    ap.add_argument("--out", help="also write the lines to this file")
    a = ap.parse_args()
    exe = os.path.join(a.build, "diffrt")
    if not os.access(exe, os.X_OK):
        sys.exit("hash_outputs: no diffrt binary in %s" % a.build)
    models = sorted(d for d in os.listdir(os.path.join(ROOT, "models"))
                    if os.path.isfile(os.path.join(ROOT, "models", d, "config.json")))
    lines = []
    env_threads = ["--threads", "2"]
    with tempfile.TemporaryDirectory() as tmp:
        for m in models:
            mdir = os.path.join(ROOT, "models", m)
            for be in ("ref", "cpu"):
                th = env_threads if be == "cpu" else []
                g = run([exe, "run", "--model", mdir, "--backend", be, "--prompt", PROMPT, "-n", "24"] + th)
                lines.append((digest(g), "%s/%s run greedy" % (m, be)))
                s = run([exe, "run", "--model", mdir, "--backend", be, "--prompt", PROMPT, "-n", "24", "--temp",
                         "0.8", "--top-k", "40", "--seed", "7"] + th)
                lines.append((digest(s), "%s/%s run sampled" % (m, be)))
                j = os.path.join(tmp, "niah_%s_%s.json" % (m, be))
                run([exe, "niah", "--model", mdir, "--backend", be, "--samples", "5", "--attention", "--json", j] + th)
                with open(j) as f:
                    lines.append((digest(json.dumps(strip(json.load(f)), sort_keys=True).encode()),
                                  "%s/%s niah json" % (m, be)))
        j = os.path.join(tmp, "conform.json")
        run([exe, "conform", "--backend", "ref,cpu", "--require", "cpu", "--models", os.path.join(ROOT, "models"),
             "--json", j])
        with open(j) as f:
            lines.append((digest(json.dumps(strip(json.load(f)), sort_keys=True).encode()), "conform json"))
    total = digest("".join(h for h, _ in lines).encode())
    text = "".join("%s  %s\n" % (h, n) for h, n in lines) + "%s  total\n" % total
    sys.stdout.write(text)
    if a.out:
        with open(a.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
