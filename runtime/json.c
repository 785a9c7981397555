/* JSON text checked as strictly as Python's json and serde_json read it
 * (drt_json_validate, include/diffrt/util.h): one pass over the bytes, no
 * recursion, no tree. Model files (config.json, tokenizer.json, safetensors
 * headers, the shard index) and diffrt serve's request bodies go through
 * it before cJSON parses them, so what cJSON would take more laxly (a BOM,
 * any byte below 0x20 as blank, "01", "1.", a key twice, where Python keeps
 * the last one and cJSON's lookup the first) never reaches a reader.
 *
 * Duplicate keys are found as they come: every key, its escapes decoded,
 * goes into one hash table keyed by (object, bytes); the second of a pair
 * is reported with its path ($.a[2].b). */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "diffrt/util.h"

#define DEFAULT_DEPTH 512

typedef struct {
    char kind;      /* '{' or '[' */
    int state;      /* what may come next, see below */
    uint32_t id;    /* objects: the key table's object number */
    size_t index;   /* arrays: the element being read */
    size_t key_off; /* objects: the current key, decoded, in the arena */
    size_t key_len;
} frame;

/* frame states */
enum { F_FIRST, F_VALUE_OR_END, F_KEY, F_COLON, F_VALUE, F_COMMA_OR_END };

typedef struct {
    uint32_t obj, hash;
    size_t off, len;
} key_slot;

typedef struct {
    const unsigned char *t;
    size_t n, i;
    const char *name, *what;
    unsigned flags;
    frame *st;
    int depth, max_depth;
    char *arena; /* decoded keys */
    size_t arena_n, arena_cap;
    key_slot *tab; /* open addressing; len == SIZE_MAX marks an empty slot */
    size_t tab_cap, tab_n;
    uint32_t objects;
    drt_status err;
} jv;

/* "<name>: <what> " before the message, as the model files' messages read */
static drt_status jfail(jv *v, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static drt_status jfail(jv *v, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return v->err = drt_set_error(DRT_ERR_FORMAT, "%s: %s%s%s", v->name, v->what ? v->what : "", v->what ? " " : "",
                                  msg);
}

static drt_status syntax(jv *v, const char *why) {
    return jfail(v, "%snot valid JSON (error near byte %zu: %s)", v->what ? "is " : "", v->i, why);
}

static drt_status oom(jv *v) {
    return v->err = drt_set_error(DRT_ERR_OOM, "%s: out of memory", v->name);
}

/* ---- the key arena ------------------------------------------------------ */

static int put_bytes(jv *v, const void *b, size_t k) {
    if (v->arena_n + k > v->arena_cap) {
        size_t nc = v->arena_cap ? v->arena_cap * 2 : 4096;
        while (nc < v->arena_n + k) nc *= 2;
        char *na = realloc(v->arena, nc);
        if (!na) return 0;
        v->arena = na, v->arena_cap = nc;
    }
    memcpy(v->arena + v->arena_n, b, k);
    v->arena_n += k;
    return 1;
}

static int put_utf8(jv *v, unsigned cp) {
    char b[4];
    size_t k;
    if (cp < 0x80)
        b[0] = (char)cp, k = 1;
    else if (cp < 0x800)
        b[0] = (char)(0xC0 | cp >> 6), b[1] = (char)(0x80 | (cp & 0x3F)), k = 2;
    else if (cp < 0x10000)
        b[0] = (char)(0xE0 | cp >> 12), b[1] = (char)(0x80 | (cp >> 6 & 0x3F)), b[2] = (char)(0x80 | (cp & 0x3F)),
        k = 3;
    else
        b[0] = (char)(0xF0 | cp >> 18), b[1] = (char)(0x80 | (cp >> 12 & 0x3F)), b[2] = (char)(0x80 | (cp >> 6 & 0x3F)),
        b[3] = (char)(0x80 | (cp & 0x3F)), k = 4;
    return put_bytes(v, b, k);
}

/* ---- strings ----------------------------------------------------------- */

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned x = 0;
    for (int k = 0; k < 4; k++) {
        unsigned c = p[k], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'f')
            d = (c | 0x20) - 'a' + 10;
        else
            return 0;
        x = x << 4 | d;
    }
    *out = x;
    return 1;
}

/* The string whose quote is at t[i]: checked, i past its closing quote.
 * A key's bytes, decoded, go to the arena (decode). */
static int read_string(jv *v, int decode, int is_key) {
    size_t start = v->i++;
    const unsigned char *t = v->t;
    int nul = 0;
    while (v->i < v->n) {
        unsigned c = t[v->i];
        if (c == '"') {
            v->i++;
            if (nul && (v->flags & DRT_JSON_NO_NUL)) {
                char raw[200], shownb[240];
                size_t m = v->i - start - 2 < sizeof raw - 1 ? v->i - start - 2 : sizeof raw - 1;
                memcpy(raw, t + start + 1, m);
                raw[m] = 0;
                v->i = start;
                const char *kind = is_key ? "key" : "string", *sh = drt_printable(raw, shownb, sizeof shownb);
                if (nul == 1)
                    jfail(v, "%s \"%s\" (byte %zu) holds a NUL (\\u0000), which would cut it short: refused", kind, sh,
                          start);
                else
                    jfail(v, "%snot valid JSON: the %s \"%s\" (byte %zu) holds an unpaired surrogate escape",
                          v->what ? "is " : "", kind, sh, start);
                return 0;
            }
            return 1;
        }
        if (c < 0x20) {
            jfail(v,
                  "%snot valid JSON: control byte 0x%02X at byte %zu (JSON allows none in a string, only tab, LF "
                  "and CR between values)",
                  v->what ? "is " : "", c, v->i);
            return 0;
        }
        if (c != '\\') { /* bytes as they are: whoever reads the string checks its UTF-8 */
            if (decode && !put_bytes(v, t + v->i, 1)) return oom(v), 0;
            v->i++;
            continue;
        }
        if (v->i + 1 >= v->n) break;
        unsigned e = t[v->i + 1], cp = 0;
        const char *simple = strchr("\"\\/bfnrt", (int)e);
        if (e && simple) {
            static const char out[] = "\"\\/\b\f\n\r\t";
            cp = (unsigned char)out[simple - "\"\\/bfnrt"];
            v->i += 2;
        } else if (e == 'u') {
            if (v->n - v->i < 6 || !hex4(t + v->i + 2, &cp)) return syntax(v, "a \\u escape without 4 hex digits"), 0;
            v->i += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF) {
                unsigned lo;
                if (v->n - v->i >= 6 && t[v->i] == '\\' && t[v->i + 1] == 'u' && hex4(t + v->i + 2, &lo) &&
                    lo >= 0xDC00 && lo <= 0xDFFF) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    v->i += 6;
                } else {
                    nul = nul ? nul : 2, cp = 0xFFFD;
                }
            } else if (cp >= 0xDC00 && cp <= 0xDFFF) {
                nul = nul ? nul : 2, cp = 0xFFFD;
            } else if (cp == 0) {
                nul = 1;
            }
        } else {
            return syntax(v, "an escape JSON does not have"), 0;
        }
        if (decode && !put_utf8(v, cp)) return oom(v), 0;
    }
    v->i = start;
    return syntax(v, "a string without its closing quote"), 0;
}

/* ---- numbers and literals ---------------------------------------------- */

static int digits(jv *v) {
    size_t s = v->i;
    while (v->i < v->n && v->t[v->i] >= '0' && v->t[v->i] <= '9') v->i++;
    return v->i > s;
}

/* -?(0|[1-9][0-9]*)(.[0-9]+)?([eE][+-]?[0-9]+)? */
static int read_number(jv *v) {
    size_t s = v->i;
    if (v->t[v->i] == '-') v->i++;
    if (v->i < v->n && v->t[v->i] == '0') {
        v->i++;
        if (v->i < v->n && v->t[v->i] >= '0' && v->t[v->i] <= '9')
            return v->i = s, syntax(v, "a number with a leading zero"), 0;
    } else if (!digits(v)) {
        return v->i = s, syntax(v, "a number without digits"), 0;
    }
    if (v->i < v->n && v->t[v->i] == '.') {
        v->i++;
        if (!digits(v)) return v->i = s, syntax(v, "a number without digits after its point"), 0;
    }
    if (v->i < v->n && (v->t[v->i] == 'e' || v->t[v->i] == 'E')) {
        v->i++;
        if (v->i < v->n && (v->t[v->i] == '+' || v->t[v->i] == '-')) v->i++;
        if (!digits(v)) return v->i = s, syntax(v, "a number without digits in its exponent"), 0;
    }
    return 1;
}

static int read_literal(jv *v) {
    static const char *const words[] = {"true", "false", "null"};
    for (int k = 0; k < 3; k++) {
        size_t m = strlen(words[k]);
        if (v->n - v->i >= m && memcmp(v->t + v->i, words[k], m) == 0) {
            v->i += m;
            return 1;
        }
    }
    return syntax(v, "a value that is not JSON (NaN, Infinity, a bare word?)"), 0;
}

/* ---- duplicate keys ----------------------------------------------------- */

static uint32_t fnv(const char *s, size_t n, uint32_t obj) {
    uint32_t h = 2166136261u ^ obj;
    for (size_t k = 0; k < n; k++) h = (h ^ (unsigned char)s[k]) * 16777619u;
    return h;
}

/* $ and the keys and indices down to the current key of the innermost object */
static void path_of(const jv *v, char *out, size_t n) {
    size_t o = (size_t)snprintf(out, n, "$");
    for (int d = 0; d < v->depth && o < n; d++) {
        const frame *f = &v->st[d];
        if (f->kind == '[') {
            o += (size_t)snprintf(out + o, n - o, "[%zu]", f->index);
        } else {
            char kb[128];
            char *k = malloc(f->key_len + 1);
            if (!k) break;
            memcpy(k, v->arena + f->key_off, f->key_len);
            k[f->key_len] = 0;
            o += (size_t)snprintf(out + o, n - o, ".%s", drt_printable(k, kb, sizeof kb));
            free(k);
        }
    }
}

/* Adds the key just decoded at arena[off..) to object obj: 0 (message set)
 * when the object has it already. */
static int add_key(jv *v, uint32_t obj, size_t off, size_t len) {
    if (2 * (v->tab_n + 1) > v->tab_cap) {
        size_t nc = v->tab_cap ? v->tab_cap * 2 : 256;
        key_slot *nt = malloc(nc * sizeof *nt);
        if (!nt) return oom(v), 0;
        for (size_t k = 0; k < nc; k++) nt[k].len = SIZE_MAX;
        for (size_t k = 0; k < v->tab_cap; k++) {
            if (v->tab[k].len == SIZE_MAX) continue;
            size_t h = v->tab[k].hash & (nc - 1);
            while (nt[h].len != SIZE_MAX) h = (h + 1) & (nc - 1);
            nt[h] = v->tab[k];
        }
        free(v->tab);
        v->tab = nt, v->tab_cap = nc;
    }
    uint32_t hash = fnv(v->arena + off, len, obj);
    size_t h = hash & (v->tab_cap - 1);
    while (v->tab[h].len != SIZE_MAX) {
        const key_slot *s = &v->tab[h];
        if (s->obj == obj && s->hash == hash && s->len == len && memcmp(v->arena + s->off, v->arena + off, len) == 0) {
            char path[400], kb[200];
            char *k = malloc(len + 1);
            if (!k) return oom(v), 0;
            memcpy(k, v->arena + off, len);
            k[len] = 0;
            path_of(v, path, sizeof path);
            jfail(v, "duplicate key \"%s\" (at %s)", drt_printable(k, kb, sizeof kb), path);
            free(k);
            return 0;
        }
        h = (h + 1) & (v->tab_cap - 1);
    }
    v->tab[h] = (key_slot){obj, hash, off, len};
    v->tab_n++;
    return 1;
}

/* ---- the grammar -------------------------------------------------------- */

static void skip_ws(jv *v) {
    while (v->i < v->n && (v->t[v->i] == ' ' || v->t[v->i] == '\t' || v->t[v->i] == '\n' || v->t[v->i] == '\r')) v->i++;
}

/* A value's first byte at t[i]: a scalar is read whole; '[' or '{' opens a
 * frame. 0 on an error. */
static int start_value(jv *v) {
    unsigned c = v->t[v->i];
    if (c == '"') return read_string(v, 0, 0);
    if (c == '-' || (c >= '0' && c <= '9')) return read_number(v);
    if (c == '[' || c == '{') {
        if (v->depth == v->max_depth) {
            jfail(v, "%snot valid JSON: nested deeper than %d levels at byte %zu", v->what ? "is " : "", v->max_depth,
                  v->i);
            return 0;
        }
        frame *f = &v->st[v->depth++];
        *f = (frame){.kind = (char)c, .state = F_FIRST, .id = c == '{' ? v->objects++ : 0};
        v->i++;
        return 1;
    }
    return read_literal(v);
}

/* One step inside the innermost frame. */
static int step(jv *v) {
    frame *f = &v->st[v->depth - 1];
    unsigned c = v->t[v->i];
    int obj = f->kind == '{';
    char close = obj ? '}' : ']';
    switch (f->state) {
    case F_FIRST:
        if (c == (unsigned)close) {
            v->i++, v->depth--;
            return 1;
        }
        f->state = obj ? F_KEY : F_VALUE;
        return 1;
    case F_KEY:
        if (c != '"') return syntax(v, "an object member without a key string"), 0;
        f->key_off = v->arena_n;
        if (!read_string(v, 1, 1)) return 0;
        f->key_len = v->arena_n - f->key_off;
        if (!add_key(v, f->id, f->key_off, f->key_len)) return 0;
        f->state = F_COLON;
        return 1;
    case F_COLON:
        if (c != ':') return syntax(v, "a key without ':' after it"), 0;
        v->i++;
        f->state = F_VALUE;
        return 1;
    case F_VALUE: f->state = F_COMMA_OR_END; return start_value(v);
    case F_COMMA_OR_END:
        if (c == ',') {
            v->i++;
            f->index++;
            f->state = obj ? F_KEY : F_VALUE;
            return 1;
        }
        if (c != (unsigned)close)
            return syntax(v, obj ? "an object member not followed by ',' or '}'"
                                 : "an array element not followed by ',' or ']'"),
                   0;
        v->i++, v->depth--;
        return 1;
    }
    return 0;
}

drt_status drt_json_validate(const char *text, size_t len, const char *name, const char *what, int max_depth,
                             unsigned flags) {
    jv v = {.t = (const unsigned char *)text, .n = len, .name = name ? name : "JSON", .what = what, .flags = flags};
    v.max_depth = max_depth > 0 ? max_depth : DEFAULT_DEPTH;
    /* cJSON skips a BOM; json.loads raises on one (transformers reads
     * config.json as utf-8, not utf-8-sig) and so does serde_json */
    if (len >= 3 && memcmp(text, "\xEF\xBB\xBF", 3) == 0)
        return jfail(&v, "starts with a UTF-8 byte order mark (EF BB BF), which Python's json, serde_json and "
                         "Hugging Face refuse; save it without one");
    /* the arena is never NULL: an empty key is an offset into it too */
    v.arena_cap = 256;
    v.st = malloc(sizeof *v.st * (size_t)v.max_depth);
    v.arena = malloc(v.arena_cap);
    if (!v.st || !v.arena) {
        free(v.st);
        free(v.arena);
        return oom(&v);
    }
    int ok = 1, began = 0;
    for (;;) {
        skip_ws(&v);
        if (v.i == v.n) break;
        if (v.t[v.i] < 0x20) { /* cJSON takes any byte below 0x20 as blank */
            jfail(&v,
                  "%snot valid JSON: control byte 0x%02X at byte %zu (JSON allows none in a string, only tab, LF "
                  "and CR between values)",
                  v.what ? "is " : "", v.t[v.i], v.i);
            ok = 0;
            break;
        }
        if (!began) {
            began = 1;
            ok = start_value(&v);
        } else if (v.depth) {
            ok = step(&v);
        } else {
            /* cJSON stops after the value; json.loads raises "Extra data" */
            jfail(&v, "%snot valid JSON: text after the value at byte %zu (Python's json: \"Extra data\")",
                  v.what ? "is " : "", v.i);
            ok = 0;
        }
        if (!ok) break;
    }
    if (ok && !began) ok = (syntax(&v, "no value"), 0);
    if (ok && v.depth) ok = (syntax(&v, "the text ends inside an array or object"), 0);
    free(v.st);
    free(v.arena);
    free(v.tab);
    return ok ? DRT_OK : v.err;
}
