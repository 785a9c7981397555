/* One vector abstraction for the ISA this copy of the kernels is compiled
 * for (DRT_ISA, set by CMakeLists.txt together with the compiler's -m flags):
 *   vf          a vector of VL floats
 *   vload/vstore/vset1/vzero, vadd/vsub/vmul/vdiv1/vmax, vfma(a,b,c) = a*b + c
 *               (vmax(a,b): b where either is NaN, except NEON: NaN)
 *   vhsum/vhmax horizontal sum / max
 *   vsel_le(j,pos,x,fill)  per lane: j <= pos ? x : fill
 *   vload_f16/vload_bf16  VL half-precision weights widened to f32
 *   vload_q8/vload_q4     VL quantized values of one q8_0 / q4_0 block as f32
 *               (q, and q - 8), from element j of the block (j a multiple of VL)
 *   vexp        e^x, relative error ~2e-7 (Cephes expf polynomial), x <= 88; NaN -> NaN
 * Internal to backends/cpu; only the per-ISA kernel files include it. */
#ifndef DRT_CPU_SIMD_H
#define DRT_CPU_SIMD_H

#include <math.h>
#include <stdint.h>

#include "drt_half.h"
#include "drt_quant.h"

#define VINL static inline __attribute__((always_inline))

#if defined(DRT_ISA_avx512)
#include <immintrin.h>
#define VL 16
typedef __m512 vf;
VINL vf vload(const float *p) {
    return _mm512_loadu_ps(p);
}
VINL void vstore(float *p, vf v) {
    _mm512_storeu_ps(p, v);
}
VINL vf vset1(float x) {
    return _mm512_set1_ps(x);
}
VINL vf vzero(void) {
    return _mm512_setzero_ps();
}
VINL vf vadd(vf a, vf b) {
    return _mm512_add_ps(a, b);
}
VINL vf vsub(vf a, vf b) {
    return _mm512_sub_ps(a, b);
}
VINL vf vmul(vf a, vf b) {
    return _mm512_mul_ps(a, b);
}
VINL vf vmax(vf a, vf b) {
    return _mm512_max_ps(a, b);
}
VINL vf vdiv1(vf a, vf b) {
    return _mm512_div_ps(a, b);
}
VINL vf vsel_le(vf j, vf pos, vf x, vf fill) {
    return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(j, pos, _CMP_LE_OQ), fill, x);
}
VINL vf vfma(vf a, vf b, vf c) {
    return _mm512_fmadd_ps(a, b, c);
}
VINL float vhsum(vf v) {
    return _mm512_reduce_add_ps(v);
}
VINL float vhmax(vf v) {
    return _mm512_reduce_max_ps(v);
}
VINL vf vload_f16(const uint16_t *p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p));
}
VINL vf vload_bf16(const uint16_t *p) {
    __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(w, 16));
}
VINL vf vround(vf x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
/* p * 2^n for integral n in [-126, 127] */
VINL vf vldexp(vf p, vf n) {
    return _mm512_scalef_ps(p, n);
}

#elif defined(DRT_ISA_avx2)
#include <immintrin.h>
#define VL 8
typedef __m256 vf;
VINL vf vload(const float *p) {
    return _mm256_loadu_ps(p);
}
VINL void vstore(float *p, vf v) {
    _mm256_storeu_ps(p, v);
}
VINL vf vset1(float x) {
    return _mm256_set1_ps(x);
}
VINL vf vzero(void) {
    return _mm256_setzero_ps();
}
VINL vf vadd(vf a, vf b) {
    return _mm256_add_ps(a, b);
}
VINL vf vsub(vf a, vf b) {
    return _mm256_sub_ps(a, b);
}
VINL vf vmul(vf a, vf b) {
    return _mm256_mul_ps(a, b);
}
VINL vf vmax(vf a, vf b) {
    return _mm256_max_ps(a, b);
}
VINL vf vdiv1(vf a, vf b) {
    return _mm256_div_ps(a, b);
}
VINL vf vsel_le(vf j, vf pos, vf x, vf fill) {
    return _mm256_blendv_ps(fill, x, _mm256_cmp_ps(j, pos, _CMP_LE_OQ));
}
VINL vf vfma(vf a, vf b, vf c) {
    return _mm256_fmadd_ps(a, b, c);
}
VINL float vhsum(vf v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
VINL float vhmax(vf v) {
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}
VINL vf vload_f16(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}
VINL vf vload_bf16(const uint16_t *p) {
    __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}
VINL vf vround(vf x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
}
VINL vf vldexp(vf p, vf n) {
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

#elif defined(DRT_ISA_neon)
#include <arm_neon.h>
#define VL 4
typedef float32x4_t vf;
VINL vf vload(const float *p) {
    return vld1q_f32(p);
}
VINL void vstore(float *p, vf v) {
    vst1q_f32(p, v);
}
VINL vf vset1(float x) {
    return vdupq_n_f32(x);
}
VINL vf vzero(void) {
    return vdupq_n_f32(0.0f);
}
VINL vf vadd(vf a, vf b) {
    return vaddq_f32(a, b);
}
VINL vf vsub(vf a, vf b) {
    return vsubq_f32(a, b);
}
VINL vf vmul(vf a, vf b) {
    return vmulq_f32(a, b);
}
VINL vf vmax(vf a, vf b) {
    return vmaxq_f32(a, b);
}
VINL vf vdiv1(vf a, vf b) {
    return vdivq_f32(a, b);
}
VINL vf vsel_le(vf j, vf pos, vf x, vf fill) {
    return vbslq_f32(vcleq_f32(j, pos), x, fill);
}
VINL vf vfma(vf a, vf b, vf c) {
    return vfmaq_f32(c, a, b);
}
VINL float vhsum(vf v) {
    return vaddvq_f32(v);
}
VINL float vhmax(vf v) {
    return vmaxvq_f32(v);
}
VINL vf vload_f16(const uint16_t *p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
}
VINL vf vload_bf16(const uint16_t *p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
}
VINL vf vround(vf x) {
    return vrndnq_f32(x);
}
VINL vf vldexp(vf p, vf n) {
    int32x4_t e = vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23);
    return vmulq_f32(p, vreinterpretq_f32_s32(e));
}

#elif defined(DRT_ISA_generic)
/* Portable C: GCC/Clang vector extensions, lowered to whatever the target
 * has (plain scalar code where it has nothing). */
#define VL 4
typedef float vf __attribute__((vector_size(16)));
VINL vf vload(const float *p) {
    vf v;
    __builtin_memcpy(&v, p, sizeof v);
    return v;
}
VINL void vstore(float *p, vf v) {
    __builtin_memcpy(p, &v, sizeof v);
}
VINL vf vset1(float x) {
    return (vf){x, x, x, x};
}
VINL vf vzero(void) {
    return (vf){0, 0, 0, 0};
}
VINL vf vadd(vf a, vf b) {
    return a + b;
}
VINL vf vsub(vf a, vf b) {
    return a - b;
}
VINL vf vmul(vf a, vf b) {
    return a * b;
}
VINL vf vmax(vf a, vf b) {
    return (vf){a[0] > b[0] ? a[0] : b[0], a[1] > b[1] ? a[1] : b[1], a[2] > b[2] ? a[2] : b[2],
                a[3] > b[3] ? a[3] : b[3]};
}
VINL vf vfma(vf a, vf b, vf c) {
    return a * b + c;
}
VINL vf vdiv1(vf a, vf b) {
    return a / b;
}
VINL vf vsel_le(vf j, vf pos, vf x, vf fill) {
    return (vf){j[0] <= pos[0] ? x[0] : fill[0], j[1] <= pos[1] ? x[1] : fill[1], j[2] <= pos[2] ? x[2] : fill[2],
                j[3] <= pos[3] ? x[3] : fill[3]};
}
VINL float vhsum(vf v) {
    return (v[0] + v[1]) + (v[2] + v[3]);
}
VINL float vhmax(vf v) {
    float a = v[0] > v[1] ? v[0] : v[1], b = v[2] > v[3] ? v[2] : v[3];
    return a > b ? a : b;
}
VINL vf vload_f16(const uint16_t *p) {
    return (vf){drt_f16_to_f32(p[0]), drt_f16_to_f32(p[1]), drt_f16_to_f32(p[2]), drt_f16_to_f32(p[3])};
}
VINL vf vload_bf16(const uint16_t *p) {
    return (vf){drt_bf16_to_f32(p[0]), drt_bf16_to_f32(p[1]), drt_bf16_to_f32(p[2]), drt_bf16_to_f32(p[3])};
}
VINL vf vround(vf x) {
    return (vf){nearbyintf(x[0]), nearbyintf(x[1]), nearbyintf(x[2]), nearbyintf(x[3])};
}
/* a NaN n (from a NaN x in vexp) leaves p, itself NaN: (int)NaN is undefined */
#define DRT_LDEXP1(p, n) (isnan(n) ? (p) : ldexpf((p), (int)(n)))
VINL vf vldexp(vf p, vf n) {
    return (vf){DRT_LDEXP1(p[0], n[0]), DRT_LDEXP1(p[1], n[1]), DRT_LDEXP1(p[2], n[2]), DRT_LDEXP1(p[3], n[3])};
}
#else
#error "DRT_ISA must be one of avx512, avx2, neon, generic"
#endif

/* e^x, clamped to [-87.3, 88.7] (finite, no overflow in 2^n); x below -87.3 gives a value under 1e-38 (not 0: callers
 * that need exact zeros for masked entries write them). Range reduction
 * x = n ln2 + r, |r| <= ln2/2, then Cephes' degree-5 polynomial for e^r. */
VINL vf vexp(vf x) {
    /* the clamps take x as vmax's second operand: x86 max and the generic one
     * return the second when one is NaN, so a NaN stays NaN (as expf's would)
     * instead of becoming e^-87.3 and vanishing from a softmax */
    x = vmax(vset1(-87.3f), x);
    x = vsub(vzero(), vmax(vset1(-88.7f), vsub(vzero(), x))); /* min(x, 88.7): e^x stays finite */
    vf n = vround(vmul(x, vset1(1.44269504088896341f)));
    vf r = vfma(n, vset1(-0.693359375f), x);
    r = vfma(n, vset1(2.12194440e-4f), r);
    vf p = vset1(1.9875691500e-4f);
    p = vfma(p, r, vset1(1.3981999507e-3f));
    p = vfma(p, r, vset1(8.3334519073e-3f));
    p = vfma(p, r, vset1(4.1665795894e-2f));
    p = vfma(p, r, vset1(1.6666665459e-1f));
    p = vfma(p, r, vset1(5.0000001201e-1f));
    p = vfma(p, vmul(r, r), vadd(r, vset1(1.0f)));
    return vldexp(p, n);
}

/* ---- q8_0 / q4_0 blocks (drt_quant.h): qs are the block's value bytes ---- */
#if defined(DRT_ISA_avx512)
VINL vf vload_q8(const int8_t *q, int j) {
    return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(q + j))));
}
VINL vf vload_q4(const uint8_t *qs, int j) { /* j is 0 (low nibbles) or 16 (high) */
    __m128i b = _mm_loadu_si128((const __m128i *)qs);
    if (j) b = _mm_srli_epi16(b, 4);
    b = _mm_and_si128(b, _mm_set1_epi8(15));
    return _mm512_cvtepi32_ps(_mm512_sub_epi32(_mm512_cvtepu8_epi32(b), _mm512_set1_epi32(8)));
}
#elif defined(DRT_ISA_avx2)
VINL vf vload_q8(const int8_t *q, int j) {
    return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(q + j))));
}
VINL vf vload_q4(const uint8_t *qs, int j) {
    __m128i b = _mm_loadl_epi64((const __m128i *)(qs + (j & 15)));
    if (j >= 16) b = _mm_srli_epi16(b, 4);
    b = _mm_and_si128(b, _mm_set1_epi8(15));
    return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(b), _mm256_set1_epi32(8)));
}
#else
VINL vf vload_q8(const int8_t *q, int j) {
    float f[VL];
    for (int l = 0; l < VL; l++) f[l] = (float)q[j + l];
    return vload(f);
}
VINL vf vload_q4(const uint8_t *qs, int j) {
    float f[VL];
    for (int l = 0; l < VL; l++) {
        int e = j + l;
        f[l] = (float)((e < 16 ? qs[e] & 15 : qs[e - 16] >> 4) - 8);
    }
    return vload(f);
}
#endif

/* an f16 scale as float: F16C where the kernel set has it */
VINL float vh2f(uint16_t h) {
#if defined(DRT_ISA_avx512) || defined(DRT_ISA_avx2)
    return _cvtsh_ss(h);
#else
    return drt_f16_to_f32(h);
#endif
}

/* bytes of n weights of dtype dt (n a multiple of the block; dt a constant) */
VINL int64_t wbytes(drt_dtype dt, int64_t n) {
    return dt == DRT_Q8_0 ? n / DRT_QK * 34 : dt == DRT_Q4_0 ? n / DRT_QK * 18 : dt == DRT_F32 ? n * 4 : n * 2;
}

/* VL weights from element i (a multiple of VL) of a q8_0 / q4_0 array:
 * d * q of its block */
VINL vf vload_qblock(const void *w, int64_t i, drt_dtype dt) {
    const unsigned char *b = (const unsigned char *)w + wbytes(dt, i - i % DRT_QK);
    const vf d = vset1(vh2f((uint16_t)(b[0] | b[1] << 8)));
    const int j = (int)(i % DRT_QK);
    return vmul(d, dt == DRT_Q8_0 ? vload_q8((const int8_t *)b + 2, j) : vload_q4(b + 2, j));
}

/* weights of dtype DT (compile-time constant in every caller) */
VINL vf vload_w(const void *w, int64_t i, drt_dtype dt) {
    if (dt == DRT_Q8_0 || dt == DRT_Q4_0) return vload_qblock(w, i, dt);
    if (dt == DRT_F16) return vload_f16((const uint16_t *)w + i);
    if (dt == DRT_BF16) return vload_bf16((const uint16_t *)w + i);
    return vload((const float *)w + i);
}
VINL float load_w1(const void *w, int64_t i, drt_dtype dt) {
    if (dt == DRT_Q8_0) return drt_q8_0_get(w, i);
    if (dt == DRT_Q4_0) return drt_q4_0_get(w, i);
    if (dt == DRT_F16) return drt_f16_to_f32(((const uint16_t *)w)[i]);
    if (dt == DRT_BF16) return drt_bf16_to_f32(((const uint16_t *)w)[i]);
    return ((const float *)w)[i];
}

#endif
