/* A model directory quantized to q8_0 or q4_0 (include/diffrt/quantize.h):
 * the checkpoint's tensors read through drt_st_set, the quantizable ones
 * converted row by row (drt_quantize_row), all written by drt_st_write. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "drt_error.h"
#include "drt_quant.h"
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
    char src[DRT_PATH_MAX], dst[DRT_PATH_MAX];
    snprintf(src, sizeof src, "%s/%s", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", out, name);
    struct stat sb;
    if (!required && stat(src, &sb) != 0 && errno == ENOENT) return DRT_OK;
    char *text = NULL;
    size_t len = 0;
    drt_status st = drt_read_text_file(src, &text, &len);
    if (st != DRT_OK) return st;
    int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f) close(fd);
    int ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    int err = errno;
    free(text);
    return ok ? DRT_OK : drt_set_error(DRT_ERR_IO, "cannot write %s: %s", dst, strerror(err));
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

drt_status drt_quantize_model(const char *dir, drt_dtype type, const char *out_dir, const drt_quantize_opts *o,
                              drt_quantize_result *out) {
    if (out) memset(out, 0, sizeof *out);
    if (!dir || !out_dir)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_quantize_model: %s is NULL", !dir ? "dir" : "out_dir");
    if (type != DRT_Q8_0 && type != DRT_Q4_0)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_quantize_model: type must be q8_0 or q4_0, got %s",
                             drt_dtype_name(type));
    char path[DRT_PATH_MAX + 32];
    if (snprintf(path, sizeof path, "%s/model.safetensors", out_dir) >= (int)sizeof path)
        return drt_set_error(DRT_ERR_INVALID_ARG, "%s: path too long", out_dir);
    drt_st_set set;
    drt_status st = drt_st_set_open_dir(dir, &set);
    if (st != DRT_OK) return st;
    /* a tensor of a dtype diffrt cannot write would be dropped: refuse */
    for (int f = 0; f < set.n_files; f++)
        if (set.files[f].n_foreign > 0) {
            char nb[160]; /* file text: one line, bounded */
            st = drt_set_error(DRT_ERR_UNSUPPORTED,
                               "%s: tensor \"%s\" is %s: diffrt quantize copies only F32, "
                               "F16, BF16 and I32 tensors",
                               set.files[f].path, drt_printable(set.files[f].foreign[0].name, nb, sizeof nb),
                               set.files[f].foreign[0].foreign_dtype);
            drt_st_set_close(&set);
            return st;
        }
    int n = set.n_names, nq = 0;
    drt_st_write_tensor *w = calloc((size_t)(n > 0 ? n : 1), sizeof *w);
    void **owned = calloc((size_t)(n > 0 ? n : 1), sizeof *owned);
    float *row = NULL;
    size_t row_cap = 0;
    uint64_t bytes_in = 0, bytes_out = 0;
    if (!w || !owned) st = drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int i = 0; st == DRT_OK && i < n; i++) {
        const drt_st_tensor *t = set.by_name[i];
        w[i] = (drt_st_write_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        for (int k = 0; k < 4; k++) w[i].shape[k] = t->shape[k];
        bytes_in += t->nbytes;
        if (!quantizable(t)) {
            bytes_out += t->nbytes;
            continue;
        }
        size_t qb = 0;
        st = quantize_tensor(t, type, dir, &row, &row_cap, &owned[i], &qb);
        if (st != DRT_OK) break;
        w[i].dtype = type;
        w[i].data = owned[i];
        bytes_out += qb;
        nq++;
        if (o && o->progress) o->progress(o->ctx, i + 1, n, t->name, t->shape[0], t->shape[1]);
    }
    if (st == DRT_OK && o && o->progress) o->progress(o->ctx, n, n, NULL, 0, 0);
    if (st == DRT_OK) st = drt_st_write(path, w, n);
    if (st == DRT_OK) st = copy_file(dir, out_dir, "config.json", 1);
    /* the files beside the weights that loading and serving read, when present */
    static const char *const optional[] = {"tokenizer.json", "generation_config.json", "tokenizer_config.json"};
    for (size_t i = 0; st == DRT_OK && i < sizeof optional / sizeof optional[0]; i++)
        st = copy_file(dir, out_dir, optional[i], 0);
    if (st == DRT_OK && out)
        *out = (drt_quantize_result){.n_tensors = n, .n_quantized = nq, .bytes_in = bytes_in, .bytes_out = bytes_out};
    for (int i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(w);
    free(row);
    drt_st_set_close(&set);
    return st;
}
