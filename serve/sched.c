/* The scheduler: one thread owns the batch session. Each step it drops the
 * requests whose client left or whose deadline passed, admits waiting
 * requests into free slots, and runs one forward of at most --batch-tokens
 * rows: one row for every decoding request first, then chunks of prompts,
 * oldest first, so a long prompt never freezes the other streams. Each
 * flagged row is sampled with its request's own sampler; the text goes out
 * in whole characters, held back only while it could begin a stop string. */
#define _DEFAULT_SOURCE /* struct tcp_info */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>

#include "diffrt/util.h"
#include "server.h"

srv_job *srv_job_new(srv *S) {
    srv_job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    pthread_mutex_init(&j->mu, NULL);
    atomic_init(&j->refs, 1);
    j->S = S;
    j->slot = -1;
    j->fd = -1;
    j->t_arrival = drt_clock_s();
    j->t_ping = j->t_arrival;
    drt_tokenizer_stream_init(&j->st);
    return j;
}

void srv_job_unref(srv_job *j) {
    if (!j || atomic_fetch_sub(&j->refs, 1) != 1) return;
    srv_request_free(&j->req);
    free(j->prompt);
    drt_sampler_free(j->smp);
    free(j->text);
    free(j->out);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

int srv_enqueue(srv *S, srv_job *j) {
    pthread_mutex_lock(&S->mu);
    /* waiting for the scheduler to admit it into a free slot is not waiting in the queue */
    if (S->draining || S->n_queued >= S->o.queue + (S->o.parallel - S->n_active)) {
        if (!S->draining) S->m.rejected_queue_full++;
        pthread_mutex_unlock(&S->mu);
        return -1;
    }
    atomic_fetch_add(&j->refs, 1);
    j->state = JOB_QUEUED;
    j->next = NULL;
    if (S->q_tail)
        S->q_tail->next = j;
    else
        S->q_head = j;
    S->q_tail = j;
    S->n_queued++;
    pthread_cond_signal(&S->wake);
    pthread_mutex_unlock(&S->mu);
    return 0;
}

/* connections to resume once no lock is held */
typedef struct {
    srv_conn **c;
    int n, cap;
} resume_list;

static void resume_add(resume_list *r, srv_conn *c) {
    if (!c) return;
    if (r->n == r->cap) {
        int cap = r->cap ? r->cap * 2 : 16;
        srv_conn **p = realloc(r->c, sizeof *p * (size_t)cap);
        if (!p) { /* cannot happen in practice; resuming late beats never */
            srv_conn_resume(c);
            return;
        }
        r->c = p, r->cap = cap;
    }
    r->c[r->n++] = c;
}

static void resume_all(resume_list *r) {
    for (int i = 0; i < r->n; i++) srv_conn_resume(r->c[i]);
    r->n = 0;
}

/* Appends to j's output; returns the connection to resume (the caller does,
 * holding no lock), or NULL. */
static srv_conn *job_put(srv_job *j, const char *bytes, size_t n, int done) {
    srv_conn *c = NULL;
    pthread_mutex_lock(&j->mu);
    if (!j->cancelled && n) {
        if (j->out_off == j->out_len) j->out_off = j->out_len = 0;
        if (j->req.stream && j->out_len - j->out_off + n > (size_t)j->S->o.max_out) {
            j->cancelled = 1; /* the client does not read: drop it rather than buffer without bound */
            j->cancel_why = "slow reader";
        } else {
            if (j->out_len + n + 1 > j->out_cap) {
                size_t cap = (j->out_len + n + 1) * 2;
                char *p = realloc(j->out, cap);
                if (!p) {
                    j->cancelled = 1;
                    j->cancel_why = "out of memory";
                    goto wake;
                }
                j->out = p, j->out_cap = cap;
            }
            memcpy(j->out + j->out_len, bytes, n);
            j->out_len += n;
            j->out[j->out_len] = 0;
        }
    }
wake:
    if (done || j->cancelled) j->out_done = 1;
    if (j->suspended && j->conn) {
        c = j->conn;
        j->suspended = 0;
    }
    pthread_mutex_unlock(&j->mu);
    return c;
}

void srv_job_cancel(srv_job *j, const char *why) {
    pthread_mutex_lock(&j->mu);
    if (!j->cancelled) {
        j->cancelled = 1;
        j->cancel_why = why;
    }
    pthread_mutex_unlock(&j->mu);
    pthread_mutex_lock(&j->S->mu);
    pthread_cond_signal(&j->S->wake);
    pthread_mutex_unlock(&j->S->mu);
}

/* An SSE event (owned text) into j's output. */
static void put_owned(srv_job *j, char *s, int done, resume_list *rl) {
    if (!s) {
        pthread_mutex_lock(&j->mu);
        j->cancelled = 1;
        j->cancel_why = "out of memory";
        pthread_mutex_unlock(&j->mu);
        resume_add(rl, job_put(j, NULL, 0, 1));
        return;
    }
    resume_add(rl, job_put(j, s, strlen(s), done));
    free(s);
}

/* Leaves the slot (or the queue's count) and drops the scheduler's reference. */
static void job_release(srv *S, srv_job *j) {
    if (j->slot >= 0) {
        drt_seq_truncate(S->bs, j->slot, 0);
        S->slots[j->slot] = NULL;
        j->slot = -1;
        S->n_active--;
    }
    j->state = JOB_DONE;
    srv_job_unref(j);
}

/* Ends j with an error: an error event then [DONE] when streaming, else the
 * error as the response. */
static void job_fail(srv *S, srv_job *j, const srv_error *e, resume_list *rl) {
    S->m.success_error++;
    if (j->req.stream) {
        char *ev = srv_sse_error(e);
        put_owned(j, ev, 0, rl);
        resume_add(rl, job_put(j, "data: [DONE]\n\n", 14, 1));
    } else {
        char *body = srv_error_json(e);
        pthread_mutex_lock(&j->mu);
        j->status = e->status;
        j->no_retry = e->status >= 500;
        pthread_mutex_unlock(&j->mu);
        put_owned(j, body, 1, rl);
    }
    job_release(S, j);
}

static void job_finish(srv *S, srv_job *j, const char *why, resume_list *rl) {
    j->finish = why;
    if (strcmp(why, "stop") == 0)
        S->m.success_stop++;
    else
        S->m.success_length++;
    srv_hist_add(&S->m.e2e, drt_clock_s() - j->t_arrival);
    if (j->req.stream) {
        put_owned(j, srv_sse_finish(j), 1, rl);
    } else {
        pthread_mutex_lock(&j->mu);
        j->status = 200;
        pthread_mutex_unlock(&j->mu);
        put_owned(j, srv_body_final(j), 1, rl);
    }
    job_release(S, j);
}

/* Stop strings: the request's and the chat format's. */
static int job_stops(const srv_job *j, const char **s, size_t *n) {
    int k = 0;
    for (int i = 0; i < j->req.n_stop; i++) s[k] = j->req.stop[i], n[k] = strlen(s[k]), k++;
    if (j->req.ep == SRV_EP_CHAT && j->S->chat.stop) s[k] = j->S->chat.stop, n[k] = strlen(s[k]), k++;
    return k;
}

/* Sends the generated text that can no longer be part of a stop string.
 * Returns 1 when a stop string was found (the text ends before it). */
static int job_text_out(srv_job *j, int final, resume_list *rl) {
    const char *s[SRV_MAX_STOP + 1];
    size_t sn[SRV_MAX_STOP + 1];
    int ns = job_stops(j, s, sn), hit = 0;
    size_t safe = j->text_len;
    for (int i = 0; i < ns; i++) {
        /* a match starts at or after `emitted`: text that could begin one is never sent */
        size_t from = j->emitted;
        while (from + sn[i] <= j->text_len) {
            const char *p = memchr(j->text + from, s[i][0], j->text_len - from);
            if (!p) break;
            size_t at = (size_t)(p - j->text);
            if (at + sn[i] <= j->text_len && memcmp(p, s[i], sn[i]) == 0) {
                if (at < safe) safe = at;
                hit = 1;
                break;
            }
            from = at + 1;
        }
    }
    if (!hit && !final) {
        for (int i = 0; i < ns; i++) {
            size_t k = sn[i] - 1 < j->text_len - j->emitted ? sn[i] - 1 : j->text_len - j->emitted;
            for (; k > 0; k--)
                if (memcmp(j->text + j->text_len - k, s[i], k) == 0) break;
            if (j->text_len - k < safe) safe = j->text_len - k;
        }
    }
    if (safe > j->emitted) {
        if (j->req.stream) put_owned(j, srv_sse_chunk(j, j->text + j->emitted, safe - j->emitted, 0), 0, rl);
        j->emitted = safe;
    }
    if (hit) j->text_len = safe; /* the final body holds the text before the stop string */
    return hit;
}

static int job_is_eos(const srv *S, const srv_job *j, int32_t t) {
    if (j->req.ignore_eos) return 0;
    for (int i = 0; i < S->n_eos; i++)
        if (S->eos[i] == t) return 1;
    return j->req.ep == SRV_EP_CHAT && t == S->end_of_turn;
}

/* The sampled token of one flagged row. */
static void job_token(srv *S, srv_job *j, const float *logits, double now, resume_list *rl) {
    int32_t t = drt_sampler_sample(j->smp, logits);
    if (t < 0) {
        srv_error e;
        srv_error_set(&e, 500, "server_error", NULL, NULL, "sampling failed: %s", drt_last_error());
        job_fail(S, j, &e, rl);
        return;
    }
    j->n_gen++;
    S->m.generation_tokens++;
    if (j->n_gen == 1) {
        j->t_first = now;
        srv_hist_add(&S->m.ttft, now - j->t_arrival);
    } else {
        srv_hist_add(&S->m.itl, now - j->t_last);
    }
    j->t_last = now;
    j->last = t;
    j->state = JOB_DECODE;
    int stop = job_is_eos(S, j, t);
    if (!stop) {
        if (drt_tokenizer_stream_push(S->tok, &j->st, t, 1, &j->text, &j->text_len, &j->text_cap) != DRT_OK) {
            srv_error e;
            srv_error_set(&e, 500, "server_error", NULL, NULL, "detokenizing failed: %s", drt_last_error());
            job_fail(S, j, &e, rl);
            return;
        }
        stop = job_text_out(j, 0, rl);
    }
    const char *why = stop ? "stop" : NULL;
    /* the next forward writes position n_prompt + n_gen - 1 */
    if (!why && (j->n_gen >= j->max_tokens || j->n_prompt + j->n_gen - 1 >= S->o.ctx)) why = "length";
    if (!why) return;
    if (!stop || job_is_eos(S, j, t)) { /* flush what the decoder holds, then the rest of the text */
        if (drt_tokenizer_stream_flush(S->tok, &j->st, &j->text, &j->text_len, &j->text_cap) == DRT_OK)
            if (job_text_out(j, 1, rl)) why = "stop";
    }
    job_finish(S, j, why, rl);
}

/* A parked connection's socket, looked at (job.mu held): 1 when the client
 * is gone. The HTTP thread does not watch a parked connection, so this is
 * where a client that left is seen. End of file alone does not say it: a
 * client may shut its sending side once the request is out (a half close)
 * and still read the answer. So at the first end of file something is sent
 * (a "100 Continue" interim response, which an HTTP/1.1 client skips, or
 * an SSE comment for a stream: *ping), and a peer that has closed its
 * socket answers that with a reset, seen on a later look. HTTP/1.0 allows
 * no interim response: there end of file before a non-streamed answer is
 * taken as the client leaving. */
static int peer_gone(srv_job *j, int *ping) {
    char c;
    ssize_t r = recv(j->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) return 0;
    if (r < 0) return 1; /* reset, or another error */
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    if (getsockopt(j->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && ti.tcpi_state == TCP_CLOSE) return 1;
    if (j->eof_probed) return 0;
    if (j->req.stream) {
        j->eof_probed = 1;
        *ping = 1;
        return 0;
    }
    if (j->http10) return 1;
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    j->eof_probed = 1;
    return send(j->fd, probe, sizeof probe - 1, MSG_DONTWAIT | MSG_NOSIGNAL) < 0 && errno != EAGAIN &&
           errno != EWOULDBLOCK;
}

/* Cancellations, deadlines and keep-alive pings, for queued and active
 * jobs: 1 gone, 2 send a ping, 0 neither. */
static int job_gone(srv_job *j, double now) {
    int gone = 0, ping = 0;
    pthread_mutex_lock(&j->mu);
    if (!j->cancelled && j->conn && j->suspended && j->fd >= 0 && peer_gone(j, &ping)) {
        j->cancelled = 1;
        j->cancel_why = "client left";
    }
    gone = j->cancelled;
    ping |= !gone && j->req.stream && j->state != JOB_DECODE && now - j->t_ping >= 15;
    pthread_mutex_unlock(&j->mu);
    if (ping) j->t_ping = now;
    return gone ? 1 : ping ? 2 : 0;
}

static void count_cancel(srv *S, srv_job *j) {
    pthread_mutex_lock(&j->mu);
    const char *why = j->cancel_why ? j->cancel_why : "";
    pthread_mutex_unlock(&j->mu);
    if (strcmp(why, "client left") == 0) S->m.disconnects++;
    S->m.success_abort++;
}

static void sweep(srv *S, double now, resume_list *rl) {
    srv_job **pp = &S->q_head, *prev = NULL;
    while (*pp) {
        srv_job *j = *pp;
        int g = job_gone(j, now);
        if (g == 2) resume_add(rl, job_put(j, ": ping\n\n", 8, 0));
        int late = S->o.timeout_s > 0 && now - j->t_arrival > S->o.timeout_s;
        if (g == 1 || late) {
            *pp = j->next;
            if (S->q_tail == j) S->q_tail = prev;
            S->n_queued--;
            if (g == 1) {
                count_cancel(S, j);
                resume_add(rl, job_put(j, NULL, 0, 1));
                job_release(S, j);
            } else {
                srv_error e;
                srv_error_set(&e, 503, "unavailable_error", NULL, NULL,
                              "the request waited %d s for a slot (--timeout); try again", S->o.timeout_s);
                job_fail(S, j, &e, rl);
            }
            continue;
        }
        prev = j;
        pp = &j->next;
    }
    for (int s = 0; s < S->o.parallel; s++) {
        srv_job *j = S->slots[s];
        if (!j) continue;
        int g = job_gone(j, now);
        if (g == 2) resume_add(rl, job_put(j, ": ping\n\n", 8, 0));
        if (g == 1) {
            count_cancel(S, j);
            resume_add(rl, job_put(j, NULL, 0, 1));
            job_release(S, j);
        } else if (S->o.timeout_s > 0 && now - j->t_arrival > S->o.timeout_s) {
            job_text_out(j, 1, rl);
            job_finish(S, j, "length", rl);
        }
    }
}

/* Shutdown after the grace period: what is left ends with a 503. */
static void fail_all(srv *S, resume_list *rl) {
    srv_error e;
    srv_error_set(&e, 503, "unavailable_error", NULL, NULL, "the server is shutting down");
    while (S->q_head) {
        srv_job *j = S->q_head;
        S->q_head = j->next;
        S->n_queued--;
        job_fail(S, j, &e, rl);
    }
    S->q_tail = NULL;
    for (int s = 0; s < S->o.parallel; s++)
        if (S->slots[s]) job_fail(S, S->slots[s], &e, rl);
}

static void admit(srv *S) {
    for (int s = 0; s < S->o.parallel && S->q_head; s++) {
        if (S->slots[s]) continue;
        srv_job *j = S->q_head;
        S->q_head = j->next;
        if (!S->q_head) S->q_tail = NULL;
        S->n_queued--;
        j->next = NULL;
        j->slot = s;
        j->state = JOB_PREFILL;
        j->n_fed = 0;
        S->slots[s] = j;
        S->n_active++;
        S->m.prompt_tokens += (unsigned long long)j->n_prompt;
    }
}

typedef struct {
    int32_t *tok, *seq;
    int8_t *flag;
    srv_job **owner; /* [rows]: the job of each row */
    int *chunk;      /* [parallel]: prompt rows of each slot this step */
    int n;
} batch_buf;

static int build_batch(srv *S, batch_buf *b) {
    int budget = S->o.batch_tokens, decoding = 0;
    for (int s = 0; s < S->o.parallel; s++) decoding += S->slots[s] && S->slots[s]->state == JOB_DECODE;
    /* while requests decode, every decode row goes, and prompt chunks ride
     * along, at most --step-prompt-rows of them: a step of a few dozen rows
     * costs about what a decode step costs (the weights are read once
     * either way), where a step of hundreds of rows would stall every
     * stream for its whole length. The cap counts prompt rows only, so a
     * prompt that fits it is read in one step however many decode beside
     * it, and its first token comes one step after it was admitted. */
    if (decoding && S->o.step_prompt_rows > 0 && decoding + S->o.step_prompt_rows < budget)
        budget = decoding + S->o.step_prompt_rows;
    b->n = 0;
    for (int s = 0; s < S->o.parallel; s++) {
        b->chunk[s] = 0;
        srv_job *j = S->slots[s];
        if (!j || j->state != JOB_DECODE || b->n == budget) continue;
        b->tok[b->n] = j->last, b->seq[b->n] = s, b->flag[b->n] = 1, b->owner[b->n] = j;
        b->n++;
    }
    for (;;) { /* prompts, oldest first */
        srv_job *old = NULL;
        for (int s = 0; s < S->o.parallel; s++) {
            srv_job *j = S->slots[s];
            if (j && j->state == JOB_PREFILL && !b->chunk[s] && (!old || j->t_arrival < old->t_arrival)) old = j;
        }
        if (!old || b->n == budget) break;
        int k = old->n_prompt - old->n_fed;
        if (k > budget - b->n) k = budget - b->n;
        for (int i = 0; i < k; i++) {
            b->tok[b->n] = old->prompt[old->n_fed + i], b->seq[b->n] = old->slot, b->owner[b->n] = old;
            b->flag[b->n] = old->n_fed + k == old->n_prompt && i == k - 1;
            b->n++;
        }
        b->chunk[old->slot] = k;
    }
    return b->n;
}

static void after_forward(srv *S, batch_buf *b, drt_status st, double now, resume_list *rl) {
    if (st != DRT_OK) { /* only this step's requests fail */
        srv_error e;
        srv_error_set(&e, 500, "server_error", NULL, NULL, "the forward failed: %s", drt_last_error());
        for (int s = 0; s < S->o.parallel; s++) {
            srv_job *j = S->slots[s];
            int in = b->chunk[s] > 0;
            for (int r = 0; r < b->n && !in; r++) in = b->owner[r] == j;
            if (j && in) job_fail(S, j, &e, rl);
        }
        return;
    }
    for (int s = 0; s < S->o.parallel; s++)
        if (S->slots[s] && b->chunk[s]) S->slots[s]->n_fed += b->chunk[s];
    int k = 0;
    for (int r = 0; r < b->n; r++) {
        if (!b->flag[r]) continue;
        srv_job *j = b->owner[r];
        const float *lg = S->logits + (size_t)k++ * (size_t)S->info.vocab;
        if (S->slots[b->seq[r]] == j) job_token(S, j, lg, now, rl);
    }
}

void *srv_sched_main(void *arg) {
    srv *S = arg;
    int P = S->o.parallel, R = S->o.batch_tokens;
    batch_buf b = {.tok = malloc(sizeof(int32_t) * (size_t)R),
                   .seq = malloc(sizeof(int32_t) * (size_t)R),
                   .flag = malloc((size_t)R),
                   .owner = malloc(sizeof(srv_job *) * (size_t)R),
                   .chunk = calloc((size_t)P, sizeof(int))};
    resume_list rl = {0};
    if (!b.tok || !b.seq || !b.flag || !b.owner || !b.chunk) {
        fprintf(stderr, "diffrt: serve: out of memory for the scheduler\n");
        abort();
    }
    pthread_mutex_lock(&S->mu);
    for (;;) {
        double now = drt_clock_s();
        sweep(S, now, &rl);
        if (S->stop) fail_all(S, &rl);
        admit(S);
        if (S->stop && !S->n_active && !S->n_queued) break;
        int n = build_batch(S, &b);
        pthread_mutex_unlock(&S->mu);
        resume_all(&rl);
        pthread_mutex_lock(&S->mu);
        if (!n) { /* nothing runs (a running request always has a row): sleep unless work came meanwhile */
            if (!S->n_queued && !S->stop) {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                ts.tv_sec += 1; /* wakes for deadlines and pings */
                pthread_cond_timedwait(&S->wake, &S->mu, &ts);
            }
            continue;
        }
        pthread_mutex_unlock(&S->mu);
        drt_batch batch = {.n = n, .token = b.tok, .seq = b.seq, .logits = b.flag};
        double t0 = drt_clock_s();
        drt_status st = drt_batch_forward(S->bs, &batch, S->logits);
        double t1 = drt_clock_s();
        if (S->o.step_delay_ms > 0) {
            struct timespec d = {S->o.step_delay_ms / 1000, (long)(S->o.step_delay_ms % 1000) * 1000000L};
            nanosleep(&d, NULL);
        }
        pthread_mutex_lock(&S->mu);
        S->m.forwards++;
        srv_hist_add(&S->m.forward_s, t1 - t0);
        srv_hist_add(&S->m.iteration_tokens, n);
        if (st != DRT_OK) fprintf(stderr, "diffrt: serve: forward of %d rows failed: %s\n", n, drt_last_error());
        after_forward(S, &b, st, t1, &rl);
    }
    pthread_mutex_unlock(&S->mu);
    resume_all(&rl);
    free(rl.c);
    free(b.tok), free(b.seq), free(b.flag), free(b.owner), free(b.chunk);
    return NULL;
}
