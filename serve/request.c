/* Request bodies of the OpenAI endpoints (serve/request.h).
 *
 * The body goes through three passes:
 *
 *   1. drt_json_validate (include/diffrt/util.h): one JSON document as
 *      RFC 8259, Python's json and serde_json read it, so a proxy in front
 *      reads the request diffrt runs: no BOM, no whitespace but space, tab,
 *      LF and CR, no control byte inside a string (a raw newline in a
 *      prompt is "\n"), no number JSON lacks ("01", "1.", "+1", NaN), no
 *      key twice in one object (at any depth; "a" and "\u0061" are one
 *      key), nothing after the value, at most MAX_DEPTH levels. Anything
 *      else is a 400 naming the problem and its byte.
 *   2. vet(): a copy of the body, NUL-terminated, is scanned once, without
 *      recursion. It notes where each number's text lies (for exact
 *      integers: a seed may be any integer below 2^64, which a double
 *      cannot hold), and overwrites in the copy what cJSON would decode
 *      wrongly: an escaped \u0000 and an unpaired surrogate escape (\ud800
 *      alone) become 0xFF bytes, which are never valid UTF-8. cJSON copies
 *      them into the decoded string, where srv_utf8_ok() rejects them, so
 *      the error names the field instead of a string silently cut short.
 *   3. cJSON parses the copy (its length given: nothing past len is read)
 *      and each endpoint's fields are read from the tree.
 *
 * Conventions for every field: JSON null is the same as the field being
 * absent; keys are case-sensitive. Integer fields take any JSON number
 * whose value is an integer (2, 2.0, 2e0). The scalar ones (max_tokens,
 * top_k, seed, n, ...) are read exactly from their text; token ids in
 * arrays are read from the double cJSON gives (exact for every id below
 * 2^53, the bound vocab sets).
 *
 * Choices a client sees (where OpenAI, vLLM and llama.cpp differ or say
 * nothing): "stop": [] is no stop string; "top_k": -1 is off, as 0; a
 * prompt list of one ("prompt": ["text"] or [[1,2]]) is that prompt, more
 * is unsupported; text content parts are joined with no separator; an
 * assistant message without content is empty; "developer" is "system";
 * "tool_choice" / "function_call" "none" or "auto" pass (there are no
 * tools). Messages quote at most MAX_ECHO bytes of client text, printable
 * ASCII only, and otherwise name the field.
 *
 * cJSON writes a static error position on every parse (cJSON_GetErrorPtr):
 * a benign race between threads that nothing here reads. */
#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/util.h"
#include "request.h"

#define MAX_DEPTH 64  /* arrays and objects inside one another */
#define MAX_ECHO 32   /* bytes of a client's string that a message may quote */
#define SAFE_INT 2e53 /* every integer below it is exact in a double */

/* ---- errors ---------------------------------------------------------------- */

static int bad(srv_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int bad(srv_error *err, const char *param, const char *fmt, ...) {
    char msg[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return srv_error_set(err, 400, "invalid_request_error", NULL, param, "%s", msg);
}

static int unsupported(srv_error *err, const char *param, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int unsupported(srv_error *err, const char *param, const char *fmt, ...) {
    char msg[sizeof err->message];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return srv_error_set(err, 400, "invalid_request_error", "unsupported_parameter", param, "%s", msg);
}

static int oom(srv_error *err) {
    return srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory");
}

/* s when it is short printable ASCII without quotes (safe and short enough
 * to quote in a message), else NULL */
static const char *quotable(const char *s) {
    size_t n = 0;
    for (; s[n]; n++)
        if (n >= MAX_ECHO || s[n] < 0x20 || s[n] > 0x7E || s[n] == '"' || s[n] == '\\') return NULL;
    return s;
}

/* ---- pass 1: the copy, vetted ------------------------------------------------ */

typedef struct {
    size_t off, len;
} span;

typedef struct {
    char *text; /* the body, len bytes + NUL, rewritten as said above */
    size_t len;
    span *nums; /* every number's text, in document order */
    size_t n_nums, cap_nums;
} vetted;

static int hex4(const unsigned char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        unsigned c = p[i], d;
        if (c >= '0' && c <= '9')
            d = c - '0';
        else if (c >= 'a' && c <= 'f')
            d = c - 'a' + 10;
        else if (c >= 'A' && c <= 'F')
            d = c - 'A' + 10;
        else
            return 0;
        v = v << 4 | d;
    }
    *out = v;
    return 1;
}

static int is_num_char(unsigned char c) {
    return (c >= '0' && c <= '9') || c == '+' || c == '-' || c == 'e' || c == 'E' || c == '.';
}

#define BAD_ESCAPE ((size_t)-1)

/* Past the string whose opening quote is at p[i - 1]; rewrites its bad
 * escapes and NUL bytes to 0xFF. Returns the index after the closing quote
 * (or len: unterminated, which cJSON rejects), or BAD_ESCAPE for a \u not
 * followed by 4 hex digits. */
static size_t vet_string(unsigned char *p, size_t len, size_t i) {
    while (i < len) {
        unsigned c = p[i], u, v;
        if (c == '"') return i + 1;
        if (c == 0) {
            p[i++] = 0xFF;
            continue;
        }
        if (c != '\\') {
            i++;
            continue;
        }
        if (i + 1 >= len) return len;
        if (p[i + 1] != 'u') {
            i += 2; /* \" \\ \n ..., or an escape cJSON rejects */
            continue;
        }
        if (len - i < 6 || !hex4(p + i + 2, &u)) return BAD_ESCAPE; /* cJSON decodes it as U+0000 */
        int poison = u == 0 || (u >= 0xDC00 && u <= 0xDFFF);
        if (u >= 0xD800 && u <= 0xDBFF) {
            if (len - i >= 12 && p[i + 6] == '\\' && p[i + 7] == 'u' && hex4(p + i + 8, &v) && v >= 0xDC00 &&
                v <= 0xDFFF) {
                i += 12; /* a pair: one character past U+FFFF */
                continue;
            }
            poison = 1;
        }
        if (poison) memset(p + i, 0xFF, 6);
        i += 6;
    }
    return len;
}

static int vet(const char *body, size_t len, vetted *vt, srv_error *err) {
    memset(vt, 0, sizeof *vt);
    vt->text = malloc(len + 1);
    if (!vt->text) return oom(err);
    memcpy(vt->text, body, len);
    vt->text[len] = 0;
    vt->len = len;
    unsigned char *p = (unsigned char *)vt->text;
    size_t i = 0;
    while (i < len) {
        unsigned c = p[i];
        if (c == '"') {
            size_t at = i;
            if ((i = vet_string(p, len, i + 1)) == BAD_ESCAPE)
                return bad(err, NULL,
                           "the request body is not valid JSON (a \\u escape without 4 hex digits in the "
                           "string at byte %zu)",
                           at);
            continue;
        }
        if (c == '-' || (c >= '0' && c <= '9')) {
            size_t start = i;
            while (i < len && is_num_char(p[i])) i++;
            if (vt->n_nums == vt->cap_nums) {
                size_t cap = vt->cap_nums ? 2 * vt->cap_nums : 16;
                span *n = realloc(vt->nums, cap * sizeof *n);
                if (!n) return oom(err);
                vt->nums = n, vt->cap_nums = cap;
            }
            vt->nums[vt->n_nums++] = (span){start, i - start};
            continue;
        }

        i++;
    }
    return 0;
}

static void vetted_free(vetted *vt) {
    free(vt->text);
    free(vt->nums);
    memset(vt, 0, sizeof *vt);
}

/* ---- exact integers from a number's text ------------------------------------ */

/* The number text s[0..n) (as cJSON took it: -?digits[.digits][e[+-]digits])
 * as an integer: *neg and *mag, the magnitude. 0 when it is an integer below
 * 2^64 in magnitude; 1 when it has a fractional part; 2 when it is too
 * large; -1 when the text is not a number. */
static int exact_integer(const char *s, size_t n, int *neg, uint64_t *mag) {
    char dig[64]; /* the significant digits, leading zeros dropped */
    int nd = 0, nfrac = 0, seen = 0;
    size_t i = 0;
    *neg = 0, *mag = 0;
    if (i < n && s[i] == '-') *neg = 1, i++;
    for (int frac = 0; i < n; i++) {
        char c = s[i];
        if (c == '.' && !frac) {
            frac = 1;
            continue;
        }
        if (c < '0' || c > '9') break;
        seen = 1;
        if (frac) nfrac++;
        if (nd == 0 && c == '0') continue;
        if (nd == (int)sizeof dig) return -1; /* more than 64 significant digits: taken as no integer */
        dig[nd++] = c;
    }
    if (!seen) return -1;
    /* nfrac counts the digits after the point, the dropped leading zeros
     * too: dig * 10^-nfrac is the mantissa's value either way */
    long exp = 0;
    if (i < n && (s[i] == 'e' || s[i] == 'E')) {
        int eneg = 0, eseen = 0;
        i++;
        if (i < n && (s[i] == '+' || s[i] == '-')) eneg = s[i] == '-', i++;
        for (; i < n && s[i] >= '0' && s[i] <= '9'; i++) {
            eseen = 1;
            if (exp < 100000) exp = exp * 10 + (s[i] - '0');
        }
        if (!eseen) return -1;
        if (eneg) exp = -exp;
    }
    if (i != n) return -1;
    if (nd == 0) return 0; /* zero, whatever the exponent */
    /* value = dig * 10^(exp - nfrac), where dig has nd digits */
    long e = exp - nfrac;
    while (e < 0 && nd > 0 && dig[nd - 1] == '0') nd--, e++;
    if (e < 0) return 1;
    if (nd + e > 20) return 2;
    uint64_t v = 0;
    for (long k = 0; k < nd + e; k++) {
        unsigned d = k < nd ? (unsigned)(dig[k] - '0') : 0;
        if (v > (UINT64_MAX - d) / 10) return 2;
        v = v * 10 + d;
    }
    *mag = v;
    return 0;
}

/* ---- pass 2: the fields ----------------------------------------------------- */

typedef struct {
    const vetted *vt;
    const cJSON *root;
    srv_error *err;
} ctx;

/* Counts the number items before target in document order (a pre-order
 * walk; the depth is bounded by vet()). 1 when target was found. */
static int count_numbers(const cJSON *n, const cJSON *target, size_t *k) {
    if (n == target) return 1;
    if (cJSON_IsNumber(n)) ++*k;
    for (const cJSON *c = n->child; c; c = c->next)
        if (count_numbers(c, target, k)) return 1;
    return 0;
}

/* the field, or NULL when absent or null */
static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *it = cJSON_GetObjectItemCaseSensitive(obj, key);
    return cJSON_IsNull(it) ? NULL : it;
}

/* A number item's value as an exact integer: 0, or 1 for a fraction, 2 for
 * a magnitude of 2^64 or more, -1 for no number. From its text (always
 * found for a tree parsed from vet()'s copy), else from the double. */
static int exact_item(const ctx *c, const cJSON *it, int *neg, uint64_t *mag) {
    size_t k = 0;
    if (!cJSON_IsNumber(it)) return -1;
    if (count_numbers(c->root, it, &k) && k < c->vt->n_nums)
        return exact_integer(c->vt->text + c->vt->nums[k].off, c->vt->nums[k].len, neg, mag);
    double d = it->valuedouble;
    if (!isfinite(d) || fabs(d) >= SAFE_INT) return 2;
    if (d != floor(d)) return 1;
    *neg = d < 0, *mag = (uint64_t)fabs(d);
    return 0;
}

/* an integer in [lo, hi], lo >= -1 */
static int get_int(const ctx *c, const cJSON *it, const char *param, long long lo, long long hi, long long *out) {
    int neg = 0;
    uint64_t mag = 0;
    if (exact_item(c, it, &neg, &mag) == 0 && (!neg || mag <= 1) && mag <= (uint64_t)hi) {
        long long v = neg ? -(long long)mag : (long long)mag;
        if (v >= lo) {
            *out = v;
            return 0;
        }
    }
    return bad(c->err, param, "'%s' must be an integer in [%lld, %lld]", param, lo, hi);
}

/* an array element as a token id in [0, vocab) (from the double) */
static int get_id(const ctx *c, const cJSON *it, const char *param, int idx, int vocab, int32_t *out) {
    double d = cJSON_IsNumber(it) ? it->valuedouble : -1;
    long hi = vocab > 0 ? vocab : INT32_MAX;
    if (!cJSON_IsNumber(it) || !isfinite(d) || d != floor(d) || d < 0 || d >= (double)hi)
        return bad(c->err, param, "'%s[%d]' must be a token id in [0, %ld)", param, idx, hi);
    *out = (int32_t)d;
    return 0;
}

/* A number in [lo, hi] (lo excluded when lo_open). */
static int get_real(const ctx *c, const cJSON *it, const char *param, double lo, int lo_open, double hi, double *out) {
    double d = cJSON_IsNumber(it) ? it->valuedouble : NAN;
    if (!isfinite(d) || (lo_open ? d <= lo : d < lo) || d > hi)
        return bad(c->err, param, "'%s' must be a number in %c%g, %g]", param, lo_open ? '(' : '[', lo, hi);
    *out = d + 0.0; /* -0 is 0 */
    return 0;
}

static int get_bool(const ctx *c, const cJSON *it, const char *param, int *out) {
    if (!cJSON_IsBool(it)) return bad(c->err, param, "'%s' must be true or false", param);
    *out = cJSON_IsTrue(it);
    return 0;
}

/* a copy of a string item's text, checked; *out is malloc'd, NUL-terminated */
static int get_text(const ctx *c, const cJSON *it, const char *param, char **out, size_t *len) {
    if (!cJSON_IsString(it) || !it->valuestring) return bad(c->err, param, "'%s' must be a string", param);
    size_t n = strlen(it->valuestring);
    if (!srv_utf8_ok(it->valuestring, n))
        return bad(c->err, param, "'%s' must be valid UTF-8 without \\u0000 or unpaired surrogates", param);
    char *s = malloc(n + 1);
    if (!s) return oom(c->err);
    memcpy(s, it->valuestring, n + 1);
    *out = s;
    if (len) *len = n;
    return 0;
}

/* ---- fields shared by the endpoints ----------------------------------------- */

static int parse_model(const ctx *c, srv_request *r) {
    const cJSON *it = field(c->root, "model");
    return it ? get_text(c, it, "model", &r->model, NULL) : 0;
}

static int parse_stop(const ctx *c, srv_request *r) {
    const cJSON *it = field(c->root, "stop");
    if (!it) return 0;
    const char *rule = "'stop' must be a string or a list of at most 4 strings, each 1 to 256 bytes";
    if (cJSON_IsString(it)) {
        if (get_text(c, it, "stop", &r->stop[0], NULL)) return -1;
        r->n_stop = 1;
    } else if (cJSON_IsArray(it)) {
        const cJSON *e;
        cJSON_ArrayForEach(e, it) {
            if (r->n_stop == SRV_MAX_STOP || !cJSON_IsString(e)) return bad(c->err, "stop", "%s", rule);
            if (get_text(c, e, "stop", &r->stop[r->n_stop], NULL)) return -1;
            r->n_stop++;
        }
    } else {
        return bad(c->err, "stop", "%s", rule);
    }
    for (int i = 0; i < r->n_stop; i++) {
        size_t n = strlen(r->stop[i]);
        if (n < 1 || n > SRV_MAX_STOP_BYTES) return bad(c->err, "stop", "%s", rule);
    }
    return 0;
}

/* -1 (random), or an integer in [0, 2^64) */
static int parse_seed(const ctx *c, srv_request *r) {
    const cJSON *it = field(c->root, "seed");
    if (!it) return 0;
    int neg = 0;
    uint64_t mag = 0;
    if (exact_item(c, it, &neg, &mag) != 0 || (neg && mag > 1))
        return bad(c->err, "seed", "'seed' must be an integer in [0, 2^64), or -1 for a random seed");
    if (neg && mag == 1) return 0;
    r->seed = mag;
    r->seed_given = 1;
    return 0;
}

/* the sampling and streaming fields of completions and chat */
static int parse_sampling(const ctx *c, srv_request *r) {
    const cJSON *it;
    long long v;
    r->temperature = 1;
    r->top_p = 1;
    if ((it = field(c->root, "temperature")) && get_real(c, it, "temperature", 0, 0, 2, &r->temperature)) return -1;
    if ((it = field(c->root, "top_p")) && get_real(c, it, "top_p", 0, 1, 1, &r->top_p)) return -1;
    if ((it = field(c->root, "top_k"))) {
        /* -1 is "off" in vLLM (its old default) and llama.cpp, like 0 */
        if (get_int(c, it, "top_k", -1, INT_MAX, &v)) return -1;
        r->top_k = v < 0 ? 0 : (int)v;
    }
    if (parse_seed(c, r) || parse_stop(c, r)) return -1;
    if ((it = field(c->root, "stream")) && get_bool(c, it, "stream", &r->stream)) return -1;
    if ((it = field(c->root, "ignore_eos")) && get_bool(c, it, "ignore_eos", &r->ignore_eos)) return -1;
    if ((it = field(c->root, "stream_options"))) {
        if (!cJSON_IsObject(it)) return bad(c->err, "stream_options", "'stream_options' must be an object");
        if (!r->stream) return bad(c->err, "stream_options", "'stream_options' is only allowed when 'stream' is true");
        const cJSON *u = field(it, "include_usage");
        if (u && get_bool(c, u, "stream_options.include_usage", &r->include_usage)) return -1;
    }
    return 0;
}

/* the known fields that are not supported: absent, null or their neutral
 * value passes; anything else is 400 unsupported_parameter */
static int parse_unsupported(const ctx *c) {
    const cJSON *it;
    long long v;
    static const char *const one[] = {"n", "best_of"};
    for (int i = 0; i < 2; i++) {
        if (!(it = field(c->root, one[i]))) continue;
        if (get_int(c, it, one[i], 1, INT_MAX, &v)) return -1;
        if (v != 1) return unsupported(c->err, one[i], "'%s' > 1 is not supported", one[i]);
    }
    static const char *const zero[] = {"presence_penalty", "frequency_penalty", "top_logprobs"};
    for (int i = 0; i < 3; i++)
        if ((it = field(c->root, zero[i])) && !(cJSON_IsNumber(it) && it->valuedouble == 0))
            return unsupported(c->err, zero[i], "'%s' is not supported (only 0)", zero[i]);
    if ((it = field(c->root, "logprobs")) && !cJSON_IsFalse(it) && !(cJSON_IsNumber(it) && it->valuedouble == 0))
        return unsupported(c->err, "logprobs", "'logprobs' is not supported");
    if ((it = field(c->root, "echo")) && !cJSON_IsFalse(it))
        return unsupported(c->err, "echo", "'echo' is not supported");
    if ((it = field(c->root, "suffix")) && !(cJSON_IsString(it) && it->valuestring && !it->valuestring[0]))
        return unsupported(c->err, "suffix", "'suffix' is not supported");
    if ((it = field(c->root, "logit_bias")) && !(cJSON_IsObject(it) && !it->child))
        return unsupported(c->err, "logit_bias", "'logit_bias' is not supported");
    static const char *const list[] = {"tools", "functions"};
    for (int i = 0; i < 2; i++)
        if ((it = field(c->root, list[i])) && !(cJSON_IsArray(it) && !it->child))
            return unsupported(c->err, list[i], "'%s' is not supported", list[i]);
    static const char *const choice[] = {"tool_choice", "function_call"};
    for (int i = 0; i < 2; i++)
        if ((it = field(c->root, choice[i])) &&
            !(cJSON_IsString(it) && (!strcmp(it->valuestring, "none") || !strcmp(it->valuestring, "auto"))))
            return unsupported(c->err, choice[i], "'%s' is not supported (only \"none\" or \"auto\")", choice[i]);
    if ((it = field(c->root, "response_format"))) {
        const cJSON *t = cJSON_IsObject(it) ? field(it, "type") : NULL;
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text"))
            return unsupported(c->err, "response_format",
                               "'response_format' is not supported (only {\"type\":\"text\"})");
    }
    return 0;
}

/* "parse_special": completions and tokenize; for chat only false passes
 * (messages are text: the template alone writes special tokens) */
static int parse_special(const ctx *c, srv_request *r) {
    const cJSON *it = field(c->root, "parse_special");
    if (!it) return 0;
    if (get_bool(c, it, "parse_special", &r->parse_special)) return -1;
    if (r->ep == SRV_EP_CHAT && r->parse_special)
        return unsupported(c->err, "parse_special",
                           "'parse_special' is for /v1/completions and /tokenize: chat messages are always text");
    return 0;
}

/* ---- the endpoints ---------------------------------------------------------- */

/* an array of token ids, each in [0, vocab) (empty: the caller decides) */
static int parse_ids(const ctx *c, const cJSON *arr, const char *param, int vocab, int32_t **out, int *n_out) {
    int n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc(sizeof *ids * (size_t)(n > 0 ? n : 1));
    if (!ids) return oom(c->err);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, arr) {
        if (get_id(c, e, param, i, vocab, &ids[i])) {
            free(ids);
            return -1;
        }
        i++;
    }
    *out = ids;
    *n_out = n;
    return 0;
}

static int parse_prompt(const ctx *c, srv_request *r, int vocab) {
    const cJSON *it = field(c->root, "prompt");
    if (!it) return bad(c->err, "prompt", "'prompt' is required");
    /* a list of one prompt (a batch of one) is that prompt */
    if (cJSON_IsArray(it) && it->child && !it->child->next && (cJSON_IsString(it->child) || cJSON_IsArray(it->child)))
        it = it->child;
    if (cJSON_IsString(it)) return get_text(c, it, "prompt", &r->prompt_text, &r->prompt_len);
    if (!cJSON_IsArray(it)) return bad(c->err, "prompt", "'prompt' must be a string or a list of token ids");
    if (!it->child) return bad(c->err, "prompt", "'prompt' must not be an empty list");
    const cJSON *e;
    cJSON_ArrayForEach(e, it) {
        if (cJSON_IsString(e) || cJSON_IsArray(e))
            return unsupported(c->err, "prompt", "a list of prompts is not supported: send one per request");
    }
    return parse_ids(c, it, "prompt", vocab, &r->prompt_ids, &r->n_prompt_ids);
}

/* content: a string, or a list of {"type":"text","text":...} parts joined
 * as they are (no separator) */
static int parse_content(const ctx *c, const cJSON *it, int idx, srv_message *m) {
    char param[64];
    snprintf(param, sizeof param, "messages[%d].content", idx);
    if (cJSON_IsString(it)) return get_text(c, it, param, &m->content, &m->len);
    if (!cJSON_IsArray(it)) return bad(c->err, param, "'%s' must be a string or a list of text parts", param);
    size_t total = 0;
    int j = 0;
    const cJSON *part;
    cJSON_ArrayForEach(part, it) { /* check all, then join */
        snprintf(param, sizeof param, "messages[%d].content[%d]", idx, j);
        if (!cJSON_IsObject(part)) return bad(c->err, param, "'%s' must be an object", param);
        const cJSON *type = field(part, "type"), *text = field(part, "text");
        snprintf(param, sizeof param, "messages[%d].content[%d].type", idx, j);
        if (!cJSON_IsString(type)) return bad(c->err, param, "'%s' must be a string", param);
        if (strcmp(type->valuestring, "text")) {
            const char *q = quotable(type->valuestring);
            return unsupported(c->err, param, "content parts of type \"%s\" are not supported (only \"text\")",
                               q ? q : "...");
        }
        snprintf(param, sizeof param, "messages[%d].content[%d].text", idx, j);
        if (!cJSON_IsString(text)) return bad(c->err, param, "'%s' must be a string", param);
        size_t n = strlen(text->valuestring);
        if (!srv_utf8_ok(text->valuestring, n))
            return bad(c->err, param, "'%s' must be valid UTF-8 without \\u0000 or unpaired surrogates", param);
        total += n;
        j++;
    }
    m->content = malloc(total + 1);
    if (!m->content) return oom(c->err);
    m->len = 0;
    cJSON_ArrayForEach(part, it) {
        const char *s = field(part, "text")->valuestring;
        size_t n = strlen(s);
        memcpy(m->content + m->len, s, n);
        m->len += n;
    }
    m->content[m->len] = 0;
    return 0;
}

static int parse_messages(const ctx *c, srv_request *r) {
    const cJSON *it = field(c->root, "messages");
    if (!it) return bad(c->err, "messages", "'messages' is required");
    if (!cJSON_IsArray(it)) return bad(c->err, "messages", "'messages' must be a list of messages");
    int n = cJSON_GetArraySize(it);
    if (n < 1) return bad(c->err, "messages", "'messages' must not be empty");
    r->messages = calloc((size_t)n, sizeof *r->messages);
    if (!r->messages) return oom(c->err);
    char param[64];
    const cJSON *msg;
    cJSON_ArrayForEach(msg, it) {
        int i = r->n_messages;
        srv_message *m = &r->messages[i];
        snprintf(param, sizeof param, "messages[%d]", i);
        if (!cJSON_IsObject(msg)) return bad(c->err, param, "'%s' must be an object", param);
        const cJSON *role = field(msg, "role"), *content = field(msg, "content"), *calls = field(msg, "tool_calls");
        snprintf(param, sizeof param, "messages[%d].role", i);
        if (!cJSON_IsString(role)) return bad(c->err, param, "'%s' must be a string", param);
        const char *rs = role->valuestring;
        if (!strcmp(rs, "system") || !strcmp(rs, "developer"))
            m->role = SRV_ROLE_SYSTEM;
        else if (!strcmp(rs, "user"))
            m->role = SRV_ROLE_USER;
        else if (!strcmp(rs, "assistant"))
            m->role = SRV_ROLE_ASSISTANT;
        else if (!strcmp(rs, "tool") || !strcmp(rs, "function") || !strcmp(rs, "ipython"))
            return unsupported(c->err, param, "messages with role \"%s\" are not supported", rs);
        else
            return bad(c->err, param, "'%s' must be one of system, developer, user, assistant", param);
        if (calls && !(cJSON_IsArray(calls) && !calls->child)) {
            snprintf(param, sizeof param, "messages[%d].tool_calls", i);
            return unsupported(c->err, param, "'%s' is not supported", param);
        }
        if (!content && m->role == SRV_ROLE_ASSISTANT) {
            m->content = calloc(1, 1); /* an assistant turn may come without content */
            if (!m->content) return oom(c->err);
        } else if (!content) {
            snprintf(param, sizeof param, "messages[%d].content", i);
            return bad(c->err, param, "'%s' is required", param);
        } else if (parse_content(c, content, i, m)) {
            return -1;
        }
        r->n_messages++;
    }
    return 0;
}

/* completions: "max_tokens"; chat: "max_completion_tokens", else the older
 * "max_tokens" (both checked) */
static int parse_max_tokens(const ctx *c, srv_request *r) {
    long long v = 0;
    r->max_tokens = r->ep == SRV_EP_COMPLETIONS ? 16 : 0;
    static const char *const keys[] = {"max_tokens", "max_completion_tokens"};
    for (int i = 0; i < (r->ep == SRV_EP_CHAT ? 2 : 1); i++) {
        const cJSON *it = field(c->root, keys[i]);
        if (!it) continue;
        if (get_int(c, it, keys[i], 1, INT32_MAX, &v)) return -1;
        r->max_tokens = (long)v; /* max_completion_tokens, checked last, wins */
        r->max_tokens_given = 1;
    }
    return 0;
}

static int parse_fields(const ctx *c, srv_endpoint ep, int vocab, srv_request *r) {
    const cJSON *it;
    if (parse_model(c, r)) return -1;
    switch (ep) {
    case SRV_EP_COMPLETIONS:
    case SRV_EP_CHAT:
        if (ep == SRV_EP_COMPLETIONS ? parse_prompt(c, r, vocab) : parse_messages(c, r)) return -1;
        if (parse_max_tokens(c, r) || parse_sampling(c, r) || parse_unsupported(c) || parse_special(c, r)) return -1;
        return 0;
    case SRV_EP_TOKENIZE: {
        const char *key = field(c->root, "content") ? "content" : "prompt";
        if (!(it = field(c->root, key))) return bad(c->err, "content", "'content' (or 'prompt') is required");
        if (get_text(c, it, key, &r->prompt_text, &r->prompt_len)) return -1;
        r->add_special = 1;
        if ((it = field(c->root, "add_special")) && get_bool(c, it, "add_special", &r->add_special)) return -1;
        return parse_special(c, r);
    }
    case SRV_EP_DETOKENIZE:
        if (!(it = field(c->root, "tokens"))) return bad(c->err, "tokens", "'tokens' is required");
        if (!cJSON_IsArray(it)) return bad(c->err, "tokens", "'tokens' must be a list of token ids");
        return parse_ids(c, it, "tokens", vocab, &r->tokens, &r->n_tokens);
    }
    return bad(c->err, NULL, "unknown endpoint %d", (int)ep);
}

int srv_request_parse(srv_endpoint ep, const char *body, size_t len, int vocab, srv_request *out, srv_error *err) {
    if (!out) return srv_error_set(err, 500, "server_error", NULL, NULL, "srv_request_parse: no output");
    memset(out, 0, sizeof *out);
    out->ep = ep;
    if (!body) len = 0;
    size_t ws = 0;
    while (ws < len && (body[ws] == ' ' || body[ws] == '\t' || body[ws] == '\n' || body[ws] == '\r')) ws++;
    if (ws == len) return bad(err, NULL, "the request body is empty: send a JSON object");

    vetted vt;
    memset(&vt, 0, sizeof vt);
    cJSON *root = NULL;
    /* JSON as the library reads model files (drt_json_validate): what a
     * proxy in Python or Go reads is what runs, or the body is refused */
    drt_status js = drt_json_validate(body, len, "the request body", NULL, MAX_DEPTH, 0);
    if (js != DRT_OK) {
        if (js == DRT_ERR_OOM)
            oom(err);
        else
            bad(err, NULL, "%s", drt_last_error());
        goto fail;
    }
    if (vet(body, len, &vt, err)) goto fail;
    root = cJSON_ParseWithLengthOpts(vt.text, vt.len, NULL, 0);
    if (!root) {
        oom(err);
        goto fail;
    }
    if (!cJSON_IsObject(root)) {
        bad(err, NULL, "the request body must be a JSON object, not %s",
            cJSON_IsArray(root)    ? "an array"
            : cJSON_IsString(root) ? "a string"
            : cJSON_IsNumber(root) ? "a number"
            : cJSON_IsBool(root)   ? "a boolean"
                                   : "null");
        goto fail;
    }
    ctx c = {&vt, root, err};
    if (parse_fields(&c, ep, vocab, out)) goto fail;
    cJSON_Delete(root);
    vetted_free(&vt);
    return 0;
fail:
    cJSON_Delete(root);
    vetted_free(&vt);
    srv_request_free(out);
    out->ep = ep;
    return -1;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    free(r->model);
    free(r->prompt_text);
    free(r->prompt_ids);
    for (int i = 0; i < r->n_messages; i++) free(r->messages[i].content); /* content is a message's last part */
    free(r->messages);
    for (int i = 0; i < SRV_MAX_STOP; i++) free(r->stop[i]);
    free(r->tokens);
    memset(r, 0, sizeof *r);
}
