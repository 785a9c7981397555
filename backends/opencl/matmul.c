/* OpenCL host side of MATMUL (kernels in matmul.cl): y = scale * x w^T,
 * x (B,T,K) or (T,K), w (Bw,N,K) or (N,K) [trans_w: (Bw,K,N)], as in
 * drt_ref_run_node. Variants (ocl_matmul_variant, the table; conform --perf
 * prints the one a node ran through the backend's kernel_variant op):
 *   GPUs and other devices, local memory:
 *     T == 1, trans_w == 0  -> matvec_<dtype> (decode: bound by reading w once)
 *     otherwise             -> matmul_<dtype> (64x64 tiles in local memory)
 *   CPU-class devices (PoCL, ...), register blocks (matmul.cl section 3), no
 *   local memory or barriers (measured on PoCL: 13 -> ~50-90 GFLOP/s at
 *   1024^3 against the local tiles' ~3-4, CLBlast's ~4):
 *     trans_w               -> outer_<dtype>  (4 rows x 2 vectors of columns)
 *     T == 1                -> gemv_<dtype>   (1 x 8 dot products)
 *     T <= 32               -> rows_<dtype>   (4 weight rows x all T rows per
 *                              item, in 4 x 4 tiles: w read once for all rows)
 *     otherwise             -> dot_<dtype>    (4 x 4)
 *     (for 16-lane vectors; rb_pick sizes them from the native float width)
 *   f32 weights with DIFFRT_OPENCL_GEMM=clblast -> CLBlastSgemm (when built
 *   with CLBlast), one strided-batched call or one call per batch. */
#include <stdio.h>

#include "drt_error.h"
#include "ocl.h"

#ifdef DIFFRT_HAVE_CLBLAST
#include <clblast_c.h>

static drt_status clblast_matmul(ocl_ctx *x, const drt_tensor *t, int B, int Bw, int T, int N, int K, int trans_w,
                                 float scale) {
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
        st = CLBlastSgemmStridedBatched(CLBlastLayoutRowMajor, CLBlastTransposeNo, tb, (size_t)T, (size_t)N, (size_t)K,
                                        scale, xm, xo, (size_t)K, sx, wm, wo, ldw, Bw == B ? sw : 0, 0.0f, ym, yo,
                                        (size_t)N, sy, (size_t)B, &x->q, NULL);
    } else {
        for (int b = 0; b < B && st == CLBlastSuccess; b++) {
            size_t bw = (size_t)((int64_t)b * Bw / B);
            st = CLBlastSgemm(CLBlastLayoutRowMajor, CLBlastTransposeNo, tb, (size_t)T, (size_t)N, (size_t)K, scale, xm,
                              xo + b * sx, (size_t)K, wm, wo + bw * sw, ldw, 0.0f, ym, yo + b * sy, (size_t)N, &x->q,
                              NULL);
        }
    }
    if (st != CLBlastSuccess)
        return drt_set_error(DRT_ERR_BACKEND, "opencl: CLBlast SGEMM (B=%d T=%d N=%d K=%d) on %s: status %d", B, T, N,
                             K, x->name, (int)st);
    return DRT_OK;
}
#endif

/* The register blocks of the register-blocked variants, from the device's
 * native float vector width (the registers they need: MR*NR + MR + NR
 * vectors for dot, MR*OV + OV + 1 for outer; 32 vector registers with
 * AVX-512, 16 with AVX2) */
typedef struct {
    int v, gemv_nr, mr, nr, omr, ov, sw;
} rb_shape;

static rb_shape rb_pick(int v) {
    if (v >= 16) return (rb_shape){16, 8, 4, 4, 4, 2, 16};
    if (v >= 8) return (rb_shape){8, 8, 2, 4, 4, 2, 16};
    return (rb_shape){4, 8, 2, 4, 4, 2, 16};
}

int ocl_matmul_options(ocl_ctx *x, char *buf, size_t n) {
    rb_shape r = rb_pick(x->rb_v);
    x->rb_v = r.v;
    snprintf(x->mm_name[OCL_MM_MATVEC], sizeof x->mm_name[0], "matvec local-reduce %dx%d", OCL_MV_NR, OCL_MV_WG);
    snprintf(x->mm_name[OCL_MM_TILED], sizeof x->mm_name[0], "tiled local %dx%d/4x4", OCL_MM_TM, OCL_MM_TN);
    snprintf(x->mm_name[OCL_MM_GEMV], sizeof x->mm_name[0], "gemv regs 1x%d v%d", r.gemv_nr, r.v);
    snprintf(x->mm_name[OCL_MM_DOT], sizeof x->mm_name[0], "dot regs %dx%d v%d", r.mr, r.nr, r.v);
    snprintf(x->mm_name[OCL_MM_ROWS], sizeof x->mm_name[0], "rows regs Tx%d in %dx%d v%d", r.nr, r.mr, r.nr, r.v);
    snprintf(x->mm_name[OCL_MM_OUTER], sizeof x->mm_name[0], "outer regs %dx%d v%d", r.omr, r.ov * r.v, r.v);
    snprintf(x->mm_name[OCL_MM_CLBLAST], sizeof x->mm_name[0], "clblast sgemm");
    return snprintf(buf, n,
                    " -DRB_V=%d -DRB_GEMV_NR=%d -DRB_MR=%d -DRB_NR=%d -DRB_OMR=%d -DRB_OV=%d "
                    "-DRB_SW=%d",
                    r.v, r.gemv_nr, r.mr, r.nr, r.omr, r.ov, r.sw);
}

/* The variant table: CLBlast when asked for (f32 weights); register blocks on
 * CPU-class devices (or DIFFRT_OPENCL_GEMM=regs) by shape class: trans_w ->
 * outer, T == 1 -> gemv, T <= OCL_MM_ROWS_MAX -> rows, else dot;
 * local-memory tiles elsewhere (T == 1 -> matvec, else tiled: a weight tile
 * serves 64 rows). */
ocl_mm_variant ocl_matmul_variant(const ocl_ctx *x, const drt_tensor *t) {
    const drt_matmul_shape m = drt_matmul_dims(t);
    const int64_t T = m.T;
    const int trans_w = m.trans_w;
    if (x->gemm == OCL_GEMM_CLBLAST && m.wtype == DRT_F32) return OCL_MM_CLBLAST;
    if (x->mm_regs) {
        if (trans_w) return OCL_MM_OUTER;
        if (T == 1) return OCL_MM_GEMV;
        if (T <= OCL_MM_ROWS_MAX) return OCL_MM_ROWS;
        return OCL_MM_DOT;
    }
    return ocl_matmul_uses_matvec(T, trans_w) ? OCL_MM_MATVEC : OCL_MM_TILED;
}

/* Launches a register-block kernel: one item per MR x NR tile of the
 * (T, N) output, a 1-d range per batch, work-groups of rb_wg items */
static drt_status rb_run(ocl_ctx *x, ocl_call *c, int B, int T, int N, int mr, int nr) {
    size_t tiles = (size_t)((T + mr - 1) / mr) * (size_t)((N + nr - 1) / nr);
    size_t wg = x->rb_wg;
    while (wg > 1 && wg / 2 >= tiles) /* small launches: do not round up past the work */
        wg /= 2;
    size_t g[2] = {tiles, (size_t)B}, l[2] = {wg, 1};
    return ocl_run(c, 2, g, l);
}

drt_status ocl_matmul(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *w = t->src[1];
    const drt_matmul_shape m = drt_matmul_dims(t);
    const int B = (int)m.B, Bw = (int)m.Bw, T = (int)m.T, N = (int)m.N, K = (int)m.K;
    const int trans_w = m.trans_w;
    const float scale = m.scale;
    if ((int64_t)B * T * N == 0) return DRT_OK;
    if (drt_dtype_block(w->type) > 1) return ocl_matmul_q(x, t);
    ocl_mm_variant var = ocl_matmul_variant(x, t);
#ifdef DIFFRT_HAVE_CLBLAST
    if (var == OCL_MM_CLBLAST) return clblast_matmul(x, t, B, Bw, T, N, K, trans_w, scale);
#endif
    int wt = w->type == DRT_F16 ? 1 : w->type == DRT_BF16 ? 2 : 0;
    static const ocl_kernel_id base[OCL_MM_COUNT] = {
        [OCL_MM_MATVEC] = OCL_K_MATVEC_F32, [OCL_MM_TILED] = OCL_K_MATMUL_F32, [OCL_MM_GEMV] = OCL_K_GEMV_F32,
        [OCL_MM_DOT] = OCL_K_DOT_F32,       [OCL_MM_ROWS] = OCL_K_ROWS_F32,    [OCL_MM_OUTER] = OCL_K_OUTER_F32,
    };
    ocl_call c;
    ocl_begin(&c, x, (ocl_kernel_id)(base[var] + wt));
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, a);
    ocl_arg_tensor(&c, w);
    ocl_arg_int(&c, B);
    ocl_arg_int(&c, Bw);
    ocl_arg_int(&c, T);
    ocl_arg_int(&c, N);
    ocl_arg_int(&c, K);
    if (var == OCL_MM_TILED) ocl_arg_int(&c, trans_w);
    ocl_arg_float(&c, scale);
    if (var == OCL_MM_MATVEC) {
        size_t g[2] = {(size_t)(N + OCL_MV_NR - 1) / OCL_MV_NR * OCL_MV_WG, (size_t)B * T};
        size_t l[2] = {OCL_MV_WG, 1};
        return ocl_run(&c, 2, g, l);
    }
    if (var == OCL_MM_TILED) {
        size_t g[3] = {(size_t)(N + OCL_MM_TN - 1) / OCL_MM_TN * OCL_MM_TW,
                       (size_t)(T + OCL_MM_TM - 1) / OCL_MM_TM * OCL_MM_TW, (size_t)B};
        size_t l[3] = {OCL_MM_TW, OCL_MM_TW, 1};
        return ocl_run(&c, 3, g, l);
    }
    /* register blocks: one item per MR x NR tile (rows: per NR weight rows),
     * a 1-d range per batch */
    rb_shape r = rb_pick(x->rb_v);
    int mr = var == OCL_MM_GEMV ? 1 : var == OCL_MM_DOT ? r.mr : var == OCL_MM_ROWS ? T : r.omr;
    int nr = var == OCL_MM_GEMV ? r.gemv_nr : var == OCL_MM_DOT || var == OCL_MM_ROWS ? r.nr : r.ov * r.v;
    return rb_run(x, &c, B, T, N, mr, nr);
}

void ocl_matmul_shutdown(ocl_ctx *x) {
#ifdef DIFFRT_HAVE_CLBLAST
    /* CLBlast keeps compiled programs per context in a process-wide cache */
    if (x->clblast_used) CLBlastClearCache();
#else
    (void)x;
#endif
}

/* q8_0 / q4_0 weights (matmul_q.cl): register blocks on CPU-class devices
 * (1 x 8 q8_0 and 1 x 4 q4_0 rows for T == 1; 4 weight rows x all T rows
 * for T <= OCL_MM_ROWS_MAX; else 4 x 4), else one work-group of 32 items
 * per output */
static ocl_kernel_id matmul_q_kernel(const ocl_ctx *x, const drt_tensor *t) {
    const drt_matmul_shape m = drt_matmul_dims(t);
    const int q8 = m.wtype == DRT_Q8_0, T = (int)m.T;
    if (!x->mm_regs) return q8 ? OCL_K_MATMUL_Q8_0 : OCL_K_MATMUL_Q4_0;
    if (T == 1) return q8 ? OCL_K_GEMV_Q8_0 : OCL_K_GEMV_Q4_0;
    if (T <= OCL_MM_ROWS_MAX) return q8 ? OCL_K_ROWS_Q8_0 : OCL_K_ROWS_Q4_0;
    return q8 ? OCL_K_DOT_Q8_0 : OCL_K_DOT_Q4_0;
}

const char *ocl_matmul_q_variant(const ocl_ctx *x, const drt_tensor *t) {
    switch (matmul_q_kernel(x, t)) {
    case OCL_K_GEMV_Q8_0: return "q8_0 gemv regs 1x8 v16";
    case OCL_K_GEMV_Q4_0: return "q4_0 gemv regs 1x4 v16";
    case OCL_K_DOT_Q8_0: return "q8_0 dot regs 4x4 v16";
    case OCL_K_DOT_Q4_0: return "q4_0 dot regs 4x4 v16";
    case OCL_K_ROWS_Q8_0: return "q8_0 rows regs Tx4 in 4x4 v16";
    case OCL_K_ROWS_Q4_0: return "q4_0 rows regs Tx4 in 4x4 v16";
    case OCL_K_MATMUL_Q8_0: return "q8_0 blocks, work-group per output";
    default: return "q4_0 blocks, work-group per output";
    }
}

drt_status ocl_matmul_q(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *w = t->src[1];
    const drt_matmul_shape m = drt_matmul_dims(t);
    const int B = (int)m.B, Bw = (int)m.Bw, T = (int)m.T, N = (int)m.N, K = (int)m.K;
    const ocl_kernel_id k = matmul_q_kernel(x, t);
    ocl_call c;
    ocl_begin(&c, x, k);
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, a);
    ocl_arg_mem(&c, ocl_mem(w));
    ocl_arg_ulong(&c, w->offs); /* bytes: blocks have no element size */
    ocl_arg_int(&c, B);
    ocl_arg_int(&c, Bw);
    ocl_arg_int(&c, T);
    ocl_arg_int(&c, N);
    ocl_arg_int(&c, K);
    ocl_arg_float(&c, m.scale);
    if (k == OCL_K_GEMV_Q8_0) return rb_run(x, &c, B, T, N, 1, 8);
    if (k == OCL_K_GEMV_Q4_0) return rb_run(x, &c, B, T, N, 1, 4);
    if (k == OCL_K_DOT_Q8_0 || k == OCL_K_DOT_Q4_0) return rb_run(x, &c, B, T, N, 4, 4);
    if (k == OCL_K_ROWS_Q8_0 || k == OCL_K_ROWS_Q4_0) return rb_run(x, &c, B, T, N, T, 4);
    size_t g[3] = {(size_t)N * 32, (size_t)T, (size_t)B}, l[3] = {32, 1, 1};
    return ocl_run(&c, 3, g, l);
}
