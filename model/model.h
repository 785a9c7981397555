/* Internal model representation: every checkpoint layout is mapped onto this
 * one layout at load time (docs/design.md section 4), so graph builders and
 * kernels never branch on where a model came from.
 *
 * Internal layout, per layer:
 *   wq (H*2*dk, D) diff models, rows in (h, map, i) order -> q is (T,H,2,dk)
 *      (H*dk, D) transformer                              -> q is (T,H,dk)
 *   wk (G*m*dk, D)  -> k is (T,G,m,dk) (transformer: (T,G,dk))
 *   wv (G*dv, D)    -> v is (T,G,dv)
 *   wo (D, H*dv)
 *   RoPE is rotate_half on every dk-wide head (interleaved layouts have their
 *   q/k rows permuted at load time). */
#ifndef DRT_MODEL_H
#define DRT_MODEL_H

#include <stdatomic.h>

#include "diffrt/diffrt.h"
#include "safetensors.h"

typedef struct {
    char name[96];
    drt_dtype type;
    int nd;
    int64_t ne[2];
    const void *data; /* into the mapping, or into owned */
    void *owned;      /* non-NULL when the loader built this tensor */
    int mapped;       /* data is in place in a read-only file mapping (drt_st_tensor.mapped) */
} drt_host_weight;

typedef struct {
    drt_host_weight attn_norm, ffn_norm; /* f32 (D) */
    drt_host_weight wq, wk, wv, wo;
    drt_host_weight w_lambda; /* V2: (H, D); else empty */
    drt_host_weight subln;    /* V1 GROUPNORM weight (dv) f32; empty when none */
    drt_host_weight wg, wu, wd;
    float lambda, lambda_init; /* V1 */
    float gn_scale;            /* V1: GROUPNORM's scale, 1 - lambda_init or 1 (drt_model_info.out_scale) */
} drt_layer_weights;

struct drt_model {
    drt_model_info info;
    char dir[512];
    float rms_eps; /* the pre-norms and the final norm */
    float gn_eps;  /* GROUPNORM (V1) */
    float rope_theta;
    float *inv_freq; /* (dk/2), after rope_scaling */
    drt_host_weight embed, final_norm, lm_head, inv_freq_w;
    drt_layer_weights *layers;
    float *lambda_v, *lambda_init_v; /* (n_layers) for info */
    int32_t *eos_ids;                /* (n_eos) config.json's, then generation_config.json's eos ids */
    int n_eos;
    drt_st_set st;
    /* references beyond the caller's (model_ref.c): +1 per live session, -1
     * once the caller freed it; 0 (as calloc leaves it) is the caller's alone */
    atomic_int extra_refs;
    atomic_int released; /* drt_model_free was called */
    /* the weights on backends whose memory the host cannot address, one
     * copy per device and settings, shared by the sessions asking for the
     * same (session.h, device_weights.c), under dev_lock */
    atomic_flag dev_lock;
    struct drt_device_weights *devs;
};

/* model_ref.c: a session takes a reference to its model and drops it when
 * freed; the last reference to go destroys the model. */
void drt_model_ref(drt_model *m);
void drt_model_unref(drt_model *m);
/* model_ref.c: frees the model's memory, whatever refers to it */
void drt_model_destroy(drt_model *m);

/* A model directory's checkpoint as drt_model_load sees it, for the tools
 * that rewrite one (drt_quantize_model): dir is loaded by drt_model_load
 * itself, every rule of it applied (config.json, the files found as it
 * finds them, e.g. diff-mlx's latest.safetensors, each tensor's name,
 * shape and dtype, the tensors no layout reads, the lambdas), with the
 * checkpoint's pages left unreleased; then the model goes and its files
 * stay open here. used[i] is 1 for each tensor of st.by_name the model
 * reads, 0 for one the loader skips (a diff-mlx optimizer's opt.*, a RoPE
 * table, a tied model's copy of its embedding as lm_head.weight); the
 * tensors of a foreign dtype (st's files' `foreign`) are all skipped ones.
 * The error is drt_model_load's. */
typedef struct {
    drt_st_set st;
    unsigned char *used; /* st.n_names */
} drt_checkpoint;

drt_status drt_checkpoint_open(const char *dir, drt_checkpoint *out);
void drt_checkpoint_close(drt_checkpoint *c);

#endif
