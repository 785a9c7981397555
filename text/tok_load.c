/* Byte-level BPE tokenizer from a Hugging Face tokenizer.json; see
 * include/diffrt/tokenizer.h. This file reads the file into the struct of
 * tok_internal.h; tok_encode.c and tok_decode.c use it.
 *
 * Every step follows the `tokenizers` library (Rust) so that ids and decoded
 * bytes are identical; where a detail is subtle the comment names the Rust
 * function it mirrors:
 *   - added tokens: AddedVocabulary::find_matches (leftmost-longest match,
 *     single_word / lstrip / rstrip), first over the non-normalized tokens on
 *     the whole text, then over the normalized ones inside the gaps;
 *   - pre-tokenizers: Split (regex, Isolated/Removed, invert) and ByteLevel
 *     (add_prefix_space, its GPT-2 regex when use_regex); the regexes are
 *     Oniguruma syntax in the file and run here through PCRE2 (UTF + UCP),
 *     with \s and \S rewritten to Unicode White_Space, which is what
 *     Oniguruma matches (PCRE2's \s also takes U+180E). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "diffrt/util.h" /* drt_read_text_file */
#include "drt_error.h"
#include "drt_util.h" /* drt_mix64 */
#include "tok_internal.h"

/* ---- hash maps -------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* Parse-time state: the file name for messages. */
typedef struct {
    const char *name;
    drt_tokenizer *t;
} ctx;

const char *drt_tok_arena_str(const drt_tokenizer *t, uint32_t off) {
    return t->arena + off;
}

/* Copies s[0..n) plus a NUL into the arena; returns its offset or -1. */
static long arena_add(drt_tokenizer *t, const char *s, size_t n) {
    if (t->arena_n + n + 1 > t->arena_cap) {
        size_t nc = t->arena_cap ? t->arena_cap : 1 << 16;
        while (nc < t->arena_n + n + 1) nc *= 2;
        if (nc > UINT32_MAX) return -1;
        char *na = realloc(t->arena, nc);
        if (!na) return -1;
        t->arena = na;
        t->arena_cap = nc;
    }
    long off = (long)t->arena_n;
    memcpy(t->arena + off, s, n);
    t->arena[off + (long)n] = 0;
    t->arena_n += n + 1;
    return off;
}

static int smap_init(smap *m, size_t expect) {
    size_t cap = 64;
    while (cap < expect * 2) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return 0;
    for (size_t i = 0; i < cap; i++) m->slots[i].val = -1;
    m->mask = cap - 1;
    m->n = 0;
    return 1;
}

int32_t drt_tok_smap_get(const drt_tokenizer *t, const smap *m, const char *s, size_t n) {
    if (!m->slots) return -1;
    for (size_t i = hash_bytes(s, n) & m->mask;; i = (i + 1) & m->mask) {
        const smap_slot *e = &m->slots[i];
        if (e->val < 0) return -1;
        if (e->len == n && memcmp(t->arena + e->off, s, n) == 0) return e->val;
    }
}

/* Inserts (or overwrites) the arena string at off. */
static int smap_put(drt_tokenizer *t, smap *m, uint32_t off, uint32_t len, int32_t val) {
    if ((m->n + 1) * 2 > m->mask + 1) {
        smap old = *m;
        if (!smap_init(m, old.n + 1)) return *m = old, 0;
        for (size_t i = 0; i <= old.mask; i++)
            if (old.slots[i].val >= 0) smap_put(t, m, old.slots[i].off, old.slots[i].len, old.slots[i].val);
        free(old.slots);
    }
    const char *s = t->arena + off;
    for (size_t i = hash_bytes(s, len) & m->mask;; i = (i + 1) & m->mask) {
        smap_slot *e = &m->slots[i];
        if (e->val < 0) {
            *e = (smap_slot){off, len, val};
            m->n++;
            return 1;
        }
        if (e->len == len && memcmp(t->arena + e->off, s, len) == 0) {
            e->val = val;
            return 1;
        }
    }
}

static int mmap_init(mmap *m, size_t expect) {
    size_t cap = 64;
    while (cap < expect * 2) cap *= 2;
    m->slots = malloc(cap * sizeof *m->slots);
    if (!m->slots) return 0;
    for (size_t i = 0; i < cap; i++) m->slots[i].key = UINT64_MAX;
    m->mask = cap - 1;
    m->n = 0;
    return 1;
}

const mmap_slot *drt_tok_mmap_get(const mmap *m, int32_t a, int32_t b) {
    if (!m->slots) return NULL;
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = drt_mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        const mmap_slot *e = &m->slots[i];
        if (e->key == UINT64_MAX) return NULL;
        if (e->key == key) return e;
    }
}

/* A later merge of the same pair overwrites an earlier one, as a Rust
 * HashMap built from the merges list does. The map is sized up front. */
static void mmap_put(mmap *m, int32_t a, int32_t b, int32_t rank, int32_t new_id) {
    uint64_t key = ((uint64_t)(uint32_t)a << 32) | (uint32_t)b;
    for (size_t i = drt_mix64(key) & m->mask;; i = (i + 1) & m->mask) {
        mmap_slot *e = &m->slots[i];
        if (e->key == UINT64_MAX) m->n++;
        if (e->key == UINT64_MAX || e->key == key) {
            *e = (mmap_slot){key, rank, new_id};
            return;
        }
    }
}

/* ---- regexes ------------------------------------------------------------------ */

/* The regex ByteLevel(use_regex=true) applies (tokenizers' byte_level.rs). */
static const char GPT2_PATTERN[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Oniguruma pattern -> PCRE2 pattern: \s becomes White_Space (inside a class
 * its members, outside a class a class), \S outside a class its complement.
 * Everything else is passed through. Returns a malloc'd string. */
static char *onig_to_pcre2(const char *p) {
    bbuf o = {0};
    int in_class = 0;
    for (size_t i = 0; p[i];) {
        char c = p[i];
        int ok;
        if (c == '\\' && p[i + 1]) {
            char d = p[i + 1];
            if (d == 's')
                ok = drt_tok_bbuf_put(&o, in_class ? WHITE_SPACE_CLASS : "[" WHITE_SPACE_CLASS "]",
                                      strlen(in_class ? WHITE_SPACE_CLASS : "[" WHITE_SPACE_CLASS "]"));
            else if (d == 'S' && !in_class)
                ok = drt_tok_bbuf_put(&o, "[^" WHITE_SPACE_CLASS "]", strlen("[^" WHITE_SPACE_CLASS "]"));
            else
                ok = drt_tok_bbuf_put(&o, p + i, 2);
            i += 2;
        } else if (!in_class && c == '[') {
            size_t j = i + 1;
            if (p[j] == '^') j++;
            if (p[j] == ']') j++; /* a leading ] is literal */
            ok = drt_tok_bbuf_put(&o, p + i, j - i);
            in_class = 1;
            i = j;
        } else if (in_class && c == '[' && p[i + 1] == ':') {
            const char *e = strstr(p + i + 2, ":]"); /* POSIX class [:alpha:] */
            size_t j = e ? (size_t)(e - p) + 2 : i + 1;
            ok = drt_tok_bbuf_put(&o, p + i, j - i);
            i = j;
        } else {
            if (in_class && c == ']') in_class = 0;
            ok = drt_tok_bbuf_put(&o, p + i, 1);
            i++;
        }
        if (!ok) {
            free(o.p);
            return NULL;
        }
    }
    if (!o.p && !drt_tok_bbuf_put(&o, "", 0)) return NULL;
    return o.p;
}

/* A string of the file made fit for a message (drt_printable: no control
 * character or invalid byte reaches the terminal), in one of a few
 * thread-local buffers so that a message can show two. */
static const char *Pn(const char *s, size_t n) {
    static _Thread_local char ring[4][160];
    static _Thread_local unsigned next;
    char raw[400]; /* more than a buffer shows: a longer string is still cut with "..." */
    if (n > sizeof raw - 1) n = sizeof raw - 1;
    memcpy(raw, s, n);
    raw[n] = 0;
    char *buf = ring[next++ % 4];
    return drt_printable(raw, buf, sizeof ring[0]);
}

static const char *P(const char *s) {
    return Pn(s, strlen(s));
}

static drt_status compile_regex(const ctx *c, const char *field, const char *pattern, int literal, pcre2_code **out) {
    char *pat = literal ? NULL : onig_to_pcre2(pattern);
    if (!literal && !pat) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
    int err;
    PCRE2_SIZE at;
    /* PCRE2_LITERAL refuses PCRE2_UCP (which only changes classes: a
     * literal has none), so every String pattern failed to compile */
    uint32_t opts = PCRE2_UTF | (literal ? PCRE2_LITERAL : PCRE2_UCP);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(literal ? pattern : pat), PCRE2_ZERO_TERMINATED, opts, &err, &at, NULL);
    free(pat);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof msg);
        return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: %s: regex \"%s\" does not compile: %s", c->name, field,
                             P(pattern), (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* optional: the interpreter is the fallback */
    *out = re;
    return DRT_OK;
}

/* ---- loading --------------------------------------------------------------------- */

static const char *json_type_name(const cJSON *j) {
    if (!j) return "missing";
    if (cJSON_IsNull(j)) return "null";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "invalid";
}

static drt_status bad(const ctx *c, const char *field, const char *want, const cJSON *got) {
    return drt_set_error(DRT_ERR_FORMAT, "%s: %s: expected %s, got %s", c->name, field, want, json_type_name(got));
}

/* Optional boolean: absent or null gives def. */
static drt_status get_bool(const ctx *c, const cJSON *obj, const char *key, const char *field, int def, int *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (!v || cJSON_IsNull(v)) return *out = def, DRT_OK;
    if (!cJSON_IsBool(v)) return bad(c, field, "true or false", v);
    *out = cJSON_IsTrue(v);
    return DRT_OK;
}

static int json_int(const cJSON *v, int32_t lo, int32_t hi, int32_t *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (!(d >= lo && d <= hi) || d != (double)(int32_t)d) return 0;
    *out = (int32_t)d;
    return 1;
}

static const char *type_of(const cJSON *obj) {
    const cJSON *ty = cJSON_GetObjectItemCaseSensitive(obj, "type");
    return cJSON_IsString(ty) ? ty->valuestring : NULL;
}

static drt_status set_id(ctx *c, int32_t id, uint32_t off, uint32_t len, int kind) {
    drt_tokenizer *t = c->t;
    if (id >= t->n_ids) {
        int n = t->n_ids ? t->n_ids : 1024;
        while (n <= id) n *= 2;
        id_entry *ne = realloc(t->ids, (size_t)n * sizeof *ne);
        if (!ne) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
        memset(ne + t->n_ids, 0, (size_t)(n - t->n_ids) * sizeof *ne);
        t->ids = ne;
        t->n_ids = n;
    }
    /* a model id that two vocab strings share keeps the first; added tokens
     * take precedence over the model (TokenizerImpl::id_to_token) */
    if (kind == 1 && t->ids[id].kind) return DRT_OK;
    t->ids[id].off = off;
    t->ids[id].len = len;
    t->ids[id].kind = (unsigned char)kind;
    return DRT_OK;
}

static drt_status parse_model(ctx *c, const cJSON *model) {
    drt_tokenizer *t = c->t;
    if (!cJSON_IsObject(model)) return bad(c, "model", "an object", model);
    const char *type = type_of(model);
    /* old files have no model.type; a BPE model is the one with merges */
    if (!cJSON_GetObjectItemCaseSensitive(model, "type") && cJSON_GetObjectItemCaseSensitive(model, "merges"))
        type = "BPE";
    if (!type) return bad(c, "model.type", "a string", cJSON_GetObjectItemCaseSensitive(model, "type"));
    if (strcmp(type, "BPE") != 0)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "%s: model type \"%s\" is not supported (supported: BPE with ByteLevel)", c->name,
                             P(type));
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(model, "dropout");
    if (v && !cJSON_IsNull(v) && !(cJSON_IsNumber(v) && v->valuedouble == 0.0))
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "%s: model.dropout is not supported (it makes encoding random); "
                             "expected null",
                             c->name);
    int byte_fallback = 0;
    drt_status st = get_bool(c, model, "byte_fallback", "model.byte_fallback", 0, &byte_fallback);
    if (st) return st;
    if (byte_fallback)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "%s: model.byte_fallback = true is not supported (supported: BPE "
                             "with ByteLevel)",
                             c->name);
    static const char *affix[2] = {"continuing_subword_prefix", "end_of_word_suffix"};
    for (int k = 0; k < 2; k++) {
        v = cJSON_GetObjectItemCaseSensitive(model, affix[k]);
        if (v && !cJSON_IsNull(v) && !(cJSON_IsString(v) && !v->valuestring[0]))
            return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: model.%s is not supported; expected null", c->name,
                                 affix[k]);
    }
    if ((st = get_bool(c, model, "ignore_merges", "model.ignore_merges", 0, &t->ignore_merges)) ||
        (st = get_bool(c, model, "fuse_unk", "model.fuse_unk", 0, &t->fuse_unk)))
        return st;

    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (!cJSON_IsObject(vocab)) return bad(c, "model.vocab", "an object {token: id}", vocab);
    int n_vocab = cJSON_GetArraySize(vocab);
    if (!smap_init(&t->vocab, (size_t)n_vocab)) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
    for (const cJSON *e = vocab->child; e; e = e->next) {
        int32_t id;
        if (!json_int(e, 0, MAX_TOKEN_ID - 1, &id))
            return drt_set_error(DRT_ERR_FORMAT, "%s: model.vocab[\"%s\"]: expected an integer id in [0, %d)", c->name,
                                 P(e->string ? e->string : ""), MAX_TOKEN_ID);
        size_t len = strlen(e->string);
        long off = arena_add(t, e->string, len);
        if (off < 0 || !smap_put(t, &t->vocab, (uint32_t)off, (uint32_t)len, id))
            return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
        if ((st = set_id(c, id, (uint32_t)off, (uint32_t)len, 1))) return st;
    }
    t->vocab_count = (int32_t)t->vocab.n; /* distinct strings, as the Rust HashMap counts */

    v = cJSON_GetObjectItemCaseSensitive(model, "unk_token");
    t->unk_id = -1;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsString(v)) return bad(c, "model.unk_token", "a string or null", v);
        t->unk_id = drt_tok_smap_get(t, &t->vocab, v->valuestring, strlen(v->valuestring));
        if (t->unk_id < 0)
            return drt_set_error(DRT_ERR_FORMAT, "%s: model.unk_token \"%s\" is not in model.vocab", c->name,
                                 P(v->valuestring));
    }

    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    if (!cJSON_IsArray(merges))
        return bad(c, "model.merges", "an array of \"a b\" strings or [\"a\", \"b\"] pairs", merges);
    if (!mmap_init(&t->merges, (size_t)cJSON_GetArraySize(merges)))
        return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
    bbuf cat = {0};
    int rank = 0;
    st = DRT_OK;
    for (const cJSON *e = merges->child; e; e = e->next, rank++) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(e)) {
            /* "a b": exactly one space (tokenizers' convert_merges_to_hashmap) */
            const char *sp = strchr(e->valuestring, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                st = drt_set_error(DRT_ERR_FORMAT,
                                   "%s: model.merges[%d]: expected \"a b\" (two tokens and one "
                                   "space), got \"%s\"",
                                   c->name, rank, P(e->valuestring));
                break;
            }
            a = e->valuestring, la = (size_t)(sp - a);
            b = sp + 1, lb = strlen(b);
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 && cJSON_IsString(e->child) &&
                   cJSON_IsString(e->child->next)) {
            a = e->child->valuestring, la = strlen(a);
            b = e->child->next->valuestring, lb = strlen(b);
        } else {
            st = drt_set_error(DRT_ERR_FORMAT, "%s: model.merges[%d]: expected \"a b\" or [\"a\", \"b\"], got %s",
                               c->name, rank, json_type_name(e));
            break;
        }
        int32_t ia = drt_tok_smap_get(t, &t->vocab, a, la), ib = drt_tok_smap_get(t, &t->vocab, b, lb);
        cat.n = 0;
        if (!drt_tok_bbuf_put(&cat, a, la) || !drt_tok_bbuf_put(&cat, b, lb)) {
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
            break;
        }
        int32_t inew = drt_tok_smap_get(t, &t->vocab, cat.p, cat.n);
        if (ia < 0 || ib < 0 || inew < 0) {
            const char *missing = ia < 0 ? a : ib < 0 ? b : cat.p;
            int lm = (int)(ia < 0 ? la : ib < 0 ? lb : cat.n);
            st = drt_set_error(DRT_ERR_FORMAT, "%s: model.merges[%d]: token \"%s\" is not in model.vocab", c->name,
                               rank, Pn(missing, (size_t)lm));
            break;
        }
        mmap_put(&t->merges, ia, ib, rank, inew);
    }
    free(cat.p);
    return st;
}

static drt_status parse_added(ctx *c, const cJSON *added) {
    drt_tokenizer *t = c->t;
    if (!smap_init(&t->added_map, 16)) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
    if (!added || cJSON_IsNull(added)) return DRT_OK;
    if (!cJSON_IsArray(added)) return bad(c, "added_tokens", "an array", added);
    int n = cJSON_GetArraySize(added);
    t->added = calloc((size_t)n + 1, sizeof *t->added);
    if (!t->added) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
    int32_t max_id = -1;
    int k = 0;
    for (const cJSON *e = added->child; e; e = e->next, k++) {
        char field[64];
        snprintf(field, sizeof field, "added_tokens[%d]", k);
        if (!cJSON_IsObject(e)) return bad(c, field, "an object", e);
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(e, "content");
        snprintf(field, sizeof field, "added_tokens[%d].content", k);
        if (!cJSON_IsString(content)) return bad(c, field, "a string", content);
        const char *s = content->valuestring;
        size_t len = strlen(s); /* valid UTF-8, as every string of the file */
        added_tok a = {0};
        int special = 0, lstrip = 0, rstrip = 0, single_word = 0, normalized = 0;
        drt_status st;
        if ((st = get_bool(c, e, "special", "added_tokens[].special", 0, &special)) ||
            (st = get_bool(c, e, "lstrip", "added_tokens[].lstrip", 0, &lstrip)) ||
            (st = get_bool(c, e, "rstrip", "added_tokens[].rstrip", 0, &rstrip)) ||
            (st = get_bool(c, e, "single_word", "added_tokens[].single_word", 0, &single_word)) ||
            (st = get_bool(c, e, "normalized", "added_tokens[].normalized", !special, &normalized)))
            return st;
        if (!len) continue; /* AddedVocabulary::add_tokens ignores empty tokens */
        if (drt_tok_smap_get(t, &t->added_map, s, len) >= 0) continue; /* already added */
        /* The id is recomputed as AddedVocabulary::add_tokens does: the
         * model's id when the model has the token, else the next free one.
         * (The "id" in the file is only checked by HF, with a warning.) */
        int32_t id = drt_tok_smap_get(t, &t->vocab, s, len);
        if (id < 0) id = max_id >= t->vocab_count || t->vocab_count == 0 ? max_id + 1 : t->vocab_count;
        if (id >= MAX_TOKEN_ID) return drt_set_error(DRT_ERR_FORMAT, "%s: too many tokens (ids reach %d)", c->name, id);
        if (id > max_id) max_id = id;
        long off = arena_add(t, s, len);
        if (off < 0 || !smap_put(t, &t->added_map, (uint32_t)off, (uint32_t)len, id))
            return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
        a.off = (uint32_t)off, a.len = (uint32_t)len, a.id = id;
        a.special = (unsigned char)special, a.lstrip = (unsigned char)lstrip;
        a.rstrip = (unsigned char)rstrip, a.single_word = (unsigned char)single_word;
        a.normalized = (unsigned char)normalized;
        t->added[t->n_added++] = a;
        if ((st = set_id(c, id, a.off, a.len, 2))) return st;
    }
    return DRT_OK;
}

/* qsort context */
static _Thread_local struct {
    const added_tok *added;
    const char *arena;
} sort_ctx;

/* By bytes read from the end, a token before the tokens it is a suffix of
 * (contents are distinct: parse_added drops a repeat). */
static int cmp_added_rev(const void *pa, const void *pb) {
    const added_tok *a = &sort_ctx.added[*(const int32_t *)pa];
    const added_tok *b = &sort_ctx.added[*(const int32_t *)pb];
    const unsigned char *ea = (const unsigned char *)sort_ctx.arena + a->off + a->len;
    const unsigned char *eb = (const unsigned char *)sort_ctx.arena + b->off + b->len;
    size_t n = a->len < b->len ? a->len : b->len;
    for (size_t i = 1; i <= n; i++) /* ea - i: ea[-i] would add a wrapped unsigned offset */
        if (*(ea - i) != *(eb - i)) return *(ea - i) < *(eb - i) ? -1 : 1;
    return a->len != b->len ? (a->len < b->len ? -1 : 1) : 0;
}

/* Node v's child on byte c, -1 when none (a binary search of its children). */
int32_t drt_tok_ac_child(const matcher *m, int32_t v, unsigned char c) {
    int32_t lo = m->child[v], end = m->child[v + 1], hi = end;
    while (lo < hi) {
        int32_t mid = lo + (hi - lo) / 2;
        if (m->byte[mid] < c)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < end && m->byte[lo] == c ? lo : -1;
}

/* The automaton of the added tokens with normalized == `normalized`. */
static int build_matcher(drt_tokenizer *t, matcher *m, int normalized) {
    memset(m, 0, sizeof *m);
    int32_t *idx = malloc(((size_t)t->n_added + 1) * sizeof *idx);
    if (!idx) return 0;
    int n = 0;
    size_t total = 1; /* nodes: at most one per byte, plus the root */
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized) idx[n++] = i, total += t->added[i].len;
    if (!n || total > INT32_MAX) {
        free(idx);
        return !n;
    }
    sort_ctx.added = t->added;
    sort_ctx.arena = t->arena;
    qsort(idx, (size_t)n, sizeof *idx, cmp_added_rev);

    /* The trie of the reversed tokens, children as sibling lists. In this
     * order a new child always comes after its siblings, and a child that
     * is already there is the last one. */
    int32_t *first = malloc(total * sizeof *first), *last = malloc(total * sizeof *last);
    int32_t *next = malloc(total * sizeof *next), *term = malloc(total * sizeof *term);
    int32_t *order = malloc(total * sizeof *order);
    unsigned char *by = malloc(total);
    m->child = malloc((total + 1) * sizeof *m->child);
    m->byte = malloc(total);
    m->fail = malloc(total * sizeof *m->fail);
    m->out = malloc(total * sizeof *m->out);
    int ok = first && last && next && term && order && by && m->child && m->byte && m->fail && m->out;
    int32_t nn = 1;
    if (ok) {
        first[0] = last[0] = term[0] = -1;
        for (int k = 0; k < n; k++) {
            const added_tok *a = &t->added[idx[k]];
            const unsigned char *s = (const unsigned char *)t->arena + a->off;
            int32_t v = 0;
            for (size_t d = a->len; d-- > 0;) {
                int32_t u = last[v];
                if (u < 0 || by[u] != s[d]) {
                    u = nn++;
                    by[u] = s[d];
                    first[u] = last[u] = next[u] = term[u] = -1;
                    if (last[v] < 0)
                        first[v] = u;
                    else
                        next[last[v]] = u;
                    last[v] = u;
                }
                v = u;
            }
            term[v] = idx[k];
        }
        /* breadth-first numbering: a node's children become one sorted run */
        int32_t head = 0, tail = 1;
        order[0] = 0;
        m->out[0] = -1;
        for (; head < tail; head++) {
            m->child[head] = tail;
            for (int32_t u = first[order[head]]; u >= 0; u = next[u]) {
                order[tail] = u;
                m->byte[tail] = by[u];
                m->out[tail] = term[u];
                tail++;
            }
        }
        m->child[nn] = nn;
        /* failure links in that order (a node's suffix is shallower, so
         * done before it); out: the node's own token, else its suffix's */
        m->fail[0] = 0;
        for (int32_t v = 0; v < nn; v++)
            for (int32_t u = m->child[v]; u < m->child[v + 1]; u++) {
                int32_t f = 0;
                if (v) {
                    int32_t g;
                    f = m->fail[v];
                    while ((g = drt_tok_ac_child(m, f, m->byte[u])) < 0 && f) f = m->fail[f];
                    f = g >= 0 ? g : 0;
                }
                m->fail[u] = f;
                if (m->out[u] < 0) m->out[u] = m->out[f];
            }
        m->n_nodes = nn;
    }
    free(first);
    free(last);
    free(next);
    free(term);
    free(order);
    free(by);
    free(idx);
    return ok;
}

static drt_status parse_normalizer(ctx *c, const cJSON *n) {
    if (!n || cJSON_IsNull(n)) return DRT_OK;
    const char *type = cJSON_IsObject(n) ? type_of(n) : NULL;
    if (type && strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        if (cJSON_IsArray(list) && cJSON_GetArraySize(list) == 0) return DRT_OK;
        if (cJSON_IsArray(list) && list->child) n = list->child, type = type_of(n);
    }
    return drt_set_error(DRT_ERR_UNSUPPORTED,
                         "%s: normalizer type \"%s\" is not supported (supported: none, as in "
                         "GPT-2 and Llama-3 byte-level BPE)",
                         c->name, type ? P(type) : "?");
}

/* Flattens Sequence pre-tokenizers into splits[] + the final ByteLevel. */
static drt_status parse_pretok(ctx *c, const cJSON *p, int *seen_bytelevel) {
    drt_tokenizer *t = c->t;
    if (!cJSON_IsObject(p)) return bad(c, "pre_tokenizer", "an object", p);
    const char *type = type_of(p);
    if (!type) return bad(c, "pre_tokenizer.type", "a string", cJSON_GetObjectItemCaseSensitive(p, "type"));
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "pretokenizers");
        if (!cJSON_IsArray(list)) return bad(c, "pre_tokenizer.pretokenizers", "an array", list);
        for (const cJSON *e = list->child; e; e = e->next) {
            drt_status st = parse_pretok(c, e, seen_bytelevel);
            if (st) return st;
        }
        return DRT_OK;
    }
    if (*seen_bytelevel)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "%s: pre_tokenizer \"%s\" after ByteLevel is not supported "
                             "(supported: Split steps, then ByteLevel last)",
                             c->name, P(type));
    drt_status st;
    if (strcmp(type, "ByteLevel") == 0) {
        int use_regex = 0;
        if ((st = get_bool(c, p, "add_prefix_space", "pre_tokenizer.add_prefix_space", 1, &t->bl_prefix_space)) ||
            (st = get_bool(c, p, "use_regex", "pre_tokenizer.use_regex", 1, &use_regex)))
            return st;
        if (use_regex && (st = compile_regex(c, "ByteLevel", GPT2_PATTERN, 0, &t->bl_re))) return st;
        *seen_bytelevel = 1;
        return DRT_OK;
    }
    if (strcmp(type, "Split") == 0) {
        if (t->n_splits == MAX_SPLITS)
            return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: more than %d Split pre-tokenizers", c->name, MAX_SPLITS);
        split_step *s = &t->splits[t->n_splits];
        const cJSON *pat = cJSON_GetObjectItemCaseSensitive(p, "pattern");
        const cJSON *re = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "Regex") : NULL;
        const cJSON *lit = cJSON_IsObject(pat) ? cJSON_GetObjectItemCaseSensitive(pat, "String") : NULL;
        if (!cJSON_IsString(re) && !cJSON_IsString(lit))
            return bad(c, "pre_tokenizer Split.pattern", "{\"Regex\": \"...\"} or {\"String\": \"...\"}", pat);
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(p, "behavior");
        if (!cJSON_IsString(beh)) return bad(c, "pre_tokenizer Split.behavior", "a string", beh);
        if (strcmp(beh->valuestring, "Isolated") == 0)
            s->behavior = SPLIT_ISOLATED;
        else if (strcmp(beh->valuestring, "Removed") == 0)
            s->behavior = SPLIT_REMOVED;
        else
            return drt_set_error(DRT_ERR_UNSUPPORTED,
                                 "%s: pre_tokenizer Split behavior \"%s\" is not supported "
                                 "(supported: Isolated, Removed)",
                                 c->name, P(beh->valuestring));
        if ((st = get_bool(c, p, "invert", "pre_tokenizer Split.invert", 0, &s->invert))) return st;
        if (cJSON_IsString(re))
            st = compile_regex(c, "pre_tokenizer Split.pattern", re->valuestring, 0, &s->re);
        else
            st = compile_regex(c, "pre_tokenizer Split.pattern", lit->valuestring, 1, &s->re);
        if (st) return st;
        t->n_splits++;
        return DRT_OK;
    }
    return drt_set_error(DRT_ERR_UNSUPPORTED,
                         "%s: pre_tokenizer type \"%s\" is not supported (supported: BPE with "
                         "ByteLevel, optionally after Split)",
                         c->name, P(type));
}

static drt_status append_ids(ctx *c, int32_t **v, int *n, const int32_t *src, int k) {
    int32_t *nv = realloc(*v, (size_t)(*n + k + 1) * sizeof *nv);
    if (!nv) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
    if (k) memcpy(nv + *n, src, (size_t)k * sizeof *nv);
    *v = nv;
    *n += k;
    return DRT_OK;
}

/* Wraps the current pre/post ids: new pre = pre_new + pre, post = post + post_new. */
static drt_status wrap_ids(ctx *c, const int32_t *pre, int n_pre, const int32_t *post, int n_post) {
    drt_tokenizer *t = c->t;
    int32_t *np = malloc((size_t)(n_pre + t->n_pre + 1) * sizeof *np);
    if (!np) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
    if (n_pre) memcpy(np, pre, (size_t)n_pre * sizeof *np);
    if (t->n_pre) memcpy(np + n_pre, t->pre_ids, (size_t)t->n_pre * sizeof *np);
    free(t->pre_ids);
    t->pre_ids = np;
    t->n_pre += n_pre;
    return append_ids(c, &t->post_ids, &t->n_post, post, n_post);
}

static drt_status parse_post(ctx *c, const cJSON *p) {
    if (!p || cJSON_IsNull(p)) return DRT_OK;
    if (!cJSON_IsObject(p)) return bad(c, "post_processor", "an object or null", p);
    const char *type = type_of(p);
    if (!type) return bad(c, "post_processor.type", "a string", cJSON_GetObjectItemCaseSensitive(p, "type"));
    if (strcmp(type, "ByteLevel") == 0) return DRT_OK; /* only moves offsets */
    if (strcmp(type, "Sequence") == 0) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(p, "processors");
        if (!cJSON_IsArray(list)) return bad(c, "post_processor.processors", "an array", list);
        for (const cJSON *e = list->child; e; e = e->next) {
            drt_status st = parse_post(c, e);
            if (st) return st;
        }
        return DRT_OK;
    }
    if (strcmp(type, "RobertaProcessing") == 0 || strcmp(type, "BertProcessing") == 0) {
        /* single: [cls] A [sep]; cls and sep are ["token", id] */
        int32_t ids[2];
        static const char *keys[2] = {"cls", "sep"};
        for (int k = 0; k < 2; k++) {
            const cJSON *pair = cJSON_GetObjectItemCaseSensitive(p, keys[k]);
            if (!cJSON_IsArray(pair) || cJSON_GetArraySize(pair) != 2 ||
                !json_int(pair->child->next, 0, MAX_TOKEN_ID - 1, &ids[k]))
                return drt_set_error(DRT_ERR_FORMAT, "%s: post_processor.%s: expected [\"token\", id]", c->name,
                                     keys[k]);
        }
        return wrap_ids(c, &ids[0], 1, &ids[1], 1);
    }
    if (strcmp(type, "TemplateProcessing") == 0) {
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(p, "single");
        const cJSON *specials = cJSON_GetObjectItemCaseSensitive(p, "special_tokens");
        if (!cJSON_IsArray(single)) return bad(c, "post_processor.single", "an array", single);
        if (!cJSON_IsObject(specials)) return bad(c, "post_processor.special_tokens", "an object", specials);
        int32_t *pre = NULL, *post = NULL;
        int n_pre = 0, n_post = 0, seen_a = 0;
        drt_status st = DRT_OK;
        for (const cJSON *e = single->child; e && !st; e = e->next) {
            const cJSON *sp = cJSON_GetObjectItemCaseSensitive(e, "SpecialToken");
            const cJSON *seq = cJSON_GetObjectItemCaseSensitive(e, "Sequence");
            const cJSON *id = cJSON_GetObjectItemCaseSensitive(sp ? sp : seq, "id");
            if ((!sp && !seq) || !cJSON_IsString(id)) {
                st = drt_set_error(DRT_ERR_FORMAT,
                                   "%s: post_processor.single: expected {\"SpecialToken\": {\"id\": "
                                   "...}} or {\"Sequence\": {\"id\": \"A\"}} items",
                                   c->name);
            } else if (seq) {
                if (strcmp(id->valuestring, "A") != 0 || seen_a)
                    st = drt_set_error(DRT_ERR_UNSUPPORTED,
                                       "%s: post_processor.single: sequence \"%s\" (expected \"A\" "
                                       "once)",
                                       c->name, P(id->valuestring));
                seen_a = 1;
            } else {
                const cJSON *def = cJSON_GetObjectItemCaseSensitive(specials, id->valuestring);
                const cJSON *ids = cJSON_GetObjectItemCaseSensitive(def, "ids");
                if (!cJSON_IsArray(ids)) {
                    st = drt_set_error(DRT_ERR_FORMAT,
                                       "%s: post_processor.special_tokens[\"%s\"].ids: expected an "
                                       "array of ids",
                                       c->name, P(id->valuestring));
                    break;
                }
                for (const cJSON *x = ids->child; x && !st; x = x->next) {
                    int32_t v;
                    if (!json_int(x, 0, MAX_TOKEN_ID - 1, &v))
                        st = drt_set_error(DRT_ERR_FORMAT,
                                           "%s: post_processor.special_tokens[\"%s\"].ids: expected "
                                           "integer ids",
                                           c->name, P(id->valuestring));
                    else
                        st = seen_a ? append_ids(c, &post, &n_post, &v, 1) : append_ids(c, &pre, &n_pre, &v, 1);
                }
            }
        }
        if (!st && !seen_a)
            st = drt_set_error(DRT_ERR_FORMAT, "%s: post_processor.single has no sequence \"A\"", c->name);
        if (!st) st = wrap_ids(c, pre, n_pre, post, n_post);
        free(pre);
        free(post);
        return st;
    }
    return drt_set_error(DRT_ERR_UNSUPPORTED,
                         "%s: post_processor type \"%s\" is not supported (supported: ByteLevel, "
                         "TemplateProcessing, RobertaProcessing, BertProcessing, Sequence)",
                         c->name, P(type));
}

static drt_status parse_decoder(ctx *c, const cJSON *d) {
    if (!d || cJSON_IsNull(d)) return c->t->decoder = DEC_NONE, DRT_OK;
    const char *type = cJSON_IsObject(d) ? type_of(d) : NULL;
    if (type && strcmp(type, "ByteLevel") == 0) return c->t->decoder = DEC_BYTELEVEL, DRT_OK;
    return drt_set_error(DRT_ERR_UNSUPPORTED, "%s: decoder type \"%s\" is not supported (supported: ByteLevel)",
                         c->name, type ? P(type) : json_type_name(d));
}

/* bytes_to_unicode() of GPT-2: printable Latin-1 maps to itself, the other
 * bytes to U+0100 onwards in byte order. */
static void build_byte_map(drt_tokenizer *t) {
    int n = 0;
    for (int i = 0; i < 324; i++) t->char_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        uint32_t cp = printable ? (uint32_t)b : (uint32_t)(256 + n++);
        t->byte_char[b] = cp;
        t->char_byte[cp] = (int16_t)b;
        char s[4];
        int k = drt_tok_utf8_encode(cp, s);
        t->byte_id[b] = drt_tok_smap_get(t, &t->vocab, s, (size_t)k);
    }
}

void drt_tokenizer_free(drt_tokenizer *t) {
    if (!t) return;
    free(t->arena);
    free(t->vocab.slots);
    free(t->added_map.slots);
    free(t->merges.slots);
    free(t->ids);
    free(t->added);
    matcher *ms[2] = {&t->m_raw, &t->m_norm};
    for (int i = 0; i < 2; i++) {
        free(ms[i]->child);
        free(ms[i]->byte);
        free(ms[i]->fail);
        free(ms[i]->out);
    }
    pcre2_code_free(t->word_re);
    for (int i = 0; i < t->n_splits; i++) pcre2_code_free(t->splits[i].re);
    pcre2_code_free(t->bl_re);
    free(t->pre_ids);
    free(t->post_ids);
    free(t);
}

drt_status drt_tokenizer_load_json(const char *json, size_t len, const char *name, drt_tokenizer **out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_load_json: out is NULL");
    *out = NULL;
    if (!name) name = "tokenizer.json";
    if (!json) return drt_set_error(DRT_ERR_INVALID_ARG, "%s: no data", name);
    /* The whole file must be UTF-8, as HF requires (it reads the file into a
     * Rust String). Then every string cJSON makes of it is valid UTF-8 (its
     * \u escapes make only valid characters: a lone surrogate is a parse
     * error), which decoding relies on: token_bytes decodes vocab strings
     * character by character, and a truncated character at the end of the
     * string arena was read past its end. */
    size_t bad_at = drt_tok_utf8_check(json, len);
    if (bad_at != len)
        return drt_set_error(DRT_ERR_FORMAT,
                             "%s: not valid UTF-8 (byte %zu of %zu is 0x%02X); expected a UTF-8 "
                             "JSON file",
                             name, bad_at, len, (unsigned char)json[bad_at]);
    cJSON *root = NULL;
    drt_status pst = drt_json_parse(json, len, name, NULL, &root);
    if (pst != DRT_OK) return pst;
    drt_tokenizer *t = calloc(1, sizeof *t);
    if (!t) {
        cJSON_Delete(root);
        return drt_set_error(DRT_ERR_OOM, "%s: out of memory", name);
    }
    ctx c = {name, t};
    drt_status st = DRT_OK;
    int seen_bytelevel = 0;
    if (!cJSON_IsObject(root)) {
        st = bad(&c, "top level", "an object", root);
        goto done;
    }
    /* a key twice (model.vocab above all: HF keeps the last) or a NUL in a
     * string was refused by drt_json_parse rather than read differently */
    /* the model first: an unsupported model type is the most useful error */
    if ((st = parse_model(&c, cJSON_GetObjectItemCaseSensitive(root, "model"))) ||
        (st = parse_added(&c, cJSON_GetObjectItemCaseSensitive(root, "added_tokens"))) ||
        (st = parse_normalizer(&c, cJSON_GetObjectItemCaseSensitive(root, "normalizer"))))
        goto done;
    const cJSON *pre = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    if (!pre || cJSON_IsNull(pre)) {
        st = drt_set_error(DRT_ERR_UNSUPPORTED, "%s: pre_tokenizer is null; supported: BPE with ByteLevel", name);
        goto done;
    }
    if ((st = parse_pretok(&c, pre, &seen_bytelevel))) goto done;
    if (!seen_bytelevel) {
        st = drt_set_error(DRT_ERR_UNSUPPORTED,
                           "%s: pre_tokenizer has no ByteLevel step (supported: BPE with ByteLevel)", name);
        goto done;
    }
    if ((st = parse_post(&c, cJSON_GetObjectItemCaseSensitive(root, "post_processor"))) ||
        (st = parse_decoder(&c, cJSON_GetObjectItemCaseSensitive(root, "decoder"))))
        goto done;
    if (!build_matcher(t, &t->m_raw, 0) || !build_matcher(t, &t->m_norm, 1)) {
        st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", name);
        goto done;
    }
    for (int i = 0; i < t->n_added; i++) {
        if (t->added[i].special) { /* HF's is_special_token compares strings */
            int32_t vid = drt_tok_smap_get(t, &t->vocab, drt_tok_arena_str(t, t->added[i].off), t->added[i].len);
            t->ids[t->added[i].id].special = 1;
            if (vid >= 0) t->ids[vid].special = 1;
        }
        if (t->added[i].single_word && !t->word_re) {
            /* Rust regex \w: Alphabetic, marks, decimal digits, connector
             * punctuation, joiners. Older PCRE2 lack \p{Alphabetic}. */
            if (compile_regex(&c, "single_word", "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]", 0,
                              &t->word_re) != DRT_OK &&
                (st = compile_regex(&c, "single_word", "[\\p{L}\\p{Nl}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]", 0,
                                    &t->word_re)))
                goto done;
        }
    }
    for (int i = 0; i < t->n_pre; i++)
        if (t->pre_ids[i] >= t->n_ids || !t->ids[t->pre_ids[i]].kind) {
            st = drt_set_error(DRT_ERR_FORMAT, "%s: post_processor adds id %d, which names no token", name,
                               t->pre_ids[i]);
            goto done;
        }
    build_byte_map(t);
    t->max_tok_bytes = 1;
    t->bytes_bounded = 1;
    for (int i = 0; i < t->n_ids; i++)
        if (t->ids[i].kind && t->ids[i].len > t->max_tok_bytes) t->max_tok_bytes = t->ids[i].len;
    for (int b = 0; b < 256; b++)
        if (t->byte_id[b] < 0) t->bytes_bounded = 0;
    for (int i = 0; i < t->n_splits; i++)
        if (t->splits[i].behavior == SPLIT_REMOVED) t->bytes_bounded = 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].lstrip || t->added[i].rstrip) t->bytes_bounded = 0;
done:
    cJSON_Delete(root);
    if (st) {
        drt_tokenizer_free(t);
        return st;
    }
    *out = t;
    return DRT_OK;
}

drt_status drt_tokenizer_load(const char *path, drt_tokenizer **out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_load: out is NULL");
    *out = NULL;
    char *text;
    size_t len;
    drt_status st = drt_read_text_file(path, &text, &len);
    if (st) return st;
    st = drt_tokenizer_load_json(text, len, path, out);
    free(text);
    return st;
}

/* ---- queries -------------------------------------------------------------------- */

int drt_tokenizer_vocab_size(const drt_tokenizer *t) {
    if (!t) return 0;
    int n = t->n_ids;
    while (n > 0 && !t->ids[n - 1].kind) n--;
    return n;
}

const char *drt_tokenizer_id_to_token(const drt_tokenizer *t, int32_t id) {
    if (!t || id < 0 || id >= t->n_ids || !t->ids[id].kind) return NULL;
    return drt_tok_arena_str(t, t->ids[id].off);
}

int32_t drt_tokenizer_token_to_id(const drt_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    size_t n = strlen(token);
    int32_t id = drt_tok_smap_get(t, &t->added_map, token, n);
    return id >= 0 ? id : drt_tok_smap_get(t, &t->vocab, token, n);
}

int drt_tokenizer_is_special(const drt_tokenizer *t, int32_t id) {
    return t && id >= 0 && id < t->n_ids && t->ids[id].special;
}

int32_t drt_tokenizer_bos_id(const drt_tokenizer *t) {
    return t && t->n_pre ? t->pre_ids[0] : -1;
}

int32_t drt_tokenizer_eos_id(const drt_tokenizer *t) {
    static const char *const names[] = {"<|end_of_text|>", "<|endoftext|>", "</s>"};
    for (size_t i = 0; t && i < sizeof names / sizeof *names; i++) {
        int32_t id = drt_tokenizer_token_to_id(t, names[i]);
        if (id >= 0 && drt_tokenizer_is_special(t, id)) return id;
    }
    return -1;
}
