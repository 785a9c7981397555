/* OpenCL host side of EMBED, ROPE, SWIGLU, SIGMOID, ADD, KV_WRITE and PERMUTE
 * (kernels in elementwise.cl). Shapes map to kernel arguments exactly as in
 * drt_ref_run_node (backends/ref/backend.c).
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend opencl --op EMBED,ROPE,SWIGLU,SIGMOID,ADD,KV_WRITE,PERMUTE (PoCL runs it here; ctest
 * conform)
 */
#include "drt_error.h"
#include "ocl.h"

/* ids (T) i32, E (V,D) f32/f16/bf16 -> y (T,D) */
drt_status ocl_embed(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *ids = t->src[0], *E = t->src[1];
    int T = (int)ids->ne[0], V = (int)E->ne[0], D = (int)E->ne[1];
    ocl_kernel_id k = E->type == DRT_F16 ? OCL_K_EMBED_F16 : E->type == DRT_BF16 ? OCL_K_EMBED_BF16 : OCL_K_EMBED_F32;
    x->embed_vocab = V;
    ocl_call c;
    ocl_begin(&c, x, k);
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, ids);
    ocl_arg_tensor(&c, E);
    ocl_arg_int(&c, T);
    ocl_arg_int(&c, V);
    ocl_arg_int(&c, D);
    ocl_arg_mem(&c, x->err);
    size_t g[2] = {(size_t)D, (size_t)T}, l[2] = {64, 1};
    return ocl_run(&c, 2, g, l);
}

/* x (T,Hn,d), inv_freq (d/2), rows (T,2) -> y (T,Hn,d); row t at its pos */
drt_status ocl_rope(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *a = t->src[0];
    int T = (int)a->ne[0], Hn = (int)a->ne[1], d = (int)a->ne[2];
    ocl_call c;
    ocl_begin(&c, x, OCL_K_ROPE);
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, a);
    ocl_arg_tensor(&c, t->src[1]);
    ocl_arg_tensor(&c, t->src[DRT_SRC_ROWS]);
    ocl_arg_int(&c, T);
    ocl_arg_int(&c, Hn);
    ocl_arg_int(&c, d);
    size_t g[3] = {(size_t)d / 2, (size_t)Hn, (size_t)T}, l[3] = {32, 1, 1};
    return ocl_run(&c, 3, g, l);
}

static drt_status binary(ocl_ctx *x, const drt_tensor *t, ocl_kernel_id k) {
    ocl_call c;
    ocl_begin(&c, x, k);
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, t->src[0]);
    ocl_arg_tensor(&c, t->src[1]);
    ocl_arg_int(&c, (int)drt_nelem(t));
    return ocl_run_1d(&c, drt_nelem(t));
}

drt_status ocl_swiglu(ocl_ctx *x, const drt_tensor *t) {
    return binary(x, t, OCL_K_SWIGLU);
}
drt_status ocl_add(ocl_ctx *x, const drt_tensor *t) {
    return binary(x, t, OCL_K_ADD);
}

drt_status ocl_sigmoid(ocl_ctx *x, const drt_tensor *t) {
    ocl_call c;
    ocl_begin(&c, x, OCL_K_SIGMOID);
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, t->src[0]);
    ocl_arg_int(&c, (int)drt_nelem(t));
    return ocl_run_1d(&c, drt_nelem(t));
}

/* src (T, row...) -> the cache src[1] (S_cap, row...), row t to cache row
 * base + pos of its rows entry (rows (T,2)), in place: the node is a view
 * of the cache, so nothing else is written. f16 and q8_0 caches get each
 * row rounded into their type (kv_write_f16, kv_write_q8_0: one item per
 * element, per block of 32) and take the cache's offset in bytes. */
drt_status ocl_kv_write(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *src = t->src[0], *cache = t->src[1];
    int64_t T = src->ne[0], row = T ? drt_nelem(src) / T : 0;
    if (T == 0 || row == 0) return DRT_OK;
    const drt_dtype kvt = cache->type;
    ocl_call c;
    ocl_begin(&c, x, kvt == DRT_F16 ? OCL_K_KV_WRITE_F16 : kvt == DRT_Q8_0 ? OCL_K_KV_WRITE_Q8_0 : OCL_K_KV_WRITE);
    if (kvt == DRT_F32) {
        ocl_arg_tensor(&c, cache);
    } else {
        ocl_arg_mem(&c, ocl_mem(cache));
        ocl_arg_ulong(&c, cache->offs);
    }
    ocl_arg_tensor(&c, src);
    ocl_arg_tensor(&c, t->src[DRT_SRC_ROWS]);
    ocl_arg_int(&c, (int)row);
    ocl_arg_int(&c, (int)T);
    size_t g[2] = {(size_t)(kvt == DRT_Q8_0 ? row / 32 : row), (size_t)T}, l[2] = {64, 1};
    return ocl_run(&c, 2, g, l);
}

/* x of nd <= 4 dims, padded at the front to 4; y dim a = x dim perm[a] */
drt_status ocl_permute(ocl_ctx *x, const drt_tensor *t) {
    const drt_tensor *a = t->src[0];
    int64_t ne[4];
    int perm[4];
    drt_permute_4d(t, ne, perm); /* padded at the front to 4 dims */
    const int64_t xs[4] = {ne[1] * ne[2] * ne[3], ne[2] * ne[3], ne[3], 1};
    ocl_call c;
    ocl_begin(&c, x, OCL_K_PERMUTE);
    ocl_arg_tensor(&c, t);
    ocl_arg_tensor(&c, a);
    for (int i = 1; i < 4; i++) ocl_arg_int(&c, (int)ne[perm[i]]);
    for (int i = 0; i < 4; i++) ocl_arg_int(&c, (int)xs[perm[i]]);
    /* exact global sizes, so no bounds checks; the driver picks the groups */
    size_t g[3] = {(size_t)ne[perm[3]], (size_t)ne[perm[2]], (size_t)(ne[perm[0]] * ne[perm[1]])};
    return ocl_run(&c, 3, g, NULL);
}
