#version 450
#extension GL_GOOGLE_include_directive : require
/* MATMUL with q8_0 (Q8) / q4_0 (Q4) weights (docs/quantization.md):
 * y[b,t,n] = scale * sum_k x[b,t,k] * W[bw,n,k], bw = b*Bw/B, W (Bw,N,K) in
 * blocks of 32 along K (K % 32 == 0, never transposed), bound as 32-bit
 * words and read bytewise from byte offset o_w. CPU reference:
 * backends/ref/matmul.c with runtime/drt_quant.h's drt_q8_0_get / drt_q4_0_get.
 *
 * One invocation per column n and TT rows t (spec constant 2; grid x over
 * N in workgroups of WG, y = T/TT, z = B): each block's f16 scale and 32
 * values are read once and serve the TT rows, whose sums are f32, then
 * scaled. With TT >= T (the host's choice up to 32 rows: decode rows of
 * several sequences) every weight is streamed once for all rows; rows past
 * T re-read row T-1 and are not written. Napkin math: N*K/32*(34|18) bytes
 * of weights per TT rows of x; every invocation of a workgroup reads the
 * same x rows. */
#include "common.glsl"

#if defined(Q8)
const uint BS = 34u;
#elif defined(Q4)
const uint BS = 18u;
#else
#error "define Q8 or Q4"
#endif

layout(constant_id = 2) const uint TT = 1; /* rows t per invocation */

layout(binding = 0) readonly buffer Xbuf { float x[]; };
layout(binding = 1) readonly buffer Wbuf { uint w[]; };
layout(binding = 4) writeonly buffer Ybuf { float y[]; };

layout(push_constant) uniform PC {
    uint o_x, o_w, o_y; /* o_w in bytes */
    uint B, Bw, T, N, K;
    float scale;
} pc;

uint byte_at(uint off) { return (w[off >> 2] >> ((off & 3u) * 8u)) & 0xffu; }

void main() {
    const uint n = gl_WorkGroupID.x * WG + gl_LocalInvocationIndex;
    const uint t0 = gl_WorkGroupID.y * TT, b = gl_WorkGroupID.z;
    if (n >= pc.N) return;
    const uint bw = b * pc.Bw / pc.B, nb = pc.K / 32u;
    const uint row = pc.o_w + (bw * pc.N + n) * nb * BS;
    uint xr[TT];
    float acc[TT];
    for (uint tt = 0; tt < TT; tt++) {
        xr[tt] = pc.o_x + (b * pc.T + min(t0 + tt, pc.T - 1u)) * pc.K;
        acc[tt] = 0.0;
    }
    for (uint blk = 0; blk < nb; blk++) {
        const uint p = row + blk * BS;
        const float d = unpackHalf2x16(byte_at(p) | (byte_at(p + 1u) << 8)).x;
        float s[TT];
        for (uint tt = 0; tt < TT; tt++) s[tt] = 0.0;
        for (uint j = 0; j < 32u; j++) {
#if defined(Q8)
            const int q = int(byte_at(p + 2u + j) << 24) >> 24; /* sign-extend the byte */
#else
            const uint by = byte_at(p + 2u + (j & 15u));
            const int q = int(j < 16u ? (by & 15u) : (by >> 4)) - 8;
#endif
            for (uint tt = 0; tt < TT; tt++) s[tt] = fma(x[xr[tt] + blk * 32u + j], float(q), s[tt]);
        }
        for (uint tt = 0; tt < TT; tt++) acc[tt] = fma(d, s[tt], acc[tt]);
    }
    for (uint tt = 0; tt < TT && t0 + tt < pc.T; tt++)
        y[pc.o_y + (b * pc.T + t0 + tt) * pc.N + n] = pc.scale * acc[tt];
}
