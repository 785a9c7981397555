/* The graph IR (docs/design.md section 2), the op table (section 3) and the
 * backend interface (section 5). Internal to the library. */
#ifndef DRT_GRAPH_H
#define DRT_GRAPH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "diffrt/backend.h" /* drt_backend, drt_backend_open_settings, drt_backend_close */
#include "diffrt/diffrt.h"

#define DRT_MAX_DIMS 4
#define DRT_MAX_SRC 5
/* The position ops (ROPE, KV_WRITE, ATTN, DIFF_ATTN) take the forward's rows
 * tensor (drt_new_rows) as this input. */
#define DRT_SRC_ROWS 4

/* One enum; the op table in ops.c is indexed by it. */
typedef enum {
    DRT_OP_NONE = 0, /* a leaf: weight, input or cache */
    DRT_OP_EMBED,
    DRT_OP_RMSNORM,
    DRT_OP_MATMUL,
    DRT_OP_ROPE,
    DRT_OP_DUAL_SOFTMAX,
    DRT_OP_DIFF_ATTN,
    DRT_OP_ATTN,
    DRT_OP_GROUPNORM,
    DRT_OP_SWIGLU,
    DRT_OP_SIGMOID,
    DRT_OP_ADD,
    DRT_OP_KV_WRITE,
    DRT_OP_PERMUTE,
    DRT_OP_COUNT
} drt_op;

typedef enum {
    DRT_TF_WEIGHT = 1,  /* uploaded once, owned by the model's weight set */
    DRT_TF_INPUT = 2,   /* written by the host before each run */
    DRT_TF_OUTPUT = 4,  /* read by the host after each run: keeps storage of its own */
    DRT_TF_CACHE = 8,   /* persistent across runs (KV cache) */
    DRT_TF_MAPPED = 16, /* a weight whose bytes lie in a read-only file mapping: a backend that
                         * never reads them again may drop their pages (drt_release_pages) */
} drt_tensor_flags;

struct drt_backend;

/* A block of memory owned by one backend. host is non-NULL when the
 * backend's memory is directly addressable by the CPU. */
typedef struct drt_buffer {
    struct drt_backend *be;
    void *handle;
    void *host;
    size_t size;
} drt_buffer;

typedef struct drt_tensor {
    drt_dtype type;
    int nd;
    int64_t ne[DRT_MAX_DIMS]; /* shape as written: ne[0] outermost, ne[nd-1] contiguous */
    drt_op op;
    struct drt_tensor *src[DRT_MAX_SRC];
    float fp[4]; /* op parameters, meaning per op (ops.c) */
    int32_t ip[4];
    int flags;
    /* storage: a view aliases its view_src at byte offset view_offs */
    struct drt_tensor *view_src;
    size_t view_offs;
    drt_buffer *buf; /* set by allocation; for views, the base tensor's */
    size_t offs;     /* byte offset inside buf */
    char name[48];
} drt_tensor;

int64_t drt_nelem(const drt_tensor *t);
size_t drt_nbytes(const drt_tensor *t);
/* host address of t's data, or NULL when its buffer is not host-visible */
void *drt_host_ptr(const drt_tensor *t);

/* ---- runtime state every op reads ------------------------------------ */
/* A forward's rows (docs/design.md section 3). Row t of the position ops is
 * token pos[t] of a sequence whose KV cache rows start at row base[t]: ROPE
 * turns it by pos[t], KV_WRITE stores it at cache row base[t] + pos[t], and
 * ATTN / DIFF_ATTN read the keys at rows base[t] .. base[t] + pos[t]. One
 * sequence of T tokens from position p0 is base 0, pos p0 .. p0+T-1; a batch
 * of sequences gives each its own base (its slot of the cache). Kernels read
 * the graph's rows tensor, (T, 2) i32 {base, pos} per row, which the plan
 * fills from `rows` before a run; the host copy is for checks, dispatch
 * sizes and napkin math. */
typedef struct {
    int n_rows;          /* rows (the graph's T); 0: the graph has no position op */
    const int32_t *rows; /* (n_rows, 2): base, pos */
    int max_keys;        /* the most keys a row attends: max of pos + 1 */
    int first_pos;       /* pos of row 0 */
    double key_pairs;    /* keys attended by all rows: sum of pos + 1 */
} drt_exec;

/* ex for rows (n of them, base and pos each >= 0; NULL when n is 0). */
drt_status drt_exec_rows(drt_exec *ex, const int32_t *rows, int n);
/* rows[2T] for T tokens of one sequence at positions p0.. from cache row
 * base, and ex for them (ex may be NULL). */
drt_status drt_exec_seq(drt_exec *ex, int32_t *rows, int T, int base, int p0);

/* ---- the graph -------------------------------------------------------- */
typedef struct drt_graph {
    drt_tensor **nodes; /* in execution order: only nodes with op != NONE */
    int n_nodes, cap_nodes;
    drt_tensor **owned; /* every tensor this graph allocated (leaves too) */
    int n_owned, cap_owned;
    drt_status err; /* first construction error, sticky */
} drt_graph;

drt_graph *drt_graph_new(void);
void drt_graph_free(drt_graph *g);

/* Leaves. A leaf created here belongs to the graph; weights from a model
 * are plain drt_tensor objects owned elsewhere and used as sources. */
drt_tensor *drt_new_tensor(drt_graph *g, drt_dtype type, int nd, const int64_t *ne, const char *name);
drt_tensor *drt_new_tensor_1d(drt_graph *g, drt_dtype type, int64_t n0, const char *name);
drt_tensor *drt_new_tensor_2d(drt_graph *g, drt_dtype type, int64_t n0, int64_t n1, const char *name);
drt_tensor *drt_new_tensor_3d(drt_graph *g, drt_dtype type, int64_t n0, int64_t n1, int64_t n2, const char *name);
drt_tensor *drt_new_tensor_4d(drt_graph *g, drt_dtype type, int64_t n0, int64_t n1, int64_t n2, int64_t n3,
                              const char *name);
/* A contiguous view of src: shape ne, starting offs bytes into it. */
drt_tensor *drt_view(drt_graph *g, drt_tensor *src, int nd, const int64_t *ne, size_t offs);

/* Op constructors: each appends a node, checks shapes through the op table
 * and returns the result, or NULL with g->err and drt_last_error() set.
 * NULL inputs propagate (so a builder checks once, at the end). */
drt_tensor *drt_embed(drt_graph *g, drt_tensor *ids, drt_tensor *E);
drt_tensor *drt_rmsnorm(drt_graph *g, drt_tensor *x, drt_tensor *w, float eps);
/* x (T,K) or (B,T,K); w (N,K) or (Bw,N,K) [trans_w: (Bw,K,N)]; y = scale * x w^T */
drt_tensor *drt_matmul(drt_graph *g, drt_tensor *x, drt_tensor *w);
drt_tensor *drt_matmul_ex(drt_graph *g, drt_tensor *x, drt_tensor *w, int trans_w, float scale);
/* The rows tensor of a graph of T rows: (T, 2) i32, an input the plan fills
 * from drt_exec.rows. Every position op of a graph takes the same one. */
drt_tensor *drt_new_rows(drt_graph *g, int64_t T);
/* x (T,Hn,d) turned by each row's position (rows, drt_new_rows) */
drt_tensor *drt_rope(drt_graph *g, drt_tensor *x, drt_tensor *inv_freq, drt_tensor *rows);
/* lambda_th (T,H) or NULL for the scalar lambda */
drt_tensor *drt_dual_softmax(drt_graph *g, drt_tensor *s1, drt_tensor *s2, float lambda, drt_tensor *lambda_th);
/* q (T,H,2,dk); k (S_cap,G,m,dk); v (S_cap,G,dv); row t reads the cache rows
 * base[t] .. base[t] + pos[t] of k and v (rows) */
drt_tensor *drt_diff_attn(drt_graph *g, drt_tensor *q, drt_tensor *k, drt_tensor *v, float lambda,
                          drt_tensor *lambda_th, drt_tensor *rows);
drt_tensor *drt_attn(drt_graph *g, drt_tensor *q, drt_tensor *k, drt_tensor *v, drt_tensor *rows);
drt_tensor *drt_groupnorm(drt_graph *g, drt_tensor *x, drt_tensor *w, float eps, float scale);
drt_tensor *drt_swiglu(drt_graph *g, drt_tensor *gate, drt_tensor *up);
drt_tensor *drt_sigmoid(drt_graph *g, drt_tensor *x);
drt_tensor *drt_add(drt_graph *g, drt_tensor *a, drt_tensor *b);
/* writes row t of src (T, ...) into row base[t] + pos[t] of cache (S_cap, ...)
 * (rows); returns a view of cache */
drt_tensor *drt_kv_write(drt_graph *g, drt_tensor *src, drt_tensor *cache, drt_tensor *rows);
/* y dim a = x dim perm[a] */
drt_tensor *drt_permute(drt_graph *g, drt_tensor *x, int p0, int p1, int p2, int p3);

/* A PERMUTE node's input shape and permutation, padded at the front to 4
 * dims: output dim a = input dim perm[a]. Every backend's kernel takes these. */
void drt_permute_4d(const drt_tensor *node, int64_t ne[4], int perm[4]);

/* A MATMUL node's dimensions, as every backend's kernel takes them:
 * x (B,T,K), w (Bw,N,K) [trans_w: (Bw,K,N)], y (B,T,N); batch b of x reads
 * batch b*Bw/B of w; y = scale * x w^T. B = 1 for a 2-d x, Bw = 1 for a 2-d
 * w. Napkin math: 2*B*T*N*K flops. */
typedef struct {
    int64_t B, Bw, T, N, K;
    int trans_w;
    float scale;
    drt_dtype wtype; /* w's dtype (f32/f16/bf16/q8_0/q4_0) */
} drt_matmul_shape;
drt_matmul_shape drt_matmul_dims(const drt_tensor *node);

/* The decomposed lowering of DIFF_ATTN with static S = k rows (p0 = S - T):
 * PERMUTE -> MATMUL -> DUAL_SOFTMAX -> MATMUL -> PERMUTE. */
drt_tensor *drt_diff_attn_decomposed(drt_graph *g, drt_tensor *q, drt_tensor *k, drt_tensor *v, float lambda,
                                     drt_tensor *lambda_th);

/* ---- the op table ------------------------------------------------------ */
typedef struct {
    const char *name;
    int n_src_min, n_src_max;
    /* shape/dtype check; writes a one-line reason into err on failure */
    bool (*check)(const drt_tensor *node, char *err, size_t n);
    /* napkin math for the perf reports, at runtime state ex */
    double (*flops)(const drt_tensor *node, const drt_exec *ex);
    double (*bytes)(const drt_tensor *node, const drt_exec *ex);
} drt_op_info;

const drt_op_info *drt_op_get(drt_op op);
const char *drt_op_name(drt_op op);
/* Runtime checks that depend on ex: each row's cache row base + pos inside
 * the cache, ex's row count that of the node's rows tensor. */
drt_status drt_op_check_exec(const drt_tensor *node, const drt_exec *ex);

/* ---- backends ---------------------------------------------------------- */

/* The host CPU's model and vendor ("" when the OS does not say), for the
 * CPU backends' device_props and for reports. */
void drt_host_cpu(char *model, size_t model_n, char *vendor, size_t vendor_n);
/* The host CPU as a device: name, vendor, type "CPU", memory, SIMD lanes,
 * native f16/bf16 arithmetic (the cpu and ref backends' device_props). */
void drt_host_cpu_props(drt_device_props *out);

typedef struct drt_backend_ops {
    const char *name;
    /* availability on this machine: DRT_OK and *n_devices, or a reason */
    drt_status (*probe)(int *n_devices, char *why, size_t n);
    drt_status (*device_name)(int dev, char *buf, size_t n);
    /* device < 0: the backend's default; ctx receives backend state */
    drt_status (*init)(drt_backend *be, int device);
    void (*shutdown)(drt_backend *be);
    drt_status (*buf_alloc)(drt_backend *be, size_t size, drt_buffer *out);
    /* optional, host-memory backends: a buffer that IS the caller's memory
     * (weights used in place from the mmapped checkpoint; that memory must
     * outlive the buffer); buf_free leaves it alone. NULL: not supported. */
    drt_status (*buf_wrap)(drt_backend *be, void *host, size_t size, drt_buffer *out);
    void (*buf_free)(drt_backend *be, drt_buffer *b);
    drt_status (*upload)(drt_backend *be, drt_buffer *b, size_t off, const void *src, size_t n);
    drt_status (*download)(drt_backend *be, const drt_buffer *b, size_t off, void *dst, size_t n);
    bool (*supports)(drt_backend *be, const drt_tensor *node);
    /* runs nodes[0..n) in order; all are supported; may record them into one
     * submission. Completion is guaranteed after synchronize. */
    drt_status (*compute)(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex);
    drt_status (*synchronize)(drt_backend *be);
    /* optional: the NMSE bound node t meets on this instance in its current
     * precision mode (docs/design.md section 6): 1e-8 for f32 paths, at most 5e-4
     * for a declared reduced-precision mode. NULL means 1e-8 everywhere. */
    double (*nmse_bound)(drt_backend *be, const drt_tensor *t);
    /* optional: what is known of device dev (the caller zeroed *out and set
     * fp16 = bf16 = -1; unknown fields stay so); NULL:
     * only device_name is known */
    drt_status (*device_props)(int dev, drt_device_props *out);
    /* optional: the name of the precision mode in force on this instance
     * ("f32", or a declared reduced mode such as "bf16", "fast"); NULL: the
     * backend has f32 paths only */
    const char *(*precision)(drt_backend *be);
    /* optional: the name of the kernel variant this instance runs for node
     * (e.g. "gemm 64x64/4x4 vec4", "gemv split-k"), which conform --perf
     * prints beside each timing; a static string; NULL: not told */
    const char *(*kernel_variant)(drt_backend *be, const drt_tensor *node);
    /* optional: weight w's bytes are in place and final (a model's weight,
     * once loaded); the backend may derive now what its kernels read instead
     * of paying for it on first use (the cpu backend repacks q8_0 / q4_0
     * weights, and drops the original's pages when w is DRT_TF_MAPPED: its
     * kernels read only the copy). NULL: nothing to do. */
    drt_status (*prepare_weight)(drt_backend *be, const drt_tensor *w);
    /* optional: computes node into dst from srcs, all host memory laid out as
     * the tensors, on no instance. The ref backend's is the CPU reference,
     * which the dispatcher reaches through the registry (drt_registry_fallback)
     * for the nodes a backend does not support. NULL: none. */
    drt_status (*run_node)(const drt_tensor *node, void *dst, void *const *srcs, const drt_exec *ex);
    /* optional: the device as this instance runs on it, where the threads
     * and settings it was opened with change that (the cpu backend: its
     * thread count, kernel set and modes). NULL: device_name(be->device). */
    drt_status (*instance_name)(drt_backend *be, char *buf, size_t n);
} drt_backend_ops;

struct drt_backend {
    const drt_backend_ops *ops;
    int device;
    int threads; /* requested worker threads, 0: the backend's default (CPU backends) */
    void *ctx;
    drt_settings *settings; /* the caller's settings (a copy; NULL: none): init reads its own
                               with drt_setting_* (drt_settings.h) */
};

/* Registry: every backend compiled in, in a fixed order (cpu, ref first; an entry
 * is NULL when not compiled in), then backends registered at run time. */
int drt_registry_count(void);
const drt_backend_ops *drt_registry_get(int i);
const drt_backend_ops *drt_registry_find(const char *name);
/* The backend whose run_node computes the nodes another backend does not
 * support: the built-in ref backend, so never NULL. */
const drt_backend_ops *drt_registry_fallback(void);
/* Adds a backend at run time (used by tests); found by drt_backend_open. */
drt_status drt_registry_add(const drt_backend_ops *ops);
/* Creates a backend instance; device: NULL/"" default, else an index or a
 * name substring (also read from DIFFRT_DEVICE when NULL). */
drt_status drt_backend_open(const char *name, const char *device, drt_backend **out);
/* The same with a thread count for CPU backends (0: DIFFRT_THREADS, else the
 * physical cores available to the process); other backends ignore it. */
drt_status drt_backend_open_threads(const char *name, const char *device, int threads, drt_backend **out);
/* The same with settings, drt_backend_open_settings, and drt_backend_close
 * are public (include/diffrt/backend.h): the backend reads its settings
 * (cpu.*, vulkan.*, ..., and device when device is NULL) from them first,
 * then from the environment. */

/* Allocates one buffer per non-view tensor in ts (skipping ones that have a
 * buffer already) and points views at their base. */
drt_status drt_alloc_tensors(drt_backend *be, drt_tensor **ts, int n);

/* ---- the dispatcher ---------------------------------------------------- */
/* A plan binds a graph to a backend: it allocates every tensor the graph
 * owns, decides per node whether the backend runs it or the CPU reference
 * does (a fallback, counted), and sets up host mirrors for fallbacks. Built
 * once per graph; drt_plan_run does no allocation.
 *
 * Intermediates (node results without a DRT_TF_* flag) share one arena
 * buffer where their lifetimes do not overlap, so after a run only these
 * hold their values: flagged tensors, leaves, and results no node reads.
 * A tensor the host reads after a run that some node also reads must be
 * flagged DRT_TF_OUTPUT before the plan is created. */
typedef struct drt_plan drt_plan;

drt_status drt_plan_create(drt_graph *g, drt_backend *be, drt_plan **out);
/* Frees the arena and detaches the graph's tensors from it: call it before
 * drt_graph_free of its graph. */
void drt_plan_free(drt_plan *p);
/* Bytes of the arena; *unplanned (when not NULL) receives the sum of the
 * intermediates' sizes it replaces (one buffer each without planning). */
size_t drt_plan_arena_bytes(const drt_plan *p, size_t *unplanned);
drt_status drt_plan_run(drt_plan *p, const drt_exec *ex);
/* Finding where a NaN or Inf came from (DIFFRT_CHECK_FINITE), an observer
 * of every node (drt_plan_run_observed below): runs the plan's nodes one at a time at ex, synchronizing and reading
 * each node's output back after it ran (a KV_WRITE: the rows it wrote), and stops at the first output that holds a NaN
 * or Inf. Slow: for diagnosis only. Running the plan again at the same ex computes the same values (it writes only its
 * rows' own cache rows, which it reads after writing them). */
typedef struct {
    const drt_tensor *node;   /* the first node whose output is not finite; NULL: none */
    int64_t index;            /* its first non-finite element */
    float value;              /* NaN, Inf or -Inf */
    const drt_tensor *weight; /* a weight input of node holding a NaN or Inf; NULL: none */
    int64_t weight_index;
    float weight_value;
} drt_nonfinite;
drt_status drt_plan_find_nonfinite(drt_plan *p, const drt_exec *ex, drt_nonfinite *out);
/* Profiling (diffrt bench), an observer of every node that reads no
 * output back (drt_plan_run_observed below): runs the plan's nodes one at a time at ex,
 * synchronizing the backend after each and timing it with a monotonic
 * clock, and ADDS per op type into *prof (zero it before the first call):
 * wall seconds, node count, nodes run on the CPU reference, and the op
 * table's napkin FLOPs and bytes at ex. A node's time includes its
 * synchronize (and, for a fallback, the transfers). Slower than
 * drt_plan_run (no batching into one submission): never time tok/s with it.
 * Computes the same values as drt_plan_run. */
typedef struct {
    double seconds[DRT_OP_COUNT];
    double flops[DRT_OP_COUNT], bytes[DRT_OP_COUNT];
    int nodes[DRT_OP_COUNT];
    int fallback_nodes[DRT_OP_COUNT];
} drt_plan_profile;
drt_status drt_plan_run_profiled(drt_plan *p, const drt_exec *ex, drt_plan_profile *prof);
/* Observing nodes (docs/design.md section 5; what profiling, the finite
 * check and the attention probes are built on): drt_plan_run_observed runs
 * the plan at ex and, after each node the observer wants, synchronizes the
 * backend and hands the observer that node's output in host memory. want is
 * asked once per node, in order, as the run reaches it (NULL: every node); a batch of
 * unwanted nodes still runs as one submission, and the run stops after each
 * wanted node, so its output is seen before any later node can reuse its
 * arena bytes: nothing is kept out of the arena for an observer. */
typedef struct {
    const drt_tensor *node;
    /* its output: host memory valid during the call (the tensor itself when
     * host-visible, else a read-back copy); a KV_WRITE's is the T rows it
     * wrote, (T, ...), gathered from their cache rows; NULL when the
     * observer set no_data */
    const void *data;
    size_t nbytes; /* bytes at data */
    /* wall seconds from the end of the previous wanted node (or the run's
     * start) to this one's synchronize: with every node wanted, the node
     * alone, its synchronize (and a fallback's transfers) included */
    double seconds;
    int fallback; /* it ran on the CPU reference */
} drt_node_seen;
typedef struct {
    bool (*want)(void *ctx, const drt_tensor *node);
    /* nonzero: stop the run after this node (drt_plan_run_observed returns DRT_OK) */
    int (*seen)(void *ctx, const drt_node_seen *ev, const drt_exec *ex);
    void *ctx;
    bool no_data; /* outputs are not read back (profiling times only) */
} drt_plan_observer;
/* obs NULL: drt_plan_run. The run synchronizes the backend before its first
 * node, so work queued earlier is not charged to it. */
drt_status drt_plan_run_observed(drt_plan *p, const drt_exec *ex, const drt_plan_observer *obs);
/* drt_plan_run_profiled's observer, for one that does more (the session's):
 * adds node ev, seen with every node wanted, to *prof */
void drt_plan_profile_add(drt_plan_profile *prof, const drt_node_seen *ev, const drt_exec *ex);
/* per-op count of nodes routed to the CPU reference in this plan */
int drt_plan_fallback_count(const drt_plan *p, drt_op op);
/* total fallback node executions since creation, per op (cumulative) */
const int64_t *drt_plan_fallback_runs(const drt_plan *p);

/* Tensor I/O through the tensor's backend. */
drt_status drt_tensor_set(drt_tensor *t, const void *data, size_t n);
drt_status drt_tensor_get(const drt_tensor *t, void *data, size_t n);

/* The CPU reference as a node runner: computes node into dst from srcs
 * (host pointers), used by the ref backend, by conform's oracle and (as the
 * ref backend's run_node) by fallbacks. Defined in backends/ref/. */
drt_status drt_ref_run_node(const drt_tensor *node, void *dst, void *const *srcs, const drt_exec *ex);

#endif
