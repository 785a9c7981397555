/* Fast CPU KV_WRITE into an f16 or q8_0 cache (docs/design.md, KV cache
 * types), compiled once per ISA. Reference: drt_kv_store (runtime/quant.c),
 * which every path here matches bit for bit:
 *  - f16: round to nearest even, overflow to Inf, subnormals kept; a vector
 *    holding a NaN goes through drt_f32_to_f16, which also fixes the NaN's
 *    payload. Software conversion alone took 40 of the 134M model's 620 ms
 *    pp512 with an f16 cache.
 *  - q8_0: d = max|x| / 127 stored as f16, q = round-half-away(x * (1/d)),
 *    a NaN skipped by the max and stored as 0. The scalar loop (a libm
 *    roundf per value) took 35.6 of the 134M model's 661 ms pp512 with a
 *    q8_0 cache.
 * avx512 and avx2 have both; neon and generic call the reference. One
 * row (a cache row) a call, on the calling thread.
 *
 * Checked against the reference (exit status 0: every case bit for bit):
 *   diffrt conform --backend cpu --op KV_WRITE --kv-type f16 (q8_0), and
 *   with DIFFRT_CPU_ISA=avx2 (avx512, neon, generic) each kernel set
 */
#include <stdint.h>

#include "cpu_fast.h"
#include "drt_kv.h"
#include "simd.h"

#if defined(DRT_ISA_avx512) || defined(DRT_ISA_avx2)
VINL int any_nan(vf v) {
#if defined(DRT_ISA_avx512)
    return _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q) != 0;
#else
    return _mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0;
#endif
}

/* VL floats -> VL f16 values, rounded to nearest even */
VINL void store_f16(uint16_t *h, vf v) {
#if defined(DRT_ISA_avx512)
    _mm256_storeu_si256((__m256i *)h, _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#else
    _mm_storeu_si128((__m128i *)h, _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
}

static void kv_row_f16(const float *x, uint16_t *h, int64_t n) {
    int64_t i = 0;
    for (; i + VL <= n; i += VL) {
        const vf v = vload(x + i);
        if (any_nan(v))
            for (int j = 0; j < VL; j++) h[i + j] = drt_f32_to_f16(x[i + j]);
        else
            store_f16(h + i, v);
    }
    for (; i < n; i++) h[i] = drt_f32_to_f16(x[i]);
}

VINL vf vabs(vf v) {
    return vmax(vsub(vzero(), v), v); /* -0 -> 0; a NaN stays a NaN */
}

/* the q8_0 values of VL floats v (already times 1/d), round half away from
 * zero, exactly: trunc, plus sign(v) where |v - trunc(v)| >= 0.5 (that
 * difference is exact); clamped to +-127; NaN -> 0. As int32 lanes. */
#if defined(DRT_ISA_avx512)
VINL __m512i q8_lanes(vf v) {
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 f = _mm512_abs_ps(_mm512_sub_ps(v, t));
    const __m512 one = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_set1_epi32(0x3f800000), _mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(INT32_MIN))));
    __m512 r = _mm512_mask_add_ps(t, _mm512_cmp_ps_mask(f, _mm512_set1_ps(0.5f), _CMP_GE_OQ), t, one);
    r = _mm512_min_ps(_mm512_max_ps(r, _mm512_set1_ps(-127.0f)), _mm512_set1_ps(127.0f));
    r = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(v, v, _CMP_ORD_Q), r);
    return _mm512_cvtps_epi32(r);
}
#else
VINL __m256i q8_lanes(vf v) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
    const __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m256 f = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(v, sign));
    __m256 r = _mm256_add_ps(t, _mm256_and_ps(_mm256_cmp_ps(f, _mm256_set1_ps(0.5f), _CMP_GE_OQ), one));
    r = _mm256_min_ps(_mm256_max_ps(r, _mm256_set1_ps(-127.0f)), _mm256_set1_ps(127.0f));
    r = _mm256_and_ps(r, _mm256_cmp_ps(v, v, _CMP_ORD_Q));
    return _mm256_cvtps_epi32(r);
}
#endif

/* n floats (whole blocks of 32) -> q8_0 blocks (2 bytes of d, 32 of q) */
static void kv_row_q8_0(const float *x, unsigned char *b, int64_t n) {
    enum { NV_B = DRT_QK / VL };
    for (int64_t i = 0; i + DRT_QK <= n; i += DRT_QK, b += 2 + DRT_QK) {
        vf v[NV_B];
        /* vmax(a, b) returns b where either is NaN: the NaN is skipped, as
         * the reference's a > amax */
        vf m = vzero();
        for (int j = 0; j < NV_B; j++) {
            v[j] = vload(x + i + j * VL);
            m = vmax(vabs(v[j]), m);
        }
        const float amax = vhmax(m);
        const float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
        const uint16_t h = drt_f32_to_f16(d);
        b[0] = (unsigned char)(h & 0xff);
        b[1] = (unsigned char)(h >> 8);
        for (int j = 0; j < NV_B; j++) v[j] = vmul(v[j], vset1(id));
#if defined(DRT_ISA_avx512)
        for (int j = 0; j < NV_B; j++)
            _mm_storeu_si128((__m128i *)(b + 2 + 16 * j), _mm512_cvtsepi32_epi8(q8_lanes(v[j])));
#else
        /* 4 x 8 int32 -> 32 int8: packs interleave 128-bit lanes, the
         * permute puts them back in order */
        const __m256i ab = _mm256_packs_epi32(q8_lanes(v[0]), q8_lanes(v[1]));
        const __m256i cd = _mm256_packs_epi32(q8_lanes(v[2]), q8_lanes(v[3]));
        const __m256i q = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(ab, cd),
                                                      _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(b + 2), q);
#endif
    }
}
#endif

/* y: one cache row of type t (f16 or q8_0) from the n floats x; n a
 * multiple of 32 for q8_0 */
void KFN(cpu_kv_row)(const float *x, void *y, drt_dtype t, int64_t n) {
#if defined(DRT_ISA_avx512) || defined(DRT_ISA_avx2)
    if (t == DRT_F16) {
        kv_row_f16(x, y, n);
        return;
    }
    if (t == DRT_Q8_0) {
        kv_row_q8_0(x, y, n);
        return;
    }
#endif
    drt_kv_store(t, x, y, n);
}
