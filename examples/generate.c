/* Greedy generation through the public API: generate MODEL_DIR PROMPT
 * (README.md shows this file whole; the ctests example_generate and readme_example keep both right) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <diffrt/diffrt.h>
#include <diffrt/tokenizer.h>

#define CHECK(ok) do { if (!(ok)) { fprintf(stderr, "generate: %s\n", drt_last_error()); return 1; } } while (0)

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: generate MODEL_DIR PROMPT\n"), 2;
    drt_model *m;
    drt_model_info info;
    drt_tokenizer *tok;
    char path[4096], *text;
    int32_t *ids, out[16];
    int n_ids, n = 0;
    CHECK(drt_model_load(argv[1], &m) == DRT_OK);
    CHECK(drt_model_get_info(m, &info) == DRT_OK);
    snprintf(path, sizeof path, "%s/tokenizer.json", argv[1]);
    CHECK(drt_tokenizer_load(path, &tok) == DRT_OK);
    CHECK(drt_tokenizer_encode(tok, argv[2], strlen(argv[2]), 1, &ids, &n_ids) == DRT_OK); /* 1: with BOS */
    drt_session *s; /* the model on a backend, with its KV cache; NULL options: cpu, the model's context */
    CHECK(drt_session_create(m, NULL, &s) == DRT_OK);
    drt_sampler *smp;
    drt_sampler_opts so = {.temperature = 0, .top_k = 0, .top_p = 1, .seed = 0}; /* greedy */
    CHECK(drt_sampler_create(&so, info.vocab, &smp) == DRT_OK);
    float *logits = malloc(sizeof(float) * (size_t)info.vocab); /* [vocab]: the last position's */
    CHECK(logits != NULL);
    CHECK(drt_session_forward(s, ids, n_ids, logits, 0) == DRT_OK); /* the whole prompt at once */
    while (n < 16 && drt_session_pos(s) < drt_session_ctx(s)) {
        int32_t t = drt_sampler_sample(smp, logits);
        CHECK(t >= 0);
        if (t == info.eos_id) break;
        out[n++] = t;
        CHECK(drt_session_forward(s, &t, 1, logits, 0) == DRT_OK); /* one token: the next logits */
    }
    CHECK(drt_tokenizer_decode(tok, out, n, 1, &text, NULL) == DRT_OK);
    printf("%s\n", text);
    free(text);
    free(logits);
    free(ids);
    drt_sampler_free(smp);
    drt_session_free(s);
    drt_model_free(m); /* the model goes with its last session */
    drt_tokenizer_free(tok);
    return 0;
}
