/* OpenCL host side of MATMUL (kernels in matmul.cl): y = scale * x w^T,
 * x (B,T,K) or (T,K), w (Bw,N,K) or (N,K) [trans_w: (Bw,K,N)], as in
 * drt_ref_run_node. Paths:
 *   T == 1, trans_w == 0  -> matvec_<dtype> (decode: bound by reading w once)
 *   otherwise             -> matmul_<dtype> (64x64 tiles in local memory)
 *   f32 weights with DIFFRT_OPENCL_GEMM=clblast -> CLBlastSgemm (when built
 *   with CLBlast), one strided-batched call or one call per batch. */
#include "drt_error.h"
#include "ocl.h"

#ifdef DIFFRT_HAVE_CLBLAST
#include <clblast_c.h>

static drt_status clblast_matmul(ocl_ctx *x, const drt_tensor *t, int B, int Bw, int T, int N,
                                 int K, int trans_w, float scale) {
    const drt_tensor *a = t->src[0], *w = t->src[1];
    cl_mem xm = ocl_mem(a), wm = ocl_mem(w), ym = ocl_mem(t);
    size_t xo = ocl_elem_off(a), wo = ocl_elem_off(w), yo = ocl_elem_off(t);
    /* row-major y (T,N) = x (T,K) . op(w), op(w) = w^T for (N,K), w for (K,N) */
    CLBlastTranspose tb = trans_w ? CLBlastTransposeNo : CLBlastTransposeYes;
    size_t ldw = trans_w ? (size_t)N : (size_t)K;
    size_t sx = (size_t)T * K, sw = (size_t)N * K, sy = (size_t)T * N;
    CLBlastStatusCode st = CLBlastSuccess;
    x->clblast_used = 1;
    if (Bw == B || Bw == 1) {
        st = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo, tb, (size_t)T,
                                        (size_t)N, (size_t)K, scale, xm, xo, (size_t)K, sx, wm, wo,
                                        ldw, Bw == B ? sw : 0, 0.0f, ym, yo, (size_t)N, sy,
                                        (size_t)B, &x->q, NULL);
    } else {
        for (int b = 0; b < B && st == CLBlastSuccess; b++) {
            size_t bw = (size_t)((int64_t)b * Bw / B);
            st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, tb, (size_t)T, (size_t)N,
                              (size_t)K, scale, xm, xo + b * sx, (size_t)K, wm, wo + bw * sw, ldw,
                              0.0f, ym, yo + b * sy, (size_t)N, &x->q, NULL);
        }
    }
    if (st != CLBlastSuccess)
        return drt_set_error(DRT_ERR_BACKEND,
                             "opencl: CLBlast SGEMM (B=%d T=%d N=%d K=%d) on %s: status %d", B, T,
                             N, K, x->name, (int)st);
    return DRT_OK;
}
#endif

drt_status ocl_matmul(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *w = t->src[1];
    int B = a->nd == 3 ? (int)a->ne[0] : 1, Bw = w->nd == 3 ? (int)w->ne[0] : 1;
    int T = (int)a->ne[a->nd - 2], K = (int)a->ne[a->nd - 1];
    int N = (int)t->ne[t->nd - 1];
    int trans_w = t->ip[0];
    float scale = t->fp[0];
    if ((int64_t)B * T * N == 0) return DRT_OK;
    if (drt_dtype_block(w->type) > 1) return ocl_matmul_q(x, t);
#ifdef DIFFRT_HAVE_CLBLAST
    if (x->gemm == OCL_GEMM_CLBLAST && w->type == DRT_F32)
        return clblast_matmul(x, t, B, Bw, T, N, K, trans_w, scale);
#endif
    int wt = w->type == DRT_F16 ? 1 : w->type == DRT_BF16 ? 2 : 0;
    int vec = ocl_matmul_uses_matvec(T, trans_w);
    ocl_call c;
    ocl_begin(&c, x, (ocl_kernel_id)((vec ? OCL_K_MATVEC_F32 : OCL_K_MATMUL_F32) + wt));
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, a);
    ocl_arg_tensor(&c, w);
    ocl_arg_int(&c, B);
    ocl_arg_int(&c, Bw);
    ocl_arg_int(&c, T);
    ocl_arg_int(&c, N);
    ocl_arg_int(&c, K);
    if (!vec) ocl_arg_int(&c, trans_w);
    ocl_arg_float(&c, scale);
    if (vec) {
        size_t g[2] = {(size_t)(N + OCL_MV_NR - 1) / OCL_MV_NR * OCL_MV_WG, (size_t)B * T};
        size_t l[2] = {OCL_MV_WG, 1};
        return ocl_run(&c, 2, g, l);
    }
    size_t g[3] = {(size_t)(N + OCL_MM_TN - 1) / OCL_MM_TN * OCL_MM_TW,
                   (size_t)(T + OCL_MM_TM - 1) / OCL_MM_TM * OCL_MM_TW, (size_t)B};
    size_t l[3] = {OCL_MM_TW, OCL_MM_TW, 1};
    return ocl_run(&c, 3, g, l);
}

void ocl_matmul_shutdown(ocl_ctx *x) {
#ifdef DIFFRT_HAVE_CLBLAST
    /* CLBlast keeps compiled programs per context in a process-wide cache */
    if (x->clblast_used) CLBlastClearCache();
#else
    (void)x;
#endif
}

/* q8_0 / q4_0 weights (matmul_q.cl): one work-group of 32 items per output */
drt_status ocl_matmul_q(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *w = t->src[1];
    int B = a->nd == 3 ? (int)a->ne[0] : 1, Bw = w->nd == 3 ? (int)w->ne[0] : 1;
    int T = (int)a->ne[a->nd - 2], K = (int)a->ne[a->nd - 1];
    int N = (int)t->ne[t->nd - 1];
    ocl_call c;
    ocl_begin(&c, x, w->type == DRT_Q8_0 ? OCL_K_MATMUL_Q8_0 : OCL_K_MATMUL_Q4_0);
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, a);
    ocl_arg_mem(&c, ocl_mem(w));
    ocl_arg_ulong(&c, w->offs); /* bytes: blocks have no element size */
    ocl_arg_int(&c, B);
    ocl_arg_int(&c, Bw);
    ocl_arg_int(&c, T);
    ocl_arg_int(&c, N);
    ocl_arg_int(&c, K);
    ocl_arg_float(&c, t->fp[0]);
    size_t g[3] = {(size_t)N * 32, (size_t)T, (size_t)B}, l[3] = {32, 1, 1};
    return ocl_run(&c, 3, g, l);
}
