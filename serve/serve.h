/* diffrt serve: an OpenAI-compatible HTTP server over a batch session
 * (docs/serve.md). The command line lives in cli/serve.c; this is the
 * server's one entry point. */
#ifndef DRT_SRV_SERVE_H
#define DRT_SRV_SERVE_H

#include "diffrt/diffrt.h"

#define SRV_MAX_ALIASES 8
#define SRV_MAX_HOSTS 16

typedef struct {
    const char *model_dir;
    const char *host; /* address to bind, default "127.0.0.1" */
    int port;         /* 0: any free port (printed at startup) */
    const char *backend, *device;
    int threads;
    const drt_settings *settings; /* NULL: none */
    int parallel;                 /* slots: sequences decoded together */
    int ctx;                      /* positions per slot */
    int batch_tokens;             /* rows per forward */
    int step_prompt_rows;         /* prompt rows a forward carries beside decode rows (0: batch_tokens) */
    int queue;                    /* requests waiting for a slot, beyond: 503 */
    const char *aliases[SRV_MAX_ALIASES];
    int n_aliases;                          /* 0: the model directory's basename */
    int any_model;                          /* accept any "model" name */
    const char *api_key_file;               /* one key a line; NULL: DIFFRT_API_KEY, else no auth */
    const char *cors_origin;                /* NULL: no CORS headers, OPTIONS is 405 */
    const char *allow_hosts[SRV_MAX_HOSTS]; /* Host names allowed besides localhost and IP literals ("*": any) */
    int n_allow_hosts;
    int metrics;               /* serve GET /metrics */
    const char *chat_template; /* NULL: detect from tokenizer_config.json */
    long max_body;             /* bytes */
    int timeout_s;             /* per request, queue wait included */
    int idle_timeout_s;        /* a connection with no traffic is closed */
    int body_timeout_s;        /* a body must be complete this long after its headers */
    int max_conns, max_conns_per_ip;
    int grace_s;            /* SIGTERM: in-flight work gets this long, then is cancelled */
    long max_out;           /* bytes a streaming client may leave unread before it is dropped */
    const char *ready_file; /* when set, "host port\n" is written there once listening (tests) */
    int tokenizer_threads;  /* threads that parse and tokenize request bodies */
    int tokenize_timeout_s; /* a text whose pre-tokenizing takes longer is refused (0: no limit) */
    int step_delay_ms;      /* debug: sleep this long after each forward (tests of slow streams) */
    int prep_delay_ms;      /* debug: a tokenizer thread sleeps this long before each request */
    int sndbuf;             /* debug: SO_SNDBUF of each connection, 0: the system's (tests of slow readers) */
} srv_opts;

/* Loads the model, serves until SIGTERM or SIGINT, drains, and returns the
 * exit status (0 after a drain; 1 when loading or binding failed). Messages
 * go to stderr. */
int srv_run(const srv_opts *o);

#endif
