#version 450
#extension GL_GOOGLE_include_directive : require
/* DUAL_SOFTMAX: for row (h,t) of s1, s2 (H,T,S) f32, with the causal mask of
 * offset p0 = S - T (query t sees keys j <= p0 + t, n = p0 + t + 1 of them):
 *   a[h,t,j] = softmax_j(s1[h,t,:n])[j] - lambda * softmax_j(s2[h,t,:n])[j], j < n
 *   a[h,t,j] = 0, j >= n
 * lambda is the scalar, or lambda_th[t,h] (T,H) when has_l.
 * CPU reference: backends/cpu/attention.c (cpu_dual_softmax).
 * One workgroup per row; both maps' max, then both sums, reduced together
 * (one vec4 reduction each); exp always of (s - max) <= 0, so logits of
 * +-300 and more cannot overflow.
 * Napkin math: reads each row three times (twice from cache), ~10 flops per
 * element. */
#define WANT_REDUCE
#include "common.glsl"

layout(binding = 0) readonly buffer S1 { float s1[]; };
layout(binding = 1) readonly buffer S2 { float s2[]; };
layout(binding = 2) readonly buffer Lbuf { float lam_th[]; };
layout(binding = 4) writeonly buffer Abuf { float a[]; };

layout(push_constant) uniform PC {
    uint o_s1, o_s2, o_l, o_a;
    uint H, T, S, p0;
    uint has_l;
    float lambda;
} pc;

void main() {
    const uint row = group_index(); /* row = h*T + t */
    if (row >= pc.H * pc.T) return;
    const uint tid = gl_LocalInvocationIndex;
    const uint h = row / pc.T, t = row % pc.T;
    const uint n = pc.p0 + t + 1;
    const uint r1 = pc.o_s1 + row * pc.S, r2 = pc.o_s2 + row * pc.S, ra = pc.o_a + row * pc.S;

    vec4 m = vec4(NEG_BIG);
    for (uint j = tid; j < n; j += WG) m.xy = max(m.xy, vec2(s1[r1 + j], s2[r2 + j]));
    m = wg_max(m);
    vec4 sum = vec4(0.0);
    for (uint j = tid; j < n; j += WG) sum.xy += exp(vec2(s1[r1 + j], s2[r2 + j]) - m.xy);
    sum = wg_sum(sum);
    const float lam = pc.has_l != 0 ? lam_th[pc.o_l + t * pc.H + h] : pc.lambda;
    const float i1 = 1.0 / sum.x, i2 = lam / sum.y;
    for (uint j = tid; j < pc.S; j += WG) {
        float v = 0.0;
        if (j < n) v = exp(s1[r1 + j] - m.x) * i1 - exp(s2[r2 + j] - m.y) * i2;
        a[ra + j] = v;
    }
}
