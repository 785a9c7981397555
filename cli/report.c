/* diffrt report: merges `diffrt bench --json` files (docs/bench-json.md)
 * from any number of machines and backends into DIR/report.md, one table
 * per model and settings with a row per (host, device, backend), and two
 * hand-written SVG charts per table: tokens per second (pp and tg bars) and
 * the time per op type (100% stacked bars, prefill and decode).
 *
 * Every string from a file goes through cli_md_escape / cli_xml_escape: a
 * device or host name cannot break a table or the XML. A file that is not a
 * bench result, or lacks a field, is a one-line error naming the file and
 * the field. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli.h"
#include "diffrt/diffrt.h"
#include "safetensors.h" /* drt_read_text_file */

static const char *REPORT_USAGE =
    "usage: diffrt report FILE... --out DIR\n"
    "\n"
    "  Merges `diffrt bench --json` files (any machines, backends) into\n"
    "  DIR/report.md: one table per model and pp/tg setting, a row per (host,\n"
    "  device, backend) with pp and tg tok/s, the decode and prefill roofline\n"
    "  fractions and the top ops; and SVG charts next to it: tokens_per_s-K.svg\n"
    "  (pp and tg bars) and ops-K.svg (time per op type) for table K.\n"
    "  DIR is created when missing. Exit status 2 on bad arguments or a file\n"
    "  that is not a bench result (named), 1 when DIR cannot be written.\n";

/* ---- escaping ------------------------------------------------------------------ */

/* length of the valid UTF-8 sequence at s (not a control character), or 0 */
static int utf8_len(const unsigned char *s) {
    unsigned c = s[0];
    if (c < 0x20 || c == 0x7f) return 0;
    if (c < 0x80) return 1;
    int n = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (!n || (c >= 0xf0 && n != 4)) return 0;
    for (int i = 1; i < n; i++)
        if ((s[i] & 0xc0) != 0x80) return 0;
    unsigned cp = n == 2 ? (c & 0x1f) << 6 | (s[1] & 0x3f)
                  : n == 3
                      ? (c & 0x0f) << 12 | (s[1] & 0x3f) << 6 | (s[2] & 0x3f)
                      : (c & 0x07) << 18 | (s[1] & 0x3f) << 12 | (s[2] & 0x3f) << 6 | (s[3] & 0x3f);
    if ((n == 3 && cp < 0x800) || (n == 4 && (cp < 0x10000 || cp > 0x10ffff))) return 0;
    if (cp >= 0xd800 && cp <= 0xdfff) return 0; /* surrogates */
    if (cp == 0xfffe || cp == 0xffff) return 0; /* not XML characters */
    if (cp >= 0x80 && cp < 0xa0) return 0;      /* C1 controls */
    return n;
}

void cli_md_escape(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = utf8_len(p);
        if (!n) {
            fputc(*p == '\t' || *p == '\n' || *p == '\r' ? ' ' : '?', f);
            p++;
            continue;
        }
        if (n == 1 && strchr("\\`*_[]<>|~&", *p)) fputc('\\', f);
        fwrite(p, 1, (size_t)n, f);
        p += n;
    }
}

void cli_xml_escape(FILE *f, const char *s) {
    const unsigned char *p = (const unsigned char *)s;
    while (*p) {
        int n = utf8_len(p);
        if (!n) {
            fputc(*p == '\t' || *p == '\n' || *p == '\r' ? ' ' : '?', f);
            p++;
            continue;
        }
        switch (*p) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        case '\'': fputs("&apos;", f); break;
        default: fwrite(p, 1, (size_t)n, f);
        }
        p += n;
    }
}

const char *cli_ellipsize(const char *s, int max, char *buf, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0;
    int cps = 0;
    while (*p && o + 8 < n) {
        int len = utf8_len(p);
        if (!len) len = 1; /* escaped later */
        if (cps == max) {
            memcpy(buf + o, "...", 3);
            o += 3;
            break;
        }
        memcpy(buf + o, p, (size_t)len);
        o += (size_t)len;
        p += len;
        cps++;
    }
    buf[o] = 0;
    return buf;
}

/* ---- reading the files ------------------------------------------------------------- */

#define MAX_OPS 32

typedef struct {
    const char *name;
    double percent, ms;
} op_share;

typedef struct {
    const char *file, *host, *device, *backend, *error;
    int group;
    int has_pp, has_tg;
    double pp_mean, pp_sd, tg_mean, tg_sd;
    double dec_frac, pre_frac; /* NAN: none */
    int dec_flag, pre_flag;
    int dec_note; /* the decode working set may be cache-resident */
    double dec_peak, pre_peak;
    op_share ops[2][MAX_OPS]; /* [0] prefill, [1] decode, by time, most first */
    int n_ops[2];
    double ops_ms[2];
} row;

typedef struct {
    const char *file, *model, *arch, *dtype;
    double params;
    int layers, dim;
    long p, n;
} group;

typedef struct {
    const char *file;
    char path[256];
    char msg[512];
} rerr;

/* the item at key of o, or an error naming file and path */
static const cJSON *need(const cJSON *o, const char *key, int type, const char *where, rerr *e) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    int ok = x && (type == cJSON_Number   ? cJSON_IsNumber(x)
                   : type == cJSON_String ? cJSON_IsString(x)
                   : type == cJSON_Array  ? cJSON_IsArray(x)
                                          : cJSON_IsObject(x));
    if (!ok && !e->msg[0])
        snprintf(e->msg, sizeof e->msg, "%s%s%s: %s %s", where, *where ? "." : "", key,
                 x ? "expected" : "missing,",
                 type == cJSON_Number   ? "a number"
                 : type == cJSON_String ? "a string"
                 : type == cJSON_Array  ? "an array"
                                        : "an object");
    return ok ? x : NULL;
}

static double num(const cJSON *o, const char *key, const char *where, rerr *e) {
    const cJSON *x = need(o, key, cJSON_Number, where, e);
    return x ? x->valuedouble : 0;
}

static const char *str(const cJSON *o, const char *key, const char *where, rerr *e) {
    const cJSON *x = need(o, key, cJSON_String, where, e);
    return x ? x->valuestring : "";
}

/* a roofline entry: fraction (number or null) and flag (string or null) */
static void read_roof(const cJSON *r, const char *key, const char *peak_key, double *frac,
                      int *flag, double *peak, const char *where, rerr *e) {
    *frac = NAN;
    *flag = 0;
    *peak = 0;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(r, key);
    if (!x) return;
    char w[128];
    snprintf(w, sizeof w, "%s.%s", where, key);
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(x, "fraction");
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(x, "flag");
    if (cJSON_IsNumber(fr))
        *frac = fr->valuedouble;
    else if (!cJSON_IsNull(fr) && !e->msg[0])
        snprintf(e->msg, sizeof e->msg, "%s.fraction: expected a number or null", w);
    *flag = cJSON_IsString(fl);
    *peak = num(x, peak_key, w, e);
    /* a file that says more than 1.0 without the flag is flagged here all the same */
    if (isfinite(*frac) && *frac > 1.0) *flag = 1;
}

static void read_ops(const cJSON *ops, const char *key, row *r, int k, const char *where, rerr *e) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(ops, key);
    if (!x) return;
    char w[128];
    snprintf(w, sizeof w, "%s.%s", where, key);
    r->ops_ms[k] = num(x, "total_ms", w, e);
    const cJSON *a = need(x, "ops", cJSON_Array, w, e), *it;
    cJSON_ArrayForEach(it, a) {
        if (r->n_ops[k] == MAX_OPS) break;
        op_share *s = &r->ops[k][r->n_ops[k]++];
        s->name = str(it, "op", w, e);
        s->percent = num(it, "percent", w, e);
        s->ms = num(it, "ms", w, e);
    }
}

/* Reads one file's rows into rows (grown), groups into groups (found or
 * added). 0 and e->msg set on a file that is not a bench result. */
static int read_file(const char *path, cJSON **keep, row **rows, int *nrows, group *groups,
                     int *ngroups, int max_groups, rerr *e) {
    char *txt = NULL;
    e->file = path;
    e->msg[0] = 0;
    if (drt_read_text_file(path, &txt, NULL) != DRT_OK) {
        snprintf(e->msg, sizeof e->msg, "cannot read: %s", drt_last_error());
        return 0;
    }
    cJSON *root = cJSON_Parse(txt);
    free(txt);
    *keep = root;
    if (!root) {
        snprintf(e->msg, sizeof e->msg, "not valid JSON");
        return 0;
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "kind");
    if (!cJSON_IsObject(root) || !cJSON_IsString(kind) ||
        strcmp(kind->valuestring, "diffrt-bench") != 0) {
        snprintf(e->msg, sizeof e->msg,
                 "not a diffrt bench result (no \"kind\": \"diffrt-bench\")");
        return 0;
    }
    double sv = num(root, "schema_version", "", e);
    if (e->msg[0]) return 0;
    if (sv != BENCH_SCHEMA_VERSION) {
        snprintf(e->msg, sizeof e->msg, "schema_version %g; this diffrt reads %d", sv,
                 BENCH_SCHEMA_VERSION);
        return 0;
    }
    const cJSON *host = need(root, "host", cJSON_Object, "", e);
    const cJSON *model = need(root, "model", cJSON_Object, "", e);
    const cJSON *set = need(root, "settings", cJSON_Object, "", e);
    const cJSON *bes = need(root, "backends", cJSON_Array, "", e);
    if (e->msg[0]) return 0;
    group g = {.file = path,
               .model = str(model, "name", "model", e),
               .arch = str(model, "architecture", "model", e),
               .dtype = str(model, "dtype", "model", e),
               .params = num(model, "params", "model", e),
               .layers = (int)num(model, "layers", "model", e),
               .dim = (int)num(model, "dim", "model", e),
               .p = (long)num(set, "n_prompt", "settings", e),
               .n = (long)num(set, "n_gen", "settings", e)};
    const char *hostname = str(host, "hostname", "host", e);
    if (e->msg[0]) return 0;
    /* the table: same model shape and dtype, same pp and tg */
    int gi = 0;
    for (; gi < *ngroups; gi++) {
        group *h = &groups[gi];
        if (strcmp(h->arch, g.arch) == 0 && strcmp(h->dtype, g.dtype) == 0 &&
            h->params == g.params && h->layers == g.layers && h->dim == g.dim && h->p == g.p &&
            h->n == g.n)
            break;
    }
    if (gi == *ngroups) {
        if (gi == max_groups) {
            snprintf(e->msg, sizeof e->msg,
                     "more than %d different models / settings in one report", max_groups);
            return 0;
        }
        groups[(*ngroups)++] = g;
    }
    int i = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, bes) {
        char w[64];
        snprintf(w, sizeof w, "backends[%d]", i++);
        row *nr = realloc(*rows, sizeof **rows * (size_t)(*nrows + 1));
        if (!nr) {
            snprintf(e->msg, sizeof e->msg, "out of memory");
            return 0;
        }
        *rows = nr;
        row *r = &nr[*nrows];
        memset(r, 0, sizeof *r);
        r->file = path;
        r->host = hostname;
        r->group = gi;
        r->backend = str(b, "backend", w, e);
        char wd[80];
        snprintf(wd, sizeof wd, "%s.device", w);
        const cJSON *dev = need(b, "device", cJSON_Object, w, e);
        r->device = dev ? str(dev, "name", wd, e) : "";
        const char *status = str(b, "status", w, e);
        if (e->msg[0]) return 0;
        if (strcmp(status, "ok") != 0) {
            const cJSON *er = cJSON_GetObjectItemCaseSensitive(b, "error");
            r->error = cJSON_IsString(er) ? er->valuestring : status;
            r->dec_frac = r->pre_frac = NAN;
            (*nrows)++;
            continue;
        }
        char wx[96];
        if (g.p) {
            snprintf(wx, sizeof wx, "%s.pp", w);
            const cJSON *pp = need(b, "pp", cJSON_Object, w, e);
            r->pp_mean = num(pp, "mean_tok_s", wx, e);
            r->pp_sd = num(pp, "sd_tok_s", wx, e);
            r->has_pp = 1;
        }
        if (g.n) {
            snprintf(wx, sizeof wx, "%s.tg", w);
            const cJSON *tg = need(b, "tg", cJSON_Object, w, e);
            r->tg_mean = num(tg, "mean_tok_s", wx, e);
            r->tg_sd = num(tg, "sd_tok_s", wx, e);
            r->has_tg = 1;
        }
        if (e->msg[0]) return 0;
        snprintf(wx, sizeof wx, "%s.roofline", w);
        const cJSON *rl = need(b, "roofline", cJSON_Object, w, e);
        read_roof(rl, "decode", "peak_gbytes_per_s", &r->dec_frac, &r->dec_flag, &r->dec_peak, wx,
                  e);
        r->dec_note = cJSON_IsString(cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(rl, "decode"), "note"));
        read_roof(rl, "prefill", "peak_gflops", &r->pre_frac, &r->pre_flag, &r->pre_peak, wx, e);
        snprintf(wx, sizeof wx, "%s.ops", w);
        const cJSON *ops = need(b, "ops", cJSON_Object, w, e);
        read_ops(ops, "prefill", r, 0, wx, e);
        read_ops(ops, "decode", r, 1, wx, e);
        if (e->msg[0]) return 0;
        for (int k = 0; k < *nrows; k++) {
            const row *o = &nr[k];
            if (o->group == gi && strcmp(o->host, r->host) == 0 &&
                strcmp(o->device, r->device) == 0 && strcmp(o->backend, r->backend) == 0) {
                snprintf(e->msg, sizeof e->msg,
                         "host %.60s, device %.80s, backend %.16s is also in %.200s (same model "
                         "and settings): "
                         "give each run once",
                         r->host, r->device, r->backend, o->file);
                return 0;
            }
        }
        (*nrows)++;
    }
    return 1;
}

/* ---- report.md ---------------------------------------------------------------- */

static void md_roof(FILE *f, double frac, int flag, int note, double peak, const char *unit) {
    if (isnan(frac)) {
        fputs(" n/a |", f);
        return;
    }
    fprintf(f, " %.3f of %.1f %s%s%s |", frac, peak, unit, flag ? " (**" BENCH_ROOF_FLAG "**)" : "",
            note ? " (" BENCH_CACHE_NOTE ")" : "");
}

static void md_top_ops(FILE *f, const row *r, int k) {
    fputc(' ', f);
    for (int i = 0; i < r->n_ops[k] && i < 3; i++) {
        if (i) fputs(", ", f);
        cli_md_escape(f, r->ops[k][i].name);
        fprintf(f, " %.0f%%", r->ops[k][i].percent);
    }
    fputs(" |", f);
}

static int write_md(FILE *f, char **files, int nfiles, cJSON **roots, const row *rows, int nrows,
                    const group *groups, int ngroups) {
    fprintf(f, "# diffrt bench report\n\nMerged from %d file%s:", nfiles, nfiles == 1 ? "" : "s");
    for (int i = 0; i < nfiles; i++) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(roots[i], "created");
        const cJSON *h = cJSON_GetObjectItemCaseSensitive(
            cJSON_GetObjectItemCaseSensitive(roots[i], "host"), "hostname");
        fputs(i ? ", " : " ", f);
        cli_md_escape(f, files[i]);
        fputs(" (", f);
        cli_md_escape(f, cJSON_IsString(h) ? h->valuestring : "?");
        if (cJSON_IsString(c)) {
            fputs(", ", f);
            cli_md_escape(f, c->valuestring);
        }
        fputs(")", f);
    }
    fprintf(
        f,
        ".\n\nRoofline: decode tok/s times the bytes a decode step reads, over the backend's "
        "measured streaming bandwidth; prefill tok/s times the FLOPs per prompt token, over its "
        "measured GEMM peak (docs/bench-json.md). A fraction above 1.0 is flagged "
        "(\"%s\"): the peak was under-measured, it is not a result.\n",
        BENCH_ROOF_FLAG);
    for (int g = 0; g < ngroups; g++) {
        const group *G = &groups[g];
        char t[512];
        snprintf(t, sizeof t, "%s: %s, %.2f M params, %s, %d layers, dim %d; pp%ld, tg%ld",
                 G->model, G->arch, G->params / 1e6, G->dtype, G->layers, G->dim, G->p, G->n);
        fprintf(f, "\n## %d. ", g + 1);
        cli_md_escape(f, t);
        fprintf(f,
                "\n\n| host | device | backend | pp%ld tok/s | tg%ld tok/s | decode roofline | "
                "prefill roofline "
                "| top ops, decode | top ops, prefill |\n|---|---|---|---:|---:|---|---|---|---|\n",
                G->p, G->n);
        for (int i = 0; i < nrows; i++) {
            const row *r = &rows[i];
            if (r->group != g) continue;
            fputs("| ", f);
            cli_md_escape(f, r->host);
            fputs(" | ", f);
            cli_md_escape(f, r->device);
            fputs(" | ", f);
            cli_md_escape(f, r->backend);
            fputs(" |", f);
            if (r->error) {
                fputs(" error: ", f);
                cli_md_escape(f, r->error);
                fputs(" | | | | | |\n", f);
                continue;
            }
            if (r->has_pp)
                fprintf(f, " %.2f \xc2\xb1 %.2f |", r->pp_mean, r->pp_sd);
            else
                fputs(" |", f);
            if (r->has_tg)
                fprintf(f, " %.2f \xc2\xb1 %.2f |", r->tg_mean, r->tg_sd);
            else
                fputs(" |", f);
            md_roof(f, r->dec_frac, r->dec_flag, r->dec_note, r->dec_peak, "GB/s");
            md_roof(f, r->pre_frac, r->pre_flag, 0, r->pre_peak, "GFLOP/s");
            md_top_ops(f, r, 1);
            md_top_ops(f, r, 0);
            fputc('\n', f);
        }
        fprintf(f,
                "\n![tokens per second](tokens_per_s-%d.svg)\n\n![time per op type](ops-%d.svg)\n",
                g + 1, g + 1);
    }
    return ferror(f) ? 0 : 1;
}

/* ---- SVG ------------------------------------------------------------------------ */

#define LABEL_W 330
#define PANEL_W 250
#define ROW_H 32
#define TOP 48

static void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *weight,
                     const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\"%s%s%s>", x, y, size,
            anchor, weight ? " font-weight=\"" : "", weight ? weight : "", weight ? "\"" : "");
    cli_xml_escape(f, s);
    fputs("</text>\n", f);
}

/* a row's label, right-aligned before the bars: "backend, host" and the device under it */
static void svg_row_label(FILE *f, const row *r, double y) {
    char tmp[600], cut[300];
    snprintf(tmp, sizeof tmp, "%s, %s", r->backend, r->host);
    svg_text(f, LABEL_W - 8, y + 12, "end", 11, "bold", cli_ellipsize(tmp, 48, cut, sizeof cut));
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\" fill=\"#555555\">",
            LABEL_W - 8, y + 24);
    cli_xml_escape(f, cli_ellipsize(r->device, 60, cut, sizeof cut));
    fputs("</text>\n", f);
}

static void svg_begin(FILE *f, int w, int h, const char *title) {
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d "
            "%d\" "
            "font-family=\"sans-serif\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%d\" fill=\"#ffffff\"/>\n",
            w, h, w, h, w, h);
    svg_text(f, 10, 22, "start", 15, "bold", title);
}

/* tokens per second: a pp panel and a tg panel, one bar per row, each panel its own scale */
static int write_tok_svg(FILE *f, const row *rows, int nrows, const group *G, int g) {
    int n = 0;
    double mx[2] = {0, 0};
    for (int i = 0; i < nrows; i++) {
        if (rows[i].group != g) continue;
        n++;
        /* the scale holds the whiskers: mean + sd */
        if (!rows[i].error && rows[i].pp_mean + rows[i].pp_sd > mx[0])
            mx[0] = rows[i].pp_mean + rows[i].pp_sd;
        if (!rows[i].error && rows[i].tg_mean + rows[i].tg_sd > mx[1])
            mx[1] = rows[i].tg_mean + rows[i].tg_sd;
    }
    int w = LABEL_W + 2 * (PANEL_W + 90), h = TOP + 20 + n * ROW_H + 20;
    char title[512];
    snprintf(title, sizeof title, "%s: tokens per second (mean, whisker: sd)", G->model);
    svg_begin(f, w, h, title);
    const char *color[2] = {"#4e79a7", "#f28e2b"};
    for (int k = 0; k < 2; k++) {
        double x0 = LABEL_W + k * (PANEL_W + 90);
        char head[64];
        snprintf(head, sizeof head, "%s%ld tok/s", k ? "tg" : "pp", k ? G->n : G->p);
        svg_text(f, x0, TOP, "start", 12, "bold", head);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#888888\"/>\n", x0,
                TOP + 8, x0, TOP + 12 + n * ROW_H);
    }
    int j = 0;
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        if (r->group != g) continue;
        double y = TOP + 12 + j * ROW_H;
        svg_row_label(f, r, y);
        for (int k = 0; k < 2; k++) {
            double x0 = LABEL_W + k * (PANEL_W + 90);
            if (r->error) {
                if (k == 0) svg_text(f, x0 + 4, y + 20, "start", 11, NULL, "error (see report.md)");
                continue;
            }
            double v = k ? r->tg_mean : r->pp_mean, sd = k ? r->tg_sd : r->pp_sd;
            if ((k == 0 && !r->has_pp) || (k == 1 && !r->has_tg)) continue;
            double bw = mx[k] > 0 ? PANEL_W * v / mx[k] : 0;
            fprintf(f,
                    "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>",
                    x0, y + 5, bw, ROW_H - 10, color[k]);
            char tip[96];
            snprintf(tip, sizeof tip, "%.2f \xc2\xb1 %.2f tok/s", v, sd);
            cli_xml_escape(f, tip);
            fputs("</title></rect>\n", f);
            double lo = mx[k] > 0 ? PANEL_W * (v - sd) / mx[k] : 0,
                   hi = mx[k] > 0 ? PANEL_W * (v + sd) / mx[k] : 0;
            if (lo < 0) lo = 0;
            fprintf(f,
                    "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333333\"/>\n",
                    x0 + lo, y + ROW_H / 2.0, x0 + hi, y + ROW_H / 2.0);
            char val[32];
            snprintf(val, sizeof val, "%.1f", v);
            svg_text(f, x0 + (hi > bw ? hi : bw) + 4, y + 20, "start", 11, NULL, val);
        }
        j++;
    }
    fputs("</svg>\n", f);
    return ferror(f) ? 0 : 1;
}

/* a fixed colour per op name, in the order the group first shows them */
static const char *PALETTE[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                                "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac",
                                "#86bcb6", "#d37295", "#8cd17d", "#499894"};
#define N_PALETTE ((int)(sizeof PALETTE / sizeof PALETTE[0]))

static int op_index(const char **names, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (strcmp(names[i], name) == 0) return i;
    if (*n == MAX_OPS) return MAX_OPS - 1;
    names[*n] = name;
    return (*n)++;
}

/* time per op type: a 100% stacked bar per row for the prefill and one for the decode step */
static int write_ops_svg(FILE *f, const row *rows, int nrows, const group *G, int g) {
    const char *names[MAX_OPS];
    int nn = 0, n = 0;
    for (int i = 0; i < nrows; i++) {
        if (rows[i].group != g) continue;
        n++;
        for (int k = 1; k >= 0; k--)
            for (int q = 0; q < rows[i].n_ops[k]; q++)
                op_index(names, &nn, rows[i].ops[k][q].name);
    }
    int legend_rows = (nn + 4) / 5;
    int w = LABEL_W + 2 * (PANEL_W + 40), h = TOP + 20 + n * ROW_H + 24 + legend_rows * 18 + 10;
    char title[512];
    snprintf(title, sizeof title, "%s: time per op type (node by node, synchronized)", G->model);
    svg_begin(f, w, h, title);
    for (int k = 0; k < 2; k++) {
        char head[64];
        snprintf(head, sizeof head, k ? "decode step at position %ld" : "prefill of %ld tokens",
                 G->p);
        svg_text(f, LABEL_W + k * (PANEL_W + 40), TOP, "start", 12, "bold", head);
    }
    int j = 0;
    for (int i = 0; i < nrows; i++) {
        const row *r = &rows[i];
        if (r->group != g) continue;
        double y = TOP + 12 + j * ROW_H;
        svg_row_label(f, r, y);
        for (int k = 0; k < 2; k++) {
            double x = LABEL_W + k * (PANEL_W + 40);
            int src = k == 0 ? 0 : 1;
            if (r->error || !r->n_ops[src]) continue;
            double total = 0;
            for (int q = 0; q < r->n_ops[src]; q++)
                total += r->ops[src][q].percent > 0 ? r->ops[src][q].percent : 0;
            for (int q = 0; q < r->n_ops[src]; q++) {
                const op_share *s = &r->ops[src][q];
                double wdt = total > 0 && s->percent > 0 ? PANEL_W * s->percent / total : 0;
                int c = op_index(names, &nn, s->name);
                fprintf(
                    f,
                    "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>",
                    x, y + 5, wdt, ROW_H - 10, PALETTE[c % N_PALETTE]);
                char tip[160];
                snprintf(tip, sizeof tip, "%.40s %.1f%% (%.4f ms)", s->name, s->percent, s->ms);
                cli_xml_escape(f, tip);
                fputs("</title></rect>\n", f);
                x += wdt;
            }
        }
        j++;
    }
    double ly = TOP + 12 + n * ROW_H + 24;
    for (int i = 0; i < nn; i++) {
        double lx = 10 + (i % 5) * 170, yy = ly + (i / 5) * 18;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", lx,
                yy - 10, PALETTE[i % N_PALETTE]);
        char nm[64];
        svg_text(f, lx + 16, yy, "start", 11, NULL, cli_ellipsize(names[i], 24, nm, sizeof nm));
    }
    fputs("</svg>\n", f);
    return ferror(f) ? 0 : 1;
}

/* ---- the command ---------------------------------------------------------------- */

typedef int (*svg_writer)(FILE *, const row *, int, const group *, int);

static int write_to(const char *dir, const char *name, char *path, size_t n, FILE **f) {
    snprintf(path, n, "%s/%s", dir, name);
    *f = fopen(path, "w");
    if (!*f) fprintf(stderr, "diffrt: report: cannot write %s: %s\n", path, strerror(errno));
    return *f != NULL;
}

static int close_ok(FILE *f, int ok, const char *path) {
    if (fclose(f) != 0) ok = 0;
    if (!ok) fprintf(stderr, "diffrt: report: error writing %s: %s\n", path, strerror(errno));
    return ok;
}

int cmd_report(int argc, char **argv) {
    const char *out = NULL;
    char **files = calloc((size_t)argc + 1, sizeof *files);
    int nfiles = 0;
    if (!files) return cli_die("report: out of memory%s", "");
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "-h") == 0 || strcmp(argv[i], "--help") == 0) {
            fputs(REPORT_USAGE, stdout);
            free(files);
            return 0;
        } else if (strcmp(argv[i], "--out") == 0) {
            if (i + 1 >= argc) {
                free(files);
                return cli_die("report: --out needs a value (see diffrt report --help)%s", "");
            }
            out = argv[++i];
        } else if (argv[i][0] == '-' && argv[i][1]) {
            free(files);
            return cli_die("report: unknown argument \"%s\" (see diffrt report --help)", argv[i]);
        } else {
            files[nfiles++] = argv[i];
        }
    }
    if (!nfiles) {
        free(files);
        return cli_die("report: give one or more bench JSON files (diffrt bench --json FILE)%s",
                       "");
    }
    if (!out) {
        free(files);
        return cli_die("report: --out DIR is required%s", "");
    }
    enum { MAX_GROUPS = 16 };
    group groups[MAX_GROUPS];
    int ngroups = 0, nrows = 0, rc = 0;
    row *rows = NULL;
    cJSON **roots = calloc((size_t)nfiles, sizeof *roots);
    rerr e = {0};
    if (!roots) {
        rc = cli_die("report: out of memory%s", "");
        goto done;
    }
    for (int i = 0; i < nfiles; i++)
        if (!read_file(files[i], &roots[i], &rows, &nrows, groups, &ngroups, MAX_GROUPS, &e)) {
            fprintf(stderr, "diffrt: report: %s: %s\n", files[i], e.msg);
            rc = 2;
            goto done;
        }
    if (mkdir(out, 0777) != 0 && errno != EEXIST) {
        fprintf(stderr, "diffrt: report: cannot create --out %s: %s\n", out, strerror(errno));
        rc = 1;
        goto done;
    }
    char path[4096];
    FILE *f;
    if (!write_to(out, "report.md", path, sizeof path, &f) ||
        !close_ok(f, write_md(f, files, nfiles, roots, rows, nrows, groups, ngroups), path)) {
        rc = 1;
        goto done;
    }
    printf("report: wrote %s", path);
    for (int g = 0; g < ngroups; g++) {
        const char *pre[2] = {"tokens_per_s", "ops"};
        svg_writer wr[2] = {write_tok_svg, write_ops_svg};
        for (int k = 0; k < 2; k++) {
            char name[64];
            snprintf(name, sizeof name, "%s-%d.svg", pre[k], g + 1);
            if (!write_to(out, name, path, sizeof path, &f) ||
                !close_ok(f, wr[k](f, rows, nrows, &groups[g], g), path)) {
                rc = 1;
                goto done;
            }
            printf(", %s", name);
        }
    }
    printf(" (%d rows, %d table%s)\n", nrows, ngroups, ngroups == 1 ? "" : "s");
done:
    for (int i = 0; roots && i < nfiles; i++)
        cJSON_Delete(roots[i]);
    free(roots);
    free(rows);
    free(files);
    return rc;
}
