/* Graph builders for the three architectures (DESIGN.md section 4):
 *   X = EMBED(ids)
 *   per layer:  Y = X + Attn(RMSNORM(X));  X = Y + W2(SWIGLU(Wg Y', Wu Y')), Y' = RMSNORM(Y)
 *   logits = LM_HEAD(RMSNORM(X))
 * Attn: transformer ATTN; diff-v1 DIFF_ATTN with scalar lambda then GROUPNORM;
 * diff-v2 DIFF_ATTN with lambda = SIGMOID(Y' W_lambda^T) per token and head. */
#include <stdio.h>
#include <stdlib.h>

#include "drt_error.h"
#include "session.h"

static drt_tensor *reshape(drt_graph *g, drt_tensor *x, int nd, int64_t n0, int64_t n1, int64_t n2,
                           int64_t n3) {
    int64_t ne[4] = {n0, n1, n2, n3};
    return drt_view(g, x, nd, ne, 0);
}

static drt_tensor *attention(drt_graph *g, const drt_model *m, const drt_layer_tensors *L,
                             const drt_layer_weights *lw, drt_tensor *h, drt_tensor *inv_freq, int T,
                             drt_tensor **q_out, drt_tensor **lam_out) {
    const drt_model_info *I = &m->info;
    int64_t H = I->n_heads, G = I->n_kv_groups, km = I->kv_m, dk = I->dk, dv = I->dv;
    int diff = I->arch != DRT_ARCH_TRANSFORMER;
    int64_t qmaps = diff ? 2 : 1;

    /* q: (T, H*qmaps*dk) -> RoPE over (T, H*qmaps, dk) */
    drt_tensor *q = drt_matmul(g, h, L->wq);
    q = *q_out = drt_rope(g, reshape(g, q, 3, T, H * qmaps, dk, 0), inv_freq);
    drt_tensor *k = drt_matmul(g, h, L->wk);
    k = drt_rope(g, reshape(g, k, 3, T, G * km, dk, 0), inv_freq);
    drt_tensor *v = drt_matmul(g, h, L->wv);

    drt_tensor *o;
    if (!diff) {
        drt_tensor *kc = drt_kv_write(g, reshape(g, k, 3, T, G, dk, 0), L->k_cache);
        drt_tensor *vc = drt_kv_write(g, reshape(g, v, 3, T, G, dv, 0), L->v_cache);
        o = drt_attn(g, q, kc, vc);
    } else {
        drt_tensor *kc = drt_kv_write(g, reshape(g, k, 4, T, G, km, dk), L->k_cache);
        drt_tensor *vc = drt_kv_write(g, reshape(g, v, 3, T, G, dv, 0), L->v_cache);
        drt_tensor *q4 = reshape(g, q, 4, T, H, 2, dk);
        if (I->arch == DRT_ARCH_DIFF_V1) {
            o = drt_diff_attn(g, q4, kc, vc, lw->lambda, NULL);
            o = drt_groupnorm(g, o, L->subln, m->gn_eps, 1.0f - lw->lambda_init);
        } else {
            drt_tensor *lam = *lam_out = drt_sigmoid(g, drt_matmul(g, h, L->w_lambda)); /* (T, H) */
            o = drt_diff_attn(g, q4, kc, vc, 0.0f, lam);
        }
    }
    return drt_matmul(g, reshape(g, o, 2, T, H * dv, 0, 0), L->wo);
}

drt_status drt_build_forward(const drt_model *m, const drt_model_tensors *mt, int T, int all_logits,
                             drt_forward_graph *out) {
    const drt_model_info *I = &m->info;
    drt_graph *g = drt_graph_new();
    out->q_rope = calloc((size_t)I->n_layers, sizeof(drt_tensor *));
    out->lambda = calloc((size_t)I->n_layers, sizeof(drt_tensor *));
    if (!g || !out->q_rope || !out->lambda) {
        drt_graph_free(g);
        return drt_set_error(DRT_ERR_OOM, "out of memory");
    }
    out->g = g;
    out->T = T;
    out->all_logits = all_logits;
    out->ids = drt_new_tensor_1d(g, DRT_I32, T, "ids");
    if (out->ids) out->ids->flags |= DRT_TF_INPUT;

    drt_tensor *x = drt_embed(g, out->ids, mt->embed);
    for (int l = 0; l < I->n_layers; l++) {
        const drt_layer_tensors *L = &mt->layers[l];
        drt_tensor *h = drt_rmsnorm(g, x, L->attn_norm, m->rms_eps);
        x = drt_add(g, x, attention(g, m, L, &m->layers[l], h, mt->inv_freq, T, &out->q_rope[l], &out->lambda[l]));
        drt_tensor *h2 = drt_rmsnorm(g, x, L->ffn_norm, m->rms_eps);
        drt_tensor *f = drt_swiglu(g, drt_matmul(g, h2, L->wg), drt_matmul(g, h2, L->wu));
        x = drt_add(g, x, drt_matmul(g, f, L->wd));
    }
    if (!all_logits && T > 1) {
        int64_t ne[2] = {1, I->dim};
        x = drt_view(g, x, 2, ne, (size_t)(T - 1) * (size_t)I->dim * sizeof(float));
    }
    x = drt_rmsnorm(g, x, mt->final_norm, m->rms_eps);
    out->logits = drt_matmul(g, x, mt->lm_head);
    /* what the host reads after a run keeps its own storage: the logits,
     * and q and lambda for the attention probes (drt_session_last_attention) */
    if (out->logits) out->logits->flags |= DRT_TF_OUTPUT;
    for (int l = 0; l < I->n_layers; l++) {
        if (out->q_rope[l]) out->q_rope[l]->flags |= DRT_TF_OUTPUT;
        if (out->lambda[l]) out->lambda[l]->flags |= DRT_TF_OUTPUT;
    }
    if (g->err != DRT_OK) {
        drt_status s = g->err;
        drt_graph_free(g);
        out->g = NULL;
        return s;
    }
    return DRT_OK;
}
