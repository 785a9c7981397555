#version 450
#extension GL_GOOGLE_include_directive : require
/* The second pass of split-key attention (shaders/attention.comp, SPLIT):
 * for output element (t, h, e), merges the nsplit partial softmax states of
 * each map, per split z: running max m_z, sum l_z (of exp(s - m_z)), and
 * acc_z[e] (sum of exp(s - m_z) v[e]):
 *   m = max_z m_z,  l = sum_z l_z exp(m_z - m),  acc = sum_z acc_z exp(m_z - m)
 *   o[t,h,e] = acc1/l1 - lambda * acc2/l2        (MAPS = 1: acc1/l1)
 * Row t has pos + 1 keys (its rows entry): only its first
 * ceil((pos + 1) / chunk) splits saw any (split 0 always does); a split
 * that saw no key of a row has m_z = NEG_BIG, l_z = 0: weight 0.
 * part is [nsplit][T*H][MAPS][DV + 2] f32; lambda_th (T,H) when has_l.
 * Grid-stride over T*H*DV outputs. Napkin math: reads nsplit*MAPS*(DV+2)
 * floats per (t,h), tiny next to the first pass. */
#define WANT_ROWS
#include "common.glsl"

layout(constant_id = 2) const uint MAPS = 2;

layout(binding = 0) readonly buffer Part { float part[]; };
layout(binding = 3) readonly buffer Lbuf { float lam_th[]; };
layout(binding = 4) writeonly buffer Obuf { float o[]; };

layout(push_constant) uniform PC {
    uint o_l, o_o;
    uint T, H, DV, nsplit;
    uint has_l;
    float lambda;
    uint chunk; /* keys per split */
    uint o_r;
} pc;

void main() {
    const uint PW = pc.DV + 2, rows = pc.T * pc.H;
    for (uint i = global_index(); i < rows * pc.DV; i += grid_stride()) {
        uint row = i / pc.DV, e = i % pc.DV; /* row = t*H + h */
        const uint nz = min(pc.nsplit, row_pos(pc.o_r, row / pc.H) / pc.chunk + 1);
        float res[2];
        for (uint mp = 0; mp < MAPS; mp++) {
            float m = NEG_BIG;
            for (uint z = 0; z < nz; z++) m = max(m, part[((z * rows + row) * MAPS + mp) * PW]);
            float l = 0.0, acc = 0.0;
            for (uint z = 0; z < nz; z++) {
                uint base = ((z * rows + row) * MAPS + mp) * PW;
                float w = exp(part[base] - m);
                l += part[base + 1] * w;
                acc += part[base + 2 + e] * w;
            }
            res[mp] = acc / l;
        }
        float v = res[0];
        if (MAPS == 2) {
            uint t = row / pc.H, h = row % pc.H;
            v -= (pc.has_l != 0 ? lam_th[pc.o_l + t * pc.H + h] : pc.lambda) * res[1];
        }
        o[pc.o_o + i] = v;
    }
}
