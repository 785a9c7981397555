/* The diffrt command: the table of commands, and info, run, conform. */
#include <errno.h>
#include <float.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "opts.h"
#include "outfile.h"
#include "diffrt/diffrt.h"
#include "diffrt/util.h"
#include "drt_conform.h"
#include "text.h"

/* The settings in force: name, value, where it came from (default, env
 * VARIABLE, flag), debug and A/B knobs marked. */
static void print_settings(const drt_settings *set) {
    printf("\nsettings (docs/environment.md; --set NAME=VALUE, or the variable)\n");
    for (int i = 0; i < drt_setting_count(); i++) {
        drt_setting_info si;
        drt_setting_describe(i, &si);
        char v[512];
        drt_setting_source src;
        char from[128] = "default";
        if (drt_settings_get(set, si.name, v, sizeof v, &src) != DRT_OK) {
            printf("  %-22s invalid: %s\n", si.name, drt_last_error());
            continue;
        }
        if (src == DRT_SETTING_CALLER) {
            snprintf(from, sizeof from, "flag");
        } else if (src == DRT_SETTING_ENV) {
            const char *e = getenv(si.env);
            if (e && *e)
                snprintf(from, sizeof from, "env %s", si.env);
            else
                snprintf(from, sizeof from, "env %s, deprecated: use %s", si.old_env, si.env);
        }
        printf("  %-22s %-8s (%s)%s\n", si.name, v[0] ? v : "auto", from,
               si.kind == DRT_SETTING_DEBUG ? " [debug]" : "");
    }
}

static void print_model(const char *dir) {
    drt_model *m;
    if (drt_model_load(dir, &m) != DRT_OK) {
        fprintf(stderr, "diffrt: %s\n", drt_last_error());
        return;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    printf("\nmodel %s\n", dir);
    printf("  architecture    %s\n", I.arch_name);
    printf("  layout          %s\n", I.layout_name);
    printf("  parameters      %lld (%.2f M)\n", (long long)I.n_params, (double)I.n_params / 1e6);
    printf("  weight dtype    %s\n", drt_dtype_name(I.weight_dtype));
    printf("  embedding dtype %s\n", drt_dtype_name(I.embed_dtype));
    printf("  vocab           %d\n", I.vocab);
    printf("  width D         %d (ffn %d)\n", I.dim, I.ffn);
    printf("  layers          %d\n", I.n_layers);
    if (I.arch == DRT_ARCH_TRANSFORMER)
        printf("  heads           %d (dk %d, dv %d)\n", I.n_heads, I.dk, I.dv);
    else
        printf("  diff-heads      %d (dk %d, dv %d, keys per group %d)\n", I.n_heads, I.dk, I.dv, I.kv_m);
    printf("  kv groups       %d\n", I.n_kv_groups);
    printf("  max positions   %d, rope scaling %s\n", I.max_ctx, I.rope_scaling);
    printf("  tied embeddings %s\n", I.tied_embeddings ? "yes" : "no");
    if (I.lambda) {
        printf("  lambda          ");
        for (int l = 0; l < I.n_layers; l++) printf("%s%.4f", l ? " " : "", (double)I.lambda[l]);
        printf("\n  lambda_init     ");
        for (int l = 0; l < I.n_layers; l++) printf("%s%.4f", l ? " " : "", (double)I.lambda_init[l]);
        printf("\n  sub-norm        %s, output scale %s\n", I.subnorm ? "yes" : "no",
               I.out_scale ? "1 - lambda_init" : "none");
    } else if (I.arch == DRT_ARCH_DIFF_V2) {
        printf("  lambda          per token: sigmoid(lambda_proj x)\n");
    }
    drt_model_free(m);
}

/* one 2-token prefill and one decode step on backend, then the fallbacks */
static int fallback_check(const char *dir, const char *backend, const drt_settings *set) {
    drt_model *m;
    drt_session *s = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) return cli_fail("info");
    drt_model_info I;
    drt_model_get_info(m, &I);
    drt_session_opts so = {.backend = backend, .max_ctx = 4, .settings = set};
    float *lg = malloc(sizeof(float) * (size_t)I.vocab);
    int32_t ids[2] = {0, I.vocab > 1 ? 1 : 0};
    int rc = 1;
    if (drt_session_create(m, &so, &s) != DRT_OK || drt_session_forward(s, ids, 2, lg, 0) != DRT_OK ||
        drt_session_forward(s, ids, 1, lg, 0) != DRT_OK) {
        rc = cli_fail("info");
    } else {
        char fb[512];
        int n = drt_session_fallbacks(s, fb, sizeof fb);
        printf("\nbackend %s: prefill + decode step ran; %d node runs fell back to the CPU reference%s%s\n", backend, n,
               n ? ": " : "", fb);
        rc = 0;
    }
    free(lg);
    drt_session_free(s);
    drt_model_free(m);
    return rc;
}

/* diffrt --version: what this build is and what each backend is here. */
static int cmd_version(void) {
    printf("diffrt %s (commit %s)\n", drt_version(), drt_git_commit());
    for (int b = 0; b < drt_backend_count(); b++) {
        drt_backend_info bi;
        if (drt_backend_get_info(b, &bi) != DRT_OK) continue;
        char where[1100];
        if (bi.builtin)
            snprintf(where, sizeof where, "built in");
        else if (bi.module)
            snprintf(where, sizeof where, "module %.1000s", bi.module);
        else if (bi.compiled_in)
            snprintf(where, sizeof where, "compiled, module not loaded");
        else {
            printf("  %-7s %s\n", bi.name, bi.reason); /* "not compiled into this build (...)" */
            continue;
        }
        if (bi.available)
            printf("  %-7s %s; available, %d device%s\n", bi.name, where, bi.device_count,
                   bi.device_count == 1 ? "" : "s");
        else
            printf("  %-7s %s; unavailable: %s\n", bi.name, where, bi.reason);
    }
    return 0;
}

static int info_body(const char *model, const char *backend, const drt_settings *set);

static int cmd_info(int argc, char **argv) {
    const char *model = NULL, *backend = NULL, *set_spec = NULL;
    const cli_opt opts[] = {
        {.name = "--model", .kind = CLI_STR, .dst = &model, .meta = "DIR", .help = "a summary of the checkpoint"},
        {.name = "--backend",
         .kind = CLI_STR,
         .dst = &backend,
         .meta = "B",
         .help = "with --model: one prefill + decode step on B and the per-op\ncount of CPU fallbacks"},
        CLI_OPT_SET(&set_spec),
        {0}};
    const cli_cmd cmd = {.name = "info",
                         .synopsis = "[--model DIR [--backend B]] [--set NAME=VALUE,...]",
                         .about = "The backends compiled in and the devices found (or why a backend is "
                                  "unavailable),\nand every setting in force with where it came from "
                                  "(default, env, flag).\n",
                         .opts = opts};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_PARSED) return rc;
    if (backend && !model) return cli_die("info: --backend needs --model DIR%s", "");
    drt_settings *set = NULL;
    if ((rc = cli_settings("info", set_spec, &set)) != 0) {
        drt_settings_free(set);
        return rc;
    }
    rc = info_body(model, backend, set);
    drt_settings_free(set);
    return rc;
}

static int info_body(const char *model, const char *backend, const drt_settings *set) {
    printf("backends\n");
    for (int b = 0; b < drt_backend_count(); b++) {
        drt_backend_info bi;
        drt_backend_get_info(b, &bi);
        if (!bi.compiled_in) {
            printf("  %-7s %s\n", bi.name, bi.reason);
            continue;
        }
        if (!bi.available) {
            printf("  %-7s unavailable: %s\n", bi.name, bi.reason);
            continue;
        }
        printf("  %-7s available, %d device%s\n", bi.name, bi.device_count, bi.device_count == 1 ? "" : "s");
        for (int d = 0; d < bi.device_count; d++) {
            char name[256];
            if (drt_backend_device_name(b, d, name, sizeof name) == DRT_OK) printf("          [%d] %s\n", d, name);
            drt_device_props p;
            if (drt_backend_device_props(b, d, &p) != DRT_OK) continue;
            static const char *yn[] = {"unknown", "no", "yes"};
            char mem[32] = "unknown";
            if (p.memory_bytes) snprintf(mem, sizeof mem, "%.1f GiB", p.memory_bytes / 1073741824.0);
            char sg[16] = "unknown";
            if (p.subgroup_size) snprintf(sg, sizeof sg, "%d", p.subgroup_size);
            printf("              type %s, memory %s, subgroup %s, fp16 %s, bf16 %s\n", p.type[0] ? p.type : "unknown",
                   mem, sg, yn[p.fp16 + 1], yn[p.bf16 + 1]);
        }
    }
    if (model) {
        drt_model *m;
        if (drt_model_load(model, &m) != DRT_OK) return cli_fail("info");
        drt_model_free(m);
        print_model(model);
    }
    print_settings(set);
    return backend ? fallback_check(model, backend, set) : 0;
}

static int parse_tokens(const char *s, int32_t **out, int *n) {
    int cap = 16, k = 0;
    int32_t *v = malloc(sizeof(int32_t) * (size_t)cap);
    if (!v) return 0;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long x = strtol(p, &end, 10);
        if (end == p || errno || x < INT32_MIN || x > INT32_MAX || (*end && *end != ',')) {
            free(v);
            return 0;
        }
        if (k == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, sizeof(int32_t) * (size_t)cap);
            if (!nv) {
                free(v);
                return 0;
            }
            v = nv;
        }
        v[k++] = (int32_t)x;
        p = *end ? end + 1 : end;
        if (*end == ',' && !*p) {
            free(v);
            return 0;
        }
    }
    if (!k) {
        free(v);
        return 0;
    }
    *out = v;
    *n = k;
    return 1;
}

typedef struct {
    const char *model, *tokens, *backend, *device, *text, *text_file, *set, *kv_type;
    long n_gen, ctx, top_k, seed, threads;
    int n_given; /* -n on the command line; else at most 16, fewer where the context ends */
    int verbose, no_stop;
    double temp, top_p;
} run_args;

static int run_parse(int argc, char **argv, run_args *r) {
    const cli_opt opts[] = {
        {.name = "--model", .kind = CLI_STR, .dst = &r->model, .meta = "DIR", .help = "the model directory"},
        {.name = "--tokens",
         .kind = CLI_STR,
         .dst = &r->tokens,
         .meta = "ID,ID,...",
         .help = "the prompt as token ids"},
        {.name = "--prompt",
         .kind = CLI_STR,
         .dst = &r->text,
         .meta = "TEXT",
         .help = "the prompt as text, encoded with DIR/tokenizer.json"},
        {.name = "--prompt-file",
         .kind = CLI_STR,
         .dst = &r->text_file,
         .meta = "F",
         .help = "the prompt as the text of F (- reads stdin)"},
        {.name = "-n",
         .kind = CLI_LONG,
         .dst = &r->n_gen,
         .meta = "N",
         .lo = 0,
         .hi = 1 << 20,
         .bad = "-n wants an integer >= 0",
         .given = &r->n_given,
         .help = "tokens to generate (default: up to 16, fewer when the\ncontext ends sooner; an explicit N must fit)"},
        {.name = "--backend",
         .kind = CLI_STR,
         .dst = &r->backend,
         .meta = "B",
         .help = "cpu | ref | opencl | vulkan | cuda (default cpu: the fast CPU\nbackend; ref is the plain reference "
                 "every backend is checked against)"},
        {.name = "--threads",
         .kind = CLI_LONG,
         .dst = &r->threads,
         .meta = "N",
         .lo = 1,
         .hi = 1024,
         .help = "CPU threads for cpu (default: DIFFRT_THREADS, else the physical\ncores this process may use)"},
        {.name = "--device",
         .kind = CLI_STR,
         .dst = &r->device,
         .meta = "D",
         .help = "device index or name substring (default: DIFFRT_DEVICE, else the\nbackend's first device)"},
        CLI_OPT_SET(&r->set),
        CLI_OPT_KV_TYPE(&r->kv_type),
        {.name = "--ctx",
         .kind = CLI_LONG,
         .dst = &r->ctx,
         .meta = "N",
         .lo = 1,
         .hi = DRT_MAX_CTX,
         .help = "KV cache length (default: the prompt + -n, at least 4096 where\nthe model has that many, and never "
                 "past its max_position_embeddings;\na longer prompt is an error before any work). Past\n"
                 "max_position_embeddings is allowed, with a warning: the model was\nnot trained on those positions"},
        {.name = "--temp",
         .kind = CLI_DOUBLE,
         .dst = &r->temp,
         .meta = "T",
         .ok = cli_finite_nonneg,
         .bad = "--temp wants a finite number >= 0",
         .help = "sampling temperature, 0 = greedy (default 0)"},
        {.name = "--top-k",
         .kind = CLI_LONG,
         .dst = &r->top_k,
         .meta = "K",
         .lo = 0,
         .hi = INT_MAX,
         .bad = "--top-k wants an integer >= 0",
         .help = "keep the K most likely tokens, 0 = off (default 0)"},
        {.name = "--top-p",
         .kind = CLI_DOUBLE,
         .dst = &r->top_p,
         .meta = "P",
         .ok = cli_open_unit,
         .bad = "--top-p wants a number in (0, 1]",
         .help = "nucleus sampling mass in (0,1], 1 = off (default 1)"},
        {.name = "--seed",
         .kind = CLI_LONG,
         .dst = &r->seed,
         .meta = "S",
         .lo = 0,
         .hi = LONG_MAX,
         .bad = "--seed wants an integer >= 0",
         .help = "sampler seed (default 0)"},
        {.name = "--no-stop",
         .kind = CLI_FLAG,
         .dst = &r->no_stop,
         .help = "do not stop at the model's eos tokens\n(every eos_token_id of config.json and "
                 "generation_config.json;\nwith text and none there, the tokenizer's)"},
        {.name = "--verbose",
         .short_name = 'v',
         .kind = CLI_FLAG,
         .dst = &r->verbose,
         .help = "print per-op CPU fallback counts and the prefill's activation\nmemory (planned arena vs one buffer "
                 "per intermediate); when the\nlogits are NaN or Inf, name the first op and layer whose output\nwas "
                 "(re-runs that forward op by op; DIFFRT_CHECK_FINITE=1 does the\nsame for every command)"},
        {0}};
    const cli_cmd cmd = {
        .name = "run",
        .synopsis = "--model DIR (--tokens ID,ID,... | --prompt TEXT | --prompt-file F) [options]",
        .about = "Prefill the prompt, generate, and print the generated ids (with --tokens) or stream the\n"
                 "generated text (with --prompt, --prompt-file) to stdout; prefill/decode tokens per second\n"
                 "go to stderr.\n",
        .opts = opts};
    *r = (run_args){.backend = "cpu", .n_gen = 16, .top_p = 1};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_PARSED) return rc;
    if (!r->model) return cli_die("run: --model DIR is required%s", "");
    if (!!r->tokens + !!r->text + !!r->text_file != 1)
        return cli_die("run: give one of --tokens ID,ID,..., --prompt TEXT or --prompt-file F%s", "");
    return CLI_PARSED;
}

/* The context is decided before any work: by default as long as the prompt
 * (T tokens) + -n needs (at least 4096 when the model has them), never past
 * max_position_embeddings; a prompt that does not fit is an error here, not a
 * prefill of positions the model never saw. 0, or the exit status 2. */
static int run_fit_context(run_args *r, int T, long max_pos) {
    if (!r->n_given) { /* the default -n: up to 16 tokens, as many as the context has room for */
        long room = (r->ctx ? r->ctx : max_pos) - T;
        if (room > 0 && room < r->n_gen) r->n_gen = room;
    }
    long need = (long)T + r->n_gen;
    if (!r->ctx) {
        long dflt = max_pos < 4096 ? max_pos : 4096;
        r->ctx = need <= dflt ? dflt : need <= max_pos ? need : max_pos;
        if (need > r->ctx) {
            fprintf(stderr,
                    "diffrt: run: prompt (%d tokens) + -n %ld exceeds the context %ld "
                    "(max_position_embeddings); pass --ctx N to raise it\n",
                    T, r->n_gen, r->ctx);
            return 2;
        }
    } else if (need > r->ctx) {
        fprintf(stderr, "diffrt: run: prompt (%d tokens) + -n %ld exceeds --ctx %ld; pass a larger --ctx\n", T,
                r->n_gen, r->ctx);
        return 2;
    } else if (r->ctx > max_pos) {
        fprintf(stderr,
                "diffrt: warning: --ctx %ld is past the model's max_position_embeddings %ld: "
                "positions from %ld on were never trained and the output there may degrade\n",
                r->ctx, max_pos, max_pos);
    }
    return 0;
}

/* the newline after the generated ids, or the rest of the text */
static void run_end_output(cli_text *ct) {
    if (ct->tok)
        cli_text_end(ct);
    else
        printf("\n");
}

/* Prefill, then sample and decode up to -n tokens, printed as they come;
 * the timings and fallbacks on stderr. The exit status. */
static int run_generate(const run_args *r, drt_session *s, drt_sampler *smp, cli_text *ct, const int32_t *prompt, int T,
                        const int32_t *eos, int n_eos, float *logits) {
    double t0 = drt_clock_s();
    if (drt_session_forward(s, prompt, T, logits, 0) != DRT_OK) return cli_fail("prefill");
    double t1 = drt_clock_s();
    size_t act_unplanned = 0, act = drt_session_activation_bytes(s, &act_unplanned); /* prefill's */
    int generated = 0;
    for (long i = 0; i < r->n_gen; i++) {
        int32_t tok = drt_sampler_sample(smp, logits);
        if (tok < 0) {
            run_end_output(ct);
            return cli_fail("sample");
        }
        int stop = 0;
        for (int k = 0; k < n_eos && !r->no_stop && !stop; k++) stop = tok == eos[k];
        if (!ct->tok) {
            printf("%s%d", generated ? "," : "", tok);
            fflush(stdout);
        } else if (!stop && cli_text_put(ct, tok) != DRT_OK) {
            return cli_fail("run");
        }
        generated++;
        if (stop || i + 1 == r->n_gen) break;
        if (drt_session_forward(s, &tok, 1, logits, 0) != DRT_OK) {
            run_end_output(ct);
            return cli_fail("decode");
        }
    }
    double t2 = drt_clock_s();
    if (ct->tok) {
        if (cli_text_end(ct) != DRT_OK) return cli_fail("run");
    } else {
        printf("\n");
    }
    fflush(stdout);
    int decode_steps = generated > 0 ? generated - 1 : 0;
    fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", T, t1 - t0, T / (t1 - t0));
    if (decode_steps)
        fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s)\n", decode_steps, t2 - t1, decode_steps / (t2 - t1));
    char fb[512];
    int nfb = drt_session_fallbacks(s, fb, sizeof fb);
    if (nfb || r->verbose)
        fprintf(stderr, "backend %s: %d node runs fell back to the CPU reference%s%s\n", r->backend, nfb,
                nfb ? ": " : "", fb);
    if (r->verbose) {
        fprintf(stderr, "session: %d positions, KV cache %.1f MiB (%s)\n", drt_session_ctx(s),
                drt_session_kv_bytes(s) / 1048576.0, drt_dtype_name(drt_session_kv_type(s)));
        fprintf(stderr, "activations: %.2f MiB planned (%.2f MiB without reuse)\n", act / 1048576.0,
                act_unplanned / 1048576.0);
    }
    return 0;
}

static int cmd_run(int argc, char **argv) {
    run_args r;
    int rc = run_parse(argc, argv, &r);
    if (rc != CLI_PARSED) return rc;
    int32_t *prompt = NULL;
    int T = 0;
    if (r.tokens && !parse_tokens(r.tokens, &prompt, &T))
        return cli_die("run: --tokens wants comma-separated integers, got \"%s\"", r.tokens);

    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_sampler *smp = NULL;
    float *logits = NULL;
    cli_text ct = {0};
    drt_settings *set = NULL;
    int32_t *eos = NULL;
    /* 2: a usage error, before any work */
    if ((rc = cli_settings("run", r.set, &set)) != 0 || (rc = cli_kv_type("run", r.kv_type, &set)) != 0) goto done;
    rc = 1;
    if (drt_model_load(r.model, &m) != DRT_OK) {
        rc = cli_fail("run");
        goto done;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    /* every id of config.json's and generation_config.json's eos_token_id
     * stops (Llama 3 lists three); with text and none there, the
     * tokenizer's end-of-text token */
    int n_eos = drt_model_eos_ids(m, NULL, 0);
    eos = malloc(sizeof *eos * (size_t)(n_eos > 0 ? n_eos + 1 : 1));
    if (!eos || drt_model_eos_ids(m, eos, n_eos) != n_eos) {
        fprintf(stderr, "diffrt: run: out of memory\n");
        goto done;
    }
    if (!r.tokens) {
        /* the prompt cannot be longer than the context: --ctx, else max_position_embeddings */
        long max_ids = r.ctx ? r.ctx : I.max_ctx;
        drt_status ts = cli_text_begin(&ct, r.model, r.text, r.text_file, I.vocab, I.eos_id, (int)max_ids, stdout,
                                       &prompt, &T);
        if (ts != DRT_OK) {
            cli_fail("run");
            rc = ct.over_context ? 2 : 1; /* a prompt longer than the context: as the checks below */
            goto done;
        }
        if (n_eos == 0 && ct.eos >= 0) eos[n_eos++] = ct.eos;
    }
    if ((rc = run_fit_context(&r, T, I.max_ctx)) != 0) goto done;
    rc = 1;
    drt_session_opts so = {.backend = r.backend,
                           .device = r.device,
                           .max_ctx = (int)r.ctx,
                           .threads = (int)r.threads,
                           .check_finite = r.verbose,
                           .settings = set};
    drt_sampler_opts sop = {.temperature = (float)r.temp,
                            .top_k = (int)r.top_k,
                            /* a top_p below float's range keeps the top token, as its value does */
                            .top_p = r.top_p < FLT_MIN ? FLT_MIN : (float)r.top_p,
                            .seed = (uint64_t)r.seed};
    if (drt_session_create(m, &so, &s) != DRT_OK || drt_sampler_create(&sop, I.vocab, &smp) != DRT_OK) {
        rc = cli_fail("run");
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)I.vocab);
    if (logits) rc = run_generate(&r, s, smp, &ct, prompt, T, eos, n_eos, logits);
done:
    free(eos);
    drt_settings_free(set);
    free(logits);
    free(prompt);
    cli_text_free(&ct);
    drt_sampler_free(smp);
    drt_session_free(s);
    drt_model_free(m);
    return rc;
}

static int cmd_conform(int argc, char **argv) {
    drt_conform_opts o = {.out = stdout, .repeats = 5, .warmup = 1};
    const char *set_spec = NULL, *kv_type = NULL;
    const cli_opt opts[] = {
        {.name = "--backend",
         .kind = CLI_STR,
         .dst = &o.backends,
         .meta = "LIST",
         .help = "backend names (cpu, ref, opencl, vulkan, cuda) to check"},
        {.name = "--require",
         .kind = CLI_STR,
         .dst = &o.require,
         .meta = "LIST",
         .help = "backends that must pass: one that is unavailable, lacks an op or\nfalls back to the CPU fails "
                 "the run"},
        {.name = "--op",
         .kind = CLI_STR,
         .dst = &o.ops,
         .meta = "LIST",
         .help = "op names (EMBED, MATMUL, DIFF_ATTN, ...; --list shows the\ncases), or none: only the --models "
                 "checks"},
        {.name = "--device",
         .kind = CLI_STR,
         .dst = &o.devices,
         .meta = "BACKEND=SEL,...",
         .help = "a device per backend: an index or a case-insensitive name\nsubstring (see diffrt info); a backend "
                 "not named takes\nDIFFRT_DEVICE, else its default; never applies to ref"},
        CLI_OPT_SET(&set_spec),
        {.name = "--kv-type",
         .kind = CLI_STR,
         .dst = &kv_type,
         .meta = "T",
         .help =
             "the KV cache type under test: f32, f16 or q8_0; the KV_WRITE,\nATTN and DIFF_ATTN cases of that type, "
             "and every --models\nsession's, the reference's included (default: kv_type of --set\nor "
             "DIFFRT_KV_TYPE, else f32)"},
        {.name = "--models",
         .kind = CLI_STR,
         .dst = &o.models_dir,
         .meta = "DIR",
         .help = "a model directory (config.json + weights), or a folder of\nthem; the prompt is "
                 "DIR/expected.safetensors' tokens when\npresent, else a fixed one; folders that are not models "
                 "are\nreported"},
        {.name = "--json",
         .kind = CLI_STR,
         .dst = &o.json_path,
         .meta = "FILE",
         .help = "the run as one object (docs/conform-json.md)"},
        {.name = "--junit",
         .kind = CLI_STR,
         .dst = &o.junit_path,
         .meta = "FILE",
         .help = "JUnit XML: a testsuite per backend, a testcase per case"},
        {.name = "--quick",
         .kind = CLI_FLAG,
         .dst = &o.quick,
         .help = "--models: the batch cases on one model of each architecture\n(its first with f32 weights, else its "
                 "first; every model's\nlogits and greedy tokens still); the report names the others"},
        {.name = "--list", .kind = CLI_FLAG, .dst = &o.list, .help = "list the cases"},
        {.name = "--perf",
         .kind = CLI_FLAG,
         .dst = &o.perf,
         .help = "time the perf shapes instead: median ms, GFLOP/s, GB/s"},
        {.name = "--repeats",
         .kind = CLI_INT,
         .dst = &o.repeats,
         .meta = "N",
         .lo = 1,
         .hi = 100000,
         .bad = "--repeats wants an integer >= 1",
         .help = "--perf: timed runs per case (default 5)"},
        {.name = "--warmup",
         .kind = CLI_INT,
         .dst = &o.warmup,
         .meta = "N",
         .lo = 0,
         .hi = 100000,
         .bad = "--warmup wants an integer >= 0",
         .help = "--perf: untimed runs first (default 1)"},
        {0}};
    const cli_cmd cmd = {
        .name = "conform",
        .opts = opts,
        .about = "Every op case on every selected backend against the CPU reference (ref) (NMSE <= 1e-8,\n"
                 "or the reduced-precision bound a kernel declares, at most 5e-4; NaN-poisoned outputs),\n"
                 "and with --models every model (logits NMSE <= 1e-6 and 32 identical greedy tokens\n"
                 "against ref); prints an op x backend table. --set applies to the backends checked,\n"
                 "never to the reference, except kv_type (--kv-type).\n",
        .footer = "Exit status: 0 all pass; 1 a failure, or a required backend unavailable or incomplete;\n"
                  "2 a bad argument (an unknown op, backend or device, a --models DIR without models).\n"};
    int rc = cli_parse(&cmd, argc, argv);
    if (rc != CLI_PARSED) return rc;
    drt_settings *set = NULL;
    if ((rc = cli_settings("conform", set_spec, &set)) == 0 && (rc = cli_kv_type("conform", kv_type, &set)) == 0) {
        o.settings = set; /* every backend checked; never the oracle ref */
        drt_conform_result r;
        if (drt_conform_run(&o, &r) == DRT_OK)
            rc = r.fail || r.unavailable_required ? 1 : 0;
        else
            rc = r.usage_error ? cli_die("%s", drt_last_error()) : cli_fail("conform");
    }
    drt_settings_free(set);
    return rc;
}

/* The commands: they dispatch, and `diffrt --help` lists them; each
 * command's options are in its own table (diffrt COMMAND --help). */
static const cli_command COMMANDS[] = {
    {"info", "backends, devices and the settings in force; with --model, the checkpoint", cmd_info},
    {"run", "generate from a prompt of token ids or text", cmd_run},
    {"conform", "every op case and model on each backend against the CPU reference", cmd_conform},
    {"niah", "multi-needle retrieval accuracy per depth and context length", cmd_niah},
    {"serve", "an OpenAI-compatible HTTP server with continuous batching", cmd_serve},
    {"bench", "prefill and decode tokens/s, the time per op, roofline fractions", cmd_bench},
    {"report", "bench --json files from any machines merged into markdown and SVG", cmd_report},
    {"quantize", "a model with its projection weights in q8_0 or q4_0 blocks", cmd_quantize},
    {"analyze", "the paper's Table 5: attention-logit and hidden-state magnitudes", cmd_analyze},
    {0}};

static void cli_usage(FILE *f) {
    fprintf(f, "diffrt: run DIFF Transformer models (DIFF V1, DIFF V2, baseline Llama) on GPUs and CPUs\n"
               "\n"
               "usage: diffrt COMMAND [options]\n"
               "       diffrt COMMAND --help   that command's options\n"
               "       diffrt --version        the version, the git commit and each backend\n"
               "\n"
               "commands:\n");
    cli_print_commands(COMMANDS, f);
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        cli_usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        cli_usage(stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) return cmd_version();
    for (const cli_command *c = COMMANDS; c->name; c++)
        if (strcmp(cmd, c->name) == 0) return c->run(argc - 2, argv + 2);
    return cli_die("unknown command \"%s\" (see diffrt --help)", cmd);
}

/* every command's stdout is checked once, here: output lost to a full disk
 * or a closed pipe is an error (exit 1), not a silent success */
int main(int argc, char **argv) {
    return cli_close_stdout(dispatch(argc, argv));
}
