/* libFuzzer harness: a sharded checkpoint's model.safetensors.index.json
 * (drt_st_set_open_dir), with real shards.
 *
 * At start-up the tensors of the hf_llama_bf16 fixture are split into three
 * shards written with drt_st_write (tensor i of the name-sorted list goes to
 * model-0000{i%3+1}-of-00003.safetensors), next to the fixture's config.json
 * and a few other files a weight_map may name:
 *   extra.safetensors    model.norm.weight again (also in a shard) + "extra.only"
 *   empty.safetensors    no tensors
 *   garbage.safetensors  16 bytes that are no safetensors file
 *   short.bin            3 bytes
 *   dir.safetensors/     a directory
 *   sub/model-00001-of-00003.safetensors   a copy of shard 1 one level down
 * (no FIFO: opening one blocks in the current reader; that is fixed apart).
 * Input: the index JSON. The set must open or fail with a message; when it
 * opens, every tensor of every file is read and found by drt_st_set_find, and
 * every weight_map entry is found in the file it names. Then drt_model_load
 * runs on the same directory (config.json + the index). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include <cjson/cJSON.h>

#include "drt_error.h"
#include "harness.h"
#include "model.h"

#define N_SHARDS 3
static char g_dir[600], g_index[700];

static void write_set(const char *name, const drt_st_write_tensor *w, int n) {
    char p[700];
    FZ_CHECK(drt_st_write(fz_join(p, sizeof p, g_dir, name), w, n) == DRT_OK, "%s", drt_last_error());
}

static drt_st_write_tensor as_write(const drt_st_tensor *t) {
    drt_st_write_tensor w = {t->name, t->dtype, t->ndim, {0}, t->data};
    memcpy(w.shape, t->shape, sizeof w.shape);
    return w;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    char src[600], p[700], q[700];
    fz_join(g_dir, sizeof g_dir, fz_tmpdir(), "sharded");
    FZ_CHECK(mkdir(g_dir, 0755) == 0, "cannot make %s", g_dir);
    fz_join(g_index, sizeof g_index, g_dir, "model.safetensors.index.json");
    fz_join(src, sizeof src, fz_fixtures_dir(), "hf_llama_bf16");
    fz_copy_file(fz_join(p, sizeof p, src, "config.json"), fz_join(q, sizeof q, g_dir, "config.json"));
    drt_st_file f;
    FZ_CHECK(drt_st_open(fz_join(p, sizeof p, src, "model.safetensors"), &f) == DRT_OK, "%s", drt_last_error());
    drt_st_write_tensor *w = calloc((size_t)f.n_tensors, sizeof *w);
    FZ_CHECK(w, "out of memory");
    for (int s = 0; s < N_SHARDS; s++) {
        int n = 0;
        for (int i = s; i < f.n_tensors; i += N_SHARDS) w[n++] = as_write(&f.tensors[i]);
        char name[64];
        snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, N_SHARDS);
        write_set(name, w, n);
    }
    const drt_st_tensor *norm = drt_st_find(&f, "model.norm.weight");
    FZ_CHECK(norm, "fixture has no model.norm.weight");
    static const float one[3] = {1, 2, 3};
    drt_st_write_tensor extra[2] = {as_write(norm), {"extra.only", DRT_F32, 1, {3}, one}};
    write_set("extra.safetensors", extra, 2);
    write_set("empty.safetensors", NULL, 0);
    fz_write_file(fz_join(p, sizeof p, g_dir, "garbage.safetensors"), "\x08\0\0\0\0\0\0\0{\"a\":1}x", 16);
    fz_write_file(fz_join(p, sizeof p, g_dir, "short.bin"), "abc", 3);
    FZ_CHECK(mkdir(fz_join(p, sizeof p, g_dir, "dir.safetensors"), 0755) == 0, "mkdir %s", p);
    FZ_CHECK(mkdir(fz_join(p, sizeof p, g_dir, "sub"), 0755) == 0, "mkdir %s", p);
    fz_copy_file(fz_join(p, sizeof p, g_dir, "model-00001-of-00003.safetensors"),
                 fz_join(q, sizeof q, g_dir, "sub/model-00001-of-00003.safetensors"));
    free(w);
    drt_st_close(&f);
    return 0;
}

/* Index of the file whose tensor array holds t, or -1. */
static int file_of(const drt_st_set *s, const drt_st_tensor *t) {
    for (int i = 0; i < s->n_files; i++)
        if (t >= s->files[i].tensors && t < s->files[i].tensors + s->files[i].n_tensors) return i;
    return -1;
}

static int ends_with(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

static void check_set(const drt_st_set *s, const uint8_t *data, size_t size) {
    FZ_CHECK(s->n_files >= 0 && (s->n_files == 0 || s->files), "opened set has %d files",
             s->n_files); /* an empty weight_map opens an empty set */
    for (int i = 0; i < s->n_files; i++) {
        const drt_st_file *f = &s->files[i];
        for (int j = 0; j < f->n_tensors; j++) {
            const drt_st_tensor *t = &f->tensors[j];
            const char *p = t->data, *lo = f->map, *hi = lo + f->map_size;
            FZ_CHECK(p >= lo && p <= hi && t->nbytes <= (size_t)(hi - p), "%s: \"%s\" outside its mapping", f->path,
                     t->name);
            fz_touch(p, t->nbytes);
            FZ_CHECK(drt_st_set_find(s, t->name), "drt_st_set_find(\"%s\") fails", t->name);
        }
    }
    /* every weight_map entry is in the file it names */
    cJSON *root = cJSON_ParseWithLength((const char *)data, size);
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(root, "weight_map");
    FZ_CHECK(cJSON_IsObject(wm), "set opened without a weight_map object");
    for (const cJSON *e = wm->child; e; e = e->next) {
        FZ_CHECK(cJSON_IsString(e), "weight_map[\"%s\"] is not a string", e->string);
        const drt_st_tensor *t = drt_st_set_find(s, e->string);
        FZ_CHECK(t, "weight_map names \"%s\", not found in the set", e->string);
        int k = file_of(s, t);
        FZ_CHECK(k >= 0, "\"%s\" found outside every file", e->string);
        char suffix[700];
        snprintf(suffix, sizeof suffix, "/%s", e->valuestring);
        FZ_CHECK(ends_with(s->files[k].path, suffix), "\"%s\" maps to \"%s\" but is found in %s", e->string,
                 e->valuestring, s->files[k].path);
    }
    cJSON_Delete(root);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    fz_write_file(g_index, data, size);
    drt_st_set s;
    drt_set_error(DRT_OK, "%s", ""); /* a failure below must set its own message */
    drt_status st = drt_st_set_open_dir(g_dir, &s);
    if (st != DRT_OK) {
        FZ_CHECK(s.n_files == 0 && !s.files, "failed open (status %d) left files", (int)st);
        FZ_CHECK(drt_last_error()[0], "status %d without a message", (int)st);
        return 0;
    }
    check_set(&s, data, size);
    drt_st_set_close(&s);
    drt_model *m = NULL;
    drt_set_error(DRT_OK, "%s", "");
    st = drt_model_load(g_dir, &m);
    FZ_CHECK(st == DRT_OK || (!m && drt_last_error()[0]), "load: status %d, model %p, no message", (int)st, (void *)m);
    drt_model_free(m);
    return 0;
}
