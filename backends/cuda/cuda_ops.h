/* The CUDA backend's kernels as C-callable launchers (docs/design.md sections 3, 5).
 *
 * backend.c (C) owns the device, the stream, buffers, the CUDA-graph cache and
 * the mapping from graph nodes to these launchers; the .cu files (one per op
 * family, as in backends/ref) hold the kernels. Shapes are written next to
 * every pointer, arrays are flat and row-major exactly as in ref_ops.h, whose
 * functions are the reference each launcher must reproduce.
 *
 * Every launcher enqueues work on c->stream and returns without waiting;
 * DRT_OK means "launched", a failed launch or cuBLAS call returns
 * DRT_ERR_BACKEND with a message. Nothing here allocates or synchronizes, so
 * a whole run of launchers can be captured into one CUDA graph.
 *
 * Positions: the position ops (ROPE, KV_WRITE, ATTN, DIFF_ATTN) take the
 * graph's rows tensor, (T,2) i32 {cache base, position} per row (drt_exec in
 * drt_graph.h), in device memory: the plan uploads it before every run. They
 * read base and position there, and every grid is sized from static shapes
 * (T, cache rows, never a position), so a captured graph is valid for every
 * position and every mix of sequences. */
#ifndef DRT_CUDA_OPS_H
#define DRT_CUDA_OPS_H

#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "diffrt/diffrt.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Precision mode of one backend instance, from DIFFRT_CUDA_PRECISION at init.
 *   CU_PREC_F32 ("f32", default): every op computes in f32 from f32
 *     activations; f16/bf16 weights are widened exactly. cuBLAS runs with
 *     CUBLAS_DEFAULT_MATH (no TF32). Conformance bound NMSE <= 1e-8.
 *   CU_PREC_FAST ("fast"): tensor cores with reduced-precision inputs and f32
 *     accumulation: ATTN/DIFF_ATTN prefill (rows in runs of >= 4 rows of
 *     one sequence, attention.cu) rounds q, k, v and the softmax weights to
 *     f16; MATMUL with f16/bf16 weights and T > 8 rounds
 *     the activations to the weight's dtype; MATMUL with f32 weights uses
 *     TF32. Declared reduced-precision mode: bound NMSE <= 5e-4 (docs/design.md section 6). */
typedef enum { CU_PREC_F32 = 0, CU_PREC_FAST = 1 } cu_precision;

typedef struct {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    void *blas_ws; /* cuBLAS workspace, set once so capture never allocates */
    int *h_err;    /* mapped pinned host int: kernels set it on bad input */
    int *d_err;    /* its device address */
    void *scratch; /* per-node temporary (conversions, split-K partials) */
    size_t scratch_size;
    int n_sm;
    int cc_major, cc_minor;
    size_t smem_optin; /* max dynamic shared memory per block (opt-in) */
    cu_precision prec;
    int gemv; /* the f16/bf16 decode GEMV kernel: 1 or 2 (cuda.gemv, matmul.cu) */
} cu_ctx;

/* ---- elementwise.cu ------------------------------------------------------- */

/* out is (T,D); ids is (T); E is (V,D) of dtype et. An id outside [0,V)
 * writes a NaN row and sets *c->d_err = 1 (checked at synchronize). */
drt_status cu_embed(cu_ctx *c, float *out, const int32_t *ids, int T, const void *E, drt_dtype et, int V, int D);
/* y, x are (T,Hn,d); row t at position rows[2t+1] (rows (T,2), device);
 * inv_freq is (d/2) */
drt_status cu_rope(cu_ctx *c, float *y, const float *x, int T, int Hn, int d, const float *inv_freq,
                   const int32_t *rows);
/* y, g, u are (n) */
drt_status cu_swiglu(cu_ctx *c, float *y, const float *g, const float *u, int64_t n);
drt_status cu_sigmoid(cu_ctx *c, float *y, const float *x, int64_t n);
drt_status cu_add(cu_ctx *c, float *y, const float *a, const float *b, int64_t n);
/* cache is (S_cap,row) of type ct (f32, f16 or q8_0: drt_kv.h; a cache row
 * is drt_row_bytes(ct,row) bytes); src is (T,row); row t goes to cache row
 * rows[2t] + rows[2t+1] (rows (T,2), device), rounded as drt_kv_store */
drt_status cu_kv_write(cu_ctx *c, void *cache, drt_dtype ct, const float *src, int T, int64_t row, const int32_t *rows);
/* x has shape ne[0..3]; y = x permuted, y dim a = x dim perm[a] (drt_ref_permute) */
drt_status cu_permute(cu_ctx *c, float *y, const float *x, const int64_t ne[4], const int perm[4]);

/* ---- norm.cu ---------------------------------------------------------------- */

/* y, x are (rows,C); w is (C) or NULL; y = x * scale / sqrt(mean(x^2) + eps) * w.
 * RMSNORM is scale = 1; GROUPNORM is rows = T*H, C = dv. */
drt_status cu_norm_rows(cu_ctx *c, float *y, const float *x, int64_t rows, int C, const float *w, float eps,
                        float scale);

/* ---- matmul.cu ---------------------------------------------------------------- */

/* y (B,T,N) = scale * x (B,T,K) w^T; w is (Bw,N,K), or (Bw,K,N) when trans_w,
 * of dtype wt; batch b of x uses batch b*Bw/B of w (drt_ref_matmul). */
/* Several decode GEMVs over one x (T <= 8 rows, K columns) in one launch
 * (gemv_lowp_kernel2): y[i] (T, N[i]) = scale * x w[i]^T, each w[i] (N[i],
 * K) of one dtype. first[] is filled in by cu_matmul_group. */
#define CU_GEMV_GROUP 3
typedef struct {
    int n;
    const void *w[CU_GEMV_GROUP];
    float *y[CU_GEMV_GROUP];
    int N[CU_GEMV_GROUP];
    int first[CU_GEMV_GROUP];
} cu_gemv_group;
/* whether a MATMUL of these dims and pointers may join a group (f16/bf16 2-d
 * weights, T <= 8, K % 8 == 0, 16-byte aligned, cuda.gemv 2) */
int cu_gemv_groupable(const cu_ctx *c, drt_dtype wt, int B, int Bw, int T, int N, int K, int trans_w, const void *x,
                      const void *w);
drt_status cu_matmul_group(cu_ctx *c, cu_gemv_group *g, drt_dtype wt, const float *x, int T, int K, float scale);
drt_status cu_matmul(cu_ctx *c, float *y, const float *x, const void *w, drt_dtype wt, int B, int Bw, int T, int N,
                     int K, int trans_w, float scale);
/* bytes of c->scratch cu_matmul needs for these arguments */
size_t cu_matmul_scratch(const cu_ctx *c, drt_dtype wt, int B, int Bw, int T, int N, int K, int trans_w);

/* ---- attention.cu ------------------------------------------------------------- */

/* a, s1, s2 are (H,T,S); mask offset S - T; lambda_th is (T,H) or NULL */
drt_status cu_dual_softmax(cu_ctx *c, float *a, const float *s1, const float *s2, int H, int T, int S, float lambda,
                           const float *lambda_th);
/* Fused causal attention over each row's own keys: rows is (T,2) in device
 * memory, row t attends the cache rows base .. base + pos (base = rows[2t],
 * pos = rows[2t+1]; drt_ref_diff_attn, drt_ref_attn).
 * nq = 2 (DIFF_ATTN): q is (T,H,2,dk), k is (S_cap,G,m,dk), m in {1,2},
 *   lambda_th (T,H) or NULL (then lambda);
 * nq = 1 (ATTN): q is (T,H,dk), k is (S_cap,G,dk) (m = 1), no lambda.
 * v is (S_cap,G,dv); o is (T,H,dv). k and v are of type kvt (f32, f16 or
 * q8_0: drt_kv.h), read in that type and widened exactly in the kernels. */
drt_status cu_attention(cu_ctx *c, float *o, const float *q, const void *k, const void *v, drt_dtype kvt, int nq, int T,
                        int S_cap, int H, int G, int m, int dk, int dv, float lambda, const float *lambda_th,
                        const int32_t *rows);
size_t cu_attention_scratch(const cu_ctx *c, int nq, int T, int S_cap, int H, int dv);
/* the largest dk, dv the attention kernels take */
#define CU_ATTN_MAX_DK 1024
#define CU_ATTN_MAX_DV 512
/* once per backend instance, outside any capture: opt-in shared memory */
drt_status cu_attention_init(cu_ctx *c);

#ifdef __cplusplus
}
#endif
#endif
