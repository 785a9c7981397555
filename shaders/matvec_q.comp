#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
/* MATMUL with q8_0 (Q8) / q4_0 (Q4) weights for CPU devices (lavapipe):
 * y[b,t,n] = scale * sum_k x[b,t,k] * W[bw,n,k], bw = b*Bw/B, W (Bw,N,K) in
 * blocks of 32 along K (docs/quantization.md). The general kernel (one
 * invocation per output, bytewise loads) is shaders/matmul_q.comp; CPU
 * reference: backends/ref/matmul.c.
 *
 * A lane owns R rows n (grid x over N, striding when the grid is smaller;
 * y = T, z = B) and walks them in super-blocks of 4 blocks: 72 (q4_0) or
 * 136 (q8_0) bytes, a whole number of 64-bit words. The host takes this
 * path only when K % 128 == 0, the W byte offset % 8 == 0 and the x offset
 * % 8 == 0, so every super-block starts on a 64-bit word and the blocks
 * inside sit at fixed places: blocks 0 and 2 start 4-byte aligned (their
 * values 2 bytes in: a funnel shift by 16), blocks 1 and 3 at 2 mod 4
 * (values 4-byte aligned). llvmpipe loads a storage buffer lane by lane and
 * component by component: 64-bit words move twice the bytes per step of
 * 32-bit ones; x is read 8 floats per load (as 4 64-bit words) once per
 * block for the R rows.
 * Napkin math: N*K/32*(18|34) bytes of weights per row of x. */
#include "common.glsl"

#if defined(Q8)
const uint SW = 17u; /* 64-bit words per super-block */
const uint QW = 8u;  /* 32-bit words of values per block */
#elif defined(Q4)
const uint SW = 9u;
const uint QW = 4u;
#else
#error "define Q8 or Q4"
#endif
const uint PW = SW; /* 32-bit words per block pair (= SW: a pair is half a super-block) */

layout(constant_id = 2) const uint R = 1; /* rows per lane */

layout(binding = 0) readonly buffer Xbuf8 { u64vec4 x8[]; }; /* 8 f32 */
layout(binding = 1) readonly buffer Wbuf8 { uint64_t w8[]; };
layout(binding = 4) writeonly buffer Ybuf { float y[]; };

layout(push_constant) uniform PC {
    uint o_x, o_w, o_y; /* o_w in bytes */
    uint B, Bw, T, N, K;
    float scale;
} pc;

vec4 f32x4(uint64_t a, uint64_t b) {
    return vec4(uintBitsToFloat(unpackUint2x32(a)), uintBitsToFloat(unpackUint2x32(b)));
}

/* 4 consecutive values of the block from one 32-bit word of its bytes */
#if defined(Q8)
vec4 vals(uint q) { return vec4(ivec4(q << 24, q << 16, q << 8, q) >> 24); }
#endif

void main() {
    const uint t = gl_WorkGroupID.y, b = gl_WorkGroupID.z;
    const uint bw = b * pc.Bw / pc.B, ns = pc.K / 128u;
    const uint x8r = (pc.o_x + (b * pc.T + t) * pc.K) / 8u;
    const uint wb = pc.o_w / 8u + bw * pc.N * ns * SW;
    for (uint n0 = (gl_WorkGroupID.x * WG + gl_LocalInvocationIndex) * R; n0 < pc.N;
         n0 += gl_NumWorkGroups.x * WG * R) {
        float acc[R];
        uint wr[R];
        for (uint r = 0; r < R; r++) {
            acc[r] = 0.0;
            wr[r] = wb + min(n0 + r, pc.N - 1u) * ns * SW; /* rows past N: re-read, not written */
        }
        for (uint s = 0; s < ns; s++) {
            uint u[R][2 * SW]; /* the super-block of each row as 32-bit words */
            for (uint r = 0; r < R; r++)
                for (uint i = 0; i < SW; i++) {
                    const uvec2 p = unpackUint2x32(w8[wr[r] + s * SW + i]);
                    u[r][2 * i] = p.x;
                    u[r][2 * i + 1] = p.y;
                }
            for (uint blk = 0; blk < 4u; blk++) {
                const uint xq = x8r + (s * 4u + blk) * 4u;
                vec4 xv[8];
                for (uint i = 0; i < 4u; i++) {
                    const u64vec4 xw = x8[xq + i];
                    xv[2u * i] = f32x4(xw.x, xw.y);
                    xv[2u * i + 1u] = f32x4(xw.z, xw.w);
                }
                /* block blk of the super-block: pair blk/2, first or second half */
                const uint pb = (blk >> 1) * PW;
                for (uint r = 0; r < R; r++) {
                    float d, sum = 0.0;
                    uint qw[QW];
                    if ((blk & 1u) == 0u) {
                        d = unpackHalf2x16(u[r][pb]).x;
                        for (uint i = 0; i < QW; i++) qw[i] = (u[r][pb + i] >> 16) | (u[r][pb + i + 1u] << 16);
                    } else {
                        d = unpackHalf2x16(u[r][pb + QW] >> 16).x;
                        for (uint i = 0; i < QW; i++) qw[i] = u[r][pb + QW + 1u + i];
                    }
#if defined(Q8)
                    for (uint i = 0; i < QW; i++) sum += dot(xv[i], vals(qw[i]));
#else
                    /* word i: values 4i..4i+3 in the low nibbles, 16+4i.. in the high */
                    for (uint i = 0; i < QW; i++) {
                        const uvec4 q = uvec4(qw[i], qw[i] >> 8, qw[i] >> 16, qw[i] >> 24);
                        sum += dot(xv[i], vec4(q & 15u) - 8.0) + dot(xv[4u + i], vec4((q >> 4) & 15u) - 8.0);
                    }
#endif
                    acc[r] = fma(d, sum, acc[r]);
                }
            }
        }
        for (uint r = 0; r < R; r++)
            if (n0 + r < pc.N) y[pc.o_y + (b * pc.T + t) * pc.N + n0 + r] = pc.scale * acc[r];
    }
}
