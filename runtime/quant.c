/* Quantizing and dequantizing rows of q8_0 / q4_0 blocks: the reference
 * rounding of docs/quantization.md (drt_quant.h). */
#include <math.h>
#include <string.h>

#include "drt_kv.h"

static void put_d(unsigned char *b, float d) {
    uint16_t h = drt_f32_to_f16(d);
    b[0] = (unsigned char)(h & 0xff);
    b[1] = (unsigned char)(h >> 8);
}

/* q8_0: d = max|x| / 127; q = round-half-away(x / d), in [-127, 127] */
static void quantize_q8_0(const float *x, unsigned char *b) {
    float amax = 0;
    for (int j = 0; j < DRT_QK; j++) {
        float a = fabsf(x[j]);
        if (a > amax) amax = a;
    }
    float d = amax / 127.0f, id = d != 0 ? 1.0f / d : 0.0f;
    put_d(b, d);
    for (int j = 0; j < DRT_QK; j++) {
        float v = roundf(x[j] * id);
        v = v > 127 ? 127 : v < -127 ? -127 : v == v ? v : 0; /* NaN (callers refuse it) -> 0 */
        b[2 + j] = (unsigned char)(int8_t)v;
    }
}

/* q4_0: m = the x of largest |x| (the first, on ties), d = m / -8;
 * q = min(15, floor(x / d + 8.5)); the value -8*d = m maps to q = 0 */
static void quantize_q4_0(const float *x, unsigned char *b) {
    float amax = 0, m = 0;
    for (int j = 0; j < DRT_QK; j++) {
        float a = fabsf(x[j]);
        if (a > amax) {
            amax = a;
            m = x[j];
        }
    }
    float d = m / -8.0f, id = d != 0 ? 1.0f / d : 0.0f;
    put_d(b, d);
    for (int j = 0; j < DRT_QK / 2; j++) {
        float v0 = x[j] * id + 8.5f, v1 = x[j + DRT_QK / 2] * id + 8.5f;
        int q0 = v0 >= 0 ? (v0 < 16 ? (int)v0 : 15) : 0, q1 = v1 >= 0 ? (v1 < 16 ? (int)v1 : 15) : 0;
        q0 = q0 > 15 ? 15 : q0;
        q1 = q1 > 15 ? 15 : q1;
        b[2 + j] = (unsigned char)(q0 | q1 << 4);
    }
}

void drt_quantize_row(const float *x, drt_dtype t, void *dst, int64_t n) {
    unsigned char *b = dst;
    size_t bs = drt_dtype_size(t);
    for (int64_t i = 0; i + DRT_QK <= n; i += DRT_QK, b += bs) {
        if (t == DRT_Q8_0)
            quantize_q8_0(x + i, b);
        else
            quantize_q4_0(x + i, b);
    }
}

void drt_dequantize_row(const void *src, drt_dtype t, float *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = t == DRT_Q8_0 ? drt_q8_0_get(src, i) : drt_q4_0_get(src, i);
}

void drt_kv_store(drt_dtype t, const float *x, void *dst, int64_t n) {
    if (t == DRT_F32) {
        memmove(dst, x, sizeof(float) * (size_t)n);
    } else if (t == DRT_F16) {
        uint16_t *h = dst;
        for (int64_t i = 0; i < n; i++) h[i] = drt_f32_to_f16(x[i]);
    } else {
        drt_quantize_row(x, t, dst, n);
    }
}

void drt_kv_load(drt_dtype t, const void *src, float *y, int64_t n) {
    if (t == DRT_F32) {
        memmove(y, src, sizeof(float) * (size_t)n);
    } else if (t == DRT_F16) {
        const uint16_t *h = src;
        for (int64_t i = 0; i < n; i++) y[i] = drt_f16_to_f32(h[i]);
    } else {
        drt_dequantize_row(src, t, y, n);
    }
}
