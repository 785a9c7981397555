"""What diffrt's commands use beyond models and sessions: quantizing a model
(include/diffrt/quantize.h, diffrt quantize) and a backend's measured peaks
(include/diffrt/backend.h, diffrt bench's roofline)."""

from ctypes import byref, c_void_p
from dataclasses import dataclass
from typing import Optional

from . import _lib
from .model import _Settings

_DTYPES = {"f32": 0, "f16": 1, "bf16": 2, "q8_0": 4, "q4_0": 5}


@dataclass(frozen=True)
class QuantizeResult:
    n_tensors: int    # written: the tensors the model reads
    n_quantized: int  # of them quantized
    bytes_in: int     # their data read
    bytes_out: int    # and written


def quantize(model_dir, type, out_dir, progress=None, force=False, note=None):
    """Quantizes the model directory model_dir into out_dir, whole or not at
    all (drt_quantize_model): out_dir/model.safetensors with the tensors the
    model reads, its projection weights quantized to type ("q8_0" or
    "q4_0"), and config.json, tokenizer.json, generation_config.json and
    tokenizer_config.json copied (those present); what the loader skips
    (optimizer state, a tied model's lm_head copy) is not written.

    Everything is checked before anything is written: model_dir must load
    as diffrt.Model loads it; out_dir must be missing or an empty directory
    (force=True: any directory, replaced as a whole), not a symbolic link,
    not model_dir however spelled nor a directory containing it. A refusal
    raises diffrt.Error with status Status.INVALID_ARG and changes nothing.
    The new directory is written beside out_dir under a temporary name,
    loaded back, and only then moved into place; on any failure (a NaN
    weight, a full disk) the temporary directory is removed and out_dir is
    as it was.

    progress(done, n, name, rows, cols) is called after each tensor
    quantized, note(line) with each notice (a temporary directory that a
    killed run left, removed); an exception either raises stops nothing in
    C and is raised after it returns."""
    if type not in ("q8_0", "q4_0"):
        raise _lib.InvalidArgument(f"type must be q8_0 or q4_0, not {type!r}")
    src, dst = _lib.cpath(model_dir, "model_dir"), _lib.cpath(out_dir, "out_dir")
    raised = []

    def c_progress(ctx, done, n, name, rows, cols):
        if progress is None or name is None or raised:
            return
        try:
            progress(done, n, name.decode("utf-8", "replace"), rows, cols)
        except BaseException as e:  # noqa: B036 - re-raised below, outside C
            raised.append(e)

    def c_note(ctx, line):
        if note is None or raised:
            return
        try:
            note(line.decode("utf-8", "replace"))
        except BaseException as e:  # noqa: B036 - re-raised below, outside C
            raised.append(e)

    fn, nfn = _lib.QuantizeProgressFn(c_progress), _lib.QuantizeNoteFn(c_note)
    opts = _lib.QuantizeOptsC(progress=fn, ctx=None, force=1 if force else 0, note=nfn)
    res = _lib.QuantizeResultC()
    st = _lib.lib().drt_quantize_model(src, _DTYPES[type], dst, byref(opts), byref(res))
    if raised:
        raise raised[0]
    _lib.check(st)
    return QuantizeResult(res.n_tensors, res.n_quantized, res.bytes_in, res.bytes_out)


@dataclass(frozen=True)
class Peak:
    device: int            # the device index measured on (-1: the backend did not say)
    gbytes_per_s: float    # the best bandwidth probe
    gflops: float          # the best GEMM probe
    bw_probe: str          # which probe gave gbytes_per_s, with its size
    flops_probe: str
    add_gbps: float        # ADD f32
    gemv_gbps: float       # MATMUL (1,K) x (N,K)^T in weight_dtype: the decode kernel
    host_gbps: float       # host read loop (host-memory backends, host_threads > 0)
    gemm_f32_gflops: float
    gemm_w_gflops: float   # f32 x weight_dtype: the prefill kernel
    runs: int


def measure_peak(backend="cpu", device=None, threads=0, settings=None, *, weight_dtype="f16", runs=0,
                 min_sample_s=0.0, max_bytes=0, gemm_max=0, min_run_s=0.0, host_threads=0):
    """The streaming bandwidth and GEMM FLOP/s of a backend instance of its
    own, each the best of steady samples of microbenchmarks (drt_measure_peak;
    0 arguments: the C defaults). Takes seconds; tens of them on "ref"."""
    if weight_dtype not in ("f32", "f16", "bf16"):
        raise _lib.InvalidArgument(f"weight_dtype must be f32, f16 or bf16, not {weight_dtype!r}")
    opts = _lib.PeakOptsC(
        runs=_lib.int32(runs, "runs", 0),
        min_sample_s=float(min_sample_s),
        max_bytes=_lib.size_t(max_bytes, "max_bytes"),
        gemm_max=_lib.int32(gemm_max, "gemm_max", 0),
        min_run_s=float(min_run_s),
        weight_dtype=_DTYPES[weight_dtype],
        host_threads=_lib.int32(host_threads, "host_threads", 0),
    )
    name = _lib.cstring(backend or "cpu", "backend")
    dev: Optional[bytes] = None if device is None else _lib.cstring(str(device), "device")
    L = _lib.lib()
    with _Settings(settings) as sh:
        be = c_void_p()
        _lib.check(L.drt_backend_open_settings(name, dev, _lib.int32(threads, "threads", 0), sh, byref(be)))
    try:
        pk = _lib.PeakC()
        _lib.check(L.drt_measure_peak(be, byref(opts), byref(pk)))
        return Peak(L.drt_backend_device(be), pk.gbytes_per_s, pk.gflops, _lib.cstr(pk.bw_probe),
                    _lib.cstr(pk.flops_probe), pk.add_gbps, pk.gemv_gbps, pk.host_gbps, pk.gemm_f32_gflops,
                    pk.gemm_w_gflops, pk.runs)
    finally:
        L.drt_backend_close(be)
