#version 450
#extension GL_GOOGLE_include_directive : require
/* RMSNORM and GROUPNORM (a GROUPNORM row is one head's dv outputs):
 * y[r,c] = x[r,c] * scale / sqrt(mean_c(x[r,:]^2) + eps) * w[c].
 * x, y are (rows, C) f32; w is (C) f32 or absent (has_w = 0); scale is 1
 * for RMSNORM, 1 - lambda_init for GROUPNORM.
 * CPU reference: backends/cpu/norm.c (cpu_rmsnorm, cpu_groupnorm).
 * One workgroup per row (grid spread over x, y), one workgroup reduction.
 * Napkin math: 4*rows*C flops; reads x twice (the second time from cache),
 * writes y once. */
#define WANT_REDUCE
#include "common.glsl"

layout(binding = 0) readonly buffer Xbuf { float x[]; };
layout(binding = 1) readonly buffer Wbuf { float w[]; };
layout(binding = 4) writeonly buffer Ybuf { float y[]; };

layout(push_constant) uniform PC {
    uint o_x, o_w, o_y;
    uint rows, C, has_w;
    float eps, scale;
} pc;

void main() {
    const uint row = group_index();
    if (row >= pc.rows) return; /* the whole workgroup leaves together */
    const uint tid = gl_LocalInvocationIndex;
    const uint xr = pc.o_x + row * pc.C, yr = pc.o_y + row * pc.C;
    float ss = 0.0;
    for (uint c = tid; c < pc.C; c += WG) {
        float v = x[xr + c];
        ss += v * v;
    }
    ss = wg_sum(vec4(ss, 0.0, 0.0, 0.0)).x;
    const float r = pc.scale / sqrt(ss / float(pc.C) + pc.eps);
    for (uint c = tid; c < pc.C; c += WG) {
        float v = x[xr + c] * r;
        if (pc.has_w != 0) v *= w[pc.o_w + c];
        y[yr + c] = v;
    }
}
