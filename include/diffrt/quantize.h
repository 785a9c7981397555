/* Quantizing a model directory to q8_0 or q4_0 blocks (diffrt quantize;
 * docs/quantization.md). */
#ifndef DIFFRT_QUANTIZE_H
#define DIFFRT_QUANTIZE_H

#include <stdint.h>

#include "diffrt/diffrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    /* called after each tensor that is quantized: done tensors of n (in the
     * checkpoint's name order), its name and shape; then once with name
     * NULL when every tensor is done, before anything is written. NULL: none */
    void (*progress)(void *ctx, int done, int n, const char *name, int64_t rows, int64_t cols);
    void *ctx;
} drt_quantize_opts;

typedef struct {
    int n_tensors;                /* in the checkpoint */
    int n_quantized;              /* of them quantized */
    uint64_t bytes_in, bytes_out; /* tensor data read, and written */
} drt_quantize_result;

/* Writes out_dir/model.safetensors with the tensors of the model directory
 * `dir`, those of its projection weights quantized to type (DRT_Q8_0 or
 * DRT_Q4_0): every 2-D "*.weight" tensor of f32, f16 or bf16 but the token
 * embedding whose rows are a multiple of 32 long, row by row; the rest
 * (embedding, norms, lambdas, other row lengths) as stored. The blocks are
 * U8 [rows, blocks, block bytes] with the format in __metadata__. Then
 * copies dir's config.json and, when present, tokenizer.json,
 * generation_config.json (eos ids) and tokenizer_config.json (chat
 * template). out_dir must exist and hold none of these files (the copies
 * are created new, never through a symlink). A tensor holding a NaN or Inf is
 * DRT_ERR_FORMAT naming it and where. On failure what was written stays in
 * out_dir: write into a fresh directory and move it into place after a
 * check (`diffrt quantize` loads the result back first). out may be NULL. */
drt_status drt_quantize_model(const char *dir, drt_dtype type, const char *out_dir, const drt_quantize_opts *o,
                              drt_quantize_result *out);

#ifdef __cplusplus
}
#endif
#endif
