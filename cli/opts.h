/* One table per command: its options' parsing and its --help come from it.
 *
 * A command declares its options as a cli_opt array ended by {0}, wraps it in
 * a cli_cmd with its synopsis and description, and calls cli_parse(). The
 * parser takes "--name value" (never "--name=value"), "-x value" and flags;
 * it prints one line and returns 2 for an unknown argument, a missing value or
 * a bad one, prints the table's usage to stdout and returns 0 for -h/--help,
 * and returns CLI_PARSED when the command should go on. A repeated option
 * takes its last value. */
#ifndef DRT_CLI_OPTS_H
#define DRT_CLI_OPTS_H

#include <stdio.h>

#define CLI_PARSED (-1)

typedef enum {
    CLI_FLAG,   /* no value; int *dst = 1 */
    CLI_STR,    /* const char **dst = the argument */
    CLI_LONG,   /* long *dst in [lo, hi] */
    CLI_INT,    /* int *dst in [lo, hi] (lo, hi within int) */
    CLI_U64,    /* unsigned long long *dst, decimal, no sign */
    CLI_DOUBLE, /* double *dst, finite or not as ok() says */
    CLI_LIST,   /* "a,b,c": int dst[max] in [lo, hi], their count in *count */
} cli_kind;

typedef struct {
    const char *name; /* "--model", or "-n" for an option that has only a short form */
    char short_name;  /* 'v' for "-v" besides "--verbose"; 0 for none */
    cli_kind kind;
    void *dst;
    const char *meta;  /* the value's name in --help ("DIR", "N"); NULL for a flag */
    const char *help;  /* lines separated by '\n' */
    long lo, hi;       /* CLI_LONG, CLI_INT, CLI_LIST */
    int (*ok)(double); /* CLI_DOUBLE: 1 when the value is allowed */
    const char *bad;   /* "-n wants an integer >= 0": printed as "diffrt: CMD: BAD, got \"V\"";
                        * NULL: "NAME wants an integer in [lo, hi]" */
    int *count, max;   /* CLI_LIST */
    int *given;        /* when not NULL, set to 1 when the option is on the command line */
} cli_opt;

typedef struct {
    const char *name;     /* "run": "diffrt run" in messages and usage */
    const char *synopsis; /* after "usage: diffrt NAME " */
    const char *about;    /* the paragraph under the usage line, or NULL */
    const cli_opt *opts;  /* ended by an entry with name NULL */
    const char *footer;   /* after the options, or NULL */
    char **positional;    /* room for argc arguments that are not options; NULL: those are unknown */
    int *n_positional;
} cli_cmd;

/* --set NAME=VALUE,...: the one entry of every command that opens backends or
 * sessions; the command turns *dst into a drt_settings with cli_settings()
 * (cli.h) before any work */
#define CLI_OPT_SET(dst_)                                                                                              \
    {                                                                                                                  \
        .name = "--set", .kind = CLI_STR, .dst = (dst_), .meta = "NAME=VALUE,...",                                     \
        .help = "settings (docs/environment.md: cpu.threads, vulkan.fp16, ...);\na flag wins over "                    \
                "its environment variable; diffrt info shows them"                                                     \
    }

/* --kv-type T: the KV cache's type for the command's sessions; the command
 * puts it into its settings with cli_kv_type() (cli.h) */
#define CLI_OPT_KV_TYPE(dst_)                                                                                          \
    {                                                                                                                  \
        .name = "--kv-type", .kind = CLI_STR, .dst = (dst_), .meta = "T",                                              \
        .help = "KV cache type: f32, f16 or q8_0 (default: DIFFRT_KV_TYPE, else f16\non cpu and f32 elsewhere)"        \
    }

/* A command of diffrt: one row of main.c's table, which dispatches and
 * prints `diffrt --help` (the name and the one-line summary of each); the
 * command's options and its own --help come from its cli_cmd. */
typedef struct {
    const char *name;
    const char *summary; /* one line, lower case, no period */
    int (*run)(int argc, char **argv);
} cli_command;

/* parses argv[0..argc): CLI_PARSED to go on, else the exit status (0 after --help, 2 after a
 * message) */
int cli_parse(const cli_cmd *c, int argc, char **argv);
/* the usage generated from c's table */
void cli_print_help(const cli_cmd *c, FILE *f);
/* a line per command of cmds (ended by {0}): its name and summary, as
 * options are printed */
void cli_print_commands(const cli_command *cmds, FILE *f);

/* predicates for CLI_DOUBLE */
int cli_finite_nonneg(double x); /* x >= 0, finite */
int cli_positive(double x);      /* x > 0, finite */
int cli_fraction(double x);      /* 0 <= x <= 1 */
int cli_open_unit(double x);     /* 0 < x <= 1 */

#endif
