"""Loading libdiffrt.so and declaring its C API with ctypes.

Everything here mirrors include/diffrt/diffrt.h and include/diffrt/tokenizer.h
(and what tools.py calls of backend.h and quantize.h): the structs field for
field, and argtypes/restype for every function the
package calls. The library is loaded on first use (so ``import diffrt`` works
without it), from the environment variable DIFFRT_LIBRARY when set, else
from the package's own ``lib/`` (where ``pip install`` puts it), else
wherever the dynamic linker finds ``libdiffrt.so``.
"""

import contextlib
import ctypes
import ctypes.util
import enum
import operator
import os
import threading

from ctypes import (
    CFUNCTYPE,
    POINTER,
    Structure,
    c_char,
    c_char_p,
    c_double,
    c_float,
    c_int,
    c_int32,
    c_int64,
    c_size_t,
    c_ubyte,
    c_uint64,
    c_void_p,
)

# ---- the C API's types ----------------------------------------------------


class Status(enum.IntEnum):
    """drt_status."""

    OK = 0
    INVALID_ARG = 1
    IO = 2
    FORMAT = 3
    UNSUPPORTED = 4
    UNAVAILABLE = 5
    OOM = 6
    BACKEND = 7
    NUMERIC = 8
    BUSY = 9


DRT_MAX_SEQS = 4096
DRT_MAX_BATCH_ROWS = 65536
DRT_MAX_CTX = 1 << 24

c_enum = c_int  # C enums are int-sized on every ABI diffrt targets


class BackendInfoC(Structure):
    _fields_ = [
        ("name", c_char_p),
        ("compiled_in", c_int),
        ("available", c_int),
        ("reason", c_char_p),
        ("device_count", c_int),
        ("builtin", c_int),
        ("module", c_char_p),
    ]


class DevicePropsC(Structure):
    _fields_ = [
        ("name", c_char * 256),
        ("vendor", c_char * 64),
        ("driver", c_char * 128),
        ("api_version", c_char * 64),
        ("type", c_char * 16),
        ("memory_bytes", c_uint64),
        ("subgroup_size", c_int),
        ("fp16", c_int),
        ("bf16", c_int),
    ]


class ModelInfoC(Structure):
    _fields_ = [
        ("arch", c_enum),
        ("layout", c_enum),
        ("arch_name", c_char_p),
        ("layout_name", c_char_p),
        ("weight_dtype", c_enum),
        ("n_params", c_int64),
        ("vocab", c_int),
        ("dim", c_int),
        ("ffn", c_int),
        ("n_layers", c_int),
        ("n_heads", c_int),
        ("n_kv_groups", c_int),
        ("kv_m", c_int),
        ("dk", c_int),
        ("dv", c_int),
        ("max_ctx", c_int),
        ("tied_embeddings", c_int),
        ("rope_scaling", c_char_p),
        ("bos_id", c_int),
        ("eos_id", c_int),
        ("lambda_", POINTER(c_float)),
        ("lambda_init", POINTER(c_float)),
        ("embed_dtype", c_enum),
        ("subnorm", c_int),
        ("out_scale", c_int),
    ]


class SessionOptsC(Structure):
    _fields_ = [
        ("backend", c_char_p),
        ("device", c_char_p),
        ("max_ctx", c_int),
        ("threads", c_int),
        ("check_finite", c_int),
        ("settings", c_void_p),  # const drt_settings *
        ("kv_type", c_char_p),
    ]


class NodeTensorC(Structure):
    """drt_node_tensor (a session observer's view of a node's output or input)."""

    _fields_ = [
        ("name", c_char_p),
        ("type", c_enum),
        ("nd", c_int),
        ("ne", c_int64 * 4),
        ("data", c_void_p),
    ]


class NodeEventC(Structure):
    """drt_node_event."""

    _fields_ = [
        ("op", c_char_p),
        ("layer", c_int),
        ("p0", c_int),
        ("out", NodeTensorC),
        ("n_src", c_int),
        ("src", NodeTensorC * 5),
        ("seconds", c_double),
        ("fallback", c_int),
    ]


# drt_observer's callbacks: want(ctx, op, name, layer), on_node(ctx, event)
ObserverWantFn = CFUNCTYPE(c_int, c_void_p, c_char_p, c_char_p, c_int)
ObserverNodeFn = CFUNCTYPE(None, c_void_p, POINTER(NodeEventC))


class ObserverC(Structure):
    """drt_observer."""

    _fields_ = [
        ("want", ObserverWantFn),
        ("on_node", ObserverNodeFn),
        ("ctx", c_void_p),
    ]


class BatchOptsC(Structure):
    """drt_batch_opts."""

    _fields_ = [
        ("max_seqs", c_int),
        ("ctx_per_seq", c_int),
        ("max_batch_rows", c_int),
    ]


class BatchC(Structure):
    """drt_batch: the rows of one forward (addresses of int32 / int8 arrays)."""

    _fields_ = [
        ("n", c_int),
        ("token", c_void_p),
        ("seq", c_void_p),
        ("pos", c_void_p),
        ("logits", c_void_p),
    ]


class SamplerOptsC(Structure):
    _fields_ = [
        ("temperature", c_float),
        ("top_k", c_int),
        ("top_p", c_float),
        ("seed", c_uint64),
    ]


class TokenizerStreamC(Structure):
    _fields_ = [
        ("pending", c_ubyte * 8),
        ("n_pending", c_int),
        ("n_tokens", c_int),
    ]


# include/diffrt/backend.h
class PeakOptsC(Structure):
    _fields_ = [
        ("runs", c_int),
        ("min_sample_s", c_double),
        ("max_bytes", c_size_t),
        ("gemm_max", c_int),
        ("min_run_s", c_double),
        ("weight_dtype", c_enum),
        ("host_threads", c_int),
    ]


class PeakC(Structure):
    _fields_ = [
        ("gbytes_per_s", c_double),
        ("gflops", c_double),
        ("bw_probe", c_char * 96),
        ("flops_probe", c_char * 96),
        ("add_gbps", c_double),
        ("gemv_gbps", c_double),
        ("host_gbps", c_double),
        ("gemm_f32_gflops", c_double),
        ("gemm_w_gflops", c_double),
        ("runs", c_int),
    ]


# include/diffrt/quantize.h
QuantizeProgressFn = CFUNCTYPE(None, c_void_p, c_int, c_int, c_char_p, c_int64, c_int64)
QuantizeNoteFn = CFUNCTYPE(None, c_void_p, c_char_p)


class QuantizeOptsC(Structure):
    _fields_ = [
        ("progress", QuantizeProgressFn),
        ("ctx", c_void_p),
        ("force", c_int),
        ("note", QuantizeNoteFn),
    ]


class QuantizeResultC(Structure):
    _fields_ = [
        ("n_tensors", c_int),
        ("n_quantized", c_int),
        ("bytes_in", c_uint64),
        ("bytes_out", c_uint64),
    ]


# name: (restype, argtypes). Opaque handles (drt_model *, ...) are c_void_p;
# buffers the caller owns (ids, logits) are passed as addresses (c_void_p).
_PROTOTYPES = {
    "drt_version": (c_char_p, []),
    "drt_git_commit": (c_char_p, []),
    "drt_status_str": (c_char_p, [c_enum]),
    "drt_last_error": (c_char_p, []),
    "drt_dtype_name": (c_char_p, [c_enum]),
    # backends
    "drt_backend_count": (c_int, []),
    "drt_backend_get_info": (c_enum, [c_int, POINTER(BackendInfoC)]),
    "drt_backend_device_name": (c_enum, [c_int, c_int, c_char_p, c_size_t]),
    "drt_backend_device_props": (c_enum, [c_int, c_int, POINTER(DevicePropsC)]),
    # models
    "drt_model_load": (c_enum, [c_char_p, POINTER(c_void_p)]),
    "drt_model_free": (None, [c_void_p]),
    "drt_free": (None, [c_void_p]),
    "drt_session_ctx": (c_int, [c_void_p]),
    "drt_session_kv_type": (c_enum, [c_void_p]),
    "drt_session_kv_bytes": (c_size_t, [c_void_p]),
    "drt_batch_session_kv_type": (c_enum, [c_void_p]),
    "drt_batch_session_kv_bytes": (c_size_t, [c_void_p]),
    "drt_model_get_info": (c_enum, [c_void_p, POINTER(ModelInfoC)]),
    "drt_model_eos_ids": (c_int, [c_void_p, POINTER(c_int32), c_int]),
    # sessions
    "drt_session_create": (c_enum, [c_void_p, POINTER(SessionOptsC), POINTER(c_void_p)]),
    # settings (docs/environment.md)
    "drt_settings_create": (c_enum, [POINTER(c_void_p)]),
    "drt_settings_free": (None, [c_void_p]),
    "drt_settings_set": (c_enum, [c_void_p, c_char_p, c_char_p]),
    "drt_session_free": (None, [c_void_p]),
    "drt_session_forward": (c_enum, [c_void_p, c_void_p, c_int, c_void_p, c_int]),
    "drt_session_reset": (None, [c_void_p]),
    "drt_session_pos": (c_int, [c_void_p]),
    "drt_session_fallbacks": (c_int, [c_void_p, c_char_p, c_size_t]),
    "drt_session_last_attention": (c_enum, [c_void_p, c_void_p]),
    "drt_session_set_observer": (c_enum, [c_void_p, POINTER(ObserverC)]),
    "drt_session_keep_attention": (c_enum, [c_void_p, c_int]),
    # a backend instance and its peaks (backend.h); quantizing (quantize.h)
    "drt_backend_open_settings": (c_enum, [c_char_p, c_char_p, c_int, c_void_p, POINTER(c_void_p)]),
    "drt_backend_close": (None, [c_void_p]),
    "drt_backend_device": (c_int, [c_void_p]),
    "drt_measure_peak": (c_enum, [c_void_p, POINTER(PeakOptsC), POINTER(PeakC)]),
    "drt_quantize_model": (c_enum, [c_char_p, c_enum, c_char_p, POINTER(QuantizeOptsC), POINTER(QuantizeResultC)]),
    # batch sessions
    "drt_batch_session_create": (
        c_enum, [c_void_p, POINTER(SessionOptsC), POINTER(BatchOptsC), POINTER(c_void_p)]),
    "drt_batch_session_free": (None, [c_void_p]),
    "drt_batch_session_get_opts": (c_enum, [c_void_p, POINTER(BatchOptsC)]),
    "drt_batch_forward": (c_enum, [c_void_p, POINTER(BatchC), c_void_p]),
    "drt_seq_truncate": (c_enum, [c_void_p, c_int, c_int]),
    "drt_seq_len": (c_int, [c_void_p, c_int]),
    # sampling
    "drt_sampler_create": (c_enum, [POINTER(SamplerOptsC), c_int, POINTER(c_void_p)]),
    "drt_sampler_free": (None, [c_void_p]),
    "drt_sampler_sample": (c_int, [c_void_p, c_void_p]),
    # tokenizer
    "drt_tokenizer_load": (c_enum, [c_char_p, POINTER(c_void_p)]),
    "drt_tokenizer_load_json": (c_enum, [c_char_p, c_size_t, c_char_p, POINTER(c_void_p)]),
    "drt_tokenizer_free": (None, [c_void_p]),
    "drt_tokenizer_vocab_size": (c_int, [c_void_p]),
    "drt_tokenizer_encode": (
        c_enum,
        [c_void_p, c_char_p, c_size_t, c_int, POINTER(POINTER(c_int32)), POINTER(c_int)],
    ),
    "drt_tokenizer_encode_max": (
        c_enum,
        [c_void_p, c_char_p, c_size_t, c_int, c_int, POINTER(POINTER(c_int32)), POINTER(c_int)],
    ),
    "drt_tokenizer_decode": (
        c_enum,
        [c_void_p, c_void_p, c_int, c_int, POINTER(c_void_p), POINTER(c_size_t)],
    ),
    "drt_tokenizer_id_to_token": (c_char_p, [c_void_p, c_int32]),
    "drt_tokenizer_token_to_id": (c_int32, [c_void_p, c_char_p]),
    "drt_tokenizer_is_special": (c_int, [c_void_p, c_int32]),
    "drt_tokenizer_bos_id": (c_int32, [c_void_p]),
    "drt_tokenizer_eos_id": (c_int32, [c_void_p]),
    "drt_tokenizer_stream_init": (None, [POINTER(TokenizerStreamC)]),
    "drt_tokenizer_stream_push": (
        c_enum,
        [
            c_void_p,
            POINTER(TokenizerStreamC),
            c_int32,
            c_int,
            POINTER(c_void_p),
            POINTER(c_size_t),
            POINTER(c_size_t),
        ],
    ),
    "drt_tokenizer_stream_flush": (
        c_enum,
        [
            c_void_p,
            POINTER(TokenizerStreamC),
            POINTER(c_void_p),
            POINTER(c_size_t),
            POINTER(c_size_t),
        ],
    ),
}


# ---- errors -----------------------------------------------------------------


class Error(RuntimeError):
    """A diffrt call failed.

    ``status`` is the drt_status (a :class:`Status`), ``status_name`` its
    drt_status_str() ("invalid argument", "i/o error", ...), ``message`` the
    library's drt_last_error() text. ``str(err)`` is "status_name: message".
    """

    def __init__(self, status, message, status_name=None):
        try:
            status = Status(status)
        except ValueError:
            status = int(status)
        if status_name is None:
            status_name = status_str(status)
        self.status = status
        self.status_name = status_name
        self.message = message
        super().__init__(f"{status_name}: {message}")


Error.__module__ = "diffrt"


class InvalidArgument(Error, ValueError):
    """A caller's mistake (status INVALID_ARG): an argument the package
    rejected before any C call, or one the library refused (every C call
    that returns DRT_ERR_INVALID_ARG raises this). A ValueError, and an
    :class:`Error`."""

    def __init__(self, message):
        super().__init__(Status.INVALID_ARG, message, status_name="invalid argument")


class ArgumentOverflow(InvalidArgument, OverflowError):
    """An integer that does not fit the C type it is passed as (ctypes would
    silently keep its low bits: ctx=2**32+5 was 5). Also an OverflowError."""


class Closed(InvalidArgument):
    """A call on an object after its close() (or on one never made): nothing
    was done. An InvalidArgument, so a ValueError too."""


class Busy(Error):
    """The session is in use by another thread (Status.BUSY): nothing was done."""

    def __init__(self, message="session is in use by another thread"):
        super().__init__(Status.BUSY, message, status_name="busy")


for _c in (InvalidArgument, ArgumentOverflow, Closed, Busy):
    _c.__module__ = "diffrt"


class LibraryNotFound(OSError):
    """libdiffrt.so could not be found or loaded."""


LibraryNotFound.__module__ = "diffrt"
Status.__module__ = "diffrt"


def status_str(status):
    return lib().drt_status_str(int(status)).decode("utf-8", "replace")


def last_error():
    msg = lib().drt_last_error()
    return msg.decode("utf-8", "replace") if msg else ""


def error(status, message=None):
    """The Error for a failed call (message: drt_last_error() unless given):
    an InvalidArgument for DRT_ERR_INVALID_ARG, a Busy for DRT_ERR_BUSY."""
    message = last_error() if message is None else message
    if status == Status.INVALID_ARG:
        return InvalidArgument(message)
    if status == Status.BUSY:
        return Busy(message)
    return Error(status, message)


def check(status):
    """Raises Error when a drt_status is not DRT_OK."""
    if status != 0:
        raise error(status)


# ---- arguments on their way to C -------------------------------------------
# ctypes converts a Python int to c_int by keeping its low bits and a str or
# bytes to char * up to its first NUL, so every argument goes through one of
# these first: an int that does not fit the C type is ArgumentOverflow, a
# NUL inside a string is InvalidArgument, the wrong type TypeError.


def _int(v, name, ctype, cmin, cmax, lo, hi):
    if isinstance(v, bool) or type(v).__name__ == "bool_":
        raise TypeError(f"{name} wants an integer, not a bool")
    try:
        i = operator.index(v)  # int, numpy integers; not float or str
    except TypeError:
        raise TypeError(f"{name} wants an integer, not {type(v).__name__}") from None
    if not cmin <= i <= cmax:
        raise ArgumentOverflow(f"{name} {i} does not fit in a C {ctype} [{cmin}, {cmax}]")
    lo = cmin if lo is None else lo
    hi = cmax if hi is None else hi
    if not lo <= i <= hi:
        raise InvalidArgument(f"{name} wants an integer in [{lo}, {hi}], got {i}")
    return i


_SIZE_MAX = (1 << (8 * ctypes.sizeof(c_size_t))) - 1


def int32(v, name, lo=None, hi=None):
    """v as a C int / int32_t (optionally within [lo, hi])."""
    return _int(v, name, "int32", -(1 << 31), (1 << 31) - 1, lo, hi)


def uint64(v, name, lo=None, hi=None):
    return _int(v, name, "uint64", 0, (1 << 64) - 1, lo, hi)


def size_t(v, name, lo=None, hi=None):
    return _int(v, name, "size_t", 0, _SIZE_MAX, lo, hi)


def cstring(v, name):
    """A str (as UTF-8) or bytes for a char * argument: no NUL inside."""
    if isinstance(v, str):
        b = v.encode("utf-8")
    elif isinstance(v, (bytes, bytearray)):
        b = bytes(v)
    else:
        raise TypeError(f"{name} wants a str, not {type(v).__name__}")
    if b"\0" in b:
        raise InvalidArgument(f"{name} {v!r} holds a NUL character (C would stop there)")
    return b


def cpath(v, name="path"):
    """A path (str, bytes, os.PathLike) for a char * argument: no NUL inside
    (C would read "model" + NUL + "x" as the directory "model")."""
    try:
        b = os.fsencode(os.fspath(v))
    except TypeError:
        raise TypeError(f"{name} wants a path (str, bytes or os.PathLike), not {type(v).__name__}") from None
    if b"\0" in b:
        raise InvalidArgument(f"{name} {v!r} holds a NUL character (C would stop there)")
    return b


# ---- loading ------------------------------------------------------------------

_lock = threading.Lock()
_lib = None
_path = None
_free = None


# pip install puts libdiffrt.so, its backend modules beside it (where the
# core looks first) and the CLI inside the package (cmake/wheel.cmake)
PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
BUNDLED_LIBRARY = os.path.join(PACKAGE_DIR, "lib", "libdiffrt.so")
BUNDLED_CLI = os.path.join(PACKAGE_DIR, "bin", "diffrt")


def _candidates():
    env = os.environ.get("DIFFRT_LIBRARY")
    if env:
        return [env]
    if os.path.isfile(BUNDLED_LIBRARY):
        return [BUNDLED_LIBRARY]
    found = ctypes.util.find_library("diffrt")
    # then plain dlopen: LD_LIBRARY_PATH and ld.so.cache
    return ([found] if found else []) + ["libdiffrt.so"]


def _load():
    global _lib, _path, _free
    env = os.environ.get("DIFFRT_LIBRARY")
    handle = None
    errors = []
    for name in _candidates():
        try:
            handle = ctypes.CDLL(name)
            break
        except OSError as e:
            errors.append(str(e))
    if handle is None:
        if env:
            raise LibraryNotFound(f"diffrt: cannot load DIFFRT_LIBRARY={env}: {errors[-1]}")
        if os.path.isfile(BUNDLED_LIBRARY):
            raise LibraryNotFound(f"diffrt: cannot load {BUNDLED_LIBRARY}: {errors[-1]}")
        raise LibraryNotFound(
            "diffrt: libdiffrt.so not found: not in the package (install it with pip), "
            "so set DIFFRT_LIBRARY to its path (e.g. DIFFRT_LIBRARY=/path/to/build/libdiffrt.so)"
        )
    for fname, (restype, argtypes) in _PROTOTYPES.items():
        try:
            fn = getattr(handle, fname)
        except AttributeError:
            raise LibraryNotFound(
                f"diffrt: {handle._name} does not export {fname}: not a libdiffrt.so "
                "of this version (point DIFFRT_LIBRARY at a matching build)"
            ) from None
        fn.restype = restype
        fn.argtypes = argtypes
    # memory the library malloc'd (encode's ids, decode's text, stream
    # buffers) goes back through the library's own drt_free
    free = handle.drt_free
    _path = handle._name
    _free = free
    _lib = handle


def lib():
    """The loaded library (loads it on first use)."""
    if _lib is None:
        with _lock:
            if _lib is None:
                _load()
    return _lib


def library_path():
    """The path (or name) libdiffrt was loaded from."""
    lib()
    return _path


def cli_path():
    """The diffrt executable that goes with this package: DIFFRT_CLI when set,
    else the one pip installed inside the package, else the one beside
    DIFFRT_LIBRARY (a build directory). None when there is none."""
    env = os.environ.get("DIFFRT_CLI")
    if env:
        return env
    if os.path.isfile(BUNDLED_CLI):
        return BUNDLED_CLI
    env = os.environ.get("DIFFRT_LIBRARY")
    if env:
        beside = os.path.join(os.path.dirname(os.path.abspath(env)), "diffrt")
        if os.path.isfile(beside) and os.access(beside, os.X_OK):
            return beside
    return None


def free(ptr):
    """drt_free() for memory the library malloc'd."""
    lib()
    if ptr:
        _free(ptr)


def cstr(b):
    """A C string (bytes or None) from the library as str."""
    return None if b is None else b.decode("utf-8", "replace")


class Handle:
    """A library object a Python object owns: freed by close(), at the end of
    a with block, or when the Python object is collected. Subclasses name
    their drt_*_free function (or override _release) and set self._h once
    the object exists. Every class that owns a native handle is one of
    these, so one mechanism keeps every handle from being freed under a call.

    Calls: every C call that passes the handle runs inside ``with
    self._shared() as h`` (any number of threads at once: models,
    tokenizers) or ``with self._exclusive() as h`` (one thread at a time,
    re-entrant on that thread: another thread gets :class:`Busy`, or waits
    for it with wait=True: sessions, samplers, stream decoders). A call
    after close() started raises :class:`Closed`.

    close(): marks the object closed (new calls raise Closed, and threads
    waiting to enter wake up to raise it), waits for the calls in flight on
    other threads to return, then frees the handle, once. Called from inside
    one of the object's own calls on the same thread (a callback: an
    observer, on_text), it cannot wait for that call: the handle is freed
    when the thread's last call on it returns, so close() never deadlocks
    and never frees under a call."""

    _free_fn = None  # e.g. "drt_model_free"
    _h = None

    def __new__(cls, *args, **kwargs):
        self = super().__new__(cls)
        self._cv = threading.Condition()
        self._calls = {}  # thread id -> depth of its calls in flight
        self._owner = None  # the thread inside _exclusive() calls
        self._depth = 0
        self._closed = False
        self._free_on_leave = False  # closed from inside a call: the last to leave frees
        return self

    def _others_in(self, me):
        return any(t != me for t in self._calls)

    def _enter(self, me):
        h = self._handle()
        self._calls[me] = self._calls.get(me, 0) + 1
        return h

    def _leave(self, me, exclusive):
        h = None
        with self._cv:
            d = self._calls[me] - 1
            if d:
                self._calls[me] = d
            else:
                del self._calls[me]
            if exclusive:
                self._depth -= 1
                if not self._depth:
                    self._owner = None
            if self._free_on_leave and not self._calls:
                self._free_on_leave = False
                h, self._h = self._h, None
            self._cv.notify_all()
        if h:
            self._release(h)

    @contextlib.contextmanager
    def _shared(self):
        me = threading.get_ident()
        with self._cv:
            if self._owner not in (None, me):  # an _exclusive() call of another thread
                self._cv.wait_for(lambda: self._closed or self._owner in (None, me))
            h = self._enter(me)
        try:
            yield h
        finally:
            self._leave(me, False)

    @contextlib.contextmanager
    def _exclusive(self, wait=False):
        me = threading.get_ident()
        with self._cv:
            self._handle()  # closed: Closed, before Busy
            if self._others_in(me):
                if not wait:
                    raise Busy()
                self._cv.wait_for(lambda: self._closed or not self._others_in(me))
            h = self._enter(me)
            self._owner = me
            self._depth += 1
        try:
            yield h
        finally:
            self._leave(me, True)

    def close(self):
        me = threading.get_ident()
        with self._cv:
            self._closed = True
            self._cv.notify_all()  # threads waiting to enter: Closed
            if me in self._calls:
                # inside a call of its own (a callback): freed when it returns
                self._free_on_leave = bool(self._h)
                return
            self._cv.wait_for(lambda: not self._calls)
            h, self._h = self._h, None
        if h:
            self._release(h)

    def _release(self, h):
        """Frees the native handle (no call is in flight)."""
        getattr(lib(), self._free_fn)(h)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass

    def _handle(self):
        if self._closed or not self._h:
            raise Closed(f"operation on a closed {type(self).__name__}")
        return self._h
