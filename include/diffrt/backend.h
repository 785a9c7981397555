/* A backend instance of its own, outside any session, and its measured
 * peaks: the streaming bandwidth and GEMM FLOP/s that roofline fractions
 * divide by (`diffrt bench`, `conform --perf`). A session opens the
 * backend it needs itself; this is for measuring the device. */
#ifndef DIFFRT_BACKEND_H
#define DIFFRT_BACKEND_H

#include <stddef.h>

#include "diffrt/diffrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct drt_backend drt_backend;

/* Opens backend `name` (NULL or "": "cpu") on `device` (as
 * drt_session_opts.device: NULL: the "device" setting, else the backend's
 * default; else an index or a name substring) with `threads` worker threads
 * for the CPU backends (0: the cpu.threads setting, else the physical
 * cores) and `settings` (NULL: none; else read now, as drt_session_create
 * reads them). An unknown name is DRT_ERR_INVALID_ARG, a backend that is
 * missing here DRT_ERR_UNAVAILABLE with the reason. */
drt_status drt_backend_open_settings(const char *name, const char *device, int threads, const drt_settings *settings,
                                     drt_backend **out);
void drt_backend_close(drt_backend *be); /* NULL: nothing */
/* The device index it runs on, as drt_backend_device_name counts them (on
 * the default, the device the backend chose); -1 when the backend does not
 * say, or be is NULL. */
int drt_backend_device(const drt_backend *be);
/* The name of the device as this instance runs on it: drt_backend_device_name
 * of its device, except that the cpu backend's names the thread count and
 * modes this instance was opened with. DRT_ERR_INVALID_ARG without be or a
 * buffer. */
drt_status drt_backend_instance_name(const drt_backend *be, char *buf, size_t n);

typedef struct {
    int runs;               /* timed samples after a warm-up; the best is kept (0: 5) */
    double min_sample_s;    /* a sample repeats the kernel until it lasts this long (0: 0.02 s) */
    size_t max_bytes;       /* the most memory one probe allocates (0: 1 GiB) */
    int gemm_max;           /* the largest GEMM side tried (0: 4096) */
    double min_run_s;       /* a probe grows until one run lasts this long (0: 2 ms for the
                               bandwidth probes, 10 ms for the GEMM) */
    drt_dtype weight_dtype; /* the GEMV probe's and second GEMM's weights (a model's: f16 usually) */
    int host_threads;       /* > 0 and a host-memory backend: also a host read loop on this many
                               threads, like bench/membw.c; 0: not */
} drt_peak_opts;

/* Each probe's best sample; 0 when it was not run or the backend lacks the op. */
typedef struct {
    double gbytes_per_s; /* the best of the bandwidth probes */
    double gflops;       /* the best of the GEMM probes */
    char bw_probe[96];   /* which probe gave gbytes_per_s, with its size */
    char flops_probe[96];
    double add_gbps;  /* ADD f32: two inputs read, one output written */
    double gemv_gbps; /* MATMUL (1,K) x (N,K)^T, weight_dtype: the decode kernel */
    double host_gbps; /* host read loop (host-memory backends only) */
    double gemm_f32_gflops;
    double gemm_w_gflops; /* x f32 times weight_dtype weights: the prefill kernel */
    int runs;
} drt_peak;

/* Streaming bandwidth and GEMM FLOP/s of be, each the best of o->runs steady
 * samples after a warm-up, so that a kernel of a real workload never beats
 * them by much (a best-of peak under-measures less than a median). Each
 * probe grows its size (doubling, within max_bytes / gemm_max) until one run
 * of its kernel lasts a few milliseconds, so launch overhead does not cap
 * a fast device; a slow one (the reference) gets a smaller GEMM instead, so
 * the measurement stays short. The napkin math is the op table's: bytes =
 * every input read once plus the output written once; FLOPs = 2MNK.
 * o NULL: defaults. Takes seconds (the reference: tens of seconds). */
drt_status drt_measure_peak(drt_backend *be, const drt_peak_opts *o, drt_peak *out);

#ifdef __cplusplus
}
#endif
#endif
