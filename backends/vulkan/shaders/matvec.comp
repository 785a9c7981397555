#version 450
#extension GL_GOOGLE_include_directive : require
/* MATMUL for few rows (decode: T = 1; decode rows of several sequences:
 * T up to 32), W not transposed:
 * y[b,t,n] = scale * sum_k x[b,t,k] * W[bw,n,k], bw = b*Bw/B.
 * x is (B,T,K) f32; W is (Bw,N,K); y is (B,T,N) f32.
 * CPU reference: backends/ref/matmul.c.
 *
 * Each weight loaded is used for TT rows t (spec constant 3): a workgroup
 * owns rows t0 .. t0+TT-1 (grid y = T/TT), so with TT >= T every weight is
 * streamed once for all rows; rows past T re-read row T-1 and are not
 * written.
 * A workgroup computes 4 consecutive n of its rows at a time (grid: x
 * blocks of 4 n, y = T/TT, z = B), striding over the blocks of N when the
 * grid has fewer than N/4 (CPU devices: few workgroups of one subgroup
 * each, see backends/vulkan/matmul.c): its WG threads stride over K
 * (consecutive threads read consecutive weights: coalesced), then one
 * workgroup reduction of the four partial sums per row (subgroup ops, or
 * shared memory without them).
 * VEC = 1 (K and the x and W offsets multiples of 4): x and W are read 4
 * elements per load (load_w4a: for packed f16 two 32-bit words).
 * VEC = 2 (module LOAD_I64, packed f16/bf16 only, for CPU devices; K and
 * the W offset multiples of 16, the x offset of 8): a thread computes a
 * whole row n, no reduction, the grid striding over N; 16 weights per
 * step as 64-bit words: llvmpipe loads a storage buffer lane by lane and
 * component by component, so fewer, wider components move more bytes per
 * step (K=128 N=3840: 246 us vs 408 us split over K with a reduction).
 * Napkin math: 2*T*N*K flops; reads the N*K weights once per TT rows t:
 * bandwidth bound at N*K*sizeof(w) bytes when TT >= T and T is small. */
#define WANT_REDUCE
#include "common.glsl"
#include "weights.glsl"
#ifdef LOAD_I64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif

layout(constant_id = 2) const uint VEC = 0;
layout(constant_id = 3) const uint TT = 1; /* rows t per workgroup */

layout(binding = 0) readonly buffer Xbuf { float x[]; };
layout(binding = 0) readonly buffer Xbuf4 { vec4 x4[]; };
#ifdef LOAD_I64
layout(binding = 0) readonly buffer Xbuf8 { u64vec4 x8[]; };   /* 8 f32 */
layout(binding = 1) readonly buffer Wbuf16 { u64vec4 w16[]; }; /* 16 f16 or bf16 */

vec4 f32x4(uint64_t a, uint64_t b) {
    return vec4(uintBitsToFloat(unpackUint2x32(a)), uintBitsToFloat(unpackUint2x32(b)));
}
/* the 16 weights in w against x16[0..3] */
float dot16(const vec4 x16[4], u64vec4 w) {
    return dot(x16[0], unpack_w4(unpackUint2x32(w.x))) + dot(x16[1], unpack_w4(unpackUint2x32(w.y))) +
           dot(x16[2], unpack_w4(unpackUint2x32(w.z))) + dot(x16[3], unpack_w4(unpackUint2x32(w.w)));
}
#endif
layout(binding = 4) writeonly buffer Ybuf { float y[]; };

layout(push_constant) uniform PC {
    uint o_x, o_w, o_y;
    uint B, Bw, T, N, K;
    float scale;
} pc;

void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint t0 = gl_WorkGroupID.y * TT, b = gl_WorkGroupID.z;
    const uint bw = b * pc.Bw / pc.B;
    uint xr[TT]; /* rows t past T: re-read row T-1, not written */
    for (uint tt = 0; tt < TT; tt++) xr[tt] = pc.o_x + (b * pc.T + min(t0 + tt, pc.T - 1u)) * pc.K;
    const uint wb = pc.o_w + bw * pc.N * pc.K;
#ifdef LOAD_I64
    if (VEC == 2) { /* a row per thread, no reduction (VEC is a constant: uniform) */
        for (uint n = gl_WorkGroupID.x * WG + tid; n < pc.N; n += gl_NumWorkGroups.x * WG) {
            const uint w16r = (wb + n * pc.K) / 16;
            float acc[TT];
            for (uint tt = 0; tt < TT; tt++) acc[tt] = 0.0;
            for (uint k = 0; k < pc.K / 16; k++) {
                const u64vec4 wv = w16[w16r + k];
                for (uint tt = 0; tt < TT; tt++) {
                    u64vec4 xa = x8[xr[tt] / 8 + 2 * k], xb = x8[xr[tt] / 8 + 2 * k + 1];
                    const vec4 x16[4] = {f32x4(xa.x, xa.y), f32x4(xa.z, xa.w), f32x4(xb.x, xb.y), f32x4(xb.z, xb.w)};
                    acc[tt] += dot16(x16, wv);
                }
            }
            for (uint tt = 0; tt < TT && t0 + tt < pc.T; tt++)
                y[pc.o_y + (b * pc.T + t0 + tt) * pc.N + n] = pc.scale * acc[tt];
        }
        return;
    }
#endif
    /* uniform in the workgroup: every thread reaches the reductions */
    for (uint n0 = gl_WorkGroupID.x * 4; n0 < pc.N; n0 += gl_NumWorkGroups.x * 4) {
        /* rows past N re-read row N-1 (in bounds) and are not written */
        uvec4 wr;
        for (uint r = 0; r < 4; r++) wr[r] = wb + min(n0 + r, pc.N - 1) * pc.K;

        vec4 acc[TT];
        for (uint tt = 0; tt < TT; tt++) acc[tt] = vec4(0.0);
        if (VEC == 1) {
            const uvec4 w4r = wr / 4;
            for (uint k = tid; k < pc.K / 4; k += WG) {
                const vec4 w0 = load_w4a(w4r.x + k), w1 = load_w4a(w4r.y + k);
                const vec4 w2 = load_w4a(w4r.z + k), w3 = load_w4a(w4r.w + k);
                for (uint tt = 0; tt < TT; tt++) {
                    const vec4 xv = x4[xr[tt] / 4 + k];
                    acc[tt] += vec4(dot(xv, w0), dot(xv, w1), dot(xv, w2), dot(xv, w3));
                }
            }
        } else {
            for (uint k = tid; k < pc.K; k += WG) {
                const vec4 wv = vec4(load_w(wr.x + k), load_w(wr.y + k), load_w(wr.z + k), load_w(wr.w + k));
                for (uint tt = 0; tt < TT; tt++) acc[tt] += x[xr[tt] + k] * wv;
            }
        }
        for (uint tt = 0; tt < TT; tt++) {
            const vec4 sum = wg_sum(acc[tt]);
            if (tid < 4 && n0 + tid < pc.N && t0 + tt < pc.T)
                y[pc.o_y + (b * pc.T + t0 + tt) * pc.N + n0 + tid] = pc.scale * sum[tid];
        }
    }
}
