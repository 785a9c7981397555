/* config.json + safetensors -> drt_model, for the layouts of docs/design.md
 * section 4: the order of the load (config.c reads the config, weights.c
 * the tensors, layouts.c maps them; model_ref.c holds the model's
 * lifetime).
 *
 * A model directory is untrusted input. Every number read from config.json is
 * range-checked against CFG_INT_RANGES / CFG_NUM_RANGES before it is converted
 * from JSON's double; every size derived from one goes through drt_checked.h;
 * and every tensor the config implies is looked up (name and shape) before
 * anything sized from the config is allocated, so the work done before an
 * error is proportional to the checkpoint, not to a number in a file. */
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

/* ---- the model ----------------------------------------------------------- */

/* an entry named NAME in DIR (lstat: any kind, even a dangling link) */
static int dir_has(const char *dir, const char *name) {
    char *p = drt_path_join(dir, name);
    if (!p) return 1; /* the open that follows reports it */
    struct stat sb;
    int has = lstat(p, &sb) == 0 || errno != ENOENT;
    free(p);
    return has;
}

/* The weights: DIR/model.safetensors or its sharded index; a diff-mlx model
 * may instead have the name its trainer writes, DIR/latest.safetensors, when
 * neither of those exists. st_name (room for either name) gets the file's
 * path for messages. */
static drt_status open_weights(const char *dir, int mlx, char *st_name, drt_st_set *out) {
    if (mlx && !dir_has(dir, "model.safetensors") && !dir_has(dir, "model.safetensors.index.json")) {
        memcpy(st_name + strlen(dir), "/latest.safetensors", sizeof "/latest.safetensors");
        if (dir_has(dir, "latest.safetensors")) return drt_st_set_open_file(st_name, out);
        return drt_set_error(DRT_ERR_IO, "%s: no model.safetensors, model.safetensors.index.json or latest.safetensors",
                             dir);
    }
    return drt_st_set_open_dir(dir, out);
}

/* drt_model_load; with keep, the checkpoint's pages are left as they are
 * (L.keep), and *used_out (when not NULL) gets L.used */
static drt_status load_model(const char *dir, int keep, drt_model **out, unsigned char **used_out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_model_load: out is NULL");
    *out = NULL;
    if (used_out) *used_out = NULL;
    if (!dir || !*dir) return drt_set_error(DRT_ERR_INVALID_ARG, "no model directory given");
    drt_model *m = calloc(1, sizeof *m);
    size_t dl = strlen(dir);
    char *st_name = malloc(dl + sizeof "/latest.safetensors"); /* room for either name */
    if (!m || !st_name) {
        free(m);
        free(st_name);
        return drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    snprintf(m->dir, sizeof m->dir, "%s", dir);
    memcpy(st_name, dir, dl);
    memcpy(st_name + dl, "/model.safetensors", sizeof "/model.safetensors");
    int nq = 0, nkv = 0, mlx = 0;
    drt_status s = ld_read_config(dir, m, &nq, &nkv, &mlx);
    if (s == DRT_OK) s = open_weights(dir, mlx, st_name, &m->st);
    drt_model_info *I = &m->info;
    ld_t L = {m, st_name, 1, NULL, NULL, keep};
    if (s == DRT_OK && mlx) s = ld_mlx_variant(&L);
    if (s == DRT_OK) {
        L.used = calloc((size_t)(m->st.n_names > 0 ? m->st.n_names : 1), 1);
        if (!L.used) s = drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    /* checking pass: every tensor the config implies, with its shape, before
     * anything sized from the config is allocated; then nothing else */
    if (s == DRT_OK) s = mlx ? ld_load_mlx_globals(&L) : ld_load_globals(&L);
    if (s == DRT_OK) s = mlx ? ld_load_mlx_layers(&L) : ld_load_layers(&L, nq, nkv);
    if (s == DRT_OK) s = ld_check_strays(&L);
    if (s == DRT_OK) {
        L.dry = 0;
        m->layers = calloc((size_t)I->n_layers, sizeof *m->layers); /* calloc checks n * size */
        m->lambda_v = calloc((size_t)I->n_layers, sizeof(float));
        m->lambda_init_v = calloc((size_t)I->n_layers, sizeof(float));
        if (!m->layers || !m->lambda_v || !m->lambda_init_v) s = drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    if (s == DRT_OK) s = mlx ? ld_load_mlx_globals(&L) : ld_load_globals(&L);
    if (s == DRT_OK) s = mlx ? ld_load_mlx_layers(&L) : ld_load_layers(&L, nq, nkv);
    /* the element count of each tensor the model uses is its checked byte
     * count over its dtype size; the sum is checked too (an optimizer's
     * state is not the model's) */
    I->n_params = 0;
    for (int i = 0; s == DRT_OK && i < m->st.n_names; i++) {
        const drt_st_tensor *t = m->st.by_name[i];
        int64_t n = (int64_t)(t->nbytes / drt_dtype_size(t->dtype)) * drt_dtype_block(t->dtype);
        if (L.used[i] && !drt_add_ok(I->n_params, n, &I->n_params))
            s = drt_set_error(DRT_ERR_FORMAT, "%s: parameter count overflows int64", dir);
    }
    free(st_name);
    if (s != DRT_OK) {
        free(L.used);
        drt_model_free(m);
        return s;
    }
    if (used_out)
        *used_out = L.used;
    else
        free(L.used);
    /* the matmul weights' dtype (a quantized model keeps its embedding f16) */
    I->weight_dtype = I->n_layers > 0 && m->layers[0].wq.data ? m->layers[0].wq.type : m->embed.type;
    I->embed_dtype = m->embed.type;
    I->lambda = I->arch == DRT_ARCH_DIFF_V1 ? m->lambda_v : NULL;
    I->lambda_init = I->arch == DRT_ARCH_DIFF_V1 ? m->lambda_init_v : NULL;
    *out = m;
    return DRT_OK;
}

drt_status drt_model_load(const char *dir, drt_model **out) {
    return load_model(dir, 0, out, NULL);
}

drt_status drt_checkpoint_open(const char *dir, drt_checkpoint *out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_checkpoint_open: out is NULL");
    memset(out, 0, sizeof *out);
    drt_model *m = NULL;
    drt_status s = load_model(dir, 1, &m, &out->used);
    if (s != DRT_OK) return s;
    out->st = m->st; /* the model's weights point into it or into their own copies: */
    memset(&m->st, 0, sizeof m->st);
    drt_model_free(m); /* ... which go with the model */
    return DRT_OK;
}

void drt_checkpoint_close(drt_checkpoint *c) {
    if (!c) return;
    drt_st_set_close(&c->st);
    free(c->used);
    memset(c, 0, sizeof *c);
}

drt_status drt_model_get_info(const drt_model *m, drt_model_info *out) {
    if (!m || !out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_model_get_info: %s is NULL", m ? "out" : "m");
    *out = m->info;
    return DRT_OK;
}
