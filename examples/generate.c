/* Greedy generation through the public API: generate MODEL_DIR PROMPT.
 * README.md shows the lines between "README: begin" and "README: end"; the
 * ctests example_generate (it must answer " 6019.") and readme_example keep both right.
 * Written compact for the README, so clang-format leaves it as it is. */
// clang-format off
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <diffrt/diffrt.h>
#include <diffrt/tokenizer.h>

/* a failed call: the library's one-line message, exit status 1 */
static int fail(void) { return fprintf(stderr, "generate: %s\n", drt_last_error()), 1; }
#define TRY(call) do { if ((call) != DRT_OK) return fail(); } while (0)

int main(int argc, char **argv) {
    if (argc != 3) return fprintf(stderr, "usage: generate MODEL_DIR PROMPT\n"), 2;
    const char *dir = argv[1], *prompt = argv[2];
    char tokenizer_json[4096];
    snprintf(tokenizer_json, sizeof tokenizer_json, "%s/tokenizer.json", dir);
    /* README: begin */
    drt_model *m; drt_model_info info; drt_tokenizer *tok; drt_session *s; drt_sampler *smp;
    int32_t *ids, out[16], eos[8];
    int n_ids, n = 0;
    char *text;
    TRY(drt_model_load(dir, &m));
    TRY(drt_model_get_info(m, &info));
    int n_eos = drt_model_eos_ids(m, eos, 8); /* every id that ends generation (Llama 3 has three) */
    if (n_eos > 8) n_eos = 8;
    TRY(drt_tokenizer_load(tokenizer_json, &tok));
    TRY(drt_tokenizer_encode(tok, prompt, strlen(prompt), 1, &ids, &n_ids)); /* 1: with BOS */
    TRY(drt_session_create(m, NULL, &s)); /* the model on cpu with its KV cache (NULL: default options) */
    drt_sampler_opts greedy = {.temperature = 0, .top_p = 1};
    TRY(drt_sampler_create(&greedy, info.vocab, &smp));
    float *logits = malloc(sizeof(float) * (size_t)info.vocab); /* the last position's */
    if (!logits) return fprintf(stderr, "generate: out of memory\n"), 1;
    TRY(drt_session_forward(s, ids, n_ids, logits, 0)); /* the whole prompt at once */
    while (n < 16 && drt_session_pos(s) < drt_session_ctx(s)) {
        int32_t t = drt_sampler_sample(smp, logits);
        if (t < 0) return fail();
        int stop = 0;
        for (int i = 0; i < n_eos; i++) stop |= t == eos[i];
        if (stop) break;
        out[n++] = t;
        TRY(drt_session_forward(s, &t, 1, logits, 0)); /* one token: the next logits */
    }
    TRY(drt_tokenizer_decode(tok, out, n, 1, &text, NULL));
    printf("%s\n", text);
    /* README: end */
    free(text);
    free(logits);
    free(ids);
    drt_sampler_free(smp);
    drt_session_free(s);
    drt_model_free(m); /* the model goes with its last session */
    drt_tokenizer_free(tok);
    return 0;
}
