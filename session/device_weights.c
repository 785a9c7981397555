/* A model's weights placed on a backend (session.h, drt_device_weights).
 *
 * A backend that copies the weights into its own buffers (no buf_wrap: ref,
 * opencl, vulkan, cuda) gets one instance and one copy of the weights per
 * model, device and settings, shared by every session of the model that
 * asks for the same: N sessions cost one upload, not N. Its sessions take
 * turns on it (the entry's lock, held across each call that reaches the
 * backend), since a backend instance is one thread's at a time. The cpu
 * backend reads the weights in place from the checkpoint, so there is
 * nothing to share: each session gets an entry of its own, with an instance
 * (and a thread pool) of its own, and sessions run in parallel as before.
 *
 * The model keeps the shared entries in a list under a spin lock (taken
 * only while sessions are made and freed). */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_util.h"
#include "session.h"

static void list_lock(drt_model *m) {
    while (atomic_flag_test_and_set_explicit(&m->dev_lock, memory_order_acquire)) sched_yield();
}

static void list_unlock(drt_model *m) {
    atomic_flag_clear_explicit(&m->dev_lock, memory_order_release);
}

/* The key of an instance: backend, device, threads and every setting's
 * value in force (two sessions share only what they would have opened
 * alike). Empty when it does not fit: then nothing is shared. */
static void make_key(const char *backend, const char *device, int threads, const drt_settings *set, char *key,
                     size_t n) {
    size_t o = (size_t)snprintf(key, n, "%s|%s|%d", backend && *backend ? backend : "cpu", device ? device : "",
                                threads);
    for (int i = 0; i < drt_setting_count() && o < n; i++) {
        drt_setting_info si;
        char v[256];
        if (drt_setting_describe(i, &si) != DRT_OK || drt_settings_get(set, si.name, v, sizeof v, NULL) != DRT_OK)
            v[0] = 0;
        o += (size_t)snprintf(key + o, n - o, "|%s", v);
    }
    if (o >= n) key[0] = 0;
}

static drt_tensor *upload(drt_device_weights *d, const drt_host_weight *w, drt_status *st) {
    if (*st != DRT_OK || !w->data) return NULL;
    drt_tensor *t = drt_new_tensor(d->store, w->type, w->nd, w->ne, w->name);
    if (!t) {
        *st = d->store->err;
        return NULL;
    }
    t->flags |= DRT_TF_WEIGHT;
    const int mapped = w->mapped && !w->owned; /* the file's bytes, in place */
    if (mapped) t->flags |= DRT_TF_MAPPED;
    drt_backend *be = d->be;
    if (be->ops->buf_wrap) {
        /* a host backend reads the model's memory in place: no copy */
        drt_buffer *b = calloc(1, sizeof *b);
        *st = b ? be->ops->buf_wrap(be, (void *)w->data, drt_nbytes(t), b)
                : drt_set_error(DRT_ERR_OOM, "out of memory");
        if (*st != DRT_OK) {
            free(b);
            return NULL;
        }
        b->be = be;
        t->buf = b;
    } else {
        *st = drt_alloc_tensors(be, &t, 1);
        if (*st == DRT_OK) *st = drt_tensor_set(t, w->data, drt_nbytes(t));
        /* the backend has its own copy: the file's pages need not stay
         * resident beside it (another session that reads them in place
         * brings them back from the file) */
        if (*st == DRT_OK && mapped) drt_release_pages(w->data, drt_nbytes(t));
    }
    if (*st == DRT_OK && be->ops->prepare_weight) *st = be->ops->prepare_weight(be, t);
    return t;
}

/* the model's weights into d->w, on d->be */
static drt_status upload_all(const drt_model *m, drt_device_weights *d) {
    const drt_model_info *I = &m->info;
    drt_status st = DRT_OK;
    d->store = drt_graph_new();
    d->w.layers = calloc((size_t)I->n_layers, sizeof *d->w.layers);
    if (!d->store || !d->w.layers) return drt_set_error(DRT_ERR_OOM, "out of memory");
    d->w.n_layers = I->n_layers;
    d->w.embed = upload(d, &m->embed, &st);
    d->w.final_norm = upload(d, &m->final_norm, &st);
    d->w.lm_head = I->tied_embeddings ? d->w.embed : upload(d, &m->lm_head, &st);
    drt_host_weight fw = {.name = "inv_freq", .type = DRT_F32, .nd = 1, .ne = {I->dk / 2}, .data = m->inv_freq};
    d->w.inv_freq = upload(d, &fw, &st);
    for (int l = 0; st == DRT_OK && l < I->n_layers; l++) {
        const drt_layer_weights *lw = &m->layers[l];
        drt_layer_tensors *L = &d->w.layers[l];
        L->attn_norm = upload(d, &lw->attn_norm, &st);
        L->ffn_norm = upload(d, &lw->ffn_norm, &st);
        L->wq = upload(d, &lw->wq, &st);
        L->wk = upload(d, &lw->wk, &st);
        L->wv = upload(d, &lw->wv, &st);
        L->wo = upload(d, &lw->wo, &st);
        L->w_lambda = upload(d, &lw->w_lambda, &st);
        L->subln = upload(d, &lw->subln, &st);
        L->wg = upload(d, &lw->wg, &st);
        L->wu = upload(d, &lw->wu, &st);
        L->wd = upload(d, &lw->wd, &st);
    }
    return st;
}

static void entry_free(drt_device_weights *d) {
    if (!d) return;
    drt_graph_free(d->store);
    free(d->w.layers);
    drt_backend_close(d->be);
    pthread_mutex_destroy(&d->run);
    free(d);
}

drt_status drt_device_weights_get(drt_model *m, const char *backend, const char *device, int threads,
                                  const drt_settings *set, drt_device_weights **out) {
    *out = NULL;
    char key[sizeof((drt_device_weights *)0)->key];
    make_key(backend, device, threads, set, key, sizeof key);
    list_lock(m);
    for (drt_device_weights *d = m->devs; key[0] && d; d = d->next)
        if (!strcmp(d->key, key)) {
            d->refs++;
            *out = d;
            list_unlock(m);
            return DRT_OK;
        }
    list_unlock(m);
    /* a new instance, made outside the list's lock (an upload takes time) */
    drt_device_weights *d = calloc(1, sizeof *d);
    if (!d) return drt_set_error(DRT_ERR_OOM, "out of memory");
    if (pthread_mutex_init(&d->run, NULL) != 0) {
        free(d);
        return drt_set_error(DRT_ERR_OOM, "cannot initialise a backend's lock");
    }
    d->refs = 1;
    memcpy(d->key, key, sizeof key);
    drt_status st = drt_backend_open_settings(backend, device, threads, set, &d->be);
    if (st == DRT_OK) st = upload_all(m, d);
    if (st != DRT_OK) {
        entry_free(d);
        return st;
    }
    d->shared = key[0] && !d->be->ops->buf_wrap;
    if (!d->shared) {
        *out = d;
        return DRT_OK;
    }
    list_lock(m);
    /* another session may have made the same meanwhile: use the first */
    for (drt_device_weights *e = m->devs; e; e = e->next)
        if (!strcmp(e->key, key)) {
            e->refs++;
            list_unlock(m);
            entry_free(d);
            *out = e;
            return DRT_OK;
        }
    d->model = m;
    d->next = m->devs;
    m->devs = d;
    list_unlock(m);
    *out = d;
    return DRT_OK;
}

void drt_device_weights_put(drt_device_weights *d) {
    if (!d) return;
    if (!d->shared) {
        entry_free(d);
        return;
    }
    drt_model *m = d->model;
    list_lock(m);
    int last = --d->refs == 0;
    if (last)
        for (drt_device_weights **p = &m->devs; *p; p = &(*p)->next)
            if (*p == d) {
                *p = d->next;
                break;
            }
    list_unlock(m);
    if (last) entry_free(d);
}

int drt_device_weights_count(drt_model *m, int *refs) {
    int n = 0;
    if (refs) *refs = 0;
    list_lock(m);
    for (drt_device_weights *d = m->devs; d; d = d->next) {
        n++;
        if (refs) *refs += d->refs;
    }
    list_unlock(m);
    return n;
}

void drt_device_weights_lock(drt_device_weights *d) {
    if (d && d->shared) pthread_mutex_lock(&d->run);
}

void drt_device_weights_unlock(drt_device_weights *d) {
    if (d && d->shared) pthread_mutex_unlock(&d->run);
}
