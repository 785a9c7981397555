/* conform's reports, as CI reads them:
 *   - `conform --list` counted on stdout alone (a line on stderr, as a
 *     driver may write, is no case);
 *   - `diffrt conform --junit F --json G` on two ops and one model (in a
 *     directory whose name needs XML escaping): F is well-formed XML with one
 *     testsuite per backend and one testcase per (case, backend) and per
 *     (model, backend), the count --list and the registry predict; G is one
 *     object of schema_version 1 whose cases, statuses and summary agree;
 *   - a backend that leaves a NaN in ADD's output and refuses ROPE, run
 *     in-process: the NaN is "fail" with nmse null and nonfinite true (never
 *     a string), ROPE is "unsupported" (a JUnit <skipped>), and once the
 *     backend is required ROPE fails and summary.required_missing names it;
 *   - --quick: the batch cases run on one model of each architecture, its
 *     first with f32 weights, else its first; batch_skipped names exactly
 *     the others, and the text report says so;
 *   - model folders with an ESC sequence, invalid UTF-8, a C1 control or a
 *     bidirectional override in their names are shown escaped in the text
 *     output (table, failures, skipped folders). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <cjson/cJSON.h>

#include "drt_conform.h"
#include "drt_graph.h"
#include "drt_test.h"

static int run(const char *cmd, char *out, size_t n) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* ---- a small XML well-formedness check ---------------------------------------------------- */

typedef struct {
    int testsuites, testsuite, testcase, failure, skipped, error;
    int sum_tests, sum_failures, sum_skipped; /* over the testsuite elements' attributes */
    char err[300];
} xml_stats;

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.' || c == ':';
}

/* an entity or character reference at p ('&'); its length, 0 when invalid */
static size_t entity(const char *p) {
    static const char *const E[] = {"&amp;", "&lt;", "&gt;", "&quot;", "&apos;"};
    for (int i = 0; i < 5; i++)
        if (strncmp(p, E[i], strlen(E[i])) == 0) return strlen(E[i]);
    if (p[1] != '#') return 0;
    size_t k = 2;
    int hex = p[2] == 'x';
    if (hex) k++;
    size_t d = k;
    while ((hex ? strchr("0123456789abcdefABCDEF", p[k]) : strchr("0123456789", p[k])) && p[k]) k++;
    return k > d && p[k] == ';' ? k + 1 : 0;
}

/* character data up to '<': no raw '&', no control characters but \t \n \r */
static int text_ok(const char **pp, char stop, xml_stats *s) {
    const char *p = *pp;
    while (*p && *p != stop && *p != '<') {
        if (*p == '&') {
            size_t n = entity(p);
            if (!n) return snprintf(s->err, sizeof s->err, "bad entity at \"%.20s\"", p), 0;
            p += n;
            continue;
        }
        if ((unsigned char)*p < 0x20 && *p != '\t' && *p != '\n' && *p != '\r')
            return snprintf(s->err, sizeof s->err, "control character 0x%02x", *p), 0;
        p++;
    }
    *pp = p;
    return 1;
}

static int xml_check(const char *doc, xml_stats *s) {
    memset(s, 0, sizeof *s);
    const char *p = doc;
    if (strncmp(p, "<?xml ", 6) != 0) return snprintf(s->err, sizeof s->err, "no XML declaration"), 0;
    p = strstr(p, "?>");
    if (!p) return snprintf(s->err, sizeof s->err, "unterminated declaration"), 0;
    p += 2;
    char stack[16][32];
    int depth = 0, roots = 0;
    for (;;) {
        if (!text_ok(&p, 0, s)) return 0;
        if (!*p) break;
        p++; /* '<' */
        int closing = *p == '/';
        if (closing) p++;
        char name[32];
        size_t n = 0;
        while (name_char(*p) && n + 1 < sizeof name) name[n++] = *p++;
        name[n] = 0;
        if (!n) return snprintf(s->err, sizeof s->err, "bad tag at \"%.20s\"", p - 1), 0;
        if (closing) {
            if (!depth || strcmp(stack[depth - 1], name) != 0)
                return snprintf(s->err, sizeof s->err, "</%s> closes %s", name, depth ? stack[depth - 1] : "nothing"),
                       0;
            depth--;
            while (*p == ' ') p++;
            if (*p++ != '>') return snprintf(s->err, sizeof s->err, "bad </%s>", name), 0;
            continue;
        }
        if (!depth && roots++) return snprintf(s->err, sizeof s->err, "a second root <%s>", name), 0;
        int tests = 0, failures = 0, skipped = 0;
        char seen[16][32];
        int n_seen = 0;
        for (;;) { /* attributes */
            int sp = 0;
            while (*p == ' ' || *p == '\n' || *p == '\t') p++, sp = 1;
            if (*p == '>' || (p[0] == '/' && p[1] == '>')) break;
            if (!sp) return snprintf(s->err, sizeof s->err, "<%s>: no space before an attribute", name), 0;
            char an[32];
            size_t k = 0;
            while (name_char(*p) && k + 1 < sizeof an) an[k++] = *p++;
            an[k] = 0;
            if (!k || *p++ != '=' || *p++ != '"')
                return snprintf(s->err, sizeof s->err, "<%s>: bad attribute at \"%.20s\"", name, p), 0;
            for (int i = 0; i < n_seen; i++)
                if (strcmp(seen[i], an) == 0) return snprintf(s->err, sizeof s->err, "<%s>: %s twice", name, an), 0;
            if (n_seen < 16) snprintf(seen[n_seen++], sizeof seen[0], "%s", an);
            const char *v = p;
            if (!text_ok(&p, '"', s)) return 0;
            if (*p != '"') return snprintf(s->err, sizeof s->err, "<%s %s>: '<' in a value", name, an), 0;
            if (strcmp(an, "tests") == 0) tests = atoi(v);
            if (strcmp(an, "failures") == 0) failures = atoi(v);
            if (strcmp(an, "skipped") == 0) skipped = atoi(v);
            p++;
        }
        if (strcmp(name, "testsuites") == 0) s->testsuites++;
        if (strcmp(name, "testsuite") == 0) {
            s->testsuite++;
            s->sum_tests += tests;
            s->sum_failures += failures;
            s->sum_skipped += skipped;
        }
        if (strcmp(name, "testcase") == 0) s->testcase++;
        if (strcmp(name, "failure") == 0) s->failure++;
        if (strcmp(name, "skipped") == 0) s->skipped++;
        if (strcmp(name, "error") == 0) s->error++;
        if (*p == '/') {
            p += 2;
            continue;
        }
        p++;
        if (depth == 16) return snprintf(s->err, sizeof s->err, "nested too deep"), 0;
        snprintf(stack[depth++], sizeof stack[0], "%s", name);
    }
    if (depth) return snprintf(s->err, sizeof s->err, "<%s> not closed", stack[depth - 1]), 0;
    if (!roots) return snprintf(s->err, sizeof s->err, "no root element"), 0;
    return 1;
}

/* the XML check must itself fail on what it is meant to catch */
static void xml_check_catches(void) {
    static const struct {
        const char *doc;
        int ok;
    } T[] = {
        {"<?xml version=\"1.0\"?>\n<a x=\"1\"><b/>t &amp; &#10;</a>\n", 1},
        {"<?xml version=\"1.0\"?>\n<a><b></a></b>", 0},
        {"<?xml version=\"1.0\"?>\n<a x=\"<\"/>", 0},
        {"<?xml version=\"1.0\"?>\n<a>R&D</a>", 0},
        {"<?xml version=\"1.0\"?>\n<a x=\"1\" x=\"2\"/>", 0},
        {"<?xml version=\"1.0\"?>\n<a/><b/>", 0},
        {"<?xml version=\"1.0\"?>\n<a>\x01</a>", 0},
        {"<a/>", 0},
    };
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++) {
        xml_stats s;
        DRT_CHECK(xml_check(T[i].doc, &s) == T[i].ok, "xml_check(%s) != %d (%s)", T[i].doc, T[i].ok, s.err);
    }
}

/* ---- the CLI's reports ---------------------------------------------------------------- */

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static const char *const STATUSES[] = {"pass", "fail", "unsupported", "unavailable"};

static int status_index(const char *s) {
    for (int i = 0; i < 4; i++)
        if (s && strcmp(s, STATUSES[i]) == 0) return i;
    return -1;
}

/* the JSON object's cases agree with its summary; nmse is a number or null */
static void check_json(cJSON *root, int want_cases, const char *what) {
    DRT_CHECK(cJSON_IsObject(root), "%s: not one JSON object", what);
    cJSON *v = cJSON_GetObjectItem(root, "schema_version");
    DRT_CHECK(cJSON_IsNumber(v) && v->valuedouble == 1, "%s: schema_version is not 1", what);
    cJSON *d = cJSON_GetObjectItem(root, "diffrt");
    DRT_CHECK(cJSON_IsString(cJSON_GetObjectItem(d, "version")) && cJSON_IsString(cJSON_GetObjectItem(d, "commit")),
              "%s: no diffrt version/commit", what);
    cJSON *h = cJSON_GetObjectItem(root, "host");
    DRT_CHECK(cJSON_GetObjectItem(h, "hostname") && cJSON_GetObjectItem(h, "os") &&
                  cJSON_GetObjectItem(h, "cpu_model") && cJSON_IsNumber(cJSON_GetObjectItem(h, "cores")),
              "%s: host incomplete", what);
    cJSON *cases = cJSON_GetObjectItem(root, "cases"), *c;
    DRT_CHECK(cJSON_GetArraySize(cases) == want_cases, "%s: %d cases, expected %d", what, cJSON_GetArraySize(cases),
              want_cases);
    int counts[4] = {0};
    cJSON_ArrayForEach(c, cases) {
        const char *st = cJSON_GetStringValue(cJSON_GetObjectItem(c, "status"));
        int si = status_index(st);
        DRT_CHECK(si >= 0, "%s: status \"%s\" is not in the vocabulary", what, st ? st : "(none)");
        if (si >= 0) counts[si]++;
        cJSON *nm = cJSON_GetObjectItem(c, "nmse"), *nf = cJSON_GetObjectItem(c, "nonfinite");
        DRT_CHECK(cJSON_IsNumber(nm) || cJSON_IsNull(nm), "%s: nmse neither a number nor null", what);
        DRT_CHECK(cJSON_IsBool(nf), "%s: no nonfinite flag", what);
        if (si == 0) DRT_CHECK(cJSON_IsNumber(nm), "%s: a pass without an nmse", what);
    }
    cJSON *sm = cJSON_GetObjectItem(root, "summary");
    for (int i = 0; i < 4; i++) {
        cJSON *n = cJSON_GetObjectItem(sm, STATUSES[i]);
        DRT_CHECK(cJSON_IsNumber(n) && n->valueint == counts[i], "%s: summary.%s %d, cases say %d", what, STATUSES[i],
                  n ? n->valueint : -1, counts[i]);
    }
    DRT_CHECK(cJSON_IsArray(cJSON_GetObjectItem(sm, "required_missing")), "%s: no summary.required_missing", what);
    int nb = cJSON_GetArraySize(cJSON_GetObjectItem(root, "backends"));
    DRT_CHECK(cJSON_GetArraySize(cJSON_GetObjectItem(sm, "by_backend")) == nb, "%s: by_backend has not %d backends",
              what, nb);
}

static void cli_reports(void) {
    const char *ops = "RMSNORM,EMBED";
    char cmd[4096], out[1 << 16], dir[1024], xml[1100], json[1100];
    /* a model directory whose name must be escaped in XML */
    snprintf(dir, sizeof dir, "%s/report_model/a&b<c>\"d'", DRT_TMP_DIR);
    snprintf(cmd, sizeof cmd,
             "rm -rf '%s/report_model' && mkdir -p '%s/report_model' && cp -r '%s/hf_llama_gqa' "
             "'%s/report_model/' && mv '%s/report_model/hf_llama_gqa' '%s/report_model/a&b<c>\"d'\\''' ",
             DRT_TMP_DIR, DRT_TMP_DIR, DRT_FIXTURES_DIR, DRT_TMP_DIR, DRT_TMP_DIR, DRT_TMP_DIR);
    DRT_CHECK(system(cmd) == 0, "cannot make %s", dir);
    snprintf(xml, sizeof xml, "%s/report.xml", DRT_TMP_DIR);
    snprintf(json, sizeof json, "%s/report.json", DRT_TMP_DIR);

    /* The cases are counted on stdout alone: a driver may write to stderr
     * (PoCL and lavapipe do on a first run), which must not count as a case.
     * A line on stderr stands in for such a message. */
    char list_err[1024];
    snprintf(list_err, sizeof list_err, "%s/conform_list.stderr", DRT_TMP_DIR);
    snprintf(cmd, sizeof cmd, "{ echo 'a driver: first-run message' >&2; '%s' conform --list --op %s; } 2>'%s'",
             DRT_CLI_PATH, ops, list_err);
    if (run(cmd, out, sizeof out) != 0) {
        char *err = drt_test_read_file(list_err);
        DRT_CHECK(0, "conform --list failed:\n%s%s", out, err ? err : "");
        free(err);
    }
    int n_cases = count_lines(out), n_be = drt_backend_count();
    DRT_CHECK(n_cases >= 7, "conform --list --op %s lists %d cases", ops, n_cases);

    /* the model folder holds one model: --models takes a folder of models */
    snprintf(cmd, sizeof cmd, "'%s' conform --op %s --models '%s/report_model' --junit '%s' --json '%s' 2>&1",
             DRT_CLI_PATH, ops, DRT_TMP_DIR, xml, json);
    int rc = run(cmd, out, sizeof out);
    DRT_CHECK(rc == 0, "conform exited %d:\n%s", rc, out);
    char *doc = drt_test_read_file(xml);
    xml_stats s = {0};
    DRT_CHECK(doc && xml_check(doc, &s), "%s is not well-formed: %s", xml, s.err);
    /* the op cases, the model, and its 4 batch_* cases (conform/batch.c) */
    int want = (n_cases + 1 + 4) * n_be;
    printf("junit: %d testsuites, %d testcases (%d cases + 1 model + 4 batch cases) x %d backends, %d failures, %d "
           "skipped\n",
           s.testsuite, s.testcase, n_cases, n_be, s.failure, s.skipped);
    DRT_CHECK(s.testsuites == 1 && s.testsuite == n_be, "%d testsuites, expected %d", s.testsuite, n_be);
    DRT_CHECK(s.testcase == want, "%d testcases, expected %d", s.testcase, want);
    DRT_CHECK(s.sum_tests == want && s.sum_failures == s.failure && s.sum_skipped == s.skipped,
              "testsuite attributes say %d tests, %d failures, %d skipped; elements: %d, %d, %d", s.sum_tests,
              s.sum_failures, s.sum_skipped, s.testcase, s.failure, s.skipped);
    DRT_CHECK(s.failure == 0, "%d failures on a passing run", s.failure);
    DRT_CHECK(doc && strstr(doc, "a&amp;b&lt;c&gt;&quot;d&apos;"), "the model name is not escaped in %s", xml);
    free(doc);
    char *js = drt_test_read_file(json);
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    free(js);
    check_json(root, want, json);
    cJSON_Delete(root);

    /* exit statuses: a typo is a usage error, never a silent pass */
    static const struct {
        const char *args;
        int rc;
        const char *must_say;
    } E[] = {
        {"--op FOO", 2, "unknown op \"FOO\" (valid: EMBED, RMSNORM,"},
        {"--backend foo", 2, "unknown backend \"foo\" (valid: cpu, ref, opencl, vulkan, cuda"},
        {"--require cpu,vulkn", 2, "unknown --require backend \"vulkn\""},
        {"--device nosuch=0", 2, "unknown backend \"nosuch\""},
        {"--device cpu=no-such-device", 2, "devices: [0] host CPU"},
        {"--device cpu=7", 2, "no such cpu device"},
        {"--device ref=0", 2, "ref"},
        {"--device cpu", 2, "BACKEND=SEL"},
        {"--backend cpu --require ref", 2, "does not select"},
        {"--models " DRT_FIXTURES_DIR "/../util", 2, "no model directory"},
        {"--models /nonexistent", 2, "not a folder"},
        {"--op ADD --junit /nonexistent/x.xml", 2, "/nonexistent/x.xml: cannot write"},
        {"--perf --junit x.xml", 2, "--junit"},
        {"--op ADD --backend cpu --device cpu=0 --require cpu", 0, "0 failed"},
        {"--op ADD --backend cpu --device CPU=HOST", 0, "0 failed"},
    };
    for (size_t i = 0; i < sizeof E / sizeof E[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s' conform %s 2>&1", DRT_CLI_PATH, E[i].args);
        rc = run(cmd, out, sizeof out);
        DRT_CHECK(rc == E[i].rc && strstr(out, E[i].must_say),
                  "diffrt conform %s: exit %d (expected %d), output should say \"%s\":\n%s", E[i].args, rc, E[i].rc,
                  E[i].must_say, out);
    }
}

/* ---- a broken backend, in-process ------------------------------------------------------ */

static const drt_backend_ops *ref(void) {
    return drt_registry_find("ref");
}
static drt_status b_probe(int *n, char *why, size_t wn) {
    return ref()->probe(n, why, wn);
}
static drt_status b_name(int d, char *b, size_t n) {
    return ref()->device_name(d, b, n);
}
static drt_status b_init(drt_backend *be, int dev) {
    return ref()->init(be, dev);
}
static drt_status b_alloc(drt_backend *be, size_t s, drt_buffer *o) {
    return ref()->buf_alloc(be, s, o);
}
static void b_free(drt_backend *be, drt_buffer *b) {
    ref()->buf_free(be, b);
}
static drt_status b_up(drt_backend *be, drt_buffer *b, size_t off, const void *s, size_t n) {
    return ref()->upload(be, b, off, s, n);
}
static drt_status b_down(drt_backend *be, const drt_buffer *b, size_t off, void *d, size_t n) {
    return ref()->download(be, b, off, d, n);
}
static bool b_supports(drt_backend *be, const drt_tensor *t) {
    return t->op != DRT_OP_ROPE;
}
static drt_status b_sync(drt_backend *be) {
    return DRT_OK;
}

/* the reference, then a NaN in the last element of ADD's output */
static drt_status b_compute(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex) {
    drt_status s = ref()->compute(be, nodes, n, ex);
    for (int i = 0; s == DRT_OK && i < n; i++)
        if (nodes[i]->op == DRT_OP_ADD) ((float *)drt_host_ptr(nodes[i]))[drt_nelem(nodes[i]) - 1] = NAN;
    return s;
}

static const drt_backend_ops BROKEN = {.name = "nan-add",
                                       .probe = b_probe,
                                       .device_name = b_name,
                                       .init = b_init,
                                       .buf_alloc = b_alloc,
                                       .buf_free = b_free,
                                       .upload = b_up,
                                       .download = b_down,
                                       .supports = b_supports,
                                       .compute = b_compute,
                                       .synchronize = b_sync};

static void broken_backend(int required) {
    char xml[1100], json[1100];
    snprintf(xml, sizeof xml, "%s/report_broken.xml", DRT_TMP_DIR);
    snprintf(json, sizeof json, "%s/report_broken.json", DRT_TMP_DIR);
    drt_conform_opts o = {.backends = "ref,nan-add",
                          .ops = "ADD,ROPE",
                          .require = required ? "nan-add" : NULL,
                          .json_path = json,
                          .junit_path = xml};
    drt_conform_result r;
    DRT_CHECK(drt_conform_run(&o, &r) == DRT_OK, "conform: %s", drt_last_error());
    int n_add = 0, n_rope = 0;
    char *js = drt_test_read_file(json);
    cJSON *root = js ? cJSON_Parse(js) : NULL, *c;
    free(js);
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const char *op = cJSON_GetStringValue(cJSON_GetObjectItem(c, "op"));
        if (op && strcmp(op, "ADD") == 0) n_add++;
        if (op && strcmp(op, "ROPE") == 0) n_rope++;
    }
    DRT_CHECK(n_add >= 4 && n_rope >= 4, "%d ADD and %d ROPE cases over 2 backends", n_add, n_rope);
    check_json(root, n_add + n_rope, json);
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const char *op = cJSON_GetStringValue(cJSON_GetObjectItem(c, "op"));
        const char *be = cJSON_GetStringValue(cJSON_GetObjectItem(c, "backend"));
        const char *st = cJSON_GetStringValue(cJSON_GetObjectItem(c, "status"));
        if (!op || !be || !st || strcmp(be, "nan-add") != 0) continue;
        if (strcmp(op, "ADD") == 0)
            DRT_CHECK(strcmp(st, "fail") == 0 && cJSON_IsNull(cJSON_GetObjectItem(c, "nmse")) &&
                          cJSON_IsTrue(cJSON_GetObjectItem(c, "nonfinite")),
                      "ADD with a NaN: status %s, nmse not null or nonfinite not true", st);
        else
            DRT_CHECK(strcmp(st, required ? "fail" : "unsupported") == 0, "ROPE refused: status %s (required %d)", st,
                      required);
    }
    cJSON *miss = cJSON_GetObjectItem(cJSON_GetObjectItem(root, "summary"), "required_missing");
    const char *why = cJSON_GetStringValue(cJSON_GetObjectItem(cJSON_GetArrayItem(miss, 0), "reason"));
    DRT_CHECK(required ? cJSON_GetArraySize(miss) == 1 && why && strstr(why, "ROPE") : cJSON_GetArraySize(miss) == 0,
              "required_missing (required %d): %d entries, %s", required, cJSON_GetArraySize(miss), why ? why : "-");
    cJSON_Delete(root);
    char *doc = drt_test_read_file(xml);
    xml_stats s = {0};
    DRT_CHECK(doc && xml_check(doc, &s), "%s is not well-formed: %s", xml, s.err);
    int n_add_be = n_add / 2, n_rope_be = n_rope / 2;
    DRT_CHECK(s.testcase == n_add + n_rope, "%d testcases, expected %d", s.testcase, n_add + n_rope);
    DRT_CHECK(s.failure == n_add_be + (required ? n_rope_be : 0) && s.skipped == (required ? 0 : n_rope_be),
              "required %d: %d failures, %d skipped; expected %d and %d", required, s.failure, s.skipped,
              n_add_be + (required ? n_rope_be : 0), required ? 0 : n_rope_be);
    DRT_CHECK(doc && strstr(doc, "type=\"nonfinite\"") && strstr(doc, "seed="), "no named nonfinite failure");
    free(doc);
}

/* ---- folder names on the terminal ---------------------------------------------------------- */

/* Offset of the first byte of s that could act on a terminal (a C0 control
 * but newline, DEL, a C1 control U+0080..U+009F, a bidirectional override,
 * a byte that is not UTF-8), or -1. */
static long raw_control_at(const char *s) {
    const unsigned char *u = (const unsigned char *)s;
    for (size_t i = 0; u[i];) {
        unsigned c = u[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if ((c < 0x20 && c != '\n') || c == 0x7f || len == 0 || (c == 0xc2 && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f) ||
            (c == 0xe2 && u[i + 1] == 0x80 && u[i + 2] >= 0xaa && u[i + 2] <= 0xae))
            return (long)i;
        for (size_t j = 1; j < len; j++)
            if ((u[i + j] & 0xc0) != 0x80) return (long)i;
        i += len;
    }
    return -1;
}

/* Model folders named with an ESC sequence, a byte that is not UTF-8, a C1
 * CSI and a bidirectional override, as a model that runs, one that does not
 * load and a folder that is no model: conform's text output (the table, the
 * failures, the skipped folders) shows each name escaped as the messages
 * escape file strings (drt_printable), never raw. */
static void hostile_folder_names(void) {
    static const struct {
        const char *raw, *shown;
    } names[] = {
        {"esc\x1b[2Jx", "esc\\x1b[2Jx"},
        {"bad\xff\xfeutf8", "bad\\xff\\xfeutf8"},
        {"c1\xc2\x9bx", "c1\\u009bx"},
        {"bidi\xe2\x80\xaex", "bidi\\u202ex"},
    };
    static const char *kinds[] = {"ok-", "broken-", "nomodel-"};
    char root[1024], dir[1200], cmd[4096], out[1 << 16];
    snprintf(root, sizeof root, "%s/conform_names", DRT_TMP_DIR);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir '%s'", root, root);
    DRT_CHECK(system(cmd) == 0, "cannot make %s", root);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        for (int k = 0; k < 3; k++) {
            snprintf(dir, sizeof dir, "%s/%s%s", root, kinds[k], names[i].raw);
            if (k < 2)
                snprintf(cmd, sizeof cmd, "cp -r '%s/hf_llama_gqa' '%s'", DRT_FIXTURES_DIR, dir);
            else
                snprintf(cmd, sizeof cmd, "mkdir '%s'", dir);
            DRT_CHECK(system(cmd) == 0, "cannot make %s", dir);
            if (k == 1) { /* loads no further than its config */
                snprintf(cmd, sizeof cmd, "%s/config.json", dir);
                FILE *f = fopen(cmd, "w");
                if (f) fputs("{\"model_type\": \"llama\"}\n", f), fclose(f);
            }
        }
    snprintf(cmd, sizeof cmd, "'%s' conform --op ADD --backend cpu --models '%s' 2>&1", DRT_CLI_PATH, root);
    int rc = run(cmd, out, sizeof out);
    DRT_CHECK(rc == 1, "conform over hostile folder names: exit %d (want 1: the broken models fail):\n%s", rc, out);
    long raw = raw_control_at(out);
    DRT_CHECK(raw < 0, "conform's output holds the raw byte 0x%02x at %ld:\n%.*s",
              raw < 0 ? 0 : (unsigned char)out[raw], raw, raw < 0 ? 0 : (int)raw + 40, out);
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        for (int k = 0; k < 3; k++) {
            char want[256];
            snprintf(want, sizeof want, "%s%s", kinds[k], names[i].shown);
            DRT_CHECK(strstr(out, want) != NULL, "conform's output does not show %s escaped", want);
        }
}

/* --quick's choice of the models that run the batch cases, on ref (the
 * choice is the harness's, the same on every backend) */
static void quick_batch_choice(void) {
    /* name in the folder (the order conform reads them), fixture; the
     * architecture and weight type of each in the comment */
    static const char *const M[][2] = {
        {"a1_bf16", "axolotl_bf16"},       /* diff-v1 bf16: waits, an f32 one follows */
        {"a2_f32", "axolotl_gqa"},         /* diff-v1 f32: runs them */
        {"a3_f32", "axolotl_nosubln_mha"}, /* diff-v1 f32: skipped, a2 ran */
        {"b1_bf16", "hf_llama_bf16"},      /* transformer bf16: waits */
        {"b2_f32", "hf_llama_gqa"},        /* transformer f32: runs them */
        {"c1_bf16", "diff_v2_bf16"},       /* diff-v2, no f32 one: runs them, last */
    };
    const char *want_run[] = {"a2_f32", "b2_f32", "c1_bf16"}, *want_skip[] = {"a1_bf16", "a3_f32", "b1_bf16"};
    char cmd[8192], out[1 << 16], json[1100];
    int k = snprintf(cmd, sizeof cmd, "rm -rf '%s/quick_models' && mkdir -p '%s/quick_models'", DRT_TMP_DIR,
                     DRT_TMP_DIR);
    for (size_t i = 0; i < sizeof M / sizeof M[0]; i++)
        k += snprintf(cmd + k, sizeof cmd - (size_t)k, " && ln -s '%s/%s' '%s/quick_models/%s'", DRT_FIXTURES_DIR,
                      M[i][1], DRT_TMP_DIR, M[i][0]);
    DRT_CHECK(system(cmd) == 0, "cannot make %s/quick_models", DRT_TMP_DIR);
    snprintf(json, sizeof json, "%s/quick.json", DRT_TMP_DIR);
    snprintf(cmd, sizeof cmd,
             "'%s' conform --backend ref --op none --quick --models '%s/quick_models' --json '%s' 2>&1", DRT_CLI_PATH,
             DRT_TMP_DIR, json);
    int rc = run(cmd, out, sizeof out);
    DRT_CHECK(rc == 0, "conform --quick exited %d:\n%s", rc, out);
    DRT_CHECK(strstr(out, "--quick: the batch cases ran on one model of each architecture; not on a1_bf16, a3_f32, "
                          "b1_bf16\n") != NULL,
              "the text report does not name the skipped models as expected:\n%s", out);
    char *js = drt_test_read_file(json);
    cJSON *root = js ? cJSON_Parse(js) : NULL;
    free(js);
    DRT_CHECK(root != NULL, "%s: no JSON", json);
    if (!root) return;
    /* the models with batch cases, each with the 4 of conform/batch.c */
    int n_batch[3] = {0}, stray = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(c, "kind"));
        const char *model = cJSON_GetStringValue(cJSON_GetObjectItem(c, "model"));
        if (!kind || strcmp(kind, "batch") != 0) continue;
        int hit = 0;
        for (int i = 0; i < 3; i++)
            if (model && strcmp(model, want_run[i]) == 0) n_batch[i]++, hit = 1;
        if (!hit) {
            stray++;
            printf("batch case on %s, which --quick should have skipped\n", model ? model : "(null)");
        }
    }
    for (int i = 0; i < 3; i++) DRT_CHECK(n_batch[i] == 4, "%s: %d batch cases, want 4", want_run[i], n_batch[i]);
    DRT_CHECK(stray == 0, "%d batch cases on skipped models", stray);
    const cJSON *sk = cJSON_GetObjectItem(root, "batch_skipped");
    DRT_CHECK(cJSON_GetArraySize(sk) == 3, "batch_skipped has %d names, want 3", cJSON_GetArraySize(sk));
    for (int i = 0; i < 3 && i < cJSON_GetArraySize(sk); i++) {
        const char *got = cJSON_GetStringValue(cJSON_GetArrayItem(sk, i));
        DRT_CHECK(got && strcmp(got, want_skip[i]) == 0, "batch_skipped[%d] is %s, want %s", i, got ? got : "(null)",
                  want_skip[i]);
    }
    cJSON_Delete(root);
}

int main(void) {
    xml_check_catches();
    cli_reports();
    quick_batch_choice();
    hostile_folder_names();
    DRT_CHECK(drt_registry_add(&BROKEN) == DRT_OK, "register nan-add");
    broken_backend(0);
    broken_backend(1);
    return drt_test_summary("test_conform_report");
}
