/* The HTTP layer: routing, API keys, CORS, the small endpoints, and
 * handing completions to the scheduler, on the connections of httpd.h.
 *
 * One epoll thread runs every connection: an idle socket or an open stream
 * costs a file descriptor and its buffers, never a thread. A non-streaming
 * completion parks its connection until the scheduler has the whole
 * answer; a stream's reader parks it when it has sent everything there is
 * and the scheduler resumes it when there is more. */
#include <cjson/cJSON.h>
#include <arpa/inet.h>
#include <float.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "diffrt/util.h"
#include "httpd.h"
#include "server.h"

typedef enum {
    R_NONE = 0,
    R_HEALTH,
    R_MODELS,
    R_MODEL,
    R_COMPLETIONS,
    R_CHAT,
    R_TOKENIZE,
    R_DETOKENIZE,
    R_METRICS,
} route;

static const struct {
    const char *path;
    route r;
    const char *method;
} routes[] = {
    {"/health", R_HEALTH, "GET"},
    {"/v1/models", R_MODELS, "GET"},
    {"/v1/completions", R_COMPLETIONS, "POST"},
    {"/v1/chat/completions", R_CHAT, "POST"},
    {"/tokenize", R_TOKENIZE, "POST"},
    {"/detokenize", R_DETOKENIZE, "POST"},
    {"/metrics", R_METRICS, "GET"},
};

typedef struct conn_state {
    route r;
    char *body; /* the request's body, len bytes (NUL after them) */
    size_t len;
    srv_job *job;
    char *model;        /* GET /v1/models/{id} */
    const char *origin; /* the allowed CORS origin this request came from, or NULL */

    /* A POST's preparation (parse, chat template, tokenize) runs on a
     * tokenizer thread while the connection is parked; the thread owns
     * these until it sets prep_done (under S->prep_mu) and resumes it. */
    srv_conn *conn;
    struct conn_state *prep_next;
    int prep_busy, prep_done;
    int perr_set;
    srv_error perr;
    char *pbody;   /* /tokenize, /detokenize: the answer */
    srv_job *pjob; /* a completion: the job, its prompt's ids ready */
} conn_state;

/* ---- responses ---- */

#define MAX_HDRS 12
typedef struct {
    srv_hdr h[MAX_HDRS];
    int n;
} hdrs;

static void hdr(hdrs *h, const char *name, const char *value) {
    if (h->n < MAX_HDRS) h->h[h->n++] = (srv_hdr){name, value};
}

static void add_common(hdrs *h, const conn_state *cs) {
    if (cs && cs->origin) {
        hdr(h, "Access-Control-Allow-Origin", cs->origin);
        hdr(h, "Vary", "Origin");
    }
}

static const char OOM_BODY[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                               "\"code\":null}}";

/* Answers with body (owned; NULL: out of memory, answered 500). */
static void send_body(srv_conn *c, const conn_state *cs, int status, char *body, const char *type) {
    hdrs h = {.n = 0};
    if (!body) {
        status = 500;
        body = strdup(OOM_BODY);
        type = NULL;
    }
    hdr(&h, "Content-Type", type ? type : "application/json");
    add_common(&h, cs);
    srv_conn_respond(c, status, h.h, h.n, body, body ? strlen(body) : 0, 0);
}

static void send_error(const srv *S, srv_conn *c, const conn_state *cs, const srv_error *e) {
    (void)S;
    char *body = srv_error_json(e);
    if (!body) return send_body(c, cs, 500, NULL, NULL);
    hdrs h = {.n = 0};
    hdr(&h, "Content-Type", "application/json");
    if (e->status == 401) hdr(&h, "WWW-Authenticate", "Bearer");
    if (e->status == 503) hdr(&h, "Retry-After", "1");
    if (e->status >= 500 && e->status != 503) hdr(&h, "x-should-retry", "false");
    if (e->status == 405)
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
            if (cs && routes[i].r == cs->r) hdr(&h, "Allow", routes[i].method);
    add_common(&h, cs);
    srv_conn_respond(c, e->status, h.h, h.n, body, strlen(body), 0);
}

static void fail(const srv *S, srv_conn *c, const conn_state *cs, int status, const char *type, const char *code,
                 const char *param, const char *msg) {
    srv_error e;
    srv_error_set(&e, status, type, code, param, "%s", msg);
    send_error(S, c, cs, &e);
}

static void send_json(srv_conn *c, const conn_state *cs, cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    send_body(c, cs, 200, s, NULL);
}

/* ---- auth ---- */

/* 1 when the request carries one of the keys (or none is set): the scheme
 * "Bearer" in any case (RFC 9110 11.1), one or more spaces, the key. The
 * compare takes the same time wherever the first difference is. */
static int key_ok(const srv *S, const srv_conn *c) {
    if (!S->n_keys) return 1;
    const char *h = srv_conn_header(c, "Authorization");
    if (!h || strncasecmp(h, "Bearer", 6) != 0 || h[6] != ' ') return 0;
    const char *k = h + 6;
    while (*k == ' ') k++;
    size_t kn = strlen(k);
    int ok = 0;
    for (int i = 0; i < S->n_keys; i++) {
        const char *key = S->keys[i];
        size_t n = strlen(key);
        unsigned d = kn != n;
        for (size_t p = 0; p < n; p++) d |= (unsigned char)key[p] ^ (unsigned char)(p < kn ? k[p] : 0);
        ok |= d == 0;
    }
    return ok;
}

/* ---- Host and Origin (docs/serve.md, "What the server promises") ---- */

/* The host name of a Host value (no port; [v6] keeps its brackets), in h. */
static void host_name(const char *host, char *h, size_t n) {
    size_t k = strlen(host);
    if (host[0] == '[') {
        const char *e = strchr(host, ']');
        k = e ? (size_t)(e - host) + 1 : k;
    } else {
        const char *e = strrchr(host, ':');
        if (e) k = (size_t)(e - host);
    }
    if (k >= n) k = n - 1;
    for (size_t i = 0; i < k; i++) h[i] = (char)((host[i] >= 'A' && host[i] <= 'Z') ? host[i] + 32 : host[i]);
    h[k] = 0;
}

/* 1 when a page of another site could not have put this Host there by DNS
 * rebinding: an IP literal (a rebinding page uses its own name), localhost
 * and *.localhost, or a name given with --allow-host (".example.com": it and
 * its subdomains). Checked when the server is on a loopback address without
 * an API key, or when --allow-host is given ("*": never). */
static int host_ok(const srv *S, const srv_conn *c) {
    int enforce = (S->loopback && !S->n_keys) || S->o.n_allow_hosts > 0;
    for (int i = 0; i < S->o.n_allow_hosts; i++)
        if (strcmp(S->o.allow_hosts[i], "*") == 0) enforce = 0;
    const char *host = srv_conn_host(c);
    if (!enforce || !host[0]) return 1;
    char h[256], v6[64];
    host_name(host, h, sizeof h);
    struct in_addr a4;
    size_t hn = strlen(h);
    if (inet_pton(AF_INET, h, &a4) == 1) return 1;
    if (hn > 2 && h[0] == '[' && hn - 2 < sizeof v6) {
        struct in6_addr a6;
        memcpy(v6, h + 1, hn - 2);
        v6[hn - 2] = 0;
        if (inet_pton(AF_INET6, v6, &a6) == 1) return 1;
    }
    if (strcmp(h, "localhost") == 0 || (hn > 10 && strcmp(h + hn - 10, ".localhost") == 0)) return 1;
    for (int i = 0; i < S->o.n_allow_hosts; i++) {
        const char *a = S->o.allow_hosts[i];
        size_t an = strlen(a);
        if (strcasecmp(a, h) == 0) return 1;
        if (a[0] == '.' && (strcasecmp(a + 1, h) == 0 || (hn > an && strcasecmp(h + hn - an, a) == 0))) return 1;
    }
    return 0;
}

/* 1 for a POST that a page of another site could make without the CORS
 * preflight (a "simple" request): an Origin that is neither this server
 * (http://HOST) nor --cors-origin's, and a body type that is not JSON. */
static int cross_site_simple(const srv_conn *c, const conn_state *cs) {
    const char *origin = srv_conn_header(c, "Origin");
    if (!origin || cs->origin) return 0;
    const char *host = srv_conn_host(c);
    if (strncasecmp(origin, "http://", 7) == 0 && host[0] && strcasecmp(origin + 7, host) == 0) return 0;
    const char *ct = srv_conn_header(c, "Content-Type");
    if (!ct) return 1;
    size_t n = strcspn(ct, ";");
    while (n && (ct[n - 1] == ' ' || ct[n - 1] == '\t')) n--;
    return !(n == 16 && strncasecmp(ct, "application/json", 16) == 0);
}

/* ---- the small endpoints ---- */

static cJSON *model_object(const srv *S, const char *name) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)S->started);
    cJSON_AddStringToObject(m, "owned_by", "diffrt");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddStringToObject(meta, "arch", S->info.arch_name);
    cJSON_AddStringToObject(meta, "layout", S->info.layout_name);
    cJSON_AddNumberToObject(meta, "n_params", (double)S->info.n_params);
    cJSON_AddNumberToObject(meta, "vocab", S->info.vocab);
    cJSON_AddNumberToObject(meta, "max_ctx", S->info.max_ctx);
    cJSON_AddNumberToObject(meta, "ctx_per_slot", S->o.ctx);
    cJSON_AddNumberToObject(meta, "slots", S->o.parallel);
    cJSON_AddStringToObject(meta, "chat_template", S->chat.name);
    return m;
}

static int model_known(const srv *S, const char *name) {
    if (S->o.any_model) return 1;
    for (int i = 0; i < S->n_aliases; i++)
        if (strcmp(S->aliases[i], name) == 0) return 1;
    return 0;
}

static void do_models(srv *S, srv_conn *c, const conn_state *cs) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < S->n_aliases; i++) cJSON_AddItemToArray(d, model_object(S, S->aliases[i]));
    return send_json(c, cs, o);
}

static void do_model(srv *S, srv_conn *c, const conn_state *cs, const char *name) {
    for (int i = 0; i < S->n_aliases; i++)
        if (strcmp(S->aliases[i], name) == 0) return send_json(c, cs, model_object(S, name));
    return fail(S, c, cs, 404, "not_found_error", "model_not_found", "model", "no such model");
}

/* How the server's texts are encoded: special tokens only where the
 * caller allows them, within the time and the context. */
static drt_encode_opts encode_opts(srv *S, int add_special, int parse_special, int max_tokens) {
    return (drt_encode_opts){.add_special = add_special,
                             .parse_special = parse_special,
                             .max_tokens = max_tokens,
                             .max_seconds = S->o.tokenize_timeout_s,
                             .cancel = &S->tok_cancel};
}

/* A failed encode as the client's error: too long (context_length_exceeded
 * when code), cancelled by shutdown (503), or the text itself (400). */
static int encode_error(srv *S, srv_error *e, drt_status st, const char *param, const char *code) {
    if (st == DRT_ERR_UNAVAILABLE)
        return srv_error_set(e, 503, "unavailable_error", NULL, NULL, "the server is shutting down");
    if (st == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), "more than"))
        return srv_error_set(e, 400, "invalid_request_error", code, param,
                             "This model's maximum context length is %d tokens. However, your %s makes more than "
                             "%d tokens.",
                             S->o.ctx, param, S->o.ctx);
    return srv_error_set(e, st == DRT_ERR_OOM ? 500 : 400, st == DRT_ERR_OOM ? "server_error" : "invalid_request_error",
                         NULL, param, "%s", drt_last_error());
}

/* /tokenize and /detokenize: the JSON answer into cs->pbody, or cs->perr */
static void prep_tokenize(srv *S, conn_state *cs, srv_request *q) {
    int32_t *ids = NULL;
    int n = 0;
    /* bounded as a prompt is: a text past the context cannot be one */
    drt_encode_opts eo = encode_opts(S, q->add_special, q->parse_special, S->o.ctx);
    drt_status st = drt_tokenizer_encode_opts(S->tok, q->prompt_text, q->prompt_len, &eo, &ids, &n);
    if (st != DRT_OK) {
        cs->perr_set = 1;
        encode_error(S, &cs->perr, st, "content", NULL);
        return;
    }
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    cJSON_AddNumberToObject(o, "count", n);
    cJSON_AddNumberToObject(o, "max_model_len", S->o.ctx);
    free(ids);
    cs->pbody = cJSON_PrintUnformatted(o); /* NULL: out of memory, answered 500 */
    cJSON_Delete(o);
}

static void prep_detokenize(srv *S, conn_state *cs, srv_request *q) {
    char *text = NULL;
    size_t len = 0;
    if (drt_tokenizer_decode(S->tok, q->tokens, q->n_tokens, 0, &text, &len) != DRT_OK) {
        cs->perr_set = 1;
        srv_error_set(&cs->perr, 400, "invalid_request_error", NULL, "tokens", "%s", drt_last_error());
        return;
    }
    cJSON *o = cJSON_CreateObject();
    char *lit = srv_json_string(text, len); /* NULs and all: a cJSON string would end at one */
    drt_free(text);
    if (!lit) {
        cJSON_Delete(o);
        return; /* pbody NULL: out of memory, answered 500 */
    }
    cJSON_AddRawToObject(o, "content", lit);
    cJSON_AddRawToObject(o, "prompt", lit);
    free(lit);
    cs->pbody = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
}

/* ---- completions ---- */

static uint64_t seed_now(void) {
    static atomic_ullong n;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (atomic_fetch_add(&n, 1) * 0x9E3779B97F4A7C15ull);
    x ^= x >> 31, x *= 0xBF58476D1CE4E5B9ull, x ^= x >> 27;
    return x;
}

/* The prompt's ids into j; 0, or -1 with *e set. */
static int job_prompt(srv *S, srv_job *j, srv_error *e) {
    srv_request *q = &j->req;
    int ctx = S->o.ctx;
    if (q->ep == SRV_EP_COMPLETIONS && q->prompt_ids) {
        j->prompt = malloc(sizeof(int32_t) * (size_t)q->n_prompt_ids);
        if (!j->prompt) return srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        memcpy(j->prompt, q->prompt_ids, sizeof(int32_t) * (size_t)q->n_prompt_ids);
        j->n_prompt = q->n_prompt_ids;
    } else {
        const char *text = q->prompt_text;
        size_t len = q->prompt_len;
        char *chat = NULL;
        size_t *plain = NULL;
        int n_plain = 0;
        /* one id more than the context: a prompt that long is refused with its size */
        drt_encode_opts eo = encode_opts(S, 1, q->parse_special, ctx + 1);
        if (q->ep == SRV_EP_CHAT) {
            if (S->chat.kind == SRV_CHAT_NONE)
                return srv_error_set(e, 400, "invalid_request_error", NULL, "messages",
                                     "this model has no chat template; use /v1/completions, or start the server "
                                     "with --chat-template NAME");
            if (srv_chat_render_spans(&S->chat, q->messages, q->n_messages, &chat, &len, &plain, &n_plain, e) != 0)
                return -1;
            text = chat;
            /* special tokens from the template, never from the messages */
            eo.add_special = S->chat.add_bos;
            eo.parse_special = 1;
            eo.plain = plain;
            eo.n_plain = n_plain;
        }
        drt_status st = drt_tokenizer_encode_opts(S->tok, text, len, &eo, &j->prompt, &j->n_prompt);
        free(chat);
        free(plain);
        if (st != DRT_OK)
            return encode_error(S, e, st, q->ep == SRV_EP_CHAT ? "messages" : "prompt", "context_length_exceeded");
    }
    if (j->n_prompt == 0)
        return srv_error_set(e, 400, "invalid_request_error", NULL, "prompt",
                             "the prompt is empty (and this tokenizer adds no BOS)");
    long room = (long)ctx - j->n_prompt;
    j->max_tokens = q->max_tokens_given || q->ep == SRV_EP_COMPLETIONS ? q->max_tokens : room;
    if (room < 1 || j->max_tokens > room)
        return srv_error_set(
            e, 400, "invalid_request_error", "context_length_exceeded", q->ep == SRV_EP_CHAT ? "messages" : "prompt",
            "This model's maximum context length is %d tokens. However, you requested %ld tokens "
            "(%d in the %s, %ld in the completion).",
            ctx, j->n_prompt + j->max_tokens, j->n_prompt, q->ep == SRV_EP_CHAT ? "messages" : "prompt", j->max_tokens);
    drt_sampler_opts so = {.temperature = (float)q->temperature,
                           .top_k = q->top_k,
                           /* below float's range: the top token only, as the value means */
                           .top_p = q->top_p < FLT_MIN ? FLT_MIN : (float)q->top_p,
                           .seed = q->seed_given ? q->seed : seed_now()};
    if (drt_sampler_create(&so, S->info.vocab, &j->smp) != DRT_OK) /* the request checked every field: ours */
        return srv_error_set(e, 500, "server_error", NULL, NULL, "%s", drt_last_error());
    return 0;
}

static long stream_reader(void *cls, char *buf, size_t max) {
    srv_job *j = cls;
    long r;
    pthread_mutex_lock(&j->mu);
    if (j->out_len > j->out_off) {
        size_t n = j->out_len - j->out_off < max ? j->out_len - j->out_off : max;
        memcpy(buf, j->out + j->out_off, n);
        j->out_off += n;
        r = (long)n;
    } else if (j->out_done || !j->conn) {
        r = j->cancelled ? SRV_READ_ABORT : SRV_READ_END;
    } else { /* nothing yet: park the connection until the scheduler has more */
        j->suspended = 1;
        srv_conn_suspend(j->conn);
        r = SRV_READ_SUSPENDED;
    }
    pthread_mutex_unlock(&j->mu);
    return r;
}

static void stream_free(void *cls) {
    srv_job_unref(cls);
}

/* A finished non-streaming job's answer. */
static void answer_job(srv *S, srv_conn *c, conn_state *cs) {
    srv_job *j = cs->job;
    pthread_mutex_lock(&j->mu);
    if (!j->out_done) { /* woken early: wait again */
        j->suspended = 1;
        srv_conn_suspend(c);
        pthread_mutex_unlock(&j->mu);
        return;
    }
    int status = j->status ? j->status : 500;
    char *body = NULL;
    if (j->out_len > j->out_off) {
        body = malloc(j->out_len - j->out_off + 1);
        if (body) memcpy(body, j->out + j->out_off, j->out_len - j->out_off + 1);
    }
    int no_retry = j->no_retry;
    pthread_mutex_unlock(&j->mu);
    if (!body) return fail(S, c, cs, 500, "server_error", NULL, NULL, "the request was cancelled");
    hdrs h = {.n = 0};
    hdr(&h, "Content-Type", "application/json");
    if (no_retry) hdr(&h, "x-should-retry", "false");
    if (status == 503) hdr(&h, "Retry-After", "1");
    add_common(&h, cs);
    srv_conn_respond(c, status, h.h, h.n, body, strlen(body), 0);
}

/* A completion's job with its prompt's ids into cs->pjob, or cs->perr. */
static void prep_completion(srv *S, conn_state *cs, srv_request *q) {
    srv_error *e = &cs->perr;
    if (q->model && !model_known(S, q->model)) {
        cs->perr_set = 1;
        srv_error_set(e, 404, "not_found_error", "model_not_found", "model",
                      "The model `%.64s` does not exist (this server serves `%s`)", q->model, S->aliases[0]);
        return;
    }
    srv_job *j = srv_job_new(S);
    if (!j) {
        cs->perr_set = 1;
        srv_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return;
    }
    j->req = *q;
    memset(q, 0, sizeof *q);
    if (job_prompt(S, j, e) != 0) {
        srv_job_unref(j);
        cs->perr_set = 1;
        pthread_mutex_lock(&S->mu);
        S->m.rejected_bad_request++;
        pthread_mutex_unlock(&S->mu);
        return;
    }
    cs->pjob = j;
}

/* Hands a prepared job to the scheduler and answers: a stream at once, a
 * whole answer once the scheduler has it. */
static void start_job(srv *S, srv_conn *c, conn_state *cs, srv_job *j) {
    static atomic_ullong serial;
    snprintf(j->id, sizeof j->id, "%s-%llx%04llx", j->req.ep == SRV_EP_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)(atomic_fetch_add(&serial, 1) & 0xffff));
    j->created = (long long)time(NULL);
    j->conn = c;
    j->fd = srv_conn_fd(c);
    j->http10 = srv_conn_minor(c) == 0;
    if (j->req.stream && j->req.ep == SRV_EP_CHAT) { /* the opening chunk, before any token */
        char *ev = srv_sse_chunk(j, "", 0, 1);
        if (ev) {
            j->out = ev;
            j->out_len = strlen(ev);
            j->out_cap = j->out_len + 1;
        }
    }
    cs->job = j; /* the HTTP side's reference, dropped when the request completes */
    if (srv_enqueue(S, j) != 0) {
        pthread_mutex_lock(&j->mu);
        j->conn = NULL;
        j->out_done = 1;
        pthread_mutex_unlock(&j->mu);
        int draining;
        pthread_mutex_lock(&S->mu);
        draining = S->draining;
        pthread_mutex_unlock(&S->mu);
        return fail(S, c, cs, 503, "unavailable_error", NULL, NULL,
                    draining ? "the server is shutting down" : "the server is busy (the wait queue is full); retry");
    }
    if (j->req.stream) {
        atomic_fetch_add(&j->refs, 1); /* the response's */
        hdrs h = {.n = 0};
        hdr(&h, "Content-Type", "text/event-stream");
        hdr(&h, "Cache-Control", "no-cache");
        hdr(&h, "X-Accel-Buffering", "no");
        add_common(&h, cs);
        return srv_conn_stream(c, 200, h.h, h.n, stream_reader, j, stream_free);
    }
    pthread_mutex_lock(&j->mu);
    int done = j->out_done;
    if (!done) {
        j->suspended = 1;
        srv_conn_suspend(c);
    }
    pthread_mutex_unlock(&j->mu);
    if (done) answer_job(S, c, cs);
}

/* ---- the tokenizer threads ---- */

/* Parses cs's body and prepares its answer (on a tokenizer thread). */
static void prepare(srv *S, conn_state *cs) {
    srv_endpoint ep = cs->r == R_COMPLETIONS ? SRV_EP_COMPLETIONS
                      : cs->r == R_CHAT      ? SRV_EP_CHAT
                      : cs->r == R_TOKENIZE  ? SRV_EP_TOKENIZE
                                             : SRV_EP_DETOKENIZE;
    if (S->o.prep_delay_ms > 0) {
        struct timespec d = {S->o.prep_delay_ms / 1000, (long)(S->o.prep_delay_ms % 1000) * 1000000L};
        nanosleep(&d, NULL);
    }
    srv_request q;
    if (srv_request_parse(ep, cs->body ? cs->body : "", cs->len, S->info.vocab, &q, &cs->perr) != 0) {
        cs->perr_set = 1;
        pthread_mutex_lock(&S->mu);
        S->m.rejected_bad_request++;
        pthread_mutex_unlock(&S->mu);
        return;
    }
    if (ep == SRV_EP_TOKENIZE)
        prep_tokenize(S, cs, &q);
    else if (ep == SRV_EP_DETOKENIZE)
        prep_detokenize(S, cs, &q);
    else
        prep_completion(S, cs, &q);
    srv_request_free(&q);
}

static void *prep_main(void *arg) {
    srv *S = arg;
    pthread_mutex_lock(&S->prep_mu);
    for (;;) {
        while (!S->prep_head && !S->prep_stop) pthread_cond_wait(&S->prep_wake, &S->prep_mu);
        conn_state *cs = S->prep_head;
        if (!cs) break; /* stopping, and nothing is left */
        S->prep_head = cs->prep_next;
        if (!S->prep_head) S->prep_tail = NULL;
        pthread_mutex_unlock(&S->prep_mu);
        prepare(S, cs);
        srv_conn *c = cs->conn;
        pthread_mutex_lock(&S->prep_mu);
        cs->prep_busy = 0;
        cs->prep_done = 1;
        pthread_mutex_unlock(&S->prep_mu);
        /* after this, cs is the HTTP thread's again */
        srv_conn_resume(c);
        pthread_mutex_lock(&S->prep_mu);
    }
    pthread_mutex_unlock(&S->prep_mu);
    return NULL;
}

/* The HTTP thread, once the tokenizer thread has resumed the connection. */
static void finish_prep(srv *S, srv_conn *c, conn_state *cs) {
    cs->prep_done = 0;
    if (cs->perr_set) return send_error(S, c, cs, &cs->perr);
    if (cs->pjob) {
        srv_job *j = cs->pjob;
        cs->pjob = NULL;
        return start_job(S, c, cs, j);
    }
    char *body = cs->pbody; /* NULL: out of memory, answered 500 */
    cs->pbody = NULL;
    send_body(c, cs, 200, body, NULL);
}

/* ---- dispatch ---- */

static void handle_post(srv *S, srv_conn *c, conn_state *cs) {
    if (cs->r == R_COMPLETIONS || cs->r == R_CHAT) {
        pthread_mutex_lock(&S->mu);
        int draining = S->draining;
        pthread_mutex_unlock(&S->mu);
        if (draining) return fail(S, c, cs, 503, "unavailable_error", NULL, NULL, "the server is shutting down");
    }
    /* parsing, the chat template and tokenizing run on a tokenizer thread,
     * so a 1 MiB prompt never holds up the other sockets */
    pthread_mutex_lock(&S->prep_mu);
    if (S->prep_stop) {
        pthread_mutex_unlock(&S->prep_mu);
        return fail(S, c, cs, 503, "unavailable_error", NULL, NULL, "the server is shutting down");
    }
    cs->conn = c;
    cs->prep_busy = 1;
    cs->prep_next = NULL;
    if (S->prep_tail)
        S->prep_tail->prep_next = cs;
    else
        S->prep_head = cs;
    S->prep_tail = cs;
    srv_conn_suspend(c);
    pthread_cond_signal(&S->prep_wake);
    pthread_mutex_unlock(&S->prep_mu);
}

/* A CORS preflight: the methods, and the headers the page asks for when
 * they are a list of field names (the OpenAI SDKs send their own
 * x-stainless-* headers), else Authorization and Content-Type. */
static void preflight(srv_conn *c, const conn_state *cs) {
    hdrs h = {.n = 0};
    add_common(&h, cs);
    const char *want = srv_conn_header(c, "Access-Control-Request-Headers"), *allow = "Authorization, Content-Type";
    if (want && *want) {
        int ok = 1;
        for (const char *p = want; *p && ok; p++)
            ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || strchr("-_, ", *p);
        if (ok) allow = want;
    }
    hdr(&h, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    hdr(&h, "Access-Control-Allow-Headers", allow);
    hdr(&h, "Access-Control-Max-Age", "600");
    srv_conn_respond(c, 204, h.h, h.n, NULL, 0, 0);
}

static void on_head(void *cls, srv_conn *c) {
    srv *S = cls;
    conn_state *cs = calloc(1, sizeof *cs);
    if (!cs) return send_body(c, NULL, 500, NULL, NULL);
    srv_conn_set_ctx(c, cs);
    const char *url = srv_conn_path(c), *method = srv_conn_method(c);
    const char *origin = srv_conn_header(c, "Origin");
    if (S->o.cors_origin && origin && (strcmp(S->o.cors_origin, "*") == 0 || strcmp(S->o.cors_origin, origin) == 0))
        cs->origin = S->o.cors_origin;
    if (!host_ok(S, c)) {
        char msg[160], hb[64];
        snprintf(msg, sizeof msg,
                 "Host \"%s\" is not a name of this server (a DNS rebinding page?); start the server with "
                 "--allow-host NAME to allow it",
                 drt_printable(srv_conn_host(c), hb, sizeof hb));
        return fail(S, c, cs, 403, "invalid_request_error", "host_not_allowed", NULL, msg);
    }
    const char *want = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0) cs->r = routes[i].r, want = routes[i].method;
    if (!want && strncmp(url, "/v1/models/", 11) == 0 && url[11]) cs->r = R_MODEL, want = "GET";
    if (!want || (cs->r == R_METRICS && !S->o.metrics))
        return fail(S, c, cs, 404, "not_found_error", NULL, NULL, "unknown path");
    if (strcmp(method, "OPTIONS") == 0 && S->o.cors_origin) return preflight(c, cs);
    if (strcmp(method, want) != 0 && !(strcmp(want, "GET") == 0 && strcmp(method, "HEAD") == 0)) {
        char msg[96], ub[48];
        snprintf(msg, sizeof msg, "%s wants %s", drt_printable(url, ub, sizeof ub), want);
        return fail(S, c, cs, 405, "invalid_request_error", NULL, NULL, msg);
    }
    if (strcmp(want, "POST") == 0 && cross_site_simple(c, cs)) {
        char msg[200], ob[64];
        snprintf(msg, sizeof msg,
                 "a cross-site request (Origin %s) without Content-Type: application/json is refused; allow the "
                 "page with --cors-origin",
                 drt_printable(origin, ob, sizeof ob));
        return fail(S, c, cs, 403, "invalid_request_error", "cross_site_request", NULL, msg);
    }
    if (cs->r != R_HEALTH && !key_ok(S, c)) {
        pthread_mutex_lock(&S->mu);
        S->m.rejected_auth++;
        pthread_mutex_unlock(&S->mu);
        return fail(S, c, cs, 401, "authentication_error", "invalid_api_key", NULL,
                    "a valid API key is required (Authorization: Bearer KEY)");
    }
    if (cs->r == R_MODEL && !(cs->model = strdup(url + 11))) return send_body(c, cs, 500, NULL, NULL);
}

/* The GET endpoints, once the request is complete. */
static void handle_get(srv *S, srv_conn *c, conn_state *cs) {
    if (cs->r == R_HEALTH) {
        pthread_mutex_lock(&S->mu);
        int draining = S->draining;
        pthread_mutex_unlock(&S->mu);
        if (draining) return fail(S, c, cs, 503, "unavailable_error", NULL, NULL, "the server is shutting down");
        return send_body(c, cs, 200, strdup("{\"status\":\"ok\"}"), NULL);
    }
    if (cs->r == R_MODELS) return do_models(S, c, cs);
    if (cs->r == R_MODEL) return do_model(S, c, cs, cs->model);
    send_body(c, cs, 200, srv_metrics_text(S), "text/plain; version=0.0.4");
}

static void on_body(void *cls, srv_conn *c, char *body, size_t len) {
    srv *S = cls;
    conn_state *cs = srv_conn_ctx(c);
    cs->body = body;
    cs->len = len;
    if (cs->r == R_HEALTH || cs->r == R_MODELS || cs->r == R_MODEL || cs->r == R_METRICS) return handle_get(S, c, cs);
    handle_post(S, c, cs);
}

static void on_resume(void *cls, srv_conn *c) {
    srv *S = cls;
    conn_state *cs = srv_conn_ctx(c);
    if (cs->job) return answer_job(S, c, cs);
    pthread_mutex_lock(&S->prep_mu);
    int prep_done = cs->prep_done;
    pthread_mutex_unlock(&S->prep_mu);
    if (prep_done) return finish_prep(S, c, cs);
    srv_conn_suspend(c); /* woken before its tokenizer thread is done: wait again */
}

static void on_done(void *cls, srv_conn *c, void *ctx, int ok) {
    (void)cls;
    (void)c;
    conn_state *cs = ctx;
    if (!cs) return;
    srv_job *j = cs->job;
    if (j) {
        pthread_mutex_lock(&j->mu);
        j->conn = NULL;
        j->fd = -1;
        j->suspended = 0;
        int unfinished = !j->out_done;
        pthread_mutex_unlock(&j->mu);
        if (unfinished || !ok) srv_job_cancel(j, "client left");
        srv_job_unref(j);
    }
    if (cs->pjob) srv_job_unref(cs->pjob); /* prepared, never started (the server is stopping) */
    free(cs->pbody);
    free(cs->body);
    free(cs->model);
    free(cs);
}

static void on_refused(void *cls, int status) {
    srv *S = cls;
    pthread_mutex_lock(&S->mu);
    if (status == 413 || status == 431 || status == 414)
        S->m.rejected_too_large++;
    else
        S->m.rejected_bad_request++;
    pthread_mutex_unlock(&S->mu);
}

/* debug (--sndbuf): a small socket send buffer, so that a test's client
 * that does not read fills it after a few KiB */
static void on_accept(void *cls, int fd) {
    srv *S = cls;
    if (S->o.sndbuf > 0) setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &S->o.sndbuf, sizeof S->o.sndbuf);
}

/* Stops the tokenizer threads once they have emptied their queue: every
 * connection they had is resumed when this returns. */
static void prep_stop(srv *S) {
    S->tok_cancel = 1; /* an encode in progress stops within one regex match */
    pthread_mutex_lock(&S->prep_mu);
    S->prep_stop = 1;
    pthread_cond_broadcast(&S->prep_wake);
    pthread_mutex_unlock(&S->prep_mu);
    for (int i = 0; i < S->n_prep_threads; i++) pthread_join(S->prep_threads[i], NULL);
    S->n_prep_threads = 0;
    free(S->prep_threads);
    S->prep_threads = NULL;
}

static int prep_start(srv *S) {
    int n = S->o.tokenizer_threads > 0 ? S->o.tokenizer_threads : 1;
    if (!(S->prep_threads = calloc((size_t)n, sizeof *S->prep_threads))) return -1;
    for (; S->n_prep_threads < n; S->n_prep_threads++)
        if (pthread_create(&S->prep_threads[S->n_prep_threads], NULL, prep_main, S) != 0) {
            fprintf(stderr, "diffrt: serve: cannot start a tokenizer thread\n");
            prep_stop(S);
            return -1;
        }
    return 0;
}

int srv_http_start(srv *S) {
    if (prep_start(S) != 0) return -1;
    srv_httpd_opts ho = {.host = S->o.host,
                         .port = S->o.port,
                         .max_conns = S->o.max_conns,
                         .max_conns_per_ip = S->o.max_conns_per_ip,
                         .idle_timeout_s = S->o.idle_timeout_s,
                         .body_timeout_s = S->o.body_timeout_s,
                         .max_body = S->o.max_body};
    srv_httpd_cb cb = {.cls = S,
                       .on_head = on_head,
                       .on_body = on_body,
                       .on_resume = on_resume,
                       .on_done = on_done,
                       .on_refused = on_refused,
                       .on_accept = on_accept};
    char err[200];
    if (srv_httpd_start(&ho, &cb, &S->httpd, &S->o.port, err, sizeof err) != 0) {
        fprintf(stderr, "diffrt: serve: %s\n", err);
        prep_stop(S);
        return -1;
    }
    return 0;
}

int srv_http_connections(srv *S) {
    return srv_httpd_connections(S->httpd);
}

void srv_http_stop(srv *S) {
    if (S->n_prep_threads) prep_stop(S);
    srv_httpd_stop(S->httpd);
    S->httpd = NULL;
}
