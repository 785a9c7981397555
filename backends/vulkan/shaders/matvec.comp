#version 450
#extension GL_GOOGLE_include_directive : require
/* MATMUL for few rows (decode: T = 1), W not transposed:
 * y[b,t,n] = scale * sum_k x[b,t,k] * W[bw,n,k], bw = b*Bw/B.
 * x is (B,T,K) f32; W is (Bw,N,K); y is (B,T,N) f32.
 * CPU reference: backends/cpu/matmul.c (cpu_matmul).
 *
 * A workgroup computes 4 consecutive n of one row t at a time (grid: x
 * blocks of 4 n, y = T, z = B), striding over the blocks of N when the
 * grid has fewer than N/4 (CPU devices: few workgroups of one subgroup
 * each, see backends/vulkan/matmul.c): its WG threads stride over K
 * (consecutive threads read consecutive weights: coalesced), then one
 * workgroup reduction of the four partial sums (subgroup ops, or shared
 * memory without them).
 * VEC = 1 (K and the x and W offsets multiples of 4): x and W are read 4
 * elements per load (load_w4a: for packed f16 two 32-bit words).
 * VEC = 2 (module LOAD_I64, packed f16/bf16 only, for CPU devices; K and
 * the W offset multiples of 16, the x offset of 8): a thread computes a
 * whole row n, no reduction, the grid striding over N; 16 weights per
 * step as 64-bit words: llvmpipe loads a storage buffer lane by lane and
 * component by component, so fewer, wider components move more bytes per
 * step (K=128 N=3840: 246 us vs 408 us split over K with a reduction).
 * Napkin math: 2*T*N*K flops; reads the N*K weights once per row t: for
 * T = 1 this is bandwidth bound at N*K*sizeof(w) bytes. */
#define WANT_REDUCE
#include "common.glsl"
#include "weights.glsl"
#ifdef LOAD_I64
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
#endif

layout(constant_id = 2) const uint VEC = 0;

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
    const uint t = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
    const uint bw = b * pc.Bw / pc.B;
    const uint xr = pc.o_x + (b * pc.T + t) * pc.K;
    const uint wb = pc.o_w + bw * pc.N * pc.K;
#ifdef LOAD_I64
    if (VEC == 2) { /* a row per thread, no reduction (VEC is a constant: uniform) */
        const uint x8r = xr / 8;
        for (uint n = gl_WorkGroupID.x * WG + tid; n < pc.N; n += gl_NumWorkGroups.x * WG) {
            const uint w16r = (wb + n * pc.K) / 16;
            float acc = 0.0;
            for (uint k = 0; k < pc.K / 16; k++) {
                u64vec4 xa = x8[x8r + 2 * k], xb = x8[x8r + 2 * k + 1];
                const vec4 x16[4] = {f32x4(xa.x, xa.y), f32x4(xa.z, xa.w), f32x4(xb.x, xb.y), f32x4(xb.z, xb.w)};
                acc += dot16(x16, w16[w16r + k]);
            }
            y[pc.o_y + (b * pc.T + t) * pc.N + n] = pc.scale * acc;
        }
        return;
    }
#endif
    /* uniform in the workgroup: every thread reaches the reductions */
    for (uint n0 = gl_WorkGroupID.x * 4; n0 < pc.N; n0 += gl_NumWorkGroups.x * 4) {
        /* rows past N re-read row N-1 (in bounds) and are not written */
        uvec4 wr;
        for (uint r = 0; r < 4; r++) wr[r] = wb + min(n0 + r, pc.N - 1) * pc.K;

        vec4 acc = vec4(0.0);
        if (VEC == 1) {
            const uint x4r = xr / 4;
            const uvec4 w4r = wr / 4;
            for (uint k = tid; k < pc.K / 4; k += WG) {
                vec4 xv = x4[x4r + k];
                acc += vec4(dot(xv, load_w4a(w4r.x + k)), dot(xv, load_w4a(w4r.y + k)),
                            dot(xv, load_w4a(w4r.z + k)), dot(xv, load_w4a(w4r.w + k)));
            }
        } else {
            for (uint k = tid; k < pc.K; k += WG) {
                float xv = x[xr + k];
                acc += xv * vec4(load_w(wr.x + k), load_w(wr.y + k), load_w(wr.z + k), load_w(wr.w + k));
            }
        }
        acc = wg_sum(acc);
        if (tid < 4 && n0 + tid < pc.N) y[pc.o_y + (b * pc.T + t) * pc.N + n0 + tid] = pc.scale * acc[tid];
    }
}
