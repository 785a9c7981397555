#version 450
#extension GL_GOOGLE_include_directive : require
/* Fused causal attention: DIFF_ATTN (MAPS = 2) and ATTN (MAPS = 1).
 *   q is (T,H,MAPS,DK); k is (S_cap,G,km,DK), km in {1,2} (1 for ATTN);
 *   v is (S_cap,G,DV); o is (T,H,DV); all f32.
 * Query t of head h, kv group g = h / (H/G), at position pos of the
 * sequence whose cache rows start at base (its rows entry, binding 5),
 * sees keys j <= pos at cache rows base + j; with s = 1/sqrt(DK):
 *   A1 = softmax_j(s q[t,h,0].k[base+j,g,0]),  A2 = softmax_j(s q[t,h,1].k[base+j,g,km-1])
 *   o[t,h] = sum_j (A1[j] - lambda[t,h] A2[j]) v[base+j,g]      (ATTN: A1 only)
 * lambda is the scalar, or lambda_th (T,H) when has_l.
 * CPU reference: backends/ref/attention.c (drt_ref_diff_attn, drt_ref_attn).
 *
 * Flash-style, no S x S matrix: a workgroup owns BR query rows of ONE kv
 * group (rows r = t*(H/G) + hh, so GQA heads share every K/V tile; grid:
 * x = T*(H/G)/BR, y = G), and walks the keys in shared-memory tiles of BC
 * keys. The workgroup's query tokens are walked run by run (run_end,
 * common.glsl: rows of one sequence at consecutive positions share their
 * keys): a one-sequence prefill is one run and walks its keys once; rows of
 * several sequences walk each run's keys in turn, the rows of the other
 * runs masked (their state does not change). Per tile:
 *   A. load K (both maps) and V rows into shared memory;
 *   B. scores s*q.k for every (row, key, map) -> Ssh (masked: NEG_BIG);
 *   C. one thread per (row, map) does the online softmax bookkeeping: tile
 *      max, new running max m, rescale factor alpha = exp(m_old - m), the
 *      probabilities exp(s - m) (in place in Ssh) and the running sum l;
 *   D. every thread rescales its slice of the two accumulators by alpha and
 *      adds P.V for its DV/RG output elements (RG = WG/BR threads per row).
 * The two maps keep separate maxima, sums and accumulators (they are
 * different softmaxes); they are combined once at the end:
 *   o = acc1/l1 - lambda * acc2/l2.
 * Split keys (SPLIT, for few workgroups: decode, small T): workgroup z of
 * the grid's z dimension walks only keys [z*chunk, (z+1)*chunk) and writes
 * its unnormalized state per (split, row, map): m, l, acc[DV], to binding 4
 * (a scratch buffer); shaders/attention_combine.comp merges the splits.
 * Specialization constants: DK, DV, BR, BC, MAPS, SPLIT (the host picks BR,
 * BC so that the tiles fit in maxComputeSharedMemorySize).
 * KV (kv.glsl): k and v f32, f16 or q8_0; step A widens each element
 * exactly (kv_at) into the same f32 tiles, so only the loads differ.
 * Napkin math: H*sum(pos+1)*(MAPS*2*DK + 2*DV) flops; K/V bytes read
 * from global memory, one sequence: (T*H/G/BR) * S * (MAPS*DK + DV) * es,
 * es = 4, 2, 34/32 (f32, f16, q8_0). */
#define WANT_ROWS
#include "common.glsl"
#define KV_ID 8
#include "kv.glsl"

layout(constant_id = 2) const uint MAPS = 2;
layout(constant_id = 3) const uint DK = 64;
layout(constant_id = 4) const uint DV = 128;
layout(constant_id = 5) const uint BR = 16;
layout(constant_id = 6) const uint BC = 16;
layout(constant_id = 7) const bool SPLIT = false;

const uint RG = WG / BR;              /* threads per query row in step D */
const uint NACC = (DV + RG - 1) / RG; /* output elements per thread */
const uint QW = MAPS * DK;            /* q / k floats per row (both maps) */
const uint QS = QW + 1;               /* padded shared row stride */

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
    uint chunk; /* SPLIT: keys per split, a multiple of BC */
} pc;

shared float Qsh[BR * QS];
shared float Ksh[BC * QS];
shared float Vsh[BC * DV];
shared float Ssh[BR * BC * MAPS]; /* [row][key][map]: scores, then probabilities */
shared float Ash[BR * MAPS];      /* this tile's rescale factor per (row, map) */
shared float Lsh[BR * MAPS];      /* final softmax denominators */

void main() {
    const uint tid = gl_LocalInvocationIndex;
    const uint g = gl_WorkGroupID.y;
    const uint HG = pc.H / pc.G;
    const uint R = pc.T * HG; /* query rows of this group */
    const uint row0 = gl_WorkGroupID.x * BR;
    /* its query tokens, and the keys of its split */
    const uint tfirst = row0 / HG, tlast = (min(row0 + BR, R) - 1) / HG;
    const uint jbeg = SPLIT ? gl_WorkGroupID.z * pc.chunk : 0;

    for (uint i = tid; i < BR * QW; i += WG) {
        uint r = i / QW, c = i % QW, rr = row0 + r;
        float val = 0.0;
        if (rr < R) {
            uint t = rr / HG, h = g * HG + rr % HG;
            val = q[pc.o_q + (t * pc.H + h) * QW + c];
        }
        Qsh[r * QS + c] = val;
    }

    /* step C state, owned by thread (row, map) = (tid / MAPS, tid % MAPS) */
    float m_run = NEG_BIG, l_run = 0.0;
    /* step D state: row tid / RG, output elements e = lane + i*RG */
    const uint rd = tid / RG, lane = tid % RG;
    float acc1[NACC], acc2[NACC];
    for (uint i = 0; i < NACC; i++) {
        acc1[i] = 0.0;
        acc2[i] = 0.0;
    }

    /* the runs ts..te of its tokens: keys base + j for j <= kmax, the last
     * any of the run's rows sees (pos of te), within the split */
    for (uint ts = tfirst; ts <= tlast;) {
        const uint te = run_end(pc.o_r, ts, tlast);
        const uint base = row_base(pc.o_r, ts), pts = row_pos(pc.o_r, ts);
        uint kmax = pts + (te - ts);
        if (SPLIT) kmax = min(kmax, jbeg + pc.chunk - 1);
        for (uint j0 = jbeg; j0 <= kmax; j0 += BC) {
            /* A */
            for (uint i = tid; i < BC * QW; i += WG) {
                uint jj = i / QW, c = i % QW, j = j0 + jj;
                uint mp = c / DK, d = c % DK;
                float val = 0.0;
                if (j <= kmax) {
                    const uint ke = (((base + j) * pc.G + g) * pc.km + mp * (pc.km - 1)) * DK + d;
                    val = KV == KV_F32 ? k[pc.o_k + ke] : kv_at(false, pc.o_k, ke);
                }
                Ksh[jj * QS + c] = val;
            }
            for (uint i = tid; i < BC * DV; i += WG) {
                uint jj = i / DV, e = i % DV, j = j0 + jj;
                float val = 0.0;
                if (j <= kmax) {
                    const uint ve = ((base + j) * pc.G + g) * DV + e;
                    val = KV == KV_F32 ? v[pc.o_v + ve] : kv_at(true, pc.o_v, ve);
                }
                Vsh[i] = val;
            }
            barrier();
            /* B: rows of the run only, each up to its own position */
            for (uint i = tid; i < BR * BC; i += WG) {
                uint r = i / BC, jj = i % BC, rr = row0 + r, t = rr / HG;
                bool ok = rr < R && t >= ts && t <= te && j0 + jj <= kmax && j0 + jj <= pts + (t - ts);
                for (uint mp = 0; mp < MAPS; mp++) {
                    float s = NEG_BIG;
                    if (ok) {
                        float dot = 0.0;
                        for (uint d = 0; d < DK; d++) dot += Qsh[r * QS + mp * DK + d] * Ksh[jj * QS + mp * DK + d];
                        s = dot * pc.scale;
                    }
                    Ssh[(r * BC + jj) * MAPS + mp] = s;
                }
            }
            barrier();
            /* C */
            if (tid < BR * MAPS) {
                uint r = tid / MAPS, mp = tid % MAPS;
                float mt = NEG_BIG;
                for (uint jj = 0; jj < BC; jj++) mt = max(mt, Ssh[(r * BC + jj) * MAPS + mp]);
                float m_new = max(m_run, mt);
                float alpha = exp(m_run - m_new);
                float ls = 0.0;
                for (uint jj = 0; jj < BC; jj++) {
                    uint idx = (r * BC + jj) * MAPS + mp;
                    float s = Ssh[idx];
                    float p = s > NEG_BIG ? exp(s - m_new) : 0.0;
                    Ssh[idx] = p;
                    ls += p;
                }
                l_run = l_run * alpha + ls;
                m_run = m_new;
                Ash[tid] = alpha;
            }
            barrier();
            /* D */
            {
                float a1 = Ash[rd * MAPS], a2 = MAPS == 2 ? Ash[rd * MAPS + 1] : 0.0;
                for (uint i = 0; i < NACC; i++) {
                    acc1[i] *= a1;
                    acc2[i] *= a2;
                }
                for (uint jj = 0; jj < BC; jj++) {
                    float p1 = Ssh[(rd * BC + jj) * MAPS];
                    float p2 = MAPS == 2 ? Ssh[(rd * BC + jj) * MAPS + 1] : 0.0;
                    for (uint i = 0; i < NACC; i++) {
                        uint e = lane + i * RG;
                        if (e < DV) {
                            float vv = Vsh[jj * DV + e];
                            acc1[i] += p1 * vv;
                            acc2[i] += p2 * vv;
                        }
                    }
                }
            }
            barrier();
        }
        ts = te + 1;
    }

    if (SPLIT) {
        /* partial state [split][t*H + h][map][m, l, acc[DV]], unnormalized */
        const uint PW = DV + 2;
        if (tid < BR * MAPS) {
            uint r = tid / MAPS, mp = tid % MAPS, rr = row0 + r;
            if (rr < R) {
                uint row = (rr / HG) * pc.H + g * HG + rr % HG;
                uint base = ((gl_WorkGroupID.z * pc.T * pc.H + row) * MAPS + mp) * PW;
                o[base] = m_run;
                o[base + 1] = l_run;
            }
        }
        const uint rr = row0 + rd;
        if (rr < R) {
            uint row = (rr / HG) * pc.H + g * HG + rr % HG;
            uint base = (gl_WorkGroupID.z * pc.T * pc.H + row) * MAPS * PW + 2;
            for (uint i = 0; i < NACC; i++) {
                uint e = lane + i * RG;
                if (e < DV) {
                    o[base + e] = acc1[i];
                    if (MAPS == 2) o[base + PW + e] = acc2[i];
                }
            }
        }
        return;
    }
    if (tid < BR * MAPS) Lsh[tid] = l_run;
    barrier();
    const uint rr = row0 + rd;
    if (rr < R) {
        uint t = rr / HG, h = g * HG + rr % HG;
        float i1 = 1.0 / Lsh[rd * MAPS];
        float i2 = 0.0;
        if (MAPS == 2) {
            float lam = pc.has_l != 0 ? lam_th[pc.o_l + t * pc.H + h] : pc.lambda;
            i2 = lam / Lsh[rd * MAPS + 1];
        }
        uint ob = pc.o_o + (t * pc.H + h) * DV;
        for (uint i = 0; i < NACC; i++) {
            uint e = lane + i * RG;
            if (e < DV) o[ob + e] = acc1[i] * i1 - acc2[i] * i2;
        }
    }
}
