/* The diffrt command: info, run. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "outfile.h"
#include "diffrt/diffrt.h"
#include "drt_conform.h"
#include "diffrt/diffrt.h"
#include "text.h"

static const char *USAGE =
    "diffrt: run DIFF Transformer models (DIFF V1, DIFF V2, baseline Llama) on GPUs and CPUs\n"
    "\n"
    "usage:\n"
    "  diffrt info [--model DIR [--backend B]]\n"
    "      backends compiled in, devices found (or why a backend is unavailable);\n"
    "      with --model, a summary of the checkpoint; with --backend too, one\n"
    "      prefill + decode step on B and the per-op count of CPU fallbacks\n"
    "  diffrt run --model DIR --tokens ID,ID,... [options]\n"
    "      prefill the prompt tokens, generate, print the generated ids on stdout and\n"
    "      prefill/decode tokens per second on stderr\n"
    "  diffrt run --model DIR (--prompt TEXT | --prompt-file F) [options]\n"
    "      the same with text: the prompt is encoded with DIR/tokenizer.json (F = - reads\n"
    "      stdin) and the generated text is streamed to stdout as it is produced\n"
    "\n"
    "run options:\n"
    "  -n N              tokens to generate (default: up to 16, fewer when the\n"
    "                    context ends sooner; an explicit N must fit)\n"
    "  --backend B       cpu | ref | opencl | vulkan | cuda (default cpu: the fast CPU\n"
    "                    backend; ref is the plain reference every backend is checked against)\n"
    "  --threads N       CPU threads for cpu (default: DIFFRT_THREADS, else the physical\n"
    "                    cores this process may use)\n"
    "  --device D        device index or name substring (default: DIFFRT_DEVICE, else the\n"
    "                    backend's first device)\n"
    "  --ctx N           KV cache length (default: the prompt + -n, at least 4096 where\n"
    "                    the model has that many, and never past its max_position_embeddings;\n"
    "                    a longer prompt is an error before any work). Past\n"
    "                    max_position_embeddings is allowed, with a warning: the model was\n"
    "                    not trained on those positions\n"
    "  --temp T          sampling temperature, 0 = greedy (default 0)\n"
    "  --top-k K         keep the K most likely tokens, 0 = off (default 0)\n"
    "  --top-p P         nucleus sampling mass in (0,1], 1 = off (default 1)\n"
    "  --seed S          sampler seed (default 0)\n"
    "  --no-stop         do not stop at the model's eos token\n"
    "                    (with text, eos is the config's eos_token_id, else the tokenizer's)\n"
    "  -v, --verbose     print per-op CPU fallback counts and the prefill's activation\n"
    "                    memory (planned arena vs one buffer per intermediate); when the\n"
    "                    logits are NaN or Inf, name the first op and layer whose output\n"
    "                    was (re-runs that forward op by op; DIFFRT_CHECK_FINITE=1 does the\n"
    "                    same for every command)\n"
    "\n"
    "  diffrt conform [--backend LIST] [--op LIST] [--require LIST]\n"
    "                 [--device BACKEND=SEL[,BACKEND=SEL]] [--models DIR]\n"
    "                 [--json FILE] [--junit FILE] [--list] [--perf [--repeats N] [--warmup N]]\n"
    "      every op case on every selected backend against the CPU reference (ref)\n"
    "      (NMSE <= 1e-8, or the reduced-precision bound a kernel declares, at most\n"
    "      5e-4; NaN-poisoned outputs), and with --models every model (logits\n"
    "      NMSE <= 1e-6 and 32 identical greedy tokens against ref); prints an\n"
    "      op x backend table.\n"
    "      --backend, --require  backend names (cpu, ref, opencl, vulkan, cuda); a\n"
    "                    required backend that is unavailable, lacks an op or falls\n"
    "                    back to the CPU fails the run\n"
    "      --op LIST     op names (EMBED, MATMUL, DIFF_ATTN, ...; --list shows the\n"
    "                    cases), or none: only the --models checks\n"
    "      --device      a device per backend: an index or a case-insensitive name\n"
    "                    substring (see diffrt info); a backend not named takes\n"
    "                    DIFFRT_DEVICE, else its default; never applies to ref\n"
    "      --models DIR  a model directory (config.json + weights), or a folder of\n"
    "                    them; the prompt is DIR/expected.safetensors' tokens when\n"
    "                    present, else a fixed one; folders that are not models are\n"
    "                    reported\n"
    "      --json FILE   the run as one object (docs/conform-json.md)\n"
    "      --junit FILE  JUnit XML: a testsuite per backend, a testcase per case\n"
    "      exit status: 0 all pass; 1 a failure, or a required backend unavailable\n"
    "      or incomplete; 2 a bad argument (an unknown op, backend or device, a\n"
    "      --models DIR without models)\n"
    "      --perf times the perf shapes instead: median ms, GFLOP/s, GB/s\n"
    "\n"
    "  diffrt niah --model DIR [--needles N] [--queries R] [--ctx L,...]\n"
    "              [--depths 0,25,50,75,100] [--samples K] [--seed S] [--backend B]\n"
    "              [--device D] [--threads N] [--attention] [--json FILE] [--compare FILE]\n"
    "              [--min-accuracy X] [--min-agree X] [--no-fallback] [--logits-vs DIR2]\n"
    "              [--attn-bits B]\n"
    "      multi-needle retrieval (docs/niah_spec.md): accuracy per depth x context\n"
    "      length; --attention adds the mean attention of the final query token to\n"
    "      the answer needle and to the rest of the context (for diff models the\n"
    "      differential map A1 - lambda A2). Defaults: N=1 R=1, ctx = the model's\n"
    "      max positions (at most 4096), 40 samples, seed 0. At most 10000000\n"
    "      prompts (lengths x depths x samples x queries).\n"
    "      --compare FILE matches every sample with another run of the same\n"
    "      settings (python/niah/eval.py's niah_python.json, or --json output) and\n"
    "      prints the per-sample answer agreement; exit status 1 when it is below\n"
    "      --min-agree (default 0.99), the accuracy is below --min-accuracy, or\n"
    "      (--no-fallback) any node ran on the CPU reference instead of B\n"
    "      --logits-vs DIR2 also runs every prompt through the model in DIR2 (e.g. the\n"
    "      f16 model a quantized DIR was made from) and prints the NMSE of the last\n"
    "      token's logits and how often their top-1 token agrees\n"
    "      --attn-bits B (--backend ref only): every row of attention logits quantized to\n"
    "      B bits (symmetric, per-row absmax) before its softmax, as in the paper's Fig. 8\n"
    "\n"
    "  diffrt bench --model DIR --backend LIST [--device B=SEL,...] [-p 512] [-n 128]\n"
    "               [-r 5] [--threads N] [--json FILE] [--csv | --md]\n"
    "      prefill (pp) and decode (tg) tokens/s, mean +- sd, on each backend of LIST;\n"
    "      the time per op type; decode and prefill as fractions of the roofline\n"
    "      against the backend's measured bandwidth and GEMM peaks (diffrt bench --help)\n"
    "  diffrt report FILE... --out DIR\n"
    "      merges bench --json files from any machines into DIR/report.md and SVG charts\n"
    "\n"
    "  diffrt quantize --model DIR --type q8_0|q4_0 --out DIR2 [--force]\n"
    "      DIR with its projection weights in 8-bit or 4-bit blocks (docs/quantization.md),\n"
    "      written to DIR2 with config.json and tokenizer.json; runs like any model\n"
    "\n"
    "  diffrt analyze --model DIR [--samples K] [--depths ...] [--seed S] [--ctx L] [--json F]\n"
    "      the paper's Table 5 over the NIAH prompts, on the reference backend: top-1,\n"
    "      top-10 and median |value| of the attention logits (both maps of a DIFF head)\n"
    "      and of the hidden states (diffrt analyze --help)\n"
    "\n"
    "  diffrt --help\n"
    "  diffrt --version\n"
    "      the version, the git commit, and each backend: built in, its module\n"
    "      (libdiffrt-<name>.so, from the library's directory or DIFFRT_BACKEND_PATH),\n"
    "      or why it is unavailable\n";

void cli_usage(FILE *f) { fputs(USAGE, f); }

int cli_die(const char *fmt, const char *arg) {
    fprintf(stderr, "diffrt: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 2;
}

int cli_fail(const char *what) {
    fprintf(stderr, "diffrt: %s: %s\n", what, drt_last_error());
    return 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
}

int cli_word_in(const char *a, const char *words) {
    size_t n = strlen(a);
    for (const char *w = words; n && (w = strstr(w, a)); w += n)
        if ((w == words || w[-1] == ' ') && (w[n] == ' ' || !w[n])) return 1;
    return 0;
}

int cli_parse_list(const char *s, int lo, int hi, int *out, int max, int *n) {
    *n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < lo || v > hi || (*end && *end != ',') || *n == max) return 0;
        out[(*n)++] = (int)v;
        s = *end ? end + 1 : end;
        if (*end == ',' && !*s) return 0;
    }
    return *n > 0;
}

int cli_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}

static int parse_double(const char *s, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end) return 0;
    *out = v;
    return 1;
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
        printf("\n");
    } else if (I.arch == DRT_ARCH_DIFF_V2) {
        printf("  lambda          per token: sigmoid(lambda_proj x)\n");
    }
    drt_model_free(m);
}

/* one 2-token prefill and one decode step on backend, then the fallbacks */
static int fallback_check(const char *dir, const char *backend) {
    drt_model *m;
    drt_session *s = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) return cli_fail("info");
    drt_model_info I;
    drt_model_get_info(m, &I);
    drt_session_opts so = {.backend = backend, .max_ctx = 4};
    float *lg = malloc(sizeof(float) * (size_t)I.vocab);
    int32_t ids[2] = {0, I.vocab > 1 ? 1 : 0};
    int rc = 1;
    if (drt_session_create(m, &so, &s) != DRT_OK || drt_session_forward(s, ids, 2, lg, 0) != DRT_OK ||
        drt_session_forward(s, ids, 1, lg, 0) != DRT_OK) {
        rc = cli_fail("info");
    } else {
        char fb[512];
        int n = drt_session_fallbacks(s, fb, sizeof fb);
        printf("\nbackend %s: prefill + decode step ran; %d node runs fell back to the CPU reference%s%s\n", backend,
               n, n ? ": " : "", fb);
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

static int cmd_info(int argc, char **argv) {
    const char *model = NULL, *backend = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--model") == 0 && i + 1 < argc)
            model = argv[++i];
        else if (strcmp(argv[i], "--backend") == 0 && i + 1 < argc)
            backend = argv[++i];
        else if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(USAGE, stdout);
            return 0;
        } else if (i + 1 == argc && cli_word_in(argv[i], "--model --backend"))
            return cli_die("info: %s needs a value (see diffrt --help)", argv[i]);
        else
            return cli_die("info: unknown argument \"%s\" (see diffrt --help)", argv[i]);
    }
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
            printf("              type %s, memory %s, subgroup %s, fp16 %s, bf16 %s\n",
                   p.type[0] ? p.type : "unknown", mem, sg, yn[p.fp16 + 1], yn[p.bf16 + 1]);
        }
    }
    if (model) {
        drt_model *m;
        if (drt_model_load(model, &m) != DRT_OK) return cli_fail("info");
        drt_model_free(m);
        print_model(model);
        if (backend) return fallback_check(model, backend);
    } else if (backend) {
        return cli_die("info: --backend needs --model DIR%s", "");
    }
    return 0;
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

static int cmd_run(int argc, char **argv) {
    const char *model = NULL, *tokens = NULL, *backend = "cpu", *device = NULL;
    const char *text = NULL, *text_file = NULL;
    long n_gen = 16, ctx = 0, top_k = 0, seed = 0, threads = 0;
    int n_given = 0; /* -n on the command line; else at most 16, fewer where the context ends */
    double temp = 0, top_p = 1;
    int verbose = 0, stop_at_eos = 1;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        int takes = 1;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            return 0;
        } else if (strcmp(a, "-v") == 0 || strcmp(a, "--verbose") == 0) {
            verbose = 1, takes = 0;
        } else if (strcmp(a, "--no-stop") == 0) {
            stop_at_eos = 0, takes = 0;
        } else if (!v) {
            if (!cli_word_in(a, "--model --tokens --prompt --prompt-file --backend --device -n --ctx --threads "
                                "--top-k --seed --temp --top-p"))
                return cli_die("run: unknown argument \"%s\" (see diffrt --help)", a);
            return cli_die("run: %s needs a value (see diffrt --help)", a);
        } else if (strcmp(a, "--model") == 0) {
            model = v;
        } else if (strcmp(a, "--tokens") == 0) {
            tokens = v;
        } else if (strcmp(a, "--prompt") == 0) {
            text = v;
        } else if (strcmp(a, "--prompt-file") == 0) {
            text_file = v;
        } else if (strcmp(a, "--backend") == 0) {
            backend = v;
        } else if (strcmp(a, "--device") == 0) {
            device = v;
        } else if (strcmp(a, "-n") == 0) {
            if (!cli_parse_long(v, 0, 1 << 20, &n_gen)) return cli_die("run: -n wants an integer >= 0, got \"%s\"", v);
            n_given = 1;
        } else if (strcmp(a, "--ctx") == 0) {
            if (!cli_parse_long(v, 1, DRT_MAX_CTX, &ctx)) {
                fprintf(stderr, "diffrt: run: --ctx wants an integer in [1, %d], got \"%s\"\n",
                        DRT_MAX_CTX, v);
                return 2;
            }
        } else if (strcmp(a, "--threads") == 0) {
            if (!cli_parse_long(v, 1, 1024, &threads)) return cli_die("run: --threads wants an integer in [1, 1024], got \"%s\"", v);
        } else if (strcmp(a, "--top-k") == 0) {
            if (!cli_parse_long(v, 0, INT_MAX, &top_k)) return cli_die("run: --top-k wants an integer >= 0, got \"%s\"", v);
        } else if (strcmp(a, "--seed") == 0) {
            if (!cli_parse_long(v, 0, LONG_MAX, &seed)) return cli_die("run: --seed wants an integer >= 0, got \"%s\"", v);
        } else if (strcmp(a, "--temp") == 0) {
            if (!parse_double(v, &temp) || !(temp >= 0) || !isfinite(temp))
                return cli_die("run: --temp wants a finite number >= 0, got \"%s\"", v);
        } else if (strcmp(a, "--top-p") == 0) {
            if (!parse_double(v, &top_p) || !(top_p > 0 && top_p <= 1))
                return cli_die("run: --top-p wants a number in (0, 1], got \"%s\"", v);
        } else {
            return cli_die("run: unknown argument \"%s\" (see diffrt --help)", a);
        }
        i += takes;
    }
    if (!model) return cli_die("run: --model DIR is required%s", "");
    if (!!tokens + !!text + !!text_file != 1)
        return cli_die("run: give one of --tokens ID,ID,..., --prompt TEXT or --prompt-file F%s", "");
    int32_t *prompt = NULL;
    int T = 0;
    if (tokens && !parse_tokens(tokens, &prompt, &T))
        return cli_die("run: --tokens wants comma-separated integers, got \"%s\"", tokens);

    int rc = 1;
    drt_model *m = NULL;
    drt_session *s = NULL;
    drt_sampler *smp = NULL;
    float *logits = NULL;
    cli_text ct = {0};
    if (drt_model_load(model, &m) != DRT_OK) {
        rc = cli_fail("run");
        goto done;
    }
    drt_model_info I;
    drt_model_get_info(m, &I);
    int32_t eos = I.eos_id;
    if (!tokens) {
        /* the prompt cannot be longer than the context: --ctx, else max_position_embeddings */
        long max_ids = ctx ? ctx : I.max_ctx;
        drt_status ts = cli_text_begin(&ct, model, text, text_file, I.vocab, I.eos_id, (int)max_ids, stdout,
                                       &prompt, &T);
        if (ts != DRT_OK) {
            cli_fail("run");
            rc = ct.over_context ? 2 : 1; /* a prompt longer than the context: as the checks below */
            goto done;
        }
        eos = ct.eos;
    }
    /* The context is decided before any work: by default as long as the
     * prompt + -n needs (at least 4096 when the model has them), never past
     * max_position_embeddings; a prompt that does not fit is an error here,
     * not a prefill of positions the model never saw. */
    long max_pos = I.max_ctx;
    if (!n_given) { /* the default -n: up to 16 tokens, as many as the context has room for */
        long room = (ctx ? ctx : max_pos) - T;
        if (room > 0 && room < n_gen) n_gen = room;
    }
    long need = (long)T + n_gen;
    if (!ctx) {
        long dflt = max_pos < 4096 ? max_pos : 4096;
        ctx = need <= dflt ? dflt : need <= max_pos ? need : max_pos;
        if (need > ctx) {
            fprintf(stderr,
                    "diffrt: run: prompt (%d tokens) + -n %ld exceeds the context %ld "
                    "(max_position_embeddings); pass --ctx N to raise it\n",
                    T, n_gen, ctx);
            rc = 2;
            goto done;
        }
    } else if (need > ctx) {
        fprintf(stderr,
                "diffrt: run: prompt (%d tokens) + -n %ld exceeds --ctx %ld; pass a larger --ctx\n",
                T, n_gen, ctx);
        rc = 2;
        goto done;
    } else if (ctx > max_pos) {
        fprintf(stderr,
                "diffrt: warning: --ctx %ld is past the model's max_position_embeddings %ld: "
                "positions from %ld on were never trained and the output there may degrade\n",
                ctx, max_pos, max_pos);
    }
    drt_session_opts so = {.backend = backend,
                           .device = device,
                           .max_ctx = (int)ctx,
                           .threads = (int)threads,
                           .check_finite = verbose};
    if (drt_session_create(m, &so, &s) != DRT_OK) {
        rc = cli_fail("run");
        goto done;
    }
    drt_sampler_opts sop = {.temperature = (float)temp, .top_k = (int)top_k, .top_p = (float)top_p,
                            .seed = (uint64_t)seed};
    if (drt_sampler_create(&sop, I.vocab, &smp) != DRT_OK) {
        rc = cli_fail("run");
        goto done;
    }
    logits = malloc(sizeof(float) * (size_t)I.vocab);
    if (!logits) goto done;

    double t0 = now_s();
    if (drt_session_forward(s, prompt, T, logits, 0) != DRT_OK) {
        rc = cli_fail("prefill");
        goto done;
    }
    double t1 = now_s();
    size_t act_unplanned = 0, act = drt_session_activation_bytes(s, &act_unplanned); /* prefill's */
    int generated = 0;
    for (long i = 0; i < n_gen; i++) {
        int32_t tok = drt_sampler_sample(smp, logits);
        if (tok < 0) {
            if (ct.tok)
                cli_text_end(&ct);
            else
                printf("\n");
            rc = cli_fail("sample");
            goto done;
        }
        int stop = stop_at_eos && tok == eos;
        if (!ct.tok) {
            printf("%s%d", generated ? "," : "", tok);
            fflush(stdout);
        } else if (!stop && cli_text_put(&ct, tok) != DRT_OK) {
            rc = cli_fail("run");
            goto done;
        }
        generated++;
        if (stop) break;
        if (i + 1 == n_gen) break;
        if (drt_session_forward(s, &tok, 1, logits, 0) != DRT_OK) {
            if (ct.tok) cli_text_end(&ct);
            else printf("\n");
            rc = cli_fail("decode");
            goto done;
        }
    }
    double t2 = now_s();
    if (ct.tok) {
        if (cli_text_end(&ct) != DRT_OK) {
            rc = cli_fail("run");
            goto done;
        }
    } else {
        printf("\n");
    }
    fflush(stdout);
    int decode_steps = generated > 0 ? generated - 1 : 0;
    fprintf(stderr, "prefill: %d tokens in %.3f s (%.1f tok/s)\n", T, t1 - t0, T / (t1 - t0));
    if (decode_steps)
        fprintf(stderr, "decode:  %d tokens in %.3f s (%.1f tok/s)\n", decode_steps, t2 - t1,
                decode_steps / (t2 - t1));
    char fb[512];
    int nfb = drt_session_fallbacks(s, fb, sizeof fb);
    if (nfb || verbose)
        fprintf(stderr, "backend %s: %d node runs fell back to the CPU reference%s%s\n", backend, nfb,
                nfb ? ": " : "", fb);
    if (verbose)
        fprintf(stderr, "activations: %.2f MiB planned (%.2f MiB without reuse)\n", act / 1048576.0,
                act_unplanned / 1048576.0);
    rc = 0;
done:
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
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long n;
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            fputs(USAGE, stdout);
            return 0;
        } else if (strcmp(a, "--perf") == 0) {
            o.perf = 1;
            continue;
        } else if (strcmp(a, "--list") == 0) {
            o.list = 1;
            continue;
        } else if (!v) {
            if (!cli_word_in(a, "--backend --op --require --device --models --json --junit --repeats --warmup"))
                return cli_die("conform: unknown argument \"%s\" (see diffrt --help)", a);
            return cli_die("conform: %s needs a value (see diffrt --help)", a);
        } else if (strcmp(a, "--backend") == 0) {
            o.backends = v;
        } else if (strcmp(a, "--op") == 0) {
            o.ops = v;
        } else if (strcmp(a, "--require") == 0) {
            o.require = v;
        } else if (strcmp(a, "--device") == 0) {
            o.devices = v;
        } else if (strcmp(a, "--models") == 0) {
            o.models_dir = v;
        } else if (strcmp(a, "--json") == 0) {
            o.json_path = v;
        } else if (strcmp(a, "--junit") == 0) {
            o.junit_path = v;
        } else if (strcmp(a, "--repeats") == 0) {
            if (!cli_parse_long(v, 1, 100000, &n)) return cli_die("conform: --repeats wants an integer >= 1, got \"%s\"", v);
            o.repeats = (int)n;
        } else if (strcmp(a, "--warmup") == 0) {
            if (!cli_parse_long(v, 0, 100000, &n)) return cli_die("conform: --warmup wants an integer >= 0, got \"%s\"", v);
            o.warmup = (int)n;
        } else {
            return cli_die("conform: unknown argument \"%s\" (see diffrt --help)", a);
        }
        i++;
    }
    drt_conform_result r;
    if (drt_conform_run(&o, &r) != DRT_OK) {
        if (r.usage_error) return cli_die("%s", drt_last_error());
        return cli_fail("conform");
    }
    return r.fail || r.unavailable_required ? 1 : 0;
}

static int dispatch(int argc, char **argv) {
    if (argc < 2) {
        fputs(USAGE, stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "-h") == 0 || strcmp(cmd, "--help") == 0 || strcmp(cmd, "help") == 0) {
        fputs(USAGE, stdout);
        return 0;
    }
    if (strcmp(cmd, "--version") == 0 || strcmp(cmd, "version") == 0) return cmd_version();
    if (strcmp(cmd, "info") == 0) return cmd_info(argc - 2, argv + 2);
    if (strcmp(cmd, "run") == 0) return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "conform") == 0) return cmd_conform(argc - 2, argv + 2);
    if (strcmp(cmd, "niah") == 0) return cmd_niah(argc - 2, argv + 2);
    if (strcmp(cmd, "bench") == 0) return cmd_bench(argc - 2, argv + 2);
    if (strcmp(cmd, "report") == 0) return cmd_report(argc - 2, argv + 2);
    if (strcmp(cmd, "quantize") == 0) return cmd_quantize(argc - 2, argv + 2);
    if (strcmp(cmd, "analyze") == 0) return cmd_analyze(argc - 2, argv + 2);
    return cli_die("unknown command \"%s\" (see diffrt --help)", cmd);
}

/* every command's stdout is checked once, here: output lost to a full disk
 * or a closed pipe is an error (exit 1), not a silent success */
int main(int argc, char **argv) { return cli_close_stdout(dispatch(argc, argv)); }
