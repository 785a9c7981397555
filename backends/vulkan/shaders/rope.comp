#version 450
#extension GL_GOOGLE_include_directive : require
/* ROPE, rotate_half ("NeoX") pairs (i, i + d/2): for row t at position
 * pos = row_pos(t) (the rows, binding 5) and a = pos * inv_freq[i],
 *   y[i]       = x[i] cos a - x[i+d/2] sin a
 *   y[i+d/2]   = x[i+d/2] cos a + x[i] sin a
 * x, y are (T,Hn,d) f32 (y may be x); inv_freq is (d/2) f32.
 * CPU reference: backends/cpu/elementwise.c (cpu_rope), which forms the angle
 * in double. Here the angle is kept exact instead of rounded: pos*inv_freq
 * reaches 1e3 and more, where one f32 rounding of a (or a sin/cos with a
 * sloppy range reduction, which Vulkan allows: 2^-11 absolute) is off by
 * ~1e-4. So: pos * inv_freq = hi + lo exactly (inv_freq split in 8 + 16
 * bits, pos < 2^16), a three-part Cody-Waite reduction by pi/2, and
 * minimax polynomials on [-pi/4, pi/4] (Cephes sinf/cosf), ~1 ulp.
 * One thread per pair, blocked (common.glsl). Napkin math: T*Hn*d reads and writes. */
#define WANT_ROWS
#include "common.glsl"

layout(binding = 0) readonly buffer Xbuf { float x[]; };
layout(binding = 1) readonly buffer Fbuf { float inv_freq[]; };
layout(binding = 4) writeonly buffer Ybuf { float y[]; };

layout(push_constant) uniform PC {
    uint o_x, o_f, o_y;
    uint T, Hn, half_d, o_r;
} pc;

/* sin and cos of pos * f, pos an integer < 2^16 */
void sincos_exact(uint pos, float f, out float s, out float c) {
    precise float p = float(pos);
    precise float fhi = uintBitsToFloat(floatBitsToUint(f) & 0xffff0000u); /* 8 significant bits */
    precise float flo = f - fhi;
    precise float hi = p * fhi; /* exact: 16 + 8 bits */
    precise float lo = p * flo; /* < 2^-8 of hi; its rounding is negligible */
    /* pi/2 = P1 + P2 + P3 + O(1e-15); P1, P2 have 8 significant bits, so k*P1
     * and k*P2 are exact for k < 2^16 */
    const float P1 = 1.5703125;
    const float P2 = 4.84466552734375e-4;
    const float P3 = -6.397578431460715e-7;
    precise float k = round((hi + lo) * 0.636619772367581343);
    precise float r = ((hi - k * P1) - k * P2) - k * P3 + lo;
    precise float z = r * r;
    precise float sr = r + r * z * (-1.6666654611e-1 + z * (8.3321608736e-3 + z * -1.9515295891e-4));
    precise float cr = 1.0 - 0.5 * z + z * z * (4.166664568298827e-2 + z * (-1.388731625493765e-3 + z * 2.443315711809948e-5));
    int q = int(k) & 3;
    s = q == 0 ? sr : q == 1 ? cr : q == 2 ? -sr : -cr;
    c = q == 0 ? cr : q == 1 ? -sr : q == 2 ? -cr : sr;
}

void main() {
    const uint n = pc.T * pc.Hn * pc.half_d;
    for (uint i = block_first(n), e = block_end(n); i < e; i += WG) {
        uint j = i % pc.half_d, th = i / pc.half_d; /* th = t*Hn + h */
        uint t = th / pc.Hn;
        uint base = th * 2u * pc.half_d + j;
        float s, c;
        sincos_exact(row_pos(pc.o_r, t), inv_freq[pc.o_f + j], s, c);
        float x0 = x[pc.o_x + base], x1 = x[pc.o_x + base + pc.half_d];
        y[pc.o_y + base] = x0 * c - x1 * s;
        y[pc.o_y + base + pc.half_d] = x1 * c + x0 * s;
    }
}
