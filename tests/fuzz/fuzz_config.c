/* libFuzzer harness: config.json against a real checkpoint (drt_model_load).
 *
 * Input: byte 0 picks one of the bundled fixtures (tests/fixtures, byte 0
 * modulo their number), the rest is config.json. Each fixture's
 * model.safetensors is linked once into its own scratch directory; per input
 * only config.json is rewritten and the directory loaded. The load must return
 * a status (with a message when it fails). When it succeeds, the model must
 * hold the internal layout model.h describes, which graph builders and kernels
 * index without further checks:
 *   - every weight has the shape the config implies (wq (H*2*dk, D) for diff
 *     models, (H*dk, D) otherwise; wk (G*kv_m*dk, D); wv (G*dv, D); wo (D, H*dv);
 *     norms (D); ...);
 *   - a weight used in place lies wholly inside one tensor of the mapping, a
 *     weight the loader built is one allocation; all bytes are read. */
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "drt_error.h"
#include "harness.h"
#include "model.h"

static const char *const fixtures[] = {"diff_v2",       "diff_v2_bf16", "hf_diffllama_f16", "hf_diffllama_gqa",
                                       "hf_llama_bf16", "hf_llama_gqa", "unilm_v1",         "mlx_diff"};
#define N_FIXTURES ((int)(sizeof fixtures / sizeof fixtures[0]))
static char g_dir[N_FIXTURES][600], g_cfg[N_FIXTURES][640];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    for (int i = 0; i < N_FIXTURES; i++) {
        char from[600], src[600], to[700];
        fz_join(g_dir[i], sizeof g_dir[i], fz_tmpdir(), fixtures[i]);
        FZ_CHECK(mkdir(g_dir[i], 0755) == 0, "cannot make %s", g_dir[i]);
        fz_join(src, sizeof src, fz_fixtures_dir(), fixtures[i]);
        fz_join(from, sizeof from, src, "model.safetensors");
        fz_join(to, sizeof to, g_dir[i], "model.safetensors");
        FZ_CHECK(access(from, R_OK) == 0, "cannot read %s (set DRT_FIXTURES_DIR?)", from);
        /* a link where it can (a crashed run leaves its scratch behind) */
        if (from[0] != '/' || symlink(from, to) != 0) fz_copy_file(from, to);
        fz_join(g_cfg[i], sizeof g_cfg[i], g_dir[i], "config.json");
    }
    return 0;
}

/* w has shape (n0) or (n0, n1) and its bytes are where model.h says. */
static void check_weight(const drt_model *m, const drt_host_weight *w, const char *what, int nd, int64_t n0,
                         int64_t n1) {
    FZ_CHECK(w->data, "%s: no data", what);
    FZ_CHECK(w->nd == nd && w->ne[0] == n0 && (nd == 1 || w->ne[1] == n1),
             "%s (%s): nd %d, shape (%lld, %lld); the config implies nd %d, (%lld, %lld)", what, w->name, w->nd,
             (long long)w->ne[0], (long long)w->ne[1], nd, (long long)n0, (long long)n1);
    FZ_CHECK((unsigned)w->type < DRT_DTYPE_COUNT && w->type != DRT_I32, "%s: dtype %d", what, (int)w->type);
    size_t nbytes = (size_t)n0 * (nd == 2 ? (size_t)n1 : 1) * drt_dtype_size(w->type);
    if (w->owned) {
        FZ_CHECK(w->owned == w->data, "%s: data is not the owned buffer", what);
    } else {
        const char *p = w->data;
        int inside = 0;
        for (int f = 0; f < m->st.n_files && !inside; f++)
            for (int i = 0; i < m->st.files[f].n_tensors && !inside; i++) {
                const drt_st_tensor *t = &m->st.files[f].tensors[i];
                const char *b = t->data;
                inside = p >= b && p <= b + t->nbytes && nbytes <= (size_t)(b + t->nbytes - p);
            }
        FZ_CHECK(inside, "%s (%s): %zu bytes in place, not inside one tensor", what, w->name, nbytes);
    }
    fz_touch(w->data, nbytes);
}

static void check_model(const drt_model *m) {
    drt_model_info I;
    FZ_CHECK(drt_model_get_info(m, &I) == DRT_OK, "drt_model_get_info failed");
    int64_t D = I.dim, F = I.ffn, V = I.vocab, H = I.n_heads, G = I.n_kv_groups;
    int64_t dk = I.dk, dv = I.dv;
    FZ_CHECK(D > 0 && F > 0 && V > 0 && H > 0 && G > 0 && dk > 0 && dv > 0 && I.n_layers > 0,
             "non-positive size in info");
    FZ_CHECK(dk % 2 == 0, "dk %lld is odd", (long long)dk);
    int diff = I.arch != DRT_ARCH_TRANSFORMER;
    FZ_CHECK(I.kv_m == (I.arch == DRT_ARCH_DIFF_V1 ? 2 : 1), "kv_m %d for arch %d", I.kv_m, (int)I.arch);
    FZ_CHECK(H % G == 0, "H %lld is not a multiple of G %lld", (long long)H, (long long)G);
    FZ_CHECK(m->inv_freq, "no inv_freq");
    fz_touch(m->inv_freq, sizeof(float) * (size_t)(dk / 2));
    check_weight(m, &m->embed, "embed", 2, V, D);
    check_weight(m, &m->lm_head, "lm_head", 2, V, D);
    check_weight(m, &m->final_norm, "final_norm", 1, D, 0);
    for (int l = 0; l < I.n_layers; l++) {
        const drt_layer_weights *lw = &m->layers[l];
        check_weight(m, &lw->attn_norm, "attn_norm", 1, D, 0);
        check_weight(m, &lw->ffn_norm, "ffn_norm", 1, D, 0);
        check_weight(m, &lw->wq, "wq", 2, H * (diff ? 2 : 1) * dk, D);
        check_weight(m, &lw->wk, "wk", 2, G * I.kv_m * dk, D);
        check_weight(m, &lw->wv, "wv", 2, G * dv, D);
        check_weight(m, &lw->wo, "wo", 2, D, H * dv);
        check_weight(m, &lw->wg, "wg", 2, F, D);
        check_weight(m, &lw->wu, "wu", 2, F, D);
        check_weight(m, &lw->wd, "wd", 2, D, F);
        if (I.arch == DRT_ARCH_DIFF_V2) check_weight(m, &lw->w_lambda, "w_lambda", 2, H, D);
        if (I.layout == DRT_LAYOUT_UNILM_V1 || I.layout == DRT_LAYOUT_MLX_DIFF ||
            (I.layout == DRT_LAYOUT_AXOLOTL_DIFF && I.subnorm))
            check_weight(m, &lw->subln, "subln", 1, dv, 0);
    }
    if (I.arch == DRT_ARCH_DIFF_V1) {
        FZ_CHECK(I.lambda && I.lambda_init, "diff-v1 without lambda");
        fz_touch(I.lambda, sizeof(float) * (size_t)I.n_layers);
        fz_touch(I.lambda_init, sizeof(float) * (size_t)I.n_layers);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int k = data[0] % N_FIXTURES;
    fz_write_file(g_cfg[k], data + 1, size - 1);
    drt_model *m = NULL;
    drt_set_error(DRT_OK, "%s", ""); /* a failure below must set its own message */
    drt_status s = drt_model_load(g_dir[k], &m);
    if (s != DRT_OK) {
        FZ_CHECK(!m, "failed load (status %d) left a model", (int)s);
        FZ_CHECK(drt_last_error()[0], "status %d without a message", (int)s);
        return 0;
    }
    FZ_CHECK(m, "load succeeded without a model");
    check_model(m);
    drt_model_free(m);
    return 0;
}
