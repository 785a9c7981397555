/* The weight-only block formats q8_0 and q4_0 (docs/quantization.md):
 * a row of K weights (K a multiple of 32) is K/32 blocks, each one f16
 * scale d and 32 quantized values.
 *
 *   q8_0 block, 34 bytes: d (f16, little-endian), q[32] (int8)
 *        w[j] = d * q[j]
 *   q4_0 block, 18 bytes: d (f16), qs[16]; q[j] = qs[j] & 15 and
 *        q[j + 16] = qs[j] >> 4 for j < 16
 *        w[j] = d * (q[j] - 8)
 *
 * These functions are the reference: every backend's kernels must compute
 * with exactly these dequantized values. */
#ifndef DRT_QUANT_H
#define DRT_QUANT_H

#include <stdint.h>

#include "diffrt/diffrt.h"
#include "drt_half.h"

#define DRT_QK 32

typedef struct {
    uint16_t d;
    int8_t q[DRT_QK];
} drt_block_q8_0;

typedef struct {
    uint16_t d;
    uint8_t qs[DRT_QK / 2];
} drt_block_q4_0;

_Static_assert(sizeof(drt_block_q8_0) == 34, "q8_0 block is 34 bytes");
_Static_assert(sizeof(drt_block_q4_0) == 18, "q4_0 block is 18 bytes");

/* Element i (row-major, blocks contiguous along the row) of a q8_0 / q4_0
 * array. The blocks need no alignment (byte loads). */
static inline float drt_q8_0_get(const void *w, int64_t i) {
    const unsigned char *b = (const unsigned char *)w + (i / DRT_QK) * 34;
    uint16_t d = (uint16_t)(b[0] | b[1] << 8);
    return drt_f16_to_f32(d) * (float)(int8_t)b[2 + i % DRT_QK];
}

static inline float drt_q4_0_get(const void *w, int64_t i) {
    const unsigned char *b = (const unsigned char *)w + (i / DRT_QK) * 18;
    uint16_t d = (uint16_t)(b[0] | b[1] << 8);
    int j = (int)(i % DRT_QK);
    int q = j < DRT_QK / 2 ? b[2 + j] & 15 : b[2 + j - DRT_QK / 2] >> 4;
    return drt_f16_to_f32(d) * (float)(q - 8);
}

/* n floats (a multiple of 32) -> n / 32 blocks of type t (DRT_Q8_0 or
 * DRT_Q4_0) at dst, with the rounding rules of docs/quantization.md. */
void drt_quantize_row(const float *x, drt_dtype t, void *dst, int64_t n);
/* n / 32 blocks -> n floats. */
void drt_dequantize_row(const void *src, drt_dtype t, float *y, int64_t n);

#endif
