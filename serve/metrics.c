/* GET /metrics: Prometheus text format 0.0.4, vLLM's metric names under a
 * "diffrt:" prefix. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

static const double b_latency[SRV_HIST_BUCKETS] = {0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25,
                                                   0.5,   1,    2.5,  5,    10,   30,   60,  1e300};
static const double b_tokens[SRV_HIST_BUCKETS] = {1,   2,   4,    8,    16,   32,   64,    128,
                                                  256, 512, 1024, 2048, 4096, 8192, 16384, 1e300};

void srv_metrics_init(srv_metrics *m) {
    memset(m, 0, sizeof *m);
    m->ttft.bounds = m->itl.bounds = m->e2e.bounds = m->forward_s.bounds = b_latency;
    m->iteration_tokens.bounds = b_tokens;
}

void srv_hist_add(srv_hist *h, double v) {
    for (int i = 0; i < SRV_HIST_BUCKETS; i++)
        if (v <= h->bounds[i]) {
            h->count[i]++;
            break;
        }
    h->sum += v;
    h->n++;
}

typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} sbuf;

static void put(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void put(sbuf *b, const char *fmt, ...) {
    if (b->oom) return;
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s ? b->s + b->n : NULL, b->s ? b->cap - b->n : 0, fmt, ap);
        va_end(ap);
        if (k < 0) {
            b->oom = 1;
            return;
        }
        if (b->s && b->n + (size_t)k < b->cap) {
            b->n += (size_t)k;
            return;
        }
        size_t cap = (b->cap + (size_t)k + 1) * 2;
        char *p = realloc(b->s, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->s = p, b->cap = cap;
    }
}

static void hist(sbuf *b, const char *name, const char *help, const srv_hist *h) {
    put(b, "# HELP diffrt:%s %s\n# TYPE diffrt:%s histogram\n", name, help, name);
    unsigned long long cum = 0;
    for (int i = 0; i < SRV_HIST_BUCKETS; i++) {
        cum += h->count[i];
        if (i == SRV_HIST_BUCKETS - 1)
            put(b, "diffrt:%s_bucket{le=\"+Inf\"} %llu\n", name, cum);
        else
            put(b, "diffrt:%s_bucket{le=\"%g\"} %llu\n", name, h->bounds[i], cum);
    }
    put(b, "diffrt:%s_sum %.6f\ndiffrt:%s_count %llu\n", name, h->sum, name, h->n);
}

static void one(sbuf *b, const char *type, const char *name, const char *help, double v) {
    put(b, "# HELP diffrt:%s %s\n# TYPE diffrt:%s %s\ndiffrt:%s %.17g\n", name, help, name, type, name, v);
}

char *srv_metrics_text(srv *S) {
    sbuf b = {0};
    pthread_mutex_lock(&S->mu);
    const srv_metrics *m = &S->m;
    long long kv = 0;
    for (int s = 0; s < S->o.parallel; s++)
        if (S->slots[s]) kv += S->slots[s]->n_fed + S->slots[s]->n_gen;
    one(&b, "gauge", "num_requests_running", "requests in a slot", S->n_active);
    one(&b, "gauge", "num_requests_waiting", "requests waiting for a slot", S->n_queued);
    one(&b, "gauge", "slots_busy", "slots holding a request", S->n_active);
    one(&b, "gauge", "kv_cache_usage_perc", "fraction of the KV cache's positions in use",
        (double)kv / ((double)S->o.parallel * S->o.ctx));
    one(&b, "counter", "prompt_tokens_total", "prompt tokens admitted", (double)m->prompt_tokens);
    one(&b, "counter", "generation_tokens_total", "tokens generated", (double)m->generation_tokens);
    one(&b, "counter", "forward_total", "batch forwards run", (double)m->forwards);
    one(&b, "counter", "client_disconnects_total", "requests whose client left before the end", (double)m->disconnects);
    put(&b, "# HELP diffrt:request_success_total requests finished, by reason\n"
            "# TYPE diffrt:request_success_total counter\n");
    put(&b, "diffrt:request_success_total{finished_reason=\"stop\"} %llu\n", m->success_stop);
    put(&b, "diffrt:request_success_total{finished_reason=\"length\"} %llu\n", m->success_length);
    put(&b, "diffrt:request_success_total{finished_reason=\"error\"} %llu\n", m->success_error);
    put(&b, "diffrt:request_success_total{finished_reason=\"abort\"} %llu\n", m->success_abort);
    put(&b, "# HELP diffrt:request_rejected_total requests refused before they ran, by reason\n"
            "# TYPE diffrt:request_rejected_total counter\n");
    put(&b, "diffrt:request_rejected_total{reason=\"queue_full\"} %llu\n", m->rejected_queue_full);
    put(&b, "diffrt:request_rejected_total{reason=\"too_large\"} %llu\n", m->rejected_too_large);
    put(&b, "diffrt:request_rejected_total{reason=\"bad_request\"} %llu\n", m->rejected_bad_request);
    put(&b, "diffrt:request_rejected_total{reason=\"auth\"} %llu\n", m->rejected_auth);
    hist(&b, "time_to_first_token_seconds", "arrival to the first generated token", &m->ttft);
    hist(&b, "inter_token_latency_seconds", "time between a request's tokens", &m->itl);
    hist(&b, "e2e_request_latency_seconds", "arrival to the last token", &m->e2e);
    hist(&b, "iteration_tokens", "rows per forward", &m->iteration_tokens);
    hist(&b, "forward_seconds", "time of one batch forward", &m->forward_s);
    pthread_mutex_unlock(&S->mu);
    if (b.oom) {
        free(b.s);
        return NULL;
    }
    return b.s;
}
