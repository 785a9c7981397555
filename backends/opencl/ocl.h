/* OpenCL backend internals: the per-instance state, the kernel table, and the
 * helpers every family file (matmul.c, attention.c, norm.c, elementwise.c)
 * uses to set kernel arguments and enqueue. Kernels live in the .cl files
 * next to this one, embedded at build time (cmake/embed.cmake). */
#ifndef DRT_OCL_H
#define DRT_OCL_H

#define CL_TARGET_OPENCL_VERSION 120
#ifdef __APPLE__
#include <OpenCL/cl.h>
#else
#include <CL/cl.h>
#endif

#include "drt_graph.h"

/* the embedded .cl sources (generated opencl_kernels.c) */
extern const char drt_ocl_src_elementwise[], drt_ocl_src_norm[], drt_ocl_src_matmul[], drt_ocl_src_attention[],
    drt_ocl_src_matmul_q[];
extern const unsigned long drt_ocl_src_elementwise_len, drt_ocl_src_norm_len, drt_ocl_src_matmul_len,
    drt_ocl_src_attention_len, drt_ocl_src_matmul_q_len;

/* one program per op family, built once at init */
typedef enum { OCL_P_ELEMENTWISE, OCL_P_NORM, OCL_P_MATMUL, OCL_P_ATTENTION, OCL_P_MATMUL_Q, OCL_P_COUNT } ocl_prog;

/* every kernel, created once at init; ocl_kernel_names (backend.c) in the same order */
typedef enum {
    OCL_K_EMBED_F32,
    OCL_K_EMBED_F16,
    OCL_K_EMBED_BF16,
    OCL_K_ROPE,
    OCL_K_SWIGLU,
    OCL_K_SIGMOID,
    OCL_K_ADD,
    OCL_K_KV_WRITE,
    OCL_K_PERMUTE,
    OCL_K_RMSNORM,
    OCL_K_MATVEC_F32,
    OCL_K_MATVEC_F16,
    OCL_K_MATVEC_BF16,
    OCL_K_MATMUL_F32,
    OCL_K_MATMUL_F16,
    OCL_K_MATMUL_BF16,
    OCL_K_DUAL_SOFTMAX,
    OCL_K_DIFF_ATTN_Q1, /* + log2(rows per work-group): q1, q2, q4, q8 */
    OCL_K_DIFF_ATTN_Q2,
    OCL_K_DIFF_ATTN_Q4,
    OCL_K_DIFF_ATTN_Q8,
    OCL_K_ATTN_Q1,
    OCL_K_ATTN_Q2,
    OCL_K_ATTN_Q4,
    OCL_K_ATTN_Q8,
    OCL_K_ATTN_COMBINE,
    /* register-blocked MATMUL (matmul.cl section 3): variant x 3 + dtype */
    OCL_K_GEMV_F32,
    OCL_K_GEMV_F16,
    OCL_K_GEMV_BF16,
    OCL_K_DOT_F32,
    OCL_K_DOT_F16,
    OCL_K_DOT_BF16,
    OCL_K_ROWS_F32, /* a few rows, w read once for all (matmul.cl section 3) */
    OCL_K_ROWS_F16,
    OCL_K_ROWS_BF16,
    OCL_K_OUTER_F32,
    OCL_K_OUTER_F16,
    OCL_K_OUTER_BF16,
    /* attention on CPU-class devices (attention.cl, last section) */
    OCL_K_DIFF_ATTN_FLASH,
    OCL_K_ATTN_FLASH,
    OCL_K_DIFF_ATTN_DECODE,
    OCL_K_ATTN_DECODE,
    OCL_K_MATMUL_Q8_0, /* matmul_q.cl: q8_0 / q4_0 weights */
    OCL_K_MATMUL_Q4_0,
    OCL_K_GEMV_Q8_0, /* matmul_q.cl, register blocks (CPU-class devices) */
    OCL_K_GEMV_Q4_0,
    OCL_K_DOT_Q8_0,
    OCL_K_DOT_Q4_0,
    OCL_K_ROWS_Q8_0,
    OCL_K_ROWS_Q4_0,
    /* the attention kernels for f16 and q8_0 KV caches, per type in the
     * order of the f32 ones: local q1 .. q8 (diff_attn, attn), then flash
     * and decode (ocl_attn_kernel in attention.c maps them) */
    OCL_K_DIFF_ATTN_Q1_F16,
    OCL_K_DIFF_ATTN_Q2_F16,
    OCL_K_DIFF_ATTN_Q4_F16,
    OCL_K_DIFF_ATTN_Q8_F16,
    OCL_K_ATTN_Q1_F16,
    OCL_K_ATTN_Q2_F16,
    OCL_K_ATTN_Q4_F16,
    OCL_K_ATTN_Q8_F16,
    OCL_K_DIFF_ATTN_FLASH_F16,
    OCL_K_ATTN_FLASH_F16,
    OCL_K_DIFF_ATTN_DECODE_F16,
    OCL_K_ATTN_DECODE_F16,
    OCL_K_DIFF_ATTN_Q1_Q8_0,
    OCL_K_DIFF_ATTN_Q2_Q8_0,
    OCL_K_DIFF_ATTN_Q4_Q8_0,
    OCL_K_DIFF_ATTN_Q8_Q8_0,
    OCL_K_ATTN_Q1_Q8_0,
    OCL_K_ATTN_Q2_Q8_0,
    OCL_K_ATTN_Q4_Q8_0,
    OCL_K_ATTN_Q8_Q8_0,
    OCL_K_DIFF_ATTN_FLASH_Q8_0,
    OCL_K_ATTN_FLASH_Q8_0,
    OCL_K_DIFF_ATTN_DECODE_Q8_0,
    OCL_K_ATTN_DECODE_Q8_0,
    OCL_K_KV_WRITE_F16, /* elementwise.cl: KV_WRITE into f16 / q8_0 caches */
    OCL_K_KV_WRITE_Q8_0,
    OCL_K_COUNT
} ocl_kernel_id;

/* DIFFRT_OPENCL_GEMM: the own kernels chosen by the table in matmul.c
 * (default, "tiled"), forced to local-memory tiles ("local") or to register
 * blocks ("regs"), or CLBlast for f32 weights ("clblast") */
typedef enum { OCL_GEMM_TILED = 0, OCL_GEMM_LOCAL, OCL_GEMM_REGS, OCL_GEMM_CLBLAST } ocl_gemm;

/* the MATMUL variants (ocl_matmul_variant) */
typedef enum {
    OCL_MM_MATVEC, /* local memory: T == 1 reduction over K */
    OCL_MM_TILED,  /* local memory: 64x64 tiles */
    OCL_MM_GEMV,   /* registers: 1 x RB_GEMV_NR dot products */
    OCL_MM_DOT,    /* registers: RB_MR x RB_NR dot products */
    OCL_MM_ROWS,   /* registers: RB_NR weight rows x all T <= OCL_MM_ROWS_MAX rows */
    OCL_MM_OUTER,  /* registers: RB_OMR x RB_OV*RB_V outer products (trans_w) */
    OCL_MM_CLBLAST,
    OCL_MM_COUNT
} ocl_mm_variant;

/* work-group shapes fixed in the .cl files (reqd_work_group_size) */
#define OCL_MV_WG 64
#define OCL_MV_NR 4
#define OCL_MM_TM 64
#define OCL_MM_TN 64
#define OCL_MM_TW 16
#define OCL_ROW_WG_MAX 256 /* NORM_WG_MAX, SM_WG_MAX */
#define OCL_ATT_BQ_MAX 8   /* rows per attention work-group: 1, 2, 4 or 8 */
#define OCL_PF_ROWS 16     /* CPU devices: GEMV weight rows prefetched ahead */
#define OCL_MM_ROWS_MAX 32 /* CPU devices: the most rows of the rows kernels */

typedef struct {
    cl_platform_id platform;
    cl_device_id dev;
    cl_context ctx;
    cl_command_queue q;
    cl_program prog[OCL_P_COUNT];
    cl_kernel k[OCL_K_COUNT];
    size_t kwg[OCL_K_COUNT]; /* CL_KERNEL_WORK_GROUP_SIZE */
    cl_ulong local_mem;      /* CL_DEVICE_LOCAL_MEM_SIZE */
    cl_ulong max_alloc;      /* CL_DEVICE_MAX_MEM_ALLOC_SIZE */
    /* attention tiles (ATT_* build options), and the local memory the
     * attention kernels use besides their dynamic tiles */
    int att_bk, att_nt, att_dv_max;
    cl_ulong att_static_local;
    int att_bq_max; /* most rows per work-group the device runs (0: none) */
    int split_keys; /* DIFFRT_OPENCL_ATTN_SPLIT: keys per split forced (0: auto) */
    cl_mem part;    /* split-S partial results, grown to the largest launch */
    size_t part_bytes;
    cl_uint cu;                 /* CL_DEVICE_MAX_COMPUTE_UNITS */
    int mm_vec_ok, mm_tiled_ok; /* the device runs the MATMUL work-group sizes */
    size_t row_wg;              /* largest work-group of the row reductions: power of two */
    cl_mem err;                 /* (2) int: EMBED's first bad (position+1, id) */
    int embed_pending;          /* an EMBED ran since the last synchronize */
    int embed_vocab;            /* its V, for the message */
    ocl_gemm gemm;
    int clblast_used;
    int mm_regs;                    /* the register-blocked variants are the default */
    int rb_v;                       /* their vector width (RB_V) */
    size_t rb_wg;                   /* their work-group size */
    char mm_name[OCL_MM_COUNT][48]; /* kernel_variant strings */
    int att_vl;                     /* lanes of the CPU attention kernels (0: not used) */
    char name[256];
} ocl_ctx;

static inline ocl_ctx *ocl_of(drt_backend *be) {
    return (ocl_ctx *)be->ctx;
}

const char *ocl_err_str(cl_int e);
/* every kernel's name and program, by ocl_kernel_id (launch.c) */
typedef struct {
    const char *name;
    ocl_prog prog;
} ocl_kernel_def;
extern const ocl_kernel_def ocl_kernels[OCL_K_COUNT];

/* ---- one kernel launch ----------------------------------------------------
 *   ocl_call c; ocl_begin(&c, x, OCL_K_ADD);
 *   ocl_arg_tensor(&c, y); ...; return ocl_run(&c, 1, global, local);
 * Argument errors are kept and reported by ocl_run, naming the kernel. */
typedef struct {
    ocl_ctx *x;
    ocl_kernel_id id;
    cl_uint n;                    /* next argument index */
    cl_int err;                   /* first clSetKernelArg failure */
    cl_uint bad;                  /* its index */
    const drt_tensor *misaligned; /* a tensor whose offset is not whole elements */
} ocl_call;

void ocl_begin(ocl_call *c, ocl_ctx *x, ocl_kernel_id id);
void ocl_arg_mem(ocl_call *c, cl_mem m);
/* a tensor as two arguments: its buffer and its offset in elements (ulong) */
void ocl_arg_tensor(ocl_call *c, const drt_tensor *t);
void ocl_arg_ulong(ocl_call *c, size_t v);
void ocl_arg_int(ocl_call *c, int v);
void ocl_arg_float(ocl_call *c, float v);
void ocl_arg_local(ocl_call *c, size_t bytes);
/* global sizes are rounded up here to multiples of local (when given) */
drt_status ocl_run(ocl_call *c, cl_uint dims, const size_t *global, const size_t *local);
/* 1-d elementwise launch over n items (work-groups of 64) */
drt_status ocl_run_1d(ocl_call *c, int64_t n);
/* work-group for a reduction over rows of n: a power of two, about n/4
 * (each item sums >= 4 elements), 32 .. row_wg */
size_t ocl_row_wg(const ocl_ctx *x, int64_t n);

static inline cl_mem ocl_mem(const drt_tensor *t) {
    return (cl_mem)t->buf->handle;
}
static inline size_t ocl_elem_off(const drt_tensor *t) {
    return t->offs / drt_dtype_size(t->type);
}
/* MATMUL with q8_0 / q4_0 weights (matmul_q.cl) */
drt_status ocl_matmul_q(ocl_ctx *x, const drt_tensor *t);
const char *ocl_matmul_q_variant(const ocl_ctx *x, const drt_tensor *t); /* kernel_variant's name */

/* ---- the op families: each runs one node (all checks done in supports) --- */
drt_status ocl_matmul(ocl_ctx *x, const drt_tensor *t);
/* the variant ocl_matmul runs for node t */
ocl_mm_variant ocl_matmul_variant(const ocl_ctx *x, const drt_tensor *t);
/* the build options of matmul.cl and the variant names (at init) */
int ocl_matmul_options(ocl_ctx *x, char *buf, size_t n);
/* the path MATMUL takes for T rows per batch: matvec (else tiled) */
static inline bool ocl_matmul_uses_matvec(int64_t T, int trans_w) {
    return T == 1 && !trans_w;
}
void ocl_matmul_shutdown(ocl_ctx *x);

drt_status ocl_dual_softmax(ocl_ctx *x, const drt_tensor *t);
drt_status ocl_diff_attn(ocl_ctx *x, const drt_tensor *t, const drt_exec *ex);
drt_status ocl_attn(ocl_ctx *x, const drt_tensor *t, const drt_exec *ex);
/* local memory one attention launch needs for this node (bytes) */
size_t ocl_attn_local_bytes(const ocl_ctx *x, const drt_tensor *t);
/* the name of the attention kernel ocl_diff_attn / ocl_attn run for node t */
const char *ocl_attn_variant(const ocl_ctx *x, const drt_tensor *t);

drt_status ocl_rmsnorm(ocl_ctx *x, const drt_tensor *t);
drt_status ocl_groupnorm(ocl_ctx *x, const drt_tensor *t);

drt_status ocl_embed(ocl_ctx *x, const drt_tensor *t);
drt_status ocl_rope(ocl_ctx *x, const drt_tensor *t);
drt_status ocl_swiglu(ocl_ctx *x, const drt_tensor *t);
drt_status ocl_sigmoid(ocl_ctx *x, const drt_tensor *t);
drt_status ocl_add(ocl_ctx *x, const drt_tensor *t);
drt_status ocl_kv_write(ocl_ctx *x, const drt_tensor *t);
drt_status ocl_permute(ocl_ctx *x, const drt_tensor *t);

#endif
