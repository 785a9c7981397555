/* Tensors read from the checkpoint into a model's weights (ld_t, the load
 * in progress): each looked up by name and shape, then used in place or
 * converted (f32 vectors, row maps, deinterleaved maps, scaled copies), and
 * what no layout uses checked to be harmless (ld_check_strays). Nothing
 * sized from config.json is allocated before its tensor was found. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "drt_checked.h"
#include "drt_error.h"
#include "drt_half.h"
#include "drt_quant.h"
#include "drt_util.h"
#include "loader_internal.h"
#include "model.h"

/* ---- tensors ----------------------------------------------------------- */

/* t's pages will not be read again by this load (its data was copied) */
static void release(const ld_t *L, const drt_st_tensor *t) {
    if (!L->keep) drt_st_release(t);
}

static void shape_txt(int nd, const int64_t *ne, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, i ? ", %lld" : "%lld", (long long)ne[i]);
    if (o < n) snprintf(buf + o, n - o, ")");
}

/* Finds `name` with exactly the given shape (nd 0, 1 or 2). */
drt_status ld_get_tensor(ld_t *L, const char *name, int nd, int64_t n0, int64_t n1, const drt_st_tensor **out) {
    int idx = drt_st_set_index(&L->m->st, name);
    const drt_st_tensor *t = idx >= 0 ? L->m->st.by_name[idx] : NULL;
    if (!t) {
        const drt_st_tensor *f = drt_st_set_find_foreign(&L->m->st, name);
        if (f)
            return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: tensor \"%s\" is %s; expected F32, F16 or BF16", L->st_name,
                                 name, f->foreign_dtype);
        return drt_set_error(DRT_ERR_FORMAT, "%s: missing tensor \"%s\"", L->st_name, name);
    }
    if (L->used) L->used[idx] = 1;
    int64_t want[2] = {n0, n1};
    int ok = t->ndim == nd && (nd < 1 || t->shape[0] == n0) && (nd < 2 || t->shape[1] == n1);
    if (!ok) {
        char a[96], b[96];
        shape_txt(t->ndim, t->shape, a, sizeof a);
        shape_txt(nd, want, b, sizeof b);
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" has shape %s but config.json implies %s", L->st_name,
                             name, a, b);
    }
    if (t->dtype == DRT_I32)
        return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" is i32; expected F32, F16 or BF16", L->st_name, name);
    *out = t;
    return DRT_OK;
}

/* As stored. Aligned data (every checkpoint a normal writer makes) is used in
 * place: the weight points into the mapping and the CPU backend reads it
 * there. Data not aligned for its dtype (a header length that puts the data
 * at an odd offset) is copied once into aligned memory and its mapped pages
 * released, so no kernel ever makes a misaligned load and there is still one
 * resident copy. */
drt_status ld_load_as_is(ld_t *L, drt_host_weight *w, const char *name, int64_t n0, int64_t n1) {
    const drt_st_tensor *t;
    drt_status s = ld_get_tensor(L, name, n1 ? 2 : 1, n0, n1, &t);
    if (s != DRT_OK || L->dry) return s;
    snprintf(w->name, sizeof w->name, "%s", name);
    w->type = t->dtype;
    w->nd = n1 ? 2 : 1;
    w->ne[0] = n0;
    w->ne[1] = n1;
    /* block formats are read a byte at a time: any address will do */
    if ((uintptr_t)t->data % drt_dtype_align(t->dtype) == 0) {
        w->data = t->data;
        w->mapped = t->mapped;
        return DRT_OK;
    }
    void *d = malloc(t->nbytes); /* nbytes == the bytes of n0 x n1 of dtype: the header was checked */
    if (!d) return drt_set_error(DRT_ERR_OOM, "%s: out of memory copying misaligned tensor \"%s\"", L->st_name, name);
    memcpy(d, t->data, t->nbytes);
    release(L, t);
    w->data = w->owned = d;
    return DRT_OK;
}

/* Vectors (norm weights) are converted to f32. */
drt_status ld_load_f32_vec(ld_t *L, drt_host_weight *w, const char *name, int64_t n0) {
    const drt_st_tensor *t;
    drt_status s = ld_get_tensor(L, name, 1, n0, 0, &t);
    if (s != DRT_OK || L->dry) return s;
    size_t bytes;
    float *d = drt_bytes_ok(n0, sizeof(float), &bytes) ? malloc(bytes) : NULL;
    if (!d) return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int64_t i = 0; i < n0; i++) d[i] = drt_st_elem_f32(t, i);
    snprintf(w->name, sizeof w->name, "%s", name);
    w->type = DRT_F32;
    w->nd = 1;
    w->ne[0] = n0;
    w->data = w->owned = d;
    return DRT_OK;
}

/* A matrix of `rows` rows of `cols` whose internal row r is source row map[r]. */
drt_status ld_load_rows(ld_t *L, drt_host_weight *w, const char *name, int64_t rows, int64_t cols, const int64_t *map,
                        int64_t src_rows) {
    const drt_st_tensor *t;
    drt_status s = ld_get_tensor(L, name, 2, src_rows, cols, &t);
    if (s != DRT_OK || L->dry) return s;
    size_t rb, bytes;
    char *d = NULL;
    /* a row of a block format is cols / 32 blocks (the reader made cols a
     * multiple of 32) */
    if (drt_bytes_ok(cols / drt_dtype_block(t->dtype), drt_dtype_size(t->dtype), &rb) && drt_bytes_ok(rows, rb, &bytes))
        d = malloc(bytes);
    if (!d) return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int64_t r = 0; r < rows; r++) memcpy(d + rb * (size_t)r, (const char *)t->data + rb * (size_t)map[r], rb);
    release(L, t); /* the copy replaces the mapped original: no second resident copy */
    snprintf(w->name, sizeof w->name, "%s", name);
    w->type = t->dtype;
    w->nd = 2;
    w->ne[0] = rows;
    w->ne[1] = cols;
    w->data = w->owned = d;
    return DRT_OK;
}

void ld_free_weight(drt_host_weight *w) {
    free(w->owned);
    memset(w, 0, sizeof *w);
}

/* Row index within one head of width d: rotate_half order from interleaved.
 * New row i < d/2 is old row 2i; new row d/2+i is old row 2i+1, so that
 * rotate_half pairs (i, i+d/2) are the interleaved pairs (2i, 2i+1). */
int64_t ld_deinterleave(int64_t i, int64_t d) {
    return i < d / 2 ? 2 * i : 2 * (i - d / 2) + 1;
}

/* exp of the dot product rounded to float32, as HF computes it. A sum or an
 * exp beyond the float range becomes what float32 arithmetic gives (0 or
 * infinity) instead of a conversion C leaves undefined; the caller rejects a
 * lambda that is not finite. */
float ld_dot_exp(const drt_st_tensor *a, const drt_st_tensor *b, int64_t n) {
    double acc = 0;
    for (int64_t i = 0; i < n; i++) acc += (double)drt_st_elem_f32(a, i) * (double)drt_st_elem_f32(b, i);
    if (isnan(acc)) return NAN;
    if (acc > FLT_MAX) return INFINITY;
    if (acc < -FLT_MAX) return 0.0f;
    double e = exp((double)(float)acc);
    return e > FLT_MAX ? INFINITY : (float)e;
}

/* w times s, as an f32 copy (f32, f16, bf16 or a block format): the
 * (1 - lambda_init) output scale of a model without GROUPNORM, folded into
 * its o_proj. */
drt_status ld_scale_weight(ld_t *L, drt_host_weight *w, float s) {
    int64_t rows = w->ne[0], cols = w->ne[1], n;
    size_t rb = (size_t)(cols / drt_dtype_block(w->type)) * drt_dtype_size(w->type), bytes;
    float *d = drt_mul_ok(rows, cols, &n) && drt_bytes_ok(n, sizeof(float), &bytes) ? malloc(bytes) : NULL;
    if (!d) return drt_set_error(DRT_ERR_OOM, "%s: out of memory scaling \"%s\"", L->st_name, w->name);
    for (int64_t r = 0; r < rows; r++) {
        const char *src = (const char *)w->data + rb * (size_t)r;
        float *y = d + (size_t)(r * cols);
        if (drt_dtype_block(w->type) > 1)
            drt_dequantize_row(src, w->type, y, cols);
        else
            for (int64_t c = 0; c < cols; c++)
                y[c] = w->type == DRT_F32   ? ((const float *)(const void *)src)[c]
                       : w->type == DRT_F16 ? drt_f16_to_f32(((const uint16_t *)(const void *)src)[c])
                                            : drt_bf16_to_f32(((const uint16_t *)(const void *)src)[c]);
        for (int64_t c = 0; c < cols; c++) y[c] *= s;
    }
    /* the copy replaces the original: a mapped one's pages go (as ld_load_rows') */
    if (w->mapped && !w->owned && !L->keep) drt_release_pages(w->data, rb * (size_t)rows);
    free(w->owned);
    w->type = DRT_F32;
    w->data = w->owned = d;
    w->mapped = 0; /* no longer the file's bytes: never to be dropped (DRT_TF_MAPPED) */
    return DRT_OK;
}

/* ---- tensors no layout uses ------------------------------------------- */

/* Tensors a checkpoint may carry beside the model, known to change nothing:
 * the RoPE table older Hugging Face checkpoints stored (diffrt computes it
 * from config.json) and diff-mlx's optimizer state. */
static int harmless_tensor(const drt_model *m, const char *name) {
    static const char inv[] = ".rotary_emb.inv_freq";
    size_t n = strlen(name), k = sizeof inv - 1;
    if (n >= k && strcmp(name + n - k, inv) == 0) return 1;
    int mlx = m->info.layout == DRT_LAYOUT_MLX_DIFF || m->info.layout == DRT_LAYOUT_MLX_VANILLA;
    return mlx && strncmp(name, "opt.", 4) == 0;
}

/* A tied Hugging Face checkpoint that stores lm_head.weight anyway (some
 * converters write both): harmless when it is the embedding, byte for
 * byte; 1 then, 0 when it is no such copy. */
static int hf_tied_head(const drt_model *m, const char *name) {
    drt_layout l = m->info.layout;
    return m->info.tied_embeddings && l != DRT_LAYOUT_MLX_DIFF && l != DRT_LAYOUT_MLX_VANILLA &&
           strcmp(name, "lm_head.weight") == 0;
}
static int tied_copy(const drt_model *m, const drt_st_tensor *t) {
    if (!hf_tied_head(m, t->name)) return 0;
    const drt_st_tensor *e = drt_st_set_find(&m->st, "model.embed_tokens.weight");
    return e && e->dtype == t->dtype && e->ndim == t->ndim && e->shape[0] == t->shape[0] &&
           (t->ndim < 2 || e->shape[1] == t->shape[1]) && e->nbytes == t->nbytes &&
           memcmp(e->data, t->data, t->nbytes) == 0;
}

/* Every tensor of the checkpoint is one the layout read (L->used) or a
 * harmless one: any other means config.json describes another model than
 * the weights (a wrong layout guess must not load silently). */
drt_status ld_check_strays(ld_t *L) {
    const drt_st_set *st = &L->m->st;
    const char *lname = L->m->info.layout_name;
    char nb[160];
    for (int i = 0; i < st->n_names; i++) {
        const drt_st_tensor *t = st->by_name[i];
        if (L->used[i] || harmless_tensor(L->m, t->name) || tied_copy(L->m, t)) continue;
        if (hf_tied_head(L->m, t->name))
            return drt_set_error(DRT_ERR_FORMAT,
                                 "%s: tensor \"lm_head.weight\" is not a copy of \"model.embed_tokens.weight\", "
                                 "but config.json says tie_word_embeddings: which LM head is meant is ambiguous",
                                 L->st_name);
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: tensor \"%s\" is not part of the %s layout (config.json describes another "
                             "model than the weights?)",
                             L->st_name, drt_printable(t->name, nb, sizeof nb), lname);
    }
    for (int f = 0; f < st->n_files; f++)
        for (int i = 0; i < st->files[f].n_foreign; i++) {
            const drt_st_tensor *t = &st->files[f].foreign[i];
            if (!harmless_tensor(L->m, t->name))
                return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" (%s) is not part of the %s layout",
                                     st->files[f].path, drt_printable(t->name, nb, sizeof nb), t->foreign_dtype, lname);
        }
    return DRT_OK;
}
