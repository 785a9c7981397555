/* The model's lifetime (diffrt.h, drt_model_free): drt_model_load gives the
 * caller one reference, each session holds one more, and the last to go
 * frees the memory. So a session whose model the caller freed keeps reading
 * valid weights, instead of the model's mapping and owned copies that a host
 * backend wraps in place.
 *
 * The count is kept as references beyond the caller's (model.h), so the
 * model the loader callocs starts with exactly the caller's reference and
 * loader.c needs no initialisation. Atomic: sessions of one model may be
 * freed on different threads. */
#include <stdlib.h>

#include "loader_internal.h" /* ld_free_weight */
#include "model.h"

void drt_model_ref(drt_model *m) {
    atomic_fetch_add(&m->extra_refs, 1);
}

void drt_model_unref(drt_model *m) {
    /* 0 -> -1: that was the last reference */
    if (atomic_fetch_sub(&m->extra_refs, 1) == 0) drt_model_destroy(m);
}

void drt_model_free(drt_model *m) {
    if (!m) return;
    /* the caller's reference goes once; a second free of a handle that
     * sessions keep alive is ignored (once they are gone, it is a double free) */
    if (atomic_exchange(&m->released, 1)) return;
    drt_model_unref(m);
}

/* The last reference's: every weight the load owns, the tables, the
 * checkpoint's mapping. */
void drt_model_destroy(drt_model *m) {
    if (!m) return;
    if (m->layers)
        for (int l = 0; l < m->info.n_layers; l++) {
            drt_layer_weights *lw = &m->layers[l];
            drt_host_weight *ws[] = {&lw->attn_norm, &lw->ffn_norm, &lw->wq, &lw->wk, &lw->wv, &lw->wo,
                                     &lw->w_lambda,  &lw->subln,    &lw->wg, &lw->wu, &lw->wd};
            for (size_t i = 0; i < sizeof ws / sizeof ws[0]; i++) ld_free_weight(ws[i]);
        }
    free(m->layers);
    ld_free_weight(&m->embed);
    ld_free_weight(&m->final_norm);
    ld_free_weight(&m->lm_head);
    free(m->inv_freq);
    free(m->lambda_v);
    free(m->lambda_init_v);
    free(m->eos_ids);
    drt_st_set_close(&m->st);
    free(m);
}
