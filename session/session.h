/* A model placed on a backend (session/): its weights as device tensors
 * shared by its sessions (device_weights.c), the KV cache, and the graphs
 * built from them (model/builder.h). Internal. */
#ifndef DRT_SESSION_H
#define DRT_SESSION_H

#include <pthread.h>

#include "builder.h"
#include "drt_graph.h"
#include "model.h"

/* A model's weights on a backend instance (device_weights.c). On a backend
 * whose memory the host cannot address, sessions of one model asking for the
 * same backend, device, threads and settings share one: one copy of the
 * weights per device. Its sessions take turns on it: every call that
 * reaches the backend holds `run` (drt_device_weights_lock; a no-op for an
 * entry of one session's own). */
typedef struct drt_device_weights {
    struct drt_device_weights *next; /* the model's list of shared entries */
    drt_model *model;                /* whose list holds it (shared entries) */
    char key[2048];                  /* backend|device|threads|every setting's value */
    int refs;                        /* sessions using it (shared entries; under the list's lock) */
    int shared;                      /* in the model's list; else one session's own */
    drt_backend *be;
    drt_graph *store;    /* owns the weight tensors */
    drt_model_tensors w; /* the weights; no caches */
    pthread_mutex_t run; /* held by the session calling into be */
} drt_device_weights;

/* The entry for (backend, device, threads, settings): a shared one that
 * exists, else a new instance with the weights uploaded (shared when the
 * backend has no buf_wrap). */
drt_status drt_device_weights_get(drt_model *m, const char *backend, const char *device, int threads,
                                  const drt_settings *set, drt_device_weights **out);
/* A session is done with d: the last one frees it. NULL: nothing. */
void drt_device_weights_put(drt_device_weights *d);
void drt_device_weights_lock(drt_device_weights *d);
void drt_device_weights_unlock(drt_device_weights *d);
/* shared entries of m (tests), and in *refs their sessions */
int drt_device_weights_count(drt_model *m, int *refs);

/* Every ATTN / DIFF_ATTN node of the session's graphs, built and to be
 * built, quantizes its attention logits to bits (> 0; 0: off) before the
 * softmax (ref_ops.h; diffrt niah --attn-bits). The ref backend only:
 * DRT_ERR_UNSUPPORTED elsewhere. */
drt_status drt_session_set_attn_bits(drt_session *s, int bits);
/* drt_session_keep_attention is public (include/diffrt/diffrt.h). */

#endif
