/* OpenCL kernels: RMSNORM and GROUPNORM (docs/design.md section 3; reference in
 * backends/cpu/norm.c). Both are one kernel: per row of C elements,
 *   y = x * scale / sqrt(mean(x^2) + eps) * w
 * with scale = 1 for RMSNORM, (1 - lambda_init) for GROUPNORM (whose rows are
 * the (t,h) heads of (T,H,dv)). Tensors come as (pointer, element offset). */

#define NORM_WG_MAX 256

/* y, x are (rows,C); w is (C) when has_w. One work-group per row, its size a
 * power of two <= NORM_WG_MAX: strided partial sums of squares, then a tree
 * reduction in local memory. Global (wg, rows).
 * Napkin math: 4*rows*C flops; reads rows*C (+C), writes rows*C floats. */
__kernel void rmsnorm(__global float *y, ulong yo, __global const float *x, ulong xo,
                      __global const float *w, ulong wo, int has_w, int C, float eps, float scale) {
    __local float red[NORM_WG_MAX];
    const int lid = get_local_id(0), wg = get_local_size(0);
    const size_t row = get_group_id(1);
    x += xo + row * C;
    y += yo + row * C;
    w += wo;
    float ss = 0.0f;
    for (int c = lid; c < C; c += wg)
        ss += x[c] * x[c];
    red[lid] = ss;
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = wg / 2; s > 0; s >>= 1) {
        if (lid < s) red[lid] += red[lid + s];
        barrier(CLK_LOCAL_MEM_FENCE);
    }
    const float r = scale / sqrt(red[0] / (float)C + eps);
    for (int c = lid; c < C; c += wg)
        y[c] = has_w ? x[c] * r * w[c] : x[c] * r;
}
