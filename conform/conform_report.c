/* conform's reports: the --json object (schema in docs/conform-json.md) and
 * the --junit XML (one testsuite per backend, one testcase per case and
 * backend), both from the records of one run (conform_report.h). */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/utsname.h>
#include <time.h>
#include <unistd.h>

#include "conform_report.h"
#include "drt_error.h"
#include "drt_util.h"
#include "diffrt/diffrt.h"

const char *const CF_STATUS_NAME[CF_N_STATUS] = {"pass", "fail", "unsupported", "unavailable"};

void cf_count(const cf_run *run, int be, int counts[CF_N_STATUS]) {
    memset(counts, 0, sizeof(int) * CF_N_STATUS);
    for (int i = 0; i < run->n_cases; i++)
        if (be < 0 || run->cases[i].be == be) counts[run->cases[i].st]++;
}

void cf_case_line(const cf_run *run, const cf_case *c, char *buf, size_t n) {
    const char *be = run->be[c->be].name;
    int o;
    if (c->kind == CF_KIND_OP)
        o = snprintf(buf, n, "%s %s dtype=%s seed=%llu on %s: %s", c->op, c->desc, c->dtype,
                     (unsigned long long)c->seed, be, c->detail[0] ? c->detail : CF_STATUS_NAME[c->st]);
    else if (c->kind == CF_KIND_BATCH)
        o = snprintf(buf, n, "%s of model %s (%s) on %s: %s", c->op, c->model, c->desc, be,
                     c->detail[0] ? c->detail : CF_STATUS_NAME[c->st]);
    else
        o = snprintf(buf, n, "model %s (%s) on %s: %s", c->model, c->desc, be,
                     c->detail[0] ? c->detail : CF_STATUS_NAME[c->st]);
    if (o < 0 || (size_t)o >= n) return;
    /* the numbers the detail does not already give */
    int said = c->fail_type && strcmp(c->fail_type, "nmse") == 0;
    if (c->measured && said)
        snprintf(buf + o, n - (size_t)o, " (max|d| %.3e)", c->maxerr);
    else if (c->measured && !c->nonfinite)
        snprintf(buf + o, n - (size_t)o, " (%sNMSE %.3e vs bound %.0e, max|d| %.3e)",
                 c->kind != CF_KIND_OP ? "logits " : "", c->nmse, c->bound, c->maxerr);
    else if (c->bound > 0)
        snprintf(buf + o, n - (size_t)o, " (bound %.0e)", c->bound);
}

/* ---- JSON ----------------------------------------------------------------------- */

static cJSON *str_or_null(const char *s) {
    return s && *s ? cJSON_CreateString(s) : cJSON_CreateNull();
}
static cJSON *num_or_null(double v) {
    return isfinite(v) ? cJSON_CreateNumber(v) : cJSON_CreateNull();
}

static void host_json(cJSON *root) {
    cJSON *h = cJSON_AddObjectToObject(root, "host");
    char name[256] = "";
    if (gethostname(name, sizeof name - 1) != 0) name[0] = 0;
    cJSON_AddItemToObject(h, "hostname", str_or_null(name));
    struct utsname u;
    char os[400] = "";
    if (uname(&u) == 0) snprintf(os, sizeof os, "%s %s %s", u.sysname, u.release, u.machine);
    cJSON_AddItemToObject(h, "os", str_or_null(os));
    char model[256], vendor[64];
    drt_host_cpu(model, sizeof model, vendor, sizeof vendor);
    cJSON_AddItemToObject(h, "cpu_model", str_or_null(model));
    cJSON_AddItemToObject(h, "cpu_vendor", str_or_null(vendor));
    cJSON_AddNumberToObject(h, "cores", (double)drt_cpu_online());
}

/* the required backends that were unavailable or lack an op, with why */
static cJSON *required_missing(const cf_run *run) {
    cJSON *a = cJSON_CreateArray();
    for (int k = 0; k < run->nbe; k++) {
        const cf_backend *b = &run->be[k];
        if (!b->required) continue;
        char why[600] = "";
        if (!b->be) {
            snprintf(why, sizeof why, "unavailable: %s", b->why);
        } else {
            size_t o = 0;
            for (int op = 1; op < DRT_OP_COUNT; op++) {
                int n = 0;
                for (int i = 0; i < run->n_cases; i++) {
                    const cf_case *c = &run->cases[i];
                    if (c->be == k && c->kind == CF_KIND_OP && c->unsupported &&
                        strcmp(c->op, drt_op_name((drt_op)op)) == 0)
                        n++;
                }
                if (n && o < sizeof why)
                    o += (size_t)snprintf(why + o, sizeof why - o, "%s%s (%d case%s)",
                                          o ? ", " : "unsupported: ", drt_op_name((drt_op)op), n, n == 1 ? "" : "s");
            }
        }
        if (!why[0]) continue;
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "backend", b->name);
        cJSON_AddStringToObject(e, "reason", why);
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

static cJSON *backend_json(const cf_run *run, int k) {
    const cf_backend *b = &run->be[k];
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "name", b->name);
    cJSON_AddBoolToObject(j, "required", b->required);
    cJSON_AddStringToObject(j, "status", b->be ? "available" : "unavailable");
    cJSON_AddItemToObject(j, "reason", str_or_null(b->be ? NULL : b->why));
    if (b->be) {
        cJSON *d = cJSON_AddObjectToObject(j, "device");
        cJSON_AddNumberToObject(d, "index", b->device);
        cJSON_AddStringToObject(d, "selected_by", b->dev_from);
        cJSON_AddItemToObject(d, "selector", str_or_null(b->dev_sel));
        cJSON_AddItemToObject(d, "description", str_or_null(b->dev_desc));
        const drt_device_props *p = &b->props;
        cJSON_AddItemToObject(d, "name", str_or_null(b->have_props ? p->name : NULL));
        cJSON_AddItemToObject(d, "vendor", str_or_null(b->have_props ? p->vendor : NULL));
        cJSON_AddItemToObject(d, "driver", str_or_null(b->have_props ? p->driver : NULL));
        cJSON_AddItemToObject(d, "api_version", str_or_null(b->have_props ? p->api_version : NULL));
        cJSON_AddItemToObject(d, "type", str_or_null(b->have_props ? p->type : NULL));
        cJSON_AddStringToObject(j, "precision", b->precision);
    } else {
        cJSON_AddNullToObject(j, "device");
        cJSON_AddNullToObject(j, "precision");
    }
    /* the bounds in force: per op, the loosest one its cases were held to */
    cJSON *bo = cJSON_AddObjectToObject(j, "bounds");
    cJSON *ops = cJSON_AddObjectToObject(bo, "op_nmse");
    for (int op = 1; op < DRT_OP_COUNT; op++) {
        double m = 0;
        for (int i = 0; i < run->n_cases; i++) {
            const cf_case *c = &run->cases[i];
            if (c->be == k && c->kind == CF_KIND_OP && c->bound > m && strcmp(c->op, drt_op_name((drt_op)op)) == 0)
                m = c->bound;
        }
        if (m > 0) cJSON_AddNumberToObject(ops, drt_op_name((drt_op)op), m);
    }
    cJSON_AddItemToObject(bo, "model_logits_nmse", b->be ? cJSON_CreateNumber(b->model_bound) : cJSON_CreateNull());
    cJSON_AddNumberToObject(bo, "greedy_tokens", CF_GREEDY_N);
    return j;
}

static cJSON *case_json(const cf_run *run, const cf_case *c) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "kind", c->kind == CF_KIND_OP ? "op" : c->kind == CF_KIND_MODEL ? "model" : "batch");
    cJSON_AddItemToObject(j, "op", str_or_null(c->kind == CF_KIND_OP ? c->op : NULL));
    cJSON_AddItemToObject(j, "model", str_or_null(c->kind != CF_KIND_OP ? c->model : NULL));
    if (c->kind == CF_KIND_BATCH) cJSON_AddStringToObject(j, "case", c->op);
    cJSON_AddStringToObject(j, "backend", run->be[c->be].name);
    cJSON_AddStringToObject(j, "description", c->desc);
    cJSON_AddStringToObject(j, "dtype", c->dtype);
    if (c->has_seed)
        cJSON_AddNumberToObject(j, "seed", (double)c->seed);
    else
        cJSON_AddNullToObject(j, "seed");
    cJSON_AddStringToObject(j, "status", CF_STATUS_NAME[c->st]);
    int finite = c->measured && !c->nonfinite && isfinite(c->nmse);
    cJSON_AddItemToObject(j, "nmse", finite ? num_or_null(c->nmse) : cJSON_CreateNull());
    cJSON_AddItemToObject(j, "max_abs_err", c->measured ? num_or_null(c->maxerr) : cJSON_CreateNull());
    cJSON_AddBoolToObject(j, "nonfinite", c->measured && (c->nonfinite || !isfinite(c->nmse) || !isfinite(c->maxerr)));
    cJSON_AddItemToObject(j, "bound", c->bound > 0 ? cJSON_CreateNumber(c->bound) : cJSON_CreateNull());
    cJSON_AddNumberToObject(j, "time_s", c->time_s);
    if (c->kind == CF_KIND_BATCH) cJSON_AddStringToObject(j, "path", c->path);
    if (c->kind == CF_KIND_MODEL) {
        cJSON_AddStringToObject(j, "path", c->path);
        cJSON_AddNumberToObject(j, "fallbacks", c->fallbacks);
        if (c->greedy_first_diff >= 0)
            cJSON_AddNumberToObject(j, "greedy_first_diff", c->greedy_first_diff);
        else
            cJSON_AddNullToObject(j, "greedy_first_diff");
    }
    cJSON_AddItemToObject(j, "detail", str_or_null(c->detail));
    return j;
}

static cJSON *counts_json(const int counts[CF_N_STATUS]) {
    cJSON *j = cJSON_CreateObject();
    for (int s = 0; s < CF_N_STATUS; s++) cJSON_AddNumberToObject(j, CF_STATUS_NAME[s], counts[s]);
    return j;
}

/* every write to f so far went through; a write that failed before the
 * flush has lost its errno (glibc drops the buffer) */
static drt_status check_written(FILE *f, const char *path) {
    errno = 0;
    if (fflush(f) == 0 && !ferror(f)) return DRT_OK;
    return drt_set_error(DRT_ERR_IO, "%s: cannot write: %s", path, errno ? strerror(errno) : "write error");
}

/* Length of the valid UTF-8 sequence at p (RFC 3629: no overlong forms, no
 * surrogates, nothing above U+10FFFF), 0 when there is none. */
static int utf8_len(const unsigned char *p) {
    if (p[0] < 0x80) return 1;
    int n = p[0] >= 0xC2 && p[0] <= 0xDF ? 2 : p[0] >= 0xE0 && p[0] <= 0xEF ? 3 : p[0] >= 0xF0 && p[0] <= 0xF4 ? 4 : 0;
    for (int i = 1; i < n; i++)
        if ((p[i] & 0xC0) != 0x80) return 0;
    if ((p[0] == 0xE0 && p[1] < 0xA0) || (p[0] == 0xED && p[1] > 0x9F) || (p[0] == 0xF0 && p[1] < 0x90) ||
        (p[0] == 0xF4 && p[1] > 0x8F))
        return 0;
    return n;
}

/* cJSON prints a string's bytes as they are, so a file or folder name that is
 * not UTF-8 would make the document invalid JSON: each byte that starts no
 * valid sequence is written as \ufffd (U+FFFD). Outside strings cJSON's text
 * is ASCII, so the escape only ever lands inside a string. */
static void put_json_text(FILE *f, const char *txt) {
    const unsigned char *p = (const unsigned char *)txt;
    while (*p) {
        const unsigned char *q = p;
        int n;
        while (*q && (n = utf8_len(q)) > 0) q += n;
        if (q > p) fwrite(p, 1, (size_t)(q - p), f);
        if (!*q) break;
        fputs("\\ufffd", f);
        p = q + 1;
    }
}

drt_status cf_write_json(const cf_run *run, FILE *f, const char *path) {
    const drt_conform_opts *o = run->o;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddNumberToObject(root, "schema_version", 1);
    cJSON_AddStringToObject(root, "tool", "diffrt conform");
    cJSON *v = cJSON_AddObjectToObject(root, "diffrt");
    cJSON_AddStringToObject(v, "version", drt_version());
    cJSON_AddStringToObject(v, "commit", drt_git_commit());
    cJSON_AddStringToObject(root, "mode", o->perf ? "perf" : "conformance");
    cJSON_AddStringToObject(root, "started_at", run->started_at);
    cJSON_AddNumberToObject(root, "duration_s", drt_now_s() - run->t_start);
    host_json(root);
    cJSON *op = cJSON_AddObjectToObject(root, "options");
    cJSON_AddItemToObject(op, "backend", str_or_null(o->backends));
    cJSON_AddItemToObject(op, "op", str_or_null(o->ops));
    cJSON_AddItemToObject(op, "require", str_or_null(o->require));
    cJSON_AddItemToObject(op, "device", str_or_null(o->devices));
    cJSON_AddItemToObject(op, "models", str_or_null(o->models_dir));
    cJSON_AddBoolToObject(op, "quick", o->quick != 0);
    cJSON *bo = cJSON_AddObjectToObject(root, "bounds");
    cJSON_AddNumberToObject(bo, "f32_nmse", CF_F32_NMSE);
    cJSON_AddNumberToObject(bo, "reduced_nmse_max", CF_REDUCED_NMSE);
    cJSON_AddNumberToObject(bo, "model_logits_nmse", CF_MODEL_NMSE);
    cJSON_AddNumberToObject(bo, "greedy_tokens", CF_GREEDY_N);
    cJSON * or = cJSON_AddObjectToObject(root, "oracle");
    cJSON_AddStringToObject(or, "backend", "ref");
    cJSON_AddStringToObject(or, "device", "default (--device and DIFFRT_DEVICE never apply to it)");

    cJSON *bes = cJSON_AddArrayToObject(root, "backends");
    for (int k = 0; k < run->nbe; k++) cJSON_AddItemToArray(bes, backend_json(run, k));
    cJSON *cs = cJSON_AddArrayToObject(root, "cases");
    for (int i = 0; i < run->n_cases; i++) cJSON_AddItemToArray(cs, case_json(run, &run->cases[i]));
    cJSON *sk = cJSON_AddArrayToObject(root, "models_skipped");
    for (int i = 0; i < run->n_skipped; i++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "path", run->skipped[i].path);
        cJSON_AddStringToObject(e, "reason", run->skipped[i].why);
        cJSON_AddItemToArray(sk, e);
    }
    cJSON *bsk = cJSON_AddArrayToObject(root, "batch_skipped");
    for (int i = 0; i < run->n_batch_skipped; i++) cJSON_AddItemToArray(bsk, cJSON_CreateString(run->batch_skipped[i]));
    if (run->perf) cJSON_AddItemReferenceToObject(root, "perf", run->perf);

    cJSON *sm = cJSON_AddObjectToObject(root, "summary");
    int counts[CF_N_STATUS];
    cf_count(run, -1, counts);
    cJSON_AddNumberToObject(sm, "cases", run->n_cases);
    for (int s = 0; s < CF_N_STATUS; s++) cJSON_AddNumberToObject(sm, CF_STATUS_NAME[s], counts[s]);
    cJSON *by = cJSON_AddObjectToObject(sm, "by_backend");
    for (int k = 0; k < run->nbe; k++) {
        int c[CF_N_STATUS];
        cf_count(run, k, c);
        cJSON_AddItemToObject(by, run->be[k].name, counts_json(c));
    }
    cJSON *miss = required_missing(run);
    int failed = counts[CF_FAIL] > 0 || cJSON_GetArraySize(miss) > 0 || run->error[0];
    cJSON_AddItemToObject(sm, "required_missing", miss);
    cJSON_AddStringToObject(sm, "result", failed ? "fail" : "pass");
    cJSON_AddNumberToObject(sm, "exit_code", failed ? 1 : 0);
    cJSON_AddItemToObject(root, "error", str_or_null(run->error));

    char *txt = cJSON_Print(root);
    cJSON_Delete(root);
    if (!txt) return drt_set_error(DRT_ERR_OOM, "out of memory");
    put_json_text(f, txt);
    fputc('\n', f);
    free(txt);
    return check_written(f, path);
}

/* ---- JUnit XML ---------------------------------------------------------------------- */

/* s escaped for XML 1.0 text (attr = 0) or an attribute value (attr = 1):
 * markup characters as entities, line breaks and tabs in attributes as
 * character references, other control characters and bytes that are not
 * UTF-8 as '?', which XML does not allow at all */
static void xml_put(FILE *f, const char *s, int attr) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        unsigned char c = *p;
        if (c == '&')
            fputs("&amp;", f);
        else if (c == '<')
            fputs("&lt;", f);
        else if (c == '>')
            fputs("&gt;", f);
        else if (attr && c == '"')
            fputs("&quot;", f);
        else if (attr && c == '\'')
            fputs("&apos;", f);
        else if (c == '\n' || c == '\r' || c == '\t') {
            if (attr)
                fprintf(f, "&#%d;", c);
            else
                fputc(c, f);
        } else if (c < 0x20 || c == 0x7f)
            fputc('?', f);
        else if (c < 0x80)
            fputc(c, f);
        else {
            /* one well-formed UTF-8 sequence (no overlongs, no surrogates) */
            int len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
            int ok = len > 0;
            for (int i = 1; ok && i < len; i++) ok = (p[i] & 0xc0) == 0x80;
            if (ok && len == 3 && ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0))) ok = 0;
            if (ok && len == 4 && ((c == 0xf0 && p[1] < 0x90) || (c == 0xf4 && p[1] >= 0x90))) ok = 0;
            if (!ok) {
                fputc('?', f);
                p++;
                continue;
            }
            fwrite(p, 1, (size_t)len, f);
            p += len;
            continue;
        }
        p++;
    }
}

static void xml_attr(FILE *f, const char *name, const char *value) {
    fprintf(f, " %s=\"", name);
    xml_put(f, value ? value : "", 1);
    fputc('"', f);
}

static void xml_prop(FILE *f, const char *name, const char *value) {
    fputs("      <property", f);
    xml_attr(f, "name", name);
    xml_attr(f, "value", value);
    fputs("/>\n", f);
}

drt_status cf_write_junit(const cf_run *run, FILE *f, const char *path) {
    int all[CF_N_STATUS];
    cf_count(run, -1, all);
    double total = drt_now_s() - run->t_start;
    fputs("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites", f);
    xml_attr(f, "name", "diffrt conform");
    fprintf(f, " tests=\"%d\" failures=\"%d\" errors=\"%d\" skipped=\"%d\" time=\"%.3f\"",
            run->n_cases + !!run->error[0], all[CF_FAIL], !!run->error[0], all[CF_UNSUPPORTED] + all[CF_UNAVAILABLE],
            total);
    xml_attr(f, "timestamp", run->started_at);
    fputs(">\n", f);
    char host[256] = "";
    if (gethostname(host, sizeof host - 1) != 0) host[0] = 0;
    char line[1400];
    for (int k = 0; k < run->nbe; k++) {
        const cf_backend *b = &run->be[k];
        int c[CF_N_STATUS], n = 0;
        double t = 0;
        cf_count(run, k, c);
        for (int i = 0; i < run->n_cases; i++)
            if (run->cases[i].be == k) n++, t += run->cases[i].time_s;
        char sname[96];
        snprintf(sname, sizeof sname, "conform.%s", b->name);
        fputs("  <testsuite", f);
        xml_attr(f, "name", sname);
        fprintf(f, " tests=\"%d\" failures=\"%d\" errors=\"0\" skipped=\"%d\" time=\"%.3f\"", n, c[CF_FAIL],
                c[CF_UNSUPPORTED] + c[CF_UNAVAILABLE], t);
        xml_attr(f, "timestamp", run->started_at);
        xml_attr(f, "hostname", host);
        fputs(">\n    <properties>\n", f);
        xml_prop(f, "backend", b->name);
        xml_prop(f, "required", b->required ? "true" : "false");
        xml_prop(f, "status", b->be ? "available" : "unavailable");
        if (!b->be) xml_prop(f, "reason", b->why);
        if (b->be) {
            xml_prop(f, "device", b->dev_desc);
            xml_prop(f, "device.selected_by", b->dev_from);
            xml_prop(f, "precision", b->precision);
        }
        xml_prop(f, "diffrt.version", drt_version());
        xml_prop(f, "diffrt.commit", drt_git_commit());
        fputs("    </properties>\n", f);
        for (int i = 0; i < run->n_cases; i++) {
            const cf_case *cc = &run->cases[i];
            if (cc->be != k) continue;
            char cls[320], name[600];
            if (cc->kind == CF_KIND_OP) {
                snprintf(cls, sizeof cls, "conform.%s.%s", b->name, cc->op);
                snprintf(name, sizeof name, "%s seed=%llu", cc->desc, (unsigned long long)cc->seed);
            } else if (cc->kind == CF_KIND_BATCH) {
                snprintf(cls, sizeof cls, "conform.%s.%s", b->name, cc->op);
                snprintf(name, sizeof name, "%s: %s", cc->model, cc->desc);
            } else {
                snprintf(cls, sizeof cls, "conform.%s.model", b->name);
                snprintf(name, sizeof name, "%s: %s", cc->model, cc->desc);
            }
            fputs("    <testcase", f);
            xml_attr(f, "classname", cls);
            xml_attr(f, "name", name);
            fprintf(f, " time=\"%.6f\"", cc->time_s);
            cf_case_line(run, cc, line, sizeof line);
            if (cc->st == CF_PASS) {
                fputs("/>\n", f);
                continue;
            }
            fputs(">\n      ", f);
            if (cc->st == CF_FAIL) {
                fputs("<failure", f);
                xml_attr(f, "message", line);
                xml_attr(f, "type", cc->fail_type ? cc->fail_type : "error");
                fputs(">", f);
                xml_put(f, line, 0);
                if (cc->kind != CF_KIND_OP) {
                    fputs("\nmodel directory: ", f);
                    xml_put(f, cc->path, 0);
                }
                fputs("</failure>\n", f);
            } else {
                fputs("<skipped", f);
                xml_attr(f, "message", cc->detail[0] ? cc->detail : CF_STATUS_NAME[cc->st]);
                fputs("/>\n", f);
            }
            fputs("    </testcase>\n", f);
        }
        fputs("  </testsuite>\n", f);
    }
    if (run->error[0]) {
        fputs("  <testsuite name=\"conform.harness\" tests=\"1\" failures=\"0\" errors=\"1\" "
              "skipped=\"0\">\n",
              f);
        fputs("    <testcase classname=\"conform.harness\" name=\"harness\">\n      <error", f);
        xml_attr(f, "message", run->error);
        fputs("/>\n    </testcase>\n  </testsuite>\n", f);
    }
    fputs("</testsuites>\n", f);
    return check_written(f, path);
}
