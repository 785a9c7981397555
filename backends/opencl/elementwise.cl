/* OpenCL kernels: EMBED, ROPE, SWIGLU, SIGMOID, ADD, KV_WRITE's scatter
 * and PERMUTE (docs/design.md section 3). The plain reference for each is
 * in backends/cpu/elementwise.c; shapes below use its names.
 *
 * Every tensor comes as (base pointer, element offset): views share their
 * base's buffer, and sub-buffers would impose alignment rules on them. All
 * element counts fit in int (the host checks); offsets are ulong. */

/* Weight dtypes, as drt_dtype. f16 is read with vload_half and bf16 by
 * shifting its 16 bits into the top of an f32, so no cl_khr_fp16 is needed. */
#define WT_F32 0
#define WT_F16 1
#define WT_BF16 2

inline float load_w(__global const uchar *w, size_t i, const int wt) {
    if (wt == WT_F16) return vload_half(i, (__global const half *)w);
    if (wt == WT_BF16) return as_float((uint)((__global const ushort *)w)[i] << 16);
    return ((__global const float *)w)[i];
}

/* y is (T,D); ids is (T); E is (V,D) of dtype wt. An id outside [0,V) is
 * never read: its row becomes NaN and the first such (position+1, id) is
 * reported in err[0..1] for the host to turn into an error.
 * Global (D, T). Napkin math: reads T*D weights, writes T*D floats. */
inline void embed_body(__global float *y, __global const int *ids, __global const uchar *E,
                       size_t eo, int T, int V, int D, __global int *err, const int wt) {
    const int d = get_global_id(0), t = get_global_id(1);
    if (d >= D || t >= T) return;
    const int id = ids[t];
    if (id < 0 || id >= V) {
        if (d == 0 && atomic_cmpxchg(err, 0, t + 1) == 0) err[1] = id;
        y[(size_t)t * D + d] = NAN;
        return;
    }
    y[(size_t)t * D + d] = load_w(E, eo + (size_t)id * D + d, wt);
}

__kernel void embed_f32(__global float *y, ulong yo, __global const int *ids, ulong io,
                        __global const uchar *E, ulong eo, int T, int V, int D, __global int *err) {
    embed_body(y + yo, ids + io, E, eo, T, V, D, err, WT_F32);
}

__kernel void embed_f16(__global float *y, ulong yo, __global const int *ids, ulong io,
                        __global const uchar *E, ulong eo, int T, int V, int D, __global int *err) {
    embed_body(y + yo, ids + io, E, eo, T, V, D, err, WT_F16);
}

__kernel void embed_bf16(__global float *y, ulong yo, __global const int *ids, ulong io,
                         __global const uchar *E, ulong eo, int T, int V, int D,
                         __global int *err) {
    embed_body(y + yo, ids + io, E, eo, T, V, D, err, WT_BF16);
}

/* y, x are (T,Hn,d); inv_freq is (d/2); rows is (T,2) {base, pos}: token t
 * is at position pos = rows[2t+1] (its sequence's; the base is not read).
 * rotate_half: for i < d/2, a = pos*inv_freq[i],
 *   y[i] = x[i] cos a - x[i+d/2] sin a,   y[i+d/2] = x[i+d/2] cos a + x[i] sin a.
 * The reference forms pos*inv_freq in double. Here the product is split into
 * hi + lo exactly (fma gives the rounding error of an f32 product; pos < 2^24
 * is exact in f32), and sin/cos of hi are corrected to first order in lo
 * (|lo| <= 2^-24 |a|, so the dropped lo^2/2 term is below f32 resolution).
 * Global (d/2, Hn, T); y may equal x (each pair is read before it is written).
 * Napkin math: reads and writes T*Hn*d floats. */
__kernel void rope(__global float *y, ulong yo, __global const float *x, ulong xo,
                   __global const float *inv_freq, ulong fo, __global const int *rows, ulong ro,
                   int T, int Hn, int d) {
    const int i = get_global_id(0), h = get_global_id(1), t = get_global_id(2);
    const int half_d = d / 2;
    if (i >= half_d || h >= Hn || t >= T) return;
    y += yo;
    x += xo;
    const float pos = (float)rows[ro + 2 * t + 1];
    const float f = inv_freq[fo + i];
    const float hi = pos * f;
    const float lo = fma(pos, f, -hi);
    const float ch = cos(hi), sh = sin(hi);
    const float c = ch - sh * lo, s = sh + ch * lo;
    const size_t off = ((size_t)t * Hn + h) * d;
    const float x0 = x[off + i], x1 = x[off + i + half_d];
    y[off + i] = x0 * c - x1 * s;
    y[off + i + half_d] = x1 * c + x0 * s;
}

/* y, g, u are (n): y = g / (1 + exp(-g)) * u; for g << 0 exp(-g) is +inf and
 * the quotient -0, never NaN. Global (n). Napkin math: 3n floats moved. */
__kernel void swiglu(__global float *y, ulong yo, __global const float *g, ulong go,
                     __global const float *u, ulong uo, int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    const float gi = g[go + i];
    y[yo + i] = gi / (1.0f + exp(-gi)) * u[uo + i];
}

/* y, x are (n). Global (n). */
__kernel void sigmoid(__global float *y, ulong yo, __global const float *x, ulong xo, int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    y[yo + i] = 1.0f / (1.0f + exp(-x[xo + i]));
}

/* y, a, b are (n). Global (n). */
__kernel void add(__global float *y, ulong yo, __global const float *a, ulong ao,
                  __global const float *b, ulong bo, int n) {
    const int i = get_global_id(0);
    if (i >= n) return;
    y[yo + i] = a[ao + i] + b[bo + i];
}

/* KV_WRITE: x is (T,row), y the cache (S_cap,row); rows is (T,2) {base, pos}:
 * row t of x goes to cache row base + pos (rows of several sequences scatter
 * to their slots). Global (row, T). Napkin math: 2*T*row floats moved. */
__kernel void kv_write(__global float *y, ulong yo, __global const float *x, ulong xo,
                       __global const int *rows, ulong ro, int row, int T) {
    const int i = get_global_id(0), t = get_global_id(1);
    if (i >= row || t >= T) return;
    const size_t dst = (size_t)rows[ro + 2 * t] + (size_t)rows[ro + 2 * t + 1];
    y[yo + dst * row + i] = x[xo + (size_t)t * row + i];
}

/* KV_WRITE into f16 and q8_0 caches (runtime/drt_kv.h): as kv_write, each
 * row rounded into the cache's type exactly as drt_kv_store does, so the
 * stored bytes equal the reference's. y is the cache's buffer at byte offset
 * yo (q8_0 blocks have no element size); a cache row of `row` elements is
 * drt_row_bytes(type, row) bytes.
 * f16: round to nearest even (vstore_half_rte; beyond 65504 is Inf), NaN as
 * drt_f32_to_f16 writes it (sign | 0x7e00). Global (row, T).
 * Napkin math: reads 4*T*row, writes 2*T*row bytes. */
__kernel void kv_write_f16(__global uchar *y, ulong yo, __global const float *x, ulong xo,
                           __global const int *rows, ulong ro, int row, int T) {
    const int i = get_global_id(0), t = get_global_id(1);
    if (i >= row || t >= T) return;
    const size_t dst = ((size_t)rows[ro + 2 * t] + (size_t)rows[ro + 2 * t + 1]) * row + i;
    const float v = x[xo + (size_t)t * row + i];
    if (isnan(v))
        ((__global ushort *)(y + yo))[dst] = (ushort)((as_uint(v) >> 16 & 0x8000u) | 0x7e00u);
    else
        vstore_half_rte(v, dst, (__global half *)(y + yo));
}

/* a / b rounded to nearest, as C's float division: OpenCL lets a / b be off
 * by 2.5 ulp in f32, while a double quotient is correctly rounded and
 * rounding it to float gives the correctly rounded float quotient (53 >=
 * 2*24 + 2 bits: no double-rounding error) */
#ifdef cl_khr_fp64
#pragma OPENCL EXTENSION cl_khr_fp64 : enable
inline float div_rn(float a, float b) {
    return (float)((double)a / (double)b);
}
#else
inline float div_rn(float a, float b) {
    return a / b; /* exact on devices whose f32 division is (CPUs) */
}
#endif

/* q8_0: one item per block of 32 elements of a row (row % 32 == 0), 34
 * bytes out: the f16 scale d = max|x| / 127, then q = round-half-away(x *
 * (1/d)) clamped to [-127, 127] (NaN -> 0), as quant.c's quantize_q8_0.
 * Blocks start at even bytes only (34 * k from an even yo): the scale is
 * stored with vstore_half_rte, the quants as bytes. Global (row/32, T).
 * Napkin math: reads 4*T*row, writes 34/32*T*row bytes. */
__kernel void kv_write_q8_0(__global uchar *y, ulong yo, __global const float *x, ulong xo,
                            __global const int *rows, ulong ro, int row, int T) {
    const int b = get_global_id(0), t = get_global_id(1), nb = row / 32;
    if (b >= nb || t >= T) return;
    const size_t dst = ((size_t)rows[ro + 2 * t] + (size_t)rows[ro + 2 * t + 1]) * nb + b;
    __global const float *xr = x + xo + (size_t)t * row + (size_t)b * 32;
    __global uchar *blk = y + yo + dst * 34;
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) {
        const float a = fabs(xr[j]);
        if (a > amax) amax = a;
    }
    const float d = div_rn(amax, 127.0f), id = d != 0.0f ? div_rn(1.0f, d) : 0.0f;
    vstore_half_rte(d, 0, (__global half *)blk);
    for (int j = 0; j < 32; j++) {
        float v = round(xr[j] * id);
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f;
        ((__global char *)blk)[2 + j] = (char)(int)v;
    }
}

/* Permuted copy, padded to 4 dims. y has shape (y0,y1,y2,y3) = (ne[perm[0]],
 * ..., ne[perm[3]]), written in order; output axis a steps through x by
 * gs[a] = stride of input axis perm[a]. Global (y3, y2, y0*y1): one division
 * per item. Napkin math: 2n floats moved (x gathered). */
__kernel void permute(__global float *y, ulong yo, __global const float *x, ulong xo, int y1,
                      int y2, int y3, int gs0, int gs1, int gs2, int gs3) {
    const int i3 = get_global_id(0), i2 = get_global_id(1), i01 = get_global_id(2);
    const int i1 = i01 % y1, i0 = i01 / y1;
    const size_t o = ((size_t)i01 * y2 + i2) * y3 + i3;
    const size_t j = (size_t)i0 * gs0 + (size_t)i1 * gs1 + (size_t)i2 * gs2 + (size_t)i3 * gs3;
    y[yo + o] = x[xo + j];
}
