/* Byte-level BPE tokenizer from a Hugging Face tokenizer.json; see tokenizer.h.
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
 *     Oniguruma matches (PCRE2's \s also takes U+180E);
 *   - BPE: Word::merge_all (a heap ordered by merge rank then position, stale
 *     entries skipped), BPE::tokenize_with_cache for ignore_merges;
 *   - decode: ByteLevel decoder (a token whose characters are not all in the
 *     byte alphabet is taken as raw UTF-8), String::from_utf8_lossy. */
#include "diffrt/tokenizer.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "drt_error.h"
#include "diffrt/util.h" /* drt_clock_s */
#include "drt_util.h"    /* drt_mix64 */
#include "safetensors.h" /* drt_read_text_file */

#define MAX_TOKEN_ID (1 << 24)
#define MAX_SPLITS 8

/* ---- small growable vectors ------------------------------------------------ */

typedef struct {
    int32_t *v;
    size_t n, cap;
} ivec;

static int ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return 0;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return 1;
}

typedef struct {
    char *p;
    size_t n, cap;
} bbuf;

static int bbuf_put(bbuf *b, const void *src, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return 0;
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    b->p[b->n] = 0;
    return 1;
}

/* ---- UTF-8 ----------------------------------------------------------------- */

/* Length of the valid UTF-8 character at s[0..n), 0 when invalid. Strict:
 * no overlongs, no surrogates, nothing above U+10FFFF. */
static int utf8_valid_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[2] & 0xC0) != 0x80) return 0;
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return s[1] >= lo && s[1] <= hi ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return s[1] >= lo && s[1] <= hi ? 4 : 0;
    }
    return 0;
}

/* Offset of the first invalid byte, or n when s is valid UTF-8. */
static size_t utf8_check(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        int k = utf8_valid_len(u + i, n - i);
        if (!k) return i;
        i += (size_t)k;
    }
    return n;
}

/* Decodes the (valid) character at s; *len gets its byte length. */
static uint32_t utf8_decode(const unsigned char *s, int *len) {
    unsigned c = s[0];
    if (c < 0x80) return *len = 1, c;
    if (c < 0xE0) return *len = 2, ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    if (c < 0xF0) return *len = 3, ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    *len = 4;
    return ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
}

static int utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* Start of the character that ends just before s[i] (s valid UTF-8, i > 0). */
static size_t utf8_prev(const char *s, size_t i) {
    do i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

/* Unicode White_Space: Rust's char::is_whitespace, regex \s, Oniguruma \s. */
static int is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
#define WHITE_SPACE_CLASS                                                                                              \
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"                        \
    "\\x{205F}\\x{3000}"

/* Rust's String::from_utf8_lossy on b[0..n), appended to out: each maximal
 * invalid prefix becomes one U+FFFD (core::str::Utf8Chunks). When !final, a
 * truncated but so far valid character at the end is left unconsumed; the
 * return value is the number of bytes consumed (or (size_t)-1 on OOM). */
static size_t utf8_lossy(const unsigned char *b, size_t n, int final, bbuf *out) {
    static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    size_t i = 0, valid_start = 0;
    while (i < n) {
        size_t start = i;
        unsigned c = b[i++];
        int ok = 1, truncated = 0;
        if (c >= 0x80) {
            int w = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
            if (!w) ok = 0;
            for (int k = 1; ok && k < w; k++) {
                if (i == n) {
                    truncated = 1;
                    break;
                }
                unsigned d = b[i], lo = 0x80, hi = 0xBF;
                if (k == 1) {
                    if (c == 0xE0) lo = 0xA0;
                    if (c == 0xED) hi = 0x9F;
                    if (c == 0xF0) lo = 0x90;
                    if (c == 0xF4) hi = 0x8F;
                }
                if (d < lo || d > hi)
                    ok = 0;
                else
                    i++;
            }
        }
        if (ok && !truncated) continue;
        if (truncated && !final) {
            if (!bbuf_put(out, b + valid_start, start - valid_start)) return (size_t)-1;
            return start;
        }
        /* b[start..i) is one invalid chunk */
        if (!bbuf_put(out, b + valid_start, start - valid_start) || !bbuf_put(out, FFFD, 3)) return (size_t)-1;
        valid_start = i;
    }
    if (!bbuf_put(out, b + valid_start, n - valid_start)) return (size_t)-1;
    return n;
}

/* ---- hash maps -------------------------------------------------------------- */

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h ^ (h >> 29);
}

/* string -> int32; strings live in the tokenizer's arena (offset, length). */
typedef struct {
    uint32_t off, len;
    int32_t val; /* -1: empty slot */
} smap_slot;
typedef struct {
    smap_slot *slots;
    size_t mask, n;
} smap;

/* (id, id) -> (rank, new id) */
typedef struct {
    uint64_t key; /* UINT64_MAX: empty */
    int32_t rank, new_id;
} mmap_slot;
typedef struct {
    mmap_slot *slots;
    size_t mask, n;
} mmap;

/* ---- the tokenizer ---------------------------------------------------------- */

typedef struct {
    uint32_t off, len; /* content in the arena */
    int32_t id;
    unsigned char special, lstrip, rstrip, single_word, normalized;
} added_tok;

/* Added tokens of one kind (normalized or not) for leftmost-longest
 * matching: an Aho-Corasick automaton over the tokens written backwards, so
 * that one right-to-left pass over a text gives, at every position, the
 * longest token starting there (longest_from). Nodes are numbered
 * breadth-first, so the children of node v are the nodes child[v] ..
 * child[v+1]-1, sorted by the byte on their edge. */
typedef struct {
    int32_t *child;      /* n_nodes + 1 */
    unsigned char *byte; /* byte on the edge into the node */
    int32_t *fail;       /* longest proper suffix that is a node */
    int32_t *out;        /* longest token (into added[]) that is a suffix of the node, -1: none */
    int32_t n_nodes;     /* 0: no tokens of this kind */
} matcher;

enum { SPLIT_ISOLATED, SPLIT_REMOVED };
typedef struct {
    pcre2_code *re;
    int behavior, invert;
} split_step;

enum { DEC_NONE, DEC_BYTELEVEL };

typedef struct {
    uint32_t off, len;  /* 0,0 and kind 0: no token */
    unsigned char kind; /* 0 none, 1 model vocab, 2 added */
    unsigned char special;
} id_entry;

struct drt_tokenizer {
    char *arena;
    size_t arena_n, arena_cap;
    smap vocab; /* model vocab */
    smap added_map;
    mmap merges;
    id_entry *ids;
    int n_ids;           /* max id + 1 */
    int32_t vocab_count; /* entries in the model vocab (HF get_vocab_size) */
    added_tok *added;
    int n_added;
    matcher m_raw, m_norm;
    pcre2_code *word_re; /* Rust regex \w, for single_word; NULL when unused */
    split_step splits[MAX_SPLITS];
    int n_splits;
    int bl_prefix_space;
    pcre2_code *bl_re; /* the GPT-2 regex when ByteLevel use_regex */
    int ignore_merges, fuse_unk;
    int32_t unk_id;
    int32_t byte_id[256];        /* vocab id of the byte-level char of each byte */
    uint32_t byte_char[256];     /* bytes_to_unicode */
    int16_t char_byte[324];      /* inverse, -1 when none */
    int32_t *pre_ids, *post_ids; /* post-processor, single sequence */
    int n_pre, n_post;
    int decoder;
    /* every id encode makes stands for at most max_tok_bytes bytes of the
     * text when bytes_bounded (no step drops text: every byte has a token,
     * no Split "Removed", no added token strips whitespace), so a text of
     * more than max_tokens * max_tok_bytes bytes cannot fit in max_tokens */
    size_t max_tok_bytes;
    int bytes_bounded;
};

/* Parse-time state: the file name for messages. */
typedef struct {
    const char *name;
    drt_tokenizer *t;
} ctx;

static const char *arena_str(const drt_tokenizer *t, uint32_t off) {
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

static int32_t smap_get(const drt_tokenizer *t, const smap *m, const char *s, size_t n) {
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

static const mmap_slot *mmap_get(const mmap *m, int32_t a, int32_t b) {
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
                ok = bbuf_put(&o, in_class ? WHITE_SPACE_CLASS : "[" WHITE_SPACE_CLASS "]",
                              strlen(in_class ? WHITE_SPACE_CLASS : "[" WHITE_SPACE_CLASS "]"));
            else if (d == 'S' && !in_class)
                ok = bbuf_put(&o, "[^" WHITE_SPACE_CLASS "]", strlen("[^" WHITE_SPACE_CLASS "]"));
            else
                ok = bbuf_put(&o, p + i, 2);
            i += 2;
        } else if (!in_class && c == '[') {
            size_t j = i + 1;
            if (p[j] == '^') j++;
            if (p[j] == ']') j++; /* a leading ] is literal */
            ok = bbuf_put(&o, p + i, j - i);
            in_class = 1;
            i = j;
        } else if (in_class && c == '[' && p[i + 1] == ':') {
            const char *e = strstr(p + i + 2, ":]"); /* POSIX class [:alpha:] */
            size_t j = e ? (size_t)(e - p) + 2 : i + 1;
            ok = bbuf_put(&o, p + i, j - i);
            i = j;
        } else {
            if (in_class && c == ']') in_class = 0;
            ok = bbuf_put(&o, p + i, 1);
            i++;
        }
        if (!ok) {
            free(o.p);
            return NULL;
        }
    }
    if (!o.p && !bbuf_put(&o, "", 0)) return NULL;
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
        t->unk_id = smap_get(t, &t->vocab, v->valuestring, strlen(v->valuestring));
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
        int32_t ia = smap_get(t, &t->vocab, a, la), ib = smap_get(t, &t->vocab, b, lb);
        cat.n = 0;
        if (!bbuf_put(&cat, a, la) || !bbuf_put(&cat, b, lb)) {
            st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", c->name);
            break;
        }
        int32_t inew = smap_get(t, &t->vocab, cat.p, cat.n);
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
        if (!len) continue;                                    /* AddedVocabulary::add_tokens ignores empty tokens */
        if (smap_get(t, &t->added_map, s, len) >= 0) continue; /* already added */
        /* The id is recomputed as AddedVocabulary::add_tokens does: the
         * model's id when the model has the token, else the next free one.
         * (The "id" in the file is only checked by HF, with a warning.) */
        int32_t id = smap_get(t, &t->vocab, s, len);
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
static int32_t ac_child(const matcher *m, int32_t v, unsigned char c) {
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
                    while ((g = ac_child(m, f, m->byte[u])) < 0 && f) f = m->fail[f];
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
        int k = utf8_encode(cp, s);
        t->byte_id[b] = smap_get(t, &t->vocab, s, (size_t)k);
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
    size_t bad_at = utf8_check(json, len);
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
            int32_t vid = smap_get(t, &t->vocab, arena_str(t, t->added[i].off), t->added[i].len);
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
    return arena_str(t, t->ids[id].off);
}

int32_t drt_tokenizer_token_to_id(const drt_tokenizer *t, const char *token) {
    if (!t || !token) return -1;
    size_t n = strlen(token);
    int32_t id = smap_get(t, &t->added_map, token, n);
    return id >= 0 ? id : smap_get(t, &t->vocab, token, n);
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

/* ---- encoding -------------------------------------------------------------------- */

typedef struct {
    int32_t c, prev, next, len;
} symbol;
typedef struct {
    int32_t rank, pos, new_id;
} cand;

/* Scratch space of one encode call. */
typedef struct {
    const drt_tokenizer *t;
    ivec out;
    symbol *sym;
    cand *heap;
    size_t sym_cap, heap_cap, heap_n;
    bbuf tmp; /* byte-level mapped word, prefixed piece */
    pcre2_match_data *md;
    drt_status err;
    size_t max_out;   /* the caller's limit on ids; 0: none */
    int32_t *best[2]; /* longest_from of the added-token passes 1 and 2 */
    size_t best_cap[2];
    const char *text0;        /* the whole text (plain ranges are offsets into it) */
    const drt_encode_opts *o; /* the caller's choices */
    double deadline;          /* drt_clock_s() past which pre-tokenizing stops; 0: none */
    unsigned ticks;           /* regex matches since the last look at the clock */
} enc;

/* 0 (message set) once the output holds more ids than the caller allows:
 * checked after every word, so a text far over the limit stops early. */
static int within(enc *e) {
    if (!e->max_out || e->out.n <= e->max_out) return 1;
    e->err = drt_set_error(DRT_ERR_INVALID_ARG, "tokenizer: the text makes more than %zu tokens (the limit)",
                           e->max_out);
    return 0;
}

static int cand_less(const cand *a, const cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(enc *e, cand x) {
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&x, &e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = x;
}

static cand heap_pop(enc *e) {
    cand top = e->heap[0], x = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const cand *best = &x;
        if (l < n && cand_less(&e->heap[l], best)) m = l, best = &e->heap[l];
        if (l + 1 < n && cand_less(&e->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n) e->heap[i] = x;
    return top;
}

static int push_symbol(enc *e, size_t *n, int32_t id) {
    symbol *s = &e->sym[*n];
    s->c = id;
    s->prev = (int32_t)*n - 1;
    s->next = (int32_t)*n + 1;
    s->len = 1;
    (*n)++;
    return 1;
}

/* BPE of one pre-token (raw bytes); appends the ids. */
static int bpe_word(enc *e, const unsigned char *w, size_t n) {
    const drt_tokenizer *t = e->t;
    if (!n) return 1;
    if (t->ignore_merges) { /* BPE::tokenize_with_cache: the whole word when in vocab */
        e->tmp.n = 0;
        for (size_t i = 0; i < n; i++) {
            char s[4];
            int k = utf8_encode(t->byte_char[w[i]], s);
            if (!bbuf_put(&e->tmp, s, (size_t)k)) return 0;
        }
        int32_t id = smap_get(t, &t->vocab, e->tmp.p, e->tmp.n);
        if (id >= 0) return ivec_push(&e->out, id);
    }
    if (n > e->sym_cap) {
        size_t nc = n < 64 ? 64 : n;
        symbol *ns = realloc(e->sym, nc * sizeof *ns);
        cand *nh = realloc(e->heap, 3 * nc * sizeof *nh);
        if (ns) e->sym = ns;
        if (nh) e->heap = nh;
        if (!ns || !nh) return 0;
        e->sym_cap = nc;
        e->heap_cap = 3 * nc;
    }
    /* BPE::merge_word: one symbol per character of the byte-level string;
     * characters missing from the vocab become unk (fused if fuse_unk) or
     * vanish when there is no unk token */
    size_t ns = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id >= 0) {
            if (unk_pending) push_symbol(e, &ns, t->unk_id), unk_pending = 0;
            push_symbol(e, &ns, id);
        } else if (t->unk_id >= 0) {
            if (unk_pending && !t->fuse_unk) push_symbol(e, &ns, t->unk_id);
            unk_pending = 1;
        }
    }
    if (unk_pending) push_symbol(e, &ns, t->unk_id);
    if (!ns) return 1;
    e->sym[ns - 1].next = -1;

    /* Word::merge_all */
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        const mmap_slot *m = mmap_get(&t->merges, e->sym[i].c, e->sym[i + 1].c);
        if (m) heap_push(e, (cand){m->rank, (int32_t)i, m->new_id});
    }
    while (e->heap_n) {
        cand top = heap_pop(e);
        symbol *cur = &e->sym[top.pos];
        if (cur->len == 0 || cur->next == -1) continue;
        int32_t next_pos = cur->next;
        symbol right = e->sym[next_pos];
        const mmap_slot *m = mmap_get(&t->merges, cur->c, right.c);
        if (!m || m->new_id != top.new_id) continue; /* stale */
        cur->c = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        e->sym[next_pos].len = 0;
        if (right.next > -1 && (size_t)right.next < ns) e->sym[right.next].prev = top.pos;
        if (cur->prev >= 0) {
            const mmap_slot *pm = mmap_get(&t->merges, e->sym[cur->prev].c, cur->c);
            if (pm) heap_push(e, (cand){pm->rank, cur->prev, pm->new_id});
        }
        if (cur->next > -1 && (size_t)cur->next < ns) {
            const mmap_slot *nm = mmap_get(&t->merges, cur->c, e->sym[cur->next].c);
            if (nm) heap_push(e, (cand){nm->rank, top.pos, nm->new_id});
        }
    }
    for (size_t i = 0; i < ns; i++)
        if (e->sym[i].len && !ivec_push(&e->out, e->sym[i].c)) return 0;
    return 1;
}

/* pcre2_match calls regex_pieces made on this thread (tests bound it: an
 * encode over the caller's limit stops after about `limit` pieces). */
static _Thread_local size_t regex_calls;
size_t drt_tokenizer_regex_calls(void); /* for tests; not in the public header */
size_t drt_tokenizer_regex_calls(void) {
    return regex_calls;
}

/* 0 (e->err set) once the caller's time is up or it cancelled; the clock
 * is read every 16 matches (a match is bounded by PCRE2's match limit) */
static int in_time(enc *e) {
    if (e->o->cancel && *e->o->cancel) {
        e->err = drt_set_error(DRT_ERR_UNAVAILABLE, "tokenizer: cancelled");
        return 0;
    }
    if (!e->deadline || ++e->ticks % 16) return 1;
    if (drt_clock_s() <= e->deadline) return 1;
    e->err = drt_set_error(DRT_ERR_UNSUPPORTED,
                           "tokenizer: pre-tokenizing took longer than %g s (this tokenizer's regex backtracks on "
                           "the text?); refused",
                           e->o->max_seconds);
    return 0;
}

/* Takes one piece s[start..end) of a regex_pieces text, match or gap;
 * returns 0 (e->err set) to stop. */
typedef int (*piece_fn)(enc *e, void *arg, size_t start, size_t end, int match);

/* Pattern::find_matches for a regex over s[0..n): matches and the gaps
 * between them, in order, each handed to `fn` as soon as it is found. An
 * empty match only marks a boundary. So the pieces go down the steps one
 * at a time, and a text over the caller's limit stops the regex there,
 * wherever the tokens come from: splitting the whole text first ran a
 * `\p{L}*!|.` Split (quadratic in a word's length) over all of a 100 KB
 * prompt for a context of 64. Returns 0 and sets e->err on failure. */
static int regex_pieces(enc *e, const pcre2_code *re, const char *s, size_t n, piece_fn fn, void *arg) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory"), 0;
    size_t prev = 0, off = 0;
    int ok = 1;
    while (ok && off <= n) {
        regex_calls++;
        if (!in_time(e)) {
            ok = 0;
            break;
        }
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
        /* JIT code backtracks on a machine stack of fixed size (32 KiB by
         * default): a word of a few thousand letters overflows it. The
         * interpreter keeps its backtracking frames on the heap (bounded by
         * the match and heap limits, which stay in force), so the same match
         * is run there: same result, slower, only for such input. */
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            e->err = drt_set_error(DRT_ERR_UNSUPPORTED, "tokenizer: regex match failed: %s", (const char *)msg);
            ok = 0;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > prev) ok = fn(e, arg, prev, ms, 0);
        if (ok && me > ms) ok = fn(e, arg, ms, me, 1);
        prev = me;
        if (me > ms) {
            off = me;
        } else { /* empty match: search again one character later */
            if (ms >= n) break;
            int k;
            utf8_decode((const unsigned char *)s + ms, &k);
            off = ms + (size_t)k;
        }
    }
    if (ok && prev < n) ok = fn(e, arg, prev, n, 0);
    pcre2_match_data_free(md);
    return ok;
}

/* BPE of one part of a ByteLevel piece (arg: the piece), then the limit. */
static int bpe_piece(enc *e, void *arg, size_t start, size_t end, int match) {
    (void)match;
    if (!bpe_word(e, (const unsigned char *)arg + start, end - start)) {
        e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
        return 0;
    }
    return within(e);
}

/* The ByteLevel step on one piece: optional prefix space, the GPT-2 regex,
 * then BPE of each part. */
static int bytelevel_piece(enc *e, const char *s, size_t n) {
    const drt_tokenizer *t = e->t;
    char *own = NULL;
    if (t->bl_prefix_space && (n == 0 || s[0] != ' ')) {
        own = malloc(n + 1);
        if (!own) return e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory"), 0;
        own[0] = ' ';
        memcpy(own + 1, s, n);
        s = own, n = n + 1;
    }
    int ok = t->bl_re ? regex_pieces(e, t->bl_re, s, n, bpe_piece, (void *)s) : bpe_piece(e, (void *)s, 0, n, 0);
    free(own);
    return ok;
}

static int split_from(enc *e, int k, const char *s, size_t n);

typedef struct {
    const char *s;
    int k;
} split_arg;

/* A piece of Split step k: dropped when "Removed" takes it, else on to the
 * next step. */
static int split_piece(enc *e, void *arg, size_t start, size_t end, int match) {
    const split_arg *a = arg;
    const split_step *sp = &e->t->splits[a->k];
    if (sp->behavior == SPLIT_REMOVED && match != sp->invert) return 1;
    return split_from(e, a->k + 1, a->s + start, end - start);
}

/* Split steps k.. and then ByteLevel on s[0..n) (never empty: regex_pieces
 * makes no empty piece), depth first. */
static int split_from(enc *e, int k, const char *s, size_t n) {
    if (k == e->t->n_splits) return bytelevel_piece(e, s, n);
    split_arg a = {s, k};
    return regex_pieces(e, e->t->splits[k].re, s, n, split_piece, &a);
}

/* Pre-tokenizes and BPE-encodes text[0..n) (no added tokens in it). */
static int encode_plain(enc *e, const char *text, size_t n) {
    return n ? split_from(e, 0, text, n) : 1;
}

static int is_word_at(const drt_tokenizer *t, const char *s, size_t n, size_t at) {
    if (!t->word_re || at >= n) return 0;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return 0;
    int k;
    utf8_decode((const unsigned char *)s + at, &k);
    int rc = pcre2_match(t->word_re, (PCRE2_SPTR)(s + at), (size_t)k, 0, PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* Automaton steps longest_from took on this thread (tests bound it: at
 * most two per byte, however many and however long the tokens are). */
static _Thread_local size_t added_steps;
size_t drt_tokenizer_added_steps(void); /* for tests; not in the public header */
size_t drt_tokenizer_added_steps(void) {
    return added_steps;
}

/* best[i] = the longest token of m that starts at s[i] (into added[]), -1
 * when none, for every i < n. One pass from the end through the automaton
 * of the reversed tokens: a byte takes one edge down, and every failure
 * edge taken goes up, so the pass costs at most 2n steps. A match at each
 * position tried forward (as before) cost the length of the longest token
 * that fits there: 6000 added tokens 'a'*k + 'b' made a 10 KB prompt of
 * 'a's take 2 s. */
static void longest_from(const matcher *m, const char *s, size_t n, int32_t *best) {
    int32_t v = 0;
    for (size_t i = n; i-- > 0;) {
        unsigned char c = (unsigned char)s[i];
        int32_t u;
        while (added_steps++, (u = ac_child(m, v, c)) < 0 && v) v = m->fail[v];
        v = u >= 0 ? u : 0;
        best[i] = m->out[v];
    }
}

/* 1 when a special token may be read at text0[at..at+n): parse_special,
 * and no plain range overlaps it */
static int special_here(const enc *e, size_t at, size_t n) {
    if (!e->o->parse_special) return 0;
    for (int k = 0; k < e->o->n_plain; k++)
        if (at < e->o->plain[2 * k + 1] && e->o->plain[2 * k] < at + n) return 0;
    return 1;
}

/* AddedVocabulary::find_matches over s[0..n) with the tokens of m; gaps are
 * passed on to the normalized tokens (pass 1) or to encode_plain (pass 2). */
static int encode_added(enc *e, const char *s, size_t n, int pass) {
    const drt_tokenizer *t = e->t;
    const matcher *m = pass == 1 ? &t->m_raw : &t->m_norm;
    int32_t *best = NULL;
    if (m->n_nodes && n) { /* pass 1's array is in use while pass 2 runs */
        int32_t **buf = &e->best[pass - 1];
        size_t *cap = &e->best_cap[pass - 1];
        if (n > *cap) {
            free(*buf);
            *cap = 0;
            if (!(*buf = malloc(n * sizeof **buf))) {
                e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
                return 0;
            }
            *cap = n;
        }
        best = *buf;
        longest_from(m, s, n, best);
    }
    /* leftmost-longest, as the aho-corasick crate's LeftmostLongest that HF
     * uses: the first position where a token starts, the longest one there */
    size_t start_offset = 0, pos = 0;
    size_t ws_from = 1, ws_to = 0; /* s[ws_from..ws_to) is whitespace up to a non-space or n */
    while (best) {
        while (pos < n && best[pos] < 0) pos++;
        if (pos >= n) break;
        const added_tok *a = &t->added[best[pos]];
        size_t start = pos, stop = pos + a->len;
        pos = stop; /* the matcher resumes after the match, whatever is done with it */
        /* a special token where the caller wants text (HF's split_special_tokens
         * skips the match the same way: the matcher goes on after it) */
        if (t->ids[a->id].special && !special_here(e, (size_t)(s - e->text0) + start, a->len)) continue;
        if (a->single_word) {
            int start_space = start == 0 || !is_word_at(t, s, n, utf8_prev(s, start));
            int stop_space = stop == n || !is_word_at(t, s, n, stop);
            if (!start_space || !stop_space) continue;
        }
        /* The strips look at each byte once: lstrip stops at start_offset
         * (what lies before it is not taken anyway), and rstrip skips the
         * run of whitespace it already walked (matches move forward, so a
         * match ending inside that run gets the same end). Scanning the
         * whole run at every match cost text x text for a whitespace token
         * on a text of spaces. */
        if (a->lstrip) { /* start of the whitespace run that ends at start */
            size_t ns = start;
            while (ns > start_offset) {
                added_steps++;
                size_t p = utf8_prev(s, ns);
                int k;
                if (!is_white_space(utf8_decode((const unsigned char *)s + p, &k))) break;
                ns = p;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip && stop >= ws_from && stop <= ws_to) {
            stop = ws_to;
        } else if (a->rstrip) {
            ws_from = stop;
            while (stop < n) {
                added_steps++;
                int k;
                if (!is_white_space(utf8_decode((const unsigned char *)s + stop, &k))) break;
                stop += (size_t)k;
            }
            ws_to = stop;
        }
        if (start > start_offset) {
            int ok = pass == 1 ? encode_added(e, s + start_offset, start - start_offset, 2)
                               : encode_plain(e, s + start_offset, start - start_offset);
            if (!ok) return 0;
        }
        if (!ivec_push(&e->out, a->id)) {
            e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
            return 0;
        }
        if (!within(e)) return 0;
        start_offset = stop;
    }
    if (start_offset < n)
        return pass == 1 ? encode_added(e, s + start_offset, n - start_offset, 2)
                         : encode_plain(e, s + start_offset, n - start_offset);
    return 1;
}

drt_status drt_tokenizer_encode(const drt_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                                int *n_ids) {
    return drt_tokenizer_encode_max(t, text, len, add_special, 0, ids, n_ids);
}

drt_status drt_tokenizer_encode_max(const drt_tokenizer *t, const char *text, size_t len, int add_special,
                                    int max_tokens, int32_t **ids, int *n_ids) {
    drt_encode_opts o = {.add_special = add_special, .parse_special = 1, .max_tokens = max_tokens};
    return drt_tokenizer_encode_opts(t, text, len, &o, ids, n_ids);
}

drt_status drt_tokenizer_encode_opts(const drt_tokenizer *t, const char *text, size_t len, const drt_encode_opts *opts,
                                     int32_t **ids, int *n_ids) {
    static const drt_encode_opts zero;
    const drt_encode_opts *o = opts ? opts : &zero;
    int add_special = o->add_special, max_tokens = o->max_tokens;
    if (!ids || !n_ids) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_encode: ids is NULL");
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len)) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_encode: no tokenizer or text");
    size_t bad_at = utf8_check(text, len);
    if (bad_at != len)
        return drt_set_error(DRT_ERR_INVALID_ARG, "tokenizer: text is not valid UTF-8 (byte %zu of %zu is 0x%02X)",
                             bad_at, len, (unsigned char)text[bad_at]);
    if (len > (size_t)INT_MAX / 2)
        return drt_set_error(DRT_ERR_INVALID_ARG, "tokenizer: text of %zu bytes is too long", len);
    /* before any regex runs over the text: a pre-tokenizer regex can take
     * time quadratic in a word's length, so text that cannot fit is not
     * looked at */
    if (max_tokens > 0 && t->bytes_bounded && len / t->max_tok_bytes >= (size_t)max_tokens &&
        len > (size_t)max_tokens * t->max_tok_bytes)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "tokenizer: text of %zu bytes cannot fit in %d tokens (a token of this "
                             "tokenizer stands for at most %zu bytes); refused before tokenizing",
                             len, max_tokens, t->max_tok_bytes);
    if (o->n_plain < 0 || (o->n_plain && !o->plain))
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_encode_opts: %d plain ranges at %p", o->n_plain,
                             (const void *)o->plain);
    enc e = {.t = t,
             .max_out = max_tokens > 0 ? (size_t)max_tokens : 0,
             .text0 = text ? text : "",
             .o = o,
             .deadline = o->max_seconds > 0 ? drt_clock_s() + o->max_seconds : 0};
    int ok = 1;
    for (int i = 0; ok && add_special && i < t->n_pre; i++) ok = ivec_push(&e.out, t->pre_ids[i]);
    if (!ok) e.err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    if (ok) ok = within(&e);
    if (ok) ok = encode_added(&e, text ? text : "", len, 1);
    for (int i = 0; ok && add_special && i < t->n_post; i++) {
        ok = ivec_push(&e.out, t->post_ids[i]);
        if (!ok) e.err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
        if (ok) ok = within(&e);
    }
    if (ok && !e.out.v && !(e.out.v = malloc(sizeof(int32_t)))) {
        ok = 0;
        e.err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    }
    free(e.sym);
    free(e.heap);
    free(e.tmp.p);
    free(e.best[0]);
    free(e.best[1]);
    if (!ok) {
        free(e.out.v);
        return e.err ? e.err : DRT_ERR_OOM;
    }
    *ids = e.out.v;
    *n_ids = (int)e.out.n;
    return DRT_OK;
}

/* ---- decoding -------------------------------------------------------------------- */

/* Appends the bytes the decoder makes of one token (before the lossy UTF-8
 * step). Returns 0 on OOM, -1 when the id is skipped. */
static int token_bytes(const drt_tokenizer *t, int32_t id, int skip_special, int first, bbuf *out) {
    if (id < 0 || id >= t->n_ids || !t->ids[id].kind) return -1;
    if (skip_special && t->ids[id].special) return -1;
    const char *s = arena_str(t, t->ids[id].off);
    size_t n = t->ids[id].len;
    if (t->decoder == DEC_NONE) /* no decoder: tokens joined with spaces */
        return (first || bbuf_put(out, " ", 1)) && bbuf_put(out, s, n);
    size_t mark = out->n;
    for (size_t i = 0; i < n;) {
        int k;
        uint32_t cp = utf8_decode((const unsigned char *)s + i, &k);
        if (cp >= 324 || t->char_byte[cp] < 0) { /* not byte-level: the raw text */
            out->n = mark;
            return bbuf_put(out, s, n);
        }
        unsigned char b = (unsigned char)t->char_byte[cp];
        if (!bbuf_put(out, &b, 1)) return 0;
        i += (size_t)k;
    }
    return 1;
}

drt_status drt_tokenizer_decode(const drt_tokenizer *t, const int32_t *ids, int n_ids, int skip_special, char **text,
                                size_t *len) {
    if (!text) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_decode: text is NULL");
    *text = NULL;
    if (len) *len = 0;
    if (!t || n_ids < 0 || (!ids && n_ids))
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_decode: bad arguments");
    bbuf raw = {0}, out = {0};
    int first = 1, ok = 1;
    for (int i = 0; ok && i < n_ids; i++) {
        int r = token_bytes(t, ids[i], skip_special, first, &raw);
        if (r == 0) ok = 0;
        if (r == 1) first = 0;
    }
    if (ok && !raw.p) ok = bbuf_put(&raw, "", 0);
    if (ok) ok = utf8_lossy((const unsigned char *)raw.p, raw.n, 1, &out) != (size_t)-1;
    if (ok && !out.p) ok = bbuf_put(&out, "", 0);
    free(raw.p);
    if (!ok) {
        free(out.p);
        return drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    }
    *text = out.p;
    if (len) *len = out.n;
    return DRT_OK;
}

void drt_tokenizer_stream_init(drt_tokenizer_stream *st) {
    if (st) memset(st, 0, sizeof *st);
}

static drt_status stream_emit(drt_tokenizer_stream *st, const unsigned char *b, size_t n, int final, char **buf,
                              size_t *len, size_t *cap) {
    bbuf out = {*buf, *len, *cap};
    size_t used = utf8_lossy(b, n, final, &out);
    if (used == (size_t)-1) {
        *buf = out.p, *cap = out.cap;
        return drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    }
    if (!out.p && !bbuf_put(&out, "", 0)) return drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    st->n_pending = (int)(n - used);
    memmove(st->pending, b + used, n - used); /* at most 3 bytes: a truncated character */
    *buf = out.p, *len = out.n, *cap = out.cap;
    return DRT_OK;
}

drt_status drt_tokenizer_stream_push(const drt_tokenizer *t, drt_tokenizer_stream *st, int32_t id, int skip_special,
                                     char **buf, size_t *len, size_t *cap) {
    if (!t || !st || !buf || !len || !cap)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_stream_push: bad arguments");
    bbuf raw = {0};
    if (!bbuf_put(&raw, st->pending, (size_t)st->n_pending))
        return drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    int r = token_bytes(t, id, skip_special, st->n_tokens == 0, &raw);
    drt_status s = DRT_OK;
    if (r == 0) s = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    if (r == 1) st->n_tokens++;
    if (!s) s = stream_emit(st, (const unsigned char *)raw.p, raw.n, 0, buf, len, cap);
    free(raw.p);
    return s;
}

drt_status drt_tokenizer_stream_flush(const drt_tokenizer *t, drt_tokenizer_stream *st, char **buf, size_t *len,
                                      size_t *cap) {
    if (!t || !st || !buf || !len || !cap)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_stream_flush: bad arguments");
    unsigned char p[8];
    size_t n = (size_t)st->n_pending;
    memcpy(p, st->pending, n);
    return stream_emit(st, p, n, 1, buf, len, cap);
}
