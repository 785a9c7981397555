/* An outside program built against an installed diffrt (find_package or
 * pkg-config; tests/install/check.sh): lists the backends, loads a model and
 * its tokenizer, and generates greedily from a prompt, printing the text as
 * `diffrt run --prompt` does. Uses the public headers only.
 *
 *   consumer MODEL_DIR PROMPT N [BACKEND] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <diffrt/diffrt.h>
#include <diffrt/tokenizer.h>

static int fail(const char *what) {
    fprintf(stderr, "consumer: %s: %s\n", what, drt_last_error());
    return 1;
}

int main(int argc, char **argv) {
    if (argc < 4) {
        fprintf(stderr, "usage: consumer MODEL_DIR PROMPT N [BACKEND]\n");
        return 2;
    }
    const char *dir = argv[1], *prompt = argv[2], *backend = argc > 4 ? argv[4] : "cpu";
    int n = atoi(argv[3]);
    fprintf(stderr, "diffrt %s (commit %s)\n", drt_version(), drt_git_commit());
    for (int b = 0; b < drt_backend_count(); b++) {
        drt_backend_info bi;
        if (drt_backend_get_info(b, &bi) != DRT_OK) return fail("drt_backend_get_info");
        fprintf(stderr, "  %s: %s\n", bi.name, bi.available ? "available" : bi.reason);
        for (int d = 0; bi.available && d < bi.device_count; d++) {
            drt_device_props p;
            if (drt_backend_device_props(b, d, &p) != DRT_OK) return fail("drt_backend_device_props");
            fprintf(stderr, "    [%d] %s (%s, %.1f GiB, subgroup %d)\n", d, p.name, p.type,
                    p.memory_bytes / 1073741824.0, p.subgroup_size);
        }
    }

    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    drt_tokenizer *tok = NULL;
    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_sampler *smp = NULL;
    int32_t *ids = NULL;
    float *logits = NULL;
    char *out = NULL;
    size_t len = 0, cap = 0;
    int n_ids = 0, rc = 1;
    if (drt_tokenizer_load(path, &tok) != DRT_OK) {
        rc = fail("tokenizer");
        goto done;
    }
    if (drt_tokenizer_encode(tok, prompt, strlen(prompt), 1, &ids, &n_ids) != DRT_OK) {
        rc = fail("encode");
        goto done;
    }
    if (drt_model_load(dir, &m) != DRT_OK) {
        rc = fail("model");
        goto done;
    }
    drt_model_info info;
    if (drt_model_get_info(m, &info) != DRT_OK) {
        rc = fail("model info");
        goto done;
    }
    drt_session_opts so = {.backend = backend};
    if (drt_session_create(m, &so, &s) != DRT_OK) {
        rc = fail("session");
        goto done;
    }
    drt_sampler_opts sop = {.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0};
    if (drt_sampler_create(&sop, info.vocab, &smp) != DRT_OK) {
        rc = fail("sampler");
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)info.vocab);
    if (!logits) goto done;
    /* every eos id of the model stops (Llama 3 has three), else the tokenizer's */
    int32_t eos[8];
    int n_eos = drt_model_eos_ids(m, eos, 8);
    if (n_eos > 8) n_eos = 8;
    if (n_eos <= 0 && (eos[0] = drt_tokenizer_eos_id(tok)) >= 0) n_eos = 1;
    if (drt_session_forward(s, ids, n_ids, logits, 0) != DRT_OK) {
        rc = fail("prefill");
        goto done;
    }
    drt_tokenizer_stream st;
    drt_tokenizer_stream_init(&st);
    for (int i = 0; i < n; i++) {
        int32_t t = drt_sampler_sample(smp, logits);
        if (t < 0) {
            rc = fail("sample");
            goto done;
        }
        int stop = 0;
        for (int k = 0; k < n_eos; k++) stop |= t == eos[k];
        if (stop) break;
        if (drt_tokenizer_stream_push(tok, &st, t, 1, &out, &len, &cap) != DRT_OK) {
            rc = fail("decode");
            goto done;
        }
        if (i + 1 < n && drt_session_forward(s, &t, 1, logits, 0) != DRT_OK) {
            rc = fail("decode step");
            goto done;
        }
    }
    if (drt_tokenizer_stream_flush(tok, &st, &out, &len, &cap) != DRT_OK) {
        rc = fail("flush");
        goto done;
    }
    printf("%s%s", out ? out : "", len && out[len - 1] == '\n' ? "" : "\n");
    rc = 0;
done:
    free(out);
    free(logits);
    free(ids);
    drt_sampler_free(smp);
    drt_session_free(s);
    drt_model_free(m);
    drt_tokenizer_free(tok);
    return rc;
}
