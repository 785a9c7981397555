/* libFuzzer harness: what an HTTP client sends diffrt serve, its framing
 * (serve/h1.c) and its request bodies (srv_request_parse, serve/request.c).
 *
 * Input with bit 7 of byte 0 set: the rest is raw bytes off a socket, a
 * request head and what follows it (see frame() below for what must hold).
 *
 * Otherwise byte 0 picks the endpoint (modulo 4: completions, chat, tokenize,
 * detokenize), the rest is the body, parsed from libFuzzer's exact-size
 * buffer (no NUL after it) with a vocabulary of VOCAB ids. Besides "no crash,
 * no sanitizer report, no read past the body":
 *   - a refusal is a 400 (or a 500 for out of memory) of a known type with a
 *     message, valid UTF-8, and leaves the request empty;
 *   - an accepted request holds what request.h promises: every text valid
 *     UTF-8 without NUL and as long as its length says, ids in [0, VOCAB),
 *     each number in its range, at most 4 stop strings of 1..256 bytes, at
 *     least one message for chat;
 *   - written back as JSON (cJSON; the seed as its exact digits, reals with
 *     17 digits) it parses again to the same request. */
#include <cjson/cJSON.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "h1.h"
#include "harness.h"
#include "request.h"

#define VOCAB 1000

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return 0;
}

static void check_text(const char *s, size_t len, const char *what) {
    FZ_CHECK(s, "%s: NULL", what);
    FZ_CHECK(strlen(s) == len, "%s: strlen %zu, len %zu", what, strlen(s), len);
    FZ_CHECK(srv_utf8_ok(s, len), "%s: not valid UTF-8", what);
}

static void check_ids(const int32_t *ids, int n, const char *what) {
    FZ_CHECK(n >= 0 && (n == 0 || ids), "%s: %d ids at %p", what, n, (const void *)ids);
    for (int i = 0; i < n; i++) FZ_CHECK(ids[i] >= 0 && ids[i] < VOCAB, "%s[%d] = %d", what, i, (int)ids[i]);
}

static int is_empty(const srv_request *r) {
    return !r->model && !r->prompt_text && !r->prompt_ids && !r->messages && !r->tokens && !r->stop[0] &&
           !r->n_messages && !r->n_prompt_ids && !r->n_tokens && !r->n_stop && !r->prompt_len;
}

static void check_refused(const srv_request *r, const srv_error *e) {
    FZ_CHECK(e->status == 400 || e->status == 500, "refused with status %d", e->status);
    FZ_CHECK(e->type && (!strcmp(e->type, "invalid_request_error") || !strcmp(e->type, "server_error")),
             "refused with type %s", e->type ? e->type : "(null)");
    FZ_CHECK(!e->code || !strcmp(e->code, "unsupported_parameter"), "code %s", e->code);
    FZ_CHECK(e->message[0] && srv_utf8_ok(e->message, strlen(e->message)), "message empty or not UTF-8");
    FZ_CHECK(srv_utf8_ok(e->param, strlen(e->param)), "param not UTF-8");
    FZ_CHECK(is_empty(r), "a refused request holds data");
}

static void check_accepted(const srv_request *r, srv_endpoint ep) {
    FZ_CHECK(r->ep == ep, "ep %d for %d", (int)r->ep, (int)ep);
    if (r->model) check_text(r->model, strlen(r->model), "model");
    if (ep == SRV_EP_COMPLETIONS)
        FZ_CHECK(!!r->prompt_text != !!r->prompt_ids, "completions: prompt text %p, ids %p",
                 (const void *)r->prompt_text, (const void *)r->prompt_ids);
    if (ep == SRV_EP_COMPLETIONS || ep == SRV_EP_TOKENIZE) {
        if (r->prompt_text)
            check_text(r->prompt_text, r->prompt_len, "prompt");
        else
            FZ_CHECK(r->n_prompt_ids >= 1, "an empty id prompt");
        FZ_CHECK(ep == SRV_EP_COMPLETIONS || r->prompt_text, "tokenize without text");
    } else {
        FZ_CHECK(!r->prompt_text && !r->prompt_ids, "a prompt for endpoint %d", (int)ep);
    }
    check_ids(r->prompt_ids, r->n_prompt_ids, "prompt_ids");
    check_ids(r->tokens, r->n_tokens, "tokens");
    FZ_CHECK((ep == SRV_EP_CHAT) == (r->n_messages >= 1), "%d messages for endpoint %d", r->n_messages, (int)ep);
    for (int i = 0; i < r->n_messages; i++) {
        FZ_CHECK((unsigned)r->messages[i].role <= SRV_ROLE_ASSISTANT, "message %d: role %d", i,
                 (int)r->messages[i].role);
        check_text(r->messages[i].content, r->messages[i].len, "message");
    }
    FZ_CHECK(r->n_stop >= 0 && r->n_stop <= SRV_MAX_STOP, "%d stop strings", r->n_stop);
    for (int i = 0; i < SRV_MAX_STOP; i++) {
        FZ_CHECK((i < r->n_stop) == !!r->stop[i], "stop[%d] set past n_stop %d", i, r->n_stop);
        if (i >= r->n_stop) continue;
        size_t n = strlen(r->stop[i]);
        check_text(r->stop[i], n, "stop");
        FZ_CHECK(n >= 1 && n <= SRV_MAX_STOP_BYTES, "stop[%d]: %zu bytes", i, n);
    }
    if (ep == SRV_EP_COMPLETIONS || ep == SRV_EP_CHAT) {
        FZ_CHECK(r->temperature >= 0 && r->temperature <= 2, "temperature %g", r->temperature);
        FZ_CHECK(r->top_p > 0 && r->top_p <= 1, "top_p %g", r->top_p);
        FZ_CHECK(r->top_k >= 0, "top_k %d", r->top_k);
        if (r->max_tokens_given || ep == SRV_EP_COMPLETIONS)
            FZ_CHECK(r->max_tokens >= 1 && r->max_tokens <= INT32_MAX, "max_tokens %ld", r->max_tokens);
        else
            FZ_CHECK(r->max_tokens == 0, "chat: max_tokens %ld not given", r->max_tokens);
        FZ_CHECK(!r->include_usage || r->stream, "include_usage without stream");
    }
    FZ_CHECK(r->seed_given || r->seed == 0, "seed %" PRIu64 " not given", r->seed);
    FZ_CHECK(ep == SRV_EP_TOKENIZE || !r->add_special, "add_special for endpoint %d", (int)ep);
    FZ_CHECK(ep != SRV_EP_CHAT || !r->parse_special, "parse_special for chat");
}

/* ---- written back and parsed again ------------------------------------------- */

static void add_ids(cJSON *o, const char *key, const int32_t *ids, int n) {
    cJSON *a = cJSON_AddArrayToObject(o, key);
    FZ_CHECK(a, "out of memory");
    for (int i = 0; i < n; i++) FZ_CHECK(cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i])), "out of memory");
}

/* %.17g: cJSON prints 15 digits when they come back within an epsilon,
 * which is not always the same double */
static void add_real(cJSON *o, const char *key, double v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%.17g", v);
    FZ_CHECK(cJSON_AddRawToObject(o, key, buf), "out of memory");
}

static char *write_back(const srv_request *r) {
    static const char *const ROLE[] = {"system", "user", "assistant"};
    cJSON *o = cJSON_CreateObject();
    FZ_CHECK(o, "out of memory");
    if (r->model) cJSON_AddStringToObject(o, "model", r->model);
    switch (r->ep) {
    case SRV_EP_COMPLETIONS:
    case SRV_EP_TOKENIZE:
        if (r->prompt_text)
            cJSON_AddStringToObject(o, "prompt", r->prompt_text);
        else
            add_ids(o, "prompt", r->prompt_ids, r->n_prompt_ids);
        if (r->ep == SRV_EP_TOKENIZE) cJSON_AddBoolToObject(o, "add_special", r->add_special);
        cJSON_AddBoolToObject(o, "parse_special", r->parse_special);
        break;
    case SRV_EP_CHAT: {
        cJSON *a = cJSON_AddArrayToObject(o, "messages");
        for (int i = 0; i < r->n_messages; i++) {
            cJSON *m = cJSON_CreateObject();
            cJSON_AddStringToObject(m, "role", ROLE[r->messages[i].role]);
            cJSON_AddStringToObject(m, "content", r->messages[i].content);
            cJSON_AddItemToArray(a, m);
        }
        break;
    }
    case SRV_EP_DETOKENIZE: add_ids(o, "tokens", r->tokens, r->n_tokens); break;
    }
    if (r->ep == SRV_EP_COMPLETIONS || r->ep == SRV_EP_CHAT) {
        if (r->max_tokens_given) cJSON_AddNumberToObject(o, "max_tokens", (double)r->max_tokens);
        add_real(o, "temperature", r->temperature);
        add_real(o, "top_p", r->top_p);
        cJSON_AddNumberToObject(o, "top_k", r->top_k);
        if (r->seed_given) {
            char digits[24];
            snprintf(digits, sizeof digits, "%" PRIu64, r->seed);
            cJSON_AddRawToObject(o, "seed", digits);
        }
        cJSON *stop = cJSON_AddArrayToObject(o, "stop");
        for (int i = 0; i < r->n_stop; i++) cJSON_AddItemToArray(stop, cJSON_CreateString(r->stop[i]));
        cJSON_AddBoolToObject(o, "stream", r->stream);
        if (r->stream) {
            cJSON *so = cJSON_AddObjectToObject(o, "stream_options");
            cJSON_AddBoolToObject(so, "include_usage", r->include_usage);
        }
        cJSON_AddBoolToObject(o, "ignore_eos", r->ignore_eos);
    }
    char *s = cJSON_PrintUnformatted(o);
    FZ_CHECK(s, "out of memory");
    cJSON_Delete(o);
    return s;
}

static int same_text(const char *a, const char *b) {
    return (!a && !b) || (a && b && !strcmp(a, b));
}

static void check_same(const srv_request *a, const srv_request *b) {
    FZ_CHECK(same_text(a->model, b->model), "model differs");
    FZ_CHECK(same_text(a->prompt_text, b->prompt_text) && a->prompt_len == b->prompt_len, "prompt differs");
    FZ_CHECK(a->n_prompt_ids == b->n_prompt_ids &&
                 (!a->n_prompt_ids || !memcmp(a->prompt_ids, b->prompt_ids, sizeof(int32_t) * a->n_prompt_ids)),
             "prompt ids differ");
    FZ_CHECK(a->n_tokens == b->n_tokens &&
                 (!a->n_tokens || !memcmp(a->tokens, b->tokens, sizeof(int32_t) * a->n_tokens)),
             "tokens differ");
    FZ_CHECK(a->n_messages == b->n_messages, "%d messages, then %d", a->n_messages, b->n_messages);
    for (int i = 0; i < a->n_messages; i++)
        FZ_CHECK(a->messages[i].role == b->messages[i].role && a->messages[i].len == b->messages[i].len &&
                     !strcmp(a->messages[i].content, b->messages[i].content),
                 "message %d differs", i);
    FZ_CHECK(a->max_tokens == b->max_tokens && a->max_tokens_given == b->max_tokens_given, "max_tokens %ld, then %ld",
             a->max_tokens, b->max_tokens);
    FZ_CHECK(a->temperature == b->temperature && a->top_p == b->top_p && a->top_k == b->top_k,
             "sampling differs: %.17g %.17g %d, then %.17g %.17g %d", a->temperature, a->top_p, a->top_k,
             b->temperature, b->top_p, b->top_k);
    FZ_CHECK(a->seed == b->seed && a->seed_given == b->seed_given, "seed %" PRIu64 ", then %" PRIu64, a->seed, b->seed);
    FZ_CHECK(a->n_stop == b->n_stop, "%d stop strings, then %d", a->n_stop, b->n_stop);
    for (int i = 0; i < a->n_stop; i++) FZ_CHECK(!strcmp(a->stop[i], b->stop[i]), "stop[%d] differs", i);
    FZ_CHECK(a->stream == b->stream && a->include_usage == b->include_usage && a->ignore_eos == b->ignore_eos &&
                 a->add_special == b->add_special && a->parse_special == b->parse_special,
             "flags differ");
}

/* ---- the framing layer --------------------------------------------------------- */

static srv_h1_req g_r, g_r2; /* 2 KiB each: off the stack */

static void check_span(srv_h1_span s, size_t head_len, const char *what) {
    FZ_CHECK((size_t)s.off + s.len <= head_len, "%s: span %u+%u past the head (%zu)", what, s.off, s.len, head_len);
}

static void check_token(const char *b, srv_h1_span s, const char *what) {
    FZ_CHECK(s.len > 0, "%s: empty", what);
    for (uint32_t i = 0; i < s.len; i++) {
        unsigned char c = (unsigned char)b[s.off + i];
        FZ_CHECK(c > 0x20 && c < 0x7F && !strchr("\"(),/:;<=>?@[\\]{}", c), "%s: byte 0x%02x", what, c);
    }
}

/* a chunked body fed in pieces of `step` bytes (0: whole): status, data, bytes used */
static int dechunk(const char *in, size_t n, size_t step, char *out, size_t *got, size_t *used) {
    srv_h1_chunked d;
    srv_h1_chunked_init(&d);
    *got = *used = 0;
    while (*used < n && !d.done && !d.status) {
        size_t k = step && n - *used > step ? step : n - *used, g = 0;
        size_t u = srv_h1_chunked_feed(&d, in + *used, k, out + *got, n - *got, &g);
        *got += g, *used += u;
        FZ_CHECK(u == k || d.done || d.status, "chunked: stopped at %zu of %zu with room left", u, k);
    }
    FZ_CHECK(!d.status || d.msg[0], "chunked: status %d without a message", d.status);
    return d.status ? d.status : d.done ? 0 : -1;
}

/* Raw bytes as a head: a refusal has a status and a printable message; a
 * valid head has its spans inside it, a token method and field names, one
 * framing (never both a length and chunked), one Host in HTTP/1.1, and
 * reads the same with more bytes after it, never complete one byte
 * short, and the same again when written back canonically; a chunked body
 * after it decodes the same whole and a byte at a time. */
static void frame(const char *b, size_t n) {
    srv_h1_req *r = &g_r;
    int rc = srv_h1_parse_head(b, n, r);
    FZ_CHECK(rc == 0 || rc == 1, "parse_head returned %d", rc);
    if (rc == 0) return;
    if (r->status) {
        FZ_CHECK(r->status == 400 || r->status == 414 || r->status == 417 || r->status == 431 || r->status == 501 ||
                     r->status == 505,
                 "status %d", r->status);
        FZ_CHECK(r->msg[0], "status %d without a message", r->status);
        for (const char *m = r->msg; *m; m++) FZ_CHECK(*m >= 0x20 && *m < 0x7F, "message byte 0x%02x", *m);
        return;
    }
    size_t hl = r->head_len;
    FZ_CHECK(hl >= 4 && hl <= n && hl <= SRV_H1_MAX_HEAD && !memcmp(b + hl - 4, "\r\n\r\n", 4), "head_len %zu of %zu",
             hl, n);
    check_span(r->method, hl, "method");
    check_span(r->target, hl, "target");
    check_span(r->path, hl, "path");
    check_span(r->query, hl, "query");
    check_span(r->host, hl, "host");
    check_token(b, r->method, "method");
    FZ_CHECK(!(r->chunked && r->content_length >= 0), "both chunked and Content-Length %lld",
             (long long)r->content_length);
    FZ_CHECK(r->minor == 0 || r->minor == 1, "minor %d", r->minor);
    int hosts = 0;
    for (int i = 0; i < r->n_fields; i++) {
        check_span(r->fields[i].name, hl, "field name");
        check_span(r->fields[i].value, hl, "field value");
        check_token(b, r->fields[i].name, "field name");
        const srv_h1_span v = r->fields[i].value;
        for (uint32_t k = 0; k < v.len; k++) {
            unsigned char c = (unsigned char)b[v.off + k];
            FZ_CHECK(c == ' ' || c == '\t' || (c > 0x20 && c != 0x7F), "field value byte 0x%02x", c);
        }
        hosts += r->fields[i].name.len == 4 && !strncasecmp(b + r->fields[i].name.off, "host", 4);
    }
    FZ_CHECK(r->minor == 0 || hosts == 1, "HTTP/1.1 with %d Host lines", hosts);
    /* one byte short: incomplete, never an error */
    FZ_CHECK(srv_h1_parse_head(b, hl - 1, &g_r2) == 0, "complete one byte short (status %d %s)", g_r2.status, g_r2.msg);
    /* the head written back canonically frames the same */
    /* sized from the parts: the canonical form can be longer than the head
     * ("a:b\n" becomes "a: b\r\n", 2 bytes more a field) */
    size_t wn = r->method.len + 1 + r->target.len + sizeof " HTTP/1.x\r\n" + 2;
    for (int i = 0; i < r->n_fields; i++) wn += r->fields[i].name.len + 2 + r->fields[i].value.len + 2;
    char *w = malloc(wn);
    FZ_CHECK(w, "out of memory");
    size_t o = (size_t)sprintf(w, "%.*s %.*s HTTP/1.%d\r\n", (int)r->method.len, b + r->method.off, (int)r->target.len,
                               b + r->target.off, r->minor);
    for (int i = 0; i < r->n_fields; i++)
        o += (size_t)sprintf(w + o, "%.*s: %.*s\r\n", (int)r->fields[i].name.len, b + r->fields[i].name.off,
                             (int)r->fields[i].value.len, b + r->fields[i].value.off);
    o += (size_t)sprintf(w + o, "\r\n");
    FZ_CHECK(srv_h1_parse_head(w, o, &g_r2) == 1 && g_r2.status == 0, "written back: status %d %s", g_r2.status,
             g_r2.msg);
    FZ_CHECK(g_r2.content_length == r->content_length && g_r2.chunked == r->chunked &&
                 g_r2.keep_alive == r->keep_alive && g_r2.expect_continue == r->expect_continue &&
                 g_r2.host.len == r->host.len && !memcmp(w + g_r2.host.off, b + r->host.off, r->host.len) &&
                 g_r2.path.len == r->path.len && !memcmp(w + g_r2.path.off, b + r->path.off, r->path.len),
             "written back, the head frames differently");
    free(w);
    if (!r->chunked) return;
    size_t rest = n - hl, g1, u1, g2, u2;
    char *d1 = malloc(rest + 1), *d2 = malloc(rest + 1);
    FZ_CHECK(d1 && d2, "out of memory");
    int s1 = dechunk(b + hl, rest, 0, d1, &g1, &u1), s2 = dechunk(b + hl, rest, 1, d2, &g2, &u2);
    FZ_CHECK(s1 == s2 && g1 == g2 && !memcmp(d1, d2, g1) && (s1 != 0 || u1 == u2),
             "chunked: whole (%d, %zu bytes) and a byte at a time (%d, %zu bytes) differ", s1, g1, s2, g2);
    free(d1);
    free(d2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 0x80) {
        char *b = malloc(size - 1 ? size - 1 : 1); /* exact size: a read past it is a finding */
        FZ_CHECK(b, "out of memory");
        memcpy(b, data + 1, size - 1);
        frame(b, size - 1);
        free(b);
        return 0;
    }
    srv_endpoint ep = (srv_endpoint)(data[0] % 4);
    srv_request r;
    srv_error e;
    memset(&e, 0, sizeof e);
    if (srv_request_parse(ep, (const char *)data + 1, size - 1, VOCAB, &r, &e) != 0) {
        check_refused(&r, &e);
        srv_request_free(&r);
        return 0;
    }
    check_accepted(&r, ep);
    char *again = write_back(&r);
    srv_request r2;
    FZ_CHECK(srv_request_parse(ep, again, strlen(again), VOCAB, &r2, &e) == 0, "written back: refused (%s): %.200s",
             e.message, again);
    check_same(&r, &r2);
    free(again);
    srv_request_free(&r2);
    srv_request_free(&r);
    FZ_CHECK(is_empty(&r), "srv_request_free left data");
    return 0;
}
