/* The multi-needle retrieval generator of docs/niah_spec.md. Every random
 * choice is splitmix64 (drt_util.h) in the order the spec lists; every
 * bounded draw is next() % n, next() being drt_splitmix64. Token counts come from the model's tokenizer, piece by piece
 * (each piece starts with a space), and the full encoding is checked to be
 * the concatenation, as the spec requires. */
#include "niah.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_util.h"

#define N_CITIES 64
static const char *const CITIES[N_CITIES] = {
    "Paris",    "London",  "Tokyo",     "Berlin",    "Madrid",   "Rome",      "Vienna",   "Prague",
    "Lisbon",   "Dublin",  "Oslo",      "Stockholm", "Helsinki", "Warsaw",    "Athens",   "Cairo",
    "Nairobi",  "Lagos",   "Lima",      "Bogota",    "Santiago", "Havana",    "Toronto",  "Chicago",
    "Boston",   "Denver",  "Seattle",   "Dallas",    "Houston",  "Phoenix",   "Miami",    "Atlanta",
    "Montreal", "Sydney",  "Melbourne", "Auckland",  "Jakarta",  "Manila",    "Bangkok",  "Hanoi",
    "Seoul",    "Beijing", "Shanghai",  "Mumbai",    "Delhi",    "Karachi",   "Tehran",   "Baghdad",
    "Istanbul", "Moscow",  "Kyiv",      "Budapest",  "Zurich",   "Geneva",    "Munich",   "Hamburg",
    "Milan",    "Naples",  "Barcelona", "Seville",   "Porto",    "Amsterdam", "Brussels", "Copenhagen",
};

static const char *const ADJ[] = {"old",     "quiet",  "green",  "small",   "bright", "heavy", "gentle", "narrow",
                                  "ancient", "silver", "wooden", "distant", "hidden", "warm",  "cold",   "tall",
                                  "empty",   "busy",   "golden", "soft",    "dark",   "sharp", "pale",   "famous"};
static const char *const NOUN[] = {"river",    "garden", "window",  "teacher", "farmer",  "bridge",  "mountain",
                                   "forest",   "letter", "village", "market",  "sailor",  "painter", "lantern",
                                   "castle",   "meadow", "engine",  "kitchen", "harbor",  "tower",   "valley",
                                   "basket",   "mirror", "candle",  "wagon",   "library", "orchard", "island",
                                   "traveler", "doctor", "student", "musician"};
static const char *const VERB[] = {"watched", "carried",    "painted",   "found",   "followed", "visited", "cleaned",
                                   "opened",  "remembered", "described", "admired", "repaired", "crossed", "guarded",
                                   "noticed", "studied",    "borrowed",  "lifted",  "closed",   "welcomed"};
static const char *const PREP[] = {"near", "behind", "beside", "above", "below", "across", "inside", "beyond"};
static const char *const ADV[] = {"slowly", "quietly", "carefully", "often",   "rarely",  "early",
                                  "gladly", "softly",  "calmly",    "happily", "briefly", "always"};
static const char *const TIME[] = {"in the morning",    "at night",       "before dawn",  "after the rain",
                                   "during the winter", "in the evening", "every spring", "at noon"};

typedef struct {
    const char *name;
    const char *const *words;
    int n;
} word_list;

#define LIST(nm, arr)                                                                                                  \
    { nm, arr, (int)(sizeof arr / sizeof arr[0]) }
static const word_list LISTS[] = {LIST("adj", ADJ),   LIST("noun", NOUN), LIST("verb", VERB),
                                  LIST("prep", PREP), LIST("adv", ADV),   LIST("time", TIME)};

#define N_TEMPLATES 8
static const char *const TEMPLATES[N_TEMPLATES] = {
    "The {adj} {noun} {verb} the {noun} {prep} the {noun}.",
    "A {adj} {noun} {adv} {verb} the {adj} {noun}.",
    "The {noun} {prep} the {noun} was {adj}.",
    "Every {noun} {verb} a {adj} {noun} {time}.",
    "The {noun} is {adj} and the {noun} is {adj}.",
    "Nobody {verb} the {adj} {noun} {time}.",
    "The {adj} {noun} and the {adj} {noun} {verb} the {noun}.",
    "It was {adj} {prep} the {noun} {time}.",
};

/* ---- splitmix64 ------------------------------------------------------------ */

static uint64_t below(uint64_t *s, uint64_t n) {
    return drt_splitmix64(s) % n;
}

/* F(x): next() of a copy of a state equal to x */
static uint64_t F(uint64_t x) {
    return drt_splitmix64(&x);
}

/* ---- text pieces --------------------------------------------------------------- */

/* " " + one filler sentence into buf */
static void filler_sentence(uint64_t *rng, char *buf, size_t n) {
    const char *t = TEMPLATES[below(rng, N_TEMPLATES)];
    size_t o = (size_t)snprintf(buf, n, " ");
    while (*t && o < n) {
        if (*t != '{') {
            buf[o++] = *t++;
            continue;
        }
        const char *e = strchr(t, '}');
        size_t len = (size_t)(e - t - 1);
        for (size_t l = 0; l < sizeof LISTS / sizeof LISTS[0]; l++)
            if (strlen(LISTS[l].name) == len && strncmp(LISTS[l].name, t + 1, len) == 0) {
                const char *w = LISTS[l].words[below(rng, (uint64_t)LISTS[l].n)];
                o += (size_t)snprintf(buf + o, n - o, "%s", w);
                break;
            }
        t = e + 1;
    }
    buf[o < n ? o : n - 1] = 0;
}

static drt_status count_tokens(const drt_tokenizer *tok, const char *text, int *n) {
    int32_t *ids;
    drt_status s = drt_tokenizer_encode(tok, text, strlen(text), 0, &ids, n);
    if (s == DRT_OK) free(ids);
    return s;
}

typedef struct {
    char **text;
    int *tokens;
    int *needle; /* needle index, or -1 for filler */
    int n, cap;
} pieces;

static drt_status push_piece(pieces *p, const char *text, int tokens, int needle) {
    if (p->n == p->cap) {
        int nc = p->cap ? 2 * p->cap : 64;
        char **t = realloc(p->text, sizeof(char *) * (size_t)nc);
        if (t) p->text = t;
        int *k = realloc(p->tokens, sizeof(int) * (size_t)nc);
        if (k) p->tokens = k;
        int *nd = realloc(p->needle, sizeof(int) * (size_t)nc);
        if (nd) p->needle = nd;
        if (!t || !k || !nd) return drt_set_error(DRT_ERR_OOM, "out of memory");
        p->cap = nc;
    }
    p->text[p->n] = strdup(text);
    if (!p->text[p->n]) return drt_set_error(DRT_ERR_OOM, "out of memory");
    p->tokens[p->n] = tokens;
    p->needle[p->n++] = needle;
    return DRT_OK;
}

static void free_pieces(pieces *p) {
    for (int i = 0; i < p->n; i++) free(p->text[i]);
    free(p->text);
    free(p->tokens);
    free(p->needle);
}

void drt_niah_prompt_free(drt_niah_prompt *p) {
    if (!p) return;
    free(p->prompt);
    free(p->ids);
    memset(p, 0, sizeof *p);
}

void drt_niah_predicted(const char *g, char *pred, size_t n) {
    while (*g == ' ') g++;
    size_t k = 0;
    while (g[k] >= '0' && g[k] <= '9' && k + 1 < n) {
        pred[k] = g[k];
        k++;
    }
    pred[k] = 0;
}

drt_status drt_niah_prompt_count(int64_t n_ctx, int64_t n_depth, int64_t samples, int64_t queries, int64_t *out) {
    const int64_t f[4] = {n_ctx, n_depth, samples, queries};
    int64_t p = 1;
    int over = 0;
    *out = 0;
    for (int i = 0; i < 4; i++) {
        if (f[i] < 1)
            return drt_set_error(DRT_ERR_INVALID_ARG,
                                 "niah: %lld ctx x %lld depths x %lld samples x %lld queries: each must be >= 1",
                                 (long long)n_ctx, (long long)n_depth, (long long)samples, (long long)queries);
        /* p <= DRT_NIAH_MAX_PROMPTS: the test keeps p * f[i] from overflowing */
        if (!over && p > DRT_NIAH_MAX_PROMPTS / f[i]) over = 1;
        if (!over) p *= f[i];
    }
    if (over)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "niah: %lld ctx x %lld depths x %lld samples x %lld queries = %.4g prompts, over the "
                             "limit of %d: give fewer --samples, --ctx or --depths",
                             (long long)n_ctx, (long long)n_depth, (long long)samples, (long long)queries,
                             (double)n_ctx * (double)n_depth * (double)samples * (double)queries, DRT_NIAH_MAX_PROMPTS);
    *out = p;
    return DRT_OK;
}

drt_status drt_niah_make(const drt_tokenizer *tok, uint64_t seed, int ctx, int n_needles, int n_queries, int depth,
                         int index, drt_niah_prompt *out) {
    if (n_needles < 1 || n_needles > N_CITIES)
        return drt_set_error(DRT_ERR_INVALID_ARG, "niah: needles %d must be in 1..%d", n_needles, N_CITIES);
    if (n_queries < 1 || n_queries > n_needles)
        return drt_set_error(DRT_ERR_INVALID_ARG, "niah: queries %d must be in 1..needles (%d)", n_queries, n_needles);
    if (depth < 0 || depth > 100) return drt_set_error(DRT_ERR_INVALID_ARG, "niah: depth %d must be in 0..100", depth);
    if (ctx < 1 || index < 0)
        return drt_set_error(DRT_ERR_INVALID_ARG, "niah: ctx %d / index %d out of range", ctx, index);
    memset(out, 0, sizeof *out * (size_t)n_queries);

    uint64_t rng = seed;
    rng = F(rng ^ (uint64_t)ctx);
    rng = F(rng ^ (uint64_t)n_needles);
    rng = F(rng ^ (uint64_t)n_queries);
    rng = F(rng ^ (uint64_t)index);

    /* 1. cities: partial Fisher-Yates; 2. numbers of 4..7 digits */
    int order[N_CITIES];
    for (int i = 0; i < N_CITIES; i++) order[i] = i;
    for (int i = 0; i < n_needles; i++) {
        int j = i + (int)below(&rng, (uint64_t)(N_CITIES - i));
        int t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    char numbers[N_CITIES][16];
    for (int i = 0; i < n_needles; i++) {
        int digits = 4 + (int)below(&rng, 4);
        uint64_t lo = 1;
        for (int d = 1; d < digits; d++) lo *= 10;
        snprintf(numbers[i], sizeof numbers[i], "%llu", (unsigned long long)(lo + below(&rng, 9 * lo)));
    }

    /* 3. the fixed token budget */
    drt_status st = DRT_OK;
    char needle[N_CITIES][96], question[1600], prefix[N_CITIES][64], answer[32];
    int tok_needle[N_CITIES], tok_q = 0, tok_prefix[N_CITIES], n_special = 0;
    {
        int32_t *ids;
        int with = 0, without = 0;
        st = drt_tokenizer_encode(tok, "", 0, 1, &ids, &with);
        if (st == DRT_OK) free(ids);
        if (st == DRT_OK) st = drt_tokenizer_encode(tok, "", 0, 0, &ids, &without);
        if (st == DRT_OK) free(ids);
        n_special = with - without;
    }
    int fixed = n_special, worst_tail = 0;
    for (int i = 0; st == DRT_OK && i < n_needles; i++) {
        if (snprintf(needle[i], sizeof needle[i], " The magic number of %s is %s.", CITIES[order[i]], numbers[i]) >=
            (int)sizeof needle[i])
            st = drt_set_error(DRT_ERR_INVALID_ARG, "niah: needle %d does not fit %zu bytes", i, sizeof needle[i]);
        if (st == DRT_OK) st = count_tokens(tok, needle[i], &tok_needle[i]);
        fixed += tok_needle[i];
    }
    size_t qo = (size_t)snprintf(question, sizeof question,
                                 n_queries == 1 ? " What is the magic number of " : " What are the magic numbers of ");
    for (int r = 0; r < n_queries; r++)
        qo += (size_t)snprintf(question + qo, sizeof question - qo, "%s%s",
                               r == 0               ? ""
                               : r == n_queries - 1 ? " and "
                                                    : ", ",
                               CITIES[order[r]]);
    snprintf(question + qo, sizeof question - qo, "?");
    if (st == DRT_OK) st = count_tokens(tok, question, &tok_q);
    fixed += tok_q;
    for (int r = 0; st == DRT_OK && r < n_queries; r++) {
        int ta = 0;
        if (snprintf(prefix[r], sizeof prefix[r], " The magic number of %s is", CITIES[order[r]]) >=
                (int)sizeof prefix[r] ||
            snprintf(answer, sizeof answer, " %s.", numbers[r]) >= (int)sizeof answer)
            st = drt_set_error(DRT_ERR_INVALID_ARG, "niah: answer %d does not fit its buffer", r);
        if (st == DRT_OK) st = count_tokens(tok, prefix[r], &tok_prefix[r]);
        if (st == DRT_OK) st = count_tokens(tok, answer, &ta);
        if (tok_prefix[r] + ta + 1 > worst_tail) worst_tail = tok_prefix[r] + ta + 1;
    }
    fixed += worst_tail;
    if (st != DRT_OK) return st;
    if (fixed > ctx)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "niah: ctx %d is smaller than the %d tokens %d needles and the question need", ctx, fixed,
                             n_needles);

    /* 4. filler to the context length */
    pieces fill = {0};
    int used = fixed;
    char sent[256];
    for (;;) {
        int c = 0;
        filler_sentence(&rng, sent, sizeof sent);
        st = count_tokens(tok, sent, &c);
        if (st != DRT_OK || used + c > ctx) break;
        st = push_piece(&fill, sent, c, -1);
        if (st != DRT_OK) break;
        used += c;
    }
    int M = fill.n;

    /* 5-6. answer slot, distractor slots */
    int a = (depth * M + 50) / 100, slot[N_CITIES];
    for (int i = 0; i < n_needles; i++) slot[i] = a;
    for (int i = n_queries; i < n_needles; i++) {
        if (M == 0) {
            slot[i] = 0;
        } else {
            int u = (int)below(&rng, (uint64_t)M);
            slot[i] = u < a ? u : u + 1;
        }
    }

    /* 7. assembly */
    pieces hay = {0};
    for (int s = 0; st == DRT_OK && s <= M; s++) {
        if (s == a)
            for (int i = 0; st == DRT_OK && i < n_queries; i++) st = push_piece(&hay, needle[i], tok_needle[i], i);
        for (int i = n_queries; st == DRT_OK && i < n_needles; i++)
            if (slot[i] == s) st = push_piece(&hay, needle[i], tok_needle[i], i);
        if (st == DRT_OK && s < M) st = push_piece(&hay, fill.text[s], fill.tokens[s], -1);
    }
    free_pieces(&fill);

    /* prompts: haystack + question + prefix_r; positions from piece counts */
    size_t hay_len = 0;
    for (int i = 0; i < hay.n; i++) hay_len += strlen(hay.text[i]);
    int pos = n_special, qstart, *start = malloc(sizeof(int) * (size_t)(hay.n + 1));
    if (!start && st == DRT_OK) st = drt_set_error(DRT_ERR_OOM, "out of memory");
    for (int i = 0; st == DRT_OK && i < hay.n; i++) {
        start[i] = pos;
        pos += hay.tokens[i];
    }
    qstart = pos;
    for (int r = 0; st == DRT_OK && r < n_queries; r++) {
        drt_niah_prompt *p = &out[r];
        size_t len = hay_len + strlen(question) + strlen(prefix[r]);
        p->prompt = malloc(len + 1);
        if (!p->prompt) {
            st = drt_set_error(DRT_ERR_OOM, "out of memory");
            break;
        }
        size_t o = 0;
        for (int i = 0; i < hay.n; i++) {
            size_t l = strlen(hay.text[i]);
            memcpy(p->prompt + o, hay.text[i], l);
            o += l;
            if (hay.needle[i] == r) {
                p->answer_start = start[i];
                p->answer_end = start[i] + hay.tokens[i];
            }
        }
        memcpy(p->prompt + o, question, strlen(question));
        o += strlen(question);
        memcpy(p->prompt + o, prefix[r], strlen(prefix[r]) + 1);
        snprintf(p->city, sizeof p->city, "%s", CITIES[order[r]]);
        if (snprintf(p->answer, sizeof p->answer, "%s", numbers[r]) >= (int)sizeof p->answer)
            st = drt_set_error(DRT_ERR_INVALID_ARG, "niah: answer %d does not fit %zu bytes", r, sizeof p->answer);
        p->question_start = qstart;
        if (st == DRT_OK) st = drt_tokenizer_encode(tok, p->prompt, len, 1, &p->ids, &p->n_ids);
        int expect = qstart + tok_q + tok_prefix[r];
        if (st == DRT_OK && p->n_ids != expect)
            st = drt_set_error(DRT_ERR_UNSUPPORTED,
                               "niah: the tokenizer does not encode the prompt piece by piece (%d tokens, pieces "
                               "sum to %d); docs/niah_spec.md needs that",
                               p->n_ids, expect);
    }
    free(start);
    free_pieces(&hay);
    if (st != DRT_OK)
        for (int r = 0; r < n_queries; r++) drt_niah_prompt_free(&out[r]);
    return st;
}

drt_status drt_niah_answer(drt_session *s, const drt_tokenizer *tok, int vocab, const int32_t *eos, int n_eos,
                           float *logits, int32_t gen[DRT_NIAH_MAX_NEW_TOKENS], int *ng, char *pred, size_t n) {
    drt_status st = DRT_OK;
    *ng = 0;
    if (n) pred[0] = 0;
    while (st == DRT_OK && *ng < DRT_NIAH_MAX_NEW_TOKENS) {
        int best = 0;
        for (int v = 1; v < vocab; v++)
            if (logits[v] > logits[best]) best = v;
        int stop = 0;
        for (int i = 0; i < n_eos && !stop; i++) stop = best == eos[i];
        if (stop) break;
        gen[(*ng)++] = best;
        if (*ng < DRT_NIAH_MAX_NEW_TOKENS) st = drt_session_forward(s, &gen[*ng - 1], 1, logits, 0);
    }
    char *text = NULL;
    if (st == DRT_OK) st = drt_tokenizer_decode(tok, gen, *ng, 1, &text, NULL);
    if (st != DRT_OK) return st;
    drt_niah_predicted(text, pred, n);
    free(text);
    return DRT_OK;
}

void drt_niah_attention(const float *attn, const drt_niah_prompt *p, double *answer, double *noise) {
    double ans = 0, rest = 0;
    for (int j = 0; j < p->question_start; j++) {
        if (j >= p->answer_start && j < p->answer_end)
            ans += attn[j];
        else
            rest += attn[j];
    }
    *answer = ans;
    *noise = rest;
}

int drt_niah_print_accuracy(FILE *f, const drt_niah_grid *g, const drt_niah_tally *t, int total) {
    fprintf(f, "multi-needle retrieval accuracy (N=%d, R=%d, %d samples x %d queries per cell, seed %llu)\n",
            g->needles, g->queries, g->samples, g->queries, g->seed);
    fprintf(f, "%-8s", "depth");
    for (int c = 0; c < g->n_ctx; c++) fprintf(f, " ctx %-6d", g->ctxs[c]);
    fprintf(f, "\n");
    int all = 0;
    for (int d = 0; d < g->n_depth; d++) {
        fprintf(f, "%3d%%    ", g->depths[d]);
        for (int c = 0; c < g->n_ctx; c++) {
            fprintf(f, " %-10.3f", (double)t->correct[c][d] / (g->samples * g->queries));
            all += t->correct[c][d];
        }
        fprintf(f, "\n");
    }
    fprintf(f, "overall  %.3f (%d/%d)\n", (double)all / total, all, total);
    return all;
}

void drt_niah_print_attention(FILE *f, const drt_niah_grid *g, const drt_niah_tally *t, int diff) {
    fprintf(f, "\nattention at the final query token, mean over heads and layers (%s)\n",
            diff ? "differential map A1 - lambda A2" : "softmax map");
    fprintf(f, "%-8s %-12s %-12s\n", "depth", "answer", "noise");
    double ta = 0, tn = 0;
    int tc = 0;
    for (int d = 0; d < g->n_depth; d++) {
        fprintf(f, "%3d%%     %-12.4f %-12.4f\n", g->depths[d], t->att_ans[d] / t->att_n[d],
                t->att_noise[d] / t->att_n[d]);
        ta += t->att_ans[d];
        tn += t->att_noise[d];
        tc += t->att_n[d];
    }
    fprintf(f, "all      %-12.4f %-12.4f\n", ta / tc, tn / tc);
}
