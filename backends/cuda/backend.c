/* The CUDA backend (docs/design.md section 5): devices, device buffers, node
 * dispatch onto the kernels of cuda_ops.h, and CUDA-graph replay.
 *
 * Memory: every buffer is cudaMalloc'd device memory (never managed memory);
 * buf->handle is the device address, buf->host stays NULL, so the dispatcher
 * never touches it from the CPU. A view shares its base's buffer at
 * t->offs. Activations and the KV cache therefore stay on the device for a
 * whole forward pass; only token ids go in (upload) and logits come out
 * (download).
 *
 * Ordering: one non-blocking stream per backend instance carries every
 * kernel, cuBLAS call and copy. upload/download wait for their copy (the
 * host buffer may be reused right after they return); compute only
 * enqueues; synchronize waits and reports asynchronous errors.
 *
 * CUDA graphs: compute(nodes, n) is called by the dispatcher for each run of
 * supported nodes, with the same node array on every decode step. A key is
 * built from the nodes (op, shapes, parameters, device addresses of output
 * and inputs): the first time a key is seen the nodes run eagerly (this also
 * warms up cuBLAS), the second time they are captured into a CUDA graph
 * (stream capture), and from then on the graph is replayed with one
 * cudaGraphLaunch. What changes between steps is the rows tensor (each row's
 * cache base and position, drt_exec): the plan uploads it before the run, so
 * it is not baked into the graph; kernels read it from device memory and size
 * their grids from static shapes (T, cache rows), so the graph is valid at
 * every position and for every mix of sequences. The scratch
 * buffer is part of what a graph captures: when it must grow, every cached
 * graph is dropped. DIFFRT_CUDA_GRAPH=0 turns graphs off; DIFFRT_CUDA_VERBOSE=1
 * prints how many runs were eager, captured and replayed when the backend
 * instance closes. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_ops.h"
#include "drt_error.h"
#include "drt_module.h"
#include "drt_graph.h"
#include "drt_settings.h"

#define MIN_CC_MAJOR 8 /* kernels are built for sm_80 and sm_90a */
#define BLAS_WS_BYTES ((size_t)32 << 20)
#define N_GRAPHS 8 /* cached graphs per backend instance (LRU) */

/* Everything a captured node depends on. Compared with memcmp: always
 * memset before filling. */
typedef struct {
    const drt_tensor *node;
    int32_t op, type;
    int64_t ne[DRT_MAX_DIMS];
    float fp[4];
    int32_t ip[4];
    const void *dst;
    const void *src[DRT_MAX_SRC];
    int32_t stype[DRT_MAX_SRC];
    int64_t sne[DRT_MAX_SRC][DRT_MAX_DIMS];
} node_key;

typedef struct {
    int n; /* nodes; 0 = empty slot */
    node_key *keys;
    int no_graph;         /* capture failed once: always run eagerly */
    cudaGraphExec_t exec; /* NULL until the second sighting */
    unsigned long long used;
} graph_entry;

typedef struct {
    cu_ctx k; /* what the kernels see */
    int graphs;
    graph_entry cache[N_GRAPHS];
    unsigned long long tick;
    node_key *cur; /* keys of the current compute() call */
    int cur_cap;
    int verbose; /* DIFFRT_CUDA_VERBOSE=1: one stats line on stderr at shutdown */
    long long n_eager, n_captured, n_replayed, n_capture_failed;
    /* large downloads (a batch's logits) go through two pinned chunks, the
     * device copying one while the host copies the other out: a copy
     * straight into pageable memory ran at a few GB/s (cuda.staged) */
    int staged;
    void *stage[2];
    cudaEvent_t stage_ev[2];
} cuda_state;

#define STAGE_CHUNK ((size_t)2 << 20)
#define STAGE_MIN ((size_t)1 << 20) /* smaller downloads are copied directly */

static drt_status cuda_err(cudaError_t e, const char *what) {
    if (e == cudaSuccess) return DRT_OK;
    return drt_set_error(DRT_ERR_BACKEND, "cuda: %s: %s", what, cudaGetErrorString(e));
}

/* ---- devices ------------------------------------------------------------------ */

/* CUDA index of the i-th device with compute capability >= MIN_CC_MAJOR, or -1 */
static int nth_usable(int i) {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess) {
        (void)cudaGetLastError();
        return -1;
    }
    for (int d = 0; d < count; d++) {
        int major = 0;
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess) continue;
        if (major >= MIN_CC_MAJOR && i-- == 0) return d;
    }
    return -1;
}

static drt_status cuda_probe(int *n, char *why, size_t wn) {
    *n = 0;
    int count = 0;
    cudaError_t e = cudaGetDeviceCount(&count);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(why, wn, "no CUDA device: %s", cudaGetErrorString(e));
        return DRT_ERR_UNAVAILABLE;
    }
    if (count == 0) {
        snprintf(why, wn, "no CUDA device: the driver reports 0 devices");
        return DRT_ERR_UNAVAILABLE;
    }
    int usable = 0, major = 0, minor = 0;
    for (int d = 0; d < count; d++) {
        if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d) != cudaSuccess ||
            cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d) != cudaSuccess)
            continue;
        if (major >= MIN_CC_MAJOR) usable++;
    }
    if (!usable) {
        snprintf(why, wn,
                 "no CUDA device of compute capability >= %d.0 (found %d device%s, e.g. sm_%d%d); "
                 "the kernels need sm_80 or newer",
                 MIN_CC_MAJOR, count, count == 1 ? "" : "s", major, minor);
        return DRT_ERR_UNAVAILABLE;
    }
    *n = usable;
    return DRT_OK;
}

static drt_status cuda_device_name(int dev, char *buf, size_t n) {
    int d = nth_usable(dev);
    if (d < 0) return drt_set_error(DRT_ERR_INVALID_ARG, "cuda: no device %d", dev);
    struct cudaDeviceProp p;
    drt_status s = cuda_err(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties");
    if (s != DRT_OK) return s;
    snprintf(buf, n, "%s (sm_%d%d, %d SMs, %.1f GiB, CUDA device %d)", p.name, p.major, p.minor, p.multiProcessorCount,
             (double)p.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), d);
    return DRT_OK;
}

static drt_status cuda_device_props(int dev, drt_device_props *out) {
    memset(out, 0, sizeof *out);
    int d = nth_usable(dev);
    if (d < 0) return drt_set_error(DRT_ERR_INVALID_ARG, "cuda: no device %d", dev);
    struct cudaDeviceProp p;
    drt_status s = cuda_err(cudaGetDeviceProperties(&p, d), "cudaGetDeviceProperties");
    if (s != DRT_OK) return s;
    snprintf(out->name, sizeof out->name, "%s", p.name);
    snprintf(out->vendor, sizeof out->vendor, "NVIDIA");
    snprintf(out->type, sizeof out->type, "GPU");
    int drv = 0, rt = 0; /* 12040 = 12.4 */
    if (cudaDriverGetVersion(&drv) == cudaSuccess && drv > 0)
        snprintf(out->driver, sizeof out->driver, "CUDA driver %d.%d", drv / 1000, drv % 1000 / 10);
    if (cudaRuntimeGetVersion(&rt) == cudaSuccess && rt > 0)
        snprintf(out->api_version, sizeof out->api_version, "CUDA runtime %d.%d, sm_%d%d", rt / 1000, rt % 1000 / 10,
                 p.major, p.minor);
    out->memory_bytes = (uint64_t)p.totalGlobalMem;
    out->subgroup_size = p.warpSize;
    out->fp16 = p.major * 10 + p.minor >= 53; /* half arithmetic from sm_53 */
    out->bf16 = p.major >= 8;                 /* bf16 tensor cores and arithmetic from sm_80 */
    (void)cudaGetLastError();
    return DRT_OK;
}

/* ---- instance ------------------------------------------------------------------ */

static void drop_graphs(cuda_state *st) {
    for (int i = 0; i < N_GRAPHS; i++) {
        graph_entry *e = &st->cache[i];
        if (e->exec) cudaGraphExecDestroy(e->exec);
        free(e->keys);
        memset(e, 0, sizeof *e);
    }
}

static void cuda_shutdown(drt_backend *be) {
    cuda_state *st = be->ctx;
    if (!st) return;
    cu_ctx *c = &st->k;
    cudaSetDevice(c->device);
    if (c->stream) cudaStreamSynchronize(c->stream);
    if (st->verbose)
        fprintf(stderr,
                "diffrt cuda: precision %s; node runs: %lld eager, %lld captured into graphs, %lld replayed, "
                "%lld captures failed\n",
                c->prec == CU_PREC_FAST ? "fast" : "f32", st->n_eager, st->n_captured, st->n_replayed,
                st->n_capture_failed);
    drop_graphs(st);
    free(st->cur);
    if (c->blas) cublasDestroy(c->blas);
    cudaFree(c->blas_ws);
    cudaFree(c->scratch);
    if (c->h_err) cudaFreeHost(c->h_err);
    for (int i = 0; i < 2; i++) {
        if (st->stage[i]) cudaFreeHost(st->stage[i]);
        if (st->stage_ev[i]) cudaEventDestroy(st->stage_ev[i]);
    }
    if (c->stream) cudaStreamDestroy(c->stream);
    (void)cudaGetLastError();
    free(st);
    be->ctx = NULL;
}

static drt_status blas_err(cublasStatus_t s, const char *what) {
    if (s == CUBLAS_STATUS_SUCCESS) return DRT_OK;
    return drt_set_error(DRT_ERR_BACKEND, "cuda: %s: %s", what, cublasGetStatusString(s));
}

static drt_status read_env(cuda_state *st, const drt_settings *settings) {
    const char *p;
    int graphs, verbose, staged;
    long long gemv;
    drt_status s = drt_setting_str(settings, "cuda.precision", &p); /* f32 or fast, checked */
    if (s == DRT_OK) s = drt_setting_int(settings, "cuda.gemv", &gemv);
    if (s == DRT_OK) s = drt_setting_bool(settings, "cuda.graph", &graphs);
    if (s == DRT_OK) s = drt_setting_bool(settings, "cuda.staged", &staged);
    if (s == DRT_OK) s = drt_setting_bool(settings, "cuda.verbose", &verbose);
    if (s != DRT_OK) return s;
    st->k.prec = strcmp(p, "fast") == 0 ? CU_PREC_FAST : CU_PREC_F32;
    st->k.gemv = (int)gemv;
    st->graphs = graphs;
    st->staged = staged;
    st->verbose = verbose;
    return DRT_OK;
}

static drt_status cuda_init(drt_backend *be, int device) {
    const int idx = device < 0 ? 0 : device;
    const int d = nth_usable(idx);
    if (d < 0) return drt_set_error(DRT_ERR_UNAVAILABLE, "cuda: no device %d", idx);
    cuda_state *st = calloc(1, sizeof *st);
    if (!st) return drt_set_error(DRT_ERR_OOM, "out of memory");
    be->ctx = st;
    be->device = idx;
    cu_ctx *c = &st->k;
    c->device = d;
    drt_status s = read_env(st, be->settings);
    if (s == DRT_OK) s = cuda_err(cudaSetDevice(d), "cudaSetDevice");
    if (s == DRT_OK)
        s = cuda_err(cudaDeviceGetAttribute(&c->n_sm, cudaDevAttrMultiProcessorCount, d), "device attributes");
    if (s == DRT_OK)
        s = cuda_err(cudaDeviceGetAttribute(&c->cc_major, cudaDevAttrComputeCapabilityMajor, d), "device attributes");
    if (s == DRT_OK)
        s = cuda_err(cudaDeviceGetAttribute(&c->cc_minor, cudaDevAttrComputeCapabilityMinor, d), "device attributes");
    int optin = 0;
    if (s == DRT_OK)
        s = cuda_err(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, d), "device attributes");
    c->smem_optin = (size_t)optin;
    if (s == DRT_OK) s = cuda_err(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking), "cudaStreamCreate");
    if (s == DRT_OK) s = cuda_err(cudaHostAlloc((void **)&c->h_err, sizeof(int), cudaHostAllocMapped), "cudaHostAlloc");
    if (s == DRT_OK) {
        *c->h_err = 0;
        s = cuda_err(cudaHostGetDevicePointer((void **)&c->d_err, c->h_err, 0), "cudaHostGetDevicePointer");
    }
    /* cuBLAS: our stream, our workspace (so that graph capture never makes
     * it allocate), and CUBLAS_DEFAULT_MATH: f32 GEMMs stay f32 (no TF32) */
    if (s == DRT_OK) s = blas_err(cublasCreate(&c->blas), "cublasCreate");
    if (s == DRT_OK) s = blas_err(cublasSetStream(c->blas, c->stream), "cublasSetStream");
    if (s == DRT_OK) s = cuda_err(cudaMalloc(&c->blas_ws, BLAS_WS_BYTES), "cudaMalloc (cuBLAS workspace)");
    if (s == DRT_OK) s = blas_err(cublasSetWorkspace(c->blas, c->blas_ws, BLAS_WS_BYTES), "cublasSetWorkspace");
    if (s == DRT_OK) s = blas_err(cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH), "cublasSetMathMode");
    if (s == DRT_OK) s = cu_attention_init(c);
    if (s != DRT_OK) cuda_shutdown(be);
    return s;
}

/* ---- buffers ------------------------------------------------------------------------ */

static drt_status cuda_buf_alloc(drt_backend *be, size_t size, drt_buffer *out) {
    cu_ctx *c = &((cuda_state *)be->ctx)->k;
    void *p = NULL;
    cudaSetDevice(c->device);
    cudaError_t e = cudaMalloc(&p, size ? size : 1);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return drt_set_error(DRT_ERR_OOM, "cuda: cannot allocate %zu bytes of device memory: %s", size,
                             cudaGetErrorString(e));
    }
    /* zeroed, so that nothing ever reads stale bytes (e.g. unused cache rows) */
    e = cudaMemsetAsync(p, 0, size, c->stream);
    if (e != cudaSuccess) {
        cudaFree(p);
        return cuda_err(e, "cudaMemsetAsync");
    }
    out->handle = p;
    out->host = NULL;
    out->size = size;
    return DRT_OK;
}

static void cuda_buf_free(drt_backend *be, drt_buffer *b) {
    cu_ctx *c = &((cuda_state *)be->ctx)->k;
    cudaSetDevice(c->device);
    cudaFree(b->handle); /* waits for the device */
    b->handle = NULL;
}

static drt_status cuda_upload(drt_backend *be, drt_buffer *b, size_t off, const void *src, size_t n) {
    cu_ctx *c = &((cuda_state *)be->ctx)->k;
    if (off + n > b->size) return drt_set_error(DRT_ERR_INVALID_ARG, "cuda: upload past the end of a buffer");
    cudaSetDevice(c->device);
    drt_status s = cuda_err(cudaMemcpyAsync((char *)b->handle + off, src, n, cudaMemcpyHostToDevice, c->stream),
                            "upload");
    if (s == DRT_OK) s = cuda_err(cudaStreamSynchronize(c->stream), "upload");
    return s;
}

/* src (device) to dst (pageable host) through the two pinned chunks: chunk
 * i + 1 is copied by the device while the host copies chunk i out. */
static drt_status download_staged(cuda_state *st, void *dst, const char *src, size_t n) {
    cu_ctx *c = &st->k;
    drt_status s = DRT_OK;
    for (int i = 0; s == DRT_OK && i < 2; i++) {
        if (!st->stage[i])
            s = cuda_err(cudaHostAlloc(&st->stage[i], STAGE_CHUNK, cudaHostAllocDefault), "cudaHostAlloc");
        if (s == DRT_OK && !st->stage_ev[i])
            s = cuda_err(cudaEventCreateWithFlags(&st->stage_ev[i], cudaEventDisableTiming), "cudaEventCreate");
    }
    if (s != DRT_OK) return s;
    const size_t k = (n + STAGE_CHUNK - 1) / STAGE_CHUNK;
    for (size_t i = 0; i <= k && s == DRT_OK; i++) {
        if (i < k) { /* issue chunk i; its buffer's previous chunk (i - 2) was copied out below */
            const size_t len = i + 1 < k ? STAGE_CHUNK : n - i * STAGE_CHUNK;
            s = cuda_err(
                cudaMemcpyAsync(st->stage[i & 1], src + i * STAGE_CHUNK, len, cudaMemcpyDeviceToHost, c->stream),
                "download");
            if (s == DRT_OK) s = cuda_err(cudaEventRecord(st->stage_ev[i & 1], c->stream), "download");
        }
        if (i > 0 && s == DRT_OK) { /* copy chunk i - 1 out while chunk i is in flight */
            const size_t j = i - 1, len = j + 1 < k ? STAGE_CHUNK : n - j * STAGE_CHUNK;
            s = cuda_err(cudaEventSynchronize(st->stage_ev[j & 1]), "download");
            if (s == DRT_OK) memcpy((char *)dst + j * STAGE_CHUNK, st->stage[j & 1], len);
        }
    }
    if (s != DRT_OK) (void)cudaStreamSynchronize(c->stream); /* nothing left writing the chunks */
    return s;
}

static drt_status cuda_download(drt_backend *be, const drt_buffer *b, size_t off, void *dst, size_t n) {
    cuda_state *st = be->ctx;
    cu_ctx *c = &st->k;
    if (off + n > b->size) return drt_set_error(DRT_ERR_INVALID_ARG, "cuda: download past the end of a buffer");
    cudaSetDevice(c->device);
    if (st->staged && n >= STAGE_MIN) return download_staged(st, dst, (const char *)b->handle + off, n);
    drt_status s = cuda_err(cudaMemcpyAsync(dst, (const char *)b->handle + off, n, cudaMemcpyDeviceToHost, c->stream),
                            "download");
    if (s == DRT_OK) s = cuda_err(cudaStreamSynchronize(c->stream), "download");
    return s;
}

/* ---- nodes ---------------------------------------------------------------------------- */

static void *dp(const drt_tensor *t) {
    return t ? (char *)t->buf->handle + t->offs : NULL;
}

static int64_t rows_of(const drt_tensor *t) {
    return drt_nelem(t) / t->ne[t->nd - 1];
}

static int fits_int(int64_t v) {
    return v >= 0 && v <= INT_MAX;
}

static bool cuda_supports(drt_backend *be, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *b = t->src[1];
    switch (t->op) {
    case DRT_OP_EMBED: return fits_int(a->ne[0]) && fits_int(b->ne[0]) && fits_int(b->ne[1]);
    case DRT_OP_RMSNORM:
    case DRT_OP_GROUPNORM: return fits_int(rows_of(a)) && fits_int(a->ne[a->nd - 1]);
    case DRT_OP_MATMUL: {
        const drt_matmul_shape m = drt_matmul_dims(t);
        return fits_int(m.B * m.T) && fits_int(m.K) && fits_int(m.N) && m.Bw >= 1;
    }
    case DRT_OP_ROPE:
    case DRT_OP_DUAL_SOFTMAX: return fits_int(a->ne[0]) && fits_int(a->ne[1]) && fits_int(a->ne[2]);
    case DRT_OP_DIFF_ATTN:
    case DRT_OP_ATTN: {
        int64_t dk = a->ne[a->nd - 1], dv = t->src[2]->ne[2];
        return dk <= CU_ATTN_MAX_DK && dv <= CU_ATTN_MAX_DV && fits_int(a->ne[0] * a->ne[1]) && fits_int(b->ne[0]);
    }
    case DRT_OP_SWIGLU:
    case DRT_OP_SIGMOID:
    case DRT_OP_ADD:
    case DRT_OP_KV_WRITE:
    case DRT_OP_PERMUTE: return true;
    case DRT_OP_NONE:
    case DRT_OP_COUNT: break;
    }
    return false;
}

/* scratch bytes node t needs (nodes run in stream order and share it) */
static size_t node_scratch(const cu_ctx *c, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *b = t->src[1];
    switch (t->op) {
    case DRT_OP_MATMUL: {
        const drt_matmul_shape m = drt_matmul_dims(t);
        return cu_matmul_scratch(c, m.wtype, (int)m.B, (int)m.Bw, (int)m.T, (int)m.N, (int)m.K, m.trans_w);
    }
    case DRT_OP_DIFF_ATTN:
    case DRT_OP_ATTN:
        return cu_attention_scratch(c, t->op == DRT_OP_DIFF_ATTN ? 2 : 1, (int)a->ne[0], (int)b->ne[0], (int)a->ne[1],
                                    (int)t->src[2]->ne[2]);
    default: return 0;
    }
}

/* The node -> kernel arguments mapping of drt_ref_run_node, on device addresses. */
static drt_status run_node(cu_ctx *c, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *b = t->src[1];
    const int32_t *rows = dp(t->src[DRT_SRC_ROWS]); /* the position ops' (T,2) rows */
    float *y = dp(t);
    switch (t->op) {
    case DRT_OP_EMBED: return cu_embed(c, y, dp(a), (int)a->ne[0], dp(b), b->type, (int)b->ne[0], (int)b->ne[1]);
    case DRT_OP_RMSNORM: return cu_norm_rows(c, y, dp(a), rows_of(a), (int)a->ne[a->nd - 1], dp(b), t->fp[0], 1.0f);
    case DRT_OP_MATMUL: {
        const drt_matmul_shape m = drt_matmul_dims(t);
        return cu_matmul(c, y, dp(a), dp(b), m.wtype, (int)m.B, (int)m.Bw, (int)m.T, (int)m.N, (int)m.K, m.trans_w,
                         m.scale);
    }
    case DRT_OP_ROPE: return cu_rope(c, y, dp(a), (int)a->ne[0], (int)a->ne[1], (int)a->ne[2], dp(b), rows);
    case DRT_OP_DUAL_SOFTMAX:
        return cu_dual_softmax(c, y, dp(a), dp(b), (int)a->ne[0], (int)a->ne[1], (int)a->ne[2], t->fp[0],
                               dp(t->src[2]));
    case DRT_OP_DIFF_ATTN:
        return cu_attention(c, y, dp(a), dp(b), dp(t->src[2]), b->type, 2, (int)a->ne[0], (int)b->ne[0], (int)a->ne[1],
                            (int)b->ne[1], (int)b->ne[2], (int)a->ne[3], (int)t->src[2]->ne[2], t->fp[0], dp(t->src[3]),
                            rows);
    case DRT_OP_ATTN:
        return cu_attention(c, y, dp(a), dp(b), dp(t->src[2]), b->type, 1, (int)a->ne[0], (int)b->ne[0], (int)a->ne[1],
                            (int)b->ne[1], 1, (int)a->ne[2], (int)t->src[2]->ne[2], 0.0f, NULL, rows);
    case DRT_OP_GROUPNORM:
        return cu_norm_rows(c, y, dp(a), a->ne[0] * a->ne[1], (int)a->ne[2], dp(b), t->fp[0], t->fp[1]);
    case DRT_OP_SWIGLU: return cu_swiglu(c, y, dp(a), dp(b), drt_nelem(t));
    case DRT_OP_SIGMOID: return cu_sigmoid(c, y, dp(a), drt_nelem(t));
    case DRT_OP_ADD: return cu_add(c, y, dp(a), dp(b), drt_nelem(t));
    case DRT_OP_KV_WRITE: {
        /* in place: the node is a view of the cache src[1] */
        void *cache = t->view_src ? dp(b) : (void *)y;
        return cu_kv_write(c, cache, b->type, dp(a), (int)a->ne[0], drt_nelem(a) / (a->ne[0] ? a->ne[0] : 1), rows);
    }
    case DRT_OP_PERMUTE: {
        int64_t ne[4];
        int perm[4];
        drt_permute_4d(t, ne, perm); /* padded at the front to 4 dims */
        return cu_permute(c, y, dp(a), ne, perm);
    }
    case DRT_OP_NONE:
    case DRT_OP_COUNT: break;
    }
    return drt_set_error(DRT_ERR_UNSUPPORTED, "cuda: op %s has no kernel", drt_op_name(t->op));
}

/* whether the storage of a and b overlaps */
static int overlaps(const drt_tensor *a, const drt_tensor *b) {
    const char *pa = dp(a), *pb = dp(b);
    return pa < pb + drt_nbytes(b) && pb < pa + drt_nbytes(a);
}

/* whether node t is a MATMUL that may join a decode GEMV group; *m its dims */
static int groupable(const cu_ctx *c, const drt_tensor *t, drt_matmul_shape *m) {
    if (t->op != DRT_OP_MATMUL) return 0;
    *m = drt_matmul_dims(t);
    return cu_gemv_groupable(c, m->wtype, (int)m->B, (int)m->Bw, (int)m->T, (int)m->N, (int)m->K, m->trans_w,
                             dp(t->src[0]), dp(t->src[1]));
}

/* Consecutive decode GEMVs that read the same x with the same shape of x,
 * weight dtype and scale (a layer's q/k/v and gate/up projections) run as
 * one launch: one kernel's worth of blocks instead of half-filled tails and
 * launch gaps. Their order in the plan is kept, and nothing runs in
 * between, so this is the same schedule the plan's buffers were laid out
 * for. Returns how many nodes from nodes[0] it ran (0: none). */
static int run_group(cu_ctx *c, drt_tensor *const *nodes, int n, drt_status *st) {
    drt_matmul_shape m0, m;
    if (n < 2 || !groupable(c, nodes[0], &m0)) return 0;
    const drt_tensor *t0 = nodes[0];
    cu_gemv_group g = {.n = 0};
    for (int i = 0; i < n && g.n < CU_GEMV_GROUP; i++) {
        const drt_tensor *t = nodes[i];
        if (i == 0) {
            m = m0;
        } else {
            if (!groupable(c, t, &m) || dp(t->src[0]) != dp(t0->src[0])) break;
            if (m.wtype != m0.wtype || m.T != m0.T || m.K != m0.K || m.scale != m0.scale) break;
            /* run one after the other, an output could reuse the memory of
             * an earlier one that nothing reads: then they must not share
             * a launch */
            int overlap = 0;
            for (int j = 0; j < i; j++) overlap |= overlaps(nodes[j], t);
            if (overlap) break;
        }
        g.w[g.n] = dp(t->src[1]);
        g.y[g.n] = dp(t);
        g.N[g.n] = (int)m.N;
        g.n++;
    }
    if (g.n < 2) return 0;
    *st = cu_matmul_group(c, &g, m0.wtype, dp(t0->src[0]), (int)m0.T, (int)m0.K, m0.scale);
    return g.n;
}

static drt_status run_nodes(cu_ctx *c, drt_tensor *const *nodes, int n) {
    for (int i = 0; i < n;) {
        drt_status s = DRT_OK;
        int k = run_group(c, nodes + i, n - i, &s);
        if (k == 0) {
            s = run_node(c, nodes[i]);
            k = 1;
        }
        if (s != DRT_OK) return s;
        i += k;
    }
    return DRT_OK;
}

/* ---- compute: scratch, graphs --------------------------------------------------------- */

static drt_status ensure_scratch(cuda_state *st, size_t need) {
    cu_ctx *c = &st->k;
    if (need <= c->scratch_size) return DRT_OK;
    size_t sz = (need + ((size_t)1 << 20) - 1) & ~(((size_t)1 << 20) - 1);
    drt_status s = cuda_err(cudaStreamSynchronize(c->stream), "synchronize");
    if (s != DRT_OK) return s;
    drop_graphs(st); /* they captured the old address */
    cudaFree(c->scratch);
    c->scratch = NULL;
    c->scratch_size = 0;
    cudaError_t e = cudaMalloc(&c->scratch, sz);
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        c->scratch = NULL;
        return drt_set_error(DRT_ERR_OOM, "cuda: cannot allocate %zu bytes of scratch: %s", sz, cudaGetErrorString(e));
    }
    c->scratch_size = sz;
    return DRT_OK;
}

static drt_status make_keys(cuda_state *st, drt_tensor *const *nodes, int n) {
    if (n <= 0) return DRT_OK; /* (compute runs an empty run eagerly; this also tells gcc n > 0) */
    if (n > st->cur_cap) {
        node_key *nk = realloc(st->cur, sizeof *nk * (size_t)n);
        if (!nk) return drt_set_error(DRT_ERR_OOM, "out of memory");
        st->cur = nk;
        st->cur_cap = n;
    }
    memset(st->cur, 0, sizeof *st->cur * (size_t)n);
    for (int i = 0; i < n; i++) {
        const drt_tensor *t = nodes[i];
        node_key *k = &st->cur[i];
        k->node = t;
        k->op = (int32_t)t->op;
        k->type = (int32_t)t->type;
        memcpy(k->ne, t->ne, sizeof k->ne);
        memcpy(k->fp, t->fp, sizeof k->fp);
        memcpy(k->ip, t->ip, sizeof k->ip);
        k->dst = dp(t);
        for (int j = 0; j < DRT_MAX_SRC; j++) {
            const drt_tensor *x = t->src[j];
            if (!x) continue;
            k->src[j] = dp(x);
            k->stype[j] = (int32_t)x->type;
            memcpy(k->sne[j], x->ne, sizeof k->sne[j]);
        }
    }
    return DRT_OK;
}

static graph_entry *find_graph(cuda_state *st, int n) {
    for (int i = 0; i < N_GRAPHS; i++) {
        graph_entry *e = &st->cache[i];
        if (e->n == n && memcmp(e->keys, st->cur, sizeof *st->cur * (size_t)n) == 0) return e;
    }
    return NULL;
}

/* the least recently used slot, emptied, holding a copy of the current keys */
static graph_entry *new_graph(cuda_state *st, int n) {
    graph_entry *e = &st->cache[0];
    for (int i = 1; i < N_GRAPHS; i++)
        if (st->cache[i].used < e->used) e = &st->cache[i];
    if (e->exec) cudaGraphExecDestroy(e->exec); /* freed after it completes if in flight */
    free(e->keys);
    memset(e, 0, sizeof *e);
    e->keys = malloc(sizeof *e->keys * (size_t)n);
    if (!e->keys) return NULL;
    memcpy(e->keys, st->cur, sizeof *e->keys * (size_t)n);
    e->n = n;
    return e;
}

static drt_status capture(cuda_state *st, drt_tensor *const *nodes, int n, cudaGraphExec_t *out) {
    cu_ctx *c = &st->k;
    cudaGraph_t g = NULL;
    drt_status s = cuda_err(cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal),
                            "cudaStreamBeginCapture");
    if (s != DRT_OK) return s;
    s = run_nodes(c, nodes, n);
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    if (s == DRT_OK) s = cuda_err(e, "cudaStreamEndCapture");
    if (s == DRT_OK) s = cuda_err(cudaGraphInstantiate(out, g, 0), "cudaGraphInstantiate");
    if (g) cudaGraphDestroy(g);
    if (s != DRT_OK) (void)cudaGetLastError();
    return s;
}

static drt_status cuda_compute(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex) {
    cuda_state *st = be->ctx;
    cu_ctx *c = &st->k;
    (void)ex; /* its rows are in the graph's rows tensor, uploaded by the plan before the run */
    cudaSetDevice(c->device);
    size_t need = 0;
    for (int i = 0; i < n; i++) {
        size_t s = node_scratch(c, nodes[i]);
        if (s > need) need = s;
    }
    drt_status s = ensure_scratch(st, need);
    if (s != DRT_OK) return s;
    if (!st->graphs || n == 0) {
        st->n_eager++;
        return run_nodes(c, nodes, n);
    }

    if ((s = make_keys(st, nodes, n)) != DRT_OK) return s;
    graph_entry *e = find_graph(st, n);
    if (!e) {
        e = new_graph(st, n);
        if (e) e->used = ++st->tick;
        st->n_eager++;
        return run_nodes(c, nodes, n); /* first sighting: eager */
    }
    e->used = ++st->tick;
    if (!e->exec && !e->no_graph) {
        if (capture(st, nodes, n, &e->exec) == DRT_OK) {
            st->n_captured++;
        } else {
            e->exec = NULL;
            e->no_graph = 1;
            st->n_capture_failed++;
        }
    } else if (e->exec) {
        st->n_replayed++;
    }
    if (!e->exec) {
        st->n_eager++;
        return run_nodes(c, nodes, n);
    }
    return cuda_err(cudaGraphLaunch(e->exec, c->stream), "cudaGraphLaunch");
}

static drt_status cuda_sync(drt_backend *be) {
    cu_ctx *c = &((cuda_state *)be->ctx)->k;
    cudaSetDevice(c->device);
    drt_status s = cuda_err(cudaStreamSynchronize(c->stream), "synchronize");
    if (s != DRT_OK) return s;
    if (*(volatile int *)c->h_err) {
        *(volatile int *)c->h_err = 0;
        return drt_set_error(DRT_ERR_INVALID_ARG, "cuda: EMBED: a token id is outside [0, vocabulary)");
    }
    return DRT_OK;
}

/* docs/design.md section 6: f32 mode meets 1e-8 everywhere; fast mode declares
 * 5e-4 for the nodes it runs with reduced-precision inputs (cuda_ops.h). */
static double cuda_nmse_bound(drt_backend *be, const drt_tensor *t) {
    const cu_ctx *c = &((cuda_state *)be->ctx)->k;
    if (c->prec == CU_PREC_F32) return 1e-8;
    return t->op == DRT_OP_MATMUL || t->op == DRT_OP_DIFF_ATTN || t->op == DRT_OP_ATTN ? 5e-4 : 1e-8;
}

static const char *cuda_precision(drt_backend *be) {
    const cu_ctx *c = &((cuda_state *)be->ctx)->k;
    return c->prec == CU_PREC_F32 ? "f32" : "fast";
}

const drt_backend_ops drt_cuda_backend_ops = {
    .name = "cuda",
    .probe = cuda_probe,
    .device_name = cuda_device_name,
    .init = cuda_init,
    .shutdown = cuda_shutdown,
    .buf_alloc = cuda_buf_alloc,
    .buf_free = cuda_buf_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .supports = cuda_supports,
    .compute = cuda_compute,
    .synchronize = cuda_sync,
    .nmse_bound = cuda_nmse_bound,
    .device_props = cuda_device_props,
    .precision = cuda_precision,
};

/* the module entry point: libdiffrt-cuda.so (runtime/drt_module.h) */
DRT_DEFINE_BACKEND_MODULE(drt_cuda_backend_ops)
