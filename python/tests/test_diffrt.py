"""Tests of the diffrt Python package against the library and the CLI.

    DIFFRT_LIBRARY=build/libdiffrt.so DIFFRT_CLI=build/diffrt \
        python3 python/tests/test_diffrt.py -v

Both variables are required: without them (or with paths that do not work)
every test fails; none is skipped. Uses the bundled models in models/.

The package pip installed (tests/install/wheel.sh), from a directory where
the checkout's python/ is not importable:

    DIFFRT_TEST_INSTALLED=1 /venv/bin/python /checkout/python/tests/test_diffrt.py -v

Then the package imported is the installed one, the library and the CLI are
those inside it (DIFFRT_LIBRARY and DIFFRT_CLI must not be set), and
TestInstalled checks that it is so.
"""

import json
import os
import re
import subprocess
import tempfile
import sys
import threading
import time
import unittest
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
INSTALLED = os.environ.get("DIFFRT_TEST_INSTALLED") == "1"
if not INSTALLED:
    sys.path.insert(0, os.path.join(ROOT, "python"))

import numpy as np  # noqa: E402

import diffrt  # noqa: E402

MODELS_DIR = os.path.join(ROOT, "models")
MODELS = ["diff-v1-tiny", "diff-v2-tiny", "transformer-tiny"]
PROMPT_FILE = os.path.join(MODELS_DIR, "diff-v1-tiny", "prompt.txt")
SHORT_PROMPT = "The cold doctor"
SAMPLED = dict(temperature=0.8, top_k=20, top_p=0.9, seed=7)

LIB = os.environ.get("DIFFRT_LIBRARY")
CLI = os.environ.get("DIFFRT_CLI")
if INSTALLED and not (LIB or CLI):
    from diffrt import _lib as _installed_lib

    LIB, CLI = _installed_lib.BUNDLED_LIBRARY, _installed_lib.BUNDLED_CLI


def setUpModule():
    problems = []
    if INSTALLED:
        for var in ("DIFFRT_LIBRARY", "DIFFRT_CLI", "DIFFRT_BACKEND_PATH"):
            if os.environ.get(var):
                problems.append(f"DIFFRT_TEST_INSTALLED=1 with {var} set (the installed package's own files are under test)")
        src = os.path.join(os.path.realpath(ROOT), "python") + os.sep
        if os.path.realpath(diffrt.__file__).startswith(src):
            problems.append(f"DIFFRT_TEST_INSTALLED=1 but diffrt was imported from the source tree ({diffrt.__file__})")
    if not LIB:
        problems.append("DIFFRT_LIBRARY is not set (the path of the libdiffrt.so under test)")
    elif not os.path.isfile(LIB):
        problems.append(f"DIFFRT_LIBRARY={LIB} is not a file")
    if not CLI:
        problems.append("DIFFRT_CLI is not set (the path of the diffrt executable)")
    elif not (os.path.isfile(CLI) and os.access(CLI, os.X_OK)):
        problems.append(f"DIFFRT_CLI={CLI} is not an executable file")
    for m in MODELS:
        if not os.path.isfile(os.path.join(MODELS_DIR, m, "model.safetensors")):
            problems.append(f"{MODELS_DIR}/{m}/model.safetensors is missing")
    if problems:
        raise RuntimeError("test_diffrt cannot run: " + "; ".join(problems))
    diffrt.version()  # loads the library, or fails with a one-line reason


def cli(*args, check=True):
    """Runs the diffrt executable; returns (returncode, stdout str, stderr str)."""
    p = subprocess.run([CLI, *map(str, args)], capture_output=True, timeout=60)
    out, err = p.stdout.decode("utf-8"), p.stderr.decode("utf-8", "replace")
    if check and p.returncode != 0:
        raise AssertionError(f"diffrt {' '.join(map(str, args))} exited {p.returncode}: {err.strip()}")
    return p.returncode, out, err


def cli_sampler_args(kw):
    out = []
    if "temperature" in kw:
        out += ["--temp", repr(kw["temperature"])]
    if "top_k" in kw:
        out += ["--top-k", kw["top_k"]]
    if "top_p" in kw:
        out += ["--top-p", repr(kw["top_p"])]
    if "seed" in kw:
        out += ["--seed", kw["seed"]]
    return out


def read_prompt():
    with open(PROMPT_FILE, "rb") as f:
        return f.read().decode("utf-8")


def model_path(name):
    return os.path.join(MODELS_DIR, name)


def nmse(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    return float(np.sum((a - b) ** 2) / max(np.sum(b**2), 1e-30))


class TestLibrary(unittest.TestCase):
    def test_loaded_from_env(self):
        self.assertEqual(os.path.realpath(diffrt.library_path()), os.path.realpath(LIB))

    def test_version_matches_cli(self):
        v = diffrt.version()
        self.assertIsInstance(v, str)
        self.assertTrue(v)
        _, out, _ = cli("--version")
        lines = out.splitlines()
        self.assertEqual(lines[0], f"diffrt {v} (commit {diffrt.git_commit()})")
        # then a line per backend: built in, its module, or why not
        bs = diffrt.backends()
        self.assertEqual(len(lines), 1 + len(bs), out)
        for b, line in zip(bs, lines[1:]):
            with self.subTest(backend=b.name):
                name, _, rest = line.strip().partition(" ")
                rest = rest.strip()
                self.assertEqual(name, b.name)
                if b.builtin:
                    self.assertTrue(rest.startswith("built in;"), line)
                elif b.module:
                    path = rest[len("module "):].split(";")[0]
                    self.assertEqual(os.path.realpath(path), os.path.realpath(b.module))
                elif not b.compiled_in:
                    self.assertEqual(rest, b.reason)
                if b.compiled_in:
                    self.assertTrue(rest.endswith(f"available, {b.device_count} device"
                                                  f"{'' if b.device_count == 1 else 's'}")
                                    if b.available else rest.endswith(f"unavailable: {b.reason}"), line)

    def test_backends_match_cli_info(self):
        bs = diffrt.backends()
        by_name = {b.name: b for b in bs}
        for name in ("cpu", "ref"):
            self.assertIn(name, by_name)
            b = by_name[name]
            self.assertTrue(b.compiled_in and b.available and b.builtin, b)
            self.assertIsNone(b.module)
            self.assertGreaterEqual(b.device_count, 1)
        for b in bs:
            self.assertIsInstance(b.name, str)
            self.assertEqual(len(b.devices), b.device_count if b.available else 0, b)
            if not b.available:
                self.assertTrue(b.reason, f"{b.name}: unavailable without a reason")
            for d in b.devices:
                self.assertTrue(d.name and d.description, d)
                self.assertIn(d.fp16, (None, False, True))
        # `diffrt info` lists the same backends, states and device names
        _, out, _ = cli("info")
        listed, current, props_lines = {}, None, 0
        yn = {None: "unknown", False: "no", True: "yes"}
        for line in out.splitlines():
            if line.startswith("settings"):  # the settings in force follow the backends
                break
            m = re.match(r"  (\w+)\s+(available, (\d+) device|unavailable: |)", line)
            d = re.match(r"\s+\[(\d+)\] (.*)$", line)
            p = re.match(r"\s+type (.*), memory (.*), subgroup (.*), fp16 (\w+), bf16 (\w+)$", line)
            if d and current:
                listed[current][2].append(d.group(2))
            elif p and current:  # the props line of the last device listed
                dev = by_name[current].devices[len(listed[current][2]) - 1]
                mem = f"{dev.memory_bytes / 1073741824.0:.1f} GiB" if dev.memory_bytes else "unknown"
                self.assertEqual(p.groups(), (dev.type or "unknown", mem, str(dev.subgroup_size or "unknown"),
                                              yn[dev.fp16], yn[dev.bf16]), line)
                props_lines += 1
            elif m:
                current = m.group(1)
                listed[current] = [
                    "available" if m.group(2).startswith("available") else
                    "unavailable" if m.group(2) else "not compiled",
                    int(m.group(3)) if m.group(3) else 0,
                    [],
                ]
        self.assertEqual(list(listed), [b.name for b in bs])
        for b in bs:
            state = "available" if b.available else "unavailable" if b.compiled_in else "not compiled"
            self.assertEqual(listed[b.name], [state, b.device_count if b.available else 0,
                                              [d.description for d in b.devices]], b.name)
        self.assertEqual(props_lines, sum(len(b.devices) for b in bs))

    def test_error_is_runtime_error_with_message(self):
        with self.assertRaises(diffrt.Error) as cm:
            diffrt.Model(os.path.join(MODELS_DIR, "no-such-model"))
        e = cm.exception
        self.assertIsInstance(e, RuntimeError)
        self.assertEqual(e.status, diffrt.Status.IO)
        self.assertEqual(e.status_name, "i/o error")
        self.assertIn("no-such-model", e.message)
        self.assertEqual(str(e), f"{e.status_name}: {e.message}")


class TestModel(unittest.TestCase):
    """Model info, sessions, logits, sampling and errors."""

    @classmethod
    def setUpClass(cls):
        cls.models = {m: diffrt.Model(model_path(m)) for m in MODELS}

    @classmethod
    def tearDownClass(cls):
        for m in cls.models.values():
            m.close()

    def test_observer(self):
        """Session.set_observer: every node with op, name, layer and a numpy
        copy of its output; the logits seen are the forward's; want picks
        nodes; an exception in the callback reaches the caller."""
        for name, m in self.models.items():
            for backend in ("ref", "cpu"):
                with self.subTest(model=name, backend=backend), diffrt.Session(m, backend=backend, ctx=64) as s:
                    ids = m.tokenizer.encode(SHORT_PROMPT)
                    seen = []
                    s.set_observer(seen.append)
                    logits = s.forward(ids)
                    names = [e.name for e in seen]
                    self.assertEqual(names[0], "embed")
                    self.assertEqual(names[-1], "lm_head")
                    q = seen[names.index("layers.1.attn.q_rope")]
                    self.assertEqual((q.op, q.layer, q.p0), ("ROPE", 1, 0))
                    self.assertEqual(q.output.data.shape[0], len(ids))
                    self.assertEqual(q.inputs[0].name, "layers.1.attn.q")
                    self.assertEqual(seen[-1].layer, -1)
                    np.testing.assert_array_equal(seen[-1].output.data.reshape(-1), logits)
                    hidden = {e.name: e.output.data for e in seen if e.name.endswith(".mlp_residual")}
                    self.assertEqual(len(hidden), m.info.n_layers)
                    # want: only the hidden states, the same values
                    some = []
                    s.set_observer(some.append, want=lambda op, nm, layer: nm.endswith(".mlp_residual"))
                    s.reset()
                    s.forward(ids)
                    self.assertEqual([e.name for e in some], list(hidden))
                    for e in some:
                        np.testing.assert_array_equal(e.output.data, hidden[e.name])
                    # decode: the KV_WRITE shows its one row
                    kv = []
                    s.set_observer(kv.append, want=lambda op, nm, layer: op == "KV_WRITE")
                    s.forward([3])
                    self.assertEqual(len(kv), 2 * m.info.n_layers)
                    self.assertTrue(all(e.output.shape[0] == 1 and e.p0 == len(ids) for e in kv))

                    def boom(node):
                        raise KeyError("from the observer")

                    s.set_observer(boom)
                    with self.assertRaises(KeyError):
                        s.forward([4])
                    s.set_observer(None)
                    s.forward([5])
                    self.assertEqual(s.pos, len(ids) + 3)

    def test_keep_attention(self):
        """Session.keep_attention: the probe gives what a re-run gives."""
        for name, m in self.models.items():
            for backend in ("ref", "cpu"):
                with self.subTest(model=name, backend=backend), diffrt.Session(m, backend=backend, ctx=64) as a, \
                        diffrt.Session(m, backend=backend, ctx=64) as b:
                    ids = m.tokenizer.encode(SHORT_PROMPT)
                    a.keep_attention(True)
                    a.forward(ids)
                    b.forward(ids)
                    np.testing.assert_array_equal(a.last_attention(), b.last_attention())
                    a.keep_attention(False)
                    a.forward([3])
                    b.forward([3])
                    np.testing.assert_array_equal(a.last_attention(), b.last_attention())

    def test_quantize_matches_cli(self):
        """diffrt.quantize writes the bytes diffrt quantize writes; its
        counts are the CLI's summary line's."""
        src = model_path("diff-v1-tiny")
        with tempfile.TemporaryDirectory() as tmp:
            for t in ("q8_0", "q4_0"):
                with self.subTest(type=t):
                    mine, theirs = os.path.join(tmp, "py-" + t), os.path.join(tmp, "cli-" + t)
                    os.mkdir(mine)
                    seen = []
                    r = diffrt.quantize(src, t, mine, progress=lambda *a: seen.append(a))
                    _, _, err = cli("quantize", "--model", src, "--type", t, "--out", theirs)
                    for f in ("model.safetensors", "config.json", "tokenizer.json"):
                        with open(os.path.join(mine, f), "rb") as x, open(os.path.join(theirs, f), "rb") as y:
                            self.assertEqual(x.read(), y.read(), f)
                    self.assertIn(f"quantize: {r.n_quantized} of {r.n_tensors} tensors to {t};", err)
                    self.assertEqual(len(seen), r.n_quantized)
                    self.assertTrue(0 < r.bytes_out < r.bytes_in)
                    with diffrt.Model(mine) as q:
                        self.assertEqual(q.info.weight_dtype, t)
            with self.assertRaises(diffrt.InvalidArgument):
                diffrt.quantize(src, "q5_1", tmp)
            with self.assertRaises(diffrt.Error) as e:  # not empty, and no force
                diffrt.quantize(src, "q8_0", os.path.join(tmp, "py-q8_0"))
            self.assertEqual(e.exception.status, diffrt.Status.INVALID_ARG)
            self.assertIn("already exists and is not empty", str(e.exception))

    def test_measure_peak(self):
        """diffrt.measure_peak on cpu, small and short: positive figures,
        the best probe named; an unknown backend raises."""
        p = diffrt.measure_peak("cpu", runs=1, min_sample_s=0.001, max_bytes=64 << 20, gemm_max=256,
                                min_run_s=0.001)
        self.assertEqual((p.device, p.runs), (0, 1))
        self.assertGreater(p.gbytes_per_s, 0)
        self.assertGreater(p.gflops, 0)
        self.assertEqual(p.gbytes_per_s, max(p.add_gbps, p.gemv_gbps, p.host_gbps))
        self.assertTrue(p.bw_probe and p.flops_probe)
        with self.assertRaises(diffrt.Error) as e:
            diffrt.measure_peak("nosuch")
        self.assertEqual(e.exception.status, diffrt.Status.INVALID_ARG)
        self.assertIn('unknown backend "nosuch"', str(e.exception))

    def test_info_matches_cli_and_config(self):
        for name, m in self.models.items():
            with self.subTest(model=name):
                I = m.info
                _, out, _ = cli("info", "--model", model_path(name))
                field = lambda key: re.search(rf"^  {key}\s+(.*)$", out, re.M).group(1)  # noqa: E731
                self.assertEqual(field("architecture"), I.arch)
                self.assertEqual(field("layout"), I.layout)
                self.assertEqual(field("parameters").split()[0], str(I.n_params))
                self.assertEqual(field("weight dtype"), I.weight_dtype)
                self.assertEqual(field("embedding dtype"), I.embed_dtype)
                self.assertEqual(field("vocab"), str(I.vocab))
                self.assertEqual(field("width D"), f"{I.dim} (ffn {I.ffn})")
                self.assertEqual(field("layers"), str(I.n_layers))
                if I.arch == "transformer":
                    self.assertEqual(field("heads"), f"{I.n_heads} (dk {I.dk}, dv {I.dv})")
                else:
                    self.assertEqual(field("diff-heads"),
                                     f"{I.n_heads} (dk {I.dk}, dv {I.dv}, keys per group {I.kv_m})")
                self.assertEqual(field("kv groups"), str(I.n_kv_groups))
                self.assertEqual(field("max positions"), f"{I.max_ctx}, rope scaling {I.rope_scaling}")
                self.assertEqual(field("tied embeddings"), "yes" if I.tied_embeddings else "no")
                if I.lambda_ is not None:
                    self.assertEqual(field("lambda"), " ".join(f"{x:.4f}" for x in I.lambda_))
                    self.assertEqual(field("lambda_init"), " ".join(f"{x:.4f}" for x in I.lambda_init))
                    self.assertEqual(len(I.lambda_), I.n_layers)
                else:
                    self.assertIsNone(I.lambda_init)
                with open(os.path.join(model_path(name), "config.json")) as f:
                    cfg = json.load(f)
                self.assertEqual(I.vocab, cfg["vocab_size"])
                self.assertEqual(I.max_ctx, cfg["max_position_embeddings"])
                self.assertEqual(I.bos_id, cfg.get("bos_token_id"))
                self.assertEqual(I.eos_id, cfg.get("eos_token_id"))
                eos = cfg.get("eos_token_id")
                self.assertEqual(I.eos_ids, () if eos is None else (eos,) if isinstance(eos, int) else tuple(eos))

    def test_logits(self):
        for name, m in self.models.items():
            with self.subTest(model=name):
                ids = m.tokenizer.encode(SHORT_PROMPT)
                V = m.info.vocab
                with diffrt.Session(m) as s:
                    self.assertEqual(s.pos, 0)
                    last = s.forward(ids)
                    self.assertIsInstance(last, np.ndarray)
                    self.assertEqual(last.dtype, np.float32)
                    self.assertEqual(last.shape, (V,))
                    self.assertTrue(np.all(np.isfinite(last)))
                    self.assertEqual(s.pos, len(ids))
                    step = s.forward([int(np.argmax(last))])
                    self.assertEqual(step.shape, (V,))
                    self.assertEqual(s.pos, len(ids) + 1)
                    s.reset()
                    self.assertEqual(s.pos, 0)
                    full = s.forward(ids, all_logits=True)
                    self.assertEqual(full.dtype, np.float32)
                    self.assertEqual(full.shape, (len(ids), V))
                    np.testing.assert_allclose(full[-1], last, rtol=1e-4, atol=1e-4)
                    s.reset()
                    buf = np.zeros(V, dtype=np.float32)
                    self.assertIs(s.forward(ids, out=buf), buf)
                    np.testing.assert_allclose(buf, last, rtol=1e-4, atol=1e-4)
                    with self.assertRaises(ValueError):
                        s.forward([5], out=np.zeros(V, dtype=np.float64))
                    # the greedy sampler picks the largest logit
                    with diffrt.Sampler(V) as smp:
                        self.assertEqual(smp.sample(last), int(np.argmax(last)))

    def test_ref_and_cpu_agree(self):
        for name, m in self.models.items():
            with self.subTest(model=name):
                ids = m.tokenizer.encode(read_prompt())[:64]
                got = {}
                for backend in ("ref", "cpu"):  # at the reference's KV cache type (cpu's default: f16)
                    with m.session(backend=backend, kv_type="f32") as s:
                        pre = s.forward(ids, all_logits=True)
                        dec = s.forward([int(np.argmax(pre[-1]))])
                        got[backend] = (pre, dec)
                for a, b in zip(got["cpu"], got["ref"]):
                    self.assertLessEqual(nmse(a, b), 1e-6)
                    np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)

    def test_session_outlives_model(self):
        m = diffrt.Model(model_path("diff-v1-tiny"))
        s = diffrt.Session(m, backend="ref", ctx=16)
        m.close()
        with self.assertRaises(ValueError):
            m.session()
        self.assertEqual(s.ctx, 16)
        self.assertEqual(s.forward([0, 5, 6]).shape, (m.info.vocab,))
        s.close()
        with self.assertRaises(ValueError):
            s.pos

    def test_sampler(self):
        V = 897
        rng = np.random.default_rng(1)
        logits = rng.standard_normal(V).astype(np.float32)
        draws = []
        for _ in range(2):
            with diffrt.Sampler(V, **SAMPLED) as smp:
                draws.append([smp.sample(logits) for _ in range(20)])
        self.assertEqual(draws[0], draws[1])
        self.assertTrue(all(0 <= t < V for t in draws[0]))
        self.assertGreater(len(set(draws[0])), 1)
        with diffrt.Sampler(V) as smp:
            self.assertEqual(smp.sample(logits.astype(np.float64)), int(np.argmax(logits)))
            bad = logits.copy()
            bad[3] = np.nan
            with self.assertRaises(diffrt.Error) as cm:
                smp.sample(bad)
            self.assertEqual(cm.exception.status, diffrt.Status.NUMERIC)
            self.assertIn("NaN", cm.exception.message)
            with self.assertRaises(ValueError):
                smp.sample(logits[:-1])
        for kw in (dict(temperature=-1.0), dict(top_p=0.0), dict(top_k=-1)):
            with self.subTest(**kw), self.assertRaises(diffrt.Error) as cm:
                diffrt.Sampler(V, **kw)
            self.assertEqual(cm.exception.status, diffrt.Status.INVALID_ARG)
            self.assertTrue(cm.exception.message)

    def test_errors(self):
        m = self.models["diff-v1-tiny"]
        with self.assertRaises(diffrt.Error) as cm:
            diffrt.Session(m, backend="no-such-backend")
        self.assertEqual(cm.exception.status, diffrt.Status.INVALID_ARG)
        self.assertIn("no-such-backend", cm.exception.message)
        with self.assertRaises(diffrt.Error) as cm:
            diffrt.Session(m, ctx=-1)
        self.assertTrue(cm.exception.message)
        with m.session(backend="ref", ctx=8) as s:
            for ids in ([m.info.vocab], [-1], []):
                with self.subTest(ids=ids), self.assertRaises(diffrt.Error) as cm:
                    s.forward(ids)
                self.assertEqual(cm.exception.status, diffrt.Status.INVALID_ARG)
                self.assertTrue(cm.exception.message)
            with self.assertRaises(diffrt.Error) as cm:
                s.forward(list(range(9)))  # past ctx 8
            self.assertIn("exceed", cm.exception.message)
            self.assertEqual(s.pos, 0)
        with self.assertRaises(diffrt.Error) as cm:
            diffrt.Tokenizer(os.path.join(MODELS_DIR, "no-such-model"))
        self.assertIn("no-such-model", cm.exception.message)
        with self.assertRaises(diffrt.Error) as cm:
            m.tokenizer.encode(b"bad \xff utf-8")
        self.assertEqual(cm.exception.status, diffrt.Status.INVALID_ARG)
        with self.assertRaises(diffrt.Error) as cm:
            diffrt.Tokenizer.from_json("{not json", name="broken.json")
        self.assertIn("broken.json", cm.exception.message)


class TestCallerMistakes(unittest.TestCase):
    """A caller's mistake is diffrt.InvalidArgument (a ValueError, status
    INVALID_ARG) in every class, found by Python or refused by C (every C
    DRT_ERR_INVALID_ARG: a plain diffrt.Error before)."""

    def test_invalid_argument(self):
        m = diffrt.Model(model_path("diff-v1-tiny"))
        tok = m.tokenizer
        s = m.session(backend="ref", ctx=8)
        V = m.info.vocab
        cases = [
            # (what, call, what the message says)
            ("Session forward past ctx (C)", lambda: s.forward(list(range(9))), "exceed"),
            ("Session forward no ids (C)", lambda: s.forward([]), ""),
            ("Session forward out of the wrong shape", lambda: s.forward([1], out=np.empty(3, np.float32)), "out must"),
            ("Session generate past ctx", lambda: s.generate([1] * 6, n=4), "exceeds the session's context"),
            ("Session unknown backend (C)", lambda: m.session(backend="no-such-backend"), "no-such-backend"),
            ("Session unknown setting (C)", lambda: m.session(settings={"no.such": 1}), "unknown setting"),
            ("Model generate n -1", lambda: m.generate([1], n=-1), "n wants"),
            ("Model generate past ctx", lambda: m.generate([1] * 6, n=4, ctx=8), "exceeds ctx 8"),
            ("Model generate no ids", lambda: m.generate([], n=1), "no tokens"),
            ("Sampler temperature -1 (C)", lambda: diffrt.Sampler(V, temperature=-1.0), "temperature"),
            ("Sampler top_p 0 (C)", lambda: diffrt.Sampler(V, top_p=0.0), "top_p"),
            ("Sampler logits of the wrong shape", lambda: diffrt.Sampler(V).sample(np.zeros(3)), "shape"),
            ("Tokenizer encode bad UTF-8 (C)", lambda: tok.encode(b"bad \xff utf-8"), "UTF-8"),
            ("Tokenizer encode past max_tokens (C)", lambda: tok.encode(read_prompt(), max_tokens=4), "4 tokens"),
            ("Tokenizer decode 2-D ids", lambda: tok.decode(np.zeros((2, 2), dtype=np.int32)), "1-D"),
        ]
        try:
            for what, call, says in cases:
                with self.subTest(what):
                    with self.assertRaises(diffrt.InvalidArgument) as cm:
                        call()
                    self.assertIsInstance(cm.exception, ValueError)
                    self.assertEqual(cm.exception.status, diffrt.Status.INVALID_ARG)
                    self.assertIn(says, str(cm.exception))
            self.assertEqual(s.pos, 0)
        finally:
            s.close()
            m.close()
        # not a caller's mistake: still a plain diffrt.Error
        with self.assertRaises(diffrt.Error) as cm:
            diffrt.Model(os.path.join(MODELS_DIR, "no-such-model"))
        self.assertNotIsInstance(cm.exception, ValueError)
        self.assertEqual(cm.exception.status, diffrt.Status.IO)


FIXTURES_DIR = os.path.join(ROOT, "tests", "fixtures")


def tree_sig(path):
    """Every entry under path (symlinks not followed): its type, link target
    and bytes; None when path is missing."""
    if not os.path.lexists(path):
        return None
    out = []
    for top, dirs, files in os.walk(path):
        for n in sorted(dirs + files):
            p = os.path.join(top, n)
            if os.path.islink(p):
                out.append((p, "link", os.readlink(p)))
            elif os.path.isfile(p):
                with open(p, "rb") as f:
                    out.append((p, "file", f.read()))
            else:
                out.append((p, "dir", None))
    return sorted(out)


def temps_beside(path):
    """Entries beside path named ".<its name>." something: temps left behind."""
    parent, base = os.path.split(os.path.normpath(path))
    return [n for n in os.listdir(parent or ".") if n.startswith("." + base + ".")]


class TestQuantize(unittest.TestCase):
    """diffrt.quantize (drt_quantize_model): every fixture family quantizes
    and computes like its source within the quantization bound; the output
    directory is written whole or not at all, never over the source."""

    BOUND = {"q8_0": 3e-3, "q4_0": 0.25}  # prefill logits NMSE (test_quantize_lib.c: QBOUND)

    def setUp(self):
        self._tmp = tempfile.TemporaryDirectory()
        self.tmp = self._tmp.name
        self.src = os.path.join(self.tmp, "src")
        subprocess.run(["cp", "-r", os.path.join(FIXTURES_DIR, "hf_llama_gqa"), self.src], check=True)

    def tearDown(self):
        self._tmp.cleanup()

    @staticmethod
    def prefill(path, ids):
        with diffrt.Model(path) as m, m.session(backend="ref", kv_type="f32") as s:
            return m.info, s.forward(ids, all_logits=True)

    def test_every_fixture_family(self):
        """Each fixture directory (every layout the loader takes, diff-mlx's
        latest.safetensors with optimizer state, a tied model storing its
        lm_head copy): the result loads, its weights are the type asked for,
        its parameter count is the source's (nothing skipped is written),
        its logits are within BOUND of the source's."""
        names = sorted(n for n in os.listdir(FIXTURES_DIR) if os.path.isfile(os.path.join(FIXTURES_DIR, n, "config.json")))
        self.assertGreaterEqual(len(names), 20)
        ids = [3 + (t * 37 + 11) % 253 for t in range(12)]
        for name in names:
            src = os.path.join(FIXTURES_DIR, name)
            info, ref = self.prefill(src, ids)
            for t in ("q8_0", "q4_0"):
                with self.subTest(fixture=name, type=t):
                    out = os.path.join(self.tmp, f"{name}-{t}")
                    r = diffrt.quantize(src, t, out)
                    self.assertTrue(0 < r.n_quantized < r.n_tensors)
                    qinfo, got = self.prefill(out, ids)
                    self.assertEqual(qinfo.weight_dtype, t)
                    self.assertEqual(qinfo.n_params, info.n_params)
                    self.assertLessEqual(nmse(got, ref), self.BOUND[t])
                    self.assertEqual(temps_beside(out), [])

    def refused(self, out, say, watch, force=False, src=None, error=diffrt.Status.INVALID_ARG):
        src = src or self.src
        before, src_before = tree_sig(watch), tree_sig(src)
        with self.assertRaises(diffrt.Error) as e:
            diffrt.quantize(src, "q8_0", out, force=force)
        self.assertEqual(e.exception.status, error, str(e.exception))
        self.assertIn(say, str(e.exception))
        self.assertEqual(tree_sig(watch), before, f"{watch} changed")
        self.assertEqual(tree_sig(src), src_before, "the source changed")
        self.assertEqual(temps_beside(watch), [])

    def test_refusals_change_nothing(self):
        """A non-empty out_dir, out_dir = the source however spelled (with
        force too), a symlinked out_dir, an out_dir holding a file the
        source is read from: refused, everything byte-identical."""
        notes = os.path.join(self.tmp, "notes")
        os.mkdir(notes)
        with open(os.path.join(notes, "notes.txt"), "w") as f:
            f.write("keep me\n")
        self.refused(notes, "already exists and is not empty", notes)
        os.symlink("src", os.path.join(self.tmp, "srclink"))
        cwd = os.getcwd()
        os.chdir(self.tmp)
        try:
            for out, say in [(self.src, "is the model directory itself"),
                             (self.src + "/", "is the model directory itself"),
                             (self.src + "/.", "is the model directory itself"),
                             (os.path.join(self.src, "..", "src"), "is the model directory itself"),
                             ("./src", "is the model directory itself"),
                             ("srclink", "is a symbolic link"),
                             (self.tmp, "contains the model directory")]:
                for force in (False, True):
                    with self.subTest(out=out, force=force):
                        self.refused(out, say, self.src, force=force)
        finally:
            os.chdir(cwd)
        empty, link = os.path.join(self.tmp, "empty"), os.path.join(self.tmp, "link")
        os.mkdir(empty)
        os.symlink("empty", link)
        self.refused(link, "is a symbolic link", empty, force=True)
        self.assertTrue(os.path.islink(link))
        # the source's model.safetensors a symlink into out_dir
        held, src3 = os.path.join(self.tmp, "held"), os.path.join(self.tmp, "src3")
        subprocess.run(["cp", "-r", self.src, held], check=True)
        os.mkdir(src3)
        subprocess.run(["cp", os.path.join(self.src, "config.json"), src3], check=True)
        os.symlink(os.path.join("..", "held", "model.safetensors"), os.path.join(src3, "model.safetensors"))
        self.refused(held, "holds the input", held, force=True, src=src3)

    def test_failure_leaves_out_dir_as_it_was(self):
        """A NaN weight, found while quantizing: out_dir (missing, or a
        previous output with force) as it was, no temp beside it."""
        prev = os.path.join(self.tmp, "prev")
        diffrt.quantize(self.src, "q4_0", prev)
        f = os.path.join(self.src, "model.safetensors")
        with open(f, "r+b") as fh:
            n = int.from_bytes(fh.read(8), "little")
            header = json.loads(fh.read(n))
            e = header["model.layers.1.mlp.down_proj.weight"]
            self.assertEqual(e["dtype"], "F32")
            fh.seek(8 + n + e["data_offsets"][0])
            fh.write(np.array([np.nan], dtype=np.float32).tobytes())
        self.refused(prev, "non-finite value", prev, force=True, error=diffrt.Status.FORMAT)
        self.refused(os.path.join(self.tmp, "absent"), "non-finite value", os.path.join(self.tmp, "absent"),
                     error=diffrt.Status.FORMAT)

    def test_force_replaces_whole(self):
        """force=True over a full out_dir, or one holding a hard link of the
        source's weights: only the new model is left, the source's bytes
        stay; a killed run's temp is removed, with a note."""
        whole = os.path.join(self.tmp, "whole")
        os.mkdir(whole)
        for n in ("stale.txt", "tokenizer.json"):
            with open(os.path.join(whole, n), "w") as f:
                f.write("{}\n")
        os.link(os.path.join(self.src, "model.safetensors"), os.path.join(whole, "model.safetensors"))
        stale = os.path.join(self.tmp, ".whole.tmp.Ab12Cd")
        os.mkdir(stale)
        os.utime(stale, (1e9, 1e9))
        before, notes = tree_sig(self.src), []
        with self.assertRaises(diffrt.Error):
            diffrt.quantize(self.src, "q8_0", whole)  # not empty, no force
        diffrt.quantize(self.src, "q8_0", whole, force=True, note=notes.append)
        self.assertEqual(sorted(os.listdir(whole)), ["config.json", "model.safetensors"])
        self.assertEqual(tree_sig(self.src), before)
        self.assertEqual(temps_beside(whole), [])
        self.assertTrue(any(stale in n and "left by a run that did not finish" in n for n in notes), notes)
        with diffrt.Model(whole) as q:
            self.assertEqual(q.info.weight_dtype, "q8_0")


class TestBatchSession(unittest.TestCase):
    """BatchSession: rows of several sequences in one forward give what a
    Session gives each sequence (bit for bit on ref), and every rule of a
    batch is an InvalidArgument naming the row."""

    def test_rows_match_single_sequences(self):
        for name in MODELS:
            with diffrt.Model(os.path.join(MODELS_DIR, name)) as m:
                V = m.info.vocab
                seqs = {0: [(7 * i + 3) % V for i in range(9)], 2: [(5 * i + 1) % V for i in range(4)]}
                for be in ("ref", "cpu"):
                    with m.batch_session(max_seqs=3, ctx_per_seq=32, backend=be) as b, \
                            m.session(backend=be, ctx=32) as s:
                        # sequence 2's 4 tokens, then 6 of sequence 0: every row's logits
                        toks = seqs[2] + seqs[0][:6]
                        rows = [2] * 4 + [0] * 6
                        got = b.forward(toks, rows, logits=[1] * 10)
                        # then a decode row of each, and sequence 0's last 3 in one chunk
                        got2 = b.forward([seqs[2][0], *seqs[0][6:9]], [2, 0, 0, 0], logits=[1, 0, 0, 1])
                        self.assertEqual((b.seq_len(0), b.seq_len(1), b.seq_len(2)), (9, 0, 5))
                        want = []
                        for k, seq in ((2, seqs[2]), (0, seqs[0][:6])):
                            for t in range(len(seq)):
                                s.reset()
                                want.append(s.forward(seq[:t + 1]))
                        for k, seq in ((2, seqs[2] + [seqs[2][0]]), (0, seqs[0])):
                            s.reset()
                            want.append(s.forward(seq))
                        want = np.stack(want)
                        have = np.concatenate([got, got2])
                        if be == "ref":
                            self.assertTrue(np.array_equal(have, want), f"{name}/ref: not bit-identical")
                        else:
                            nmse = float(((have - want) ** 2).sum() / (want ** 2).sum())
                            self.assertLess(nmse, 1e-6, f"{name}/{be}: NMSE {nmse}")
                        # cut back and rewritten: as a session fed the new prefix
                        b.truncate(0, 4)
                        got3 = b.forward([11, 12], [0, 0])
                        s.reset()
                        w3 = s.forward(seqs[0][:4] + [11, 12])
                        self.assertLess(float(np.abs(got3[0] - w3).max()), 1e-3 if be != "ref" else 1e-30)

    def test_rules(self):
        """Every rule of python/diffrt/README.md's BatchSession raises
        diffrt.InvalidArgument (a ValueError, status INVALID_ARG) naming what
        broke it, whether Python or C found it, and changes nothing (C's
        refusals were a plain diffrt.Error)."""
        with diffrt.Model(os.path.join(MODELS_DIR, "diff-v1-tiny")) as m:
            with m.batch_session(max_seqs=2, ctx_per_seq=8, max_batch_rows=4, backend="ref") as b:
                self.assertEqual((b.max_seqs, b.ctx_per_seq, b.max_batch_rows), (2, 8, 4))
                V = m.info.vocab
                cases = [
                    # (rule, call, what the message says)
                    ("slot past max_seqs", lambda: b.forward([1, 2], [0, 2]), "sequence 2 is not a slot"),
                    ("slot -1", lambda: b.forward([1], [-1]), "sequence -1 is not a slot"),
                    ("rows contiguous", lambda: b.forward([1, 2, 3], [0, 1, 0]), "contiguous"),
                    ("rows past max_batch_rows", lambda: b.forward([1] * 5, [0] * 5), "5 rows"),
                    ("no rows", lambda: b.forward([], []), "0 rows"),
                    ("token past the vocabulary", lambda: b.forward([V], [0]), "outside the vocabulary"),
                    ("token -1", lambda: b.forward([-1], [0]), "outside the vocabulary"),
                    ("a seq a row", lambda: b.forward([1, 2], [0]), "one sequence a row"),
                    ("a logits flag a row", lambda: b.forward([1, 2], [0, 0], [1]), "logits flags"),
                    ("a position a row", lambda: b.forward([1, 2], [0, 0], None, [0]), "positions"),
                    ("positions continue the sequence", lambda: b.forward([1], [0], None, [3]), "continue at 0"),
                    ("positions in order", lambda: b.forward([1, 2], [0, 0], None, [1, 0]), "continue at 0"),
                    ("ids 1-D", lambda: b.forward(np.zeros((1, 1), dtype=np.int32), [0]), "1-D"),
                    ("truncate past the length", lambda: b.truncate(0, 1), "cut to 0 .. 0, not 1"),
                    ("truncate to -1", lambda: b.truncate(0, -1), "not -1"),
                    ("truncate slot past max_seqs", lambda: b.truncate(2), "sequence 2 is not a slot"),
                    ("seq_len slot past max_seqs", lambda: b.seq_len(2), "seq wants an integer in [0, 1]"),
                    ("seq_len slot -1", lambda: b.seq_len(-1), "seq wants an integer in [0, 1]"),
                ]
                for rule, call, says in cases:
                    with self.subTest(rule):
                        with self.assertRaises(diffrt.InvalidArgument) as cm:
                            call()
                        self.assertIsInstance(cm.exception, ValueError)
                        self.assertEqual(cm.exception.status, diffrt.Status.INVALID_ARG)
                        self.assertIn(says, str(cm.exception))
                        self.assertEqual((b.seq_len(0), b.seq_len(1)), (0, 0), "a refused batch changed a sequence")
                b.forward([1, 2, 3, 4], [0] * 4)
                b.forward([1, 2, 3, 4], [0] * 4)
                with self.assertRaises(diffrt.InvalidArgument) as cm:
                    b.forward([1], [0])
                self.assertIn("past its context of 8", str(cm.exception))
                self.assertEqual(b.seq_len(0), 8)
                with self.assertRaises(diffrt.InvalidArgument):
                    b.truncate(0, 9)
                b.truncate(0, 0)
                self.assertEqual(b.seq_len(0), 0)


class TestTokenizer(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tok = diffrt.Tokenizer(model_path("diff-v1-tiny"))

    @classmethod
    def tearDownClass(cls):
        cls.tok.close()

    def test_properties(self):
        t = self.tok
        self.assertEqual(t.vocab_size, 897)
        self.assertEqual(len(t), t.vocab_size)
        with open(os.path.join(model_path("diff-v1-tiny"), "config.json")) as f:
            cfg = json.load(f)
        self.assertEqual(t.bos_id, cfg["bos_token_id"])
        self.assertEqual(t.encode("x")[0], t.bos_id)
        self.assertNotEqual(t.encode("x", add_special=False)[:1], [t.bos_id])
        self.assertTrue(t.is_special(t.bos_id))
        self.assertEqual(t.token_to_id(t.id_to_token(t.bos_id)), t.bos_id)
        with self.assertRaises(ValueError):
            t.id_to_token(10**6)
        self.assertIsNone(t.token_to_id("no such token \u2603"))
        eos = t.eos_id
        self.assertTrue(eos is None or t.is_special(eos))

    def test_round_trip(self):
        t = self.tok
        for text in (read_prompt(), "na\u00efve caf\u00e9 \u2014 \u65e5\u672c\u8a9e \U0001f642 ok", ""):
            with self.subTest(text=text[:20]):
                ids = t.encode(text, add_special=False)
                self.assertTrue(all(isinstance(i, int) for i in ids))
                self.assertEqual(t.decode(ids), text)
                self.assertEqual(t.decode(t.encode(text), skip_special=True), text)
                self.assertEqual(t.decode(np.array(ids, dtype=np.int64)), text)
        with open(os.path.join(model_path("diff-v1-tiny"), "tokenizer.json"), "rb") as f:
            mem = diffrt.Tokenizer.from_json(f.read())
        self.assertEqual(mem.encode(read_prompt()), t.encode(read_prompt()))

    def test_stream_equals_decode(self):
        t = self.tok
        rng = np.random.default_rng(3)
        seqs = {
            "prompt": t.encode(read_prompt()),
            "multibyte": t.encode("\u65e5\u672c\u8a9e \U0001f642\U0001f642 caf\u00e9 \u2014 end"),
            "random": [int(x) for x in rng.integers(0, t.vocab_size, 300)],
            "high ids": [int(x) for x in rng.integers(t.vocab_size - 200, t.vocab_size, 200)],
            "with specials": [t.bos_id] + t.encode("a b", add_special=False) + [t.bos_id],
            "empty": [],
        }
        for name, ids in seqs.items():
            for skip in (False, True):
                with self.subTest(seq=name, skip_special=skip):
                    with t.stream(skip_special=skip) as st:
                        pieces = [st.push(i) for i in ids]
                        pieces.append(st.flush())
                    self.assertTrue(all(isinstance(p, str) for p in pieces))
                    self.assertEqual("".join(pieces), t.decode(ids, skip_special=skip))
        # a character split across tokens comes out whole, with its last byte
        ids = t.encode("\U0001f642", add_special=False)
        if len(ids) > 1:
            with t.stream() as st:
                self.assertEqual([st.push(i) for i in ids][-1], "\U0001f642")

    def test_ids_outside_the_vocabulary_raise(self):
        """An id outside [0, vocab_size) is a ValueError naming it and the
        vocabulary (decode, id_to_token and push returned "" or None)."""
        t = self.tok
        V = t.vocab_size
        for bad in (V, V + 1, 10**6, -1, -2**31):
            calls = (
                ("decode", lambda: t.decode([5, bad, 6])),
                ("decode int64 array", lambda: t.decode(np.array([bad], dtype=np.int64))),
                ("id_to_token", lambda: t.id_to_token(bad)),
                ("is_special", lambda: t.is_special(bad)),
                ("stream push", lambda: t.stream().push(bad)),
            )
            for what, call in calls:
                with self.subTest(what, id=bad):
                    with self.assertRaises(ValueError) as cm:
                        call()
                    self.assertIsInstance(cm.exception, diffrt.InvalidArgument)
                    self.assertIn(f"token id {bad}", str(cm.exception))
                    self.assertIn(f"vocabulary [0, {V})", str(cm.exception))
        # a refused push leaves the stream as it was
        ids = t.encode("caf\u00e9 \U0001f642 ok", add_special=False)
        with t.stream() as st:
            pieces = [st.push(ids[0])]
            with self.assertRaises(ValueError):
                st.push(V)
            pieces += [st.push(i) for i in ids[1:]] + [st.flush()]
        self.assertEqual("".join(pieces), t.decode(ids))


class TestGenerateMatchesCli(unittest.TestCase):
    """Model.generate reproduces `diffrt run` token for token and byte for byte."""

    # (label, prompt: "file" or text, n, Python kwargs, extra CLI args)
    CASES = [
        ("file greedy", "file", 9, {}, []),
        ("file sampled", "file", 9, SAMPLED, []),
        ("file no-stop", "file", 9, dict(stop=False), ["--no-stop"]),  # eos mid-text
        ("file ctx 200", "file", 12, dict(ctx=200), ["--ctx", 200]),
        ("short greedy", SHORT_PROMPT, 40, {}, []),
        ("short sampled", SHORT_PROMPT, 40, SAMPLED, []),
        ("short no-stop", SHORT_PROMPT, 40, dict(stop=False), ["--no-stop"]),
        ("short sampled no-stop", SHORT_PROMPT, 30, dict(SAMPLED, stop=False), ["--no-stop"]),
        ("short ref backend", SHORT_PROMPT, 12, dict(backend="ref"), ["--backend", "ref"]),
        ("default n", SHORT_PROMPT, None, {}, []),
        # the README's main command: 183 prompt tokens, context 192, default -n
        # (16 would not fit: it generates up to the 9 that do)
        ("file default n", "file", None, {}, []),
    ]

    def run_case(self, m, name, label, prompt, n, kw, extra):
        text = read_prompt() if prompt == "file" else prompt
        n_args = {} if n is None else {"n": n}
        n_cli = [] if n is None else ["-n", n]
        sampler_cli = cli_sampler_args(kw)
        pieces = []
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            g = m.generate(text, on_text=pieces.append, **n_args, **kw)
        past = kw.get("ctx", 0) > m.info.max_ctx
        self.assertEqual(any(issubclass(w.category, RuntimeWarning) for w in caught), past)
        self.assertLessEqual(len(g.ids), 16 if n is None else n)
        self.assertEqual(g.prompt_ids, m.tokenizer.encode(text))
        self.assertEqual("".join(pieces), g.text)
        self.assertEqual(g.stopped, bool(g.ids) and g.ids[-1] == m.info.eos_id and kw.get("stop", True))
        if not kw.get("stop", True):
            self.assertEqual(len(g.ids), 16 if n is None else n)

        # ids: `diffrt run --tokens <Python's prompt ids>`
        _, out, _ = cli("run", "--model", model_path(name), "--tokens", ",".join(map(str, g.prompt_ids)),
                        *n_cli, *sampler_cli, *extra)
        self.assertTrue(out.endswith("\n"), repr(out))
        cli_ids = [int(x) for x in out.strip().split(",")] if out.strip() else []
        self.assertEqual(g.ids, cli_ids)
        # the same through Python's ids path
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # ctx past max positions, seen above
            gi = m.generate(g.prompt_ids, **n_args, **kw)
        self.assertEqual(gi.ids, cli_ids)
        self.assertIsNone(gi.text)

        # text: `diffrt run --prompt-file F` / `--prompt TEXT`
        src = ["--prompt-file", PROMPT_FILE] if prompt == "file" else ["--prompt", text]
        _, out, _ = cli("run", "--model", model_path(name), *src, *n_cli, *sampler_cli, *extra)
        want = g.text + ("\n" if g.text and not g.text.endswith("\n") else "")
        self.assertEqual(out, want)
        # and the text is the decode of the ids, eos and special tokens left out
        ids = g.ids[:-1] if g.stopped else g.ids
        self.assertEqual(g.text, m.tokenizer.decode(ids, skip_special=True))
        return g

    def test_generate_matches_cli(self):
        stopped = 0
        for name in MODELS:
            with diffrt.Model(model_path(name)) as m:
                for label, prompt, n, kw, extra in self.CASES:
                    with self.subTest(model=name, case=label):
                        g = self.run_case(m, name, label, prompt, n, kw, extra)
                        stopped += g.stopped
        self.assertGreater(stopped, 0, "no case stopped at eos: the eos path went untested")

    def test_every_eos_stops(self):
        """Every eos id stops generation (Llama 3 lists three), from
        config.json's list or generation_config.json's, in Python as in
        `diffrt run`; failed before when only info.eos_id stopped."""
        src = model_path("transformer-tiny")
        with open(os.path.join(src, "config.json")) as f:
            cfg = json.load(f)
        prompt = [5, 6, 7]
        with tempfile.TemporaryDirectory() as tmp:
            for f in ("model.safetensors", "tokenizer.json"):
                os.symlink(os.path.join(src, f), os.path.join(tmp, f))

            def write(config, gen=None):
                with open(os.path.join(tmp, "config.json"), "w") as f:
                    json.dump(config, f)
                gpath = os.path.join(tmp, "generation_config.json")
                if gen is None:
                    if os.path.exists(gpath):
                        os.unlink(gpath)
                else:
                    with open(gpath, "w") as f:
                        json.dump(gen, f)

            write({k: v for k, v in cfg.items() if k != "eos_token_id"})
            with diffrt.Model(tmp) as m:
                self.assertEqual(m.info.eos_ids, ())
                path = m.generate(prompt, n=12).ids
            self.assertEqual(len(path), 12)
            j = next(i for i in range(1, 12) if path[i] not in path[:i])
            x = next(i for i in range(3, m.info.vocab) if i not in path)
            for where in ("config.json", "generation_config.json"):
                with self.subTest(where=where):
                    if where == "config.json":
                        write(dict(cfg, eos_token_id=[x, path[j]]))
                    else:
                        write(dict(cfg, eos_token_id=x), {"eos_token_id": [x, path[j]]})
                    with diffrt.Model(tmp) as m:
                        self.assertEqual(m.info.eos_ids, (x, path[j]))
                        g = m.generate(prompt, n=12)
                        self.assertEqual(g.ids, path[:j + 1])
                        self.assertTrue(g.stopped)
                        self.assertEqual(m.generate(prompt, n=12, stop=False).ids, path)
                        with m.session() as s:
                            self.assertEqual(s.generate(prompt, n=12).ids, path[:j + 1])
                    _, out, _ = cli("run", "--model", tmp, "--tokens", ",".join(map(str, prompt)), "-n", 12)
                    self.assertEqual(out, ",".join(map(str, path[:j + 1])) + "\n")

    def test_session_generate(self):
        with diffrt.Model(model_path("diff-v2-tiny")) as m:
            g = m.generate(SHORT_PROMPT, n=20, **SAMPLED)
            with m.session() as s:
                self.assertEqual(s.generate(SHORT_PROMPT, n=20, **SAMPLED), g)
                # like the CLI, the last token is sampled but never run
                self.assertEqual(s.pos, len(g.prompt_ids) + len(g.ids) - 1)
                s.reset()
                self.assertEqual(s.generate(SHORT_PROMPT, n=20, **SAMPLED), g)
                s.reset()
                self.assertEqual(s.generate(SHORT_PROMPT, n=0).ids, [])
                self.assertEqual(s.pos, len(g.prompt_ids))  # the prompt is prefilled even so

    def test_context_rule(self):
        name = "diff-v1-tiny"
        with diffrt.Model(model_path(name)) as m:
            T = len(m.tokenizer.encode(read_prompt()))
            n = m.info.max_ctx - T + 1  # one past what fits
            with self.assertRaises(diffrt.Error) as cm:
                m.generate(read_prompt(), n=n)
            self.assertEqual(cm.exception.status, diffrt.Status.INVALID_ARG)
            self.assertIn("exceeds the context", cm.exception.message)
            rc, out, err = cli("run", "--model", model_path(name), "--prompt-file", PROMPT_FILE, "-n", n,
                               check=False)
            self.assertEqual((rc, out), (2, ""))
            self.assertIn("exceeds the context", err)
            # it fits exactly
            self.assertLessEqual(len(m.generate(read_prompt(), n=n - 1, stop=False).ids), n - 1)
            with self.assertRaises(diffrt.Error):
                m.generate(read_prompt(), n=4, ctx=T + 3)
            with self.assertRaises(diffrt.Error):
                m.generate("", n=4) if m.tokenizer.bos_id is None else m.generate([], n=4)

    def test_prompt_past_context_stops_while_encoding(self):
        name = "diff-v1-tiny"
        with diffrt.Model(model_path(name)) as m:
            tok = m.tokenizer
            T = len(tok.encode(read_prompt()))
            self.assertEqual(tok.encode(read_prompt(), max_tokens=T), tok.encode(read_prompt()))
            with self.assertRaises(diffrt.Error) as cm:
                tok.encode(read_prompt(), max_tokens=T - 1)
            self.assertEqual(cm.exception.status, diffrt.Status.INVALID_ARG)
            self.assertIn(f"more than {T - 1} tokens", cm.exception.message)
            # far past the context: refused before or while encoding, as the CLI does
            huge = read_prompt() * 200
            with self.assertRaises(diffrt.Error) as cm:
                m.generate(huge, n=1)
            self.assertIn(f"cannot fit in {m.info.max_ctx} tokens", cm.exception.message)
            with m.session(ctx=T + 4) as s:
                with self.assertRaises(diffrt.Error) as cm:
                    s.generate(huge, n=1)
                self.assertIn(f"cannot fit in {T + 4} tokens", cm.exception.message)
                self.assertEqual(s.pos, 0)
            with tempfile.NamedTemporaryFile("w", suffix=".txt") as f:
                f.write(huge)
                f.flush()
                rc, out, err = cli("run", "--model", model_path(name), "--prompt-file", f.name, "-n", 1,
                                   check=False)
            self.assertEqual((rc, out), (2, ""))
            self.assertIn(f"the prompt must fit the context of {m.info.max_ctx} tokens", err)


class _NoC:
    """Stands in for the library: any C call is a test failure."""

    def __getattr__(self, name):
        raise AssertionError(f"{name} was called: the bad argument reached C")


class no_c_calls:
    """with no_c_calls(): ... runs with every C call failing the test."""

    def __enter__(self):
        self.saved = diffrt._lib._lib
        diffrt._lib._lib = _NoC()

    def __exit__(self, *exc):
        diffrt._lib._lib = self.saved


class TestArgumentChecks(unittest.TestCase):
    """What the package passes to C is checked first: ctypes keeps an int's
    low bits (ctx=2**32+5 was ctx 5) and a string up to its first NUL (a path
    with a NUL loaded another directory), and ids past the vocabulary are
    caught before C sees them. Each case raises, and makes no C call."""

    @classmethod
    def setUpClass(cls):
        cls.m = diffrt.Model(model_path("diff-v1-tiny"))
        cls.tok = cls.m.tokenizer
        cls.s = cls.m.session(backend="ref", ctx=8)

    @classmethod
    def tearDownClass(cls):
        cls.s.close()
        cls.m.close()

    def test_bad_arguments_raise_before_c(self):
        m, s, tok = self.m, self.s, self.tok
        V, VT = m.info.vocab, tok.vocab_size
        stream = tok.stream()
        big = 2**32 + 5  # as a C int: 5
        cases = [
            # (what, call, exception)
            ("Model path with NUL", lambda: diffrt.Model(model_path("diff-v1-tiny") + "\0x"), ValueError),
            ("Model bytes path with NUL", lambda: diffrt.Model(os.fsencode(model_path("diff-v1-tiny")) + b"\0"),
             ValueError),
            ("Model path not a path", lambda: diffrt.Model(5), TypeError),
            ("Session ctx 2**32+5", lambda: diffrt.Session(m, ctx=big), OverflowError),
            ("Session ctx -1", lambda: diffrt.Session(m, ctx=-1), ValueError),
            ("Session ctx past DRT_MAX_CTX", lambda: diffrt.Session(m, ctx=diffrt.DRT_MAX_CTX + 1), ValueError),
            ("Session ctx 1.5", lambda: diffrt.Session(m, ctx=1.5), TypeError),
            ("Session ctx True", lambda: diffrt.Session(m, ctx=True), TypeError),
            ("Session threads 2**31", lambda: diffrt.Session(m, threads=2**31), OverflowError),
            ("Session backend with NUL", lambda: diffrt.Session(m, backend="ref\0cpu"), ValueError),
            ("Session device with NUL", lambda: diffrt.Session(m, device="0\0"), ValueError),
            ("Session device 2**32", lambda: diffrt.Session(m, device=2**32), OverflowError),
            ("Session device -1", lambda: diffrt.Session(m, device=-1), ValueError),
            ("forward id = vocab", lambda: s.forward([1, V]), ValueError),
            ("forward id -1", lambda: s.forward([-1]), ValueError),
            ("forward id 2**32+5", lambda: s.forward([big]), OverflowError),
            ("forward int64 array past vocab", lambda: s.forward(np.array([V + 1], dtype=np.int64)), ValueError),
            ("generate ids past vocab", lambda: m.generate([0, V], n=1), ValueError),
            ("generate ctx 2**32+5", lambda: m.generate([0], n=1, ctx=big), OverflowError),
            ("generate backend with NUL", lambda: m.generate("x", n=1, backend="cpu\0"), ValueError),
            ("generate top_k 2**32+5", lambda: m.generate("x", n=1, top_k=big), OverflowError),
            ("session generate seed -1", lambda: s.generate([0], n=1, seed=-1), OverflowError),
            ("Sampler vocab 2**32+5", lambda: diffrt.Sampler(big), OverflowError),
            ("Sampler top_k 2**32+5", lambda: diffrt.Sampler(V, top_k=big), OverflowError),
            ("Sampler seed 2**64", lambda: diffrt.Sampler(V, seed=2**64), OverflowError),
            ("Tokenizer path with NUL", lambda: diffrt.Tokenizer(model_path("diff-v1-tiny") + "\0x"), ValueError),
            ("Tokenizer.from_json name with NUL", lambda: diffrt.Tokenizer.from_json("{}", name="a\0b"), ValueError),
            ("id_to_token 2**32+5", lambda: tok.id_to_token(big), OverflowError),
            ("id_to_token 1.0", lambda: tok.id_to_token(1.0), TypeError),
            ("is_special -2**31-1", lambda: tok.is_special(-2**31 - 1), OverflowError),
            ("token_to_id with NUL", lambda: tok.token_to_id("a\0b"), ValueError),
            ("stream push 2**32+5", lambda: stream.push(big), OverflowError),
            ("stream push past the vocab", lambda: stream.push(VT), ValueError),
            ("decode id past the vocab", lambda: tok.decode([1, VT]), ValueError),
            ("id_to_token -1", lambda: tok.id_to_token(-1), ValueError),
        ]
        try:
            for what, call, exc in cases:
                with self.subTest(what), no_c_calls():
                    with self.assertRaises(exc) as cm:
                        call()
                    if isinstance(cm.exception, ValueError):  # a value: also a diffrt.Error, INVALID_ARG
                        self.assertIsInstance(cm.exception, diffrt.Error)
                        self.assertEqual(cm.exception.status, diffrt.Status.INVALID_ARG)
        finally:
            stream.close()
        # and the objects are still whole
        self.assertEqual(s.pos, 0)
        self.assertEqual(tok.id_to_token(5), self.tok.id_to_token(np.int32(5)))


class TestSettings(unittest.TestCase):
    """settings= (drt_settings): a value set there wins over its variable, and
    a bad name or value is an Error naming it; settings_table() and setting()
    read the table and the values in force."""

    def test_kv_type(self):
        m = diffrt.Model(model_path("diff-v2-tiny"))
        with m.session() as s, m.session(kv_type="f32") as s32, m.session(backend="ref") as r:
            self.assertEqual((s.kv_type, s32.kv_type, r.kv_type), ("f16", "f32", "f32"))
            self.assertEqual(s.kv_bytes * 2, s32.kv_bytes)
            a, b = s.forward([1, 2, 3, 4]), s32.forward([1, 2, 3, 4])
            self.assertLess(float(np.sum((a - b) ** 2) / np.sum(b ** 2)), 1e-5)
        with m.session(kv_type="q8_0", settings={"kv_type": "f32"}) as s:
            self.assertEqual(s.kv_type, "q8_0")
        with m.batch_session(max_seqs=2, kv_type="q8_0") as b:
            self.assertEqual(b.kv_type, "q8_0")
        with self.assertRaisesRegex(diffrt.Error, "kv_type \"q4_0\""):
            m.session(kv_type="q4_0")
        g = m.generate([1, 2, 3], n=3, kv_type="q8_0")
        self.assertEqual(len(g.ids), 3)

    def test_settings(self):
        m = diffrt.Model(model_path("diff-v1-tiny"))
        old = os.environ.get("DIFFRT_CHECK_FINITE")
        os.environ["DIFFRT_CHECK_FINITE"] = "on"
        try:
            with self.assertRaisesRegex(diffrt.Error, "DIFFRT_CHECK_FINITE"):
                m.session()
            with m.session(settings={"check_finite": True, "cpu.threads": 2}) as s:
                self.assertEqual(s.forward([1, 2]).shape, (m.info.vocab,))
            g = m.generate([1, 2, 3], n=2, settings={"check_finite": 0})
            self.assertEqual(len(g.ids), 2)
        finally:
            if old is None:
                del os.environ["DIFFRT_CHECK_FINITE"]
            else:
                os.environ["DIFFRT_CHECK_FINITE"] = old
        for bad, says in (({"cpu.precision": "f16"}, "setting cpu.precision"),
                          ({"no.such": 1}, "unknown setting"), ({"no_mmap": 1}, "environment only")):
            with self.assertRaisesRegex(diffrt.Error, says):
                m.session(settings=bad)
        with self.assertRaises(TypeError):
            m.session(settings={1: "x"})
        m.close()

    def test_table(self):
        """settings_table() is the C table: the rows `diffrt info` prints, in
        its order, each with its variable, values, default, doc and kind."""
        rows = diffrt.settings_table()
        _, out, _ = cli("info")
        info_names = [ln.split()[0] for ln in out.split("\nsettings (", 1)[1].splitlines()[1:] if ln.strip()]
        self.assertEqual([r.name for r in rows], info_names)
        by = {r.name: r for r in rows}
        self.assertEqual(by["cpu.precision"], diffrt.SettingInfo(
            "cpu.precision", "DIFFRT_CPU_PRECISION", None, "f32, bf16, int8", "f32",
            "bf16: prefill GEMMs on AVX512-BF16; int8: x in one int8 level in the q8_0/q4_0 GEMVs (as llama.cpp); "
            "declared bound 5e-4", "user", False))
        self.assertEqual((by["vulkan.fp16"].old_env, by["vulkan.fp16"].kind), ("DIFFRT_VK_FP16", "debug"))
        self.assertTrue(by["no_mmap"].env_only)
        self.assertEqual(by["cpu.threads"].default, "")  # automatic
        for r in rows:
            self.assertTrue(r.env.startswith("DIFFRT_") and r.values and r.doc, r)
            self.assertIn(r.kind, ("user", "debug"))

    def test_value_in_force(self):
        """setting(): settings= > the variable (or its deprecated alias) >
        the default, with the source; a bad value names where it came from."""
        saved = {k: os.environ.pop(k, None) for k in ("DIFFRT_THREADS", "DIFFRT_VULKAN_TUNE", "DIFFRT_VK_TUNE")}
        try:
            self.assertEqual(diffrt.setting("cpu.precision"), ("cpu.precision", "f32", "default"))
            self.assertEqual(diffrt.setting("cpu.threads"), ("cpu.threads", "", "default"))
            os.environ["DIFFRT_THREADS"] = "5"
            self.assertEqual(diffrt.setting("cpu.threads"), ("cpu.threads", "5", "env"))
            self.assertEqual(diffrt.setting("cpu.threads", settings={"cpu.threads": 2}),
                             ("cpu.threads", "2", "caller"))
            os.environ["DIFFRT_VK_TUNE"] = "gpu"  # the deprecated alias (one line on stderr)
            self.assertEqual(diffrt.setting("vulkan.tune"), ("vulkan.tune", "gpu", "env"))
            now = diffrt.settings_in_force({"cpu.precision": "bf16"})
            self.assertEqual(set(now), {r.name for r in diffrt.settings_table()})
            self.assertEqual((now["cpu.precision"].value, now["cpu.precision"].source), ("bf16", "caller"))
            self.assertEqual(now["cpu.threads"].source, "env")
            os.environ["DIFFRT_THREADS"] = "0"
            with self.assertRaisesRegex(diffrt.Error, "DIFFRT_THREADS"):
                diffrt.setting("cpu.threads")
            with self.assertRaisesRegex(diffrt.Error, "DIFFRT_THREADS"):
                diffrt.settings_in_force()
        finally:
            for k, v in saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        for name, kw, says in (("no.such", {}, "unknown setting"),
                               ("cpu.precision", {"settings": {"cpu.precision": "f16"}}, "setting cpu.precision"),
                               ("cpu.threads", {"settings": {"no_mmap": 1}}, "environment only")):
            with self.assertRaisesRegex(diffrt.Error, says):
                diffrt.setting(name, **kw)
        with self.assertRaises(TypeError):
            diffrt.setting(3)


class TestThreads(unittest.TestCase):
    """A session is one thread's at a time: a second thread gets diffrt.Busy,
    never wrong logits; close() during another thread's forward waits for it,
    and every later call raises ValueError (it crashed). A model and a
    tokenizer may be shared."""

    @classmethod
    def setUpClass(cls):
        cls.m = diffrt.Model(model_path("diff-v1-tiny"))
        cls.ids = cls.m.tokenizer.encode(SHORT_PROMPT)

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def run_threads(self, fn, n=2):
        errors = []

        def guarded(i):
            try:
                fn(i)
            except BaseException as e:  # noqa: B902 (reported on the main thread)
                errors.append(e)

        threads = [threading.Thread(target=guarded, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        if errors:
            raise errors[0]

    def test_one_session_two_threads(self):
        T, laps = len(self.ids), 3
        with self.m.session(backend="cpu", ctx=laps * T, threads=1) as s:
            want = [s.forward(self.ids).copy() for _ in range(laps)]
            s.reset()
            seen = {"ok": 0, "busy": 0}

            def hammer(i):
                for _ in range(150):
                    try:
                        lg = s.forward(self.ids)
                    except diffrt.Busy as e:
                        self.assertEqual(e.status, diffrt.Status.BUSY)
                        self.assertIn("in use by another thread", str(e))
                        seen["busy"] += 1
                        continue
                    except diffrt.Error as e:
                        if "exceed" not in e.message:
                            raise
                        s.reset()  # the context is full (both run the same prompt)
                        continue
                    # the cache holds the prompt k times: exactly one lap's logits
                    self.assertTrue(any(np.array_equal(lg, w) for w in want), "wrong logits")
                    seen["ok"] += 1

            self.run_threads(hammer)
            self.assertGreater(seen["ok"], 0)
            s.reset()
            np.testing.assert_array_equal(s.forward(self.ids), want[0])

    def test_generate_holds_the_session(self):
        with self.m.session(backend="ref") as s:
            inside = threading.Event()
            others = []

            def on_text(piece):
                if not inside.is_set():
                    inside.set()
                    t = threading.Thread(target=lambda: others.append(self._try(s.forward, [1])))
                    t.start()
                    t.join()

            s.generate([1, 2, 3], n=3, stop=False, on_text=None)
            s.reset()
            s.generate(SHORT_PROMPT, n=3, stop=False, on_text=on_text)
            self.assertEqual(len(others), 1)
            self.assertIsInstance(others[0], diffrt.Busy)

    @staticmethod
    def _try(fn, *a):
        try:
            return fn(*a)
        except Exception as e:  # noqa: B902
            return e

    def test_close_during_forward(self):
        for r in range(10):
            s = self.m.session(backend="ref", ctx=len(self.ids) * 4)
            started = threading.Event()
            ended = []

            def loop(i):
                calls = 0
                try:
                    while True:
                        try:
                            s.forward(self.ids)
                        except diffrt.Error as e:
                            if "exceed" not in e.message:
                                raise
                            s.reset()
                        calls += 1
                        started.set()
                except ValueError as e:  # the session was closed
                    ended.append(str(e))
                    started.set()

            t = threading.Thread(target=loop, args=(0,))
            t.start()
            started.wait(60)
            s.close()  # waits for the forward in flight
            t.join(60)
            self.assertFalse(t.is_alive())
            self.assertEqual(len(ended), 1)
            self.assertIn("closed", ended[0])
            for call in (lambda: s.forward(self.ids), lambda: s.pos, s.reset, s.fallbacks):
                with self.assertRaises(ValueError):
                    call()
            s.close()  # twice: nothing

    def test_shared_model_and_tokenizer(self):
        m, tok = self.m, self.m.tokenizer
        with m.session(backend="cpu", threads=1) as s:
            want = s.forward(self.ids).copy()
        text = read_prompt()
        want_ids = tok.encode(text)
        got = [None] * 4

        def work(i):
            with m.session(backend="cpu", threads=1) as s:
                lg = s.forward(tok.encode(SHORT_PROMPT))
            got[i] = (lg, tok.encode(text))

        self.run_threads(work, n=4)
        for lg, ids in got:
            np.testing.assert_array_equal(lg, want)
            self.assertEqual(ids, want_ids)

    def test_tokenizer_close_during_encode(self):
        text = read_prompt()
        for r in range(5):
            tok = diffrt.Tokenizer(model_path("diff-v1-tiny"))
            started = threading.Event()
            results = []

            def loop(i):
                try:
                    while True:
                        results.append(len(tok.encode(text)))
                        started.set()
                except ValueError:
                    started.set()

            threads = [threading.Thread(target=loop, args=(i,)) for i in range(2)]
            for t in threads:
                t.start()
            started.wait(60)
            tok.close()
            for t in threads:
                t.join(60)
            self.assertTrue(results and len(set(results)) == 1)
            with self.assertRaises(ValueError):
                tok.encode("x")


class _HeldLib:
    """Stands in for the library: the first call of C function ``name`` (or
    every one: holder.every) goes through ``holder.hold(fn, *args)``, inside
    the Python object's guard, as a call in flight; every other call goes
    straight to the library."""

    def __init__(self, real, name, holder):
        self.real, self.name, self.holder, self.first = real, name, holder, True

    def __getattr__(self, name):
        fn = getattr(self.real, name)
        if name != self.name:
            return fn

        def held(*args):
            if self.first or self.holder.every:
                self.first = False
                return self.holder.hold(fn, *args)
            return fn(*args)

        return held


class held_in_c:
    """with held_in_c("drt_sampler_sample"): ... holds the first call of that
    C function until close() has begun on another thread (the object is
    marked closed, so close() is waiting for the call, or about to), then
    lets it run. ``inside`` is set once the call is held, ``returned`` once
    the C function returned; ``closed()`` is the closing thread's report that
    its close() returned. A close() that returned while the call was held
    (the handle freed under it) is reported as ``freed_under`` and the C
    function is not called on the freed handle (that would crash the
    process, not fail the test)."""

    def __init__(self, name, obj):
        self.name, self.obj = name, obj
        self.inside, self.closing, self.returned, self.close_returned = (threading.Event() for _ in range(4))
        self.freed_under = False
        self.every = False  # hold every call, not the first only

    def hold(self, fn, *args):
        self.inside.set()
        self.closing.wait(60)
        t0 = time.monotonic()
        while not getattr(self.obj, "_closed", False) and time.monotonic() - t0 < 5:
            time.sleep(0.001)
        if self.close_returned.wait(0.2):  # close() did not wait for this call
            self.freed_under = True
            raise RuntimeError("close() returned while the call was in flight")
        try:
            return fn(*args)
        finally:
            self.returned.set()

    def close(self, obj=None):
        """Closes obj (the held object unless given) once the call is held."""
        if not self.inside.wait(60):
            raise AssertionError(f"{self.name} was never called")
        self.closing.set()
        (self.obj if obj is None else obj).close()
        self.close_returned.set()
        return self.returned.is_set()

    def __enter__(self):
        self.saved = diffrt._lib._lib
        diffrt._lib._lib = _HeldLib(self.saved, self.name, self)
        return self

    def __exit__(self, *exc):
        diffrt._lib._lib = self.saved


class TestCloseWaits(unittest.TestCase):
    """Every class with a native handle (Model, Session, BatchSession,
    Sampler, Tokenizer, StreamDecoder): close() on one thread while another
    is inside a C call on the object waits for that call, which returns its
    right result; every later call raises diffrt.Closed (a ValueError); the
    process does not crash. A call is held inside the object's guard
    (held_in_c) or inside the C forward (an observer), until close() has
    begun, so the close comes during the call on every run however the
    threads are scheduled. Objects that hold state (Sampler, StreamDecoder)
    take their calls one at a time."""

    @classmethod
    def setUpClass(cls):
        cls.m = diffrt.Model(model_path("diff-v1-tiny"))
        cls.tok = cls.m.tokenizer
        cls.ids = cls.tok.encode(SHORT_PROMPT)

    @classmethod
    def tearDownClass(cls):
        cls.m.close()

    def close_during(self, obj, c_name, call, want, later, close_obj=None):
        """call() on a thread, held inside C function c_name, while this
        thread closes close_obj (obj unless given); then what later() lists
        must raise Closed. want(result) checks the call's result."""
        got = []
        with held_in_c(c_name, obj if close_obj is None else close_obj) as held:
            t = threading.Thread(target=lambda: got.append(TestThreads._try(call)), daemon=True)
            t.start()
            waited = held.close(close_obj)
            t.join(120)
        self.assertFalse(t.is_alive())
        self.assertFalse(held.freed_under, f"{type(obj).__name__}: close() freed the handle under {c_name}")
        self.assertTrue(waited, f"{type(obj).__name__}: close() returned before {c_name} in flight did")
        if isinstance(got[0], Exception):
            raise got[0]
        want(got[0])
        for what, fn in later:
            with self.subTest(after_close=what):
                with self.assertRaises(diffrt.Closed) as cm:
                    fn()
                self.assertIsInstance(cm.exception, ValueError)
                self.assertIn("closed", str(cm.exception))
        (obj if close_obj is None else close_obj).close()  # twice: nothing

    def test_model(self):
        """Model.close() during a session's creation waits for it; the
        session keeps the model alive in C, so it runs after the close, and
        also while the model is closed during its forward."""
        m = diffrt.Model(model_path("diff-v1-tiny"))
        with m.session(backend="ref", ctx=16) as s:
            want = s.forward(self.ids).copy()
        made = []

        def make():
            made.append(m.session(backend="ref", ctx=16))
            return made[-1].forward(self.ids)

        self.close_during(m, "drt_session_create", make, lambda lg: np.testing.assert_array_equal(lg, want),
                          [("session", lambda: m.session()), ("batch_session", lambda: m.batch_session()),
                           ("generate", lambda: m.generate([1, 2], n=1))])
        made[0].close()
        # closed during a forward: nothing to wait for (the session holds it)
        m = diffrt.Model(model_path("diff-v1-tiny"))
        s = m.session(backend="ref", ctx=16)
        inside, done = threading.Event(), threading.Event()

        def gate(node):
            inside.set()
            done.wait(60)

        s.set_observer(gate, want=lambda op, name, layer: name == "embed")
        got = []
        t = threading.Thread(target=lambda: got.append(s.forward(self.ids)), daemon=True)
        t.start()
        self.assertTrue(inside.wait(60))
        m.close()  # returns with the forward in flight
        done.set()
        t.join(60)
        np.testing.assert_array_equal(got[0], want)
        s.set_observer(None)
        s.reset()
        np.testing.assert_array_equal(s.forward(self.ids), want)
        s.close()

    def test_session(self):
        """Session.close() from another thread during a forward (held at its
        first node by an observer: inside C) waits for it; close() from the
        observer itself, on the forward's thread, returns at once and the
        session is freed when the forward returns (it freed the session under
        its own forward)."""
        with self.m.session(backend="ref", ctx=64) as s:
            want = s.forward(self.ids, all_logits=True).copy()
        for closer in ("another thread", "the observer"):
            with self.subTest(closer=closer):
                s = self.m.session(backend="ref", ctx=64)
                inside, closing, returned, close_returned = (threading.Event() for _ in range(4))

                def gate(node):
                    if closer == "the observer":
                        s.close()  # must neither deadlock nor free the session under this forward
                        returned.set()
                        return
                    inside.set()
                    closing.wait(60)
                    t0 = time.monotonic()
                    while not s._closed and time.monotonic() - t0 < 5:
                        time.sleep(0.001)
                    close_returned.wait(0.2)

                s.set_observer(gate, want=lambda op, name, layer: name == "embed")
                got = []
                with held_in_c("drt_session_forward", s) as held:
                    held.hold = lambda fn, *a: (fn(*a), held.returned.set())[0]  # marks its return only
                    t = threading.Thread(target=lambda: got.append(TestThreads._try(s.forward, self.ids, True)),
                                         daemon=True)
                    t.start()
                    if closer == "another thread":
                        self.assertTrue(inside.wait(60))
                        closing.set()
                        s.close()
                        waited = held.returned.is_set()
                        close_returned.set()
                        self.assertTrue(waited, "close() returned before the forward in flight did")
                    t.join(60)
                self.assertFalse(t.is_alive(), "the forward did not return (a deadlock?)")
                if isinstance(got[0], Exception):
                    raise got[0]
                np.testing.assert_array_equal(got[0], want)
                if closer == "the observer":
                    self.assertTrue(returned.is_set())
                    self.assertTrue(held.returned.is_set())
                    self.assertIsNone(s._h, "not freed when the forward returned")
                for what, fn in (("forward", lambda: s.forward(self.ids)), ("pos", lambda: s.pos),
                                 ("reset", s.reset), ("fallbacks", s.fallbacks),
                                 ("generate", lambda: s.generate([1], n=1)),
                                 ("set_observer", lambda: s.set_observer(None)),
                                 ("last_attention", s.last_attention)):
                    with self.assertRaises(diffrt.Closed, msg=what):
                        fn()
                s.close()

    def test_batch_session(self):
        with self.m.batch_session(max_seqs=2, ctx_per_seq=32, backend="ref") as b:
            want = b.forward(self.ids + self.ids, [0] * len(self.ids) + [1] * len(self.ids)).copy()
        b = self.m.batch_session(max_seqs=2, ctx_per_seq=32, backend="ref")
        self.close_during(b, "drt_batch_forward",
                          lambda: b.forward(self.ids + self.ids, [0] * len(self.ids) + [1] * len(self.ids)),
                          lambda lg: np.testing.assert_array_equal(lg, want),
                          [("forward", lambda: b.forward([1], [0])), ("seq_len", lambda: b.seq_len(0)),
                           ("truncate", lambda: b.truncate(0))])

    def test_sampler(self):
        """A draw from a large vocabulary (2**20 logits) in flight."""
        V = 1 << 20
        logits = np.random.default_rng(5).standard_normal(V).astype(np.float32)
        with diffrt.Sampler(V, **SAMPLED) as smp:
            want = smp.sample(logits)
        smp = diffrt.Sampler(V, **SAMPLED)
        self.close_during(smp, "drt_sampler_sample", lambda: smp.sample(logits), lambda t: self.assertEqual(t, want),
                          [("sample", lambda: smp.sample(logits))])

    def test_tokenizer(self):
        """Encoding a long text, and decoding its ids, in flight."""
        text = read_prompt() * 50
        ids = self.tok.encode(text)
        for c_name, call, want in (("drt_tokenizer_encode_max", lambda t: t.encode(text), ids),
                                   ("drt_tokenizer_decode", lambda t: t.decode(ids), self.tok.decode(ids))):
            with self.subTest(c_name):
                tok = diffrt.Tokenizer(model_path("diff-v1-tiny"))
                self.close_during(tok, c_name, lambda: call(tok), lambda got: self.assertEqual(got, want),
                                  [("encode", lambda: tok.encode("x")), ("decode", lambda: tok.decode([1])),
                                   ("vocab_size", lambda: tok.vocab_size), ("id_to_token", lambda: tok.id_to_token(1)),
                                   ("token_to_id", lambda: tok.token_to_id("a")), ("bos_id", lambda: tok.bos_id),
                                   ("stream push", lambda: tok.stream().push(1))])

    def test_stream_decoder(self):
        """A push in flight (after many pushes) while the stream is closed,
        and while its tokenizer is closed: both wait for it."""
        ids = self.tok.encode(read_prompt() * 20)
        for closing in ("stream", "tokenizer"):
            with self.subTest(closing=closing):
                tok = diffrt.Tokenizer(model_path("diff-v1-tiny"))
                st = tok.stream()
                head = "".join(st.push(i) for i in ids[:-1])
                with tok.stream() as ref:
                    last = "".join(ref.push(i) for i in ids)[len(head):]
                self.close_during(st, "drt_tokenizer_stream_push", lambda: st.push(ids[-1]),
                                  lambda piece: self.assertEqual(piece, last),
                                  [("push", lambda: st.push(1)), ("flush", st.flush)],
                                  close_obj=tok if closing == "tokenizer" else None)
                st.close()
                tok.close()

    def test_stateful_calls_one_at_a_time(self):
        """Sampler and StreamDecoder hold state (a generator, the pending
        bytes and a buffer), one thread's at a time in C: a second thread's
        call waits for the first's, which is held inside C until the second
        has started (both ran inside C at once)."""
        V = 1 << 16
        logits = np.random.default_rng(6).standard_normal(V).astype(np.float32)
        with diffrt.Sampler(V, **SAMPLED) as smp:
            draws = sorted([smp.sample(logits), smp.sample(logits)])
        ok = self.tok.encode(" ok", add_special=False)[0]
        cases = (
            ("Sampler", lambda: diffrt.Sampler(V, **SAMPLED), "drt_sampler_sample", lambda o: o.sample(logits),
             lambda got: self.assertEqual(sorted(got), draws)),
            ("StreamDecoder", lambda: self.tok.stream(), "drt_tokenizer_stream_push", lambda o: o.push(ok),
             lambda got: self.assertEqual("".join(got), self.tok.decode([ok, ok]))),
        )
        for name, make, c_name, call, check in cases:
            with self.subTest(name):
                obj = make()
                lock = threading.Lock()
                now, most = [0], [0]
                first_inside, second_started = threading.Event(), threading.Event()

                def counted(fn, *args):
                    with lock:
                        now[0] += 1
                        most[0] = max(most[0], now[0])
                        first = not first_inside.is_set()
                        first_inside.set()
                    try:
                        if first:  # hold the first call until the second is on its way in
                            second_started.wait(60)
                            time.sleep(0.2)
                        return fn(*args)
                    finally:
                        with lock:
                            now[0] -= 1

                got = []
                with held_in_c(c_name, obj) as held:
                    held.hold = counted  # every call, not the first only
                    held.every = True
                    a = threading.Thread(target=lambda: got.append(call(obj)), daemon=True)
                    a.start()
                    self.assertTrue(first_inside.wait(60))

                    def second():
                        second_started.set()
                        got.append(call(obj))

                    b = threading.Thread(target=second, daemon=True)
                    b.start()
                    a.join(60)
                    b.join(60)
                self.assertEqual(most[0], 1, f"{name}: two threads inside {c_name} at once")
                self.assertEqual(len(got), 2)
                check(got)
                obj.close()


if INSTALLED:

    class TestInstalled(unittest.TestCase):
        """The package pip installed: imported from the environment's
        site-packages, with the library, the backend modules and the CLI
        inside it, found without any environment variable."""

        def setUp(self):
            self.pkg = os.path.dirname(os.path.realpath(diffrt.__file__))

        def test_imported_from_the_environment(self):
            self.assertTrue(self.pkg.startswith(os.path.realpath(sys.prefix) + os.sep), (self.pkg, sys.prefix))
            self.assertNotEqual(sys.prefix, sys.base_prefix, "not a virtual environment")

        def test_library_and_cli_inside_the_package(self):
            lib_dir = os.path.join(self.pkg, "lib")
            self.assertEqual(os.path.realpath(diffrt.library_path()), os.path.join(lib_dir, "libdiffrt.so"))
            self.assertEqual(os.path.realpath(diffrt.cli_path()), os.path.join(self.pkg, "bin", "diffrt"))

        def test_version_is_the_librarys(self):
            from importlib.metadata import version

            self.assertEqual(version("diffrt"), diffrt.version())

        def test_modules_found_in_the_package(self):
            # every module pip put beside libdiffrt.so is the one its backend
            # was loaded from, or the backend says why it could not be used
            lib_dir = os.path.join(self.pkg, "lib")
            files = sorted(f for f in os.listdir(lib_dir) if f.startswith("libdiffrt-") and f.endswith(".so"))
            by_name = {b.name: b for b in diffrt.backends()}
            for f in files:
                name = f[len("libdiffrt-"):-len(".so")]
                with self.subTest(module=f):
                    b = by_name[name]
                    self.assertTrue(b.compiled_in, b)
                    if b.available:
                        self.assertEqual(os.path.realpath(b.module), os.path.join(lib_dir, f))
                    else:
                        self.assertTrue(b.reason, b)
            for b in by_name.values():
                if not b.builtin and f"libdiffrt-{b.name}.so" not in files:
                    self.assertFalse(b.available, b)
                    self.assertTrue(b.reason, b)

        def test_python_m_diffrt_is_the_cli(self):
            # the README's main job through python -m diffrt
            p = subprocess.run([sys.executable, "-m", "diffrt", "run", "--model", os.path.join(MODELS_DIR, "diff-v1-tiny"),
                                "--prompt-file", PROMPT_FILE], capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.decode(), " 6019.\n")
            p = subprocess.run([sys.executable, "-m", "diffrt", "--version"], capture_output=True, timeout=60)
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.decode().splitlines()[0], f"diffrt {diffrt.version()} (commit {diffrt.git_commit()})")
            p = subprocess.run([sys.executable, "-m", "diffrt", "run", "--no-such-flag"], capture_output=True, timeout=60)
            self.assertNotEqual(p.returncode, 0)


if __name__ == "__main__":
    unittest.main()
