/* diffrt public C API. Every entry point returns a drt_status; on failure the
 * message is in drt_last_error() (thread-local, valid until the next call that
 * fails on the same thread). Library code never prints and never exits.
 * Entry points check their arguments: a NULL pointer where an object is
 * needed, or a count out of range, is DRT_ERR_INVALID_ARG with a message (the
 * few that return no status say below what they do instead).
 *
 * Threads: a drt_model is immutable once loaded and may be shared: sessions
 * may be created, run and freed on any threads at once from one model (the
 * cpu backend's repacked weight copy, shared by a model's sessions, is made
 * and released under a lock). A drt_session is one thread's at a time: a
 * call that returns a status and finds another thread inside the same
 * session returns DRT_ERR_BUSY ("session is in use by another thread") and
 * does nothing; drt_session_reset, drt_session_free and the getters that
 * return no status wait for that call to finish instead. A handle must not
 * be used after its free returned. A drt_tokenizer is read-only once loaded
 * and may be shared too; samplers and tokenizer streams hold state and are
 * one thread's at a time (not checked). */
#ifndef DIFFRT_H
#define DIFFRT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    DRT_OK = 0,
    DRT_ERR_INVALID_ARG, /* a caller passed something out of range */
    DRT_ERR_IO,          /* a file could not be opened, read or mapped */
    DRT_ERR_FORMAT,      /* a checkpoint, config or fixture is malformed */
    DRT_ERR_UNSUPPORTED, /* well-formed, but not something diffrt runs */
    DRT_ERR_UNAVAILABLE, /* a backend or device is not present */
    DRT_ERR_OOM,
    DRT_ERR_BACKEND, /* a backend call failed at run time */
    DRT_ERR_NUMERIC, /* a forward produced NaN or Inf logits (never sampled) */
    DRT_ERR_BUSY,    /* the session is in use by another thread (nothing was done) */
} drt_status;

typedef enum {
    DRT_F32 = 0,
    DRT_F16,
    DRT_BF16,
    DRT_I32,
    DRT_Q8_0, /* blocks of 32 weights: f16 scale d, 32 int8 q; w = d*q (docs/quantization.md) */
    DRT_Q4_0, /* blocks of 32 weights: f16 scale d, 16 bytes of 4-bit q; w = d*(q-8) */
    DRT_DTYPE_COUNT
} drt_dtype;

const char *drt_status_str(drt_status s);
/* Frees memory the library allocated for the caller (drt_tokenizer_encode's
 * ids, drt_tokenizer_decode's text, streaming buffers): the same free() the
 * library uses, for callers whose C runtime may differ (language bindings).
 * NULL: nothing. */
void drt_free(void *p);
const char *drt_last_error(void);
const char *drt_dtype_name(drt_dtype t);
/* Bytes of one block of the dtype, and elements per block: 1 element for
 * f32/f16/bf16/i32 (4, 2, 2, 4 bytes); 32 for the quantized block formats
 * (q8_0: 34 bytes, q4_0: 18 bytes). 0 for an unknown dtype. */
size_t drt_dtype_size(drt_dtype t);
int drt_dtype_block(drt_dtype t);
/* Bytes of n elements of dtype t (n a multiple of its block): n / block * size. */
size_t drt_row_bytes(drt_dtype t, int64_t n);
/* The alignment data of dtype t needs: its size, 1 for the block formats
 * (read bytewise). 0 for an unknown dtype. */
size_t drt_dtype_align(drt_dtype t);

/* The version of the library (CMake's project VERSION, "0.1.0") and the short
 * git commit it was built from ("unknown" outside a git checkout). */
const char *drt_version(void);
const char *drt_git_commit(void);

/* ---- backends -------------------------------------------------------- */

/* cpu and ref are built into the library. opencl, vulkan and cuda are
 * modules, libdiffrt-<name>.so, opened the first time the backend is listed
 * or opened, from (in order) the directory of libdiffrt.so (or of the
 * program it is linked into), each directory of DIFFRT_BACKEND_PATH
 * (':'-separated), then the installation's library directory. A missing
 * module, or one whose vendor library (libOpenCL, libcudart, ...) is missing,
 * makes that backend unavailable with the reason; nothing else fails. */
typedef struct {
    const char *name;   /* "cpu", "ref", "opencl", "vulkan", "cuda" */
    int compiled_in;    /* this build made it (built in, or as a module), or its module was found */
    int available;      /* usable on this machine now */
    const char *reason; /* why not, when !available */
    int device_count;
    int builtin;        /* part of the library itself (cpu, ref) */
    const char *module; /* the module file it was loaded from; NULL when built in or not loaded */
} drt_backend_info;

/* What a backend knows of one of its devices. Strings are "" and numbers 0
 * when unknown; fp16 and bf16 are 1 (native arithmetic in that type), 0 (no)
 * or -1 (unknown). */
typedef struct {
    char name[256];        /* "NVIDIA H100 80GB HBM3", "llvmpipe (LLVM 15.0.6, 256 bits)" */
    char vendor[64];       /* "NVIDIA", "Mesa", "The pocl project", "GenuineIntel" */
    char driver[128];      /* driver name and version as the API reports it */
    char api_version[64];  /* "OpenCL 3.0", "Vulkan 1.3.230", "CUDA runtime 12.4" */
    char type[16];         /* "GPU", "CPU", "accelerator", "other" */
    uint64_t memory_bytes; /* device memory; host RAM for CPU devices */
    int subgroup_size;     /* lanes of a subgroup / warp / SIMD register of f32 */
    int fp16, bf16;
} drt_device_props;

/* Backends are indexed 0 .. drt_backend_count() - 1 in a fixed order (cpu,
 * ref, opencl, vulkan, cuda). Listing one opens its module and probes it. */
int drt_backend_count(void);
drt_status drt_backend_get_info(int index, drt_backend_info *out);
/* name of device `dev` (0 .. device_count - 1) of backend `index` */
drt_status drt_backend_device_name(int index, int dev, char *buf, size_t n);
drt_status drt_backend_device_props(int index, int dev, drt_device_props *out);

/* ---- models ---------------------------------------------------------- */

typedef enum { DRT_ARCH_TRANSFORMER = 0, DRT_ARCH_DIFF_V1, DRT_ARCH_DIFF_V2 } drt_arch;
typedef enum {
    DRT_LAYOUT_HF_LLAMA = 0,
    DRT_LAYOUT_HF_DIFFLLAMA,
    DRT_LAYOUT_UNILM_V1,
    DRT_LAYOUT_DIFF_V2,
    DRT_LAYOUT_AXOLOTL_DIFF, /* axolotl's "llama-differential" */
    DRT_LAYOUT_MLX_DIFF,     /* guygrigsby/diff-mlx, variant "diff" */
    DRT_LAYOUT_MLX_VANILLA,  /* guygrigsby/diff-mlx, variant "vanilla" */
} drt_layout;

typedef struct drt_model drt_model;

typedef struct {
    drt_arch arch;
    drt_layout layout;
    const char *arch_name;
    const char *layout_name;
    drt_dtype weight_dtype; /* dtype of the matmul weights as stored */
    int64_t n_params;       /* of the tensors the model reads (not an optimizer state beside them) */
    int vocab;
    int dim; /* D */
    int ffn; /* F */
    int n_layers;
    int n_heads;     /* H: diff-heads (diff models) or heads (transformer) */
    int n_kv_groups; /* G */
    int kv_m;        /* keys per group: 2 (V1), 1 (V2 / transformer) */
    int dk, dv;
    int max_ctx; /* max_position_embeddings */
    int tied_embeddings;
    const char *rope_scaling; /* "none", "linear", "llama3" */
    int bos_id, eos_id;       /* -1 when absent; eos_id: config.json's first (drt_model_eos_ids: all) */
    const float *lambda;      /* [n_layers] V1 lambda; NULL otherwise */
    const float *lambda_init; /* [n_layers] V1 lambda_init; NULL otherwise */
    drt_dtype embed_dtype;    /* the token embedding's dtype (the LM head's too when tied) */
    /* V1: a GROUPNORM follows DIFF_ATTN (axolotl's sublayer_norm false: none),
     * and the attention output is scaled by (1 - lambda_init) (axolotl: only
     * some versions, docs/checkpoints.md); 0 for other architectures */
    int subnorm, out_scale;
} drt_model_info;

/* Lifetime: drt_model_load hands the caller one reference to the model, and
 * every session made from it holds one more. drt_model_free drops the
 * caller's: the model's memory goes when the last reference does, so a
 * model may be freed while sessions made from it are alive, and they keep
 * working until they are freed. After drt_model_free the handle must not be
 * passed to anything else (drt_model_get_info, drt_session_create).
 * model.safetensors is mapped (DIFFRT_NO_MMAP=1: read into memory): while the
 * model is loaded the file must not be truncated or rewritten in place (the
 * process dies of SIGBUS at the next read; replace it by renaming a new file
 * over it). */
drt_status drt_model_load(const char *dir, drt_model **out);
void drt_model_free(drt_model *m); /* NULL: nothing */
drt_status drt_model_get_info(const drt_model *m, drt_model_info *out);
/* Every token id that ends generation: the distinct ids of config.json's
 * "eos_token_id", then those of generation_config.json's (optional; read
 * under config.json's rules) that config.json lacks, in file order. Each
 * field is an integer, a list of at most 1024 integers, or null/absent;
 * every id is in 0 .. vocab - 1, else drt_model_load fails naming the file
 * and the entry (Llama 3.1 lists 128001, 128008, 128009). Copies the first
 * min(count, cap) ids to ids and returns the count (0: none); -1 with
 * DRT_ERR_INVALID_ARG when m is NULL, cap < 0, or ids is NULL with cap > 0.
 * drt_model_info.eos_id stays the first id of config.json's field. */
int drt_model_eos_ids(const drt_model *m, int32_t *ids, int cap);

/* ---- settings: backend and session knobs, one table ------------------- */
/* Every setting has a name ("cpu.precision", "vulkan.fp16", "check_finite")
 * and an environment variable (DIFFRT_CPU_PRECISION, DIFFRT_VULKAN_FP16,
 * DIFFRT_CHECK_FINITE; docs/environment.md lists them all). A drt_settings
 * holds values set by the caller; a session made with it (opts->settings)
 * uses a value set there, else the environment variable's, else the
 * default. Values are checked: a bad one is DRT_ERR_INVALID_ARG naming the
 * setting (or the variable), never a silent default. */
typedef struct drt_settings drt_settings;

typedef enum {
    DRT_SETTING_USER = 0, /* a setting users choose (threads, precision, mmap) */
    DRT_SETTING_DEBUG,    /* a debug or A/B knob: kernel variants, validation, tuning */
} drt_setting_kind;

typedef enum {
    DRT_SETTING_DEFAULT = 0, /* the built-in default */
    DRT_SETTING_ENV,         /* the environment variable (or its deprecated alias) */
    DRT_SETTING_CALLER,      /* a drt_settings (the CLI's --set) */
} drt_setting_source;

typedef struct {
    const char *name;    /* "vulkan.fp16" */
    const char *env;     /* "DIFFRT_VULKAN_FP16" */
    const char *old_env; /* a deprecated alias that still works ("DIFFRT_VK_FP16"), or NULL */
    const char *values;  /* what it takes: "0 or 1", "an integer in [1, 1024]", "f32, bf16" */
    const char *def;     /* the default as text; "" when automatic */
    const char *doc;     /* one sentence */
    drt_setting_kind kind;
    int env_only; /* 1: read where no session's settings reach (module search, the
                     Vulkan loader and instance, model loading): only its variable
                     sets it, and drt_settings_set refuses it */
} drt_setting_info;

/* The table: i in [0, drt_setting_count()); DRT_ERR_INVALID_ARG past it. */
int drt_setting_count(void);
drt_status drt_setting_describe(int i, drt_setting_info *out);

drt_status drt_settings_create(drt_settings **out);
void drt_settings_free(drt_settings *s); /* NULL: nothing */
/* Sets name to value (a copy is kept; NULL value: unset). An unknown name or
 * a value the setting does not take is DRT_ERR_INVALID_ARG and changes
 * nothing. */
drt_status drt_settings_set(drt_settings *s, const char *name, const char *value);
/* The value in force for name (s may be NULL: the environment and defaults)
 * as text into buf[n], and where it came from (src may be NULL). */
drt_status drt_settings_get(const drt_settings *s, const char *name, char *buf, size_t n, drt_setting_source *src);

/* ---- sessions: a model placed on a backend, with its KV cache --------- */

typedef struct drt_session drt_session;

/* The most positions a session may hold (max_ctx). */
#define DRT_MAX_CTX (1 << 24)

typedef struct {
    const char *backend;          /* NULL or "" means "cpu" (the fast CPU backend; "ref" is the reference) */
    const char *device;           /* NULL: backend default; else index or name substring */
    int max_ctx;                  /* 0: the model's max_position_embeddings (capped at 4096); else
                                     1 .. DRT_MAX_CTX (past max_position_embeddings is allowed: the
                                     caller decides whether to warn) */
    int threads;                  /* CPU backends: worker threads; 0: DIFFRT_THREADS, else the physical cores */
    int check_finite;             /* on a forward whose logits are not finite, re-run it op by op and
                                     name the first op whose output was NaN or Inf (and a weight of
                                     it that holds one) in the error; also on with the environment
                                     variable DIFFRT_CHECK_FINITE=1 */
    const drt_settings *settings; /* NULL: none; else read while drt_session_create runs (the
                                     backend keeps a copy): threads and check_finite above
                                     win over its cpu.threads and check_finite when non-zero */
    const char *kv_type;          /* the KV cache's type: "f32", "f16" or "q8_0" (dk and dv multiples of
                                     32); NULL or "": the kv_type setting (DIFFRT_KV_TYPE), else the
                                     backend's default: f16 on cpu, f32 elsewhere (ref: the reference).
                                     A backend without kernels for the type refuses it (an error) */
} drt_session_opts;

/* The session holds a reference to the model (see drt_model_free). cpu reads
 * the weights in place; except that, on a CPU with AVX512-VNNI, it keeps a
 * repacked copy of q8_0 / q4_0 weights for decode, one per model, shared by
 * its sessions (DIFFRT_CPU_REPACK=0: none). The other backends (ref, opencl,
 * vulkan, cuda) copy the weights once per model, device, threads and
 * settings: sessions (batch sessions too) asking for the same share one
 * backend instance and one copy, and take turns on it, a call at a time.
 * opts NULL: all defaults. */
drt_status drt_session_create(drt_model *m, const drt_session_opts *opts, drt_session **out);
/* NULL: nothing. A call in flight on another thread is waited for (and must
 * be that thread's last use of s). */
void drt_session_free(drt_session *s);
/* Appends T tokens (1 <= T <= the context left) at the current position and
 * runs them. logits receives [T, vocab] floats when all_logits, else [vocab]
 * for the last token. Logits that hold a NaN or Inf are DRT_ERR_NUMERIC
 * naming the position (the caller's buffer holds them; the position does
 * not advance). More than DRT_DEFAULT_BATCH_ROWS tokens run as forwards of
 * that many (the activations are sized for them, not for T), except while
 * drt_session_keep_attention is on; the call still succeeds or fails whole. */
drt_status drt_session_forward(drt_session *s, const int32_t *ids, int T, float *logits, int all_logits);
void drt_session_reset(drt_session *s);    /* NULL: nothing */
int drt_session_pos(const drt_session *s); /* -1 for NULL */
int drt_session_ctx(const drt_session *s); /* positions it holds (max_ctx as decided); -1 for NULL */
/* Count of nodes that ran on the CPU reference instead of the session's
 * backend, per op name, since the session was created. Returns the total;
 * when lines != NULL writes "OP=count" pairs separated by spaces. */
int drt_session_fallbacks(const drt_session *s, char *lines, size_t n); /* 0 for NULL */
/* Activation memory of the last forward's graph (the decode graph before
 * any forward): bytes of its planned arena, and in *unplanned (when not
 * NULL) the sum of the intermediates' sizes without reuse. 0 for NULL. */
size_t drt_session_activation_bytes(const drt_session *s, size_t *unplanned);
/* Bytes of the session's KV cache: every layer's K and V rows for all the
 * positions it holds, in its type. 0 for NULL. */
size_t drt_session_kv_bytes(const drt_session *s);
/* The KV cache's type as decided (DRT_F32, DRT_F16 or DRT_Q8_0; DRT_F32 for
 * NULL). */
drt_dtype drt_session_kv_type(const drt_session *s);
/* The attention of the last token of the last forward over every position
 * 0..pos-1, averaged over layers and heads (the paper's Table 3 quantity):
 * softmax(q.k/sqrt(dk)) for the transformer, the differential map
 * A1 - lambda*A2 for diff models. Computed on the host, in double, from the
 * backend's q (after RoPE), KV cache and lambda. weights holds pos floats. */
drt_status drt_session_last_attention(drt_session *s, float *weights);
/* on (nonzero): every following forward of s copies what
 * drt_session_last_attention reads (the last token's q after RoPE and, for
 * DIFF V2, lambda rows: a synchronize per layer), so that the probe needs
 * no re-run of the last forward (diffrt niah --attention asks after each
 * prompt). 0 (the default): nothing is copied and the probe re-runs it. */
drt_status drt_session_keep_attention(drt_session *s, int on);

/* ---- batch sessions: many sequences in one forward -------------------- */
/* A batch session holds up to max_seqs sequences ("slots") of ctx_per_seq
 * positions each, over one copy of the model's weights on its backend. One
 * forward (drt_batch_forward) runs up to max_batch_rows rows, each a token of
 * some sequence at that sequence's next position: decode steps of many
 * sequences and prompt chunks of others can share a forward, and every
 * weight is read once for all its rows. A drt_session is the one-sequence
 * case of the same machinery. Threads: as a drt_session (above). */
typedef struct drt_batch_session drt_batch_session;

#define DRT_MAX_SEQS 4096
#define DRT_MAX_BATCH_ROWS 65536
#define DRT_DEFAULT_BATCH_ROWS 512

typedef struct {
    int max_seqs;       /* sequences held at once, 1 .. DRT_MAX_SEQS; 0: 1 */
    int ctx_per_seq;    /* positions each holds, 1 .. DRT_MAX_CTX; 0: as drt_session_opts.max_ctx
                           decides (0 there too: the model's max_position_embeddings, capped at 4096) */
    int max_batch_rows; /* rows per forward, 1 .. DRT_MAX_BATCH_ROWS; 0: DRT_DEFAULT_BATCH_ROWS */
} drt_batch_opts;

/* opts as for drt_session_create (max_ctx is ctx_per_seq's default); b NULL:
 * all defaults. The KV cache holds max_seqs * ctx_per_seq positions. */
drt_status drt_batch_session_create(drt_model *m, const drt_session_opts *opts, const drt_batch_opts *b,
                                    drt_batch_session **out);
void drt_batch_session_free(drt_batch_session *s); /* NULL: nothing; a call in flight is waited for */
/* The options as decided (defaults filled in). */
drt_status drt_batch_session_get_opts(const drt_batch_session *s, drt_batch_opts *out);
/* drt_session_kv_bytes of a batch session: its slots' positions, and one
 * scratch row. 0 for NULL. */
size_t drt_batch_session_kv_bytes(const drt_batch_session *s);
drt_dtype drt_batch_session_kv_type(const drt_batch_session *s); /* as drt_session_kv_type */

/* The rows of one forward. Rules, each broken one DRT_ERR_INVALID_ARG naming
 * the row, and nothing run: 1 <= n <= max_batch_rows; token[i] inside the
 * vocabulary; seq[i] in [0, max_seqs); a sequence's rows are contiguous and
 * at consecutive positions starting at its length (drt_seq_len): to rewrite
 * a sequence, cut it first (drt_seq_truncate); a position stays below
 * ctx_per_seq. */
typedef struct {
    int n;                /* rows */
    const int32_t *token; /* [n] token ids */
    const int32_t *seq;   /* [n] the sequence (slot) of each row */
    const int32_t *pos;   /* [n] each row's position in its sequence, checked; NULL: implied */
    const int8_t *logits; /* [n] nonzero: return this row's logits; NULL: the last row of each
                             sequence's rows */
} drt_batch;

/* Runs b's rows. logits receives [rows with logits, vocab] floats, in row
 * order (it may be NULL when no row asks for logits). On success each
 * sequence in b is longer by its rows. Logits that hold a NaN or Inf are
 * DRT_ERR_NUMERIC naming the sequence and position; then no sequence
 * advances. Rows of one sequence give the same logits as a drt_session fed
 * the same tokens, within the backend's conformance bound (batch
 * composition can change how a GEMM sums, so greedy near-ties may differ on
 * cpu and GPU backends; the ref backend is exact). */
drt_status drt_batch_forward(drt_batch_session *s, const drt_batch *b, float *logits);
/* Cuts sequence seq back to new_len positions (0 .. its length; 0 frees the
 * slot for a new sequence). */
drt_status drt_seq_truncate(drt_batch_session *s, int seq, int new_len);
/* Positions sequence seq holds; -1 for NULL or a seq out of range. */
int drt_seq_len(const drt_batch_session *s, int seq);
/* As drt_session_fallbacks: node runs on the CPU reference since creation. */
int drt_batch_session_fallbacks(const drt_batch_session *s, char *lines, size_t n); /* 0 for NULL */

/* Per-op profile of forwards (diffrt bench), one entry per op type of the
 * graph IR: op[i] is its name ("MATMUL", "DIFF_ATTN", ...); entries whose
 * nodes count is 0 did not occur. Sums over every profiled forward. */
#define DRT_PROFILE_MAX_OPS 32
typedef struct {
    int n_ops; /* entries below */
    const char *op[DRT_PROFILE_MAX_OPS];
    int nodes[DRT_PROFILE_MAX_OPS];    /* node runs of that op */
    int fallback[DRT_PROFILE_MAX_OPS]; /* ... of them on the CPU reference */
    double seconds[DRT_PROFILE_MAX_OPS];
    double flops[DRT_PROFILE_MAX_OPS], bytes[DRT_PROFILE_MAX_OPS]; /* the op table's napkin math */
    int forwards;                                                  /* profiled forwards summed */
} drt_profile;
/* drt_session_forward (last-token logits) run node by node: the backend is
 * synchronized after every node and each node is timed with a monotonic
 * clock; ADDS into *prof (zero it first). Computes the same logits and
 * advances the position the same way, but slower (nothing is batched into
 * one submission): for per-op breakdowns, never for tokens per second. */
drt_status drt_session_forward_profiled(drt_session *s, const int32_t *ids, int T, float *logits, drt_profile *prof);

/* ---- observing a forward's nodes -------------------------------------- */
/* An observer sees the nodes of every forward of a session (and of a
 * profiled one) as they run: each node's op, name, layer, inputs and
 * output, in execution order. Its output is seen right after the node ran,
 * before any later node may reuse its memory; a forward observed runs in
 * batches split after each wanted node (slower by a synchronize per wanted
 * node; nothing is kept after the callback). Node names are
 * "layers.<l>.<what>" ("layers.0.attn.q_rope", "layers.3.mlp_residual") or
 * "<what>" ("embed", "final_norm", "lm_head"). */
typedef struct {
    const char *name;
    drt_dtype type;
    int nd;
    int64_t ne[4];    /* shape as written: ne[0] outermost, ne[nd-1] contiguous */
    const void *data; /* host memory, valid during the callback only; an input's is
                         NULL when the backend's memory is not host-visible */
} drt_node_tensor;

typedef struct {
    const char *op; /* the op's name: "MATMUL", "ROPE", "DIFF_ATTN", ... */
    int layer;      /* l of a "layers.<l>." name, else -1 */
    int p0;         /* position of the forward's first row */
    /* the node's output; a KV_WRITE's is the T rows it wrote, (T, ...) */
    drt_node_tensor out;
    int n_src;
    /* its inputs, in the op's order; ROPE, KV_WRITE, ATTN and DIFF_ATTN end
     * with "rows", (T, 2) i32: each row's first cache row and position */
    drt_node_tensor src[5];
    double seconds; /* wall time since the previous wanted node ended */
    int fallback;   /* it ran on the CPU reference instead of the session's backend */
} drt_node_event;

typedef struct {
    /* asked per node of each forward, before it runs: nonzero to see it;
     * NULL: every node */
    int (*want)(void *ctx, const char *op, const char *name, int layer);
    void (*on_node)(void *ctx, const drt_node_event *ev);
    void *ctx;
} drt_observer;

/* Sets the session's observer (copied in; NULL or on_node NULL: none) for
 * the forwards that follow. Not for the finite check's re-run. The
 * callbacks run inside the forward, on its thread: they must not call the
 * session (drt_session_pos would wait for the forward forever). */
drt_status drt_session_set_observer(drt_session *s, const drt_observer *obs);

/* ---- sampling -------------------------------------------------------- */

typedef struct {
    float temperature; /* 0 = greedy */
    int top_k;         /* 0 = off */
    float top_p;       /* 1 = off */
    uint64_t seed;
} drt_sampler_opts;

typedef struct drt_sampler drt_sampler;
drt_status drt_sampler_create(const drt_sampler_opts *o, int vocab, drt_sampler **out);
void drt_sampler_free(drt_sampler *s); /* NULL: nothing */
/* The sampled id, or -1 (message in drt_last_error()) when s or logits is
 * NULL or the logits are not fit to sample: a NaN or +Inf anywhere, or every
 * logit -Inf. A -Inf logit alone is a masked token: never drawn. */
int drt_sampler_sample(drt_sampler *s, const float *logits);

#ifdef __cplusplus
}
#endif
#endif
