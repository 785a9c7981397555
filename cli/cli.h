/* Helpers shared by the diffrt subcommands (cli/main.c). */
#ifndef DRT_CLI_H
#define DRT_CLI_H

#include <stdio.h>

/* prints "diffrt: <fmt with arg>" to stderr, returns 2 (usage error) */
int cli_die(const char *fmt, const char *arg);
/* prints "diffrt: <what>: <drt_last_error()>", returns 1 */
int cli_fail(const char *what);
/* --set "NAME=VALUE,NAME=VALUE": a drt_settings into *out (NULL when spec is
 * NULL); 0, else the exit status after one line (2: a usage error). The
 * caller frees *out either way. */
typedef struct drt_settings drt_settings;
int cli_settings(const char *cmd, const char *spec, drt_settings **out);
/* --kv-type kv (NULL: nothing) into *set (created when NULL) as kv_type;
 * 0, or 2 after a usage error on stderr */
int cli_kv_type(const char *cmd, const char *kv, drt_settings **set);
int cli_parse_long(const char *s, long lo, long hi, long *out);
/* "a,b,c": 1 to max integers in [lo, hi] into out[], their count in *n; 0 on
 * anything else (an empty item, a trailing comma, too many) */
int cli_parse_list(const char *s, int lo, int hi, int *out, int max, int *n);
int cli_ends_with(const char *s, const char *suffix);

int cmd_niah(int argc, char **argv);
int cmd_bench(int argc, char **argv);    /* cli/bench.c */
int cmd_report(int argc, char **argv);   /* cli/report.c */
int cmd_quantize(int argc, char **argv); /* cli/quantize.c */
int cmd_analyze(int argc, char **argv);  /* cli/analyze.c */
int cmd_serve(int argc, char **argv);    /* cli/serve.c */

/* diffrt bench's JSON (docs/bench-json.md) and the text that marks a
 * roofline fraction above 1.0 wherever one is printed */
#define BENCH_SCHEMA_VERSION 1
#define BENCH_ROOF_FLAG "> 1.0: peak under-measured"
/* ... and a decode step that reads under 128 MiB: the fraction is against
 * memory bandwidth, but such a model may be read from a cache */
#define BENCH_CACHE_NOTE "working set < 128 MiB: may be cache-resident"

/* Text from anywhere (a device name, a hostname, a file name) written into
 * markdown / XML: control characters and bytes that are not UTF-8 become
 * '?'; markdown punctuation is backslash-escaped (a table cell stays one
 * cell), XML's five special characters become entities. cli/report.c. */
void cli_md_escape(FILE *f, const char *s);
void cli_xml_escape(FILE *f, const char *s);
/* The first max code points of s into buf (n bytes), "..." when cut; returns buf. */
const char *cli_ellipsize(const char *s, int max, char *buf, size_t n);

#endif
