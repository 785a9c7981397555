/* KV cache types (docs/design.md section 3, KV_WRITE): a cache holds K and
 * V rows as f32, f16 or q8_0. KV_WRITE stores f32 rows in the cache's type,
 * rounding as below; ATTN and DIFF_ATTN compute with the stored values
 * widened exactly, so every backend reading one cache sees the same numbers.
 *
 *   f32   as is
 *   f16   round to nearest even (drt_f32_to_f16); beyond 65504 is Inf
 *   q8_0  blocks of 32 along the row, the weights' rounding (drt_quant.h,
 *         docs/quantization.md): d = max|x| / 127 stored as f16,
 *         q = round-half-away(x * (1/d)); a row must be whole blocks */
#ifndef DRT_KV_H
#define DRT_KV_H

#include <stdbool.h>
#include <stdint.h>

#include "drt_quant.h"

static inline bool drt_kv_type_ok(drt_dtype t) {
    return t == DRT_F32 || t == DRT_F16 || t == DRT_Q8_0;
}

/* n floats (a multiple of 32 for q8_0) -> n elements of type t at dst */
void drt_kv_store(drt_dtype t, const float *x, void *dst, int64_t n);
/* n elements of type t (starting at a block for q8_0) -> n floats, exact */
void drt_kv_load(drt_dtype t, const void *src, float *y, int64_t n);

#endif
