/* The safetensors format as model/'s reader (safetensors.c) and writer
 * (st_write.c) both spell it: the dtype names, the exact-integer limit of
 * the JSON header, the __metadata__ key of the block formats. */
#ifndef DRT_ST_FORMAT_H
#define DRT_ST_FORMAT_H

#include "diffrt/diffrt.h"

/* integers above 2^53 cannot be represented exactly by cJSON's double */
#define ST_MAX_JSON_INT 9007199254740992.0
#define DRT_QBLOCK 32 /* weights per q8_0 / q4_0 block */

/* safetensors spelling of each drt_dtype, in enum order: the block formats
 * are stored as U8 (bytes) of shape [rows, blocks, block bytes], the format
 * named in __metadata__ (docs/quantization.md) */
static const char *const st_dtype_names[DRT_DTYPE_COUNT] = {"F32", "F16", "BF16", "I32", "U8", "U8"};
_Static_assert(DRT_DTYPE_COUNT == 6, "add the new dtype to st_dtype_names");

/* __metadata__ key naming the block format of a U8 tensor */
#define ST_QUANT_KEY "diffrt.dtype."

#endif
