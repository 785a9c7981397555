/* OpenCL host side of RMSNORM and GROUPNORM: both run the rmsnorm kernel of
 * norm.cl over rows (GROUPNORM's rows are the T*H heads of dv, with its
 * scale); shapes as in drt_ref_run_node.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend opencl --op RMSNORM,GROUPNORM (PoCL runs it here; ctest conform)
 */
#include "ocl.h"

/* y, x are (rows, C); w is (C) or absent */
static drt_status norm_rows(ocl_ctx *x, const drt_tensor *t, int64_t rows, int C, float eps, float scale) {
    const drt_tensor *w = t->src[1];
    ocl_call c;
    ocl_begin(&c, x, OCL_K_RMSNORM);
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, t->src[0]);
    /* no weight: any valid buffer fills the slot; has_w = 0 keeps it unread */
    ocl_arg_tensor(&c, w ? w : t->src[0]);
    ocl_arg_int(&c, w != NULL);
    ocl_arg_int(&c, C);
    ocl_arg_float(&c, eps);
    ocl_arg_float(&c, scale);
    size_t wg = ocl_row_wg(x, C);
    size_t g[2] = {wg, (size_t)rows}, l[2] = {wg, 1};
    return ocl_run(&c, 2, g, l);
}

/* x (..., C) -> y; eps fp[0] */
drt_status ocl_rmsnorm(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *a = t->src[0];
    int64_t C = a->ne[a->nd - 1];
    return norm_rows(x, t, C ? drt_nelem(a) / C : 0, (int)C, t->fp[0], 1.0f);
}

/* x (T,H,dv) -> y; eps fp[0], scale fp[1] */
drt_status ocl_groupnorm(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *a = t->src[0];
    return norm_rows(x, t, a->ne[0] * a->ne[1], (int)a->ne[2], t->fp[0], t->fp[1]);
}
