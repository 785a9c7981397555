/* libFuzzer harness: the request bodies of diffrt serve (srv_request_parse,
 * serve/request.c).
 *
 * Input: byte 0 picks the endpoint (modulo 4: completions, chat, tokenize,
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
                 a->add_special == b->add_special,
             "flags differ");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
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
