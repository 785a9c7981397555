/* diffrt serve's life: load the model and its tokenizer, make the batch
 * session, listen, serve until SIGTERM or SIGINT, then drain: /health
 * answers 503, new work is refused, in-flight work has --grace seconds to
 * finish and is then cancelled, and the process exits 0. */
#include <arpa/inet.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "diffrt/util.h"
#include "server.h"

static void sleep_s(double s) {
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static int is_loopback(const char *host) {
    struct in_addr a4;
    if (inet_pton(AF_INET, host, &a4) == 1) return (ntohl(a4.s_addr) >> 24) == 127;
    return strcmp(host, "::1") == 0;
}

/* API keys: one a line of --api-key-file (blank lines and surrounding
 * whitespace ignored), else DIFFRT_API_KEY. 0, or -1 after a message. */
static int load_keys(srv *S) {
    const char *env = getenv("DIFFRT_API_KEY");
    if (!S->o.api_key_file) {
        if (!env || !*env) return 0;
        S->keys = malloc(sizeof(char *));
        if (!S->keys || !(S->keys[0] = strdup(env))) return -1;
        S->n_keys = 1;
        return 0;
    }
    FILE *f = fopen(S->o.api_key_file, "r");
    if (!f) {
        fprintf(stderr, "diffrt: serve: --api-key-file %s: %s\n", S->o.api_key_file, strerror(errno));
        return -1;
    }
    char line[1024];
    int rc = 0;
    while (fgets(line, sizeof line, f)) {
        if (!strchr(line, '\n') && !feof(f)) {
            fprintf(stderr, "diffrt: serve: --api-key-file %s: a line longer than %zu bytes\n", S->o.api_key_file,
                    sizeof line - 2);
            rc = -1;
            break;
        }
        char *a = line, *b = line + strlen(line);
        while (*a == ' ' || *a == '\t') a++;
        while (b > a && (b[-1] == '\n' || b[-1] == '\r' || b[-1] == ' ' || b[-1] == '\t')) *--b = 0;
        if (!*a) continue;
        char **k = realloc(S->keys, sizeof(char *) * (size_t)(S->n_keys + 1));
        if (!k) {
            rc = -1;
            break;
        }
        S->keys = k;
        if (!(S->keys[S->n_keys] = strdup(a))) {
            rc = -1;
            break;
        }
        S->n_keys++;
    }
    fclose(f);
    if (!rc && !S->n_keys) {
        fprintf(stderr, "diffrt: serve: --api-key-file %s holds no key\n", S->o.api_key_file);
        rc = -1;
    }
    return rc;
}

static int load_model(srv *S) {
    if (drt_model_load(S->o.model_dir, &S->model) != DRT_OK) {
        fprintf(stderr, "diffrt: serve: %s\n", drt_last_error());
        return -1;
    }
    drt_model_get_info(S->model, &S->info);
    char *path = drt_path_join(S->o.model_dir, "tokenizer.json");
    if (!path) {
        fprintf(stderr, "diffrt: serve: out of memory\n");
        return -1;
    }
    drt_status ts = drt_tokenizer_load(path, &S->tok);
    drt_free(path);
    if (ts != DRT_OK) {
        fprintf(stderr, "diffrt: serve: %s (the server needs the model's tokenizer.json)\n", drt_last_error());
        return -1;
    }
    /* every eos id of config.json and generation_config.json stops (Llama-3 lists three) */
    int n = drt_model_eos_ids(S->model, S->eos, (int)(sizeof S->eos / sizeof S->eos[0]));
    S->n_eos = n < 0 ? 0 : n < (int)(sizeof S->eos / sizeof S->eos[0]) ? n : (int)(sizeof S->eos / sizeof S->eos[0]);
    int32_t te = drt_tokenizer_eos_id(S->tok);
    if (!S->n_eos && te >= 0) S->eos[S->n_eos++] = te;
    char why[256] = "";
    if (S->o.chat_template) {
        if (srv_chat_by_name(S->o.chat_template, &S->chat) != 0) {
            fprintf(stderr, "diffrt: serve: --chat-template wants llama3, llama3.1, chatml or plain, got \"%s\"\n",
                    S->o.chat_template);
            return -1;
        }
    } else if (srv_chat_detect(S->o.model_dir, &S->chat, why, sizeof why) != DRT_OK) {
        fprintf(stderr, "diffrt: serve: %s\n", why);
        return -1;
    }
    S->end_of_turn = S->chat.end_of_turn ? drt_tokenizer_token_to_id(S->tok, S->chat.end_of_turn) : -1;
    if (S->chat.kind == SRV_CHAT_NONE)
        fprintf(stderr,
                "diffrt: serve: no chat template (%s): /v1/chat/completions answers 400 unless "
                "--chat-template NAME\n",
                why[0] ? why : "none found");
    else
        fprintf(stderr, "diffrt: serve: chat template %s%s\n", S->chat.name,
                S->o.chat_template ? " (--chat-template)" : "");
    return 0;
}

static int make_session(srv *S) {
    if (!S->o.ctx) S->o.ctx = S->info.max_ctx < 4096 ? S->info.max_ctx : 4096;
    drt_session_opts so = {.backend = S->o.backend,
                           .device = S->o.device,
                           .max_ctx = S->o.ctx,
                           .threads = S->o.threads,
                           .settings = S->o.settings};
    drt_batch_opts bo = {.max_seqs = S->o.parallel, .ctx_per_seq = S->o.ctx, .max_batch_rows = S->o.batch_tokens};
    if (drt_batch_session_create(S->model, &so, &bo, &S->bs) != DRT_OK) {
        fprintf(stderr, "diffrt: serve: %s\n", drt_last_error());
        return -1;
    }
    const drt_model_info *I = &S->info;
    const double kv = (double)drt_batch_session_kv_bytes(S->bs);
    fprintf(stderr, "diffrt: serve: %d slots x %d positions = %.1f MiB KV %s (%s, %d rows per forward)\n",
            S->o.parallel, S->o.ctx, kv / 1048576.0, drt_dtype_name(drt_batch_session_kv_type(S->bs)),
            S->o.backend ? S->o.backend : "cpu", S->o.batch_tokens);
    if (S->o.ctx > I->max_ctx)
        fprintf(stderr, "diffrt: warning: --ctx %d is past the model's max_position_embeddings %d\n", S->o.ctx,
                I->max_ctx);
    S->logits = malloc(sizeof(float) * (size_t)S->o.parallel * (size_t)I->vocab);
    S->slots = calloc((size_t)S->o.parallel, sizeof *S->slots);
    if (!S->logits || !S->slots) {
        fprintf(stderr, "diffrt: serve: out of memory\n");
        return -1;
    }
    return 0;
}

static const char *sig_name(int sig) {
    return sig == SIGINT ? "SIGINT" : "SIGTERM";
}

static void drain(srv *S, int sig) {
    fprintf(stderr, "diffrt: serve: %s: draining (up to %d s for %d running, %d waiting; %s again: stop now)\n",
            sig_name(sig), S->o.grace_s, S->n_active, S->n_queued, sig_name(sig));
    pthread_mutex_lock(&S->mu);
    S->draining = 1;
    pthread_mutex_unlock(&S->mu);
    double t0 = drt_clock_s();
    for (;;) {
        pthread_mutex_lock(&S->mu);
        int busy = S->n_active + S->n_queued;
        pthread_mutex_unlock(&S->mu);
        if (!busy || drt_clock_s() - t0 >= S->o.grace_s) break;
        pthread_mutex_lock(&S->sig_mu);
        int again = S->n_signals > 1;
        pthread_mutex_unlock(&S->sig_mu);
        if (again) { /* a second signal: what is in flight is cancelled now */
            fprintf(stderr, "diffrt: serve: %s again: cancelling the %d requests in flight now\n",
                    sig_name(S->last_signal), busy);
            break;
        }
        sleep_s(0.05);
    }
    pthread_mutex_lock(&S->mu);
    S->stop = 1;       /* the scheduler fails what is left, then exits */
    S->tok_cancel = 1; /* and encodes in progress stop */
    pthread_cond_signal(&S->wake);
    pthread_mutex_unlock(&S->mu);
    pthread_join(S->sched, NULL);
    /* every connection is resumed now; give them a moment to send their last bytes */
    double t1 = drt_clock_s();
    while (srv_http_connections(S) > 0 && drt_clock_s() - t1 < 2) sleep_s(0.02);
}

static void cleanup(srv *S) {
    srv_http_stop(S);
    drt_batch_session_free(S->bs);
    drt_tokenizer_free(S->tok);
    drt_model_free(S->model);
    for (int i = 0; i < S->n_keys; i++) free(S->keys[i]);
    free(S->keys);
    free(S->logits);
    free(S->slots);
    pthread_cond_destroy(&S->wake);
    pthread_mutex_destroy(&S->mu);
    pthread_cond_destroy(&S->prep_wake);
    pthread_mutex_destroy(&S->prep_mu);
}

/* The signal thread: SIGTERM and SIGINT are blocked everywhere and taken
 * here. Before the server listens (a model loading can take minutes) the
 * first one ends the process at once: there is nothing to drain. After,
 * the first starts the drain and a second cuts it short (drain); a third
 * ends the process. */
static void *signal_main(void *arg) {
    srv *S = arg;
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    for (;;) {
        int sig = 0;
        if (sigwait(&sigs, &sig) != 0) continue;
        pthread_mutex_lock(&S->sig_mu);
        int n = ++S->n_signals, ready = S->ready;
        S->last_signal = sig;
        pthread_cond_broadcast(&S->sig_cv);
        pthread_mutex_unlock(&S->sig_mu);
        if (!ready) {
            fprintf(stderr, "diffrt: serve: %s before the server was ready: stopped\n", sig_name(sig));
            _exit(0);
        }
        if (n >= 3) {
            fprintf(stderr, "diffrt: serve: %s a third time: exiting without a drain\n", sig_name(sig));
            _exit(1);
        }
    }
    return NULL;
}

int srv_run(const srv_opts *o) {
    srv S;
    memset(&S, 0, sizeof S);
    S.o = *o;
    S.end_of_turn = -1;
    S.started = (long long)time(NULL);
    pthread_mutex_init(&S.mu, NULL);
    pthread_cond_init(&S.wake, NULL);
    pthread_mutex_init(&S.prep_mu, NULL);
    pthread_cond_init(&S.prep_wake, NULL);
    srv_metrics_init(&S.m);
    for (int i = 0; i < o->n_aliases; i++) S.aliases[S.n_aliases++] = o->aliases[i];
    if (!S.n_aliases) {
        const char *d = o->model_dir, *b = d + strlen(d);
        while (b > d && b[-1] == '/') b--;
        const char *a = b;
        while (a > d && a[-1] != '/') a--;
        static char base[256];
        snprintf(base, sizeof base, "%.*s", (int)(b - a), a);
        S.aliases[S.n_aliases++] = base[0] ? base : "model";
    }
    int rc = 1;
    /* SIGTERM and SIGINT are taken by sigwait below, in this thread only */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    pthread_mutex_init(&S.sig_mu, NULL);
    pthread_cond_init(&S.sig_cv, NULL);
    pthread_t sig_th;
    if (pthread_create(&sig_th, NULL, signal_main, &S) != 0) {
        fprintf(stderr, "diffrt: serve: cannot start the signal thread\n");
        goto done;
    }
    pthread_detach(sig_th);
    if (load_keys(&S) != 0 || load_model(&S) != 0 || make_session(&S) != 0) goto done;
    S.loopback = is_loopback(o->host);
    if (!S.n_keys && !S.loopback)
        fprintf(stderr,
                "diffrt: warning: serving on %s without an API key: anyone who reaches it can use it "
                "(--api-key-file F or DIFFRT_API_KEY)\n",
                o->host);
    if (pthread_create(&S.sched, NULL, srv_sched_main, &S) != 0) {
        fprintf(stderr, "diffrt: serve: cannot start the scheduler thread\n");
        goto done;
    }
    if (srv_http_start(&S) != 0) {
        pthread_mutex_lock(&S.mu);
        S.stop = 1;
        pthread_cond_signal(&S.wake);
        pthread_mutex_unlock(&S.mu);
        pthread_join(S.sched, NULL);
        goto done;
    }
    int v6 = strchr(o->host, ':') != NULL;
    fprintf(stderr, "diffrt: serve: listening on http://%s%s%s:%d (model \"%s\")\n", v6 ? "[" : "", o->host,
            v6 ? "]" : "", S.o.port, S.aliases[0]);
    pthread_mutex_lock(&S.sig_mu);
    S.ready = 1;
    int early = S.n_signals;
    pthread_mutex_unlock(&S.sig_mu);
    if (!early && o->ready_file) {
        FILE *f = fopen(o->ready_file, "w");
        if (f) {
            fprintf(f, "%s %d\n", o->host, S.o.port);
            fclose(f);
        }
    }
    pthread_mutex_lock(&S.sig_mu);
    while (!S.n_signals) pthread_cond_wait(&S.sig_cv, &S.sig_mu);
    int sig = S.last_signal;
    pthread_mutex_unlock(&S.sig_mu);
    drain(&S, sig);
    fprintf(stderr, "diffrt: serve: stopped\n");
    rc = 0;
done:
    cleanup(&S);
    return rc;
}
