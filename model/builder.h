/* The forward graph of a model (builder.c): the weights as tensors of a
 * backend, and the graph of one forward pass built over them. The
 * sessions (session/) place the weights and run the graphs. Internal. */
#ifndef DRT_BUILDER_H
#define DRT_BUILDER_H

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

#endif
