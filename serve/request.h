/* Request bodies of the OpenAI endpoints, parsed and validated (serve/request.c).
 *
 * srv_request_parse reads one JSON body for one endpoint into a srv_request,
 * checking every field it knows: types, ranges, UTF-8, token ids against the
 * vocabulary. Anything wrong is a srv_error (status 400 or 413, type
 * "invalid_request_error", param naming the field) and nothing is kept.
 * Known but unsupported fields (tools, tool_choice, response_format other
 * than {"type":"text"}, n > 1, best_of, suffix, logprobs, echo,
 * presence_penalty, frequency_penalty, logit_bias, non-text content parts)
 * are 400 with code "unsupported_parameter". Unknown fields are ignored.
 * Strict JSON (no duplicate keys, no BOM, JSON's numbers and whitespace only: request.c). The parser never reads past
 * len and accepts bodies that are not NUL-terminated. Pure: no I/O, no globals, thread-safe. */
#ifndef DRT_SRV_REQUEST_H
#define DRT_SRV_REQUEST_H

#include "srv_types.h"

typedef enum {
    SRV_EP_COMPLETIONS = 0, /* POST /v1/completions */
    SRV_EP_CHAT,            /* POST /v1/chat/completions */
    SRV_EP_TOKENIZE,        /* POST /tokenize */
    SRV_EP_DETOKENIZE,      /* POST /detokenize */
} srv_endpoint;

typedef struct {
    srv_endpoint ep;
    char *model; /* "model", or NULL when absent */

    /* completions: "prompt" as text (prompt_text != NULL, valid UTF-8, no NUL,
     * may be "") or as one array of token ids (prompt_ids, n_prompt_ids >= 1);
     * tokenize: "content" (llama.cpp) or "prompt" (vLLM) as prompt_text */
    char *prompt_text;
    size_t prompt_len;
    int32_t *prompt_ids;
    int n_prompt_ids;

    /* chat: "messages", n_messages >= 1 */
    srv_message *messages;
    int n_messages;

    /* completions: "max_tokens" (default 16, as OpenAI); chat:
     * "max_completion_tokens", else "max_tokens" (default: the context left).
     * max_tokens_given is 0 when defaulted. 1 .. 2^31-1. */
    long max_tokens;
    int max_tokens_given;

    double temperature; /* [0, 2], default 1 */
    double top_p;       /* (0, 1], default 1 */
    int top_k;          /* >= 0, 0 = off (default) */
    uint64_t seed;      /* "seed" >= 0 integer below 2^64; -1 or absent: seed_given 0 */
    int seed_given;
    char *stop[SRV_MAX_STOP]; /* "stop": a string or up to 4 strings, each 1..256 bytes of UTF-8 */
    int n_stop;
    int stream;        /* "stream" */
    int include_usage; /* "stream_options": {"include_usage": true} (only with stream) */
    int ignore_eos;    /* "ignore_eos" (vLLM, llama.cpp) */

    int add_special; /* tokenize: "add_special", default 1 */
    /* completions (text prompts) and tokenize: "parse_special", default 0:
     * special tokens spelled in the text are text (OpenAI's behaviour); true
     * reads them as the tokens (llama.cpp's raw prompts). Chat messages are
     * always text: the template alone writes special tokens. */
    int parse_special;

    /* detokenize: "tokens", each in [0, vocab) */
    int32_t *tokens;
    int n_tokens;
} srv_request;

/* Parses body[0..len) for endpoint ep. vocab bounds every token id. On
 * success fills *out (free with srv_request_free) and returns 0; else fills
 * *err, leaves *out empty and returns -1. */
int srv_request_parse(srv_endpoint ep, const char *body, size_t len, int vocab, srv_request *out, srv_error *err);
void srv_request_free(srv_request *r); /* NULL or empty: nothing */

/* ---- serve/error.c ---- */

/* Sets *err: status, type, code (may be NULL), param (may be NULL) and a
 * printf message. Returns -1. */
int srv_error_set(srv_error *err, int status, const char *type, const char *code, const char *param, const char *fmt,
                  ...) __attribute__((format(printf, 6, 7)));

/* The error's JSON body, malloc'd and NUL-terminated; NULL when out of
 * memory. */
char *srv_error_json(const srv_error *err);

/* 1 when s[0..n) is valid UTF-8 (no overlong forms, no surrogates, nothing
 * past U+10FFFF) and holds no NUL byte. */
int srv_utf8_ok(const char *s, size_t n);

/* s[0..n) as a JSON string literal, quotes included, malloc'd (NULL when
 * out of memory): every byte kept, a NUL as \u0000 (text a model
 * generates may hold one; a C string would end there). */
char *srv_json_string(const char *s, size_t n);

#endif
