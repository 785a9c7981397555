/* diffrt serve: the command line of the OpenAI-compatible server
 * (serve/, docs/serve.md). Built without the server (no epoll: not
 * Linux), it parses the same options and then says so. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "diffrt/diffrt.h"
#include "opts.h"
#include "serve.h"

/* "1048576", "512K", "1M": bytes, 1 .. 1 GiB; -1 on anything else */
static long parse_size(const char *s) {
    char *end;
    long long v = strtoll(s, &end, 10);
    if (end == s || v < 1) return -1;
    if (*end == 'K' || *end == 'k')
        v <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        v <<= 20, end++;
    if (*end || v > (1LL << 30)) return -1;
    return (long)v;
}

/* The comma list `spec` of option `flag` (NULL: none) split in buf into
 * out[0..*n), at most max names; 0, or cli_die's status. */
static int name_list(const char *flag, const char *spec, char *buf, size_t bn, const char **out, int max, int *n) {
    *n = 0;
    if (!spec) return 0;
    if (strlen(spec) >= bn) return cli_die("serve: %s is too long", flag);
    strcpy(buf, spec);
    for (char *p = strtok(buf, ","); p; p = strtok(NULL, ",")) {
        if (*n == max) {
            char m[96];
            snprintf(m, sizeof m, "serve: %s takes at most %d names", flag, max);
            return cli_die("%s", m);
        }
        out[(*n)++] = p;
    }
    if (!*n) return cli_die("serve: %s wants NAME,...", flag);
    return 0;
}

int cmd_serve(int argc, char **argv) {
    srv_opts o = {.host = "127.0.0.1",
                  .port = 8080,
                  .backend = "cpu",
                  .parallel = 4,
                  .batch_tokens = 512,
                  .step_prompt_rows = 32,
                  .queue = 64,
                  .tokenizer_threads = 2,
                  .tokenize_timeout_s = 10,
                  .timeout_s = 600,
                  .idle_timeout_s = 30,
                  .body_timeout_s = 30,
                  .max_conns = 1024,
                  .max_conns_per_ip = 64,
                  .grace_s = 30};
    const char *set_spec = NULL, *kv_type = NULL, *aliases = NULL, *max_body = "1M", *max_out = "1M", *hosts = NULL;
    int threads = 0, ctx = 0;
    const cli_opt opts[] = {
        {.name = "--model",
         .short_name = 'm',
         .kind = CLI_STR,
         .dst = &o.model_dir,
         .meta = "DIR",
         .help = "the model directory (config.json, model.safetensors, tokenizer.json)"},
        {.name = "--host",
         .kind = CLI_STR,
         .dst = &o.host,
         .meta = "ADDR",
         .help = "numeric address to listen on (default 127.0.0.1; 0.0.0.0 or :: for\nevery interface: then set an "
                 "API key)"},
        {.name = "--port",
         .kind = CLI_INT,
         .dst = &o.port,
         .meta = "N",
         .lo = 0,
         .hi = 65535,
         .help = "TCP port (default 8080; 0: any free port, printed at startup)"},
        {.name = "--backend",
         .kind = CLI_STR,
         .dst = &o.backend,
         .meta = "B",
         .help = "cpu | ref | opencl | vulkan | cuda (default cpu)"},
        {.name = "--device",
         .kind = CLI_STR,
         .dst = &o.device,
         .meta = "D",
         .help = "device index or name substring (default: the backend's first)"},
        {.name = "--threads",
         .kind = CLI_INT,
         .dst = &threads,
         .meta = "N",
         .lo = 1,
         .hi = 1024,
         .help = "CPU threads for cpu (default: DIFFRT_THREADS, else the physical cores)"},
        CLI_OPT_SET(&set_spec),
        CLI_OPT_KV_TYPE(&kv_type),
        {.name = "--parallel",
         .short_name = 'p',
         .kind = CLI_INT,
         .dst = &o.parallel,
         .meta = "N",
         .lo = 1,
         .hi = DRT_MAX_SEQS,
         .help = "slots: requests decoded together in one forward (default 4)"},
        {.name = "--ctx",
         .short_name = 'c',
         .kind = CLI_INT,
         .dst = &ctx,
         .meta = "N",
         .lo = 1,
         .hi = DRT_MAX_CTX,
         .help = "positions per slot, prompt and completion together (default: the\nmodel's max_position_embeddings, "
                 "at most 4096). The KV cache holds\n(N slots + 1) x N positions; startup prints its size"},
        {.name = "--batch-tokens",
         .short_name = 'b',
         .kind = CLI_INT,
         .dst = &o.batch_tokens,
         .meta = "N",
         .lo = 1,
         .hi = DRT_MAX_BATCH_ROWS,
         .help = "rows per forward: decode rows first, then prompt chunks (default 512)"},
        {.name = "--step-prompt-rows",
         .kind = CLI_INT,
         .dst = &o.step_prompt_rows,
         .meta = "N",
         .lo = 0,
         .hi = DRT_MAX_BATCH_ROWS,
         .help = "prompt rows a forward carries beside the decode rows while any\nrequest is decoding (default 32; 0: "
                 "up to --batch-tokens)"},
        {.name = "--queue",
         .kind = CLI_INT,
         .dst = &o.queue,
         .meta = "N",
         .lo = 0,
         .hi = 1 << 20,
         .help = "requests waiting for a slot; beyond it 503 + Retry-After (default 64)"},
        {.name = "--tokenizer-threads",
         .kind = CLI_INT,
         .dst = &o.tokenizer_threads,
         .meta = "N",
         .lo = 1,
         .hi = 64,
         .help = "threads that parse, template and tokenize request bodies, off the\nHTTP thread (default 2)"},
        {.name = "--tokenize-timeout",
         .kind = CLI_INT,
         .dst = &o.tokenize_timeout_s,
         .meta = "S",
         .lo = 0,
         .hi = 86400,
         .help = "refuse a text whose tokenizing takes longer than S seconds (a\ntokenizer.json whose regex "
                 "backtracks; default 10; 0: no limit)"},
        {.name = "--alias",
         .kind = CLI_STR,
         .dst = &aliases,
         .meta = "NAME,...",
         .help = "the model's names for \"model\" (default: the directory's basename)"},
        {.name = "--any-model",
         .kind = CLI_FLAG,
         .dst = &o.any_model,
         .help = "accept any \"model\" name (for clients that hard-code one)"},
        {.name = "--api-key-file",
         .kind = CLI_STR,
         .dst = &o.api_key_file,
         .meta = "F",
         .help = "API keys, one a line (default: DIFFRT_API_KEY; neither: no auth).\n/health needs none"},
        {.name = "--cors-origin",
         .kind = CLI_STR,
         .dst = &o.cors_origin,
         .meta = "ORIGIN",
         .help = "allow browser pages from ORIGIN (\"*\": any); default: no CORS"},
        {.name = "--allow-host",
         .kind = CLI_STR,
         .dst = &hosts,
         .meta = "NAME,...",
         .help = "Host names this server answers to besides localhost and IP addresses\n(\".example.com\": it and its "
                 "subdomains; \"*\": any). Checked when there is\nno API key on a loopback address, or when given "
                 "(docs/serve.md)"},
        {.name = "--metrics", .kind = CLI_FLAG, .dst = &o.metrics, .help = "serve GET /metrics (Prometheus text)"},
        {.name = "--chat-template",
         .kind = CLI_STR,
         .dst = &o.chat_template,
         .meta = "NAME",
         .help = "llama3 | llama3.1 | chatml | plain (default: detected from\ntokenizer_config.json; none: chat "
                 "answers 400)"},
        {.name = "--max-body",
         .kind = CLI_STR,
         .dst = &max_body,
         .meta = "SIZE",
         .help = "largest request body, bytes or with K/M (default 1M; beyond: 413)"},
        {.name = "--max-unread",
         .kind = CLI_STR,
         .dst = &max_out,
         .meta = "SIZE",
         .help = "stream bytes a client may leave unread before it is dropped\n(default 1M)"},
        {.name = "--timeout",
         .kind = CLI_INT,
         .dst = &o.timeout_s,
         .meta = "S",
         .lo = 0,
         .hi = INT_MAX,
         .help = "seconds a request may take, waiting included; then it ends with\nfinish_reason \"length\" (default "
                 "600; 0: none)"},
        {.name = "--idle-timeout",
         .kind = CLI_INT,
         .dst = &o.idle_timeout_s,
         .meta = "S",
         .lo = 1,
         .hi = 86400,
         .help = "close a connection silent this long (default 30)"},
        {.name = "--body-timeout",
         .kind = CLI_INT,
         .dst = &o.body_timeout_s,
         .meta = "S",
         .lo = 1,
         .hi = 86400,
         .help = "a body must arrive within S seconds of its headers (default 30;\nthen 408)"},
        {.name = "--max-conns",
         .kind = CLI_INT,
         .dst = &o.max_conns,
         .meta = "N",
         .lo = 1,
         .hi = 1 << 20,
         .help = "open connections in all (default 1024)"},
        {.name = "--max-conns-per-ip",
         .kind = CLI_INT,
         .dst = &o.max_conns_per_ip,
         .meta = "N",
         .lo = 1,
         .hi = 1 << 20,
         .help = "open connections from one address (default 64)"},
        {.name = "--grace",
         .kind = CLI_INT,
         .dst = &o.grace_s,
         .meta = "S",
         .lo = 0,
         .hi = 86400,
         .help = "on SIGTERM, seconds in-flight requests get before they are\ncancelled (default 30)"},
        {.name = "--ready-file",
         .kind = CLI_STR,
         .dst = &o.ready_file,
         .meta = "F",
         .help = "write \"HOST PORT\" to F once listening (for scripts and tests)"},
        {.name = "--step-delay",
         .kind = CLI_INT,
         .dst = &o.step_delay_ms,
         .meta = "MS",
         .lo = 0,
         .hi = 60000,
         .help = "debug: sleep MS after each forward, so tests can catch a request\nmid-stream (default 0)"},
        {.name = "--prep-delay",
         .kind = CLI_INT,
         .dst = &o.prep_delay_ms,
         .meta = "MS",
         .lo = 0,
         .hi = 60000,
         .help = "debug: a tokenizer thread sleeps MS before each request (default 0)"},
        {.name = "--sndbuf",
         .kind = CLI_INT,
         .dst = &o.sndbuf,
         .meta = "BYTES",
         .lo = 0,
         .hi = 1 << 30,
         .help = "debug: each connection's socket send buffer (default: the\nsystem's), so tests can fill it"},
        {0}};
    const cli_cmd cmd = {
        .name = "serve",
        .synopsis = "--model DIR [options]",
        .about = "An OpenAI-compatible HTTP server: /v1/completions, /v1/chat/completions (streaming\n"
                 "or not), /v1/models, /tokenize, /detokenize, /health and, with --metrics, /metrics.\n"
                 "Requests share forwards (continuous batching) in --parallel slots. SIGTERM drains.\n"
                 "docs/serve.md has the endpoints, limits, errors and metrics.\n",
        .opts = opts};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_PARSED) return rc;
    if (!o.model_dir) return cli_die("serve: --model DIR is required%s", "");
    if ((o.max_body = parse_size(max_body)) < 0)
        return cli_die("serve: --max-body wants bytes (or K/M) from 1 to 1G, got \"%s\"", max_body);
    if ((o.max_out = parse_size(max_out)) < 0)
        return cli_die("serve: --max-unread wants bytes (or K/M) from 1 to 1G, got \"%s\"", max_out);
    char alias_buf[1024], host_buf[1024];
    if ((rc = name_list("--alias", aliases, alias_buf, sizeof alias_buf, o.aliases, SRV_MAX_ALIASES, &o.n_aliases)) ||
        (rc = name_list("--allow-host", hosts, host_buf, sizeof host_buf, o.allow_hosts, SRV_MAX_HOSTS,
                        &o.n_allow_hosts)))
        return rc;
    o.threads = threads;
    o.ctx = ctx;
    drt_settings *set = NULL;
    if ((rc = cli_settings("serve", set_spec, &set)) != 0 || (rc = cli_kv_type("serve", kv_type, &set)) != 0) {
        drt_settings_free(set);
        return rc;
    }
    o.settings = set;
#ifdef DIFFRT_HAVE_SERVE
    rc = srv_run(&o);
#else
    fprintf(stderr, "diffrt: serve: this build has no server: it runs on Linux (epoll), and this build was "
                    "configured without it (DIFFRT_SERVE)\n");
    rc = 1;
#endif
    drt_settings_free(set);
    return rc;
}
