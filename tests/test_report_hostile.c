/* diffrt report on bench JSON files written here by hand (docs/bench-json.md):
 *   - many rows (thousands, over several files and two tables): every row is
 *     in its table once, in file order, with its bars; a run given twice
 *     (also an ok run that repeats an error row, and across files) is an
 *     error naming both files. That the command is linear in the rows is
 *     tests/test_report_work.c's (counted, not timed);
 *   - hostile numbers: a measured figure that is negative, infinite (1e999)
 *     or absurd (1e300) is "?" in report.md and leaves no geometry in the
 *     SVGs (no "nan", "inf", negative or wrapped sizes); a number that shapes
 *     a table (layers, dim, params, n_prompt, n_gen) out of range, not whole,
 *     or of the wrong type, and a figure of the wrong type, is a one-line
 *     error (exit 2) naming the file and the field;
 *   - the output set written whole: a write failing or a kill midway leaves
 *     the previous report.md and SVGs as they were; other files in --out
 *     need --force; an input inside --out is refused. */
#include <ctype.h>
#include <dirent.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include "drt_test.h"

static char g_out[1 << 16];

/* runs `diffrt ARGS` with stderr merged; output in g_out */
static int run(const char *args) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", DRT_CLI_PATH, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = fread(g_out, 1, sizeof g_out - 1, p);
    g_out[k] = 0;
    while (fgetc(p) != EOF) {
    }
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- writing bench files ------------------------------------------------------ */

/* one field of the generated file replaced by raw JSON text (NULL: none) */
typedef struct {
    const char *field, *json;
} override;

static const char *val(const override *o, const char *field, const char *dflt) {
    return o && o->field && strcmp(o->field, field) == 0 ? o->json : dflt;
}

static void ops_json(FILE *f, const override *o, const char *kind) {
    char pf[64], mf[64];
    snprintf(pf, sizeof pf, "%s.percent", kind);
    snprintf(mf, sizeof mf, "%s.ms", kind);
    fprintf(f,
            "\"%s\": {\"n_tokens\": 1, \"total_ms\": 2.0, \"ops\": ["
            "{\"op\": \"MATMUL\", \"nodes\": 4, \"ms\": %s, \"percent\": %s},"
            "{\"op\": \"ADD\", \"nodes\": 2, \"ms\": 0.6, \"percent\": 30.0},"
            "{\"op\": \"RMS_NORM\", \"nodes\": 1, \"ms\": 0.2, \"percent\": 10.0}]}",
            kind, val(o, mf, "1.2"), val(o, pf, "60.0"));
}

/* a backends[] entry: ok, or status "error" when err */
static void row_json(FILE *f, const char *device, const char *err, const override *o) {
    if (err) {
        fprintf(f,
                "{\"backend\": \"cpu\", \"status\": \"error\", \"error\": \"%s\", \"device\": "
                "{\"name\": \"%s\", \"index\": 0}}",
                err, device);
        return;
    }
    fprintf(f,
            "{\"backend\": \"cpu\", \"status\": \"ok\", \"error\": null, "
            "\"device\": {\"name\": \"%s\", \"index\": 0},"
            "\"pp\": {\"n_tokens\": 16, \"mean_tok_s\": %s, \"sd_tok_s\": %s},"
            "\"tg\": {\"n_tokens\": 4, \"mean_tok_s\": %s, \"sd_tok_s\": %s},"
            "\"roofline\": {\"decode\": {\"fraction\": %s, \"flag\": null, \"note\": null, "
            "\"peak_gbytes_per_s\": %s}, \"prefill\": {\"fraction\": 0.6, \"flag\": null, "
            "\"peak_gflops\": %s}},"
            "\"ops\": {",
            device, val(o, "pp.mean_tok_s", "120.5"), val(o, "pp.sd_tok_s", "2.5"), val(o, "tg.mean_tok_s", "20.25"),
            val(o, "tg.sd_tok_s", "0.5"), val(o, "decode.fraction", "0.4"), val(o, "decode.peak_gbytes_per_s", "20.0"),
            val(o, "prefill.peak_gflops", "90.0"));
    ops_json(f, o, "prefill");
    fputc(',', f);
    ops_json(f, o, "decode");
    fputs("}}", f);
}

static void head_json(FILE *f, const char *host, long n_prompt, const override *o) {
    char np[32];
    snprintf(np, sizeof np, "%ld", n_prompt);
    fprintf(f,
            "{\"schema_version\": 1, \"kind\": \"diffrt-bench\", \"created\": "
            "\"2026-11-25T00:00:00Z\", \"host\": {\"hostname\": \"%s\"},"
            "\"settings\": {\"n_prompt\": %s, \"n_gen\": %s, \"repetitions\": 1},"
            "\"model\": {\"name\": \"m\", \"architecture\": \"diff-v2\", \"dtype\": \"f16\", "
            "\"params\": %s, \"layers\": %s, \"dim\": %s},"
            "\"backends\": [",
            host, val(o, "settings.n_prompt", np), val(o, "settings.n_gen", "4"), val(o, "model.params", "902400"),
            val(o, "model.layers", "4"), val(o, "model.dim", "128"));
}

/* a file of one host: n_ok ok rows "dev I" (I from first), n_err error rows
 * "err dev I" whose error is one of three strings, and the extra rows given */
static void write_bench(const char *path, const char *host, long n_prompt, int first, int n_ok, int n_err,
                        const char *extra_ok_device, const char *extra_err_device, const override *o) {
    FILE *f = fopen(path, "w");
    DRT_CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    head_json(f, host, n_prompt, o);
    int k = 0;
    char dev[64], err[64];
    for (int i = 0; i < n_ok; i++, k++) {
        if (k) fputc(',', f);
        snprintf(dev, sizeof dev, "dev %d", first + i);
        row_json(f, dev, NULL, o);
    }
    for (int i = 0; i < n_err; i++, k++) {
        if (k) fputc(',', f);
        snprintf(dev, sizeof dev, "err dev %d", i);
        snprintf(err, sizeof err, "no device found (reason %d)", i % 3);
        row_json(f, dev, err, NULL);
    }
    if (extra_err_device) {
        if (k++) fputc(',', f);
        row_json(f, extra_err_device, "no device found (reason 0)", NULL);
    }
    if (extra_ok_device) {
        if (k++) fputc(',', f);
        row_json(f, extra_ok_device, NULL, o);
    }
    fputs("]}\n", f);
    fclose(f);
}

static char *read_out(const char *dir, const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    char *s = drt_test_read_file(path);
    DRT_CHECK(s != NULL, "%s was not written", path);
    return s;
}

static int count(const char *s, const char *what) {
    int n = 0;
    for (const char *p = s; p && (p = strstr(p, what)); p += strlen(what)) n++;
    return n;
}

/* the text s (report.md's tables or an SVG) has no NaN, no infinity, no wrapped int */
static void no_bad_numbers(const char *what, const char *s) {
    if (!s) return;
    size_t n = strlen(s);
    char *low = malloc(n + 1);
    if (!low) return;
    for (size_t i = 0; i <= n; i++) low[i] = (char)tolower((unsigned char)s[i]);
    DRT_CHECK(!strstr(low, "nan") && !strstr(low, "inf"), "%s: a nan or inf got through:\n%.3000s", what, s);
    DRT_CHECK(!strstr(s, "2147483648") && !strstr(s, "e+"), "%s: a wrapped or absurd number got through:\n%.3000s",
              what, s);
    free(low);
}

/* no attribute of an SVG holds a negative number or a huge one */
static void svg_geometry_ok(const char *what, const char *s) {
    if (!s) return;
    no_bad_numbers(what, s);
    DRT_CHECK(!strstr(s, "=\"-"), "%s: a negative coordinate or size:\n%.3000s", what, s);
    for (const char *p = strstr(s, "width=\""); p; p = strstr(p + 1, "width=\"")) {
        double w = atof(p + 7);
        DRT_CHECK(w >= 0 && w <= 2000, "%s: a bar of width %g", what, w);
        if (!(w >= 0 && w <= 2000)) break;
    }
    DRT_CHECK(strstr(s, "</svg>") != NULL, "%s: not finished", what);
}

/* ---- many rows -------------------------------------------------------------------- */

static void many_rows(void) {
    enum { N_OK = 3000, N_ERR = 1000, N_C = 500, N_B = 500 };
    char A[512], B[512], C[512], D[512], E[512], Fd[512], dir[512], args[4096];
    snprintf(A, sizeof A, "%s/report_many_A.json", DRT_TMP_DIR);
    snprintf(B, sizeof B, "%s/report_many_B.json", DRT_TMP_DIR);
    snprintf(C, sizeof C, "%s/report_many_C.json", DRT_TMP_DIR);
    snprintf(D, sizeof D, "%s/report_many_D.json", DRT_TMP_DIR);
    snprintf(E, sizeof E, "%s/report_many_E.json", DRT_TMP_DIR);
    snprintf(Fd, sizeof Fd, "%s/report_many_F.json", DRT_TMP_DIR);
    snprintf(dir, sizeof dir, "%s/report_many", DRT_TMP_DIR);
    /* A: host h, table pp16: 3000 ok rows, 1000 error rows, an error row given twice (allowed) */
    write_bench(A, "h", 16, 0, N_OK, N_ERR, NULL, "err dev 7", NULL);
    /* B: host h, another table (pp32), the same device names: no clash */
    write_bench(B, "h", 32, 0, N_B, 0, NULL, NULL, NULL);
    /* C: host h2, table pp16, A's device names: no clash */
    write_bench(C, "h2", 16, 0, N_C, 0, NULL, NULL, NULL);
    snprintf(args, sizeof args, "report '%s' '%s' '%s' --out '%s'", A, B, C, dir);
    int rc = run(args);
    int total = N_OK + N_ERR + 1 + N_B + N_C;
    char want[128];
    snprintf(want, sizeof want, "(%d rows, 2 tables)", total);
    DRT_CHECK(rc == 0 && strstr(g_out, want), "diffrt %s: exit %d, should say %s:\n%s", args, rc, want, g_out);
    char *md = read_out(dir, "report.md");
    if (md) {
        const char *t2 = strstr(md, "\n## 2. ");
        DRT_CHECK(t2 != NULL, "report.md has no second table");
        if (t2) {
            /* table 1: A's rows then C's; table 2: B's */
            int ok1 = 0, err1 = 0, h2 = 0, ok2 = 0, order = 1, last = -1;
            for (const char *l = md; l && *l; l = strchr(l, '\n') ? strchr(l, '\n') + 1 : NULL) {
                int in2 = l > t2;
                int dev = -1;
                if (strncmp(l, "| h | dev ", 10) == 0) {
                    dev = atoi(l + 10);
                    if (in2)
                        ok2++;
                    else
                        ok1++;
                } else if (strncmp(l, "| h | err dev ", 14) == 0) {
                    err1 += !in2;
                } else if (strncmp(l, "| h2 | dev ", 11) == 0) {
                    h2 += !in2;
                    order &= ok1 == N_OK && err1 == N_ERR + 1;
                }
                if (dev >= 0 && !in2) {
                    order &= dev == last + 1;
                    last = dev;
                }
            }
            DRT_CHECK(ok1 == N_OK && err1 == N_ERR + 1 && h2 == N_C && ok2 == N_B,
                      "report.md rows: table 1 %d ok + %d error + %d of h2 (want %d + %d + %d), "
                      "table 2 %d (want %d)",
                      ok1, err1, h2, N_OK, N_ERR + 1, N_C, ok2, N_B);
            DRT_CHECK(order, "report.md: table 1's rows are not in file order");
            DRT_CHECK(count(md, "error: no device found (reason 2)") == N_ERR / 3,
                      "report.md: %d rows say reason 2, want %d", count(md, "error: no device found (reason 2)"),
                      N_ERR / 3);
            DRT_CHECK(strstr(md, "| h | dev 2999 | cpu | 120.50 \xc2\xb1 2.50 | 20.25 \xc2\xb1 0.50 | "
                                 "0.400 of 20.0 GB/s"),
                      "report.md: the last ok row of A lacks its figures");
        }
        no_bad_numbers("report.md (many rows)", strstr(md, "\n## 1. "));
    }
    free(md);
    char *tok = read_out(dir, "tokens_per_s-1.svg");
    if (tok) {
        /* a pp and a tg bar per ok row, an error text per error row */
        DRT_CHECK(count(tok, "fill=\"#4e79a7\"><title>") == N_OK + N_C &&
                      count(tok, "fill=\"#f28e2b\"><title>") == N_OK + N_C &&
                      count(tok, "error (see report.md)") == N_ERR + 1,
                  "tokens_per_s-1.svg: %d pp bars, %d tg bars, %d errors (want %d, %d, %d)",
                  count(tok, "fill=\"#4e79a7\"><title>"), count(tok, "fill=\"#f28e2b\"><title>"),
                  count(tok, "error (see report.md)"), N_OK + N_C, N_OK + N_C, N_ERR + 1);
        svg_geometry_ok("tokens_per_s-1.svg", tok);
    }
    free(tok);
    char *ops = read_out(dir, "ops-2.svg");
    if (ops) {
        DRT_CHECK(count(ops, "<title>MATMUL 60.0%") == 2 * N_B && count(ops, "<title>ADD 30.0%") == 2 * N_B,
                  "ops-2.svg: %d MATMUL and %d ADD shares (want %d each)", count(ops, "<title>MATMUL 60.0%"),
                  count(ops, "<title>ADD 30.0%"), 2 * N_B);
        svg_geometry_ok("ops-2.svg", ops);
    }
    free(ops);

    /* the same run twice: in another file; an ok row after an error row of the same run; in
     * one file */
    write_bench(D, "h", 16, N_OK - 1, 1, 0, NULL, NULL, NULL);
    write_bench(E, "h", 16, N_OK, 1, 0, "err dev 5", NULL, NULL);
    write_bench(Fd, "h9", 16, 0, 2000, 0, "dev 1999", NULL, NULL);
    const struct {
        const char *second, *names;
    } dups[] = {{D, "device dev 2999, backend cpu is also in"},
                {E, "device err dev 5, backend cpu is also in"},
                {Fd, "host h9, device dev 1999, backend cpu is also in"}};
    for (int i = 0; i < 3; i++) {
        const char *first = i == 2 ? Fd : A;
        snprintf(args, sizeof args, "report '%s' '%s' --out '%s'", A, dups[i].second, dir);
        rc = run(args);
        DRT_CHECK(rc == 2 && strstr(g_out, dups[i].names) && strstr(g_out, first) &&
                      strncmp(g_out, "diffrt: report: ", 16) == 0 && strstr(g_out, dups[i].second) &&
                      strchr(g_out, '\n') == g_out + strlen(g_out) - 1,
                  "diffrt %s: exit %d (want 2), one line naming %s and \"%s\":\n%s", args, rc, first, dups[i].names,
                  g_out);
    }
    /* the names in that message come from the files: shown escaped, never a raw ESC */
    write_bench(Fd, "h\\u001b[31mx", 16, 0, 1, 0, "dev 0", NULL, NULL);
    snprintf(args, sizeof args, "report '%s' --out '%s'", Fd, dir);
    rc = run(args);
    DRT_CHECK(rc == 2 && !strchr(g_out, 0x1b) && strstr(g_out, "[31mx, device dev 0, backend cpu is also in"),
              "diffrt %s: exit %d (want 2), the host escaped:\n%s", args, rc, g_out);
}

/* ---- hostile numbers ------------------------------------------------------------------ */

static void hostile_numbers(void) {
    static const struct {
        override o;
        const char *must_say; /* NULL: exit 0, the figure shown as "?" */
    } cases[] = {
        {{"pp.mean_tok_s", "-5"}, NULL},
        {{"pp.sd_tok_s", "1e999"}, NULL},
        {{"tg.mean_tok_s", "1e999"}, NULL},
        {{"tg.mean_tok_s", "-1e999"}, NULL},
        {{"tg.sd_tok_s", "-0.5"}, NULL},
        {{"pp.mean_tok_s", "1e308"}, NULL},
        {{"decode.fraction", "1e300"}, NULL},
        {{"decode.fraction", "-0.5"}, NULL},
        {{"decode.peak_gbytes_per_s", "-1e999"}, NULL},
        {{"prefill.peak_gflops", "1e999"}, NULL},
        {{"decode.percent", "1e999"}, NULL},
        {{"prefill.percent", "-40"}, NULL},
        {{"decode.ms", "-3"}, NULL},
        {{"model.layers", "1e30"}, "model.layers: expected an integer in"},
        {{"model.layers", "-2147483649"}, "model.layers: expected an integer in"},
        {{"model.layers", "4.5"}, "model.layers: expected an integer in"},
        {{"model.dim", "-1"}, "model.dim: expected an integer in"},
        {{"model.params", "1e999"}, "model.params: expected a number in"},
        {{"model.params", "-902400"}, "model.params: expected a number in"},
        {{"settings.n_prompt", "-16"}, "settings.n_prompt: expected an integer in"},
        {{"settings.n_gen", "1e999"}, "settings.n_gen: expected an integer in"},
        {{"settings.n_gen", "99999999999"}, "settings.n_gen: expected an integer in"},
        {{"model.dim", "\"128\""}, "model.dim: expected a number"},
        {{"model.layers", "true"}, "model.layers: expected a number"},
        {{"pp.mean_tok_s", "\"fast\""}, "backends[1].pp.mean_tok_s: expected a number"},
        {{"tg.sd_tok_s", "[1]"}, "backends[1].tg.sd_tok_s: expected a number"},
        {{"decode.fraction", "\"x\""}, "backends[1].roofline.decode.fraction: expected a number or null"},
        {{"decode.percent", "null"}, "backends[1].ops.decode.percent: expected a number"},
    };
    char J[512], dir[512], args[2048];
    snprintf(J, sizeof J, "%s/report_hostile_numbers.json", DRT_TMP_DIR);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const override *o = &cases[i].o;
        snprintf(dir, sizeof dir, "%s/report_hostile_%zu", DRT_TMP_DIR, i);
        /* a good row first: the bad figure must not spoil another row's bars (head_json takes
         * the model. and settings. fields of o, row_json the others) */
        FILE *f = fopen(J, "w");
        if (f) {
            head_json(f, "h", 16, o);
            row_json(f, "good", NULL, NULL);
            fputc(',', f);
            row_json(f, "bad", NULL, o);
            fputs("]}\n", f);
            fclose(f);
        }
        snprintf(args, sizeof args, "report '%s' --out '%s'", J, dir);
        int rc = run(args);
        if (cases[i].must_say) {
            DRT_CHECK(rc == 2 && strncmp(g_out, "diffrt: report: ", 16) == 0 && strstr(g_out, J) &&
                          strstr(g_out, cases[i].must_say) && strchr(g_out, '\n') == g_out + strlen(g_out) - 1,
                      "%s = %s: exit %d (want 2), one line naming the file and \"%s\":\n%s", o->field, o->json, rc,
                      cases[i].must_say, g_out);
            continue;
        }
        DRT_CHECK(rc == 0, "%s = %s: exit %d (want 0):\n%s", o->field, o->json, rc, g_out);
        char *md = read_out(dir, "report.md");
        if (md) {
            const char *bad = strstr(md, "| h | bad | cpu |"), *good = strstr(md, "| h | good | cpu |");
            size_t len = bad ? strcspn(bad, "\n") : 0;
            /* an op's ms is not in report.md, only in the SVG's tooltip (below) */
            int ms = strstr(o->field, ".ms") != NULL;
            DRT_CHECK(bad && (ms || memchr(bad, '?', len)), "%s = %s: the bad row shows no \"?\":\n%s", o->field,
                      o->json, md);
            DRT_CHECK(good && !memchr(good, '?', strcspn(good, "\n")), "%s = %s: the good row shows a \"?\":\n%s",
                      o->field, o->json, md);
            char what[128];
            snprintf(what, sizeof what, "report.md (%s = %s)", o->field, o->json);
            no_bad_numbers(what, strstr(md, "\n## 1. "));
        }
        free(md);
        const char *svgs[2] = {"tokens_per_s-1.svg", "ops-1.svg"};
        for (int k = 0; k < 2; k++) {
            char *s = read_out(dir, svgs[k]);
            char what[128];
            snprintf(what, sizeof what, "%s (%s = %s)", svgs[k], o->field, o->json);
            svg_geometry_ok(what, s);
            if (k == 1 && strstr(o->field, ".ms"))
                DRT_CHECK(s && strstr(s, "(? ms)"), "%s: the bad ms is not shown as ?", what);
            free(s);
        }
    }
}

/* ---- the backends array, read one entry at a time -------------------------------- */

/* report parses a file's backends entries one by one from the text (its
 * tree is ten times the text): strings with brackets and quotes, the array
 * anywhere in the object, a key it cannot skim, and broken JSON inside */
static void skimmed_backends(void) {
#define TOP                                                                                                            \
    "\"schema_version\": 1, \"kind\": \"diffrt-bench\", \"host\": {\"hostname\": \"h\"}, "                             \
    "\"settings\": {\"n_prompt\": 16, \"n_gen\": 4}, \"model\": {\"name\": \"m\", \"architecture\": "                  \
    "\"diff-v2\", \"dtype\": \"f16\", \"params\": 1000, \"layers\": 1, \"dim\": 8}"
#define ERR(dev) "{\"backend\": \"cpu\", \"status\": \"error\", \"error\": \"e\", \"device\": {\"name\": \"" dev "\"}}"
    static const struct {
        const char *json, *must_say; /* must_say NULL: exit 0 with 2 rows */
    } cases[] = {
        {"{" TOP ", \"backends\": [" ERR("a ]}[{ \\\" b") ", " ERR("c") "]}", NULL},
        {"{\"backends\": [" ERR("a") "," ERR("c") "], " TOP "}", NULL},
        {" {\n \"backends\" :\n[ " ERR("a") " ,\n" ERR("c") " ] ,\n" TOP "\n}\n", NULL},
        {"{" TOP ", \"back\\u0065nds\": [" ERR("a") ", " ERR("c") "]}", NULL},
        {"{" TOP ", \"backends\": [" ERR("a") ", {\"backend\": tru}]}", "not valid JSON"},
        {"{" TOP ", \"backends\": [" ERR("a") ", " ERR("c") ",]}", "not valid JSON"},
        {"{" TOP ", \"backends\": [" ERR("a") " x " ERR("c") "]}", "not valid JSON"},
        {"{" TOP ", \"backends\": [" ERR("a") ", " ERR("c") "}", "not valid JSON"},
        {"{" TOP ", \"backends\": [" ERR("a") ", " ERR("c") "], \"x\": }", "not valid JSON"},
        /* one value, as Python's json reads it: nothing after it but blanks */
        {"{" TOP ", \"backends\": [" ERR("a") ", " ERR("c") "]} x", "not valid JSON"},
        {"{\"backends\": [" ERR("a") "," ERR("c") "], " TOP "}\n{\"kind\": 1}\n", "not valid JSON"},
        {"{" TOP ", \"back\\u0065nds\": [" ERR("a") ", " ERR("c") "]}{}", "not valid JSON"},
        {"{" TOP ", \"backends\": [" ERR("a") ", 7]}", "backends[1].backend: missing"},
        {"{" TOP ", \"backends\": {}}", "backends: expected an array"},
        /* a version that is not the one read says which it is */
    };
#undef TOP
#undef ERR
    char J[512], dir[512], args[2048];
    snprintf(J, sizeof J, "%s/report_skim.json", DRT_TMP_DIR);
    snprintf(dir, sizeof dir, "%s/report_skim", DRT_TMP_DIR);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(J, "w");
        if (!f) continue;
        fputs(cases[i].json, f);
        fclose(f);
        snprintf(args, sizeof args, "report '%s' --out '%s'", J, dir);
        int rc = run(args);
        if (cases[i].must_say)
            DRT_CHECK(rc == 2 && strstr(g_out, cases[i].must_say) && strstr(g_out, J),
                      "case %zu: exit %d (want 2), should name the file and say \"%s\":\n%s\n%s", i, rc,
                      cases[i].must_say, g_out, cases[i].json);
        else
            DRT_CHECK(rc == 0 && strstr(g_out, "(2 rows, 1 table)"), "case %zu: exit %d (want 0, 2 rows):\n%s\n%s", i,
                      rc, g_out, cases[i].json);
    }
}

/* A schema_version that is not the one read names itself exactly: %g once
 * printed 1.0000001 as "1", "schema_version 1; this diffrt reads 1". */
static void schema_versions(void) {
    static const struct {
        const char *v, *says;
    } cases[] = {{"1.0000001", "schema_version 1.0000001; this diffrt reads 1"},
                 {"1.5", "schema_version 1.5; this diffrt reads 1"},
                 {"0.9999999999999999", "schema_version 0.9999999999999999;"},
                 {"2", "schema_version 2;"},
                 {"1e0", NULL}};
    char J[512], dir[512], args[2048];
    snprintf(J, sizeof J, "%s/report_sv.json", DRT_TMP_DIR);
    snprintf(dir, sizeof dir, "%s/report_sv", DRT_TMP_DIR);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        FILE *f = fopen(J, "w");
        if (!f) continue;
        fprintf(f,
                "{\"schema_version\": %s, \"kind\": \"diffrt-bench\", \"host\": {\"hostname\": \"h\"}, "
                "\"settings\": {\"n_prompt\": 16, \"n_gen\": 4}, \"model\": {\"name\": \"m\", \"architecture\": "
                "\"diff-v2\", \"dtype\": \"f16\", \"params\": 1000, \"layers\": 1, \"dim\": 8}, \"backends\": "
                "[{\"backend\": \"cpu\", \"status\": \"error\", \"error\": \"e\", \"device\": {\"name\": \"a\"}}]}",
                cases[i].v);
        fclose(f);
        snprintf(args, sizeof args, "report '%s' --out '%s'", J, dir);
        int rc = run(args);
        if (cases[i].says)
            DRT_CHECK(rc == 2 && strstr(g_out, cases[i].says), "schema_version %s: exit %d, should say \"%s\":\n%s",
                      cases[i].v, rc, cases[i].says, g_out);
        else
            DRT_CHECK(rc == 0, "schema_version %s: exit %d:\n%s", cases[i].v, rc, g_out);
    }
}

/* ---- the output set, written whole ------------------------------------------------- */

/* runs `diffrt ARGS` as run() does, under RLIMIT_FSIZE = fsize bytes: a write
 * past it fails with EFBIG when ignore_xfsz, else SIGXFSZ kills diffrt.
 * The exit status, or 128 + the signal. */
static int run_fsize(const char *args, rlim_t fsize, int ignore_xfsz) {
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "exec '%s' %s", DRT_CLI_PATH, args);
    int fd[2];
    if (pipe(fd) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        struct rlimit rl = {fsize, fsize};
        setrlimit(RLIMIT_FSIZE, &rl);
        signal(SIGXFSZ, ignore_xfsz ? SIG_IGN : SIG_DFL);
        dup2(fd[1], 1);
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    size_t k = 0;
    ssize_t r;
    while ((r = read(fd[0], g_out + k, sizeof g_out - 1 - k)) > 0) k += (size_t)r;
    g_out[k] = 0;
    close(fd[0]);
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dir's entries as "name size hash\n" lines, sorted (malloc'd; "" when none) */
static char *dir_listing(const char *dir) {
    char *names[256], path[1024];
    int n = 0;
    DIR *d = opendir(dir);
    struct dirent *e;
    while (d && n < 256 && (e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names[n++] = strdup(e->d_name);
    if (d) closedir(d);
    qsort(names, (size_t)n, sizeof *names, cmp_str);
    char *out = calloc((size_t)n + 1, 320);
    size_t o = 0;
    for (int i = 0; i < n; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        char *s = drt_test_read_file(path);
        uint64_t h = 1469598103934665603ull;
        for (const char *p = s; p && *p; p++) h = (h ^ (unsigned char)*p) * 1099511628211ull;
        o += (size_t)snprintf(out + o, 320, "%.200s %zu %016llx\n", names[i], s ? strlen(s) : 0, (unsigned long long)h);
        free(s);
        free(names[i]);
    }
    return out;
}

/* entries of DRT_TMP_DIR named ".<base>.tmp.*" (what cli_outdir leaves when killed) */
static int temps_beside(const char *base) {
    char pre[256];
    snprintf(pre, sizeof pre, ".%s.tmp.", base);
    int n = 0;
    DIR *d = opendir(DRT_TMP_DIR);
    struct dirent *e;
    while (d && (e = readdir(d))) n += strncmp(e->d_name, pre, strlen(pre)) == 0;
    if (d) closedir(d);
    return n;
}

/* report.md links its charts: the files are one set, replaced whole. A
 * write that fails midway (EFBIG under RLIMIT_FSIZE, after report.md, on
 * the larger SVG) or a kill there leaves the previous set exactly as it was
 * (before: the new report.md with the old charts); a good run replaces the
 * set, dropping a chart of a table the new report lacks; a folder holding
 * other files is refused without --force. */
static void set_written_whole(void) {
    char A1[512], A2[512], B[512], dir[512], scratch[512], args[4096], path[1024];
    snprintf(A1, sizeof A1, "%s/report_whole_A1.json", DRT_TMP_DIR);
    snprintf(A2, sizeof A2, "%s/report_whole_A2.json", DRT_TMP_DIR);
    snprintf(B, sizeof B, "%s/report_whole_B.json", DRT_TMP_DIR);
    snprintf(dir, sizeof dir, "%s/report_whole", DRT_TMP_DIR);
    snprintf(scratch, sizeof scratch, "%s/report_whole_scratch", DRT_TMP_DIR);
    snprintf(args, sizeof args, "rm -rf '%s' '%s' '%s'/.report_whole.tmp.*", dir, scratch, DRT_TMP_DIR);
    DRT_CHECK(system(args) == 0, "cannot clear %s", dir);
    write_bench(A1, "a", 16, 0, 3, 0, NULL, NULL, NULL); /* two tables: pp16, pp32 */
    write_bench(A2, "a", 32, 0, 3, 0, NULL, NULL, NULL);
    write_bench(B, "b", 16, 0, 40, 0, NULL, NULL, NULL); /* one table, larger charts */
    snprintf(args, sizeof args, "report '%s' '%s' --out '%s'", A1, A2, dir);
    int rc = run(args);
    DRT_CHECK(rc == 0, "diffrt %s: exit %d:\n%s", args, rc, g_out);
    char *before = dir_listing(dir);
    DRT_CHECK(count(before, "\n") == 5, "the first report: 5 files expected:\n%s", before);

    /* B's sizes: the limit lets report.md through and stops the larger SVG */
    snprintf(args, sizeof args, "report '%s' --out '%s'", B, scratch);
    rc = run(args);
    size_t md = 0, svg = 0;
    const char *names[] = {"report.md", "tokens_per_s-1.svg", "ops-1.svg"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", scratch, names[i]);
        char *s = drt_test_read_file(path);
        size_t n = s ? strlen(s) : 0;
        if (i == 0)
            md = n;
        else if (n > svg)
            svg = n;
        free(s);
    }
    DRT_CHECK(rc == 0 && md > 0 && svg > md + 1024,
              "test bug: B's report.md (%zu bytes) should be well under its largest SVG (%zu)", md, svg);
    rlim_t limit = (rlim_t)(md + (svg - md) / 2);

    static const struct {
        const char *name;
        int ignore_xfsz; /* 1: the write fails (EFBIG); 0: SIGXFSZ kills diffrt */
    } cases[] = {{"a write fails", 1}, {"killed by SIGXFSZ", 0}};
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        snprintf(args, sizeof args, "report '%s' --out '%s'", B, dir);
        rc = run_fsize(args, limit, cases[i].ignore_xfsz);
        char *after = dir_listing(dir);
        DRT_CHECK(rc != 0 && strcmp(before, after) == 0,
                  "%s (files over %llu bytes): exit %d, the previous set should be "
                  "intact:\nbefore:\n%safter:\n%s%s",
                  cases[i].name, (unsigned long long)limit, rc, before, after, g_out);
        if (cases[i].ignore_xfsz)
            DRT_CHECK(rc == 1 && strstr(g_out, "cannot write") && temps_beside("report_whole") == 0,
                      "%s: exit %d (want 1), a message, no temporary left beside:\n%s", cases[i].name, rc, g_out);
        free(after);
    }
    snprintf(args, sizeof args, "rm -rf '%s'/.report_whole.tmp.*", DRT_TMP_DIR);
    DRT_CHECK(system(args) == 0, "cannot clear the temporaries");

    /* a file that is not the report's: refused (exit 2, nothing changed), then --force */
    snprintf(path, sizeof path, "%s/notes.txt", dir);
    FILE *f = fopen(path, "w");
    if (f) fputs("mine\n", f), fclose(f);
    char *with_notes = dir_listing(dir);
    snprintf(args, sizeof args, "report '%s' --out '%s'", B, dir);
    rc = run(args);
    char *after = dir_listing(dir);
    DRT_CHECK(rc == 2 && strstr(g_out, "holds \"notes.txt\"") && strstr(g_out, "--force") &&
                  strcmp(with_notes, after) == 0,
              "a folder with notes.txt: exit %d (want 2), unchanged:\n%s", rc, g_out);
    free(after);
    snprintf(args, sizeof args, "report '%s' --out '%s' --force", B, dir);
    rc = run(args);
    after = dir_listing(dir);
    DRT_CHECK(rc == 0 && count(after, "\n") == 3 && strstr(after, "report.md ") &&
                  strstr(after, "tokens_per_s-1.svg ") && strstr(after, "ops-1.svg "),
              "--force: exit %d, only B's three files expected:\n%s%s", rc, after, g_out);
    free(after);
    /* a report's own set is replaced without --force: A's two tables back, B's gone */
    snprintf(args, sizeof args, "report '%s' '%s' --out '%s'", A1, A2, dir);
    rc = run(args);
    after = dir_listing(dir);
    DRT_CHECK(rc == 0 && strcmp(before, after) == 0, "back to A: exit %d:\n%s%s", rc, after, g_out);
    free(after);
    /* an input inside --out would be deleted with it: refused, even with --force */
    snprintf(path, sizeof path, "%s/in.json", dir);
    snprintf(args, sizeof args, "cp '%s' '%s'", B, path);
    DRT_CHECK(system(args) == 0, "cannot copy %s", B);
    snprintf(args, sizeof args, "report '%s' --out '%s' --force", path, dir);
    rc = run(args);
    DRT_CHECK(rc == 2 && strstr(g_out, "holds the input"), "an input inside --out: exit %d:\n%s", rc, g_out);
    free(with_notes);
    free(before);
}

int main(void) {
    many_rows();
    hostile_numbers();
    skimmed_backends();
    schema_versions();
    set_written_whole();
    return drt_test_summary("test_report_hostile");
}
