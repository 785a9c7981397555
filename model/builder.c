/* Graph builders for the three architectures (docs/design.md section 4):
 *   X = EMBED(ids)
 *   per layer:  Y = X + Attn(RMSNORM(X));  X = Y + W2(SWIGLU(Wg Y', Wu Y')), Y' = RMSNORM(Y)
 *   logits = LM_HEAD(RMSNORM(X))
 * Attn: transformer ATTN; diff-v1 DIFF_ATTN with scalar lambda then GROUPNORM
 * (unless the model has none);
 * diff-v2 DIFF_ATTN with lambda = SIGMOID(Y' W_lambda^T) per token and head.
 *
 * A graph runs T rows (tokens of one or several sequences: drt_exec); ROPE,
 * KV_WRITE and attention read each row's cache base and position from the
 * graph's rows tensor, every other op just sees T rows. The L rows whose
 * logits are wanted are gathered (EMBED over the hidden rows, indices in
 * `sel`) before the final norm and the LM head. */
#include <stdio.h>
#include <stdlib.h>

#include "drt_error.h"
#include "builder.h"

/* Names a node after where it sits in the model, "layers.<l>.<what>" (or
 * <what> outside the layers), so a message can say which op of which layer
 * (the finite check, drt_plan_find_nonfinite). */
static drt_tensor *named(drt_tensor *t, int l, const char *what) {
    if (!t) return NULL;
    if (l >= 0)
        snprintf(t->name, sizeof t->name, "layers.%d.%s", l, what);
    else
        snprintf(t->name, sizeof t->name, "%s", what);
    return t;
}

static drt_tensor *reshape(drt_graph *g, drt_tensor *x, int nd, int64_t n0, int64_t n1, int64_t n2, int64_t n3) {
    int64_t ne[4] = {n0, n1, n2, n3};
    return drt_view(g, x, nd, ne, 0);
}

static drt_tensor *attention(drt_graph *g, const drt_model *m, int l, const drt_layer_tensors *L,
                             const drt_layer_weights *lw, drt_tensor *h, drt_tensor *inv_freq, drt_tensor *rows, int T,
                             drt_tensor **q_out, drt_tensor **lam_out) {
    const drt_model_info *I = &m->info;
    int64_t H = I->n_heads, G = I->n_kv_groups, km = I->kv_m, dk = I->dk, dv = I->dv;
    int diff = I->arch != DRT_ARCH_TRANSFORMER;
    int64_t qmaps = diff ? 2 : 1;

    /* q: (T, H*qmaps*dk) -> RoPE over (T, H*qmaps, dk). The three
     * projections of h come first, one after the other, so that a backend
     * may run them as one launch (the CUDA decode GEMV does). */
    drt_tensor *q = named(drt_matmul(g, h, L->wq), l, "attn.q");
    drt_tensor *k = named(drt_matmul(g, h, L->wk), l, "attn.k");
    drt_tensor *v = named(drt_matmul(g, h, L->wv), l, "attn.v");
    q = *q_out = named(drt_rope(g, reshape(g, q, 3, T, H * qmaps, dk, 0), inv_freq, rows), l, "attn.q_rope");
    k = named(drt_rope(g, reshape(g, k, 3, T, G * km, dk, 0), inv_freq, rows), l, "attn.k_rope");

    drt_tensor *o, *kc, *vc;
    if (!diff) {
        kc = drt_kv_write(g, reshape(g, k, 3, T, G, dk, 0), L->k_cache, rows);
        vc = drt_kv_write(g, reshape(g, v, 3, T, G, dv, 0), L->v_cache, rows);
        o = named(drt_attn(g, q, kc, vc, rows), l, "attn");
    } else {
        kc = drt_kv_write(g, reshape(g, k, 4, T, G, km, dk), L->k_cache, rows);
        vc = drt_kv_write(g, reshape(g, v, 3, T, G, dv, 0), L->v_cache, rows);
        drt_tensor *q4 = reshape(g, q, 4, T, H, 2, dk);
        if (I->arch == DRT_ARCH_DIFF_V1) {
            o = named(drt_diff_attn(g, q4, kc, vc, lw->lambda, NULL, rows), l, "attn");
            /* without it (axolotl's sublayer_norm false) a scale other than 1
             * is folded into wo by the loader */
            if (I->subnorm) o = named(drt_groupnorm(g, o, L->subln, m->gn_eps, lw->gn_scale), l, "attn.subln");
        } else {
            drt_tensor *lam = named(drt_matmul(g, h, L->w_lambda), l, "attn.lambda_proj");
            lam = *lam_out = named(drt_sigmoid(g, lam), l, "attn.lambda"); /* (T, H) */
            o = named(drt_diff_attn(g, q4, kc, vc, 0.0f, lam, rows), l, "attn");
        }
    }
    named(kc, l, "attn.k_cache");
    named(vc, l, "attn.v_cache");
    return named(drt_matmul(g, reshape(g, o, 2, T, H * dv, 0, 0), L->wo), l, "attn.out");
}

drt_status drt_build_forward(const drt_model *m, const drt_model_tensors *mt, int T, int L, drt_forward_graph *out) {
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
    out->L = L;
    out->ids = drt_new_tensor_1d(g, DRT_I32, T, "ids");
    if (out->ids) out->ids->flags |= DRT_TF_INPUT;
    out->sel = drt_new_tensor_1d(g, DRT_I32, L, "sel");
    if (out->sel) out->sel->flags |= DRT_TF_INPUT;
    drt_tensor *rows = drt_new_rows(g, T);

    drt_tensor *x = named(drt_embed(g, out->ids, mt->embed), -1, "embed");
    for (int l = 0; l < I->n_layers; l++) {
        const drt_layer_tensors *Lt = &mt->layers[l];
        drt_tensor *h = named(drt_rmsnorm(g, x, Lt->attn_norm, m->rms_eps), l, "attn_norm");
        drt_tensor *a = attention(g, m, l, Lt, &m->layers[l], h, mt->inv_freq, rows, T, &out->q_rope[l],
                                  &out->lambda[l]);
        x = named(drt_add(g, x, a), l, "attn_residual");
        drt_tensor *h2 = named(drt_rmsnorm(g, x, Lt->ffn_norm, m->rms_eps), l, "ffn_norm");
        drt_tensor *gate = named(drt_matmul(g, h2, Lt->wg), l, "mlp.gate");
        drt_tensor *up = named(drt_matmul(g, h2, Lt->wu), l, "mlp.up");
        drt_tensor *f = named(drt_swiglu(g, gate, up), l, "mlp.swiglu");
        x = named(drt_add(g, x, named(drt_matmul(g, f, Lt->wd), l, "mlp.down")), l, "mlp_residual");
    }
    /* only the rows whose logits are wanted go on: (L, dim) */
    x = named(drt_embed(g, out->sel, x), -1, "logit_rows");
    x = named(drt_rmsnorm(g, x, mt->final_norm, m->rms_eps), -1, "final_norm");
    out->logits = named(drt_matmul(g, x, mt->lm_head), -1, "lm_head");
    /* what the host reads after a run keeps its own storage: the logits
     * (the attention probes observe q and lambda as a run computes them) */
    if (out->logits) out->logits->flags |= DRT_TF_OUTPUT;
    if (g->err != DRT_OK) {
        drt_status s = g->err;
        drt_graph_free(g);
        out->g = NULL;
        return s;
    }
    return DRT_OK;
}
