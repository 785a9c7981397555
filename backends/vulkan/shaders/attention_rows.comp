#version 450
#extension GL_GOOGLE_include_directive : require
/* Fused causal attention on CPU devices (prefill and decode):
 * DIFF_ATTN (MAPS = 2) and ATTN (MAPS = 1), the semantics of
 * shaders/attention.comp (q (T,H,MAPS,DK), k (S_cap,G,km,DK), v (S_cap,G,DV),
 * o (T,H,DV); query row t reads the keys base .. base + pos of its rows
 * entry; CPU reference backends/ref/attention.c).
 *
 * One invocation per query row (t, h) (grid x: h*T + t), no shared memory and
 * no barrier: a workgroup barrier is a coroutine switch per SIMD group on
 * llvmpipe and dominated the tiled kernel's time. Each invocation
 * keeps its q row and both accumulators in registers and walks its keys
 * one by one with the online softmax (rescaling only when the running max
 * grows). The keys are split over the grid's z (SPLIT): split z walks
 * [z*chunk, (z+1)*chunk) and writes its unnormalized state (m, l, acc[DV])
 * per (split, row, map) in shaders/attention_combine.comp's layout; without
 * SPLIT the row is finished here: o = acc1/l1 - lambda * acc2/l2. Each row
 * walks its own keys, so rows of many sequences need nothing more.
 * KV (kv.glsl): k and v f32, or f16 read two halves per word (DK, DV and
 * the offsets even: the host checks), or q8_0 read a block of 32 at a time;
 * each value widened exactly and used as the f32 kernel uses it, in the
 * same order (so the result is the f32 kernel's on the widened cache).
 * Napkin math: H*sum(pos+1)*(MAPS*DK + MAPS*DV) multiply-adds; K/V bytes
 * read per key (f32 / f16 / q8_0): 4, 2, 34/32 per element. */
#define WANT_ROWS
#include "common.glsl"
#define KV_ID 6
#include "kv.glsl"

layout(constant_id = 2) const uint MAPS = 2;
layout(constant_id = 3) const uint DK = 64;
layout(constant_id = 4) const uint DV = 128;
layout(constant_id = 5) const bool SPLIT = false;

layout(binding = 0) readonly buffer Qbuf { float q[]; };
layout(binding = 1) readonly buffer Kbuf { float k[]; };
layout(binding = 2) readonly buffer Vbuf { float v[]; };
layout(binding = 3) readonly buffer Lbuf { float lam_th[]; };
layout(binding = 4) writeonly buffer Obuf { float o[]; };

layout(push_constant) uniform PC {
    uint o_q, o_k, o_v, o_l, o_o;
    uint T, o_r, H, G, km;
    uint has_l;
    float lambda, scale;
    uint chunk; /* SPLIT: keys per split */
} pc;

void main() {
    /* neighbouring invocations take neighbouring positions of one head:
     * a SIMD group then reads the same key and value rows */
    const uint x = gl_GlobalInvocationID.x;
    if (x >= pc.T * pc.H) return;
    const uint h = x / pc.T, t = x - h * pc.T, g = h / (pc.H / pc.G);
    const uint row = t * pc.H + h;
    /* causal: keys [0, pos] of its sequence, cache rows kb + j */
    const uint kb = row_base(pc.o_r, t);
    uint jbeg = 0, jend = row_pos(pc.o_r, t) + 1;
    if (SPLIT) {
        jbeg = gl_WorkGroupID.z * pc.chunk;
        jend = min(jend, jbeg + pc.chunk);
    }
    float qv[MAPS * DK];
    for (uint c = 0; c < MAPS * DK; c++) qv[c] = q[pc.o_q + row * MAPS * DK + c];
    float m[2] = float[2](NEG_BIG, NEG_BIG), l[2] = float[2](0.0, 0.0);
    float acc1[DV], acc2[DV];
    for (uint e = 0; e < DV; e++) {
        acc1[e] = 0.0;
        acc2[e] = 0.0;
    }
    const uint koff2 = (pc.km - 1) * DK; /* map 2's key: the second slot, or the shared one */
    for (uint j = jbeg; j < jend; j++) {
        const uint kr = pc.o_k + ((kb + j) * pc.G + g) * pc.km * DK;
        float p[2] = float[2](0.0, 0.0);
        for (uint mp = 0; mp < MAPS; mp++) {
            float dot = 0.0;
            const uint kk = kr + mp * koff2;
            if (KV == KV_F32) {
                for (uint d = 0; d < DK; d++) dot += qv[mp * DK + d] * k[kk + d];
            } else if (KV == KV_F16) {
                for (uint d = 0; d < DK; d += 2) {
                    const vec2 kv = kv_f16x2(false, (kk + d) >> 1);
                    dot += qv[mp * DK + d] * kv.x;
                    dot += qv[mp * DK + d + 1] * kv.y;
                }
            } else {
                /* kk - o_k: elements from the tensor's start, whole blocks */
                for (uint b = 0; b < DK / 32; b++) {
                    uint qw[8];
                    const float sc = q8_block(false, pc.o_k + ((kk - pc.o_k) / 32 + b) * 34, qw);
                    for (uint i = 0; i < 8; i++) {
                        const vec4 kv = q8_vec4(qw[i], sc);
                        for (uint c = 0; c < 4; c++) dot += qv[mp * DK + b * 32 + i * 4 + c] * kv[c];
                    }
                }
            }
            const float s = dot * pc.scale;
            if (s > m[mp]) {
                const float alpha = exp(m[mp] - s);
                l[mp] *= alpha;
                if (mp == 0)
                    for (uint e = 0; e < DV; e++) acc1[e] *= alpha;
                else
                    for (uint e = 0; e < DV; e++) acc2[e] *= alpha;
                m[mp] = s;
            }
            p[mp] = exp(s - m[mp]);
            l[mp] += p[mp];
        }
        const uint vb = pc.o_v + ((kb + j) * pc.G + g) * DV;
        if (KV == KV_F32) {
            for (uint e = 0; e < DV; e++) {
                const float vv = v[vb + e];
                acc1[e] += p[0] * vv;
                if (MAPS == 2) acc2[e] += p[1] * vv;
            }
        } else if (KV == KV_F16) {
            for (uint e = 0; e < DV; e += 2) {
                const vec2 vv = kv_f16x2(true, (vb + e) >> 1);
                acc1[e] += p[0] * vv.x;
                acc1[e + 1] += p[0] * vv.y;
                if (MAPS == 2) {
                    acc2[e] += p[1] * vv.x;
                    acc2[e + 1] += p[1] * vv.y;
                }
            }
        } else {
            for (uint b = 0; b < DV / 32; b++) {
                uint qw[8];
                const float sc = q8_block(true, pc.o_v + ((vb - pc.o_v) / 32 + b) * 34, qw);
                for (uint i = 0; i < 8; i++) {
                    const vec4 vv = q8_vec4(qw[i], sc);
                    for (uint c = 0; c < 4; c++) {
                        acc1[b * 32 + i * 4 + c] += p[0] * vv[c];
                        if (MAPS == 2) acc2[b * 32 + i * 4 + c] += p[1] * vv[c];
                    }
                }
            }
        }
    }
    if (SPLIT) {
        /* partial state [split][t*H + h][map][m, l, acc[DV]], unnormalized */
        const uint PW = DV + 2;
        const uint base = (gl_WorkGroupID.z * pc.T * pc.H + row) * MAPS * PW;
        o[base] = m[0];
        o[base + 1] = l[0];
        for (uint e = 0; e < DV; e++) o[base + 2 + e] = acc1[e];
        if (MAPS == 2) {
            o[base + PW] = m[1];
            o[base + PW + 1] = l[1];
            for (uint e = 0; e < DV; e++) o[base + PW + 2 + e] = acc2[e];
        }
        return;
    }
    const float i1 = 1.0 / l[0];
    float i2 = 0.0;
    if (MAPS == 2) i2 = (pc.has_l != 0 ? lam_th[pc.o_l + row] : pc.lambda) / l[1];
    const uint ob = pc.o_o + row * DV;
    for (uint e = 0; e < DV; e++) o[ob + e] = acc1[e] * i1 - acc2[e] * i2;
}
