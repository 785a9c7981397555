/* A model placed on a backend: its weights as device tensors, the KV cache,
 * and the graphs built from them. Internal. */
#ifndef DRT_SESSION_H
#define DRT_SESSION_H

#include <pthread.h>

#include "drt_graph.h"
#include "model.h"

typedef struct {
    drt_tensor *attn_norm, *ffn_norm, *wq, *wk, *wv, *wo, *w_lambda, *subln, *wg, *wu, *wd;
    drt_tensor *k_cache; /* (S_cap, G, m, dk) */
    drt_tensor *v_cache; /* (S_cap, G, dv) */
} drt_layer_tensors;

typedef struct {
    drt_tensor *embed, *final_norm, *lm_head, *inv_freq;
    drt_layer_tensors *layers;
    int n_layers;
} drt_model_tensors;

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

/* One built graph for a shape class: T rows, L of them with logits. */
typedef struct {
    int T, L;
    drt_graph *g;
    drt_plan *plan;
    drt_tensor *ids;    /* (T) i32 */
    drt_tensor *sel;    /* (L) i32: the rows whose logits are computed */
    drt_tensor *logits; /* (L, V) */
    /* per layer, the nodes the attention probe observes (in the arena like
     * every intermediate): q after RoPE, (T, H*maps, dk); lambda (T, H) for
     * diff-v2, else NULL */
    drt_tensor **q_rope, **lambda;
} drt_forward_graph;

/* Builds the forward graph for T rows, L of them with logits, into out
 * (weights and cache from mt). Every model graph uses the fused attention
 * ops. */
drt_status drt_build_forward(const drt_model *m, const drt_model_tensors *mt, int T, int L, drt_forward_graph *out);

/* Every ATTN / DIFF_ATTN node of the session's graphs, built and to be
 * built, quantizes its attention logits to bits (> 0; 0: off) before the
 * softmax (ref_ops.h; diffrt niah --attn-bits). The ref backend only:
 * DRT_ERR_UNSUPPORTED elsewhere. */
drt_status drt_session_set_attn_bits(drt_session *s, int bits);
/* drt_session_keep_attention is public (include/diffrt/diffrt.h). */

#endif
