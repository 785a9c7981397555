/* The inside of the loader (model/): the load in progress and what its
 * files share. loader.c orders the load, config.c reads config.json,
 * weights.c reads tensors, layouts.c maps them onto the model. Not
 * included above model/. */
#ifndef DRT_LOADER_INTERNAL_H
#define DRT_LOADER_INTERNAL_H

#include <stdint.h>

#include "model.h"
#include "safetensors.h"

typedef struct {
    drt_model *m;
    char *st_name; /* for messages: DIR/model.safetensors, however long DIR is */
    /* the checking pass: look every tensor up and check its shape, allocate
     * and copy nothing; the loading pass runs only after it succeeded */
    int dry;
    /* by m->st.by_name index: the tensor was looked up (either pass), so
     * the layout uses it; anything else must be harmless (ld_check_strays) */
    unsigned char *used;
    const char *mlx_pre; /* diff-mlx: "model." or "" (older files) */
    /* the checkpoint's pages stay as they are (no drt_st_release): it is
     * read again after the load (drt_checkpoint_open) */
    int keep;
} ld_t;

/* ---- config.c ------------------------------------------------------------ */

/* the names of drt_arch and drt_layout values, in enum order */
extern const char *const ld_arch_names[];
extern const char *const ld_layout_names[];
/* config.json (and generation_config.json) of dir into m: the layout and
 * its sizes; *mlx when it is diff-mlx's */
drt_status ld_read_config(const char *dir, drt_model *m, int *nq, int *nkv, int *mlx);

/* ---- weights.c ----------------------------------------------------------- */

/* Finds `name` with exactly the given shape (nd 0, 1 or 2). */
drt_status ld_get_tensor(ld_t *L, const char *name, int nd, int64_t n0, int64_t n1, const drt_st_tensor **out);
/* As stored. Aligned data (every checkpoint a normal writer makes) is used in
 * place: the weight points into the mapping and the CPU backend reads it
 * there. Data not aligned for its dtype (a header length that puts the data
 * at an odd offset) is copied once into aligned memory and its mapped pages
 * released, so no kernel ever makes a misaligned load and there is still one
 * resident copy. */
drt_status ld_load_as_is(ld_t *L, drt_host_weight *w, const char *name, int64_t n0, int64_t n1);
/* Vectors (norm weights) are converted to f32. */
drt_status ld_load_f32_vec(ld_t *L, drt_host_weight *w, const char *name, int64_t n0);
/* A matrix of `rows` rows of `cols` whose internal row r is source row map[r]. */
drt_status ld_load_rows(ld_t *L, drt_host_weight *w, const char *name, int64_t rows, int64_t cols, const int64_t *map,
                        int64_t src_rows);
void ld_free_weight(drt_host_weight *w);
/* Row index within one head of width d: rotate_half order from interleaved.
 * New row i < d/2 is old row 2i; new row d/2+i is old row 2i+1, so that
 * rotate_half pairs (i, i+d/2) are the interleaved pairs (2i, 2i+1). */
int64_t ld_deinterleave(int64_t i, int64_t d);
/* exp of the dot product rounded to float32, as HF computes it. A sum or an
 * exp beyond the float range becomes what float32 arithmetic gives (0 or
 * infinity) instead of a conversion C leaves undefined; the caller rejects a
 * lambda that is not finite. */
float ld_dot_exp(const drt_st_tensor *a, const drt_st_tensor *b, int64_t n);
/* w times s, as an f32 copy (f32, f16, bf16 or a block format): the
 * (1 - lambda_init) output scale of a model without GROUPNORM, folded into
 * its o_proj. */
drt_status ld_scale_weight(ld_t *L, drt_host_weight *w, float s);
/* Every tensor of the checkpoint is one the layout read (L->used) or a
 * harmless one: any other means config.json describes another model than
 * the weights (a wrong layout guess must not load silently). */
drt_status ld_check_strays(ld_t *L);

/* ---- layouts.c ----------------------------------------------------------- */

/* Layer by layer, so a config claiming more layers than the checkpoint holds
 * stops at the first missing tensor: the checking pass (L->dry, writing into
 * one scratch layer) costs what the checkpoint has, not what the config
 * claims. */
drt_status ld_load_layers(ld_t *L, int n_q_heads, int n_kv_heads);
/* embedding, final norm, LM head */
drt_status ld_load_globals(ld_t *L);
/* The name prefix ("model." or "") and the variant, from the tensors. */
drt_status ld_mlx_variant(ld_t *L);
drt_status ld_load_mlx_globals(ld_t *L);
drt_status ld_load_mlx_layers(ld_t *L);

#endif
