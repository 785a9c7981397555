/* The request-body parser of diffrt serve (serve/request.c):
 *   - a table of good bodies: every field of the parsed request is rendered
 *     as text and compared, those a case does not name with the endpoint's
 *     defaults;
 *   - a table of bad bodies (docs SERVE.md section 3: bad JSON, bad values,
 *     bad text, empty, unsupported fields): each must be a 400 (or the
 *     status named) with the param and code named, a message that quotes at
 *     most 64 bytes of the body, and an empty request left behind;
 *   - bodies the table cannot hold: 10 000-deep nesting, the depth limit's
 *     edge, raw NUL bytes, invalid UTF-8, an empty body;
 *   - every prefix of every good body fails cleanly.
 * Every body is parsed from an exact-size malloc'd buffer with no NUL after
 * it, so a read past len is a heap overflow under ASan. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* memmem */
#endif
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_test.h"
#include "request.h"

#define VOCAB 1000

/* parses body[0..len) from a buffer of exactly len bytes */
static int parse_n(srv_endpoint ep, const char *body, size_t len, srv_request *r, srv_error *e) {
    char *buf = malloc(len ? len : 1);
    if (!buf) abort();
    memcpy(buf, body, len);
    memset(e, 0, sizeof *e);
    int rc = srv_request_parse(ep, buf, len, VOCAB, r, e);
    free(buf);
    return rc;
}

static int parse(srv_endpoint ep, const char *body, srv_request *r, srv_error *e) {
    return parse_n(ep, body, strlen(body), r, e);
}

static const char *const EP_NAME[] = {"completions", "chat", "tokenize", "detokenize"};

/* ---- rendering a parsed request as name=value text ---------------------------- */

static const char *const FIELDS[] = {"model", "prompt",      "prompt_len",    "ids",        "messages",    "max_tokens",
                                     "given", "temperature", "top_p",         "top_k",      "seed",        "seed_given",
                                     "stop",  "stream",      "include_usage", "ignore_eos", "add_special", "tokens"};
#define N_FIELDS ((int)(sizeof FIELDS / sizeof FIELDS[0]))

static void cat(char *buf, size_t n, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void cat(char *buf, size_t n, const char *fmt, ...) {
    size_t used = strlen(buf);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + used, n - used, fmt, ap);
    va_end(ap);
}

static void ints(char *buf, size_t n, const int32_t *v, int count) {
    for (int i = 0; i < count; i++) cat(buf, n, "%s%d", i ? "," : "", (int)v[i]);
}

static void render(const srv_request *r, const char *name, char *buf, size_t n) {
    static const char *const ROLE[] = {"system", "user", "assistant"};
    buf[0] = 0;
    if (!strcmp(name, "model"))
        cat(buf, n, "%s", r->model ? r->model : "(null)");
    else if (!strcmp(name, "prompt"))
        cat(buf, n, "%s", r->prompt_text ? r->prompt_text : "(null)");
    else if (!strcmp(name, "prompt_len"))
        cat(buf, n, "%zu", r->prompt_len);
    else if (!strcmp(name, "ids"))
        ints(buf, n, r->prompt_ids, r->n_prompt_ids);
    else if (!strcmp(name, "messages"))
        for (int i = 0; i < r->n_messages; i++)
            cat(buf, n, "%s%s:%s", i ? "/" : "", ROLE[r->messages[i].role], r->messages[i].content);
    else if (!strcmp(name, "max_tokens"))
        cat(buf, n, "%ld", r->max_tokens);
    else if (!strcmp(name, "given"))
        cat(buf, n, "%d", r->max_tokens_given);
    else if (!strcmp(name, "temperature"))
        cat(buf, n, "%g", r->temperature);
    else if (!strcmp(name, "top_p"))
        cat(buf, n, "%g", r->top_p);
    else if (!strcmp(name, "top_k"))
        cat(buf, n, "%d", r->top_k);
    else if (!strcmp(name, "seed"))
        cat(buf, n, "%llu", (unsigned long long)r->seed);
    else if (!strcmp(name, "seed_given"))
        cat(buf, n, "%d", r->seed_given);
    else if (!strcmp(name, "stop"))
        for (int i = 0; i < r->n_stop; i++) cat(buf, n, "%s%s", i ? "/" : "", r->stop[i]);
    else if (!strcmp(name, "stream"))
        cat(buf, n, "%d", r->stream);
    else if (!strcmp(name, "include_usage"))
        cat(buf, n, "%d", r->include_usage);
    else if (!strcmp(name, "ignore_eos"))
        cat(buf, n, "%d", r->ignore_eos);
    else if (!strcmp(name, "add_special"))
        cat(buf, n, "%d", r->add_special);
    else if (!strcmp(name, "tokens"))
        ints(buf, n, r->tokens, r->n_tokens);
}

/* the value of a field nobody set, per endpoint */
static const char *default_of(srv_endpoint ep, const char *name) {
    int gen = ep == SRV_EP_COMPLETIONS || ep == SRV_EP_CHAT;
    if (!strcmp(name, "model") || !strcmp(name, "prompt")) return "(null)";
    if (!strcmp(name, "max_tokens")) return ep == SRV_EP_COMPLETIONS ? "16" : "0";
    if (!strcmp(name, "temperature") || !strcmp(name, "top_p")) return gen ? "1" : "0";
    if (!strcmp(name, "add_special")) return ep == SRV_EP_TOKENIZE ? "1" : "0";
    if (!strcmp(name, "ids") || !strcmp(name, "messages") || !strcmp(name, "stop") || !strcmp(name, "tokens"))
        return "";
    return "0";
}

/* name's value in want ("a=1;b=x;..."), copied into buf; NULL when absent */
static const char *wanted(const char *want, const char *name, char *buf, size_t n) {
    size_t ln = strlen(name);
    for (const char *p = want; p && *p;) {
        const char *end = strchr(p, ';');
        size_t len = end ? (size_t)(end - p) : strlen(p);
        if (len > ln && p[ln] == '=' && !strncmp(p, name, ln)) {
            snprintf(buf, n, "%.*s", (int)(len - ln - 1), p + ln + 1);
            return buf;
        }
        p = end ? end + 1 : NULL;
    }
    return NULL;
}

/* ---- good bodies -------------------------------------------------------------- */

static const struct {
    srv_endpoint ep;
    const char *body;
    const char *want; /* "field=value;..."; the rest must be the defaults */
} GOOD[] = {
    /* completions */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"Hello\"}", "prompt=Hello;prompt_len=5"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\"}", "prompt="},
    {SRV_EP_COMPLETIONS, " \r\n\t{\"prompt\":\"a\"} \n", "prompt=a;prompt_len=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[1,2,999]}", "ids=1,2,999"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[0]}", "ids=0"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[7.0, 8e0]}", "ids=7,8"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[\"one\"]}", "prompt=one;prompt_len=3"}, /* a batch of one */
    {SRV_EP_COMPLETIONS, "{\"prompt\":[[4,5]]}", "ids=4,5"},
    {SRV_EP_COMPLETIONS,
     "{\"model\":\"m\",\"prompt\":\"x\",\"max_tokens\":100,\"temperature\":0,\"top_p\":0.5,"
     "\"top_k\":40,\"seed\":42,\"stop\":\"\\n\",\"stream\":true,"
     "\"stream_options\":{\"include_usage\":true},\"ignore_eos\":true,\"user\":\"u\"}",
     "model=m;prompt=x;prompt_len=1;max_tokens=100;given=1;temperature=0;top_p=0.5;top_k=40;seed=42;"
     "seed_given=1;stop=\n;stream=1;include_usage=1;ignore_eos=1"},
    {SRV_EP_COMPLETIONS,
     "{\"prompt\":\"x\",\"model\":null,\"max_tokens\":null,\"temperature\":null,\"top_p\":null,"
     "\"top_k\":null,\"seed\":null,\"stop\":null,\"stream\":null,\"stream_options\":null}",
     "prompt=x;prompt_len=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":2,\"top_p\":1e-9,\"max_tokens\":2147483647}",
     "prompt=x;prompt_len=1;temperature=2;top_p=1e-09;max_tokens=2147483647;given=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":-0.0}", "prompt=x;prompt_len=1;temperature=0"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":1,\"top_k\":2147483647}",
     "prompt=x;prompt_len=1;max_tokens=1;given=1;top_k=2147483647"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":2.0,\"top_k\":-1}",
     "prompt=x;prompt_len=1;max_tokens=2;given=1"}, /* top_k -1: off */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":1.5e1}", "prompt=x;prompt_len=1;max_tokens=15;given=1"},
    /* seeds: exact up to 2^64 - 1, -1 is random */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":0}", "prompt=x;prompt_len=1;seed_given=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":-1}", "prompt=x;prompt_len=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":-1.0}", "prompt=x;prompt_len=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":-0}", "prompt=x;prompt_len=1;seed_given=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":9007199254740993}",
     "prompt=x;prompt_len=1;seed=9007199254740993;seed_given=1"}, /* 2^53 + 1: no double holds it */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":18446744073709551615}",
     "prompt=x;prompt_len=1;seed=18446744073709551615;seed_given=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":1e19}",
     "prompt=x;prompt_len=1;seed=10000000000000000000;seed_given=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":1.8446744073709551615E+19}",
     "prompt=x;prompt_len=1;seed=18446744073709551615;seed_given=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":12.50e1}", "prompt=x;prompt_len=1;seed=125;seed_given=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":0.0e-5}", "prompt=x;prompt_len=1;seed_given=1"},
    /* stop */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[\"a\",\"bc\",\"\\u00e9\",\"\\ud83d\\ude00\"]}",
     "prompt=x;prompt_len=1;stop=a/bc/\xC3\xA9/\xF0\x9F\x98\x80"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[]}", "prompt=x;prompt_len=1"},
    /* known fields at their neutral values */
    {SRV_EP_COMPLETIONS,
     "{\"prompt\":\"x\",\"n\":1,\"best_of\":1,\"logprobs\":null,\"echo\":false,\"suffix\":null,"
     "\"presence_penalty\":0,\"frequency_penalty\":0.0,\"logit_bias\":{},\"tools\":[],"
     "\"tool_choice\":\"none\",\"response_format\":{\"type\":\"text\"}}",
     "prompt=x;prompt_len=1"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":0,\"logit_bias\":null,\"tools\":null}",
     "prompt=x;prompt_len=1"},
    /* keys are case-sensitive; unknown ones ignored */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"Temperature\":9,\"min_p\":0.1,\"x\":{\"y\":[1,{}]}}",
     "prompt=x;prompt_len=1"},
    /* text: escapes, pairs, raw UTF-8 */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\\\"b\\\\c\\/d\\u0041\\n\"}", "prompt=a\"b\\c/dA\n;prompt_len=9"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\uD83D\\uDE00 \xE4\xB8\xAD\"}",
     "prompt=\xF0\x9F\x98\x80 \xE4\xB8\xAD;prompt_len=8"},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\\\u0000\"}", "prompt=\\u0000;prompt_len=6"}, /* an escaped backslash */
    /* chat */
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"Hi\"}]}", "messages=user:Hi"},
    {SRV_EP_CHAT,
     "{\"messages\":[{\"role\":\"developer\",\"content\":\"S\"},{\"role\":\"system\",\"content\":\"T\"},"
     "{\"role\":\"user\",\"content\":\"\"},{\"role\":\"assistant\",\"content\":\"A\"},{\"role\":\"assistant\"},"
     "{\"role\":\"assistant\",\"content\":null,\"tool_calls\":[]}]}",
     "messages=system:S/system:T/user:/assistant:A/assistant:/assistant:"},
    {SRV_EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"ab\"},"
     "{\"type\":\"text\",\"text\":\"cd\"}]},{\"role\":\"user\",\"content\":[]}]}",
     "messages=user:abcd/user:"},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\",\"name\":\"bob\"}],\"max_tokens\":5}",
     "messages=user:x;max_tokens=5;given=1"},
    {SRV_EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_tokens\":5,\"max_completion_tokens\":7,"
     "\"logprobs\":false,\"top_logprobs\":0,\"functions\":[],\"function_call\":\"auto\"}",
     "messages=user:x;max_tokens=7;given=1"},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"max_completion_tokens\":null}",
     "messages=user:x"},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"x\"}],\"stream\":true,\"stream_options\":{}}",
     "messages=user:x;stream=1"},
    /* tokenize, detokenize */
    {SRV_EP_TOKENIZE, "{\"content\":\"Hello\"}", "prompt=Hello;prompt_len=5"},
    {SRV_EP_TOKENIZE, "{\"prompt\":\"Hi\",\"add_special\":false,\"model\":\"m\"}",
     "prompt=Hi;prompt_len=2;add_special=0;model=m"},
    {SRV_EP_TOKENIZE, "{\"content\":\"c\",\"prompt\":\"p\"}", "prompt=c;prompt_len=1"},
    {SRV_EP_TOKENIZE, "{\"content\":\"\"}", "prompt="},
    {SRV_EP_DETOKENIZE, "{\"tokens\":[1,2,3]}", "tokens=1,2,3"},
    {SRV_EP_DETOKENIZE, "{\"tokens\":[]}", ""},
    {SRV_EP_DETOKENIZE, "{\"tokens\":[999,0]}", "tokens=999,0"},
};
#define N_GOOD ((int)(sizeof GOOD / sizeof GOOD[0]))

static void good_bodies(void) {
    for (int i = 0; i < N_GOOD; i++) {
        srv_request r;
        srv_error e;
        int rc = parse(GOOD[i].ep, GOOD[i].body, &r, &e);
        DRT_CHECK(rc == 0, "good[%d] (%s) %s: refused: %d %s (param '%s')", i, EP_NAME[GOOD[i].ep], GOOD[i].body,
                  e.status, e.message, e.param);
        if (rc != 0) continue;
        DRT_CHECK(r.ep == GOOD[i].ep, "good[%d]: ep %d", i, (int)r.ep);
        for (int f = 0; f < N_FIELDS; f++) {
            char got[1024], buf[1024];
            const char *want = wanted(GOOD[i].want, FIELDS[f], buf, sizeof buf);
            if (!want) want = default_of(GOOD[i].ep, FIELDS[f]);
            render(&r, FIELDS[f], got, sizeof got);
            DRT_CHECK(!strcmp(got, want), "good[%d] (%s) %s: %s is '%s', want '%s'", i, EP_NAME[GOOD[i].ep],
                      GOOD[i].body, FIELDS[f], got, want);
        }
        if (r.prompt_text)
            DRT_CHECK(strlen(r.prompt_text) == r.prompt_len, "good[%d]: prompt_len %zu, strlen %zu", i, r.prompt_len,
                      strlen(r.prompt_text));
        for (int m = 0; m < r.n_messages; m++)
            DRT_CHECK(strlen(r.messages[m].content) == r.messages[m].len, "good[%d]: message %d len", i, m);
        srv_request_free(&r);
        srv_request_free(&r); /* emptied: a second free is harmless */
    }
}

/* ---- bad bodies --------------------------------------------------------------- */

#define UNSUP "unsupported_parameter"
#define MSG1 "\"messages\":[{\"role\":\"user\",\"content\":\"x\"}]"

static const struct {
    srv_endpoint ep;
    const char *body;
    const char *param; /* "" for none */
    const char *code;  /* NULL for none */
} BAD[] = {
    /* JSON as Python's json and serde_json read it, strictly (a proxy
     * reading the body another way sees another request): a key twice at
     * any depth (escapes decoded), a BOM, whitespace JSON does not have, a
     * raw control byte in a string, numbers JSON does not have */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"prompt\":\"b\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"temperature\":0.5,\"temperature\":9}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"\\u0070rompt\":\"b\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"x\":{\"y\":1,\"y\":2}}", "", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"role\":\"system\"}]}", "", NULL},
    {SRV_EP_COMPLETIONS, "\xEF\xBB\xBF{\"prompt\":\"a\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\tb\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\nb\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\x1f\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\v\"max_tokens\":2}", "", NULL},
    {SRV_EP_COMPLETIONS, "\f{\"prompt\":\"a\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\xC2\xA0\"max_tokens\":2}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":02}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":2.}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"top_p\":.5}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":+2}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":2e}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":-}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"max_tokens\":Infinity}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stream\":True}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\",\"stream\":truex}", "", NULL},
    {SRV_EP_DETOKENIZE, "{\"tokens\":[1,2,]}", "", NULL},
    {SRV_EP_DETOKENIZE, "{\"tokens\":[01]}", "", NULL},
    /* bad JSON */
    {SRV_EP_COMPLETIONS, "{", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\"", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",}", "", NULL},
    {SRV_EP_COMPLETIONS, "{'prompt':'x'}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\"} x", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\"}{}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\x\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\u12G4\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":0x10}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":-inf}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":NaN}", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\uZZZZ\"}", "", NULL}, /* cJSON would decode it as U+0000 */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\ud800\\u12\"}", "", NULL},
    {SRV_EP_COMPLETIONS, "[]", "", NULL},
    {SRV_EP_COMPLETIONS, "5", "", NULL},
    {SRV_EP_COMPLETIONS, "\"x\"", "", NULL},
    {SRV_EP_COMPLETIONS, "null", "", NULL},
    {SRV_EP_COMPLETIONS, "true", "", NULL},
    {SRV_EP_COMPLETIONS, "   ", "", NULL},
    /* missing or empty */
    {SRV_EP_COMPLETIONS, "{}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":null}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"Prompt\":\"x\"}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[]}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[[]]}", "prompt", NULL},
    {SRV_EP_CHAT, "{\"messages\":[]}", "messages", NULL},
    {SRV_EP_CHAT, "{}", "messages", NULL},
    {SRV_EP_TOKENIZE, "{}", "content", NULL},
    {SRV_EP_DETOKENIZE, "{}", "tokens", NULL},
    /* wrong types */
    {SRV_EP_COMPLETIONS, "{\"prompt\":5}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":{}}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[1,\"a\"]}", "prompt", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[\"a\",\"b\"]}", "prompt", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[[1],[2]]}", "prompt", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[1,null]}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"model\":5}", "model", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":1}", "stream", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":\"true\"}", "stream", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"ignore_eos\":0}", "ignore_eos", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":\"0.5\"}", "temperature", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":{\"include_usage\":1}}",
     "stream_options.include_usage", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":true,\"stream_options\":true}", "stream_options", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stream_options\":{\"include_usage\":true}}", "stream_options", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stream\":false,\"stream_options\":{}}", "stream_options", NULL},
    {SRV_EP_CHAT, "{\"messages\":\"hi\"}", "messages", NULL},
    {SRV_EP_CHAT, "{\"messages\":{}}", "messages", NULL},
    {SRV_EP_CHAT, "{\"messages\":[\"hi\"]}", "messages[0]", NULL},
    {SRV_EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"},{\"role\":\"user\",\"content\":\"b\"},"
     "{\"role\":\"user\",\"content\":5}]}",
     "messages[2].content", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\"}]}", "messages[0].content", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"system\",\"content\":null}]}", "messages[0].content", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"content\":\"x\"}]}", "messages[0].role", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"User\",\"content\":\"x\"}]}", "messages[0].role", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":5,\"content\":\"x\"}]}", "messages[0].role", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[\"x\"]}]}", "messages[0].content[0]", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\"}]}]}",
     "messages[0].content[0].text", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"text\":\"x\"}]}]}", "messages[0].content[0].type",
     NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":{\"type\":\"text\",\"text\":\"x\"}}]}",
     "messages[0].content", NULL},
    {SRV_EP_TOKENIZE, "{\"content\":[1,2]}", "content", NULL},
    {SRV_EP_TOKENIZE, "{\"prompt\":5}", "prompt", NULL},
    {SRV_EP_TOKENIZE, "{\"content\":\"x\",\"add_special\":1}", "add_special", NULL},
    {SRV_EP_DETOKENIZE, "{\"tokens\":\"1 2\"}", "tokens", NULL},
    {SRV_EP_DETOKENIZE, "{\"tokens\":[[1]]}", "tokens", NULL},
    /* bad values */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":999999}", "temperature", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":-1}", "temperature", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":2.0000001}", "temperature", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":1e999}", "temperature", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"temperature\":-1e999}", "temperature", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"top_p\":0}", "top_p", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"top_p\":2}", "top_p", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"top_p\":-0.5}", "top_p", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"top_k\":-2}", "top_k", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"top_k\":1.5}", "top_k", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"top_k\":2147483648}", "top_k", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":0}", "max_tokens", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":-1}", "max_tokens", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":1.5}", "max_tokens", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":9007199254740993}", "max_tokens", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":2147483648}", "max_tokens", NULL},
    {SRV_EP_COMPLETIONS,
     "{\"prompt\":\"x\",\"max_tokens\":1"
     "000000000000000000000000000000000000000000000000000000000000000000000}",
     "max_tokens", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":1e999}", "max_tokens", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":\"16\"}", "max_tokens", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"max_tokens\":true}", "max_tokens", NULL},
    {SRV_EP_CHAT, "{" MSG1 ",\"max_completion_tokens\":0}", "max_completion_tokens", NULL},
    {SRV_EP_CHAT, "{" MSG1 ",\"max_tokens\":0,\"max_completion_tokens\":5}", "max_tokens", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":1.5}", "seed", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":18446744073709551616}", "seed", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":1e20}", "seed", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":-2}", "seed", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":1e999}", "seed", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":1e-999}", "seed", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"seed\":\"42\"}", "seed", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[-1]}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[1000]}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[1.5]}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[1e999]}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":[4294967296]}", "prompt", NULL},
    {SRV_EP_DETOKENIZE, "{\"tokens\":[1,-1]}", "tokens", NULL},
    {SRV_EP_DETOKENIZE, "{\"tokens\":[1000]}", "tokens", NULL},
    {SRV_EP_DETOKENIZE, "{\"tokens\":[true]}", "tokens", NULL},
    /* stop */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":{}}", "stop", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":5}", "stop", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":\"\"}", "stop", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[\"a\",\"\"]}", "stop", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[\"a\",\"b\",\"c\",\"d\",\"e\"]}", "stop", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[\"a\",5]}", "stop", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[null]}", "stop", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[[\"a\"]]}", "stop", NULL},
    /* bad text */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\\u0000b\"}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\u0000\"}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\\ud800\"}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\\uDBFF\\u0041\"}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\\udc00b\"}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\ude00\\ud83d\"}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\ud800\\ud800\\udc00\"}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\\ud800\\", "", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"a\xFF\"}", "prompt", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\xC0\xAF\"}", "prompt", NULL},         /* overlong '/' */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\xE2\x82\"}", "prompt", NULL},         /* cut short */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\xED\xA0\x80\"}", "prompt", NULL},     /* a surrogate in UTF-8 */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"\xF4\x90\x80\x80\"}", "prompt", NULL}, /* past U+10FFFF */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"model\":\"m\\u0000\"}", "model", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":\"\\u0000\"}", "stop", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"stop\":[\"a\",\"\xFF\"]}", "stop", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"ok\"},{\"role\":\"user\",\"content\":\"\\u0000\"}]}",
     "messages[1].content", NULL},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"a\\ud800\"}]}]}",
     "messages[0].content[0].text", NULL},
    {SRV_EP_TOKENIZE, "{\"content\":\"\\u0000\"}", "content", NULL},
    {SRV_EP_TOKENIZE, "{\"prompt\":\"\xFE\"}", "prompt", NULL},
    /* known, unsupported */
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"n\":2}", "n", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"n\":0}", "n", NULL},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"best_of\":3}", "best_of", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"logprobs\":5}", "logprobs", UNSUP},
    {SRV_EP_CHAT, "{" MSG1 ",\"logprobs\":true}", "logprobs", UNSUP},
    {SRV_EP_CHAT, "{" MSG1 ",\"top_logprobs\":2}", "top_logprobs", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"echo\":true}", "echo", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"suffix\":\"end\"}", "suffix", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"presence_penalty\":0.5}", "presence_penalty", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"frequency_penalty\":-1}", "frequency_penalty", UNSUP},
    {SRV_EP_COMPLETIONS, "{\"prompt\":\"x\",\"logit_bias\":{\"1\":5}}", "logit_bias", UNSUP},
    {SRV_EP_CHAT, "{" MSG1 ",\"tools\":[{\"type\":\"function\"}]}", "tools", UNSUP},
    {SRV_EP_CHAT, "{" MSG1 ",\"tool_choice\":\"required\"}", "tool_choice", UNSUP},
    {SRV_EP_CHAT, "{" MSG1 ",\"functions\":[{}]}", "functions", UNSUP},
    {SRV_EP_CHAT, "{" MSG1 ",\"response_format\":{\"type\":\"json_object\"}}", "response_format", UNSUP},
    {SRV_EP_CHAT, "{" MSG1 ",\"response_format\":\"text\"}", "response_format", UNSUP},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"x\"}]}", "messages[0].role", UNSUP},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"function\",\"content\":\"x\"}]}", "messages[0].role", UNSUP},
    {SRV_EP_CHAT, "{\"messages\":[{\"role\":\"assistant\",\"tool_calls\":[{\"id\":\"c\"}]}]}", "messages[0].tool_calls",
     UNSUP},
    {SRV_EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"text\",\"text\":\"x\"},"
     "{\"type\":\"image_url\",\"image_url\":{\"url\":\"data:\"}}]}]}",
     "messages[0].content[1].type", UNSUP},
    /* long client strings: never quoted past 64 bytes */
    {SRV_EP_CHAT,
     "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"0123456789012345678901234567890123456789"
     "012345678901234567890123456789012345678901234567890123456789\",\"text\":\"x\"}]}]}",
     "messages[0].content[0].type", UNSUP},
    {SRV_EP_CHAT,
     "{\"messages\":[{\"role\":\"0123456789012345678901234567890123456789012345678901234567890123456789"
     "0123456789\",\"content\":\"x\"}]}",
     "messages[0].role", NULL},
};
#define N_BAD ((int)(sizeof BAD / sizeof BAD[0]))

static int is_empty(const srv_request *r) {
    return !r->model && !r->prompt_text && !r->prompt_ids && !r->messages && !r->tokens && !r->stop[0] &&
           !r->n_messages && !r->n_prompt_ids && !r->n_tokens && !r->n_stop;
}

/* the error as a bad body must leave it: 400, the param and code, a
 * message, no more than 64 bytes of the body quoted, nothing kept */
static void check_refused(const char *what, int i, const char *body, size_t len, int rc, const srv_request *r,
                          const srv_error *e, const char *param, const char *code) {
    DRT_CHECK(rc == -1, "%s[%d] %.200s: accepted", what, i, body);
    if (rc != -1) return;
    DRT_CHECK(e->status == 400, "%s[%d] %.200s: status %d (%s)", what, i, body, e->status, e->message);
    DRT_CHECK(e->type && !strcmp(e->type, "invalid_request_error"), "%s[%d] %.200s: type %s", what, i, body,
              e->type ? e->type : "(null)");
    DRT_CHECK(!strcmp(e->param, param), "%s[%d] %.200s: param '%s', want '%s' (%s)", what, i, body, e->param, param,
              e->message);
    DRT_CHECK(code ? e->code && !strcmp(e->code, code) : !e->code, "%s[%d] %.200s: code %s, want %s (%s)", what, i,
              body, e->code ? e->code : "null", code ? code : "null", e->message);
    DRT_CHECK(e->message[0], "%s[%d] %.200s: no message", what, i, body);
    DRT_CHECK(is_empty(r), "%s[%d] %.200s: the refused request holds data", what, i, body);
    for (size_t at = 0; at + 65 <= len; at++)
        DRT_CHECK(!memmem(e->message, strlen(e->message), body + at, 65), "%s[%d]: the message quotes 65 bytes: %s",
                  what, i, e->message);
    char *json = srv_error_json(e);
    DRT_CHECK(json && srv_utf8_ok(json, strlen(json)), "%s[%d]: error JSON not valid UTF-8", what, i);
    free(json);
}

static void bad_bodies(void) {
    for (int i = 0; i < N_BAD; i++) {
        srv_request r;
        srv_error e;
        int rc = parse(BAD[i].ep, BAD[i].body, &r, &e);
        check_refused("bad", i, BAD[i].body, strlen(BAD[i].body), rc, &r, &e, BAD[i].param, BAD[i].code);
        if (rc == 0) srv_request_free(&r);
    }
}

/* ---- bodies the tables cannot hold ------------------------------------------- */

static char *repeat(const char *head, const char *unit, int n, const char *tail) {
    size_t lh = strlen(head), lu = strlen(unit), lt = strlen(tail);
    char *s = malloc(lh + lu * (size_t)n + lt + 1);
    if (!s) abort();
    memcpy(s, head, lh);
    for (int i = 0; i < n; i++) memcpy(s + lh + lu * (size_t)i, unit, lu);
    memcpy(s + lh + lu * (size_t)n, tail, lt + 1);
    return s;
}

static void deep_nesting(void) {
    static const struct {
        const char *head, *open, *mid, *close, *tail;
        int n, ok;
    } CASES[] = {
        {"", "[", "", "]", "", 10000, 0},                                 /* [[[...]]] */
        {"", "[", "", "", "", 10000, 0},                                  /* [[[... unclosed */
        {"", "{\"a\":", "1", "}", "", 10000, 0},                          /* {"a":{"a":...}} */
        {"{\"prompt\":", "[", "1", "]", "}", 10000, 0},                   /* inside a field */
        {"{\"prompt\":\"x\",\"extra\":", "[", "", "]", "}", 63, 1},       /* 64 levels: taken */
        {"{\"prompt\":\"x\",\"extra\":", "[", "", "]", "}", 64, 0},       /* 65: refused */
        {"{\"prompt\":\"x\",\"extra\":\"", "[", "", "", "\"}", 10000, 1}, /* brackets in a string */
    };
    for (int i = 0; i < (int)(sizeof CASES / sizeof CASES[0]); i++) {
        char *open = repeat(CASES[i].head, CASES[i].open, CASES[i].n, CASES[i].mid);
        char *body = repeat(open, CASES[i].close, CASES[i].n, CASES[i].tail);
        srv_request r;
        srv_error e;
        int rc = parse(SRV_EP_COMPLETIONS, body, &r, &e);
        if (CASES[i].ok) {
            DRT_CHECK(rc == 0, "deep[%d] %.80s...: refused: %s", i, body, e.message);
            if (rc == 0) srv_request_free(&r);
        } else {
            check_refused("deep", i, body, strlen(body), rc, &r, &e, "", NULL);
        }
        free(open);
        free(body);
    }
}

/* bodies with NUL bytes, and the empty body */
#define B(s) s, sizeof s - 1
/* srv_error_set makes every message one line of valid UTF-8 without
 * control bytes, however it was formatted, and never cuts a character:
 * client text, file text and library messages all pass through it */
static void messages_made_safe(void) {
    srv_error e;
    srv_error_set(&e, 400, "invalid_request_error", NULL, "p", "a\tb\nc\x1b[2J\x7f d\xff\xc3 e\xe2\x80\xae");
    DRT_CHECK(srv_utf8_ok(e.message, strlen(e.message)), "not UTF-8: %s", e.message);
    for (const char *m = e.message; *m; m++)
        DRT_CHECK((unsigned char)*m >= 0x20 && *m != 0x7f, "a control byte 0x%02x in \"%s\"", (unsigned char)*m,
                  e.message);
    DRT_CHECK(strstr(e.message, "\\u202e") != NULL, "a bidirectional override kept: %s", e.message);
    /* a long message of 3-byte characters, cut at every length */
    char big[2048];
    for (int pad = 0; pad < 3; pad++) {
        size_t n = (size_t)pad;
        memset(big, 'a', n);
        while (n + 3 < sizeof big) memcpy(big + n, "\xe4\xb8\xad", 3), n += 3;
        big[n] = 0;
        srv_error_set(&e, 400, "invalid_request_error", NULL, NULL, "%s", big);
        DRT_CHECK(srv_utf8_ok(e.message, strlen(e.message)) && strlen(e.message) < sizeof e.message &&
                      strstr(e.message, "\\x") == NULL,
                  "pad %d: a long message cut inside a character: ...%s", pad,
                  e.message + strlen(e.message) - (strlen(e.message) > 12 ? 12 : 0));
    }
}

static void raw_bytes(void) {
    static const struct {
        srv_endpoint ep;
        const char *body;
        size_t len;
        const char *param;
    } CASES[] = {
        {SRV_EP_COMPLETIONS, B("{\"prompt\":\"a\0b\"}"), ""}, /* a raw control byte: not JSON */
        {SRV_EP_COMPLETIONS, B("{\"prompt\":\"ab\"}\0"), ""},
        {SRV_EP_COMPLETIONS, B("\0{\"prompt\":\"ab\"}"), ""},
        {SRV_EP_COMPLETIONS, B("{\"prompt\"\0:\"ab\"}"), ""},
        {SRV_EP_CHAT, B("{\"messages\":[{\"role\":\"user\",\"content\":\"\0\"}]}"), ""},
        {SRV_EP_COMPLETIONS, B(""), ""},
        {SRV_EP_COMPLETIONS, B("\n"), ""},
    };
    for (int i = 0; i < (int)(sizeof CASES / sizeof CASES[0]); i++) {
        srv_request r;
        srv_error e;
        int rc = parse_n(CASES[i].ep, CASES[i].body, CASES[i].len, &r, &e);
        check_refused("raw", i, CASES[i].body, CASES[i].len, rc, &r, &e, CASES[i].param, NULL);
    }
    /* a NULL body is an empty one */
    srv_request r;
    srv_error e;
    DRT_CHECK(srv_request_parse(SRV_EP_TOKENIZE, NULL, 0, VOCAB, &r, &e) == -1 && e.status == 400,
              "a NULL body: not a 400");
    srv_request_free(NULL);
}

/* A stop string of 256 bytes is taken, 257 and a 10 KB one are not; a
 * 10 KB prompt is taken. */
static void long_strings(void) {
    static const struct {
        const char *head;
        int n;
        const char *tail;
        int ok;
    } CASES[] = {
        {"{\"prompt\":\"x\",\"stop\":\"", 256, "\"}", 1},     {"{\"prompt\":\"x\",\"stop\":\"", 257, "\"}", 0},
        {"{\"prompt\":\"x\",\"stop\":[\"", 10240, "\"]}", 0}, {"{\"prompt\":\"", 10240, "\"}", 1},
        {"{\"prompt\":\"x\",\"stop\":\"", 85, "\"}", 1}, /* 85 3-byte characters: 255 bytes */
    };
    for (int i = 0; i < (int)(sizeof CASES / sizeof CASES[0]); i++) {
        char *body = repeat(CASES[i].head, i == 4 ? "\xE2\x82\xAC" : "s", CASES[i].n, CASES[i].tail);
        srv_request r;
        srv_error e;
        int rc = parse(SRV_EP_COMPLETIONS, body, &r, &e);
        if (CASES[i].ok) {
            DRT_CHECK(rc == 0, "long[%d]: refused: %s", i, e.message);
            if (rc == 0) srv_request_free(&r);
        } else {
            check_refused("long", i, body, strlen(body), rc, &r, &e, "stop", NULL);
        }
        free(body);
    }
}

/* No prefix of a good body is a good body: each is refused, and none is
 * read past its end (every buffer is exactly its length). */
static void prefixes(void) {
    for (int i = 0; i < N_GOOD; i++) {
        size_t len = strlen(GOOD[i].body), end = len;
        while (end > 0 && strchr(" \t\r\n", GOOD[i].body[end - 1])) end--; /* the value's last byte */
        for (size_t n = 0; n < end; n++) {
            srv_request r;
            srv_error e;
            int rc = parse_n(GOOD[i].ep, GOOD[i].body, n, &r, &e);
            DRT_CHECK(rc == -1 && e.status == 400 && is_empty(&r), "good[%d] cut to %zu bytes: rc %d status %d", i, n,
                      rc, e.status);
            if (rc == 0) srv_request_free(&r);
        }
    }
}

int main(void) {
    good_bodies();
    bad_bodies();
    deep_nesting();
    raw_bytes();
    messages_made_safe();
    long_strings();
    prefixes();
    return drt_test_summary("test_serve_request");
}
