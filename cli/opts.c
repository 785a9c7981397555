/* The table-driven option parser of every diffrt command (cli/opts.h). */
#include "opts.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* where an option's help starts; a longer name + value starts it on the next line */
#define HELP_COL 24

int cli_finite_nonneg(double x) {
    return x >= 0 && isfinite(x);
}
int cli_positive(double x) {
    return x > 0 && isfinite(x);
}
int cli_fraction(double x) {
    return x >= 0 && x <= 1;
}
int cli_open_unit(double x) {
    return x > 0 && x <= 1;
}

static int matches(const cli_opt *o, const char *a) {
    if (strcmp(a, o->name) == 0) return 1;
    return o->short_name && a[0] == '-' && a[1] == o->short_name && !a[2];
}

static const cli_opt *find(const cli_opt *opts, const char *a) {
    for (const cli_opt *o = opts; o->name; o++)
        if (matches(o, a)) return o;
    return NULL;
}

/* "-x, --name META" or "--name META", as --help shows it; its length */
static int left_column(const cli_opt *o, char *buf, size_t n) {
    int k = o->short_name ? snprintf(buf, n, "-%c, %s", o->short_name, o->name) : snprintf(buf, n, "%s", o->name);
    if (o->meta && k >= 0 && (size_t)k < n) k += snprintf(buf + k, n - (size_t)k, " %s", o->meta);
    return k;
}

static void print_opt(FILE *f, const char *left, const char *help) {
    int k = fprintf(f, "  %s", left);
    if (k > HELP_COL - 1) {
        fputc('\n', f);
        k = 0;
    }
    for (const char *h = help ? help : ""; *h;) {
        size_t len = strcspn(h, "\n");
        fprintf(f, "%*s%.*s\n", HELP_COL - k, "", (int)len, h);
        k = 0;
        h += len + (h[len] == '\n');
    }
    if (!help || !*help) fputc('\n', f);
}

void cli_print_help(const cli_cmd *c, FILE *f) {
    fprintf(f, "usage: diffrt %s %s\n", c->name, c->synopsis ? c->synopsis : "[options]");
    if (c->about) fprintf(f, "\n%s", c->about);
    fprintf(f, "\noptions:\n");
    char left[128];
    for (const cli_opt *o = c->opts; o->name; o++) {
        left_column(o, left, sizeof left);
        print_opt(f, left, o->help);
    }
    print_opt(f, "-h, --help", "this help");
    if (c->footer) fprintf(f, "\n%s", c->footer);
}

void cli_print_commands(const cli_command *cmds, FILE *f) {
    for (const cli_command *c = cmds; c->name; c++) print_opt(f, c->name, c->summary);
}

static int bad_value(const cli_cmd *c, const cli_opt *o, const char *v) {
    if (o->bad)
        fprintf(stderr, "diffrt: %s: %s, got \"%s\"\n", c->name, o->bad, v);
    else
        fprintf(stderr, "diffrt: %s: %s wants an integer in [%ld, %ld], got \"%s\"\n", c->name, o->name, o->lo, o->hi,
                v);
    return 2;
}

/* v into o's destination; 0 when it is not a value o takes */
static int store(const cli_opt *o, const char *v) {
    char *end;
    errno = 0;
    switch (o->kind) {
    case CLI_FLAG: *(int *)o->dst = 1; return 1;
    case CLI_STR: *(const char **)o->dst = v; return 1;
    case CLI_LONG: return cli_parse_long(v, o->lo, o->hi, (long *)o->dst);
    case CLI_INT: {
        long x;
        if (!cli_parse_long(v, o->lo, o->hi, &x) || x < INT_MIN || x > INT_MAX) return 0;
        *(int *)o->dst = (int)x;
        return 1;
    }
    case CLI_U64: {
        unsigned long long x = strtoull(v, &end, 10);
        if (errno || end == v || *end || v[0] == '-') return 0;
        *(unsigned long long *)o->dst = x;
        return 1;
    }
    case CLI_DOUBLE: {
        double x = strtod(v, &end);
        if (errno || end == v || *end || (o->ok && !o->ok(x))) return 0;
        *(double *)o->dst = x;
        return 1;
    }
    case CLI_LIST: return cli_parse_list(v, (int)o->lo, (int)o->hi, (int *)o->dst, o->max, o->count);
    }
    return 0;
}

int cli_parse(const cli_cmd *c, int argc, char **argv) {
    if (c->n_positional) *c->n_positional = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "-h") == 0 || strcmp(a, "--help") == 0) {
            cli_print_help(c, stdout);
            return 0;
        }
        const cli_opt *o = find(c->opts, a);
        if (!o) {
            if (c->positional && (a[0] != '-' || !a[1])) {
                c->positional[(*c->n_positional)++] = argv[i];
                continue;
            }
            fprintf(stderr, "diffrt: %s: unknown argument \"%s\" (see diffrt %s --help)\n", c->name, a, c->name);
            return 2;
        }
        const char *v = NULL;
        if (o->kind != CLI_FLAG) {
            if (i + 1 == argc) {
                fprintf(stderr, "diffrt: %s: %s needs a value (see diffrt %s --help)\n", c->name, a, c->name);
                return 2;
            }
            v = argv[++i];
        }
        if (!store(o, v)) return bad_value(c, o, v);
        if (o->given) *o->given = 1;
    }
    return CLI_PARSED;
}

int cli_parse_long(const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return 0;
    *out = v;
    return 1;
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
