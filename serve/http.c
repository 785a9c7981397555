/* The HTTP layer on libmicrohttpd: routing, limits, API keys, CORS, the
 * small endpoints, and handing completions to the scheduler.
 *
 * libmicrohttpd runs one epoll thread: an idle socket or an open stream
 * costs a file descriptor and a 32 KiB memory pool, never a thread. A
 * non-streaming completion suspends its connection until the scheduler has
 * the whole answer; a stream's content reader suspends when it has sent
 * everything there is and the scheduler resumes it when there is more. */
#include <arpa/inet.h>
#include <cjson/cJSON.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "diffrt/util.h"
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
    char *body;
    size_t len, cap;
    int too_large;
    double t_start;
    srv_job *job;
    char *model;        /* GET /v1/models/{id} */
    const char *origin; /* the allowed CORS origin this request came from, or NULL */

    /* A POST's preparation (parse, chat template, tokenize) runs on a
     * tokenizer thread while the connection is suspended; the thread owns
     * these until it sets prep_done (under S->prep_mu) and resumes it. */
    struct MHD_Connection *conn;
    struct conn_state *prep_next;
    int prep_busy, prep_done;
    int perr_set;
    srv_error perr;
    char *pbody;   /* /tokenize, /detokenize: the answer */
    srv_job *pjob; /* a completion: the job, its prompt's ids ready */
} conn_state;

/* ---- responses ---- */

static void add_common(const srv *S, struct MHD_Response *res, const conn_state *cs) {
    if (cs && cs->origin) {
        MHD_add_response_header(res, "Access-Control-Allow-Origin", cs->origin);
        MHD_add_response_header(res, "Vary", "Origin");
    }
    (void)S;
}

/* Queues body (owned; NULL: out of memory, answered 500) with status. */
static enum MHD_Result send_body(srv *S, struct MHD_Connection *c, const conn_state *cs, int status, char *body,
                                 const char *type) {
    if (!body) {
        static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\",\"param\":null,"
                                  "\"code\":null}}";
        struct MHD_Response *res = MHD_create_response_from_buffer(sizeof oom - 1, (void *)oom, MHD_RESPMEM_PERSISTENT);
        if (!res) return MHD_NO;
        MHD_add_response_header(res, "Content-Type", "application/json");
        enum MHD_Result r = MHD_queue_response(c, 500, res);
        MHD_destroy_response(res);
        return r;
    }
    struct MHD_Response *res = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!res) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(res, "Content-Type", type ? type : "application/json");
    add_common(S, res, cs);
    enum MHD_Result r = MHD_queue_response(c, (unsigned)status, res);
    MHD_destroy_response(res);
    return r;
}

static enum MHD_Result send_error(srv *S, struct MHD_Connection *c, const conn_state *cs, const srv_error *e) {
    char *body = srv_error_json(e);
    if (!body) return send_body(S, c, cs, 500, NULL, NULL);
    struct MHD_Response *res = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!res) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(res, "Content-Type", "application/json");
    if (e->status == 401) MHD_add_response_header(res, "WWW-Authenticate", "Bearer");
    if (e->status == 503) MHD_add_response_header(res, "Retry-After", "1");
    if (e->status >= 500 && e->status != 503) MHD_add_response_header(res, "x-should-retry", "false");
    if (e->status == 405) {
        for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
            if (cs && routes[i].r == cs->r) MHD_add_response_header(res, "Allow", routes[i].method);
    }
    add_common(S, res, cs);
    enum MHD_Result r = MHD_queue_response(c, (unsigned)e->status, res);
    MHD_destroy_response(res);
    return r;
}

static enum MHD_Result fail(srv *S, struct MHD_Connection *c, const conn_state *cs, int status, const char *type,
                            const char *code, const char *param, const char *msg) {
    srv_error e;
    srv_error_set(&e, status, type, code, param, "%s", msg);
    return send_error(S, c, cs, &e);
}

static enum MHD_Result send_json(srv *S, struct MHD_Connection *c, const conn_state *cs, cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return send_body(S, c, cs, 200, s, NULL);
}

/* ---- auth ---- */

/* 1 when the request carries one of the keys (or none is set). The compare
 * takes the same time wherever the first difference is. */
static int key_ok(const srv *S, struct MHD_Connection *c) {
    if (!S->n_keys) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7) != 0) return 0;
    const char *k = h + 7;
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

static enum MHD_Result do_models(srv *S, struct MHD_Connection *c, const conn_state *cs) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    for (int i = 0; i < S->n_aliases; i++) cJSON_AddItemToArray(d, model_object(S, S->aliases[i]));
    return send_json(S, c, cs, o);
}

static enum MHD_Result do_model(srv *S, struct MHD_Connection *c, const conn_state *cs, const char *name) {
    for (int i = 0; i < S->n_aliases; i++)
        if (strcmp(S->aliases[i], name) == 0) return send_json(S, c, cs, model_object(S, name));
    return fail(S, c, cs, 404, "not_found_error", "model_not_found", "model", "no such model");
}

/* /tokenize and /detokenize: the JSON answer into cs->pbody, or cs->perr */
static void prep_tokenize(srv *S, conn_state *cs, srv_request *q) {
    int32_t *ids = NULL;
    int n = 0;
    if (drt_tokenizer_encode(S->tok, q->prompt_text, q->prompt_len, q->add_special, &ids, &n) != DRT_OK) {
        cs->perr_set = 1;
        srv_error_set(&cs->perr, 400, "invalid_request_error", NULL, "content", "%s", drt_last_error());
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
    cJSON_AddStringToObject(o, "content", text);
    cJSON_AddStringToObject(o, "prompt", text);
    drt_free(text);
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
        int add = 1;
        if (q->ep == SRV_EP_CHAT) {
            if (S->chat.kind == SRV_CHAT_NONE)
                return srv_error_set(e, 400, "invalid_request_error", NULL, "messages",
                                     "this model has no chat template; use /v1/completions, or start the server "
                                     "with --chat-template NAME");
            if (srv_chat_render(&S->chat, q->messages, q->n_messages, &chat, &len, e) != 0) return -1;
            text = chat;
            add = S->chat.add_bos;
        }
        /* one id more than the context: a prompt that long is refused below with its size */
        drt_status st = drt_tokenizer_encode_max(S->tok, text, len, add, ctx + 1, &j->prompt, &j->n_prompt);
        free(chat);
        if (st != DRT_OK) {
            if (strstr(drt_last_error(), "more than"))
                return srv_error_set(e, 400, "invalid_request_error", "context_length_exceeded",
                                     q->ep == SRV_EP_CHAT ? "messages" : "prompt",
                                     "This model's maximum context length is %d tokens. However, your prompt "
                                     "makes more than %d tokens.",
                                     ctx, ctx);
            return srv_error_set(e, 400, "invalid_request_error", NULL, q->ep == SRV_EP_CHAT ? "messages" : "prompt",
                                 "%s", drt_last_error());
        }
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
                           .top_p = (float)q->top_p,
                           .seed = q->seed_given ? q->seed : seed_now()};
    if (drt_sampler_create(&so, S->info.vocab, &j->smp) != DRT_OK)
        return srv_error_set(e, 400, "invalid_request_error", NULL, NULL, "%s", drt_last_error());
    return 0;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    srv_job *j = cls;
    ssize_t r;
    pthread_mutex_lock(&j->mu);
    if (j->out_len > j->out_off) {
        size_t n = j->out_len - j->out_off < max ? j->out_len - j->out_off : max;
        memcpy(buf, j->out + j->out_off, n);
        j->out_off += n;
        r = (ssize_t)n;
    } else if (j->out_done || !j->conn) {
        r = j->cancelled ? MHD_CONTENT_READER_END_WITH_ERROR : MHD_CONTENT_READER_END_OF_STREAM;
    } else { /* nothing yet: park the connection until the scheduler has more */
        j->suspended = 1;
        MHD_suspend_connection(j->conn);
        r = 0;
    }
    pthread_mutex_unlock(&j->mu);
    return r;
}

static void stream_free(void *cls) {
    srv_job_unref(cls);
}

/* A finished non-streaming job's answer. */
static enum MHD_Result answer_job(srv *S, struct MHD_Connection *c, conn_state *cs) {
    srv_job *j = cs->job;
    pthread_mutex_lock(&j->mu);
    if (!j->out_done) { /* woken early: wait again */
        j->suspended = 1;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&j->mu);
        return MHD_YES;
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
    struct MHD_Response *res = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!res) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(res, "Content-Type", "application/json");
    if (no_retry) MHD_add_response_header(res, "x-should-retry", "false");
    if (status == 503) MHD_add_response_header(res, "Retry-After", "1");
    add_common(S, res, cs);
    enum MHD_Result r = MHD_queue_response(c, (unsigned)status, res);
    MHD_destroy_response(res);
    return r;
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
static enum MHD_Result start_job(srv *S, struct MHD_Connection *c, conn_state *cs, srv_job *j) {
    static atomic_ullong serial;
    snprintf(j->id, sizeof j->id, "%s-%llx%04llx", j->req.ep == SRV_EP_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long long)time(NULL), (unsigned long long)(atomic_fetch_add(&serial, 1) & 0xffff));
    j->created = (long long)time(NULL);
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    j->conn = c;
    j->fd = ci ? ci->connect_fd : -1;
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
        struct MHD_Response *res = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, j,
                                                                     stream_free);
        if (!res) {
            srv_job_unref(j);
            srv_job_cancel(j, "out of memory");
            return MHD_NO;
        }
        MHD_add_response_header(res, "Content-Type", "text/event-stream");
        MHD_add_response_header(res, "Cache-Control", "no-cache");
        MHD_add_response_header(res, "X-Accel-Buffering", "no");
        add_common(S, res, cs);
        enum MHD_Result r = MHD_queue_response(c, 200, res);
        MHD_destroy_response(res);
        return r;
    }
    pthread_mutex_lock(&j->mu);
    int done = j->out_done;
    if (!done) {
        j->suspended = 1;
        MHD_suspend_connection(c);
    }
    pthread_mutex_unlock(&j->mu);
    return done ? answer_job(S, c, cs) : MHD_YES;
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
        struct MHD_Connection *c = cs->conn;
        pthread_mutex_lock(&S->prep_mu);
        cs->prep_busy = 0;
        cs->prep_done = 1;
        pthread_mutex_unlock(&S->prep_mu);
        /* outside prep_mu, as the scheduler resumes outside job.mu; the
         * HTTP thread suspended c before it queued cs, so this cannot come
         * first. After this, cs is the HTTP thread's again. */
        MHD_resume_connection(c);
        pthread_mutex_lock(&S->prep_mu);
    }
    pthread_mutex_unlock(&S->prep_mu);
    return NULL;
}

/* The HTTP thread, once the tokenizer thread has resumed the connection. */
static enum MHD_Result finish_prep(srv *S, struct MHD_Connection *c, conn_state *cs) {
    cs->prep_done = 0;
    if (cs->perr_set) return send_error(S, c, cs, &cs->perr);
    if (cs->pjob) {
        srv_job *j = cs->pjob;
        cs->pjob = NULL;
        return start_job(S, c, cs, j);
    }
    char *body = cs->pbody; /* NULL: out of memory, answered 500 */
    cs->pbody = NULL;
    return send_body(S, c, cs, 200, body, NULL);
}

/* ---- dispatch ---- */

static enum MHD_Result handle_body(srv *S, struct MHD_Connection *c, conn_state *cs) {
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
    MHD_suspend_connection(c);
    pthread_cond_signal(&S->prep_wake);
    pthread_mutex_unlock(&S->prep_mu);
    return MHD_YES;
}

static enum MHD_Result first_call(srv *S, struct MHD_Connection *c, conn_state *cs, const char *url,
                                  const char *method) {
    const char *origin = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Origin");
    if (S->o.cors_origin && origin && (strcmp(S->o.cors_origin, "*") == 0 || strcmp(S->o.cors_origin, origin) == 0))
        cs->origin = S->o.cors_origin;
    const char *want = NULL;
    for (size_t i = 0; i < sizeof routes / sizeof routes[0]; i++)
        if (strcmp(url, routes[i].path) == 0) cs->r = routes[i].r, want = routes[i].method;
    if (!want && strncmp(url, "/v1/models/", 11) == 0 && url[11]) cs->r = R_MODEL, want = "GET";
    if (!want || (cs->r == R_METRICS && !S->o.metrics))
        return fail(S, c, cs, 404, "not_found_error", NULL, NULL, "unknown path");
    if (strcmp(method, "OPTIONS") == 0 && S->o.cors_origin) {
        struct MHD_Response *res = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
        if (!res) return MHD_NO;
        add_common(S, res, cs);
        MHD_add_response_header(res, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
        MHD_add_response_header(res, "Access-Control-Allow-Headers", "Authorization, Content-Type");
        MHD_add_response_header(res, "Access-Control-Max-Age", "600");
        enum MHD_Result r = MHD_queue_response(c, 204, res);
        MHD_destroy_response(res);
        return r;
    }
    if (strcmp(method, want) != 0 && !(strcmp(want, "GET") == 0 && strcmp(method, "HEAD") == 0)) {
        char msg[96];
        snprintf(msg, sizeof msg, "%s wants %s", url, want);
        return fail(S, c, cs, 405, "invalid_request_error", NULL, NULL, msg);
    }
    if (cs->r != R_HEALTH && !key_ok(S, c)) {
        pthread_mutex_lock(&S->mu);
        S->m.rejected_auth++;
        pthread_mutex_unlock(&S->mu);
        return fail(S, c, cs, 401, "authentication_error", "invalid_api_key", NULL,
                    "a valid API key is required (Authorization: Bearer KEY)");
    }
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
        char *end;
        unsigned long long n = strtoull(cl, &end, 10);
        if (*end == 0 && n > (unsigned long long)S->o.max_body) {
            cs->too_large = 1;
            pthread_mutex_lock(&S->mu);
            S->m.rejected_too_large++;
            pthread_mutex_unlock(&S->mu);
            char msg[96];
            snprintf(msg, sizeof msg, "the body is larger than %ld bytes (--max-body)", S->o.max_body);
            return fail(S, c, cs, 413, "invalid_request_error", NULL, NULL, msg);
        }
    }
    if (cs->r == R_MODEL && !(cs->model = strdup(url + 11))) return MHD_NO;
    /* answered on the next call, once libmicrohttpd has read the whole
     * request: a response queued now would close the connection */
    return MHD_YES;
}

/* The GET endpoints, once the request is complete. */
static enum MHD_Result handle_get(srv *S, struct MHD_Connection *c, conn_state *cs) {
    if (cs->r == R_HEALTH) {
        pthread_mutex_lock(&S->mu);
        int draining = S->draining;
        pthread_mutex_unlock(&S->mu);
        if (draining) return fail(S, c, cs, 503, "unavailable_error", NULL, NULL, "the server is shutting down");
        return send_body(S, c, cs, 200, strdup("{\"status\":\"ok\"}"), NULL);
    }
    if (cs->r == R_MODELS) return do_models(S, c, cs);
    if (cs->r == R_MODEL) return do_model(S, c, cs, cs->model);
    return send_body(S, c, cs, 200, srv_metrics_text(S), "text/plain; version=0.0.4");
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    srv *S = cls;
    conn_state *cs = *con_cls;
    if (!cs) {
        cs = calloc(1, sizeof *cs);
        if (!cs) return MHD_NO;
        cs->t_start = drt_clock_s();
        *con_cls = cs;
        return first_call(S, c, cs, url, method);
    }
    if (cs->job) return answer_job(S, c, cs);
    pthread_mutex_lock(&S->prep_mu);
    int prep_done = cs->prep_done, prep_busy = cs->prep_busy;
    pthread_mutex_unlock(&S->prep_mu);
    if (prep_done) return finish_prep(S, c, cs);
    if (prep_busy) return MHD_YES; /* not reached: suspended while a tokenizer thread has it */
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        /* libmicrohttpd cannot answer before the body's end: a body that
         * comes too slowly is cut by closing the connection; one past the
         * limit is read and dropped (nothing kept), then answered 413 */
        if (S->o.body_timeout_s > 0 && drt_clock_s() - cs->t_start > S->o.body_timeout_s) return MHD_NO;
        if (cs->too_large) return MHD_YES;
        if (cs->len + n > (size_t)S->o.max_body) {
            cs->too_large = 1;
            free(cs->body);
            cs->body = NULL;
            cs->len = cs->cap = 0;
            pthread_mutex_lock(&S->mu);
            S->m.rejected_too_large++;
            pthread_mutex_unlock(&S->mu);
            return MHD_YES;
        }
        if (cs->len + n + 1 > cs->cap) {
            size_t cap = (cs->len + n + 1) * 2;
            if (cap > (size_t)S->o.max_body + 1) cap = (size_t)S->o.max_body + 1;
            char *p = realloc(cs->body, cap);
            if (!p) return MHD_NO;
            cs->body = p, cs->cap = cap;
        }
        memcpy(cs->body + cs->len, upload, n);
        cs->len += n;
        return MHD_YES;
    }
    if (cs->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body is larger than %ld bytes (--max-body)", S->o.max_body);
        return fail(S, c, cs, 413, "invalid_request_error", NULL, NULL, msg);
    }
    if (cs->r == R_HEALTH || cs->r == R_MODELS || cs->r == R_MODEL || cs->r == R_METRICS) return handle_get(S, c, cs);
    return handle_body(S, c, cs);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)cls;
    (void)c;
    conn_state *cs = *con_cls;
    if (!cs) return;
    srv_job *j = cs->job;
    if (j) {
        pthread_mutex_lock(&j->mu);
        j->conn = NULL;
        j->fd = -1;
        j->suspended = 0;
        int unfinished = !j->out_done;
        pthread_mutex_unlock(&j->mu);
        if (unfinished || toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) srv_job_cancel(j, "client left");
        srv_job_unref(j);
    }
    if (cs->pjob) srv_job_unref(cs->pjob); /* prepared, never started (the daemon is stopping) */
    free(cs->pbody);
    free(cs->body);
    free(cs->model);
    free(cs);
    *con_cls = NULL;
}

/* debug (--sndbuf): a small socket send buffer, so that a test's client
 * that does not read fills it after a few KiB */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe) {
    (void)socket_context;
    srv *S = cls;
    if (toe != MHD_CONNECTION_NOTIFY_STARTED || S->o.sndbuf <= 0) return;
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) setsockopt(ci->connect_fd, SOL_SOCKET, SO_SNDBUF, &S->o.sndbuf, sizeof S->o.sndbuf);
}

static void on_log(void *cls, const char *fmt, va_list ap) {
    (void)cls;
    (void)fmt;
    (void)ap; /* libmicrohttpd's own messages (a client's bad request line, ...) are not the operator's business */
}

/* Stops the tokenizer threads once they have emptied their queue: every
 * connection they had is resumed when this returns. */
static void prep_stop(srv *S) {
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
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    if (inet_pton(AF_INET, S->o.host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET;
        a4->sin_port = htons((uint16_t)S->o.port);
    } else if (inet_pton(AF_INET6, S->o.host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6;
        a6->sin6_port = htons((uint16_t)S->o.port);
        flags |= MHD_USE_IPv6;
    } else {
        fprintf(stderr, "diffrt: serve: --host wants a numeric IPv4 or IPv6 address, got \"%.64s\"\n", S->o.host);
        prep_stop(S);
        return -1;
    }
    S->daemon = MHD_start_daemon(
        flags, (uint16_t)S->o.port, NULL, NULL, on_request, S, MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss,
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)S->o.max_conns, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        (unsigned)S->o.max_conns_per_ip, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)S->o.idle_timeout_s,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)32768, MHD_OPTION_NOTIFY_COMPLETED, on_completed, S,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, S, MHD_OPTION_EXTERNAL_LOGGER, on_log, S, MHD_OPTION_END);
    if (!S->daemon) {
        fprintf(stderr, "diffrt: serve: cannot listen on %s port %d (in use, or not an address of this host)\n",
                S->o.host, S->o.port);
        prep_stop(S);
        return -1;
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S->daemon, MHD_DAEMON_INFO_BIND_PORT);
    if (di) S->o.port = di->port;
    return 0;
}

int srv_http_connections(srv *S) {
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(S->daemon, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
    return di ? (int)di->num_connections : 0;
}

void srv_http_stop(srv *S) {
    if (S->n_prep_threads) prep_stop(S);
    if (S->daemon) MHD_stop_daemon(S->daemon);
    S->daemon = NULL;
}
