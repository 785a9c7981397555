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
    void *ctx; /* passed to progress and note */
    int force; /* a non-empty out_dir is replaced as a whole; 0: it is refused */
    /* notices, one line each: a temp that a killed run left beside out_dir,
     * removed (drt_outdir_open). NULL: none */
    void (*note)(void *ctx, const char *line);
} drt_quantize_opts;

typedef struct {
    int n_tensors;                /* written: the tensors the model reads */
    int n_quantized;              /* of them quantized */
    uint64_t bytes_in, bytes_out; /* their data read, and written */
} drt_quantize_result;

/* Quantizes the model directory `dir` into out_dir, whole or not at all.
 *
 * Everything is checked before anything is written: type is DRT_Q8_0 or
 * DRT_Q4_0; dir loads as drt_model_load loads it (the rules of diffrt run:
 * config.json, the weights where the loader finds them, model.safetensors,
 * its sharded index or diff-mlx's latest.safetensors); out_dir passes
 * drt_outdir_check (include/diffrt/util.h) with dir protected: missing or
 * an empty directory (any other is refused unless o->force), not a
 * symbolic link, not dir however spelled nor a directory containing it,
 * and holding none of the files dir's model is read from (a link of dir's
 * pointing into out_dir). A refusal is DRT_ERR_INVALID_ARG naming out_dir.
 *
 * Then a fresh ".<name>.tmp.XXXXXX" beside out_dir (drt_outdir_open) gets
 * model.safetensors with the tensors the model reads: every 2-D "*.weight"
 * tensor of f32, f16 or bf16 but the token embedding whose rows are a
 * multiple of 32 long quantized to type, row by row; the rest (embedding,
 * norms, lambdas, other row lengths) as stored. A tensor the loader skips
 * (a diff-mlx optimizer's opt.*, a RoPE table, a tied checkpoint's copy of
 * its embedding as lm_head.weight) is not written: the result loads and
 * computes as dir does, up to the quantization. The blocks are U8 [rows,
 * blocks, block bytes] with the format in __metadata__. dir's config.json
 * and, when present, tokenizer.json, generation_config.json and
 * tokenizer_config.json are copied. The result is loaded back
 * (drt_model_load) and only then moved into place (drt_outdir_commit): a
 * non-empty out_dir (force) is replaced as a whole, no file of it
 * survives. Files are only ever created new in the fresh directory: no
 * existing file is opened for writing, so none of dir's, mapped while it
 * is read, is truncated through any name or link.
 *
 * On a failure (a tensor holding a NaN or Inf is DRT_ERR_FORMAT naming it
 * and where; a full disk DRT_ERR_IO; a result that does not load) the temp
 * is removed and out_dir is as it was. A killed run leaves only the temp,
 * which the next run for out_dir removes. o and out may be NULL. */
drt_status drt_quantize_model(const char *dir, drt_dtype type, const char *out_dir, const drt_quantize_opts *o,
                              drt_quantize_result *out);

#ifdef __cplusplus
}
#endif
#endif
