/* diffrt bench: prefill and decode tokens per second of one model on one or
 * more backends, in the spirit of llama-bench, with a per-op breakdown and
 * the roofline fractions against each backend's own measured peaks
 * (runtime/peak.c). The JSON it writes is docs/bench-json.md; `diffrt
 * report` merges such files from several machines.
 *
 * Per backend, in this order (one progress line each on stderr):
 *   peaks     drt_measure_peak on a backend instance of its own, closed
 *             before the session is made (or --peak-gbps/--peak-gflops)
 *   warm-up   one pp and a short tg
 *   pp        r x: reset, one forward of p tokens from position d
 *   tg        r x: reset, n one-token forwards from position d
 *   profile   r x: reset, a profiled prefill of p tokens, then a profiled
 *             decode step at position d + p (node by node, synchronized), kept
 *             apart from the timed runs so it does not slow them; each op
 *             type's time is its least over the r forwards
 *   parallel  with --parallel N,...: per N, a batch session of N sequences
 *             (drt_batch_forward, like llama-batched-bench): r x: every
 *             sequence cut to 0, the N prompts of p tokens (forwards of up
 *             to 512 rows), then n decode steps of N rows each
 * d is --depth (default 0, llama-bench's -d): after each reset, d tokens go
 * into the KV cache first, untimed.
 * Token ids come from a fixed LCG over the vocabulary: no tokenizer. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"
#include "opts.h"
#include "outfile.h"
#include "diffrt/backend.h"
#include "diffrt/diffrt.h"
#include "diffrt/util.h"

#define MAX_BACKENDS 8
#define MAX_REPS 1000
#define BENCH_MAX_PAR 8 /* --parallel values */
#define PAR_ROWS 512    /* --parallel: rows per prefill forward */

static const char BENCH_ABOUT[] =
    "Prefill (pp) and decode (tg) tokens per second of the model on each backend of LIST\n"
    "(comma-separated: cpu, ref, opencl, vulkan, cuda), as mean +- sd of -r repetitions after a\n"
    "warm-up; the time per op type of one prefill and one decode step (run node by node,\n"
    "synchronized); and decode and prefill as a fraction of the roofline against the backend's\n"
    "peaks measured on it (streaming bandwidth, GEMM FLOP/s: best of 5 runs). A fraction above\n"
    "1.0 means the peak was under-measured and is flagged so.\n";
static const char BENCH_FOOTER[] =
    "Progress goes to stderr, results to stdout. Exit status 1 when a backend failed or is\n"
    "unavailable (the others are still reported), 2 on bad arguments.\n";

/* ---- small helpers ---------------------------------------------------------- */

/* The diffrt version for the record: "0.1.0 (commit abc1234)". */
static const char *bench_version(void) {
    static char v[96];
    snprintf(v, sizeof v, "%s (commit %s)", drt_version(), drt_git_commit());
    return v;
}

typedef struct {
    int n;
    double mean, sd;
    double *v; /* tok/s of each repetition */
} stat;

static void stat_finish(stat *s) {
    double sum = 0, sq = 0;
    for (int i = 0; i < s->n; i++) sum += s->v[i];
    s->mean = s->n ? sum / s->n : 0;
    for (int i = 0; i < s->n; i++) sq += (s->v[i] - s->mean) * (s->v[i] - s->mean);
    s->sd = s->n > 1 ? sqrt(sq / (s->n - 1)) : 0;
}

/* ---- the host ---------------------------------------------------------------- */

typedef struct {
    char hostname[256];
    char os[256];
    char cpu[256];
    int logical_cpus;
    double load[3];
} host_info;

static void host_describe(host_info *h) {
    memset(h, 0, sizeof *h);
    if (gethostname(h->hostname, sizeof h->hostname - 1) != 0) snprintf(h->hostname, sizeof h->hostname, "unknown");
    struct utsname u;
    if (uname(&u) == 0) snprintf(h->os, sizeof h->os, "%s %s %s", u.sysname, u.release, u.machine);
    FILE *f = fopen("/proc/cpuinfo", "r");
    char line[512];
    while (f && fgets(line, sizeof line, f)) {
        char *c = strchr(line, ':');
        if (!c || (strncmp(line, "model name", 10) != 0 && strncmp(line, "Model", 5) != 0)) continue;
        c++;
        while (*c == ' ' || *c == '\t') c++;
        c[strcspn(c, "\n")] = 0;
        snprintf(h->cpu, sizeof h->cpu, "%s", c);
        break;
    }
    if (f) fclose(f);
    h->logical_cpus = drt_cpu_online();
    f = fopen("/proc/loadavg", "r");
    if (f) {
        if (fscanf(f, "%lf %lf %lf", &h->load[0], &h->load[1], &h->load[2]) != 3)
            h->load[0] = h->load[1] = h->load[2] = -1;
        fclose(f);
    } else {
        h->load[0] = h->load[1] = h->load[2] = -1;
    }
}

/* ---- napkin math for the roofline (ops.c's conventions) ------------------------ */

/* Elements of the 2-D weights one layer multiplies by (q, k, v, o, the V2
 * lambda projection, gate, up, down), from the model's shapes as
 * model/builder.c uses them. */
static double layer_matrix_elems(const drt_model_info *I) {
    double D = I->dim, H = I->n_heads, G = I->n_kv_groups, dk = I->dk, dv = I->dv;
    double qmaps = I->arch == DRT_ARCH_TRANSFORMER ? 1 : 2;
    double q = H * qmaps * dk * D, k = G * I->kv_m * dk * D, v = G * dv * D, o = D * H * dv;
    double lam = I->arch == DRT_ARCH_DIFF_V2 ? H * D : 0;
    return q + k + v + o + lam + 3.0 * I->ffn * D;
}

/* The parameters the shapes above account for (every matrix, the embedding
 * table, the LM head when it is not tied); the norm vectors are left out,
 * so this is a little under drt_model_info.n_params: the check that the
 * napkin math sees the model's weights. */
static double napkin_params(const drt_model_info *I) {
    double VD = (double)I->vocab * I->dim;
    return I->n_layers * layer_matrix_elems(I) + VD + (I->tied_embeddings ? 0 : VD);
}

/* Bytes one decode step at position pos reads, the decode roofline's
 * numerator: every 2-D weight once (the layers' matrices and the LM head,
 * all of it, tied or not), of the embedding table only the token's row,
 * and the K and V cache of every layer up to pos + 1 rows (f32, as
 * session/session.c allocates it). Norm vectors, activations and the logits
 * are left out: under 1% of the total on real models. A decode run of n
 * tokens from position 0 is charged at its mean position (n - 1) / 2. */
static double decode_bytes_per_token(const drt_model_info *I, double pos) {
    /* bytes per element: a block format's block size over its values */
    double w = (double)drt_dtype_size(I->weight_dtype) / drt_dtype_block(I->weight_dtype);
    double e = (double)drt_dtype_size(I->embed_dtype) / drt_dtype_block(I->embed_dtype);
    double head = (double)I->vocab * I->dim * (I->tied_embeddings ? e : w);
    double weights = I->n_layers * layer_matrix_elems(I) * w + head + I->dim * e;
    double kv_row = (double)I->n_kv_groups * ((double)I->kv_m * I->dk + I->dv) * 4.0;
    return weights + (double)I->n_layers * (pos + 1) * kv_row;
}

/* FLOPs of one prefill of T tokens from position 0, the prefill roofline's
 * numerator: 2 per weight element per token for the layers' matrices, the
 * LM head for the last token only (a prefill computes the last logits),
 * and attention over the T (T + 1) / 2 causal (query, key) pairs of every
 * head, per pair 2 q.k dots and one weighted v for diff models, one of each
 * for the transformer (ops.c's flops_diff_attn / flops_attn). */
static double prefill_flops(const drt_model_info *I, double T, double depth) {
    double pairs = T * depth + T * (T + 1) / 2.0;
    double per_pair = I->arch == DRT_ARCH_TRANSFORMER ? 2.0 * I->dk + 2.0 * I->dv : 4.0 * I->dk + 2.0 * I->dv;
    return 2.0 * T * I->n_layers * layer_matrix_elems(I) + 2.0 * (double)I->vocab * I->dim +
           (double)I->n_layers * pairs * I->n_heads * per_pair;
}

/* ---- one backend's results ------------------------------------------------------ */

typedef struct {
    double fraction; /* NAN: no peak */
    int flagged;     /* fraction > 1.0: the peak was under-measured */
    int in_cache;    /* decode: the bytes per token would fit in a large last-level cache */
    double peak;     /* GB/s or GFLOP/s */
    double work;     /* bytes or FLOPs per token */
} roof;

typedef struct {
    char name[16];
    const char *device_sel;
    int failed;
    char error[512];
    /* the device (device_describe) */
    char device[256];
    int device_index;
    const char *vendor, *driver; /* NULL when the backend does not say (device_props) */
    drt_device_props props;
    drt_peak peak;
    int peak_given;
    stat pp, tg;
    roof decode, prefill;
    drt_profile prof_pp, prof_tg;
    int n_fallbacks;
    char fallbacks[512];
    double session_s;  /* drt_session_create: the weights placed on the backend and prepared */
    size_t kv_bytes;   /* its KV cache (drt_session_kv_bytes) */
    drt_dtype kv_type; /* and its type */
    /* --parallel: per sequence count, prefill and decode tok/s of all
     * sequences together */
    struct {
        int n_seq;
        stat pp, tg;
    } par[BENCH_MAX_PAR];
} bench_backend;

/* name's index among drt_backend_count()'s, or -1 */
static int backend_index(const char *name) {
    for (int i = 0; i < drt_backend_count(); i++) {
        drt_backend_info bi;
        if (drt_backend_get_info(i, &bi) == DRT_OK && strcmp(bi.name, name) == 0) return i;
    }
    return -1;
}

/* What the record says about the device a backend instance runs on: its
 * name (as the instance runs it), and vendor and driver where the backend's
 * device_props knows them. */
static void device_describe(drt_backend *be, bench_backend *r) {
    const int b = backend_index(r->name), dev = drt_backend_device(be);
    r->device_index = dev < 0 ? 0 : dev;
    r->vendor = r->driver = NULL;
    if (drt_backend_device_props(b, r->device_index, &r->props) == DRT_OK) {
        if (r->props.vendor[0]) r->vendor = r->props.vendor;
        if (r->props.driver[0]) r->driver = r->props.driver;
    }
    /* the instance's own name: the cpu backend's threads and modes as opened */
    if (drt_backend_instance_name(be, r->device, sizeof r->device) != DRT_OK)
        snprintf(r->device, sizeof r->device, "%.15s device %d", r->name, r->device_index);
}

static roof make_roof(double tok_s, double work, double peak) {
    roof f = {.fraction = NAN, .peak = peak, .work = work};
    if (peak > 0 && tok_s > 0) {
        f.fraction = tok_s * work / (peak * 1e9);
        f.flagged = f.fraction > 1.0;
    }
    return f;
}

typedef struct {
    const char *model_dir;
    long p, n, r, threads;
    long depth;                    /* --depth: tokens in the KV cache before each pp and tg run */
    double peak_gbps, peak_gflops; /* > 0: given */
    int fmt;                       /* 0 text, 1 csv, 2 md */
    const char *json_path;
    const drt_settings *settings;  /* --set, for every backend measured (NULL: none) */
    int par[BENCH_MAX_PAR], n_par; /* --parallel: sequence counts */
    double load_s;                 /* drt_model_load */
} bench_opts;

static uint64_t g_lcg;
static int32_t next_token(int vocab) {
    g_lcg = g_lcg * 6364136223846793005ull + 1442695040888963407ull;
    return (int32_t)((g_lcg >> 33) % (uint64_t)vocab);
}

/* threads of the host read loop: the cpu backend's, the reference's one */
static int host_threads(const char *backend, long threads, const drt_settings *settings) {
    if (strcmp(backend, "ref") == 0) return 1;
    if (threads > 0) return (int)threads;
    /* the cpu backend's default: cpu.threads (--set, else DIFFRT_THREADS;
     * docs/environment.md); an unusable value is the backend's error,
     * reported before this is used */
    char v[32];
    long n = 0;
    if (drt_settings_get(settings, "cpu.threads", v, sizeof v, NULL) != DRT_OK || !cli_parse_long(v, 1, INT_MAX, &n))
        n = drt_physical_cores(); /* "": automatic */
    return (int)n;
}

/* Keeps, per op type, the least time of the profiled forwards so far (one
 * forward each): a node that was preempted on a shared machine does not
 * skew the breakdown. */
static void profile_keep_min(drt_profile *acc, const drt_profile *one) {
    if (!one->forwards) return;
    if (!acc->forwards) {
        *acc = *one;
        return;
    }
    for (int i = 0; i < one->n_ops; i++)
        if (one->seconds[i] < acc->seconds[i]) acc->seconds[i] = one->seconds[i];
}

static void progress(const char *be, const char *what) {
    fprintf(stderr, "bench: %-7s %s\n", be, what);
}

static int fail_backend(bench_backend *r, const char *what) {
    r->failed = 1;
    snprintf(r->error, sizeof r->error, "%s: %s", what, drt_last_error());
    fprintf(stderr, "diffrt: bench: %s: %s\n", r->name, r->error);
    return 1;
}

/* r's bandwidth and GEMM peaks: --peak-gbps / --peak-gflops where given,
 * the rest measured on an instance of the backend's own; 0, else 1 (r failed) */
static int backend_peaks(const bench_opts *o, const drt_model_info *I, bench_backend *r) {
    drt_backend *be = NULL;
    if (drt_backend_open_settings(r->name, r->device_sel, (int)o->threads, o->settings, &be) != DRT_OK)
        return fail_backend(r, "open");
    device_describe(be, r);
    if (o->peak_gbps > 0 || o->peak_gflops > 0) {
        r->peak_given = 1;
        r->peak.gbytes_per_s = o->peak_gbps;
        r->peak.gflops = o->peak_gflops;
        snprintf(r->peak.bw_probe, sizeof r->peak.bw_probe, "given (--peak-gbps)");
        snprintf(r->peak.flops_probe, sizeof r->peak.flops_probe, "given (--peak-gflops)");
    }
    if (!(o->peak_gbps > 0) || !(o->peak_gflops > 0)) {
        progress(r->name, "peaks: bandwidth and GEMM microbenchmarks (best of 5)");
        drt_peak_opts po = {.weight_dtype = I->weight_dtype,
                            .host_threads = host_threads(r->name, o->threads, o->settings)};
        drt_peak pk;
        if (drt_measure_peak(be, &po, &pk) != DRT_OK) {
            drt_backend_close(be);
            return fail_backend(r, "peak");
        }
        double gb = r->peak.gbytes_per_s, gf = r->peak.gflops;
        r->peak = pk;
        if (o->peak_gbps > 0) {
            r->peak.gbytes_per_s = gb;
            snprintf(r->peak.bw_probe, sizeof r->peak.bw_probe, "given (--peak-gbps)");
        }
        if (o->peak_gflops > 0) {
            r->peak.gflops = gf;
            snprintf(r->peak.flops_probe, sizeof r->peak.flops_probe, "given (--peak-gflops)");
        }
    }
    drt_backend_close(be);
    return 0;
}

/* --parallel: N sequences in one batch session, llama-batched-bench's test:
 * their prompts of p tokens (sequence s's are ids shifted by 131 s over the
 * vocabulary, so that no two are alike), then n steps of one decode row
 * each; tok/s over all N sequences. */
static int run_parallel(const bench_opts *o, drt_model *m, const drt_model_info *I, const int32_t *ids,
                        bench_backend *r, int k) {
    const int N = r->par[k].n_seq, P = (int)o->p, G = (int)o->n;
    char line[128];
    drt_session_opts so = {
        .backend = r->name, .device = r->device_sel, .threads = (int)o->threads, .settings = o->settings};
    drt_batch_opts bo = {.max_seqs = N, .ctx_per_seq = P + G + 4, .max_batch_rows = PAR_ROWS};
    drt_batch_session *s = NULL;
    int32_t *tok = malloc(sizeof(int32_t) * PAR_ROWS), *seq = malloc(sizeof(int32_t) * PAR_ROWS);
    int8_t *flag = malloc(PAR_ROWS);
    float *logits = malloc(sizeof(float) * (size_t)I->vocab * (size_t)(N < PAR_ROWS ? N : PAR_ROWS));
    r->par[k].pp.v = calloc((size_t)o->r + 1, sizeof(double));
    r->par[k].tg.v = calloc((size_t)o->r + 1, sizeof(double));
    int rc = 0;
    if (!tok || !seq || !flag || !logits || !r->par[k].pp.v || !r->par[k].tg.v) {
        r->failed = 1;
        snprintf(r->error, sizeof r->error, "out of memory");
        rc = 1;
        goto done;
    }
    if (drt_batch_session_create(m, &so, &bo, &s) != DRT_OK) {
        rc = fail_backend(r, "batch session");
        goto done;
    }
    /* a warm-up round, then r timed ones */
    for (int rep = -1; rep < o->r; rep++) {
        if (rep == 0) {
            snprintf(line, sizeof line, "parallel %d: pp%d + tg%d x %ld", N, P, G, o->r);
            progress(r->name, line);
        }
        for (int q = 0; q < N; q++) drt_seq_truncate(s, q, 0);
        double t0 = drt_clock_s();
        /* the prompts, packed into forwards of up to PAR_ROWS rows; the
         * last row of each prompt has logits */
        int n = 0;
        for (int q = 0; q < N; q++)
            for (int i = 0; i < P; i++) {
                tok[n] = (int32_t)(((int64_t)ids[i] + 131 * q) % I->vocab);
                seq[n] = q;
                flag[n] = (int8_t)(i + 1 == P);
                if (++n == PAR_ROWS || (q + 1 == N && i + 1 == P)) {
                    drt_batch b = {.n = n, .token = tok, .seq = seq, .logits = flag};
                    if (drt_batch_forward(s, &b, logits) != DRT_OK) {
                        rc = fail_backend(r, "parallel prefill");
                        goto done;
                    }
                    n = 0;
                }
            }
        double t1 = drt_clock_s();
        for (int i = 0; i < G; i++) {
            for (int q = 0; q < N; q++) {
                tok[q] = ids[(i + q) % (P > G ? P : G)];
                seq[q] = q;
                flag[q] = 1;
            }
            drt_batch b = {.n = N, .token = tok, .seq = seq, .logits = flag};
            if (drt_batch_forward(s, &b, logits) != DRT_OK) {
                rc = fail_backend(r, "parallel decode");
                goto done;
            }
        }
        double t2 = drt_clock_s();
        if (rep < 0) continue;
        if (P) r->par[k].pp.v[r->par[k].pp.n++] = (double)N * P / (t1 - t0);
        if (G) r->par[k].tg.v[r->par[k].tg.n++] = (double)N * G / (t2 - t1);
    }
    stat_finish(&r->par[k].pp);
    stat_finish(&r->par[k].tg);
done:
    drt_batch_session_free(s);
    free(tok);
    free(seq);
    free(flag);
    free(logits);
    return rc;
}

/* " @ d8192" for --depth 8192, "" without (llama-bench's test names) */
static const char *depth_tag(const bench_opts *o) {
    static char tag[32];
    if (o->depth > 0)
        snprintf(tag, sizeof tag, " @ d%ld", o->depth);
    else
        tag[0] = 0;
    return tag;
}

/* A reset, then the --depth tokens ids[0 .. depth) into the KV cache
 * (untimed; the session runs a long prompt 512 rows a forward) */
static drt_status fill_depth(drt_session *s, const bench_opts *o, const int32_t *ids, float *logits) {
    drt_session_reset(s);
    return o->depth > 0 ? drt_session_forward(s, ids, (int)o->depth, logits, 0) : DRT_OK;
}

static int run_backend(const bench_opts *o, drt_model *m, const drt_model_info *I, const int32_t *ids,
                       bench_backend *r) {
    char line[512];
    if (backend_peaks(o, I, r)) return 1;

    /* the session: depth, prefill p, then one decode step for the profile */
    int ctx = (int)(o->depth + (o->p + 1 > o->n ? o->p + 1 : o->n));
    drt_session_opts so = {.backend = r->name,
                           .device = r->device_sel,
                           .max_ctx = ctx,
                           .threads = (int)o->threads,
                           .settings = o->settings};
    drt_session *s = NULL;
    float *logits = malloc(sizeof(float) * (size_t)I->vocab);
    r->pp.v = calloc((size_t)o->r, sizeof(double));
    r->tg.v = calloc((size_t)o->r, sizeof(double));
    int rc = 0;
    if (!logits || !r->pp.v || !r->tg.v) {
        r->failed = 1;
        snprintf(r->error, sizeof r->error, "out of memory");
        rc = 1;
        goto done;
    }
    const double t_create = drt_clock_s();
    if (drt_session_create(m, &so, &s) != DRT_OK) {
        rc = fail_backend(r, "session");
        goto done;
    }
    r->session_s = drt_clock_s() - t_create;
    r->kv_bytes = drt_session_kv_bytes(s);
    r->kv_type = drt_session_kv_type(s);
    int P = (int)o->p, N = (int)o->n;
    progress(r->name, "warm-up");
    if (P > 0 && drt_session_forward(s, ids, P, logits, 0) != DRT_OK) {
        rc = fail_backend(r, "warm-up prefill");
        goto done;
    }
    drt_session_reset(s);
    for (int i = 0; i < (N < 4 ? N : 4); i++)
        if (drt_session_forward(s, ids + i, 1, logits, 0) != DRT_OK) {
            rc = fail_backend(r, "warm-up decode");
            goto done;
        }
    const int32_t *tid = ids + o->depth; /* the tokens after the depth's */
    if (P > 0) {
        snprintf(line, sizeof line, "pp%d%s x %ld", P, depth_tag(o), o->r);
        progress(r->name, line);
        for (int k = 0; k < o->r; k++) {
            if (fill_depth(s, o, ids, logits) != DRT_OK) {
                rc = fail_backend(r, "depth prefill");
                goto done;
            }
            double t0 = drt_clock_s();
            if (drt_session_forward(s, tid, P, logits, 0) != DRT_OK) {
                rc = fail_backend(r, "prefill");
                goto done;
            }
            r->pp.v[r->pp.n++] = P / (drt_clock_s() - t0);
        }
        stat_finish(&r->pp);
    }
    if (N > 0) {
        snprintf(line, sizeof line, "tg%d%s x %ld", N, depth_tag(o), o->r);
        progress(r->name, line);
        for (int k = 0; k < o->r; k++) {
            if (fill_depth(s, o, ids, logits) != DRT_OK) {
                rc = fail_backend(r, "depth prefill");
                goto done;
            }
            double t0 = drt_clock_s();
            for (int i = 0; i < N; i++)
                if (drt_session_forward(s, tid + i, 1, logits, 0) != DRT_OK) {
                    rc = fail_backend(r, "decode");
                    goto done;
                }
            r->tg.v[r->tg.n++] = N / (drt_clock_s() - t0);
        }
        stat_finish(&r->tg);
    }
    progress(r->name, "per-op profile (node by node, synchronized)");
    for (int k = 0; k < o->r; k++) {
        drt_profile a = {0}, d = {0};
        if (fill_depth(s, o, ids, logits) != DRT_OK ||
            (P > 0 && drt_session_forward_profiled(s, tid, P, logits, &a) != DRT_OK) ||
            drt_session_forward_profiled(s, tid, 1, logits, &d) != DRT_OK) {
            rc = fail_backend(r, "profile");
            goto done;
        }
        profile_keep_min(&r->prof_pp, &a);
        profile_keep_min(&r->prof_tg, &d);
    }
    r->n_fallbacks = drt_session_fallbacks(s, r->fallbacks, sizeof r->fallbacks);
    r->decode = make_roof(r->tg.mean, decode_bytes_per_token(I, o->depth + (N - 1) / 2.0), r->peak.gbytes_per_s);
    /* the peak probes stream from memory; a model whose decode step reads
     * less than a large last-level cache (128 MiB: AMD's 3D V-cache parts,
     * GPUs' L2 / Infinity Cache) may be served from the cache instead */
    r->decode.in_cache = r->decode.work < 128.0 * 1048576;
    r->prefill = make_roof(r->pp.mean, P > 0 ? prefill_flops(I, P, (double)o->depth) / P : 0, r->peak.gflops);
    for (int k = 0; rc == 0 && k < o->n_par; k++) {
        r->par[k].n_seq = o->par[k];
        rc = run_parallel(o, m, I, ids, r, k);
    }
done:
    free(logits);
    drt_session_free(s);
    return rc;
}

/* ---- output ------------------------------------------------------------------- */

/* "0.35 of 25.1 GB/s", flagged past 1.0, "n/a" without a peak */
static void roof_str(const roof *f, const char *unit, char *buf, size_t n) {
    if (isnan(f->fraction))
        snprintf(buf, n, "n/a (no %s peak)", unit);
    else
        snprintf(buf, n, "%.3f of %.1f %s%s%s", f->fraction, f->peak, unit, f->flagged ? " (" BENCH_ROOF_FLAG ")" : "",
                 f->in_cache ? " (" BENCH_CACHE_NOTE ")" : "");
}

typedef struct {
    int op;
    double ms;
} op_ms;

static int by_ms_desc(const void *a, const void *b) {
    double x = ((const op_ms *)a)->ms, y = ((const op_ms *)b)->ms;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* op types of a profile by time, most first; returns how many ran, and the total ms per forward */
static int sorted_ops(const drt_profile *p, op_ms *out, double *total_ms) {
    int k = 0;
    *total_ms = 0;
    for (int i = 0; i < p->n_ops; i++) {
        if (!p->nodes[i]) continue;
        out[k].op = i;
        out[k].ms = p->forwards ? p->seconds[i] * 1e3 / p->forwards : 0;
        *total_ms += out[k].ms;
        k++;
    }
    qsort(out, (size_t)k, sizeof *out, by_ms_desc);
    return k;
}

static void csv_field(FILE *f, const char *s) {
    if (!strpbrk(s, ",\"\n\r")) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"') fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void print_csv(FILE *f, const bench_opts *o, bench_backend *b, int nb) {
    fprintf(f, "backend,device,test,n_tokens,repetitions,mean_tok_s,sd_tok_s,roofline_fraction,"
               "roofline_flag,peak,peak_unit\n");
    for (int i = 0; i < nb; i++) {
        for (int t = 0; t < 2; t++) {
            const stat *st = t ? &b[i].tg : &b[i].pp;
            const roof *rf = t ? &b[i].decode : &b[i].prefill;
            long ntok = t ? o->n : o->p;
            if (!ntok || b[i].failed) continue;
            csv_field(f, b[i].name);
            fputc(',', f);
            csv_field(f, b[i].device);
            fprintf(f, ",%s%ld%s,%ld,%ld,%.3f,%.3f,", t ? "tg" : "pp", ntok, depth_tag(o), ntok, o->r, st->mean,
                    st->sd);
            if (isnan(rf->fraction))
                fprintf(f, ",,");
            else
                fprintf(f, "%.4f,%s,", rf->fraction, rf->flagged ? BENCH_ROOF_FLAG : "");
            fprintf(f, "%.3f,%s\n", rf->peak, t ? "GB/s" : "GFLOP/s");
        }
    }
}

/* markdown: a table cell of arbitrary text */
static void md_cell(FILE *f, const char *s) {
    fputc(' ', f);
    cli_md_escape(f, s);
    fputs(" |", f);
}

/* s as markdown (escaped) or as plain text */
static void put_text(FILE *f, int md, const char *s) {
    if (md)
        cli_md_escape(f, s);
    else
        fputs(s, f);
}

/* one backend's per-op table: prefill and decode ms and shares per op type */
static void print_ops(FILE *f, const bench_opts *o, int md, const bench_backend *r) {
    char buf[1024];
    op_ms a[DRT_PROFILE_MAX_OPS], d[DRT_PROFILE_MAX_OPS];
    double ta, td;
    int na = sorted_ops(&r->prof_pp, a, &ta), nd = sorted_ops(&r->prof_tg, d, &td);
    fprintf(f, "\n");
    snprintf(buf, sizeof buf,
             "per-op time on %.15s: prefill of %ld tokens%s %.3f ms, decode step at position %ld "
             "%.3f ms",
             r->name, o->p, depth_tag(o), ta, o->depth + o->p, td);
    if (md) {
        cli_md_escape(f, buf);
        fprintf(f, "\n\n| op | prefill ms | prefill %% | decode ms | decode %% "
                   "|\n|---|---:|---:|---:|---:|\n");
    } else {
        fprintf(f, "%s\n  %-13s %12s %8s %12s %8s\n", buf, "op", "prefill ms", "%", "decode ms", "%");
    }
    /* rows in the decode order (the roofline's side), then ops only the prefill ran */
    for (int k = 0; k < nd + na; k++) {
        int op = k < nd ? d[k].op : a[k - nd].op;
        if (k >= nd && r->prof_tg.nodes[op]) continue;
        double pm = r->prof_pp.forwards ? r->prof_pp.seconds[op] * 1e3 / r->prof_pp.forwards : 0;
        double dm = r->prof_tg.forwards ? r->prof_tg.seconds[op] * 1e3 / r->prof_tg.forwards : 0;
        const char *name = r->prof_tg.op[op] ? r->prof_tg.op[op] : r->prof_pp.op[op];
        if (md)
            fprintf(f, "| %s | %.4f | %.1f | %.4f | %.1f |\n", name, pm, ta > 0 ? 100 * pm / ta : 0, dm,
                    td > 0 ? 100 * dm / td : 0);
        else
            fprintf(f, "  %-13s %12.4f %7.1f%% %12.4f %7.1f%%\n", name, pm, ta > 0 ? 100 * pm / ta : 0, dm,
                    td > 0 ? 100 * dm / td : 0);
    }
}

/* --parallel: a row per backend and sequence count, llama-batched-bench's
 * columns: prefill and decode tok/s over all sequences, decode tok/s of
 * one sequence, and decode against the first count's */
static void print_parallel(FILE *f, const bench_opts *o, int md, const bench_backend *b, int nb) {
    fprintf(f, md ? "\n**parallel sequences** (pp%ld, tg%ld each)\n\n" : "\nparallel sequences (pp%ld, tg%ld each)\n",
            o->p, o->n);
    if (md)
        fprintf(f,
                "| backend | seqs | pp tok/s (all) | tg tok/s (all) | tg tok/s (one seq) | tg vs %d seq |\n"
                "|---|---:|---:|---:|---:|---:|\n",
                o->par[0]);
    else
        fprintf(f, "%-8s %5s %-22s %-22s %-18s %s\n", "backend", "seqs", "pp tok/s (all)", "tg tok/s (all)",
                "tg tok/s (one)", "tg vs first");
    for (int i = 0; i < nb; i++) {
        if (b[i].failed) continue;
        for (int k = 0; k < o->n_par; k++) {
            const stat *pp = &b[i].par[k].pp, *tg = &b[i].par[k].tg;
            int N = b[i].par[k].n_seq;
            char a[64] = "-", c[64] = "-", d[64] = "-", e[32] = "-";
            if (o->p) snprintf(a, sizeof a, "%.2f \xc2\xb1 %.2f", pp->mean, pp->sd);
            if (o->n) {
                snprintf(c, sizeof c, "%.2f \xc2\xb1 %.2f", tg->mean, tg->sd);
                snprintf(d, sizeof d, "%.2f", tg->mean / N);
                if (b[i].par[0].tg.mean > 0) snprintf(e, sizeof e, "%.2fx", tg->mean / b[i].par[0].tg.mean);
            }
            if (md)
                fprintf(f, "| %s | %d | %s | %s | %s | %s |\n", b[i].name, N, a, c, d, e);
            else
                fprintf(f, "%-8s %5d %-23s %-23s %-18s %s\n", b[i].name, N, a, c, d, e);
        }
    }
}

static void print_table(FILE *f, const bench_opts *o, const drt_model_info *I, const char *model_name,
                        const host_info *h, bench_backend *b, int nb) {
    int md = o->fmt == 2;
    char buf[1024];
    fprintf(f, md ? "**model** " : "model  ");
    snprintf(buf, sizeof buf, "%s (%s, %s layout, %.2f M params, %s, %d layers, dim %d)", model_name, I->arch_name,
             I->layout_name, (double)I->n_params / 1e6, drt_dtype_name(I->weight_dtype), I->n_layers, I->dim);
    put_text(f, md, buf);
    fprintf(f, md ? "  \n**host** " : "\nhost   ");
    snprintf(buf, sizeof buf, "%.200s, %.200s, %d logical CPUs, load %.2f %.2f %.2f", h->hostname,
             h->cpu[0] ? h->cpu : "CPU ?", h->logical_cpus, h->load[0], h->load[1], h->load[2]);
    put_text(f, md, buf);
    fprintf(f, "\n\n");
    /* the text table shows at most 48 code points of a device name (Vulkan's
     * carries the driver and limits); markdown, CSV and JSON have all of it */
    char dev[MAX_BACKENDS][256];
    int wdev = 6;
    for (int i = 0; i < nb; i++) {
        cli_ellipsize(b[i].device, md ? 200 : 48, dev[i], sizeof dev[i]);
        if ((int)strlen(dev[i]) > wdev) wdev = (int)strlen(dev[i]);
    }
    if (md)
        fprintf(f, "| backend | device | test | tok/s | roofline |\n|---|---|---|---:|---|\n");
    else
        fprintf(f, "%-8s %-*s %-7s %-22s %s\n", "backend", wdev, "device", "test", "tok/s", "roofline");
    for (int i = 0; i < nb; i++) {
        if (b[i].failed) {
            snprintf(buf, sizeof buf, "error: %s", b[i].error);
            if (md) {
                fputc('|', f);
                md_cell(f, b[i].name);
                md_cell(f, dev[i]);
                md_cell(f, "");
                md_cell(f, "");
                md_cell(f, buf);
                fputc('\n', f);
            } else {
                fprintf(f, "%-8s %-*s %s\n", b[i].name, wdev, dev[i], buf);
            }
            continue;
        }
        for (int t = 0; t < 2; t++) {
            const stat *st = t ? &b[i].tg : &b[i].pp;
            long ntok = t ? o->n : o->p;
            if (!ntok) continue;
            char test[48], tps[64], rf[160];
            snprintf(test, sizeof test, "%s%ld%s", t ? "tg" : "pp", ntok, depth_tag(o));
            snprintf(tps, sizeof tps, "%.2f \xc2\xb1 %.2f", st->mean, st->sd);
            roof_str(t ? &b[i].decode : &b[i].prefill, t ? "GB/s" : "GFLOP/s", rf, sizeof rf);
            if (md) {
                fputc('|', f);
                md_cell(f, b[i].name);
                md_cell(f, dev[i]);
                md_cell(f, test);
                md_cell(f, tps);
                md_cell(f, rf);
                fputc('\n', f);
            } else {
                fprintf(f, "%-8s %-*s %-7s %-23s %s\n", b[i].name, wdev, dev[i], test, tps, rf);
            }
        }
    }
    fprintf(f, "\n");
    int o_len = snprintf(buf, sizeof buf, "load: model %.3f s", o->load_s);
    for (int i = 0; i < nb && o_len > 0 && (size_t)o_len < sizeof buf; i++)
        if (!b[i].failed)
            o_len += snprintf(buf + o_len, sizeof buf - (size_t)o_len, "; %.16s session %.3f s (KV cache %.1f MiB %s)",
                              b[i].name, b[i].session_s, b[i].kv_bytes / 1048576.0, drt_dtype_name(b[i].kv_type));
    put_text(f, md, buf);
    fprintf(f, md ? " (weights placed on the backend and prepared)  \n"
                  : " (weights placed on the backend and prepared)\n");
    for (int i = 0; i < nb; i++) {
        if (b[i].failed) continue;
        snprintf(buf, sizeof buf, "peaks %.16s: %.2f GB/s (%.96s), %.2f GFLOP/s (%.96s)", b[i].name,
                 b[i].peak.gbytes_per_s, b[i].peak.bw_probe, b[i].peak.gflops, b[i].peak.flops_probe);
        put_text(f, md, buf);
        fprintf(f, md ? "  \n" : "\n");
        if (b[i].n_fallbacks) {
            snprintf(buf, sizeof buf, "  %.16s: %d node runs fell back to the CPU reference: %.900s", b[i].name,
                     b[i].n_fallbacks, b[i].fallbacks);
            put_text(f, md, buf);
            fprintf(f, md ? "  \n" : "\n");
        }
    }
    for (int i = 0; i < nb; i++)
        if (!b[i].failed) print_ops(f, o, md, &b[i]);
    if (o->n_par) print_parallel(f, o, md, b, nb);
}

/* ---- JSON (docs/bench-json.md) -------------------------------------------------- */

static cJSON *json_stat(const stat *s, long ntok) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddNumberToObject(j, "n_tokens", (double)ntok);
    cJSON_AddNumberToObject(j, "mean_tok_s", s->mean);
    cJSON_AddNumberToObject(j, "sd_tok_s", s->sd);
    cJSON *a = cJSON_AddArrayToObject(j, "samples_tok_s");
    for (int i = 0; i < s->n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(s->v[i]));
    return j;
}

static cJSON *json_num_or_null(double v) {
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static cJSON *json_roof(const roof *f, const char *work_key, const char *peak_key) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToObject(j, "fraction", json_num_or_null(f->fraction));
    cJSON_AddItemToObject(j, "flag", f->flagged ? cJSON_CreateString(BENCH_ROOF_FLAG) : cJSON_CreateNull());
    cJSON_AddItemToObject(j, "note", f->in_cache ? cJSON_CreateString(BENCH_CACHE_NOTE) : cJSON_CreateNull());
    cJSON_AddNumberToObject(j, work_key, f->work);
    cJSON_AddNumberToObject(j, peak_key, f->peak);
    return j;
}

static cJSON *json_profile(const drt_profile *p, long ntok, long pos) {
    cJSON *j = cJSON_CreateObject();
    op_ms o[DRT_PROFILE_MAX_OPS];
    double total;
    int n = sorted_ops(p, o, &total);
    cJSON_AddNumberToObject(j, "n_tokens", (double)ntok);
    cJSON_AddNumberToObject(j, "position", (double)pos);
    cJSON_AddNumberToObject(j, "forwards", p->forwards);
    cJSON_AddNumberToObject(j, "total_ms", total);
    cJSON *a = cJSON_AddArrayToObject(j, "ops");
    for (int k = 0; k < n; k++) {
        int i = o[k].op;
        double fw = p->forwards ? p->forwards : 1;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "op", p->op[i]);
        cJSON_AddNumberToObject(e, "nodes", p->nodes[i] / fw);
        cJSON_AddNumberToObject(e, "fallback_nodes", p->fallback[i] / fw);
        cJSON_AddNumberToObject(e, "ms", o[k].ms);
        cJSON_AddNumberToObject(e, "percent", total > 0 ? 100 * o[k].ms / total : 0);
        cJSON_AddNumberToObject(e, "gflop", p->flops[i] / fw * 1e-9);
        cJSON_AddNumberToObject(e, "mbytes", p->bytes[i] / fw * 1e-6);
        cJSON_AddItemToArray(a, e);
    }
    return j;
}

static int write_json(const char *path, const bench_opts *o, const drt_model_info *I, const char *model_name,
                      const host_info *h, bench_backend *b, int nb) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "schema_version", BENCH_SCHEMA_VERSION);
    cJSON_AddStringToObject(root, "kind", "diffrt-bench");
    cJSON_AddStringToObject(root, "diffrt_version", bench_version());
    char when[32];
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &tm);
    cJSON_AddStringToObject(root, "created", when);

    cJSON *jh = cJSON_AddObjectToObject(root, "host");
    cJSON_AddStringToObject(jh, "hostname", h->hostname);
    cJSON_AddStringToObject(jh, "os", h->os);
    cJSON_AddStringToObject(jh, "cpu", h->cpu);
    cJSON_AddNumberToObject(jh, "logical_cpus", h->logical_cpus);
    cJSON *jl = cJSON_AddArrayToObject(jh, "load_avg");
    for (int i = 0; i < 3; i++) cJSON_AddItemToArray(jl, cJSON_CreateNumber(h->load[i]));

    cJSON *js = cJSON_AddObjectToObject(root, "settings");
    cJSON_AddNumberToObject(js, "n_prompt", (double)o->p);
    cJSON_AddNumberToObject(js, "n_gen", (double)o->n);
    cJSON_AddNumberToObject(js, "n_depth", (double)o->depth);
    cJSON_AddNumberToObject(js, "repetitions", (double)o->r);
    cJSON_AddNumberToObject(js, "threads", (double)o->threads);
    cJSON_AddStringToObject(js, "tokens", "LCG over the vocabulary, seed 42");

    cJSON *jm = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(jm, "name", model_name);
    cJSON_AddNumberToObject(jm, "load_s", o->load_s);
    cJSON_AddStringToObject(jm, "path", o->model_dir);
    cJSON_AddStringToObject(jm, "architecture", I->arch_name);
    cJSON_AddStringToObject(jm, "layout", I->layout_name);
    cJSON_AddNumberToObject(jm, "params", (double)I->n_params);
    cJSON_AddNumberToObject(jm, "params_napkin", napkin_params(I));
    cJSON_AddStringToObject(jm, "dtype", drt_dtype_name(I->weight_dtype));
    cJSON_AddNumberToObject(jm, "layers", I->n_layers);
    cJSON_AddNumberToObject(jm, "dim", I->dim);
    cJSON_AddNumberToObject(jm, "ffn", I->ffn);
    cJSON_AddNumberToObject(jm, "heads", I->n_heads);
    cJSON_AddNumberToObject(jm, "kv_groups", I->n_kv_groups);
    cJSON_AddNumberToObject(jm, "vocab", I->vocab);

    cJSON *ja = cJSON_AddArrayToObject(root, "backends");
    for (int i = 0; i < nb; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "backend", b[i].name);
        cJSON_AddStringToObject(e, "status", b[i].failed ? "error" : "ok");
        cJSON_AddItemToObject(e, "error", b[i].failed ? cJSON_CreateString(b[i].error) : cJSON_CreateNull());
        cJSON *jd = cJSON_AddObjectToObject(e, "device");
        cJSON_AddStringToObject(jd, "name", b[i].device);
        cJSON_AddNumberToObject(jd, "index", b[i].device_index);
        cJSON_AddItemToObject(jd, "vendor", b[i].vendor ? cJSON_CreateString(b[i].vendor) : cJSON_CreateNull());
        cJSON_AddItemToObject(jd, "driver", b[i].driver ? cJSON_CreateString(b[i].driver) : cJSON_CreateNull());
        if (b[i].failed) {
            cJSON_AddItemToArray(ja, e);
            continue;
        }
        cJSON_AddNumberToObject(e, "session_s", b[i].session_s);
        cJSON_AddNumberToObject(e, "kv_cache_bytes", (double)b[i].kv_bytes);
        cJSON_AddStringToObject(e, "kv_type", drt_dtype_name(b[i].kv_type));
        cJSON *jp = cJSON_AddObjectToObject(e, "peak");
        cJSON_AddStringToObject(jp, "source", b[i].peak_given ? "given" : "measured");
        cJSON_AddNumberToObject(jp, "gbytes_per_s", b[i].peak.gbytes_per_s);
        cJSON_AddNumberToObject(jp, "gflops", b[i].peak.gflops);
        cJSON_AddStringToObject(jp, "bandwidth_probe", b[i].peak.bw_probe);
        cJSON_AddStringToObject(jp, "gemm_probe", b[i].peak.flops_probe);
        cJSON_AddNumberToObject(jp, "runs", b[i].peak.runs);
        cJSON *pr = cJSON_AddObjectToObject(jp, "probes");
        cJSON_AddNumberToObject(pr, "add_gbytes_per_s", b[i].peak.add_gbps);
        cJSON_AddNumberToObject(pr, "gemv_gbytes_per_s", b[i].peak.gemv_gbps);
        cJSON_AddNumberToObject(pr, "host_read_gbytes_per_s", b[i].peak.host_gbps);
        cJSON_AddNumberToObject(pr, "gemm_f32_gflops", b[i].peak.gemm_f32_gflops);
        cJSON_AddNumberToObject(pr, "gemm_weight_gflops", b[i].peak.gemm_w_gflops);
        if (o->p) cJSON_AddItemToObject(e, "pp", json_stat(&b[i].pp, o->p));
        if (o->n) cJSON_AddItemToObject(e, "tg", json_stat(&b[i].tg, o->n));
        cJSON *jr = cJSON_AddObjectToObject(e, "roofline");
        if (o->n) {
            cJSON *d = json_roof(&b[i].decode, "bytes_per_token", "peak_gbytes_per_s");
            cJSON_AddNumberToObject(d, "mean_position", o->depth + (o->n - 1) / 2.0);
            cJSON_AddItemToObject(jr, "decode", d);
        }
        if (o->p) cJSON_AddItemToObject(jr, "prefill", json_roof(&b[i].prefill, "flops_per_token", "peak_gflops"));
        cJSON *jf = cJSON_AddObjectToObject(e, "fallbacks");
        cJSON_AddNumberToObject(jf, "node_runs", b[i].n_fallbacks);
        cJSON_AddStringToObject(jf, "by_op", b[i].fallbacks);
        cJSON *jo = cJSON_AddObjectToObject(e, "ops");
        if (o->p) cJSON_AddItemToObject(jo, "prefill", json_profile(&b[i].prof_pp, o->p, 0));
        cJSON_AddItemToObject(jo, "decode", json_profile(&b[i].prof_tg, 1, o->p));
        if (o->n_par) {
            cJSON *jpar = cJSON_AddArrayToObject(e, "parallel");
            for (int k = 0; k < o->n_par; k++) {
                cJSON *x = cJSON_CreateObject();
                int N = b[i].par[k].n_seq;
                cJSON_AddNumberToObject(x, "n_seq", N);
                if (o->p) cJSON_AddItemToObject(x, "pp", json_stat(&b[i].par[k].pp, o->p * N));
                if (o->n) {
                    cJSON_AddItemToObject(x, "tg", json_stat(&b[i].par[k].tg, o->n * N));
                    cJSON_AddNumberToObject(x, "tg_per_seq_tok_s", b[i].par[k].tg.mean / N);
                }
                cJSON_AddItemToArray(jpar, x);
            }
        }
        cJSON_AddItemToArray(ja, e);
    }
    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    int bad = cli_out_write_text("bench: --json", path, txt);
    free(txt);
    return bad;
}

/* ---- arguments ------------------------------------------------------------------ */

/* --parallel N,...: 1 .. BENCH_MAX_PAR counts of 1 .. DRT_MAX_SEQS */
static int parse_parallel(const char *spec, bench_opts *o) {
    const char *p = spec;
    o->n_par = 0;
    for (;;) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 1 || v > DRT_MAX_SEQS || (*end && *end != ','))
            return cli_die("bench: --parallel wants sequence counts 1 .. 4096, comma-separated (got \"%s\")", spec);
        if (o->n_par == BENCH_MAX_PAR) return cli_die("bench: --parallel takes at most 8 counts (got \"%s\")", spec);
        o->par[o->n_par++] = (int)v;
        if (!*end) return 0;
        p = end + 1;
    }
}

/* LIST into b[].name; 0 with a message on a bad list */
static int parse_backends(const char *list, bench_backend *b, int *nb) {
    *nb = 0;
    const char *p = list;
    for (;;) {
        size_t len = strcspn(p, ",");
        char name[64];
        if (len == 0 || len >= sizeof name) {
            fprintf(stderr, "diffrt: bench: --backend wants a comma-separated list of backends, got \"%s\"\n", list);
            return 0;
        }
        memcpy(name, p, len);
        name[len] = 0;
        if (backend_index(name) < 0) {
            fprintf(stderr, "diffrt: bench: unknown backend \"%s\" (known: cpu, ref, opencl, vulkan, cuda)\n", name);
            return 0;
        }
        for (int i = 0; i < *nb; i++)
            if (strcmp(b[i].name, name) == 0) {
                fprintf(stderr, "diffrt: bench: backend %s named twice in --backend\n", name);
                return 0;
            }
        if (*nb == MAX_BACKENDS) return 0;
        snprintf(b[(*nb)++].name, sizeof b[0].name, "%.15s", name);
        if (!p[len]) return 1;
        p += len + 1;
    }
}

/* --device B=SEL,B=SEL: each B must be in the backend list. dup holds the
 * string (the selectors point into it). */
static int parse_devices(char *dup, bench_backend *b, int nb) {
    for (char *save = NULL, *tok = strtok_r(dup, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        char *eq = strchr(tok, '=');
        if (!eq || eq == tok || !eq[1]) {
            fprintf(stderr,
                    "diffrt: bench: --device wants BACKEND=SEL[,BACKEND=SEL...] (SEL: index or "
                    "name substring), got \"%s\"\n",
                    tok);
            return 0;
        }
        *eq = 0;
        int found = 0;
        for (int i = 0; i < nb; i++)
            if (strcmp(b[i].name, tok) == 0) {
                b[i].device_sel = eq + 1;
                found = 1;
            }
        if (!found) {
            fprintf(stderr, "diffrt: bench: --device names backend \"%s\", which is not in --backend\n", tok);
            return 0;
        }
    }
    return 1;
}

static const char *base_name(const char *path, char *buf, size_t n) {
    snprintf(buf, n, "%s", path);
    size_t len = strlen(buf);
    while (len > 1 && buf[len - 1] == '/') buf[--len] = 0;
    const char *s = strrchr(buf, '/');
    return s ? s + 1 : buf;
}

int cmd_bench(int argc, char **argv) {
    bench_opts o = {.p = 512, .n = 128, .r = 5};
    const char *backends = NULL, *devices = NULL, *set_spec = NULL, *par_spec = NULL, *kv_type = NULL;
    int csv = 0, md = 0;
    const cli_opt opts[] = {
        {.name = "--model", .kind = CLI_STR, .dst = &o.model_dir, .meta = "DIR", .help = "the model directory"},
        {.name = "--backend",
         .kind = CLI_STR,
         .dst = &backends,
         .meta = "LIST",
         .help = "backends to measure, comma-separated"},
        {.name = "-p",
         .kind = CLI_LONG,
         .dst = &o.p,
         .meta = "N",
         .lo = 0,
         .hi = DRT_MAX_CTX - 1,
         .bad = "-p wants an integer >= 0",
         .help = "prompt tokens per prefill, 0 = no pp test (default 512)"},
        {.name = "-n",
         .kind = CLI_LONG,
         .dst = &o.n,
         .meta = "N",
         .lo = 0,
         .hi = DRT_MAX_CTX,
         .bad = "-n wants an integer >= 0",
         .help = "tokens per decode run, 0 = no tg test (default 128)"},
        {.name = "--depth",
         .short_name = 'd',
         .kind = CLI_LONG,
         .dst = &o.depth,
         .meta = "N",
         .lo = 0,
         .hi = DRT_MAX_CTX / 2,
         .bad = "--depth wants an integer >= 0",
         .help = "tokens already in the KV cache for the pp and tg tests, prefilled\n(untimed) after each reset, as "
                 "llama-bench's -d (default 0)"},
        {.name = "-r",
         .kind = CLI_LONG,
         .dst = &o.r,
         .meta = "N",
         .lo = 1,
         .hi = MAX_REPS,
         .help = "repetitions (default 5)"},
        {.name = "--device",
         .kind = CLI_STR,
         .dst = &devices,
         .meta = "B=SEL,...",
         .help = "device of backend B: index or name substring\n(default: DIFFRT_DEVICE, else the backend's first "
                 "GPU)"},
        {.name = "--threads",
         .kind = CLI_LONG,
         .dst = &o.threads,
         .meta = "N",
         .lo = 1,
         .hi = 1024,
         .help = "CPU threads for cpu (default: DIFFRT_THREADS, else the\nphysical cores)"},
        CLI_OPT_SET(&set_spec),
        CLI_OPT_KV_TYPE(&kv_type),
        {.name = "--peak-gbps",
         .kind = CLI_DOUBLE,
         .dst = &o.peak_gbps,
         .meta = "X",
         .ok = cli_positive,
         .bad = "--peak-gbps wants a number > 0",
         .help = "use X GB/s (e.g. the datasheet's) as every backend's bandwidth\npeak instead of measuring it"},
        {.name = "--peak-gflops",
         .kind = CLI_DOUBLE,
         .dst = &o.peak_gflops,
         .meta = "X",
         .ok = cli_positive,
         .bad = "--peak-gflops wants a number > 0",
         .help = "the same for the GEMM peak, in GFLOP/s"},
        {.name = "--parallel",
         .kind = CLI_STR,
         .dst = &par_spec,
         .meta = "N,...",
         .help = "also decode N sequences together after their prompts of -p\ntokens (a batch session, as "
                 "llama-batched-bench), for each N\n(1 .. 4096; at most 8 values)"},
        {.name = "--json",
         .kind = CLI_STR,
         .dst = &o.json_path,
         .meta = "FILE",
         .help = "also write the results as JSON (docs/bench-json.md)"},
        {.name = "--csv", .kind = CLI_FLAG, .dst = &csv, .help = "print CSV instead of the text table"},
        {.name = "--md", .kind = CLI_FLAG, .dst = &md, .help = "print a markdown table instead of the text table"},
        {0}};
    const cli_cmd cmd = {.name = "bench",
                         .synopsis = "--model DIR --backend LIST [options]",
                         .about = BENCH_ABOUT,
                         .opts = opts,
                         .footer = BENCH_FOOTER};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc != CLI_PARSED) return prc;
    if (csv && md) return cli_die("bench: give one of --csv and --md%s", "");
    o.fmt = csv ? 1 : md ? 2 : 0;
    if (!o.model_dir) return cli_die("bench: --model DIR is required (see diffrt bench --help)%s", "");
    if (!backends) return cli_die("bench: --backend LIST is required, e.g. --backend cpu,vulkan%s", "");
    if (!o.p && !o.n) return cli_die("bench: -p 0 and -n 0 leave nothing to measure%s", "");
    if (par_spec && parse_parallel(par_spec, &o)) return 2;
    if (par_spec && o.depth) return cli_die("bench: --depth applies to the pp and tg tests, not to --parallel%s", "");
    bench_backend b[MAX_BACKENDS];
    memset(b, 0, sizeof b);
    int nb = 0;
    if (!parse_backends(backends, b, &nb)) return 2;
    char *devdup = devices ? strdup(devices) : NULL;
    if (devices && (!devdup || !parse_devices(devdup, b, nb))) {
        free(devdup);
        return 2;
    }

    int rc = 0;
    drt_model *m = NULL;
    int32_t *ids = NULL;
    drt_settings *set = NULL;
    if ((rc = cli_settings("bench", set_spec, &set)) != 0 || (rc = cli_kv_type("bench", kv_type, &set)) != 0) goto done;
    o.settings = set;
    const double t_load = drt_clock_s();
    if (drt_model_load(o.model_dir, &m) != DRT_OK) {
        rc = cli_fail("bench");
        goto done;
    }
    o.load_s = drt_clock_s() - t_load;
    drt_model_info I;
    drt_model_get_info(m, &I);
    long need = o.depth + (o.p + 1 > o.n ? o.p + 1 : o.n);
    if (need > I.max_ctx)
        fprintf(stderr,
                "diffrt: bench: warning: %ld positions are past the model's "
                "max_position_embeddings %d: "
                "timings hold, the outputs are not meaningful there\n",
                need, I.max_ctx);
    long nid = o.depth + (o.p > o.n ? o.p : o.n);
    ids = malloc(sizeof(int32_t) * (size_t)(nid > 4 ? nid : 4));
    if (!ids) {
        rc = cli_fail("bench");
        goto done;
    }
    g_lcg = 42;
    for (long i = 0; i < (nid > 4 ? nid : 4); i++) ids[i] = next_token(I.vocab);
    host_info h;
    host_describe(&h);
    for (int i = 0; i < nb; i++) rc |= run_backend(&o, m, &I, ids, &b[i]);
    char nbuf[1024];
    const char *model_name = base_name(o.model_dir, nbuf, sizeof nbuf);
    if (o.fmt == 1)
        print_csv(stdout, &o, b, nb);
    else
        print_table(stdout, &o, &I, model_name, &h, b, nb);
    fflush(stdout);
    if (o.json_path) rc |= write_json(o.json_path, &o, &I, model_name, &h, b, nb);
done:
    for (int i = 0; i < nb; i++) {
        free(b[i].pp.v);
        free(b[i].tg.v);
        for (int k = 0; k < BENCH_MAX_PAR; k++) {
            free(b[i].par[k].pp.v);
            free(b[i].par[k].tg.v);
        }
    }
    free(ids);
    free(devdup);
    drt_model_free(m);
    drt_settings_free(set);
    return rc;
}
