#version 450
#extension GL_GOOGLE_include_directive : require
/* MATMUL, tiled: y[b,t,n] = scale * sum_k x[b,t,k] * W[bw,n,k], bw = b*Bw/B.
 * x is (B,T,K) f32; y is (B,T,N) f32; W is (Bw,N,K), or (Bw,K,N) when
 * transposed: element (n,k) of a weight batch is at n*ns + k*ks.
 * CPU reference: backends/cpu/matmul.c (cpu_matmul).
 *
 * Two kernels in one module, picked by the specialization constant REG
 * (backends/vulkan/matmul.c chooses per device and shape):
 *
 * REG = false (GPUs): one workgroup computes a BM x BN tile of y (grid:
 * x = N/BN, y = T/BM, z = B), staging BK-wide slices of x and W in shared
 * memory; each thread owns TM x TN outputs strided by BM/TM rows and BN/TN
 * columns, so the threads of a row of the workgroup write consecutive n.
 * WG must be (BM/TM)*(BN/TN).
 *
 * REG = true (CPU devices such as lavapipe, where an invocation is a SIMD
 * lane, shared memory is ordinary memory reached lane by lane, and a
 * barrier is a coroutine switch): no shared memory, no barriers. A
 * workgroup of WG lanes computes TM rows x (WG*TN) columns (grid: x =
 * T/TM, y = N/(WG*TN), z = B); lane l owns columns n0 + l + j*WG, j < TN,
 * for all TM rows. The rows depend on the workgroup only, so every x load
 * is uniform (one scalar load for all lanes); W is read 4 k at a time per
 * column (two packed words for f16/bf16). Each W value feeds TM FMAs and
 * each x value WG*TN. Out-of-range rows/columns read clamped (valid)
 * addresses and are not written, so no lane branches in the k loop.
 *
 * Accumulation is f32 in both. Napkin math: 2*B*T*N*K flops; every x
 * element is read N/BN times and every W element T/BM times from global
 * memory (BN = WG*TN, BM = TM for REG). */
#include "common.glsl"
#include "weights.glsl"

layout(constant_id = 2) const uint BM = 32;
layout(constant_id = 3) const uint BN = 32;
layout(constant_id = 4) const uint BK = 16;
layout(constant_id = 5) const uint TM = 4;
layout(constant_id = 6) const uint TN = 4;
layout(constant_id = 7) const bool REG = false;
/* REG only: K, and the element offsets of x and W, are multiples of 4 and W
 * is (N,K): x and W are read as whole vec4 (lavapipe reads memory lane by
 * lane, all components of one load at once: 4x fewer loads) */
layout(constant_id = 8) const bool VEC4 = false;

layout(binding = 0) readonly buffer Xbuf { float x[]; };
layout(binding = 0) readonly buffer Xbuf4 { vec4 x4[]; };
layout(binding = 4) writeonly buffer Ybuf { float y[]; };

layout(push_constant) uniform PC {
    uint o_x, o_w, o_y;
    uint B, Bw, T, N, K;
    uint ns, ks; /* weight strides of n and k */
    uint trans;  /* 1: W is (K,N); load tiles along n */
    float scale;
} pc;

shared float As[BK * BM]; /* As[k][m] */
shared float Bs[BK * BN]; /* Bs[k][n] */

void main_shared() {
    const uint tid = gl_LocalInvocationIndex;
    const uint m0 = gl_WorkGroupID.y * BM, n0 = gl_WorkGroupID.x * BN, b = gl_WorkGroupID.z;
    const uint bw = b * pc.Bw / pc.B;
    const uint xb = pc.o_x + b * pc.T * pc.K;
    const uint wb = pc.o_w + bw * pc.N * pc.K;
    const uint tx = tid % (BN / TN), ty = tid / (BN / TN);

    float acc[TM * TN];
    for (uint i = 0; i < TM * TN; i++) acc[i] = 0.0;

    for (uint k0 = 0; k0 < pc.K; k0 += BK) {
        for (uint i = tid; i < BM * BK; i += WG) {
            uint m = i / BK, kk = i % BK;
            uint gm = m0 + m, gk = k0 + kk;
            As[kk * BM + m] = (gm < pc.T && gk < pc.K) ? x[xb + gm * pc.K + gk] : 0.0;
        }
        for (uint i = tid; i < BN * BK; i += WG) {
            /* consecutive threads walk the contiguous dimension of W */
            uint n = pc.trans != 0 ? i % BN : i / BK;
            uint kk = pc.trans != 0 ? i / BN : i % BK;
            uint gn = n0 + n, gk = k0 + kk;
            Bs[kk * BN + n] = (gn < pc.N && gk < pc.K) ? load_w(wb + gn * pc.ns + gk * pc.ks) : 0.0;
        }
        barrier();
        for (uint kk = 0; kk < BK; kk++) {
            float a[TM], bv[TN];
            for (uint i = 0; i < TM; i++) a[i] = As[kk * BM + ty + i * (BM / TM)];
            for (uint j = 0; j < TN; j++) bv[j] = Bs[kk * BN + tx + j * (BN / TN)];
            for (uint i = 0; i < TM; i++)
                for (uint j = 0; j < TN; j++) acc[i * TN + j] += a[i] * bv[j];
        }
        barrier();
    }
    for (uint i = 0; i < TM; i++) {
        uint gm = m0 + ty + i * (BM / TM);
        if (gm >= pc.T) continue;
        for (uint j = 0; j < TN; j++) {
            uint gn = n0 + tx + j * (BN / TN);
            if (gn < pc.N) y[pc.o_y + (b * pc.T + gm) * pc.N + gn] = pc.scale * acc[i * TN + j];
        }
    }
}

void main_reg() {
    const uint lane = gl_LocalInvocationIndex;
    /* grid x walks the rows: consecutive workgroups (which lavapipe hands to
     * its threads in order) reuse the same W columns from cache while x
     * streams past them */
    const uint m0 = gl_WorkGroupID.x * TM, n0 = gl_WorkGroupID.y * (WG * TN), b = gl_WorkGroupID.z;
    const uint bw = b * pc.Bw / pc.B;
    const uint K = pc.K;
    /* x rows (uniform), clamped into range */
    uint xr[TM];
    for (uint i = 0; i < TM; i++) xr[i] = pc.o_x + (b * pc.T + min(m0 + i, pc.T - 1)) * K;
    /* W columns of this lane, clamped into range */
    uint wr[TN];
    for (uint j = 0; j < TN; j++)
        wr[j] = pc.o_w + bw * pc.N * K + min(n0 + lane + j * WG, pc.N - 1) * pc.ns;
    const uint ks = pc.ks;
    /* 4 consecutive weights per column are whole words when W is (N,K) with
     * K and the offset even (uniform: no lane diverges) */
    const bool packed = ks == 1 && ((K | pc.o_w) & 1u) == 0;

    float acc[TM * TN];
    for (uint i = 0; i < TM * TN; i++) acc[i] = 0.0;

    const uint K4 = K & ~3u;
    if (VEC4) {
        for (uint i = 0; i < TM; i++) xr[i] >>= 2;
        for (uint j = 0; j < TN; j++) wr[j] >>= 2;
        for (uint k = 0; k < K4 / 4; k++) {
            vec4 wv[TN];
            for (uint j = 0; j < TN; j++) wv[j] = load_w4a(wr[j] + k);
            for (uint i = 0; i < TM; i++) {
                vec4 xv = x4[xr[i] + k];
                for (uint j = 0; j < TN; j++) {
                    float s = acc[i * TN + j];
                    s = fma(xv.x, wv[j].x, s);
                    s = fma(xv.y, wv[j].y, s);
                    s = fma(xv.z, wv[j].z, s);
                    s = fma(xv.w, wv[j].w, s);
                    acc[i * TN + j] = s;
                }
            }
        }
    } else {
    for (uint k = 0; k < K4; k += 4) {
        vec4 wv[TN];
        for (uint j = 0; j < TN; j++) wv[j] = packed ? load_w4(wr[j] + k) : load_w4s(wr[j] + k * ks, ks);
        for (uint i = 0; i < TM; i++) {
            vec4 xv = vec4(x[xr[i] + k], x[xr[i] + k + 1], x[xr[i] + k + 2], x[xr[i] + k + 3]);
            for (uint j = 0; j < TN; j++) {
                float s = acc[i * TN + j];
                s = fma(xv.x, wv[j].x, s);
                s = fma(xv.y, wv[j].y, s);
                s = fma(xv.z, wv[j].z, s);
                s = fma(xv.w, wv[j].w, s);
                acc[i * TN + j] = s;
            }
        }
    }
    }
    for (uint k = K4; k < K; k++) {
        float wv[TN];
        for (uint j = 0; j < TN; j++) wv[j] = load_w(wr[j] + k * ks);
        for (uint i = 0; i < TM; i++) {
            float xv = x[xr[i] + k];
            for (uint j = 0; j < TN; j++) acc[i * TN + j] = fma(xv, wv[j], acc[i * TN + j]);
        }
    }
    for (uint i = 0; i < TM; i++) {
        uint gm = m0 + i;
        if (gm >= pc.T) break;
        for (uint j = 0; j < TN; j++) {
            uint gn = n0 + lane + j * WG;
            if (gn < pc.N) y[pc.o_y + (b * pc.T + gm) * pc.N + gn] = pc.scale * acc[i * TN + j];
        }
    }
}

void main() {
    if (REG)
        main_reg();
    else
        main_shared();
}
