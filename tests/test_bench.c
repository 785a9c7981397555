/* diffrt bench and diffrt report, run as a user runs them:
 *   - bench on ref,cpu (bundled tiny model, -p 16 -n 4 -r 2) writes a JSON
 *     that follows docs/bench-json.md: tok/s samples, peaks, roofline
 *     fractions, a per-op breakdown; the napkin parameter count matches
 *     the checkpoint's;
 *   - no roofline fraction above 1.0 is printed without the flag, in the
 *     table, the JSON or the report (peaks given far too low force them);
 *   - report makes report.md and SVGs that a small XML checker (below)
 *     accepts, also from host and device names full of markup, quotes,
 *     pipes, control characters and bytes that are not UTF-8;
 *   - files that are not bench results, duplicates and bad arguments are
 *     one-line errors (exit 2) naming the file or the argument. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "diffrt/diffrt.h"
#include "drt_test.h"

#define MODEL DRT_MODELS_DIR "/diff-v2-tiny"
#define FLAG "> 1.0: peak under-measured"

static char g_out[1 << 18];

/* runs `diffrt ARGS` with stderr merged; output in g_out */
static int run(const char *args) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", DRT_CLI_PATH, args);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = fread(g_out, 1, sizeof g_out - 1, p);
    g_out[k] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static cJSON *load_json(const char *path) {
    char *s = drt_test_read_file(path);
    cJSON *j = s ? cJSON_Parse(s) : NULL;
    free(s);
    return j;
}

static void save_json(const char *path, const cJSON *j) {
    char *s = cJSON_Print(j);
    FILE *f = fopen(path, "wb");
    if (f && s) fputs(s, f);
    if (f) fclose(f);
    free(s);
}

static const cJSON *at(const cJSON *o, const char *k) {
    return cJSON_GetObjectItemCaseSensitive(o, k);
}

/* ---- a minimal XML well-formedness checker ------------------------------------ */

/* length of the valid UTF-8 sequence at s (tab, LF, CR allowed), 0 if none */
static int xml_char(const unsigned char *s) {
    if (s[0] < 0x20) return s[0] == '\t' || s[0] == '\n' || s[0] == '\r';
    if (s[0] < 0x80) return 1;
    int n = s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : s[0] >= 0xe0 && s[0] < 0xf0 ? 3 : s[0] >= 0xc2 && s[0] < 0xe0 ? 2 : 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    return n;
}

/* '&' at s starts one of the five entities or a character reference; its length, or 0 */
static int entity(const char *s) {
    static const char *ent[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (int i = 0; i < 5; i++)
        if (strncmp(s, ent[i], strlen(ent[i])) == 0) return (int)strlen(ent[i]);
    if (s[1] != '#') return 0;
    int i = 2, hex = s[2] == 'x';
    if (hex) i++;
    int start = i;
    while ((hex ? strchr("0123456789abcdefABCDEF", s[i]) : strchr("0123456789", s[i])) && s[i]) i++;
    return i > start && s[i] == ';' ? i + 1 : 0;
}

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
           c == ':' || c == '.';
}

/* NULL when doc is well-formed XML whose one root element is `root`; else why */
static const char *xml_check(const char *doc, const char *root) {
    static char why[160];
    const char *stack[64];
    size_t lens[64];
    int depth = 0, roots = 0;
    const char *p = doc;
    if (strncmp(p, "<?xml", 5) == 0) {
        p = strstr(p, "?>");
        if (!p) return "unterminated XML declaration";
        p += 2;
    }
    while (*p) {
        if (*p != '<') {
            if (*p == '&') {
                int n = entity(p);
                if (!n) return "a bare & in text";
                p += n;
                continue;
            }
            if (*p == '>') return "a bare > in text"; /* legal XML, but never written by an escaper */
            int n = xml_char((const unsigned char *)p);
            if (!n) return "a byte that is not an XML character";
            if (depth == 0 && !strchr(" \t\r\n", *p)) return "text outside the root element";
            p += n;
            continue;
        }
        if (strncmp(p, "<!--", 4) == 0) {
            p = strstr(p + 4, "-->");
            if (!p) return "unterminated comment";
            p += 3;
            continue;
        }
        if (p[1] == '/') {
            const char *n = p + 2, *e = n;
            while (name_char(*e)) e++;
            if (depth == 0 || (size_t)(e - n) != lens[depth - 1] ||
                strncmp(n, stack[depth - 1], lens[depth - 1]) != 0) {
                snprintf(why, sizeof why, "end tag </%.*s> does not close the open element", (int)(e - n), n);
                return why;
            }
            while (*e == ' ' || *e == '\n') e++;
            if (*e != '>') return "malformed end tag";
            depth--;
            p = e + 1;
            continue;
        }
        const char *n = p + 1, *e = n;
        while (name_char(*e)) e++;
        if (e == n) return "a bare < in text";
        if (depth == 0 && roots++) return "more than one root element";
        if (depth == 0 && ((size_t)(e - n) != strlen(root) || strncmp(n, root, strlen(root)) != 0))
            return "unexpected root element";
        const char *tag = n;
        size_t tl = (size_t)(e - n);
        p = e;
        for (;;) { /* attributes */
            int ws = 0;
            while (*p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++, ws = 1;
            if (*p == '>' || (p[0] == '/' && p[1] == '>')) break;
            if (!ws) return "attributes not separated by white space";
            const char *an = p;
            while (name_char(*p)) p++;
            if (p == an || *p != '=' || (p[1] != '"' && p[1] != '\'')) return "malformed attribute";
            char q = p[1];
            p += 2;
            while (*p && *p != q) {
                if (*p == '<') return "a < in an attribute value";
                if (*p == '&') {
                    int k = entity(p);
                    if (!k) return "a bare & in an attribute value";
                    p += k;
                    continue;
                }
                int k = xml_char((const unsigned char *)p);
                if (!k) return "a byte that is not an XML character in an attribute";
                p += k;
            }
            if (!*p) return "unterminated attribute value";
            p++;
        }
        if (*p == '/') {
            p += 2;
            continue;
        }
        if (depth == 64) return "nested too deep";
        stack[depth] = tag;
        lens[depth++] = tl;
        p++;
    }
    if (depth) return "an element is not closed";
    if (!roots) return "no root element";
    return NULL;
}

static void checker_self_test(void) {
    static const struct {
        const char *doc;
        int ok;
    } cases[] = {
        {"<?xml version=\"1.0\"?>\n<svg a=\"1\"><text x='2'>a &amp; b &#60; "
         "&#x3c;</text><rect/></svg>\n",
         1},
        {"<svg><!-- c --><g><g/></g></svg>", 1},
        {"<svg><g></svg>", 0},
        {"<svg></g></svg>", 0},
        {"<svg>a & b</svg>", 0},
        {"<svg>a < b</svg>", 0},
        {"<svg x=\"<\"/>", 0},
        {"<svg x=\"a\"y=\"b\"/>", 0},
        {"<svg>\x01</svg>", 0},
        {"<svg>\xff</svg>", 0},
        {"<svg/><svg/>", 0},
        {"<html/>", 0},
        {"<svg>", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const char *why = xml_check(cases[i].doc, "svg");
        DRT_CHECK((why == NULL) == cases[i].ok, "xml checker on case %zu: %s (expected %s)", i, why ? why : "accepted",
                  cases[i].ok ? "accepted" : "rejected");
    }
}

static void check_svg(const char *path) {
    char *s = drt_test_read_file(path);
    DRT_CHECK(s != NULL, "%s was not written", path);
    if (!s) return;
    const char *why = xml_check(s, "svg");
    DRT_CHECK(why == NULL, "%s is not well-formed: %s", path, why);
    free(s);
}

/* every "X of Y" roofline figure above 1.0 on a line of text carries the flag */
static int unflagged_fractions(const char *text, int *n_flagged) {
    int bad = 0;
    *n_flagged = 0;
    for (const char *line = text; line && *line;) {
        const char *end = strchr(line, '\n');
        size_t len = end ? (size_t)(end - line) : strlen(line);
        char buf[4096];
        snprintf(buf, sizeof buf, "%.*s", (int)(len < sizeof buf - 1 ? len : sizeof buf - 1), line);
        for (char *o = strstr(buf, " of "); o; o = strstr(o + 4, " of ")) {
            char *num = o;
            while (num > buf && (num[-1] == '.' || (num[-1] >= '0' && num[-1] <= '9'))) num--;
            if (num == o) continue;
            double v = atof(num);
            if (v > 1.0) {
                if (strstr(buf, FLAG))
                    (*n_flagged)++;
                else
                    bad++;
            }
        }
        line = end ? end + 1 : NULL;
    }
    return bad;
}

/* every roofline fraction of a bench JSON: > 1.0 only with the flag */
static void check_json_flags(const cJSON *root, const char *what, int expect_flagged) {
    const cJSON *b;
    int flagged = 0;
    cJSON_ArrayForEach(b, at(root, "backends")) {
        const char *keys[2] = {"decode", "prefill"};
        for (int k = 0; k < 2; k++) {
            const cJSON *r = at(at(b, "roofline"), keys[k]);
            if (!r) continue;
            const cJSON *fr = at(r, "fraction"), *fl = at(r, "flag");
            if (!cJSON_IsNumber(fr)) continue;
            if (fr->valuedouble > 1.0) {
                DRT_CHECK(cJSON_IsString(fl) && strcmp(fl->valuestring, FLAG) == 0,
                          "%s: %s roofline %.3f > 1.0 without the flag", what, keys[k], fr->valuedouble);
                flagged++;
            } else {
                DRT_CHECK(cJSON_IsNull(fl), "%s: %s roofline %.3f flagged", what, keys[k], fr->valuedouble);
            }
        }
    }
    if (expect_flagged) DRT_CHECK(flagged > 0, "%s: peaks given 1e-3 should flag every fraction", what);
}

static void bench_ref_cpu(const char *A) {
    char args[4096];
    snprintf(args, sizeof args, "bench --model %s --backend ref,cpu -p 16 -n 4 -r 2 --json '%s'", MODEL, A);
    int rc = run(args);
    DRT_CHECK(rc == 0, "diffrt %s: exit %d:\n%s", args, rc, g_out);
    DRT_CHECK(strstr(g_out, "pp16") && strstr(g_out, "tg4") && strstr(g_out, "per-op time on cpu"),
              "bench table lacks pp16 / tg4 / per-op:\n%s", g_out);
    DRT_CHECK(strstr(g_out, "bench: ref     peaks") && strstr(g_out, "bench: cpu     tg4 x 2"),
              "no progress lines on stderr:\n%s", g_out);
    int nf;
    DRT_CHECK(unflagged_fractions(g_out, &nf) == 0, "a fraction > 1.0 printed unflagged:\n%s", g_out);

    cJSON *j = load_json(A);
    DRT_CHECK(j != NULL, "%s is not JSON", A);
    if (!j) return;
    DRT_CHECK(cJSON_IsNumber(at(j, "schema_version")) && at(j, "schema_version")->valueint == 1, "schema_version");
    DRT_CHECK(cJSON_IsString(at(j, "kind")) && strcmp(at(j, "kind")->valuestring, "diffrt-bench") == 0, "kind");
    DRT_CHECK(cJSON_IsString(at(at(j, "host"), "hostname")), "host.hostname");
    const cJSON *m = at(j, "model");
    double params = cJSON_GetNumberValue(at(m, "params")), napkin = cJSON_GetNumberValue(at(m, "params_napkin"));
    DRT_CHECK(params > 0 && napkin <= params && napkin > 0.98 * params,
              "napkin parameters %.0f vs the checkpoint's %.0f: the roofline's weight bytes are off", napkin, params);
    DRT_CHECK(strcmp(cJSON_GetStringValue(at(m, "architecture")), "diff-v2") == 0, "model.architecture");
    const cJSON *bs = at(j, "backends");
    DRT_CHECK(cJSON_GetArraySize(bs) == 2, "%d backends in the JSON, expected 2", cJSON_GetArraySize(bs));
    const cJSON *b;
    cJSON_ArrayForEach(b, bs) {
        const char *name = cJSON_GetStringValue(at(b, "backend"));
        DRT_CHECK(strcmp(cJSON_GetStringValue(at(b, "status")), "ok") == 0, "%s: status", name);
        DRT_CHECK(cJSON_IsString(at(at(b, "device"), "name")), "%s: device.name", name);
        const char *tests[2] = {"pp", "tg"};
        for (int t = 0; t < 2; t++) {
            const cJSON *x = at(b, tests[t]);
            DRT_CHECK(cJSON_GetNumberValue(at(x, "mean_tok_s")) > 0 &&
                          cJSON_GetArraySize(at(x, "samples_tok_s")) == 2 &&
                          cJSON_GetNumberValue(at(x, "sd_tok_s")) >= 0,
                      "%s: %s mean/sd/2 samples", name, tests[t]);
        }
        const cJSON *pk = at(b, "peak");
        DRT_CHECK(cJSON_GetNumberValue(at(pk, "gbytes_per_s")) > 0 && cJSON_GetNumberValue(at(pk, "gflops")) > 0 &&
                      strcmp(cJSON_GetStringValue(at(pk, "source")), "measured") == 0,
                  "%s: measured peaks", name);
        DRT_CHECK(cJSON_GetNumberValue(at(at(at(b, "roofline"), "decode"), "bytes_per_token")) > 0,
                  "%s: decode bytes per token", name);
        const char *phase[2] = {"prefill", "decode"};
        for (int k = 0; k < 2; k++) {
            const cJSON *ops = at(at(at(b, "ops"), phase[k]), "ops"), *o;
            double pct = 0;
            int matmul = 0;
            cJSON_ArrayForEach(o, ops) {
                pct += cJSON_GetNumberValue(at(o, "percent"));
                matmul |= strcmp(cJSON_GetStringValue(at(o, "op")), "MATMUL") == 0;
            }
            DRT_CHECK(matmul && pct > 99.9 && pct < 100.1, "%s: %s op breakdown: MATMUL %d, %.2f%% in all", name,
                      phase[k], matmul, pct);
        }
    }
    check_json_flags(j, A, 0);
    cJSON_Delete(j);
}

/* peaks given far too low: every fraction is above 1.0, and flagged everywhere */
static void forced_flags(const char *F, const char *dir) {
    char args[4096];
    snprintf(args, sizeof args,
             "bench --model %s --backend cpu -p 8 -n 2 -r 1 --peak-gbps 0.001 --peak-gflops 0.001 "
             "--json '%s'",
             MODEL, F);
    int rc = run(args), nf;
    DRT_CHECK(rc == 0, "diffrt %s: exit %d:\n%s", args, rc, g_out);
    DRT_CHECK(unflagged_fractions(g_out, &nf) == 0 && nf == 2,
              "table: %d flagged fractions (want 2), or one unflagged:\n%s", nf, g_out);
    DRT_CHECK(!strstr(g_out, "peaks: bandwidth"), "--peak-gbps and --peak-gflops given: nothing to measure:\n%s",
              g_out);
    snprintf(args, sizeof args,
             "bench --model %s --backend cpu -p 8 -n 2 -r 1 --peak-gbps 0.001 --peak-gflops 0.001 --md", MODEL);
    rc = run(args);
    DRT_CHECK(rc == 0 && unflagged_fractions(g_out, &nf) == 0 && nf == 2 && strstr(g_out, "|---|"),
              "--md: exit %d, %d flagged:\n%s", rc, nf, g_out);
    snprintf(args, sizeof args,
             "bench --model %s --backend cpu -p 8 -n 2 -r 1 --peak-gbps 0.001 --peak-gflops 0.001 --csv", MODEL);
    rc = run(args);
    DRT_CHECK(rc == 0 && strstr(g_out, "backend,device,test,") && strstr(g_out, ",pp8,8,1,") &&
                  strstr(g_out, ",tg2,2,1,") && strstr(g_out, FLAG),
              "--csv: exit %d:\n%s", rc, g_out);
    cJSON *j = load_json(F);
    DRT_CHECK(j != NULL, "%s is not JSON", F);
    if (j) check_json_flags(j, F, 1);
    cJSON_Delete(j);
    snprintf(args, sizeof args, "report '%s' --out '%s'", F, dir);
    rc = run(args);
    DRT_CHECK(rc == 0, "diffrt %s: exit %d:\n%s", args, rc, g_out);
    char path[1024];
    snprintf(path, sizeof path, "%s/report.md", dir);
    char *md = drt_test_read_file(path);
    DRT_CHECK(md && unflagged_fractions(md, &nf) == 0 && nf == 2, "report.md: %d flagged (want 2), or unflagged:\n%s",
              nf, md ? md : "(none)");
    free(md);
}

static void report_ok(const char *A, const char *F, const char *dir) {
    char args[4096], path[1024];
    snprintf(args, sizeof args, "report '%s' '%s' --out '%s'", A, F, dir);
    int rc = run(args);
    DRT_CHECK(rc == 0 && strstr(g_out, "report.md"), "diffrt %s: exit %d:\n%s", args, rc, g_out);
    snprintf(path, sizeof path, "%s/report.md", dir);
    char *md = drt_test_read_file(path);
    DRT_CHECK(md && strstr(md, "## 1. diff-v2-tiny") && strstr(md, "## 2. diff-v2-tiny") && strstr(md, "| ref |") &&
                  strstr(md, "| cpu |") && strstr(md, "tokens_per_s-2.svg") && strstr(md, "MATMUL"),
              "report.md lacks its two tables, rows or charts:\n%s", md ? md : "(none)");
    int nf;
    DRT_CHECK(md && unflagged_fractions(md, &nf) == 0, "report.md prints a fraction > 1.0 unflagged:\n%s", md);
    free(md);
    const char *svgs[] = {"tokens_per_s-1.svg", "ops-1.svg", "tokens_per_s-2.svg", "ops-2.svg"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, svgs[i]);
        check_svg(path);
    }
}

/* host and device names that would break markdown and XML unescaped */
static void hostile_names(const char *A, const char *dir) {
    char H[512], args[4096], path[1024];
    snprintf(H, sizeof H, "%s/bench_hostile.json", DRT_TMP_DIR);
    cJSON *j = load_json(A);
    if (!j) return;
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "host"), "hostname",
                              cJSON_CreateString("evil<host>&amp;\"'|*_`\x01"));
    cJSON *dev = (cJSON *)at(cJSON_GetArrayItem(at(j, "backends"), 0), "device");
    cJSON_ReplaceItemInObject(dev, "name", cJSON_CreateString("dev</text><script>x</script>|a|b \xff\xfe ]]> &#1;"));
    cJSON *op = (cJSON *)at(
        cJSON_GetArrayItem(at(at(at(cJSON_GetArrayItem(at(j, "backends"), 1), "ops"), "decode"), "ops"), 0), "op");
    if (op) cJSON_SetValuestring(op, "MAT<MUL>&\"|");
    save_json(H, j);
    cJSON_Delete(j);
    snprintf(args, sizeof args, "report '%s' --out '%s'", H, dir);
    int rc = run(args);
    DRT_CHECK(rc == 0, "diffrt %s: exit %d:\n%s", args, rc, g_out);
    const char *svgs[] = {"tokens_per_s-1.svg", "ops-1.svg"};
    for (int i = 0; i < 2; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, svgs[i]);
        check_svg(path);
        char *s = drt_test_read_file(path);
        DRT_CHECK(s && !strstr(s, "<script"), "%s: markup from a device name went through", path);
        free(s);
    }
    snprintf(path, sizeof path, "%s/report.md", dir);
    char *md = drt_test_read_file(path);
    /* every table row keeps its 9 cells: the | in names are escaped */
    int rows = 0;
    for (char *l = md; l && *l;) {
        char *e = strchr(l, '\n');
        if (strncmp(l, "| evil", 6) == 0) {
            int bars = 0;
            for (char *c = l; c < (e ? e : l + strlen(l)); c++) bars += *c == '|' && (c == l || c[-1] != '\\');
            DRT_CHECK(bars == 10, "report.md row has %d unescaped |, expected 10:\n%.*s", bars,
                      (int)(e ? e - l : (long)strlen(l)), l);
            DRT_CHECK(!memchr(l, '\x01', (size_t)(e ? e - l : (long)strlen(l))) &&
                          !memchr(l, '\xff', (size_t)(e ? e - l : (long)strlen(l))),
                      "a control character or non-UTF-8 byte reached report.md");
            rows++;
        }
        l = e ? e + 1 : NULL;
    }
    DRT_CHECK(rows == 2, "report.md: %d rows of the hostile host, expected 2:\n%s", rows, md ? md : "(none)");
    free(md);
}

/* an unavailable backend is reported (exit 1), the others still run, and report shows its error */
static void unavailable_backend(const char *dir) {
    const char *missing = NULL;
    for (int i = 0; i < drt_backend_count(); i++) {
        drt_backend_info bi;
        if (drt_backend_get_info(i, &bi) == DRT_OK && !bi.available) {
            missing = bi.name;
            break;
        }
    }
    if (!missing) return; /* every backend is here: nothing to check */
    char U[512], args[2048];
    snprintf(U, sizeof U, "%s/bench_unavail.json", DRT_TMP_DIR);
    snprintf(args, sizeof args,
             "bench --model %s --backend cpu,%s -p 4 -n 2 -r 1 --peak-gbps 100 --peak-gflops 100 "
             "--json '%s'",
             MODEL, missing, U);
    int rc = run(args);
    DRT_CHECK(rc == 1 && strstr(g_out, "error:") && strstr(g_out, "tg2"), "diffrt %s: exit %d (want 1):\n%s", args, rc,
              g_out);
    cJSON *j = load_json(U);
    const cJSON *b = cJSON_GetArrayItem(at(j, "backends"), 1);
    DRT_CHECK(b && strcmp(cJSON_GetStringValue(at(b, "status")), "error") == 0 && cJSON_IsString(at(b, "error")),
              "%s: backend %s should be status error", U, missing);
    cJSON_Delete(j);
    snprintf(args, sizeof args, "report '%s' --out '%s'", U, dir);
    rc = run(args);
    DRT_CHECK(rc == 0, "report with an error row: exit %d:\n%s", rc, g_out);
}

static void bad_inputs(const char *A, const char *dir) {
    char V2[512], NOPP[512], TXT[512];
    snprintf(V2, sizeof V2, "%s/bench_v2.json", DRT_TMP_DIR);
    snprintf(NOPP, sizeof NOPP, "%s/bench_nopp.json", DRT_TMP_DIR);
    snprintf(TXT, sizeof TXT, "%s/bench_text.json", DRT_TMP_DIR);
    cJSON *j = load_json(A);
    if (!j) return;
    cJSON_ReplaceItemInObject(j, "schema_version", cJSON_CreateNumber(2));
    save_json(V2, j);
    cJSON_ReplaceItemInObject(j, "schema_version", cJSON_CreateNumber(1));
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(at(j, "backends"), 1), "pp");
    save_json(NOPP, j);
    cJSON_Delete(j);
    FILE *f = fopen(TXT, "w");
    if (f) {
        fputs("{\"schema_version\": 1, \"kind\": \"diffrt-bench\",", f);
        fclose(f);
    }
    struct {
        char args[4096];
        int want_rc;
        const char *must_say;
    } cases[] = {
        {"report --out x", 2, "give one or more"},
        {"", 2, "--out DIR is required"},
        {"", 2, "/nonexistent.json: cannot read"},
        {"", 2, "not a diffrt bench result"},
        {"", 2, "bench_text.json: not valid JSON"},
        {"", 2, "schema_version 2"},
        {"", 2, "backends[1].pp: missing"},
        {"", 2, "also in"},
        {"report --frob", 2, "unknown argument"},
        {"bench --backend cpu", 2, "--model"},
        {"bench --model " MODEL, 2, "--backend"},
        {"bench --model " MODEL " --backend nosuch", 2, "unknown backend"},
        {"bench --model " MODEL " --backend cpu,cpu", 2, "twice"},
        {"bench --model " MODEL " --backend cpu,", 2, "comma-separated"},
        {"bench --model " MODEL " --backend cpu -p x", 2, "-p wants"},
        {"bench --model " MODEL " --backend cpu -r 0", 2, "-r wants"},
        {"bench --model " MODEL " --backend cpu -n", 2, "needs a value"},
        {"bench --model " MODEL " --backend cpu -p 0 -n 0", 2, "nothing to measure"},
        {"bench --model " MODEL " --backend cpu --device vulkan=0", 2, "not in --backend"},
        {"bench --model " MODEL " --backend cpu --device 0", 2, "BACKEND=SEL"},
        {"bench --model " MODEL " --backend cpu --csv --md", 2, "one of --csv"},
        {"bench --model " MODEL " --backend cpu -d -1", 2, "--depth wants"},
        {"bench --model " MODEL " --backend cpu -d 4 --parallel 2", 2, "not to --parallel"},
        {"bench --model " MODEL " --backend cpu --peak-gbps -3", 2, "--peak-gbps wants"},
        {"bench --model " MODEL " --backend cpu --frob", 2, "unknown argument"},
        {"bench --model /nonexistent --backend cpu", 1, "/nonexistent/config.json"},
        {"bench --help", 0, "--peak-gbps"},
        {"report --help", 0, "--out DIR"},
        {"--help", 0, "\n  bench "},
    };
    snprintf(cases[1].args, sizeof cases[1].args, "report '%s'", A);
    snprintf(cases[2].args, sizeof cases[2].args, "report /nonexistent.json --out '%s'", dir);
    snprintf(cases[3].args, sizeof cases[3].args, "report '%s' '%s/hf_llama_gqa/config.json' --out '%s'", A,
             DRT_FIXTURES_DIR, dir);
    snprintf(cases[4].args, sizeof cases[4].args, "report '%s' --out '%s'", TXT, dir);
    snprintf(cases[5].args, sizeof cases[5].args, "report '%s' --out '%s'", V2, dir);
    snprintf(cases[6].args, sizeof cases[6].args, "report '%s' --out '%s'", NOPP, dir);
    snprintf(cases[7].args, sizeof cases[7].args, "report '%s' '%s' --out '%s'", A, A, dir);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int rc = run(cases[i].args);
        DRT_CHECK(rc == cases[i].want_rc && strstr(g_out, cases[i].must_say),
                  "diffrt %s: exit %d (expected %d), output should say \"%s\":\n%s", cases[i].args, rc,
                  cases[i].want_rc, cases[i].must_say, g_out);
        if (cases[i].want_rc == 2)
            DRT_CHECK(strchr(g_out, '\n') == g_out + strlen(g_out) - 1, "diffrt %s: more than one line:\n%s",
                      cases[i].args, g_out);
    }
}

/* --parallel: the table's section, the JSON's "parallel" array (tg per
 * sequence = tg / N), report.md's table of it, and bad counts refused */
static void parallel(const char *P, const char *dir) {
    char args[4096];
    snprintf(args, sizeof args, "bench --model %s --backend cpu -p 8 -n 4 -r 1 --parallel 1,3 --json '%s'", MODEL, P);
    int rc = run(args);
    DRT_CHECK(rc == 0, "diffrt %s: exit %d:\n%s", args, rc, g_out);
    DRT_CHECK(strstr(g_out, "parallel sequences (pp8, tg4 each)") && strstr(g_out, "bench: cpu     parallel 3"),
              "no parallel section or progress:\n%s", g_out);
    cJSON *j = load_json(P);
    DRT_CHECK(j != NULL, "%s is not JSON", P);
    if (!j) return;
    const cJSON *par = at(cJSON_GetArrayItem(at(j, "backends"), 0), "parallel");
    DRT_CHECK(cJSON_GetArraySize(par) == 2, "%d parallel entries, expected 2", cJSON_GetArraySize(par));
    for (int k = 0; k < 2 && cJSON_GetArraySize(par) == 2; k++) {
        const cJSON *x = cJSON_GetArrayItem(par, k);
        int n = (int)cJSON_GetNumberValue(at(x, "n_seq"));
        double tg = cJSON_GetNumberValue(at(at(x, "tg"), "mean_tok_s")),
               one = cJSON_GetNumberValue(at(x, "tg_per_seq_tok_s"));
        DRT_CHECK(n == (k ? 3 : 1) && tg > 0 && fabs(one * n - tg) <= 1e-9 * tg,
                  "entry %d: n_seq %d, tg %g, per seq %g", k, n, tg, one);
        DRT_CHECK(cJSON_GetNumberValue(at(at(x, "pp"), "n_tokens")) == 8 * n, "entry %d: pp n_tokens", k);
    }
    cJSON_Delete(j);
    snprintf(args, sizeof args, "report '%s' --out '%s' --force", P, dir);
    rc = run(args);
    DRT_CHECK(rc == 0, "diffrt %s: exit %d:\n%s", args, rc, g_out);
    char md[600];
    snprintf(md, sizeof md, "%s/report.md", dir);
    char *doc = drt_test_read_file(md);
    DRT_CHECK(doc && strstr(doc, "Parallel sequences") && strstr(doc, " | 3 |"), "report.md has no parallel table:\n%s",
              doc ? doc : "(none)");
    free(doc);
    static const char *bad[] = {"0", "4097", "1,x", "1,,2", "1,2,3,4,5,6,7,8,9"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(args, sizeof args, "bench --model %s --backend cpu --parallel '%s'", MODEL, bad[i]);
        rc = run(args);
        DRT_CHECK(rc == 2 && strstr(g_out, "bench: --parallel"), "--parallel %s: exit %d:\n%s", bad[i], rc, g_out);
    }
}

/* --depth: the tests' names and the per-op decode position carry it, the
 * JSON's settings and decode mean position too; a depth past the model's
 * positions warns and still runs */
static void depth(const char *D) {
    char args[4096];
    snprintf(args, sizeof args,
             "bench --model %s --backend cpu -p 4 -n 3 -d 700 -r 1 --peak-gbps 1 --peak-gflops 1 --json '%s'", MODEL,
             D);
    int rc = run(args);
    DRT_CHECK(rc == 0, "diffrt %s: exit %d:\n%s", args, rc, g_out);
    DRT_CHECK(strstr(g_out, "pp4 @ d700") && strstr(g_out, "tg3 @ d700") &&
                  strstr(g_out, "decode step at position 704") && strstr(g_out, "max_position_embeddings"),
              "bench -d 700: no \"pp4 @ d700\", \"tg3 @ d700\", decode position 704 or the positions warning:\n%s",
              g_out);
    cJSON *j = load_json(D);
    DRT_CHECK(j != NULL, "%s is not JSON", D);
    if (!j) return;
    DRT_CHECK(cJSON_GetNumberValue(at(at(j, "settings"), "n_depth")) == 700, "settings.n_depth");
    const cJSON *b = cJSON_GetArrayItem(at(j, "backends"), 0);
    DRT_CHECK(cJSON_GetNumberValue(at(at(at(b, "roofline"), "decode"), "mean_position")) == 701,
              "roofline.decode.mean_position is not depth + (n - 1) / 2");
    DRT_CHECK(cJSON_GetNumberValue(at(b, "kv_cache_bytes")) > 0, "kv_cache_bytes");
    cJSON_Delete(j);
}

int main(void) {
    char A[512], F[512], dir[512], dir2[512], dir3[512], dir4[512];
    snprintf(A, sizeof A, "%s/bench_A.json", DRT_TMP_DIR);
    snprintf(F, sizeof F, "%s/bench_flagged.json", DRT_TMP_DIR);
    snprintf(dir, sizeof dir, "%s/bench_report", DRT_TMP_DIR);
    snprintf(dir2, sizeof dir2, "%s/bench_report_flagged", DRT_TMP_DIR);
    snprintf(dir3, sizeof dir3, "%s/bench_report_hostile", DRT_TMP_DIR);
    snprintf(dir4, sizeof dir4, "%s/bench_report_errors", DRT_TMP_DIR);
    checker_self_test();
    bench_ref_cpu(A);
    forced_flags(F, dir2);
    report_ok(A, F, dir);
    hostile_names(A, dir3);
    unavailable_backend(dir4);
    bad_inputs(A, dir4);
    char P[512], dir5[512];
    snprintf(P, sizeof P, "%s/bench_parallel.json", DRT_TMP_DIR);
    snprintf(dir5, sizeof dir5, "%s/bench_report_parallel", DRT_TMP_DIR);
    parallel(P, dir5);
    char D[512];
    snprintf(D, sizeof D, "%s/bench_depth.json", DRT_TMP_DIR);
    depth(D);
    return drt_test_summary("test_bench");
}
