#version 450
#extension GL_GOOGLE_include_directive : require
/* Elementwise ops on (n) f32, OP a specialization constant:
 *   0 ADD      y = a + b
 *   1 SIGMOID  y = 1 / (1 + exp(-a))
 *   2 SWIGLU   y = a / (1 + exp(-a)) * b   (silu(gate) * up)
 * For a << 0, exp(-a) overflows to +inf and y is 0 (or -0), never NaN, as
 * in the reference. CPU reference: backends/cpu/elementwise.c.
 * Blocked (common.glsl). VEC4 (n and every offset a multiple of 4): the host passes
 * n and the offsets in vec4 units and each step moves 16 bytes per
 * operand. Napkin math: (2 or 3)*n*4 bytes moved. */
#include "common.glsl"

layout(constant_id = 2) const uint OP = 0;
layout(constant_id = 3) const bool VEC4 = false;

layout(binding = 0) readonly buffer Abuf { float a[]; };
layout(binding = 0) readonly buffer Abuf4 { vec4 a4[]; };
layout(binding = 1) readonly buffer Bbuf { float b[]; };
layout(binding = 1) readonly buffer Bbuf4 { vec4 b4[]; };
layout(binding = 4) writeonly buffer Ybuf { float y[]; };
layout(binding = 4) writeonly buffer Ybuf4 { vec4 y4[]; };

layout(push_constant) uniform PC {
    uint o_a, o_b, o_y;
    uint n;
} pc;

vec4 op(vec4 av, vec4 bv) {
    if (OP == 0) return av + bv;
    if (OP == 1) return 1.0 / (1.0 + exp(-av));
    return av / (1.0 + exp(-av)) * bv;
}

void main() {
    for (uint i = block_first(pc.n), e = block_end(pc.n); i < e; i += WG) {
        if (VEC4) {
            y4[pc.o_y + i] = op(a4[pc.o_a + i], OP == 1 ? vec4(0.0) : b4[pc.o_b + i]);
        } else {
            float av = a[pc.o_a + i];
            float v;
            if (OP == 0) v = av + b[pc.o_b + i];
            else if (OP == 1) v = 1.0 / (1.0 + exp(-av));
            else v = av / (1.0 + exp(-av)) * b[pc.o_b + i];
            y[pc.o_y + i] = v;
        }
    }
}
