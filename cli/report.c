/* diffrt report: merges `diffrt bench --json` files (docs/bench-json.md)
 * from any number of machines and backends into DIR/report.md, one table
 * per model and settings with a row per (host, device, backend), and two
 * hand-written SVG charts per table: tokens per second (pp and tg bars) and
 * the time per op type (100% stacked bars, prefill and decode).
 *
 * Every string from a file goes through cli_md_escape / cli_xml_escape: a
 * device or host name cannot break a table or the XML. A file that is not a
 * bench result, or lacks a field, is a one-line error naming the file and
 * the field; so is a number that shapes a table (layers, n_prompt, ...)
 * outside its range. A measured figure that is negative, infinite or past
 * 1e15 is shown as "?" and left out of the charts' geometry.
 *
 * Linear in the rows: names are interned (one copy, compared by pointer),
 * duplicate runs are found through a hash set of row indices, a file's
 * backends entries are parsed one at a time from its text (no tree of the
 * whole file), and the tables' rows are grouped by one counting sort. */
#define _DEFAULT_SOURCE 1 /* realpath (1: as features.h defines it, for tests/test_report_work.c) */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"
#include "opts.h"
#include "outfile.h"
#include "diffrt/diffrt.h"
#include "diffrt/util.h" /* drt_read_text_file, drt_printable */

static const char REPORT_ABOUT[] =
    "Merges `diffrt bench --json` files (any machines, backends) into DIR/report.md: one table\n"
    "per model and pp/tg setting, a row per (host, device, backend) with pp and tg tok/s, the\n"
    "decode and prefill roofline fractions and the top ops; and SVG charts next to it:\n"
    "tokens_per_s-K.svg (pp and tg bars) and ops-K.svg (time per op type) for table K.\n"
    "DIR is written whole: beside itself under a temporary name, then moved into place, so\n"
    "a failure leaves the previous report as it was. A DIR that holds only a report's files\n"
    "is replaced as a whole; one that holds anything else needs --force. Exit status 2 on\n"
    "bad arguments or a file that is not a bench result (named), 1 when DIR cannot be written.\n";

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
    unsigned cp = n == 2   ? (c & 0x1f) << 6 | (s[1] & 0x3f)
                  : n == 3 ? (c & 0x0f) << 12 | (s[1] & 0x3f) << 6 | (s[2] & 0x3f)
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
/* ---- interned strings ----------------------------------------------------------- */

/* Steps the lookups among what was read before took: a slot of the string
 * pool or of the run set probed, a table compared. Every such lookup counts
 * here, so tests/test_report_work.c can hold report to a few steps a row:
 * a linear scan of the earlier rows for a duplicate (which made 60k rows
 * take 38 s) or a hash that puts every row in one probe chain fails it. */
static size_t report_steps;

/* Every string a row keeps (host, device, backend, error, op names) is
 * copied once into an arena and looked up by hash: 600k rows that say the
 * same error hold one copy, the JSON trees are freed file by file, and two
 * names are equal when their pointers are. */
typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    char data[];
} chunk;

typedef struct {
    const char *s;
    uint64_t h;
} slot;

typedef struct {
    chunk *chunks;
    slot *slots; /* open addressing, at most half full */
    size_t nslots, count;
} strpool;

static uint64_t hash_bytes(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

static int pool_grow(strpool *p) {
    size_t n = p->nslots ? 2 * p->nslots : 1024;
    slot *ns = calloc(n, sizeof *ns);
    if (!ns) return 0;
    for (size_t i = 0; i < p->nslots; i++) {
        if (!p->slots[i].s) continue;
        size_t k = p->slots[i].h & (n - 1);
        while (ns[k].s) k = (k + 1) & (n - 1);
        ns[k] = p->slots[i];
    }
    free(p->slots);
    p->slots = ns;
    p->nslots = n;
    return 1;
}

/* the pool's copy of s, or NULL when out of memory */
static const char *intern(strpool *p, const char *s) {
    if (2 * (p->count + 1) > p->nslots && !pool_grow(p)) return NULL;
    size_t len = strlen(s);
    uint64_t h = hash_bytes(s, len);
    size_t k = h & (p->nslots - 1);
    for (; report_steps++, p->slots[k].s; k = (k + 1) & (p->nslots - 1))
        if (p->slots[k].h == h && strcmp(p->slots[k].s, s) == 0) return p->slots[k].s;
    chunk *c = p->chunks;
    if (!c || c->cap - c->used < len + 1) {
        size_t cap = len + 1 > 65536 ? len + 1 : 65536;
        c = malloc(sizeof *c + cap);
        if (!c) return NULL;
        c->next = p->chunks;
        c->used = 0;
        c->cap = cap;
        p->chunks = c;
    }
    char *d = c->data + c->used;
    memcpy(d, s, len + 1);
    c->used += len + 1;
    p->slots[k] = (slot){d, h};
    p->count++;
    return d;
}

static void pool_free(strpool *p) {
    for (chunk *c = p->chunks, *n; c; c = n) {
        n = c->next;
        free(c);
    }
    free(p->slots);
}

/* ---- reading the files ------------------------------------------------------------- */

#define MAX_OPS 32
/* a measured figure (tok/s, a fraction, a peak, a share, ms) past this is
 * not a measurement: shown as "?", left out of the charts */
#define MAX_FIGURE 1e15
/* rows over all files: keeps every count and SVG height well inside an int */
#define MAX_ROWS 10000000
/* tables (model and settings) in one report */
#define MAX_GROUPS 16

typedef struct {
    const char *name;
    double percent, ms; /* NAN: not a valid figure */
} op_share;

/* figures are NAN where the file's number is not valid (negative,
 * infinite, over MAX_FIGURE): "?" in report.md and no geometry in the SVGs */
typedef struct {
    const char *file, *host, *device, *backend, *error;
    double pp_mean, pp_sd, tg_mean, tg_sd;
    double dec_frac, pre_frac, dec_peak, pre_peak;
    /* [0] prefill, [1] decode: n_ops[k] shares from ops_at[k] of the op array
     * (at most MAX_OPS per row and MAX_ROWS rows: within 32 bits) */
    uint32_t ops_at[2];
    /* --parallel: n_par entries from par_at of the parallel array */
    uint32_t par_at;
    unsigned char n_par;
    unsigned char n_ops[2], group;
    unsigned char has_pp, has_tg, dec_flag, pre_flag, dec_note;
    unsigned char dec_roof, pre_roof; /* 0: none (n/a), 1: a fraction, 2: a bad fraction ("?") */
} row;

/* one --parallel entry: N sequences decoding together (bench-json.md) */
typedef struct {
    int n_seq;
    double pp, tg; /* tok/s over all sequences; NAN: absent or not a valid figure */
} par_entry;

#define MAX_PAR 8 /* entries a row keeps (bench --parallel takes at most 8) */

typedef struct {
    const char *file, *model, *arch, *dtype;
    double params;
    int layers, dim;
    long p, n;
} group;

typedef struct {
    const char *file;
    char msg[512];
} rerr;

/* The runs (table, host, device, backend) read so far: a hash set of row
 * indices + 1 (0: empty) keyed on the rows' interned pointers, at most half
 * full; 4 bytes a slot. */
typedef struct {
    uint32_t *slot;
    size_t n, count;
} keyset;

static uint64_t key_hash(const row *r) {
    uint64_t h = (uint64_t)(uintptr_t)r->host * 0x9e3779b97f4a7c15ull;
    h = (h ^ (uint64_t)(uintptr_t)r->device) * 0xbf58476d1ce4e5b9ull;
    h = (h ^ (uint64_t)(uintptr_t)r->backend) * 0x94d049bb133111ebull;
    h ^= (uint64_t)r->group;
    return h ^ (h >> 29);
}

/* the slot of the run of r in s: the row of an earlier same run, or empty */
static size_t key_find(const keyset *s, const row *rows, const row *r) {
    size_t i = key_hash(r) & (s->n - 1);
    for (; report_steps++, s->slot[i]; i = (i + 1) & (s->n - 1)) {
        const row *o = &rows[s->slot[i] - 1];
        if (o->host == r->host && o->device == r->device && o->backend == r->backend && o->group == r->group) break;
    }
    return i;
}

static int key_grow(keyset *s, const row *rows) {
    size_t n = s->n ? 2 * s->n : 1024;
    keyset t = {calloc(n, sizeof *t.slot), n, s->count};
    if (!t.slot) return 0;
    for (size_t i = 0; i < s->n; i++)
        if (s->slot[i]) t.slot[key_find(&t, rows, &rows[s->slot[i] - 1])] = s->slot[i];
    free(s->slot);
    *s = t;
    return 1;
}

/* everything read so far */
typedef struct {
    strpool strs;
    row *rows;
    size_t nrows, cap_rows;
    op_share *ops;
    size_t nops, cap_ops;
    par_entry *par;
    size_t npar, cap_par;
    group groups[MAX_GROUPS];
    int ngroups;
    keyset keys;
    const char **fhost, **fcreated; /* per file, for the header of report.md (NULL: none) */
} report;

static int oom(rerr *e) {
    if (!e->msg[0]) snprintf(e->msg, sizeof e->msg, "out of memory");
    return 0;
}

/* the item at key of o, or an error naming file and path */
static const cJSON *need(const cJSON *o, const char *key, int type, const char *where, rerr *e) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    int ok = x && (type == cJSON_Number   ? cJSON_IsNumber(x)
                   : type == cJSON_String ? cJSON_IsString(x)
                   : type == cJSON_Array  ? cJSON_IsArray(x)
                                          : cJSON_IsObject(x));
    if (!ok && !e->msg[0])
        snprintf(e->msg, sizeof e->msg, "%s%s%s: %s %s", where, *where ? "." : "", key, x ? "expected" : "missing,",
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

/* a measured figure, NAN when it is not one (see MAX_FIGURE) */
static double figure(const cJSON *o, const char *key, const char *where, rerr *e) {
    double v = num(o, key, where, e);
    return isfinite(v) && v >= 0 && v <= MAX_FIGURE ? v : NAN;
}

/* a number that shapes a table (a heading, a grouping key): in [lo, hi] and
 * whole when `whole`, else an error naming the field */
static double shape(const cJSON *o, const char *key, double lo, double hi, int whole, const char *where, rerr *e) {
    const cJSON *x = need(o, key, cJSON_Number, where, e);
    if (!x) return 0;
    double v = x->valuedouble;
    if (v >= lo && v <= hi && (!whole || v == floor(v))) return v;
    if (!e->msg[0])
        snprintf(e->msg, sizeof e->msg, "%s.%s: expected %s in [%.0f, %.0f], got %g", where, key,
                 whole ? "an integer" : "a number", lo, hi, v);
    return 0;
}

/* an interned string field ("" with e->msg set when it is not one) */
static const char *str(strpool *p, const cJSON *o, const char *key, const char *where, rerr *e) {
    const cJSON *x = need(o, key, cJSON_String, where, e);
    if (!x) return "";
    const char *s = intern(p, x->valuestring);
    if (!s) oom(e);
    return s ? s : "";
}

/* a roofline entry: fraction (number or null) and flag (string or null) */
static void read_roof(const cJSON *r, const char *key, const char *peak_key, double *frac, unsigned char *state,
                      unsigned char *flag, double *peak, const char *where, rerr *e) {
    *frac = NAN;
    *state = *flag = 0;
    *peak = 0;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(r, key);
    if (!x) return;
    char w[128];
    snprintf(w, sizeof w, "%s.%s", where, key);
    const cJSON *fr = cJSON_GetObjectItemCaseSensitive(x, "fraction");
    const cJSON *fl = cJSON_GetObjectItemCaseSensitive(x, "flag");
    if (cJSON_IsNumber(fr)) {
        double v = fr->valuedouble;
        *state = isfinite(v) && v >= 0 && v <= MAX_FIGURE ? 1 : 2;
        *frac = *state == 1 ? v : NAN;
    } else if (!cJSON_IsNull(fr) && !e->msg[0]) {
        snprintf(e->msg, sizeof e->msg, "%s.fraction: expected a number or null", w);
    }
    *flag = cJSON_IsString(fl);
    *peak = figure(x, peak_key, w, e);
    /* a file that says more than 1.0 without the flag is flagged here all the same */
    if (*state == 1 && *frac > 1.0) *flag = 1;
}

/* an array of *cap elements of size es, n in use: room for one more (it
 * doubles, from `first`); 0 when out of memory */
static int room(void **a, size_t *cap, size_t n, size_t es, size_t first) {
    if (n < *cap) return 1;
    size_t nc = *cap ? 2 * *cap : first;
    void *p = realloc(*a, nc * es);
    if (!p) return 0;
    *a = p;
    *cap = nc;
    return 1;
}

static void read_ops(report *R, const cJSON *ops, const char *key, row *r, int k, const char *where, rerr *e) {
    r->ops_at[k] = (uint32_t)R->nops;
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(ops, key);
    if (!x) return;
    char w[128];
    snprintf(w, sizeof w, "%s.%s", where, key);
    (void)figure(x, "total_ms", w, e); /* required by the format; not shown */
    const cJSON *a = need(x, "ops", cJSON_Array, w, e), *it;
    cJSON_ArrayForEach(it, a) {
        if (r->n_ops[k] == MAX_OPS || e->msg[0]) break;
        if (!room((void **)&R->ops, &R->cap_ops, R->nops, sizeof *R->ops, 1024)) {
            oom(e);
            return;
        }
        op_share *s = &R->ops[R->nops++];
        r->n_ops[k]++;
        s->name = str(&R->strs, it, "op", w, e);
        s->percent = figure(it, "percent", w, e);
        s->ms = figure(it, "ms", w, e);
    }
}

/* the row's "parallel" array (bench --parallel), when the file has one */
static void read_parallel(report *R, const cJSON *b, row *r, const char *where, rerr *e) {
    r->par_at = (uint32_t)R->npar;
    const cJSON *a = cJSON_GetObjectItemCaseSensitive(b, "parallel"), *it;
    if (!a) return;
    char w[128];
    snprintf(w, sizeof w, "%s.parallel", where);
    if (!cJSON_IsArray(a)) {
        snprintf(e->msg, sizeof e->msg, "%s: expected an array", w);
        return;
    }
    cJSON_ArrayForEach(it, a) {
        if (r->n_par == MAX_PAR || e->msg[0]) break;
        if (!room((void **)&R->par, &R->cap_par, R->npar, sizeof *R->par, 256)) {
            oom(e);
            return;
        }
        par_entry *pe = &R->par[R->npar];
        pe->n_seq = (int)shape(it, "n_seq", 1, 4096, 1, w, e);
        if (e->msg[0]) return;
        const cJSON *pp = cJSON_GetObjectItemCaseSensitive(it, "pp"), *tg = cJSON_GetObjectItemCaseSensitive(it, "tg");
        pe->pp = pp ? figure(pp, "mean_tok_s", w, e) : NAN;
        pe->tg = tg ? figure(tg, "mean_tok_s", w, e) : NAN;
        R->npar++;
        r->n_par++;
    }
}

/* the group (table) of g: found, or added */
static int find_group(report *R, const group *g, rerr *e) {
    for (int gi = 0; gi < R->ngroups; gi++) {
        report_steps++;
        const group *h = &R->groups[gi];
        /* interned: equal strings are equal pointers */
        if (h->arch == g->arch && h->dtype == g->dtype && h->params == g->params && h->layers == g->layers &&
            h->dim == g->dim && h->p == g->p && h->n == g->n)
            return gi;
    }
    if (R->ngroups == MAX_GROUPS) {
        snprintf(e->msg, sizeof e->msg, "more than %d different models / settings in one report", MAX_GROUPS);
        return -1;
    }
    R->groups[R->ngroups] = *g;
    return R->ngroups++;
}

/* one backends[] entry into a new row; 0 and e->msg set on an error */
static int read_row(report *R, const cJSON *b, const char *w, const char *path, const char *hostname, const group *g,
                    int gi, rerr *e) {
    if (R->nrows == MAX_ROWS) {
        snprintf(e->msg, sizeof e->msg, "more than %d rows in one report", MAX_ROWS);
        return 0;
    }
    if (R->nrows == R->cap_rows) {
        size_t nc = R->cap_rows ? 2 * R->cap_rows : 256;
        row *nr = realloc(R->rows, nc * sizeof *nr);
        if (!nr) return oom(e);
        R->rows = nr;
        R->cap_rows = nc;
    }
    if (2 * (R->keys.count + 1) > R->keys.n && !key_grow(&R->keys, R->rows)) return oom(e);
    row *r = &R->rows[R->nrows];
    memset(r, 0, sizeof *r);
    r->file = path;
    r->host = hostname;
    r->group = (unsigned char)gi;
    r->backend = str(&R->strs, b, "backend", w, e);
    char wd[80];
    snprintf(wd, sizeof wd, "%s.device", w);
    const cJSON *dev = need(b, "device", cJSON_Object, w, e);
    r->device = dev ? str(&R->strs, dev, "name", wd, e) : "";
    const cJSON *status = need(b, "status", cJSON_String, w, e);
    if (e->msg[0]) return 0;
    r->dec_frac = r->pre_frac = NAN;
    size_t ki = key_find(&R->keys, R->rows, r);
    uint32_t self = (uint32_t)R->nrows + 1;
    if (strcmp(status->valuestring, "ok") != 0) {
        const cJSON *er = cJSON_GetObjectItemCaseSensitive(b, "error");
        r->error = intern(&R->strs, cJSON_IsString(er) ? er->valuestring : status->valuestring);
        if (!r->error) return oom(e);
        if (!R->keys.slot[ki]) {
            R->keys.slot[ki] = self;
            R->keys.count++;
        }
        R->nrows++;
        return 1;
    }
    char wx[96];
    if (g->p) {
        snprintf(wx, sizeof wx, "%s.pp", w);
        const cJSON *pp = need(b, "pp", cJSON_Object, w, e);
        r->pp_mean = figure(pp, "mean_tok_s", wx, e);
        r->pp_sd = figure(pp, "sd_tok_s", wx, e);
        r->has_pp = 1;
    }
    if (g->n) {
        snprintf(wx, sizeof wx, "%s.tg", w);
        const cJSON *tg = need(b, "tg", cJSON_Object, w, e);
        r->tg_mean = figure(tg, "mean_tok_s", wx, e);
        r->tg_sd = figure(tg, "sd_tok_s", wx, e);
        r->has_tg = 1;
    }
    if (e->msg[0]) return 0;
    snprintf(wx, sizeof wx, "%s.roofline", w);
    const cJSON *rl = need(b, "roofline", cJSON_Object, w, e);
    read_roof(rl, "decode", "peak_gbytes_per_s", &r->dec_frac, &r->dec_roof, &r->dec_flag, &r->dec_peak, wx, e);
    r->dec_note = cJSON_IsString(
        cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(rl, "decode"), "note"));
    read_roof(rl, "prefill", "peak_gflops", &r->pre_frac, &r->pre_roof, &r->pre_flag, &r->pre_peak, wx, e);
    snprintf(wx, sizeof wx, "%s.ops", w);
    const cJSON *ops = need(b, "ops", cJSON_Object, w, e);
    read_ops(R, ops, "prefill", r, 0, wx, e);
    read_ops(R, ops, "decode", r, 1, wx, e);
    read_parallel(R, b, r, w, e);
    if (e->msg[0]) return 0;
    if (R->keys.slot[ki]) {
        /* names from the files, shown escaped (a raw ESC never reaches the terminal) */
        char hb[80], db[100], bb[40];
        snprintf(e->msg, sizeof e->msg,
                 "host %s, device %s, backend %s is also in %.200s (same model and settings): give each run once",
                 drt_printable(r->host, hb, sizeof hb), drt_printable(r->device, db, sizeof db),
                 drt_printable(r->backend, bb, sizeof bb), R->rows[R->keys.slot[ki] - 1].file);
        return 0;
    }
    R->keys.slot[ki] = self;
    R->keys.count++;
    R->nrows++;
    return 1;
}

/* ---- skimming the text: the backends array one entry at a time ---- */

static const char *skip_ws(const char *p) {
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    return p;
}

/* past the string whose opening quote is at p, or NULL */
static const char *skip_string(const char *p) {
    for (p++; *p; p++) {
        if (*p == '\\' && p[1])
            p++;
        else if (*p == '"')
            return p + 1;
    }
    return NULL;
}

/* past the JSON value at p (brackets matched, strings skipped; scalars are
 * left to cJSON), or NULL */
static const char *skip_value(const char *p) {
    if (*p == '"') return skip_string(p);
    if (*p != '{' && *p != '[') {
        while (*p && !strchr(",]} \t\r\n", *p)) p++;
        return p;
    }
    char open[1024]; /* cJSON nests at most 1000 deep */
    int depth = 0;
    for (; *p; p++) {
        if (*p == '"') {
            p = skip_string(p);
            if (!p) return NULL;
            p--;
        } else if (*p == '{' || *p == '[') {
            if (depth == (int)sizeof open) return NULL;
            open[depth++] = *p;
        } else if (*p == '}' || *p == ']') {
            if (!depth || open[--depth] != (*p == '}' ? '{' : '[')) return NULL;
            if (!depth) return p + 1;
        }
    }
    return NULL;
}

/* [*b0, *b1): the array of the top-level key "backends" of the object in s,
 * brackets included; 0 when s is not an object that skims cleanly up to it
 * (cJSON then reads the whole text and judges it) */
static int find_backends(const char *s, const char **b0, const char **b1) {
    const char *p = skip_ws(s);
    if (*p++ != '{') return 0;
    for (;;) {
        p = skip_ws(p);
        if (*p != '"') return 0;
        const char *k = p + 1, *q = skip_string(p);
        if (!q) return 0;
        p = skip_ws(q);
        if (*p != ':') return 0;
        p = skip_ws(p + 1);
        const char *v = p, *e = skip_value(p);
        if (!e || e == v) return 0;
        if (q - k - 1 == 8 && memcmp(k, "backends", 8) == 0) {
            if (*v != '[') return 0;
            *b0 = v;
            *b1 = e;
            return 1;
        }
        p = skip_ws(e);
        if (*p++ != ',') return 0;
    }
}

/* Parses the text of one file. Its backends array, which holds nearly all of
 * a large file, is left out of the tree (an empty array there) when it can
 * be found: *b0 .. *b1 then hold its text for read_file to parse one entry at
 * a time (a tree is ten times the size of its text). NULL: not valid JSON. */
static cJSON *parse_top(const char *txt, const char **b0, const char **b1) {
    *b0 = *b1 = NULL;
    /* the whole text is the one value (cJSON_Parse stops after it: a file
     * with a second object or junk appended read as fine) */
    if (!find_backends(txt, b0, b1)) return cJSON_ParseWithOpts(txt, NULL, 1);
    size_t head = (size_t)(*b0 - txt), tail = strlen(*b1);
    char *top = malloc(head + 2 + tail + 1);
    if (!top) return NULL;
    memcpy(top, txt, head);
    memcpy(top + head, "[]", 2);
    memcpy(top + head + 2, *b1, tail + 1);
    cJSON *root = cJSON_ParseWithOpts(top, NULL, 1);
    free(top);
    return root;
}

/* Reads the file at index fi: its rows, its group (found or added), its
 * header line. 0 and e->msg set on a file that is not a bench result. */
static int read_file(report *R, const char *path, int fi, rerr *e) {
    char *txt = NULL;
    e->file = path;
    e->msg[0] = 0;
    if (drt_read_text_file(path, &txt, NULL) != DRT_OK) {
        snprintf(e->msg, sizeof e->msg, "cannot read: %s", drt_last_error());
        return 0;
    }
    const char *b0, *b1;
    cJSON *root = parse_top(txt, &b0, &b1);
    int ok = 0;
    if (!root) {
        snprintf(e->msg, sizeof e->msg, "not valid JSON");
        goto out;
    }
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "kind");
    if (!cJSON_IsObject(root) || !cJSON_IsString(kind) || strcmp(kind->valuestring, "diffrt-bench") != 0) {
        snprintf(e->msg, sizeof e->msg, "not a diffrt bench result (no \"kind\": \"diffrt-bench\")");
        goto out;
    }
    double sv = num(root, "schema_version", "", e);
    if (e->msg[0]) goto out;
    if (sv != BENCH_SCHEMA_VERSION) {
        /* the shortest digits that give sv back: %g wrote 1.0000001 as "1", the very version read */
        char v[32];
        for (int p = 6; p <= 17; p++)
            if (snprintf(v, sizeof v, "%.*g", p, sv) > 0 && strtod(v, NULL) == sv) break;
        snprintf(e->msg, sizeof e->msg, "schema_version %s; this diffrt reads %d (an integer)", v,
                 BENCH_SCHEMA_VERSION);
        goto out;
    }
    const cJSON *host = need(root, "host", cJSON_Object, "", e);
    const cJSON *model = need(root, "model", cJSON_Object, "", e);
    const cJSON *set = need(root, "settings", cJSON_Object, "", e);
    const cJSON *bes = need(root, "backends", cJSON_Array, "", e);
    if (e->msg[0]) goto out;
    strpool *sp = &R->strs;
    group g = {.file = path,
               .model = str(sp, model, "name", "model", e),
               .arch = str(sp, model, "architecture", "model", e),
               .dtype = str(sp, model, "dtype", "model", e),
               .params = shape(model, "params", 0, MAX_FIGURE, 0, "model", e),
               .layers = (int)shape(model, "layers", 0, 1 << 20, 1, "model", e),
               .dim = (int)shape(model, "dim", 0, 1 << 24, 1, "model", e),
               .p = (long)shape(set, "n_prompt", 0, DRT_MAX_CTX, 1, "settings", e),
               .n = (long)shape(set, "n_gen", 0, DRT_MAX_CTX, 1, "settings", e)};
    const char *hostname = str(sp, host, "hostname", "host", e);
    if (e->msg[0]) goto out;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "created");
    R->fhost[fi] = hostname;
    R->fcreated[fi] = cJSON_IsString(c) ? intern(sp, c->valuestring) : NULL;
    if (cJSON_IsString(c) && !R->fcreated[fi]) {
        oom(e);
        goto out;
    }
    /* the table: same model shape and dtype, same pp and tg */
    int gi = find_group(R, &g, e);
    if (gi < 0) goto out;
    int i = 0;
    const cJSON *b;
    cJSON_ArrayForEach(b, bes) { /* the whole tree: backends was not skimmed */
        char w[64];
        snprintf(w, sizeof w, "backends[%d]", i++);
        if (!read_row(R, b, w, path, hostname, &g, gi, e)) goto out;
    }
    for (const char *p = b0 ? skip_ws(b0 + 1) : NULL; p && *p != ']';) {
        char w[64];
        snprintf(w, sizeof w, "backends[%d]", i++);
        const char *end = skip_value(p);
        cJSON *one = end && end > p ? cJSON_ParseWithLength(p, (size_t)(end - p)) : NULL;
        if (!one) {
            snprintf(e->msg, sizeof e->msg, "not valid JSON (in %s)", w);
            goto out;
        }
        int r = read_row(R, one, w, path, hostname, &g, gi, e);
        cJSON_Delete(one);
        if (!r) goto out;
        p = skip_ws(end);
        if (*p == ',') {
            p = skip_ws(p + 1);
            if (*p == ']') p = NULL; /* a trailing comma */
        } else if (*p != ']') {
            p = NULL;
        }
        if (!p) {
            snprintf(e->msg, sizeof e->msg, "not valid JSON (after %s)", w);
            goto out;
        }
    }
    ok = 1;
out:
    cJSON_Delete(root);
    free(txt);
    return ok;
}

static void report_free(report *R) {
    pool_free(&R->strs);
    free(R->rows);
    free(R->ops);
    free(R->par);
    free(R->keys.slot);
    free(R->fhost);
    free(R->fcreated);
}

/* ---- report.md ---------------------------------------------------------------- */

/* a figure in report.md: "?" when the file's number was not one */
static void md_fig(FILE *f, const char *fmt, double v) {
    if (isnan(v))
        fputc('?', f);
    else
        fprintf(f, fmt, v);
}

static void md_roof(FILE *f, int state, double frac, int flag, int note, double peak, const char *unit) {
    if (state == 0) {
        fputs(" n/a |", f);
        return;
    }
    fputc(' ', f);
    md_fig(f, "%.3f", frac);
    fputs(" of ", f);
    md_fig(f, "%.1f", peak);
    fprintf(f, " %s%s%s |", unit, flag ? " (**" BENCH_ROOF_FLAG "**)" : "", note ? " (" BENCH_CACHE_NOTE ")" : "");
}

static void md_top_ops(FILE *f, const op_share *s, int n) {
    fputc(' ', f);
    for (int i = 0; i < n && i < 3; i++) {
        if (i) fputs(", ", f);
        cli_md_escape(f, s[i].name);
        fputc(' ', f);
        md_fig(f, "%.0f", s[i].percent);
        fputc('%', f);
    }
    fputs(" |", f);
}

static void md_tok(FILE *f, int has, double mean, double sd) {
    if (!has) {
        fputs(" |", f);
        return;
    }
    fputc(' ', f);
    md_fig(f, "%.2f", mean);
    fputs(" \xc2\xb1 ", f);
    md_fig(f, "%.2f", sd);
    fputs(" |", f);
}

/* a number of tok/s, "?" when not valid, "-" when absent */
static void md_num(FILE *f, int has, double v) {
    if (!has)
        fputs(" - |", f);
    else if (isnan(v))
        fputs(" ? |", f);
    else
        fprintf(f, " %.2f |", v);
}

/* the table's --parallel rows (bench --parallel: N sequences decoding
 * together, as llama-batched-bench), when any of its rows has them */
static void md_parallel(FILE *f, const report *R, const size_t *idx, size_t lo, size_t hi, const group *G) {
    int any = 0;
    for (size_t i = lo; i < hi && !any; i++) any = R->rows[idx[i]].n_par > 0 && !R->rows[idx[i]].error;
    if (!any) return;
    fprintf(f,
            "\nParallel sequences (bench --parallel: N prompts of %ld tokens, then %ld decode steps of N rows):\n\n"
            "| host | device | backend | sequences | pp tok/s (all) | tg tok/s (all) | tg tok/s (one) | tg vs the "
            "first N |\n|---|---|---|---:|---:|---:|---:|---:|\n",
            G->p, G->n);
    for (size_t i = lo; i < hi; i++) {
        const row *r = &R->rows[idx[i]];
        if (r->error) continue;
        const par_entry *pe = R->par + r->par_at;
        for (int k = 0; k < r->n_par; k++) {
            fputs("| ", f);
            cli_md_escape(f, r->host);
            fputs(" | ", f);
            cli_md_escape(f, r->device);
            fputs(" | ", f);
            cli_md_escape(f, r->backend);
            fprintf(f, " | %d |", pe[k].n_seq);
            md_num(f, G->p > 0, pe[k].pp);
            md_num(f, G->n > 0, pe[k].tg);
            md_num(f, G->n > 0, pe[k].tg / pe[k].n_seq);
            if (G->n > 0 && pe[0].tg > 0 && !isnan(pe[k].tg))
                fprintf(f, " %.2fx |\n", pe[k].tg / pe[0].tg);
            else
                fputs(" - |\n", f);
        }
    }
}

/* rows of table g: idx[start[g] .. start[g + 1]) */
static int write_md(FILE *f, char **files, int nfiles, const report *R, const size_t *idx, const size_t *start) {
    fprintf(f, "# diffrt bench report\n\nMerged from %d file%s:", nfiles, nfiles == 1 ? "" : "s");
    for (int i = 0; i < nfiles; i++) {
        fputs(i ? ", " : " ", f);
        cli_md_escape(f, files[i]);
        fputs(" (", f);
        cli_md_escape(f, R->fhost[i] ? R->fhost[i] : "?");
        if (R->fcreated[i]) {
            fputs(", ", f);
            cli_md_escape(f, R->fcreated[i]);
        }
        fputs(")", f);
    }
    fprintf(f,
            ".\n\nRoofline: decode tok/s times the bytes a decode step reads, over the backend's "
            "measured streaming bandwidth; prefill tok/s times the FLOPs per prompt token, over its "
            "measured GEMM peak (docs/bench-json.md). A fraction above 1.0 is flagged "
            "(\"%s\"): the peak was under-measured, it is not a result. \"?\": the file's number "
            "is not a measurement (negative, infinite or absurdly large).\n",
            BENCH_ROOF_FLAG);
    for (int g = 0; g < R->ngroups; g++) {
        const group *G = &R->groups[g];
        char t[512];
        snprintf(t, sizeof t, "%s: %s, %.2f M params, %s, %d layers, dim %d; pp%ld, tg%ld", G->model, G->arch,
                 G->params / 1e6, G->dtype, G->layers, G->dim, G->p, G->n);
        fprintf(f, "\n## %d. ", g + 1);
        cli_md_escape(f, t);
        fprintf(f,
                "\n\n| host | device | backend | pp%ld tok/s | tg%ld tok/s | decode roofline | "
                "prefill roofline "
                "| top ops, decode | top ops, prefill |\n|---|---|---|---:|---:|---|---|---|---|\n",
                G->p, G->n);
        for (size_t i = start[g]; i < start[g + 1]; i++) {
            const row *r = &R->rows[idx[i]];
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
            md_tok(f, r->has_pp, r->pp_mean, r->pp_sd);
            md_tok(f, r->has_tg, r->tg_mean, r->tg_sd);
            md_roof(f, r->dec_roof, r->dec_frac, r->dec_flag, r->dec_note, r->dec_peak, "GB/s");
            md_roof(f, r->pre_roof, r->pre_frac, r->pre_flag, 0, r->pre_peak, "GFLOP/s");
            md_top_ops(f, R->ops + r->ops_at[1], r->n_ops[1]);
            md_top_ops(f, R->ops + r->ops_at[0], r->n_ops[0]);
            fputc('\n', f);
        }
        md_parallel(f, R, idx, start[g], start[g + 1], G);
        fprintf(f, "\n![tokens per second](tokens_per_s-%d.svg)\n\n![time per op type](ops-%d.svg)\n", g + 1, g + 1);
    }
    return ferror(f) ? 0 : 1;
}

/* ---- SVG ------------------------------------------------------------------------ */

#define LABEL_W 330
#define PANEL_W 250
#define ROW_H 32
#define TOP 48

static void svg_text(FILE *f, double x, double y, const char *anchor, int size, const char *weight, const char *s) {
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"%d\" text-anchor=\"%s\"%s%s%s>", x, y, size, anchor,
            weight ? " font-weight=\"" : "", weight ? weight : "", weight ? "\"" : "");
    cli_xml_escape(f, s);
    fputs("</text>\n", f);
}

/* a row's label, right-aligned before the bars: "backend, host" and the device under it */
static void svg_row_label(FILE *f, const row *r, double y) {
    char tmp[600], cut[300];
    snprintf(tmp, sizeof tmp, "%s, %s", r->backend, r->host);
    svg_text(f, LABEL_W - 8, y + 12, "end", 11, "bold", cli_ellipsize(tmp, 48, cut, sizeof cut));
    fprintf(f, "<text x=\"%d\" y=\"%.1f\" font-size=\"9\" text-anchor=\"end\" fill=\"#555555\">", LABEL_W - 8, y + 24);
    cli_xml_escape(f, cli_ellipsize(r->device, 60, cut, sizeof cut));
    fputs("</text>\n", f);
}

static void svg_begin(FILE *f, int w, long h, const char *title) {
    fprintf(f,
            "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%ld\" viewBox=\"0 0 %d "
            "%ld\" "
            "font-family=\"sans-serif\">\n"
            "<rect x=\"0\" y=\"0\" width=\"%d\" height=\"%ld\" fill=\"#ffffff\"/>\n",
            w, h, w, h, w, h);
    svg_text(f, 10, 22, "start", 15, "bold", title);
}

/* the rows of one table, in file order */
typedef struct {
    const report *R;
    const size_t *idx;
    size_t n;
} table;

/* tokens per second: a pp panel and a tg panel, one bar per row, each panel its own scale;
 * a figure that is not valid ("?") gets no bar, its sd no whisker */
static int write_tok_svg(FILE *f, const table *T, const group *G) {
    double mx[2] = {0, 0};
    for (size_t i = 0; i < T->n; i++) {
        const row *r = &T->R->rows[T->idx[i]];
        if (r->error) continue;
        for (int k = 0; k < 2; k++) {
            double v = k ? r->tg_mean : r->pp_mean, sd = k ? r->tg_sd : r->pp_sd;
            /* the scale holds the whiskers: mean + sd */
            double top = isnan(v) ? 0 : isnan(sd) ? v : v + sd;
            if (top > mx[k]) mx[k] = top;
        }
    }
    long n = (long)T->n;
    int w = LABEL_W + 2 * (PANEL_W + 90);
    long h = TOP + 20 + n * ROW_H + 20;
    char title[512];
    snprintf(title, sizeof title, "%s: tokens per second (mean, whisker: sd)", G->model);
    svg_begin(f, w, h, title);
    const char *color[2] = {"#4e79a7", "#f28e2b"};
    for (int k = 0; k < 2; k++) {
        double x0 = LABEL_W + k * (PANEL_W + 90);
        char head[64];
        snprintf(head, sizeof head, "%s%ld tok/s", k ? "tg" : "pp", k ? G->n : G->p);
        svg_text(f, x0, TOP, "start", 12, "bold", head);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%ld\" stroke=\"#888888\"/>\n", x0, TOP + 8, x0,
                TOP + 12 + n * ROW_H);
    }
    for (size_t j = 0; j < T->n; j++) {
        const row *r = &T->R->rows[T->idx[j]];
        double y = TOP + 12 + (double)j * ROW_H;
        svg_row_label(f, r, y);
        for (int k = 0; k < 2; k++) {
            double x0 = LABEL_W + k * (PANEL_W + 90);
            if (r->error) {
                if (k == 0) svg_text(f, x0 + 4, y + 20, "start", 11, NULL, "error (see report.md)");
                continue;
            }
            double v = k ? r->tg_mean : r->pp_mean, sd = k ? r->tg_sd : r->pp_sd;
            if ((k == 0 && !r->has_pp) || (k == 1 && !r->has_tg)) continue;
            if (isnan(v)) {
                svg_text(f, x0 + 4, y + 20, "start", 11, NULL, "?");
                continue;
            }
            double bw = mx[k] > 0 ? PANEL_W * v / mx[k] : 0;
            fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%d\" fill=\"%s\"><title>", x0, y + 5, bw,
                    ROW_H - 10, color[k]);
            char tip[96];
            if (isnan(sd))
                snprintf(tip, sizeof tip, "%.2f \xc2\xb1 ? tok/s", v);
            else
                snprintf(tip, sizeof tip, "%.2f \xc2\xb1 %.2f tok/s", v, sd);
            cli_xml_escape(f, tip);
            fputs("</title></rect>\n", f);
            double hi = bw;
            if (!isnan(sd)) {
                double lo = mx[k] > 0 ? PANEL_W * (v - sd) / mx[k] : 0;
                hi = mx[k] > 0 ? PANEL_W * (v + sd) / mx[k] : 0;
                if (lo < 0) lo = 0;
                fprintf(f,
                        "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" "
                        "stroke=\"#333333\"/>\n",
                        x0 + lo, y + ROW_H / 2.0, x0 + hi, y + ROW_H / 2.0);
            }
            char val[32];
            snprintf(val, sizeof val, "%.1f", v);
            svg_text(f, x0 + (hi > bw ? hi : bw) + 4, y + 20, "start", 11, NULL, val);
        }
    }
    fputs("</svg>\n", f);
    return ferror(f) ? 0 : 1;
}

/* a fixed colour per op name, in the order the group first shows them */
static const char *PALETTE[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
                                "#ff9da7", "#9c755f", "#bab0ac", "#86bcb6", "#d37295", "#8cd17d", "#499894"};
#define N_PALETTE ((int)(sizeof PALETTE / sizeof PALETTE[0]))

/* names are interned: the same name is the same pointer */
static int op_index(const char **names, int *n, const char *name) {
    for (int i = 0; i < *n; i++)
        if (names[i] == name) return i;
    if (*n == MAX_OPS) return MAX_OPS - 1;
    names[*n] = name;
    return (*n)++;
}

/* time per op type: a 100% stacked bar per row for the prefill and one for the decode step;
 * a share that is not valid ("?") is left out of the bar */
static int write_ops_svg(FILE *f, const table *T, const group *G) {
    const char *names[MAX_OPS];
    int nn = 0;
    const op_share *ops = T->R->ops;
    for (size_t i = 0; i < T->n; i++) {
        const row *r = &T->R->rows[T->idx[i]];
        for (int k = 1; k >= 0; k--)
            for (int q = 0; q < r->n_ops[k]; q++) op_index(names, &nn, ops[r->ops_at[k] + (size_t)q].name);
    }
    long n = (long)T->n;
    int legend_rows = (nn + 4) / 5;
    int w = LABEL_W + 2 * (PANEL_W + 40);
    long h = TOP + 20 + n * ROW_H + 24 + legend_rows * 18 + 10;
    char title[512];
    snprintf(title, sizeof title, "%s: time per op type (node by node, synchronized)", G->model);
    svg_begin(f, w, h, title);
    for (int k = 0; k < 2; k++) {
        char head[64];
        snprintf(head, sizeof head, k ? "decode step at position %ld" : "prefill of %ld tokens", G->p);
        svg_text(f, LABEL_W + k * (PANEL_W + 40), TOP, "start", 12, "bold", head);
    }
    for (size_t j = 0; j < T->n; j++) {
        const row *r = &T->R->rows[T->idx[j]];
        double y = TOP + 12 + (double)j * ROW_H;
        svg_row_label(f, r, y);
        for (int k = 0; k < 2; k++) {
            double x = LABEL_W + k * (PANEL_W + 40);
            if (r->error || !r->n_ops[k]) continue;
            const op_share *s0 = ops + r->ops_at[k];
            double total = 0;
            for (int q = 0; q < r->n_ops[k]; q++) total += isnan(s0[q].percent) ? 0 : s0[q].percent;
            for (int q = 0; q < r->n_ops[k]; q++) {
                const op_share *s = &s0[q];
                int c = op_index(names, &nn, s->name);
                if (isnan(s->percent) || !(total > 0)) continue;
                double wdt = PANEL_W * s->percent / total;
                fprintf(f, "<rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%d\" fill=\"%s\"><title>", x, y + 5,
                        wdt, ROW_H - 10, PALETTE[c % N_PALETTE]);
                char tip[160];
                if (isnan(s->ms))
                    snprintf(tip, sizeof tip, "%.40s %.1f%% (? ms)", s->name, s->percent);
                else
                    snprintf(tip, sizeof tip, "%.40s %.1f%% (%.4f ms)", s->name, s->percent, s->ms);
                cli_xml_escape(f, tip);
                fputs("</title></rect>\n", f);
                x += wdt;
            }
        }
    }
    double ly = TOP + 12 + (double)n * ROW_H + 24;
    for (int i = 0; i < nn; i++) {
        double lx = 10 + (i % 5) * 170, yy = ly + (i / 5) * 18;
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"12\" height=\"12\" fill=\"%s\"/>\n", lx, yy - 10,
                PALETTE[i % N_PALETTE]);
        char nm[64];
        svg_text(f, lx + 16, yy, "start", 11, NULL, cli_ellipsize(names[i], 24, nm, sizeof nm));
    }
    fputs("</svg>\n", f);
    return ferror(f) ? 0 : 1;
}

/* ---- the command ---------------------------------------------------------------- */

/* The first entry of the directory at path that report does not write
 * (report.md, tokens_per_s-K.svg, ops-K.svg) into name[n]: 1 when there is
 * one, 0 when there is none or no such directory. */
static int foreign_entry(const char *path, char *name, size_t n) {
    DIR *d = opendir(path);
    if (!d) return 0;
    struct dirent *e;
    int found = 0;
    while (!found && (e = readdir(d))) {
        const char *s = e->d_name;
        if (!strcmp(s, ".") || !strcmp(s, "..") || !strcmp(s, "report.md")) continue;
        size_t k = !strncmp(s, "tokens_per_s-", 13) ? 13 : !strncmp(s, "ops-", 4) ? 4 : 0;
        size_t digits = k ? strspn(s + k, "0123456789") : 0;
        if (k && digits && s[k] != '0' && !strcmp(s + k + digits, ".svg")) continue;
        snprintf(name, n, "%s", s);
        found = 1;
    }
    closedir(d);
    return found;
}

/* DIR/name written whole or not at all (cli/outfile.h): 1, or 0 with the message printed */
static int write_out(const char *dir, const char *name, int (*fn)(FILE *, const void *), const void *arg) {
    char path[PATH_MAX];
    if (snprintf(path, sizeof path, "%s/%s", dir, name) >= (int)sizeof path) {
        fprintf(stderr, "diffrt: report: --out %s: path too long\n", dir);
        return 0;
    }
    cli_outfile o;
    if (cli_out_open(&o, "report", path)) return 0;
    (void)fn(o.f, arg); /* cli_out_close checks every write */
    return cli_out_close(&o, "report") == 0;
}

typedef struct {
    char **files;
    int nfiles;
    const report *R;
    const size_t *idx, *start;
} md_args;

static int md_writer(FILE *f, const void *p) {
    const md_args *a = p;
    return write_md(f, a->files, a->nfiles, a->R, a->idx, a->start);
}

typedef struct {
    const table *T;
    const group *G;
} svg_args;

static int tok_writer(FILE *f, const void *p) {
    const svg_args *a = p;
    return write_tok_svg(f, a->T, a->G);
}

static int ops_writer(FILE *f, const void *p) {
    const svg_args *a = p;
    return write_ops_svg(f, a->T, a->G);
}

int cmd_report(int argc, char **argv) {
    const char *out = NULL;
    int force = 0;
    char **files = calloc((size_t)argc + 1, sizeof *files);
    int nfiles = 0;
    if (!files) return cli_die("report: out of memory%s", "");
    const cli_opt opts[] = {
        {.name = "--out", .kind = CLI_STR, .dst = &out, .meta = "DIR", .help = "where report.md and the charts go"},
        {.name = "--force",
         .kind = CLI_FLAG,
         .dst = &force,
         .help = "replace DIR as a whole even when it holds other files"},
        {0}};
    const cli_cmd cmd = {.name = "report",
                         .synopsis = "FILE... --out DIR [--force]",
                         .about = REPORT_ABOUT,
                         .opts = opts,
                         .positional = files,
                         .n_positional = &nfiles};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc != CLI_PARSED) {
        free(files);
        return prc;
    }
    if (!nfiles) {
        free(files);
        return cli_die("report: give one or more bench JSON files (diffrt bench --json FILE)%s", "");
    }
    if (!out) {
        free(files);
        return cli_die("report: --out DIR is required%s", "");
    }
    int rc = 0;
    report R = {0};
    size_t *idx = NULL, start[MAX_GROUPS + 1] = {0};
    rerr e = {0};
    cli_outdir od = {0};
    R.fhost = calloc((size_t)nfiles, sizeof *R.fhost);
    R.fcreated = calloc((size_t)nfiles, sizeof *R.fcreated);
    if (!R.fhost || !R.fcreated) {
        rc = cli_die("report: out of memory%s", "");
        goto done;
    }
    for (int i = 0; i < nfiles; i++)
        if (!read_file(&R, files[i], i, &e)) {
            fprintf(stderr, "diffrt: report: %s: %s\n", files[i], e.msg);
            rc = 2;
            goto done;
        }
    /* the rows of each table together, in file order: a counting sort by group */
    idx = malloc((R.nrows ? R.nrows : 1) * sizeof *idx);
    if (!idx) {
        rc = cli_die("report: out of memory%s", "");
        goto done;
    }
    for (size_t i = 0; i < R.nrows; i++) start[R.rows[i].group + 1]++;
    for (int g = 0; g < R.ngroups; g++) start[g + 1] += start[g];
    {
        size_t fill[sizeof start / sizeof start[0]];
        memcpy(fill, start, sizeof fill);
        for (size_t i = 0; i < R.nrows; i++) idx[fill[R.rows[i].group]++] = i;
    }
    /* The files are one set (report.md links its charts): written into a
     * fresh directory beside DIR that then takes DIR's place, as quantize
     * does (cli_outdir), so a failure or a kill midway leaves the previous
     * set whole, never a new report.md with the old charts. A previous
     * report is replaced as a whole without asking (no chart of a table it
     * had and this one lacks survives); other files only with --force. */
    char foreign[256], shown[600];
    if (!force && foreign_entry(out, foreign, sizeof foreign)) {
        fprintf(stderr,
                "diffrt: report: --out %s holds \"%s\", which is not a file report writes; pass "
                "--force to replace the directory as a whole, or name another one\n",
                out, drt_printable(foreign, shown, sizeof shown));
        rc = 2;
        goto done;
    }
    /* an input inside --out is refused: replacing it would delete it */
    drt_outdir_opts oo;
    cli_outdir_opts(&oo, "report", 1, NULL);
    oo.keep = (const char *const *)files;
    oo.n_keep = nfiles;
    if ((rc = cli_outdir_open(&od, "report", out, &oo))) goto done;
    md_args ma = {files, nfiles, &R, idx, start};
    rc = 1;
    if (!write_out(od.tmp, "report.md", md_writer, &ma)) goto done;
    for (int g = 0; g < R.ngroups; g++) {
        table T = {&R, idx + start[g], start[g + 1] - start[g]};
        svg_args sa = {&T, &R.groups[g]};
        for (int k = 0; k < 2; k++) {
            char name[64];
            snprintf(name, sizeof name, "%s-%d.svg", k ? "ops" : "tokens_per_s", g + 1);
            if (!write_out(od.tmp, name, k ? ops_writer : tok_writer, &sa)) goto done;
        }
    }
    if (cli_outdir_commit(&od, "report")) goto done;
    rc = 0;
    printf("report: wrote %s/report.md", out);
    for (int g = 0; g < R.ngroups; g++) printf(", tokens_per_s-%d.svg, ops-%d.svg", g + 1, g + 1);
    printf(" (%zu rows, %d table%s)\n", R.nrows, R.ngroups, R.ngroups == 1 ? "" : "s");
done:
    if (rc) cli_outdir_discard(&od);
    report_free(&R);
    free(idx);
    free(files);
    return rc;
}
