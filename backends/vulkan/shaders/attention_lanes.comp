#version 450
#extension GL_GOOGLE_include_directive : require
#extension GL_EXT_control_flow_attributes : require
#extension GL_KHR_shader_subgroup_shuffle : require
/* Fused causal attention for CPU devices (lavapipe), prefill:
 * DIFF_ATTN (MAPS = 2) and ATTN (MAPS = 1) with the semantics of
 * shaders/attention.comp (q (T,H,MAPS,DK), k (S_cap,G,km,DK), v (S_cap,G,DV),
 * o (T,H,DV); query row t reads the keys base .. base + pos of its rows
 * entry; CPU reference backends/ref/attention.c).
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
 * BR = WG*RPL query rows of ONE kv group g (grid: x = T*(H/G)/BR, y = G),
 * rows r = t*(H/G) + hh, so GQA heads share every key. Lane l owns rows
 * row0 + i*WG + l, i < RPL: their q rows, accumulators acc[DV] per map and
 * online-softmax state (m, l per map) are the lane's own, so the softmax
 * bookkeeping of a row never leaves its lane. The workgroup's query tokens
 * are walked run by run (run_end, common.glsl: rows of one sequence at
 * consecutive positions, which share their keys; a one-sequence prefill is
 * one run), the keys of a run (cache rows base + j) in tiles of WG keys;
 * per tile:
 *   1. lane l loads key j0 + l (both maps, vec4 by vec4); score of each of
 *      its rows against key jj = dot(q, shuffle(k, jj));
 *   2. mask per row (a row of the run, j <= its pos; the rows of other
 *      runs see nothing and keep their state), tile max, new running max,
 *      rescale alpha = exp(m_old - m), p[jj] = exp(s[jj] - m), l update;
 *   3. lane l loads value row j0 + l, vec4 by vec4; every lane adds
 *      p[jj] * shuffle(v, jj) to its accumulators (rescaled by alpha once).
 * RPL > 1 makes every loaded and shuffled key feed RPL rows: on lavapipe
 * at T=S=1024 (dk 64, dv 128, two maps) RPL = 4 took ~60 ms, 1 and 2 ~100;
 * the price is code size (compile time grows with RPL, ~6 s at 4).
 * Keys past the run's last visible key are clamped to it for loading
 * (never a row past its sequence's) and masked out (p = 0).
 * Split keys (SPLIT): workgroup z walks [z*chunk, (z+1)*chunk) and writes
 * its unnormalized state (m, l, acc[DV]) per (split, row, map) in
 * shaders/attention_combine.comp's layout; without SPLIT each row is
 * finished here: o = acc1/l1 - lambda * acc2/l2.
 * Needs DK, DV multiples of 4 and q, k, v offsets multiples of 4 (vec4
 * loads); the host checks.
 * KV (kv.glsl): k and v f32, or f16 (a vec4 from two words; the same
 * offset check, in halves), or q8_0 (a lane reads its key's block of 32
 * every 8 vec4s, widens it exactly and shuffles f32 as before).
 * Napkin math: per tile, WG*(MAPS*DK + DV) elements loaded (4, 2 or 34/32
 * bytes each: f32, f16, q8_0) and shuffled as f32 for BR*WG*MAPS*(DK + DV)
 * multiply-adds. */
#define WANT_ROWS
#include "common.glsl"
#define KV_ID 7
#include "kv.glsl"

layout(constant_id = 2) const uint MAPS = 2;
layout(constant_id = 3) const uint DK = 64;
layout(constant_id = 4) const uint DV = 128;
layout(constant_id = 5) const bool SPLIT = false;
layout(constant_id = 6) const uint RPL = 1; /* query rows per lane */

const uint DK4 = DK / 4, DV4 = DV / 4;
const uint BC = WG;       /* keys per tile: one per lane */
const uint BR = WG * RPL; /* query rows per workgroup */

layout(binding = 0) readonly buffer Qbuf { vec4 q4[]; };
layout(binding = 1) readonly buffer Kbuf { vec4 k4[]; };
layout(binding = 2) readonly buffer Vbuf { vec4 v4[]; };
layout(binding = 3) readonly buffer Lbuf { float lam_th[]; };
layout(binding = 4) writeonly buffer Obuf { float o[]; };

layout(push_constant) uniform PC {
    uint o_q, o_k, o_v, o_l, o_o;
    uint T, o_r, H, G, km;
    uint has_l;
    float lambda, scale;
    uint chunk; /* SPLIT: keys per split, a multiple of BC */
} pc;

void main() {
    const uint lane = gl_SubgroupInvocationID;
    const uint g = gl_WorkGroupID.y;
    const uint HG = pc.H / pc.G;
    const uint R = pc.T * HG; /* query rows of this group */
    const uint row0 = gl_WorkGroupID.x * BR;
    /* the lane's rows: r = row0 + i*WG + lane; lanes past R redo the last
     * row, unwritten. row: (t, h) as t*H + h; tok: t; pos: it sees keys
     * [0, pos] of its sequence */
    uint row[RPL], tok[RPL], pos[RPL];
    [[unroll]] for (uint i = 0; i < RPL; i++) {
        const uint rr = min(row0 + i * WG + lane, R - 1);
        const uint t = rr / HG;
        row[i] = t * pc.H + g * HG + rr % HG;
        tok[i] = t;
        pos[i] = row_pos(pc.o_r, t);
    }
    /* its query tokens, and the keys of its split */
    const uint tfirst = row0 / HG, tlast = (min(row0 + BR, R) - 1) / HG;
    const uint jbeg = SPLIT ? gl_WorkGroupID.z * pc.chunk : 0;

    /* per (row i, map mp): index i*MAPS + mp */
    vec4 qv[RPL * MAPS * DK4];
    vec4 acc[RPL * MAPS * DV4];
    float m[RPL * MAPS], l[RPL * MAPS];
    [[unroll]] for (uint i = 0; i < RPL; i++)
        [[unroll]] for (uint c = 0; c < MAPS * DK4; c++)
            qv[i * MAPS * DK4 + c] = q4[pc.o_q / 4 + row[i] * MAPS * DK4 + c];
    [[unroll]] for (uint c = 0; c < RPL * MAPS * DV4; c++) acc[c] = vec4(0.0);
    [[unroll]] for (uint c = 0; c < RPL * MAPS; c++) {
        m[c] = NEG_BIG;
        l[c] = 0.0;
    }

    /* the runs ts..te of its tokens: keys base + j for j <= kmax, the last
     * any of the run's rows sees (pos of te), within the split */
    for (uint ts = tfirst; ts <= tlast;) {
        const uint te = run_end(pc.o_r, ts, tlast);
        const uint base = row_base(pc.o_r, ts);
        uint kmax = row_pos(pc.o_r, ts) + (te - ts);
        if (SPLIT) kmax = min(kmax, jbeg + pc.chunk - 1);
        bool mine[RPL]; /* the lane's rows in this run */
        [[unroll]] for (uint i = 0; i < RPL; i++) mine[i] = tok[i] >= ts && tok[i] <= te;
        for (uint j0 = jbeg; j0 <= kmax; j0 += BC) {
            const uint jl = base + min(j0 + lane, kmax); /* the key (cache row) this lane loads */
            /* 1. scores: s[(i*MAPS + mp)*BC + jj] of row i, map mp, key j0 + jj */
            float s[RPL * MAPS * BC];
            [[unroll]] for (uint c = 0; c < RPL * MAPS * BC; c++) s[c] = 0.0;
            const uint kb = pc.o_k / 4 + (jl * pc.G + g) * pc.km * DK4;
            /* q8_0: the key's first block, of DK/32 per map */
            const uint kq = (jl * pc.G + g) * pc.km * (DK / 32);
            [[unroll]] for (uint mp = 0; mp < MAPS; mp++) {
                /* map 2's key: its own slot, or the shared one (km = 1) */
                const uint kbm = kb + mp * (pc.km - 1) * DK4;
                uint qw[8];
                float sc = 0.0;
                [[unroll]] for (uint d = 0; d < DK4; d++) {
                    vec4 kv;
                    if (KV == KV_F32) {
                        kv = k4[kbm + d];
                    } else if (KV == KV_F16) {
                        kv = vec4(kv_f16x2(false, 2 * (kbm + d)), kv_f16x2(false, 2 * (kbm + d) + 1));
                    } else {
                        if (d % 8 == 0) sc = q8_block(false, pc.o_k + (kq + mp * (pc.km - 1) * (DK / 32) + d / 8) * 34, qw);
                        kv = q8_vec4(qw[d % 8], sc);
                    }
                    [[unroll]] for (uint jj = 0; jj < BC; jj++) {
                        const vec4 kj = subgroupShuffle(kv, jj);
                        [[unroll]] for (uint i = 0; i < RPL; i++)
                            s[(i * MAPS + mp) * BC + jj] += dot(qv[(i * MAPS + mp) * DK4 + d], kj);
                    }
                }
            }
            /* 2. mask and online softmax, per lane and row: s becomes p */
            float alpha[RPL * MAPS];
            [[unroll]] for (uint i = 0; i < RPL; i++) {
                [[unroll]] for (uint mp = 0; mp < MAPS; mp++) {
                    const uint c = i * MAPS + mp;
                    float mt = NEG_BIG;
                    [[unroll]] for (uint jj = 0; jj < BC; jj++) {
                        const bool ok = mine[i] && j0 + jj <= pos[i] && j0 + jj <= kmax;
                        s[c * BC + jj] = ok ? s[c * BC + jj] * pc.scale : NEG_BIG;
                        mt = max(mt, s[c * BC + jj]);
                    }
                    const float mn = max(m[c], mt);
                    alpha[c] = exp(m[c] - mn);
                    float ls = 0.0;
                    [[unroll]] for (uint jj = 0; jj < BC; jj++) {
                        const float p = s[c * BC + jj] > NEG_BIG ? exp(s[c * BC + jj] - mn) : 0.0;
                        s[c * BC + jj] = p;
                        ls += p;
                    }
                    l[c] = l[c] * alpha[c] + ls;
                    m[c] = mn;
                }
            }
            /* 3. P V */
            const uint vb = pc.o_v / 4 + (jl * pc.G + g) * DV4;
            const uint vq = (jl * pc.G + g) * (DV / 32);
            uint qw[8];
            float sc = 0.0;
            [[unroll]] for (uint e = 0; e < DV4; e++) {
                vec4 vv;
                if (KV == KV_F32) {
                    vv = v4[vb + e];
                } else if (KV == KV_F16) {
                    vv = vec4(kv_f16x2(true, 2 * (vb + e)), kv_f16x2(true, 2 * (vb + e) + 1));
                } else {
                    if (e % 8 == 0) sc = q8_block(true, pc.o_v + (vq + e / 8) * 34, qw);
                    vv = q8_vec4(qw[e % 8], sc);
                }
                vec4 x[RPL * MAPS];
                [[unroll]] for (uint c = 0; c < RPL * MAPS; c++) x[c] = acc[c * DV4 + e] * alpha[c];
                [[unroll]] for (uint jj = 0; jj < BC; jj++) {
                    const vec4 vj = subgroupShuffle(vv, jj);
                    [[unroll]] for (uint c = 0; c < RPL * MAPS; c++) x[c] += s[c * BC + jj] * vj;
                }
                [[unroll]] for (uint c = 0; c < RPL * MAPS; c++) acc[c * DV4 + e] = x[c];
            }
        }
        ts = te + 1;
    }

    [[unroll]] for (uint i = 0; i < RPL; i++) {
        if (row0 + i * WG + lane >= R) break;
        if (SPLIT) {
            /* partial state [split][t*H + h][map][m, l, acc[DV]], unnormalized */
            const uint PW = DV + 2;
            [[unroll]] for (uint mp = 0; mp < MAPS; mp++) {
                const uint c = i * MAPS + mp;
                const uint base = ((gl_WorkGroupID.z * pc.T * pc.H + row[i]) * MAPS + mp) * PW;
                o[base] = m[c];
                o[base + 1] = l[c];
                [[unroll]] for (uint e = 0; e < DV4; e++)
                    [[unroll]] for (uint q = 0; q < 4; q++) o[base + 2 + 4 * e + q] = acc[c * DV4 + e][q];
            }
            continue;
        }
        const float i1 = 1.0 / l[i * MAPS];
        float i2 = 0.0;
        if (MAPS == 2) i2 = (pc.has_l != 0 ? lam_th[pc.o_l + row[i]] : pc.lambda) / l[i * MAPS + 1];
        const uint ob = pc.o_o + row[i] * DV;
        [[unroll]] for (uint e = 0; e < DV4; e++) {
            vec4 r = acc[i * MAPS * DV4 + e] * i1;
            if (MAPS == 2) r -= acc[(i * MAPS + 1) * DV4 + e] * i2;
            [[unroll]] for (uint q = 0; q < 4; q++) o[ob + 4 * e + q] = r[q];
        }
    }
}
