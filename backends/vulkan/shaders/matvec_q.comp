#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_shader_explicit_arithmetic_types_int64 : require
/* MATMUL with q8_0 (Q8) / q4_0 (Q4) weights for CPU devices (lavapipe):
 * y[b,t,n] = scale * sum_k x[b,t,k] * W[bw,n,k], bw = b*Bw/B, W (Bw,N,K) in
 * blocks of 32 along K (docs/quantization.md). The general kernel (one
 * invocation per output, bytewise loads) is shaders/matmul_q.comp; CPU
 * reference: backends/ref/matmul.c.
 *
 * A lane owns R rows n times TT rows t (grid x over N, striding when the
 * grid is smaller; y over T in steps of TT, z = B) and walks them in super-blocks of 4 blocks: 72 (q4_0) or
 * 136 (q8_0) bytes, a whole number of 64-bit words. The host takes this
 * path only when K % 128 == 0, the W byte offset % 8 == 0 and the x offset
 * % 4 == 0, so every super-block starts on a 64-bit word and the blocks
 * inside sit at fixed places: blocks 0 and 2 start 4-byte aligned (their
 * values 2 bytes in: a funnel shift by 16), blocks 1 and 3 at 2 mod 4
 * (values 4-byte aligned). llvmpipe loads a storage buffer lane by lane and
 * component by component: 64-bit words move twice the bytes per step of
 * 32-bit ones; x is read 4 floats per load (as 2 64-bit words), once for
 * the R rows, just before its use.
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

layout(constant_id = 2) const uint R = 1;  /* rows n per lane */
layout(constant_id = 3) const uint TT = 1; /* rows t per lane: each unpacked word serves TT rows of x */

layout(binding = 0) readonly buffer Xbuf4 { u64vec2 x2[]; }; /* 4 f32 */
layout(binding = 1) readonly buffer Wbuf8 { uint64_t w8[]; };
layout(binding = 4) writeonly buffer Ybuf { float y[]; };

layout(push_constant) uniform PC {
    uint o_x, o_w, o_y; /* o_w in bytes */
    uint B, Bw, T, N, K;
    float scale;
} pc;

vec4 f32x4(u64vec2 a) { return vec4(uintBitsToFloat(unpackUint2x32(a.x)), uintBitsToFloat(unpackUint2x32(a.y))); }

void main() {
    const uint t0 = gl_WorkGroupID.y * TT, b = gl_WorkGroupID.z;
    const uint bw = b * pc.Bw / pc.B, ns = pc.K / 128u;
    uint x2r[TT]; /* rows t past T: re-read row T-1, not written */
    for (uint tt = 0; tt < TT; tt++) x2r[tt] = (pc.o_x + (b * pc.T + min(t0 + tt, pc.T - 1u)) * pc.K) / 4u;
    const uint wb = pc.o_w / 8u + bw * pc.N * ns * SW;
    for (uint n0 = (gl_WorkGroupID.x * WG + gl_LocalInvocationIndex) * R; n0 < pc.N;
         n0 += gl_NumWorkGroups.x * WG * R) {
        float acc[R][TT];
        uint wr[R];
        for (uint r = 0; r < R; r++) {
            for (uint tt = 0; tt < TT; tt++) acc[r][tt] = 0.0;
            wr[r] = wb + min(n0 + r, pc.N - 1u) * ns * SW; /* rows past N: re-read, not written */
        }
        for (uint s = 0; s < ns; s++) {
            /* the super-block as 2 pairs of blocks, each PW 32-bit words; a
             * row's pair words u[r][0..PW] are loaded just before their use
             * (llvmpipe keeps source order for loads: fewer live values).
             * Word PW of pair 0 (the high half of 64-bit word SW/2) is word
             * 0 of pair 1 */
            uint u[R][PW + 1u];
            for (uint p = 0; p < 2u; p++) {
                for (uint r = 0; r < R; r++) {
                    if (p == 0u) {
                        for (uint j = 0; j <= PW / 2u; j++) {
                            const uvec2 v = unpackUint2x32(w8[wr[r] + s * SW + j]);
                            u[r][2u * j] = v.x;
                            u[r][2u * j + 1u] = v.y;
                        }
                    } else {
                        u[r][0] = u[r][PW];
                        for (uint j = 0; j < PW / 2u; j++) {
                            const uvec2 v = unpackUint2x32(w8[wr[r] + s * SW + PW / 2u + 1u + j]);
                            u[r][2u * j + 1u] = v.x;
                            u[r][2u * j + 2u] = v.y;
                        }
                    }
                }
                for (uint h = 0; h < 2u; h++) {
                    /* block h of the pair: d in the low (h = 0) or high half
                     * of word h*QW, values 2 bytes in (a funnel shift by
                     * 16) or 4-byte aligned from word QW+1 */
                    const uint xb = (s * 4u + p * 2u + h) * 8u;
                    float sum[R][TT];
                    for (uint r = 0; r < R; r++)
                        for (uint tt = 0; tt < TT; tt++) sum[r][tt] = 0.0;
#if defined(Q8)
                    for (uint i = 0; i < QW; i++) {
                        vec4 xv[TT];
                        for (uint tt = 0; tt < TT; tt++) xv[tt] = f32x4(x2[x2r[tt] + xb + i]);
                        for (uint r = 0; r < R; r++) {
                            const uint q = h == 0u ? (u[r][i] >> 16) | (u[r][i + 1u] << 16) : u[r][QW + 1u + i];
                            const vec4 wv = vec4(ivec4(q << 24, q << 16, q << 8, q) >> 24);
                            for (uint tt = 0; tt < TT; tt++) sum[r][tt] += dot(xv[tt], wv);
                        }
                    }
#else
                    /* word i: values 4i..4i+3 in the low nibbles, 16+4i.. in the high */
                    for (uint i = 0; i < QW; i++) {
                        vec4 xa[TT], xc[TT];
                        for (uint tt = 0; tt < TT; tt++) {
                            xa[tt] = f32x4(x2[x2r[tt] + xb + i]);
                            xc[tt] = f32x4(x2[x2r[tt] + xb + 4u + i]);
                        }
                        for (uint r = 0; r < R; r++) {
                            const uint qw = h == 0u ? (u[r][i] >> 16) | (u[r][i + 1u] << 16) : u[r][QW + 1u + i];
                            const uvec4 q = uvec4(qw, qw >> 8, qw >> 16, qw >> 24);
                            const vec4 lo = vec4(q & 15u) - 8.0, hi = vec4((q >> 4) & 15u) - 8.0;
                            for (uint tt = 0; tt < TT; tt++) sum[r][tt] += dot(xa[tt], lo) + dot(xc[tt], hi);
                        }
                    }
#endif
                    for (uint r = 0; r < R; r++) {
                        const float d = unpackHalf2x16(h == 0u ? u[r][0] : u[r][QW] >> 16).x;
                        for (uint tt = 0; tt < TT; tt++) acc[r][tt] = fma(d, sum[r][tt], acc[r][tt]);
                    }
                }
            }
        }
        for (uint tt = 0; tt < TT && t0 + tt < pc.T; tt++)
            for (uint r = 0; r < R && n0 + r < pc.N; r++)
                y[pc.o_y + (b * pc.T + t0 + tt) * pc.N + n0 + r] = pc.scale * acc[r][tt];
    }
}
