/* A model directory quantized to q8_0 or q4_0 (include/diffrt/quantize.h):
 * the checkpoint as the loader reads it (drt_checkpoint_open), the tensors
 * it uses, the quantizable ones converted row by row (drt_quantize_row),
 * written by drt_st_write into a directory that takes out_dir's place
 * whole (drt_outdir). */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "drt_error.h"
#include "drt_outfile.h"
#include "drt_quant.h"
#include "drt_util.h"
#include "model.h"
#include "safetensors.h"
#include "diffrt/quantize.h"

/* name ends with suffix */
static int ends_with(const char *name, const char *suffix) {
    size_t n = strlen(name), k = strlen(suffix);
    return n >= k && strcmp(name + n - k, suffix) == 0;
}

/* Is tensor t one that is quantized? */
static int quantizable(const drt_st_tensor *t) {
    /* the embedding stays as it is (the loader needs f32/f16/bf16 there):
     * embed_tokens (Hugging Face), tok_embed (diff-mlx) */
    return t->ndim == 2 && ends_with(t->name, ".weight") && !strstr(t->name, "embed_tokens") &&
           !strstr(t->name, "tok_embed") && (t->dtype == DRT_F32 || t->dtype == DRT_F16 || t->dtype == DRT_BF16) &&
           t->shape[1] > 0 && t->shape[1] % DRT_QK == 0;
}

/* Copies dir/name to out/name (a small text file), created new (never
 * through a symlink); a missing optional file is fine. */
static drt_status copy_file(const char *dir, const char *out, const char *name, int required) {
    char *src = drt_path_join(dir, name), *dst = drt_path_join(out, name), *text = NULL;
    size_t len = 0;
    struct stat sb;
    drt_status st = src && dst ? DRT_OK : drt_set_error(DRT_ERR_OOM, "out of memory");
    if (st == DRT_OK && !required && stat(src, &sb) != 0 && errno == ENOENT) {
        free(src);
        free(dst);
        return DRT_OK;
    }
    if (st == DRT_OK) st = drt_read_text_file(src, &text, &len);
    if (st == DRT_OK) {
        int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
        if (fd >= 0 && !f) close(fd);
        int ok = f && fwrite(text, 1, len, f) == len;
        if (f && fclose(f) != 0) ok = 0;
        if (!ok) st = drt_set_error(DRT_ERR_IO, "cannot write %s: %s", dst, strerror(errno));
    }
    free(text);
    free(src);
    free(dst);
    return st;
}

/* t's rows quantized to qt into *out (malloc'd, *qb bytes); *row is the f32
 * scratch row of *row_cap floats. */
static drt_status quantize_tensor(const drt_st_tensor *t, drt_dtype qt, const char *dir, float **row, size_t *row_cap,
                                  void **out, size_t *qb) {
    int64_t rows = t->shape[0], cols = t->shape[1];
    *qb = drt_row_bytes(qt, cols) * (size_t)rows;
    void *q = malloc(*qb ? *qb : 1);
    if ((size_t)cols > *row_cap) {
        free(*row);
        *row_cap = (size_t)cols;
        *row = malloc(*row_cap * sizeof **row);
    }
    if (!q || !*row) {
        free(q);
        return drt_set_error(DRT_ERR_OOM, "out of memory for %s", t->name);
    }
    *out = q;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            (*row)[c] = drt_st_elem_f32(t, r * cols + c);
            if (!isfinite((*row)[c]))
                return drt_set_error(DRT_ERR_FORMAT, "%s: tensor \"%s\" holds a non-finite value at [%lld, %lld]", dir,
                                     t->name, (long long)r, (long long)c);
        }
        drt_quantize_row(*row, qt, (char *)q + drt_row_bytes(qt, cols) * (size_t)r, cols);
    }
    return DRT_OK;
}

/* The files beside the weights that loading and serving read: copied, the
 * first required, the others when present */
static const char *const side_files[] = {"config.json", "tokenizer.json", "generation_config.json",
                                         "tokenizer_config.json"};
#define N_SIDE (int)(sizeof side_files / sizeof side_files[0])

/* The tensors of c the model reads, the quantizable ones quantized, into
 * tmp/model.safetensors; *r the counts */
static drt_status write_weights(const drt_checkpoint *c, drt_dtype type, const char *dir, const char *tmp,
                                const drt_quantize_opts *o, drt_quantize_result *r) {
    char path[DRT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/model.safetensors", tmp); /* tmp is shorter than DRT_PATH_MAX */
    int n = 0, nq = 0, total = c->st.n_names, n_used = 0;
    for (int i = 0; i < total; i++) n_used += c->used[i] != 0;
    drt_st_write_tensor *w = calloc((size_t)(total > 0 ? total : 1), sizeof *w);
    void **owned = calloc((size_t)(total > 0 ? total : 1), sizeof *owned);
    float *row = NULL;
    size_t row_cap = 0;
    drt_status st = w && owned ? DRT_OK : drt_set_error(DRT_ERR_OOM, "out of memory");
    memset(r, 0, sizeof *r);
    for (int i = 0; st == DRT_OK && i < total; i++) {
        const drt_st_tensor *t = c->st.by_name[i];
        if (!c->used[i]) continue; /* the loader skips it: so does its copy */
        drt_st_write_tensor *wt = &w[n++];
        *wt = (drt_st_write_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        for (int k = 0; k < 4; k++) wt->shape[k] = t->shape[k];
        r->bytes_in += t->nbytes;
        if (!quantizable(t)) {
            r->bytes_out += t->nbytes;
            continue;
        }
        size_t qb = 0;
        st = quantize_tensor(t, type, dir, &row, &row_cap, &owned[i], &qb);
        if (st != DRT_OK) break;
        wt->dtype = type;
        wt->data = owned[i];
        r->bytes_out += qb;
        nq++;
        if (o && o->progress) o->progress(o->ctx, n, n_used, t->name, t->shape[0], t->shape[1]);
    }
    if (st == DRT_OK && o && o->progress) o->progress(o->ctx, n_used, n_used, NULL, 0, 0);
    if (st == DRT_OK) st = drt_st_write(path, w, n);
    r->n_tensors = n, r->n_quantized = nq;
    for (int i = 0; owned && i < total; i++) free(owned[i]);
    free(owned);
    free(w);
    free(row);
    return st;
}

/* The paths of the files of dir the model is read from (c's files, and the
 * side files), malloc'd, into keep[0..*n) */
static drt_status input_files(const drt_checkpoint *c, const char *dir, char ***keep, int *n) {
    *n = 0;
    *keep = calloc((size_t)(c->st.n_files + N_SIDE), sizeof **keep);
    if (!*keep) return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int f = 0; f < c->st.n_files; f++) /* "" + path: a copy of the path */
        if (!((*keep)[(*n)++] = drt_path_join("", c->st.files[f].path)))
            return drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int i = 0; i < N_SIDE; i++)
        if (!((*keep)[(*n)++] = drt_path_join(dir, side_files[i]))) return drt_set_error(DRT_ERR_OOM, "out of memory");
    return DRT_OK;
}

/* d.tmp filled from c and checked: the weights, the side files, a load */
static drt_status write_all(const drt_checkpoint *c, drt_dtype type, const char *dir, const drt_outdir *d,
                            const drt_quantize_opts *o, drt_quantize_result *r) {
    drt_status st = write_weights(c, type, dir, d->tmp, o, r);
    for (int i = 0; st == DRT_OK && i < N_SIDE; i++) st = copy_file(dir, d->tmp, side_files[i], i == 0);
    drt_model *m = NULL;
    if (st == DRT_OK && drt_model_load(d->tmp, &m) != DRT_OK)
        st = drt_set_error(DRT_ERR_FORMAT, "%s: the written model does not load: %s", d->shown, drt_last_error());
    drt_model_free(m);
    return st;
}

drt_status drt_quantize_model(const char *dir, drt_dtype type, const char *out_dir, const drt_quantize_opts *o,
                              drt_quantize_result *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!dir || !out_dir)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_quantize_model: %s is NULL", !dir ? "dir" : "out_dir");
    if (type != DRT_Q8_0 && type != DRT_Q4_0)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_quantize_model: type must be q8_0 or q4_0, got %s",
                             drt_dtype_name(type));
    /* the source as diffrt run loads it, first: nothing is written for a
     * directory that is no model */
    drt_checkpoint c;
    drt_status st = drt_checkpoint_open(dir, &c);
    if (st != DRT_OK) return st;
    char **keep = NULL;
    int n_keep = 0;
    drt_outdir d;
    memset(&d, 0, sizeof d);
    st = input_files(&c, dir, &keep, &n_keep);
    drt_outdir_opts oo = {.force = o && o->force,
                          .protect = dir,
                          .keep = (const char *const *)keep,
                          .n_keep = n_keep,
                          .note = o ? o->note : NULL,
                          .ctx = o ? o->ctx : NULL};
    if (st == DRT_OK) st = drt_outdir_open(&d, out_dir, &oo);
    drt_quantize_result r = {0};
    if (st == DRT_OK) st = write_all(&c, type, dir, &d, o, &r);
    if (st == DRT_OK) st = drt_outdir_commit(&d);
    drt_outdir_discard(&d); /* after a failure; a no-op after the commit */
    if (st == DRT_OK && out) *out = r;
    for (int i = 0; keep && i < n_keep; i++) free(keep[i]);
    free(keep);
    drt_checkpoint_close(&c);
    return st;
}
