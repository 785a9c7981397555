/* A model placed on a backend: its weights as device tensors, the KV cache,
 * and the graphs built from them. Internal. */
#ifndef DRT_SESSION_H
#define DRT_SESSION_H

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
/* on: every following forward copies what drt_session_last_attention
 * reads (the last token's q and lambda rows, a synchronize per layer), so
 * the probe needs no re-run of the forward (diffrt niah --attention). */
drt_status drt_session_keep_attention(drt_session *s, int on);

#endif
