#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
/* Fused causal attention for CPU devices (lavapipe), prefill:
 * DIFF_ATTN (MAPS = 2) and ATTN (MAPS = 1) with the semantics of
 * shaders/attention.comp (q (T,H,MAPS,DK), k (S_cap,G,km,DK), v (S_cap,G,DV),
 * o (T,H,DV); CPU reference backends/ref/attention.c).
 *
 * Why this shape: on llvmpipe an invocation is a SIMD lane and every buffer
 * (or shared-memory) load is a loop over the lanes, one scalar load per
 * lane and component, even when all lanes read the same address. A lane
 * must therefore never load what another lane also loads: loaded values
 * travel between lanes through subgroupShuffle with a loop-constant index
 * (one vector permute). Arrays are indexed by fully unrolled loops only, so
 * they stay SSA values (registers and stack spills, never per-lane gathers).
 *
 * A workgroup is one subgroup of WG lanes (WG = the subgroup size) and owns
 * WG query rows of ONE kv group g (grid: x = T*(H/G)/WG, y = G): lane l is
 * row r = row0 + l, r = t*(H/G) + hh, so GQA heads share every key. Its q
 * row, two accumulators acc1/acc2[DV] and online-softmax state (m, l per
 * map) are the lane's own: the softmax bookkeeping of a row never leaves
 * its lane. The keys are walked in tiles of WG keys; per tile:
 *   1. lane l loads key j0 + l (both maps, vec4 by vec4); score s[jj] of
 *      the lane's row against key jj = dot(q, shuffle(k, jj));
 *   2. causal mask per lane (j <= p0 + t), tile max, new running max,
 *      rescale alpha = exp(m_old - m), p[jj] = exp(s[jj] - m), l update;
 *   3. lane l loads value row j0 + l, vec4 by vec4; every lane adds
 *      p[jj] * shuffle(v, jj) to its accumulators (rescaled by alpha once).
 * Keys past the workgroup's last visible key are clamped to it for loading
 * (never a row past S) and masked out (p = 0).
 * Split keys (SPLIT): workgroup z walks [z*chunk, (z+1)*chunk) and writes
 * its unnormalized state (m, l, acc[DV]) per (split, row, map) in
 * shaders/attention_combine.comp's layout; without SPLIT the row is
 * finished here: o = acc1/l1 - lambda * acc2/l2.
 * Needs DK, DV multiples of 4 and q, k, v offsets multiples of 4 (vec4
 * loads); the host checks.
 * Napkin math: per tile, WG*(MAPS*DK + DV) floats loaded for
 * WG*WG*(MAPS*DK + MAPS*DV) multiply-adds. */
#include "common.glsl"

layout(constant_id = 2) const uint MAPS = 2;
layout(constant_id = 3) const uint DK = 64;
layout(constant_id = 4) const uint DV = 128;
layout(constant_id = 5) const bool SPLIT = false;

const uint DK4 = DK / 4, DV4 = DV / 4;

layout(binding = 0) readonly buffer Qbuf { vec4 q4[]; };
layout(binding = 1) readonly buffer Kbuf { vec4 k4[]; };
layout(binding = 2) readonly buffer Vbuf { vec4 v4[]; };
layout(binding = 3) readonly buffer Lbuf { float lam_th[]; };
layout(binding = 4) writeonly buffer Obuf { float o[]; };

layout(push_constant) uniform PC {
    uint o_q, o_k, o_v, o_l, o_o;
    uint T, p0, H, G, km;
    uint has_l;
    float lambda, scale;
    uint chunk; /* SPLIT: keys per split, a multiple of WG */
} pc;

void main() {
    const uint lane = gl_SubgroupInvocationID;
    const uint g = gl_WorkGroupID.y;
    const uint HG = pc.H / pc.G;
    const uint R = pc.T * HG; /* query rows of this group */
    const uint row0 = gl_WorkGroupID.x * WG;
    const uint rr = min(row0 + lane, R - 1); /* lanes past R redo the last row, unwritten */
    const uint t = rr / HG, h = g * HG + rr % HG;
    const uint row = t * pc.H + h;
    const uint pos = pc.p0 + t; /* this row sees keys [0, pos] */
    /* the keys this workgroup walks: up to the last any of its rows sees,
     * within its split */
    const uint jbeg = SPLIT ? gl_WorkGroupID.z * pc.chunk : 0;
    uint kmax = pc.p0 + (min(row0 + WG, R) - 1) / HG;
    if (SPLIT) kmax = min(kmax, jbeg + pc.chunk - 1);

    vec4 qv[MAPS * DK4];
    [[unroll]] for (uint i = 0; i < MAPS * DK4; i++) qv[i] = q4[pc.o_q / 4 + row * MAPS * DK4 + i];
    vec4 acc1[DV4], acc2[DV4];
    [[unroll]] for (uint i = 0; i < DV4; i++) {
        acc1[i] = vec4(0.0);
        acc2[i] = vec4(0.0);
    }
    float m1 = NEG_BIG, m2 = NEG_BIG, l1 = 0.0, l2 = 0.0;

    for (uint j0 = jbeg; j0 <= kmax; j0 += WG) {
        const uint jl = min(j0 + lane, kmax); /* the key this lane loads */
        /* 1. scores */
        float s1[WG], s2[WG];
        [[unroll]] for (uint jj = 0; jj < WG; jj++) {
            s1[jj] = 0.0;
            s2[jj] = 0.0;
        }
        const uint kb = pc.o_k / 4 + (jl * pc.G + g) * pc.km * DK4;
        [[unroll]] for (uint d = 0; d < DK4; d++) {
            const vec4 kv = k4[kb + d];
            [[unroll]] for (uint jj = 0; jj < WG; jj++) s1[jj] += dot(qv[d], subgroupShuffle(kv, jj));
        }
        if (MAPS == 2) {
            const uint kb2 = kb + (pc.km - 1) * DK4; /* map 2's key: its own slot, or the shared one */
            [[unroll]] for (uint d = 0; d < DK4; d++) {
                const vec4 kv = k4[kb2 + d];
                [[unroll]] for (uint jj = 0; jj < WG; jj++)
                    s2[jj] += dot(qv[DK4 + d], subgroupShuffle(kv, jj));
            }
        }
        /* 2. mask and online softmax, per lane (row) */
        float t1 = NEG_BIG, t2 = NEG_BIG;
        [[unroll]] for (uint jj = 0; jj < WG; jj++) {
            const bool ok = j0 + jj <= pos && j0 + jj <= kmax;
            s1[jj] = ok ? s1[jj] * pc.scale : NEG_BIG;
            s2[jj] = ok ? s2[jj] * pc.scale : NEG_BIG;
            t1 = max(t1, s1[jj]);
            t2 = max(t2, s2[jj]);
        }
        const float n1 = max(m1, t1), n2 = max(m2, t2);
        const float a1 = exp(m1 - n1), a2 = exp(m2 - n2);
        float ls1 = 0.0, ls2 = 0.0;
        [[unroll]] for (uint jj = 0; jj < WG; jj++) {
            s1[jj] = s1[jj] > NEG_BIG ? exp(s1[jj] - n1) : 0.0;
            s2[jj] = s2[jj] > NEG_BIG ? exp(s2[jj] - n2) : 0.0;
            ls1 += s1[jj];
            ls2 += s2[jj];
        }
        l1 = l1 * a1 + ls1;
        l2 = l2 * a2 + ls2;
        m1 = n1;
        m2 = n2;
        /* 3. P V */
        const uint vb = pc.o_v / 4 + (jl * pc.G + g) * DV4;
        [[unroll]] for (uint e = 0; e < DV4; e++) {
            const vec4 vv = v4[vb + e];
            vec4 x1 = acc1[e] * a1, x2 = acc2[e] * a2;
            [[unroll]] for (uint jj = 0; jj < WG; jj++) {
                const vec4 vj = subgroupShuffle(vv, jj);
                x1 += s1[jj] * vj;
                if (MAPS == 2) x2 += s2[jj] * vj;
            }
            acc1[e] = x1;
            acc2[e] = x2;
        }
    }

    if (row0 + lane >= R) return;
    if (SPLIT) {
        /* partial state [split][t*H + h][map][m, l, acc[DV]], unnormalized */
        const uint PW = DV + 2;
        const uint base = (gl_WorkGroupID.z * pc.T * pc.H + row) * MAPS * PW;
        o[base] = m1;
        o[base + 1] = l1;
        [[unroll]] for (uint e = 0; e < DV4; e++)
            [[unroll]] for (uint c = 0; c < 4; c++) o[base + 2 + 4 * e + c] = acc1[e][c];
        if (MAPS == 2) {
            o[base + PW] = m2;
            o[base + PW + 1] = l2;
            [[unroll]] for (uint e = 0; e < DV4; e++)
                [[unroll]] for (uint c = 0; c < 4; c++) o[base + PW + 2 + 4 * e + c] = acc2[e][c];
        }
        return;
    }
    const float i1 = 1.0 / l1;
    float i2 = 0.0;
    if (MAPS == 2) i2 = (pc.has_l != 0 ? lam_th[pc.o_l + row] : pc.lambda) / l2;
    const uint ob = pc.o_o + row * DV;
    [[unroll]] for (uint e = 0; e < DV4; e++) {
        const vec4 r = acc1[e] * i1 - acc2[e] * i2;
        [[unroll]] for (uint c = 0; c < 4; c++) o[ob + 4 * e + c] = r[c];
    }
}
