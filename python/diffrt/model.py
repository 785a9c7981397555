"""Models, sessions, samplers and generation over the diffrt C API."""

import os
import threading
import warnings
from ctypes import byref, c_char as ctypes_c_char, c_int32, c_void_p, create_string_buffer
from dataclasses import dataclass
from typing import List, Optional, Tuple

import numpy as np

from . import _lib
from ._ids import as_ids, check_vocab as _check_vocab
from ._lib import Error, InvalidArgument, Status
from .tokenizer import Tokenizer

# ---- library-wide ----------------------------------------------------------


def version():
    """The library's version string (drt_version), e.g. "0.1.0"."""
    return _lib.cstr(_lib.lib().drt_version())


def git_commit():
    """The short git commit the library was built from (drt_git_commit)."""
    return _lib.cstr(_lib.lib().drt_git_commit())


def _tri(v):
    return None if v < 0 else bool(v)


@dataclass(frozen=True)
class Device:
    """One device of a backend (drt_device_props); "" and 0 when unknown."""

    name: str
    description: str  # drt_backend_device_name: what `diffrt info` lists
    vendor: str
    driver: str
    api_version: str
    type: str  # "GPU", "CPU", "accelerator", "other"
    memory_bytes: int
    subgroup_size: int
    fp16: Optional[bool]  # native fp16 arithmetic; None when unknown
    bf16: Optional[bool]


@dataclass(frozen=True)
class BackendInfo:
    """One backend (drt_backend_info) and its devices."""

    name: str
    compiled_in: bool  # this build made it (built in or a module), or its module was found
    available: bool  # usable on this machine now
    reason: Optional[str]  # why not, when not available
    device_count: int
    builtin: bool  # part of the library itself (cpu, ref)
    module: Optional[str]  # the module file it was loaded from
    devices: Tuple[Device, ...]


def backends():
    """Every backend the library knows (cpu, ref, opencl, vulkan, cuda):
    compiled in or not, available or why not, and the devices it found."""
    L = _lib.lib()
    out = []
    for b in range(L.drt_backend_count()):
        bi = _lib.BackendInfoC()
        _lib.check(L.drt_backend_get_info(b, byref(bi)))
        devices = []
        if bi.available:
            for d in range(bi.device_count):
                p = _lib.DevicePropsC()
                _lib.check(L.drt_backend_device_props(b, d, byref(p)))
                desc = create_string_buffer(1024)
                _lib.check(L.drt_backend_device_name(b, d, desc, _lib.size_t(len(desc), "buffer size")))
                dec = lambda x: x.decode("utf-8", "replace")  # noqa: E731
                devices.append(Device(name=dec(p.name), description=dec(desc.value), vendor=dec(p.vendor), driver=dec(p.driver),
                                      api_version=dec(p.api_version), type=dec(p.type),
                                      memory_bytes=p.memory_bytes, subgroup_size=p.subgroup_size,
                                      fp16=_tri(p.fp16), bf16=_tri(p.bf16)))
        out.append(
            BackendInfo(
                name=_lib.cstr(bi.name),
                compiled_in=bool(bi.compiled_in),
                available=bool(bi.available),
                reason=_lib.cstr(bi.reason) or None,
                device_count=bi.device_count,
                builtin=bool(bi.builtin),
                module=_lib.cstr(bi.module),
                devices=tuple(devices),
            )
        )
    return out


# ---- models ------------------------------------------------------------------


@dataclass(frozen=True)
class ModelInfo:
    """drt_model_info, copied out of the model (valid after it is closed)."""

    arch: str  # "transformer", "diff_v1", "diff_v2" (arch_name)
    layout: str  # layout_name
    weight_dtype: str  # "f32", "f16", "bf16", "q8_0", "q4_0"
    n_params: int
    vocab: int
    dim: int
    ffn: int
    n_layers: int
    n_heads: int
    n_kv_groups: int
    kv_m: int
    dk: int
    dv: int
    max_ctx: int  # max_position_embeddings
    tied_embeddings: bool
    rope_scaling: str
    bos_id: Optional[int]  # None when the config has none
    eos_id: Optional[int]
    lambda_: Optional[Tuple[float, ...]]  # V1: per layer; None otherwise
    lambda_init: Optional[Tuple[float, ...]]
    embed_dtype: str  # the token embedding's (the LM head's too when tied)
    # every id that ends generation: config.json's eos_token_id, then
    # generation_config.json's, distinct (drt_model_eos_ids)
    eos_ids: Tuple[int, ...] = ()
    # V1: a GROUPNORM follows the attention, and its output is scaled by
    # (1 - lambda_init) (axolotl's llama-differential: docs/checkpoints.md)
    subnorm: bool = False
    out_scale: bool = False


def _info_from_c(I, eos_ids=()):
    L = _lib.lib()
    per_layer = lambda p: tuple(p[i] for i in range(I.n_layers)) if p else None  # noqa: E731
    return ModelInfo(
        arch=_lib.cstr(I.arch_name),
        layout=_lib.cstr(I.layout_name),
        weight_dtype=_lib.cstr(L.drt_dtype_name(I.weight_dtype)),
        n_params=I.n_params,
        vocab=I.vocab,
        dim=I.dim,
        ffn=I.ffn,
        n_layers=I.n_layers,
        n_heads=I.n_heads,
        n_kv_groups=I.n_kv_groups,
        kv_m=I.kv_m,
        dk=I.dk,
        dv=I.dv,
        max_ctx=I.max_ctx,
        tied_embeddings=bool(I.tied_embeddings),
        rope_scaling=_lib.cstr(I.rope_scaling),
        bos_id=I.bos_id if I.bos_id >= 0 else None,
        eos_id=I.eos_id if I.eos_id >= 0 else None,
        lambda_=per_layer(I.lambda_),
        lambda_init=per_layer(I.lambda_init),
        embed_dtype=_lib.cstr(L.drt_dtype_name(I.embed_dtype)),
        eos_ids=tuple(eos_ids),
        subnorm=bool(I.subnorm),
        out_scale=bool(I.out_scale),
    )


@dataclass
class Generation:
    """What generate() produced: ``ids`` as `diffrt run --tokens` prints them
    (the eos id last when generation stopped there), ``text`` as `diffrt run
    --prompt` prints it without the final newline the CLI adds (special
    tokens, eos included, are not in it; None for an ids prompt),
    ``prompt_ids`` the ids that were prefilled, ``stopped`` whether it ended
    at eos."""

    ids: List[int]
    text: Optional[str]
    prompt_ids: List[int]
    stopped: bool


class Model(_lib.Handle):
    """A checkpoint directory (config.json + safetensors) loaded by diffrt.

    Threads: any number at once (creating sessions). Sessions and batch
    sessions made from it keep it alive in C: closing the Model while they
    are open, or while they run, is allowed (close() waits only for the
    session creations in flight)."""

    _free_fn = "drt_model_free"

    def __init__(self, path):
        cpath = _lib.cpath(path)
        self.path = os.fspath(path)
        self._h = None
        self._tokenizer = None
        self._tokenizer_lock = threading.Lock()
        h = c_void_p()
        _lib.check(_lib.lib().drt_model_load(cpath, byref(h)))
        self._h = h
        I = _lib.ModelInfoC()
        _lib.check(_lib.lib().drt_model_get_info(h, byref(I)))
        n = _lib.lib().drt_model_eos_ids(h, None, 0)
        eos = (c_int32 * max(n, 1))()
        if n < 0 or _lib.lib().drt_model_eos_ids(h, eos, n) != n:
            raise _lib.error(Status.INVALID_ARG)
        self.info = _info_from_c(I, eos[:n])


    def __repr__(self):
        return f"<diffrt.Model {self.path} {self.info.arch} {'closed' if self._closed or not self._h else 'open'}>"

    @property
    def vocab(self):
        return self.info.vocab

    @property
    def tokenizer(self):
        """The model directory's tokenizer.json (loaded on first use, once
        however many threads ask; a Tokenizer of its own: closing the Model
        does not close it)."""
        with self._tokenizer_lock:
            if self._tokenizer is None:
                self._tokenizer = Tokenizer(os.path.join(self.path, "tokenizer.json"))
            return self._tokenizer

    def session(self, backend="cpu", device=None, ctx=0, threads=0, check_finite=False, settings=None,
                kv_type=None):
        return Session(self, backend=backend, device=device, ctx=ctx, threads=threads,
                       check_finite=check_finite, settings=settings, kv_type=kv_type)

    def batch_session(self, max_seqs=0, ctx_per_seq=0, max_batch_rows=0, **kw):
        """A :class:`BatchSession` of this model (keyword arguments as there)."""
        return BatchSession(self, max_seqs=max_seqs, ctx_per_seq=ctx_per_seq, max_batch_rows=max_batch_rows, **kw)

    def generate(self, prompt, n=None, *, backend="cpu", device=None, ctx=0, threads=0,
                 temperature=0.0, top_k=0, top_p=1.0, seed=0, stop=True, on_text=None,
                 check_finite=False, settings=None, kv_type=None):
        """Does what `diffrt run` does, with the same defaults.

        ``prompt`` is text (str or UTF-8 bytes: encoded with the model's
        tokenizer.json, special tokens added; stops at any of the model's eos
        ids (``info.eos_ids``: config.json's and generation_config.json's
        eos_token_id), else at the tokenizer's; the text is returned and
        passed piece by piece to ``on_text`` as it completes) or a sequence
        of ids (`run --tokens`: stops at the model's eos ids only; no text). The context ``ctx`` 0 is the
        CLI's default: min(max_position_embeddings, 4096), or prompt + n when
        that needs more and fits max_position_embeddings; a prompt + n that
        does not fit is an Error before any work. ``stop=False`` is --no-stop.
        ``n`` None is the CLI's default -n: up to 16 tokens, fewer when the
        context (``ctx``, else max_position_embeddings) ends sooner.
        """
        # every argument checked before the first C call (the prompt's encoding)
        _session_opts(backend, device, ctx, threads, check_finite, kv_type)
        _check_settings(settings)
        _sampler_opts(self.info.vocab, temperature, top_k, top_p, seed)
        if n is not None:
            _check_n(n)
        ids, eos, tok = self._prompt(prompt, ctx or self.info.max_ctx)
        if n is None:
            room = (ctx or self.info.max_ctx) - len(ids)
            n = room if 0 < room < 16 else 16
        n = _check_n(n)
        ctx = _choose_ctx(len(ids), n, self.info.max_ctx, ctx)
        with Session(self, backend=backend, device=device, ctx=ctx, threads=threads,
                     check_finite=check_finite, settings=settings, kv_type=kv_type) as s:
            with Sampler(self.info.vocab, temperature=temperature, top_k=top_k, top_p=top_p,
                         seed=seed) as smp:
                return s._generate(ids, n, smp, eos, stop, tok, on_text)

    def _prompt(self, prompt, max_ids):
        """(ids, eos ids (a tuple), tokenizer or None) as cmd_run prepares
        them; a text prompt stops encoding once it makes more than max_ids
        (the context)."""
        info = self.info
        if isinstance(prompt, (str, bytes, bytearray)):
            tok = self.tokenizer
            ids = tok.encode(prompt, add_special=True, max_tokens=max_ids)
            if not ids:
                raise InvalidArgument(f"the prompt is empty and {tok.path} adds no BOS token: nothing to start from")
            for i in ids:
                if i >= info.vocab:
                    name = tok.id_to_token(i)
                    raise Error(Status.FORMAT,
                                f"{tok.path}: prompt token {i} (\"{(name or '?')[:40]}\") is outside the "
                                f"model's vocabulary of {info.vocab}: is this the model's tokenizer?")
            eos = info.eos_ids
            if not eos and tok.eos_id is not None:
                eos = (tok.eos_id,)
            return ids, eos, tok
        ids = [int(i) for i in _check_vocab(as_ids(prompt), info.vocab)]
        if not ids:
            raise InvalidArgument("the prompt has no tokens: nothing to start from")
        return ids, info.eos_ids, None


_KV_TYPES = {0: "f32", 1: "f16", 4: "q8_0"}


def _session_opts(backend, device, ctx, threads, check_finite, kv_type=None):
    """(backend name, drt_session_opts) from Session's arguments, each
    checked for its C type first."""
    backend = backend or "cpu"
    b = _lib.cstring(backend, "backend")
    if device is None:
        d = None
    elif isinstance(device, (str, bytes)):
        d = _lib.cstring(device, "device")
    else:  # an index
        d = str(_lib.int32(device, "device", lo=0)).encode()
    kv = None if kv_type is None else _lib.cstring(kv_type, "kv_type")
    opts = _lib.SessionOptsC(backend=b, device=d, max_ctx=_lib.int32(ctx, "ctx", 0, _lib.DRT_MAX_CTX),
                             threads=_lib.int32(threads, "threads"), check_finite=int(bool(check_finite)),
                             kv_type=kv)
    return backend, opts


def _check_settings(settings):
    """settings as [(name bytes, value bytes)]: a dict (or pairs) of names
    to values (str, int or bool), each checked for its C type first."""
    if settings is None:
        return []
    items = settings.items() if hasattr(settings, "items") else settings
    out = []
    for name, value in items:
        if isinstance(value, bool):
            value = int(value)
        out.append((_lib.cstring(name, "settings name"), _lib.cstring(str(value), "settings value")))
    return out


class _Settings:
    """A drt_settings holding ``settings`` for one drt_session_create call:
    a bad name or value raises Error naming it (drt_settings_set)."""

    def __init__(self, settings):
        self.pairs = _check_settings(settings)
        self.h = c_void_p()

    def __enter__(self):
        if self.pairs:
            _lib.check(_lib.lib().drt_settings_create(byref(self.h)))
            try:
                for name, value in self.pairs:
                    _lib.check(_lib.lib().drt_settings_set(self.h, name, value))
            except BaseException:
                self.__exit__()
                raise
        return self.h

    def __exit__(self, *exc):
        if self.h:
            _lib.lib().drt_settings_free(self.h)
            self.h = c_void_p()


def _sampler_opts(vocab, temperature, top_k, top_p, seed):
    """(vocab, drt_sampler_opts) from Sampler's arguments, each checked for
    its C type first."""
    return _lib.int32(vocab, "vocab"), _lib.SamplerOptsC(
        temperature=float(temperature), top_k=_lib.int32(top_k, "top_k"), top_p=float(top_p),
        seed=_lib.uint64(seed, "seed"))


def _check_n(n):
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0 or n > (1 << 20):
        raise InvalidArgument(f"n wants an integer in [0, {1 << 20}], got {n!r}")
    return int(n)


def _choose_ctx(T, n, max_pos, ctx):
    """cmd_run's context rule."""
    need = T + n
    if not ctx:
        dflt = min(max_pos, 4096)
        ctx = dflt if need <= dflt else need if need <= max_pos else max_pos
        if need > ctx:
            raise InvalidArgument(f"prompt ({T} tokens) + n {n} exceeds the context {ctx} "
                                  "(max_position_embeddings); pass ctx=N to raise it")
    elif need > ctx:
        raise InvalidArgument(f"prompt ({T} tokens) + n {n} exceeds ctx {ctx}; pass a larger ctx")
    elif ctx > max_pos:
        warnings.warn(f"diffrt: ctx {ctx} is past the model's max_position_embeddings {max_pos}: "
                      f"positions from {max_pos} on were never trained and the output there may degrade",
                      RuntimeWarning, stacklevel=3)
    return ctx


# ---- sessions ----------------------------------------------------------------


# drt_dtype -> numpy dtype of an observed tensor (bf16: its raw 16-bit words)
_NP_DTYPES = {0: np.float32, 1: np.float16, 2: np.uint16, 3: np.int32}


@dataclass
class NodeTensor:
    """An observed node's output or input: name, dtype (drt_dtype), shape
    and, for the output, a numpy copy of its values (None for inputs)."""

    name: str
    dtype: int
    shape: Tuple[int, ...]
    data: Optional[np.ndarray] = None

    @staticmethod
    def _from_c(t, copy):
        shape = tuple(int(t.ne[d]) for d in range(t.nd))
        data = None
        npt = _NP_DTYPES.get(t.type)
        if copy and t.data and npt is not None:
            n = int(np.prod(shape)) if shape else 1
            buf = (ctypes_c_char * (n * np.dtype(npt).itemsize)).from_address(t.data)
            data = np.frombuffer(buf, dtype=npt).reshape(shape).copy()
        return NodeTensor(_lib.cstr(t.name), int(t.type), shape, data)


@dataclass
class NodeEvent:
    """One node of a forward, as a session observer sees it (drt_node_event)."""

    op: str
    name: str
    layer: int
    p0: int
    output: NodeTensor  # a KV_WRITE's: the rows it wrote
    inputs: List[NodeTensor]
    seconds: float
    fallback: bool

    @staticmethod
    def _from_c(ev):
        out = NodeTensor._from_c(ev.out, True)
        ins = [NodeTensor._from_c(ev.src[j], False) for j in range(ev.n_src)]
        return NodeEvent(_lib.cstr(ev.op), out.name, int(ev.layer), int(ev.p0), out, ins, float(ev.seconds),
                         bool(ev.fallback))



class Session(_lib.Handle):
    """A model placed on a backend with its KV cache (drt_session).

    ``backend``: "cpu" (fast CPU), "ref" (reference), "opencl", "vulkan",
    "cuda"; ``device``: None for the backend's default, else an index or a
    name substring; ``ctx`` 0: max_position_embeddings capped at 4096;
    ``threads`` 0: DIFFRT_THREADS, else the physical cores; ``settings``:
    a dict of settings (docs/environment.md: ``{"cpu.precision": "bf16",
    "vulkan.fp16": 0}``) that win over their environment variables;
    ``kv_type``: the KV cache's type, "f32", "f16" or "q8_0" (None: the
    kv_type setting, else f16 on cpu and f32 elsewhere). ``kv_type`` and
    ``kv_bytes`` hold the type and the cache's size as decided.

    One thread at a time: forward, generate, set_observer, keep_attention
    and last_attention called while another thread is inside the session
    raise :class:`Busy` (a diffrt.Error, Status.BUSY) and do nothing; pos,
    reset, fallbacks and close wait for that thread's call instead. After
    close every call raises :class:`Closed` (a ValueError). close() from a
    callback of the session's own call (an observer, generate's on_text)
    returns at once, and the session is freed when that call returns."""

    _free_fn = "drt_session_free"
    _observer = None  # the drt_observer's callbacks (set_observer)
    _observer_error = None  # what a callback raised, for forward to raise

    def __init__(self, model, backend="cpu", device=None, ctx=0, threads=0, check_finite=False,
                 settings=None, kv_type=None):
        self._h = None
        self.backend, opts = _session_opts(backend, device, ctx, threads, check_finite, kv_type)
        self.model = model
        self.vocab = model.info.vocab
        h = c_void_p()
        with _Settings(settings) as sh, model._shared() as mh:  # model.close() on another thread waits
            opts.settings = sh.value  # read by drt_session_create only
            _lib.check(_lib.lib().drt_session_create(mh, byref(opts), byref(h)))
        self._h = h
        # the context drt_session_create decided, the KV cache's type and bytes
        self.ctx = int(_lib.lib().drt_session_ctx(self._h))
        self.kv_type = _KV_TYPES[_lib.lib().drt_session_kv_type(self._h)]
        self.kv_bytes = int(_lib.lib().drt_session_kv_bytes(self._h))


    def __repr__(self):
        try:
            pos = self.pos
        except _lib.Closed:
            pos = "closed"
        return f"<diffrt.Session {self.backend} pos {pos}/{self.ctx}>"

    @property
    def pos(self):
        """Positions held in the KV cache (tokens run since the last reset)."""
        with self._exclusive(wait=True) as h:
            return _lib.lib().drt_session_pos(h)

    def reset(self):
        """Empties the KV cache: the next forward starts at position 0."""
        with self._exclusive(wait=True) as h:
            _lib.lib().drt_session_reset(h)

    def forward(self, ids, all_logits=False, out=None):
        """Runs ``ids`` at the current position; returns the logits as float32,
        shape [vocab] (the last token's) or [len(ids), vocab] (all_logits).
        ``out``: an array of that shape and dtype to write into instead.
        Non-finite logits raise Error (Status.NUMERIC) with ``.logits`` set."""
        arr = _check_vocab(as_ids(ids), self.vocab)
        T = len(arr)
        shape = (T, self.vocab) if all_logits else (self.vocab,)
        if out is None:
            out = np.empty(shape, dtype=np.float32)
        elif (not isinstance(out, np.ndarray) or out.dtype != np.float32 or out.shape != shape
              or not out.flags.c_contiguous or not out.flags.writeable):
            raise InvalidArgument(f"out must be a writeable C-contiguous float32 array of shape {shape}")
        with self._exclusive() as h:
            st = _lib.lib().drt_session_forward(h, arr.ctypes.data, _lib.int32(T, "len(ids)"), out.ctypes.data,
                                                int(bool(all_logits)))
            exc, self._observer_error = self._observer_error, None
        if exc is not None:
            raise exc
        if st:
            err = _lib.error(st)
            if st == Status.NUMERIC:
                err.logits = out
            raise err
        return out

    def fallbacks(self):
        """Node runs that fell back to the CPU reference: {op name: count}."""
        L = _lib.lib()
        buf = create_string_buffer(4096)
        with self._exclusive(wait=True) as h:
            L.drt_session_fallbacks(h, buf, _lib.size_t(len(buf), "buffer size"))
        out = {}
        for pair in buf.value.decode("utf-8", "replace").split():
            op, _, count = pair.partition("=")
            out[op] = int(count)
        return out

    def set_observer(self, on_node, want=None):
        """Shows ``on_node(node)`` each node of every following forward as it
        runs (drt_session_set_observer): ``node`` is a :class:`NodeEvent`
        with the op ("MATMUL", ...), the name ("layers.0.attn.q_rope"), the
        layer (-1 outside the layers), a numpy copy of its output and its
        inputs' names and shapes. ``want(op, name, layer)`` -> bool picks the
        nodes (None: every node; each one seen costs a synchronize).
        ``on_node`` None: no observer. An exception in either callback is
        raised by the forward that called it (the forward itself completes).
        The callbacks run inside the forward: they must not use the session."""
        if on_node is None:
            with self._exclusive() as h:
                _lib.check(_lib.lib().drt_session_set_observer(h, None))
                self._observer = None
            return

        def c_want(ctx, op, name, layer):
            try:
                return int(bool(want(_lib.cstr(op), _lib.cstr(name), layer)))
            except BaseException as e:  # noqa: BLE001 - re-raised by forward
                self._observer_error = self._observer_error or e
                return 0

        def c_on_node(ctx, ev):
            try:
                on_node(NodeEvent._from_c(ev.contents))
            except BaseException as e:  # noqa: BLE001 - re-raised by forward
                self._observer_error = self._observer_error or e

        obs = _lib.ObserverC(want=_lib.ObserverWantFn(c_want) if want else _lib.ObserverWantFn(),
                             on_node=_lib.ObserverNodeFn(c_on_node), ctx=None)
        with self._exclusive() as h:
            _lib.check(_lib.lib().drt_session_set_observer(h, byref(obs)))
            # the C side calls these: kept alive with the session, replaced
            # (and the old ones dropped) only while no forward can run them
            self._observer = obs
            self._observer_error = None

    def last_attention(self):
        """The last token's attention over positions 0..pos-1 of the last
        forward, averaged over layers and heads (float32 [pos])."""
        with self._exclusive() as h:
            w = np.empty(self.pos, dtype=np.float32)
            _lib.check(_lib.lib().drt_session_last_attention(h, w.ctypes.data))
        return w

    def keep_attention(self, on=True):
        """on: every following forward keeps what last_attention reads, so
        asking after each forward costs no re-run of it
        (drt_session_keep_attention)."""
        with self._exclusive() as h:
            _lib.check(_lib.lib().drt_session_keep_attention(h, 1 if on else 0))

    def generate(self, prompt, n=None, *, temperature=0.0, top_k=0, top_p=1.0, seed=0, stop=True,
                 on_text=None):
        """Model.generate on this session, from its current position (a new
        or reset session is what `diffrt run` does). The prompt + n must fit
        the session's context; n None: up to 16, as many as fit. The session
        is this thread's for the whole generation (another thread: Busy)."""
        with self._exclusive():
            return self._generate_held(prompt, n, temperature, top_k, top_p, seed, stop, on_text)

    def _generate_held(self, prompt, n, temperature, top_k, top_p, seed, stop, on_text):
        _sampler_opts(self.vocab, temperature, top_k, top_p, seed)
        if n is not None:
            _check_n(n)
        ids, eos, tok = self.model._prompt(prompt, max(1, self.ctx - self.pos))
        if n is None:
            room = self.ctx - self.pos - len(ids)
            n = room if 0 < room < 16 else 16
        n = _check_n(n)
        need = self.pos + len(ids) + n
        if need > self.ctx:
            raise InvalidArgument(f"position {self.pos} + prompt ({len(ids)} tokens) + n {n} exceeds the "
                                  f"session's context {self.ctx}")
        with Sampler(self.vocab, temperature=temperature, top_k=top_k, top_p=top_p, seed=seed) as smp:
            return self._generate(ids, n, smp, eos, stop, tok, on_text)

    def _generate(self, ids, n, sampler, eos, stop, tok, on_text):
        """cmd_run's loop: prefill the whole prompt, then sample; stop at any
        id of eos (unless not stop); forward each kept token; at most n
        tokens."""
        logits = self.forward(ids)
        stream = tok.stream(skip_special=True) if tok is not None else None
        pieces = []

        def emit(piece):
            if piece:
                pieces.append(piece)
                if on_text is not None:
                    on_text(piece)

        out, stopped = [], False
        try:
            for i in range(n):
                t = sampler.sample(logits)
                stop_now = stop and t in eos
                # an id of the model's past the tokenizer's vocabulary (a
                # padded embedding) prints nothing, as in cmd_run: push()
                # would raise for it
                if stream is not None and not stop_now and t < tok._vocab:
                    emit(stream.push(t))
                out.append(t)
                if stop_now:
                    stopped = True
                    break
                if i + 1 == n:
                    break
                self.forward([t], out=logits)
            if stream is not None:
                emit(stream.flush())
        finally:
            if stream is not None:
                stream.close()
        return Generation(ids=out, text="".join(pieces) if tok is not None else None,
                          prompt_ids=list(ids), stopped=stopped)


# ---- sampling ----------------------------------------------------------------


class BatchSession(_lib.Handle):
    """Many sequences over one copy of a model on a backend
    (drt_batch_session): up to ``max_seqs`` sequences ("slots") of
    ``ctx_per_seq`` positions each; a forward runs up to ``max_batch_rows``
    rows, each a token of some sequence at its next position, so decode
    steps of many sequences and prompt chunks of others share a forward and
    read each weight once. backend, device, threads, check_finite,
    settings and kv_type as for :class:`Session`; 0 takes a default
    (diffrt.h).

    One thread at a time, as a Session."""

    _free_fn = "drt_batch_session_free"

    def __init__(self, model, max_seqs=0, ctx_per_seq=0, max_batch_rows=0, backend="cpu", device=None,
                 threads=0, check_finite=False, settings=None, kv_type=None):
        self._h = None
        self.backend, opts = _session_opts(backend, device, 0, threads, check_finite, kv_type)
        bo = _lib.BatchOptsC(max_seqs=_lib.int32(max_seqs, "max_seqs", 0, _lib.DRT_MAX_SEQS),
                             ctx_per_seq=_lib.int32(ctx_per_seq, "ctx_per_seq", 0, _lib.DRT_MAX_CTX),
                             max_batch_rows=_lib.int32(max_batch_rows, "max_batch_rows", 0,
                                                       _lib.DRT_MAX_BATCH_ROWS))
        self.model = model
        self.vocab = model.info.vocab
        h = c_void_p()
        with _Settings(settings) as sh, model._shared() as mh:
            opts.settings = sh.value
            _lib.check(_lib.lib().drt_batch_session_create(mh, byref(opts), byref(bo), byref(h)))
        self._h = h
        _lib.check(_lib.lib().drt_batch_session_get_opts(h, byref(bo)))  # as decided
        self.max_seqs, self.ctx_per_seq, self.max_batch_rows = bo.max_seqs, bo.ctx_per_seq, bo.max_batch_rows
        self.kv_type = _KV_TYPES[_lib.lib().drt_batch_session_kv_type(h)]
        self.kv_bytes = int(_lib.lib().drt_batch_session_kv_bytes(h))

    def __repr__(self):
        return (f"<diffrt.BatchSession {self.backend} {self.max_seqs} seqs x {self.ctx_per_seq} positions, "
                f"{self.max_batch_rows} rows a forward>")

    def forward(self, tokens, seqs, logits=None, pos=None):
        """Runs one forward of rows: ``tokens[i]`` of sequence ``seqs[i]``
        (a sequence's rows contiguous, continuing where it stands);
        ``logits``: which rows return logits (booleans, one a row; None: the
        last row of each sequence's rows); ``pos``: each row's position,
        checked (None: implied). Returns float32 logits, [rows with logits,
        vocab], in row order. A broken rule raises InvalidArgument naming the
        row, and nothing runs."""
        tok = _check_vocab(as_ids(tokens), self.vocab)
        seq = as_ids(seqs)
        n = len(tok)
        if len(seq) != n:
            raise InvalidArgument(f"{n} tokens but {len(seq)} seqs: one sequence a row")
        bad = np.flatnonzero((seq < 0) | (seq >= self.max_seqs))
        if bad.size:
            raise InvalidArgument(f"row {int(bad[0])}: sequence {int(seq[bad[0]])} is not a slot of this session "
                                  f"(0 .. {self.max_seqs - 1})")
        if logits is None:
            flag = np.zeros(n, dtype=np.int8)
            if n:
                flag[-1] = 1
                flag[:-1] = seq[1:] != seq[:-1]
        else:
            flag = np.ascontiguousarray([1 if bool(f) else 0 for f in logits], dtype=np.int8)
            if len(flag) != n:
                raise InvalidArgument(f"{n} tokens but {len(flag)} logits flags: one a row")
        p = None
        if pos is not None:
            p = as_ids(pos)
            if len(p) != n:
                raise InvalidArgument(f"{n} tokens but {len(p)} positions: one a row")
        out = np.empty((int(flag.sum()), self.vocab), dtype=np.float32)
        b = _lib.BatchC(n=_lib.int32(n, "len(tokens)", 0, _lib.DRT_MAX_BATCH_ROWS), token=tok.ctypes.data,
                        seq=seq.ctypes.data, pos=p.ctypes.data if p is not None else None,
                        logits=flag.ctypes.data)
        with self._exclusive() as h:
            st = _lib.lib().drt_batch_forward(h, byref(b), out.ctypes.data if out.size else None)
        if st:
            err = _lib.error(st)
            if st == Status.NUMERIC:
                err.logits = out
            raise err
        return out

    def truncate(self, seq, length=0):
        """Cuts sequence ``seq`` back to ``length`` positions (0 frees its slot)."""
        with self._exclusive() as h:
            _lib.check(_lib.lib().drt_seq_truncate(h, _lib.int32(seq, "seq"), _lib.int32(length, "length")))

    def seq_len(self, seq):
        """Positions sequence ``seq`` holds."""
        s = _lib.int32(seq, "seq", 0, self.max_seqs - 1)
        with self._exclusive(wait=True) as h:
            return int(_lib.lib().drt_seq_len(h, s))


class Sampler(_lib.Handle):
    """drt_sampler: temperature 0 is greedy; top_k 0 and top_p 1 are off.

    Threads: it holds a generator's state, so its draws are taken one at a
    time (sample() on another thread waits for the one in flight, as
    close() does)."""

    _free_fn = "drt_sampler_free"

    def __init__(self, vocab, temperature=0.0, top_k=0, top_p=1.0, seed=0):
        self._h = None
        self.vocab, opts = _sampler_opts(vocab, temperature, top_k, top_p, seed)
        h = c_void_p()
        _lib.check(_lib.lib().drt_sampler_create(byref(opts), self.vocab, byref(h)))
        self._h = h


    def sample(self, logits):
        """The id drawn from ``logits`` (float32 [vocab]; converted if not).
        Logits unfit to sample (NaN, +Inf, all -Inf) raise Error (Status.NUMERIC)."""
        a = np.ascontiguousarray(logits, dtype=np.float32)
        if a.shape != (self.vocab,):
            raise InvalidArgument(f"logits must have shape ({self.vocab},), got {a.shape}")
        with self._exclusive(wait=True) as h:  # one draw at a time: its generator's state
            t = _lib.lib().drt_sampler_sample(h, a.ctypes.data)
        if t < 0:
            # drt_sampler_sample returns no status; with a sampler and logits
            # given, the only failure is logits that are not a distribution
            raise _lib.error(Status.NUMERIC)
        return t
