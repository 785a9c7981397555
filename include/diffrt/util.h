/* Host helpers that diffrt's own programs (the CLI, conform, the tests)
 * share with the library, public so that a tool built on diffrt reports and
 * writes the way `diffrt` does: a monotonic clock, the CPU counts, setting
 * drt_last_error() from outside the library, a string made fit for a
 * one-line message, reading a small text file, and files and directories
 * written whole or not at all. Each has one implementation, in the library. */
#ifndef DIFFRT_UTIL_H
#define DIFFRT_UTIL_H

#include <stddef.h>
#include <stdio.h>

#include "diffrt/diffrt.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define DRT_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define DRT_PRINTF(a, b)
#endif

/* ---- time and CPUs ----------------------------------------------------- */

/* Seconds on CLOCK_MONOTONIC (never steps back; its zero is arbitrary): for
 * intervals only. The library's own clock (drt_now_s inside it). */
double drt_clock_s(void);

/* CPUs this process may run on: those in its affinity mask (taskset, cgroup
 * cpusets), else the online CPUs when the mask cannot be read; >= 1. */
int drt_cpu_count(void);
/* Logical CPUs online on the machine, whatever the affinity mask; >= 1. For
 * describing the host (device names, reports), not for sizing thread pools. */
int drt_cpu_online(void);
/* Physical cores among the CPUs this process may run on (SMT siblings count
 * once), from the affinity mask and the sysfs topology; drt_cpu_count() when
 * the topology cannot be read; >= 1. The cpu backend's default threads. */
int drt_physical_cores(void);

/* ---- messages ---------------------------------------------------------- */

/* Formats the message drt_last_error() returns on this thread and returns s:
 * code built on diffrt (a tool, an observer's caller) reports its own
 * failures the way the library does. fmt may quote drt_last_error(). */
drt_status drt_set_error(drt_status s, const char *fmt, ...) DRT_PRINTF(2, 3);

/* s made fit for a one-line message, for names and values read from files:
 * C0 controls, DEL and bytes that are not UTF-8 become \xNN, C1 controls
 * (U+0080..U+009F), U+2028/U+2029 and the bidirectional overrides \uNNNN;
 * a string longer than the buffer is cut after a whole character with "...".
 * s NULL: "(null)". Returns buf. */
const char *drt_printable(const char *s, char *buf, size_t n);

/* ---- JSON -------------------------------------------------------------- */

/* Checks that text[0..len) is one JSON document as RFC 8259 has it and as
 * Python's json and serde_json read it, which cJSON alone does not: no
 * byte order mark, only space, tab, LF and CR between
 * values, no control byte inside a string, only JSON's escapes, numbers
 * -?(0|[1-9]\d*)(\.\d+)?([eE][+-]?\d+)? (no "01", "1.", ".5", "+1", NaN,
 * Infinity), nothing after the value but whitespace, at most max_depth
 * arrays and objects inside one another (0: 512), and no key twice in one
 * object, keys compared with their escapes decoded ("a" and "\u0061" are
 * the same key; Python keeps the last of two, cJSON's lookup the first).
 * With DRT_JSON_NO_NUL a string or key holding \u0000 or an unpaired
 * surrogate escape is refused too (a C string would end at the NUL). The
 * bytes of strings are not checked as UTF-8: the reader of a value does
 * that, and names it. Any
 * failure is DRT_ERR_FORMAT, one line: "<name>: [<what> ]<problem> at byte
 * N" (a duplicate names the key and its path, "$.a[2].b"). */
#define DRT_JSON_NO_NUL 1u
drt_status drt_json_validate(const char *text, size_t len, const char *name, const char *what, int max_depth,
                             unsigned flags);

/* ---- files ------------------------------------------------------------- */

/* Reads a whole (small: up to 64 MiB) regular file into a NUL-terminated
 * malloc'd buffer (*len bytes when len is not NULL; free with drt_free).
 * Only a regular file is opened, never a FIFO or a device, so it cannot
 * block; anything else is DRT_ERR_IO "<path>: not a regular file (...)". */
drt_status drt_read_text_file(const char *path, char **out, size_t *len);

/* dir + "/" + name, one slash between them (none added when dir ends in
 * one; dir "" gives name), malloc'd: free with drt_free. NULL when out of
 * memory or either is NULL. Never truncates, so a long path is refused by
 * the open that uses it, not silently shortened. */
char *drt_path_join(const char *dir, const char *name);

/* A file written whole or not at all (the CLI's outputs, conform's reports):
 *
 *     drt_outfile o;
 *     if (drt_outfile_open(&o, path)) return fail;   // message set
 *     fprintf(o.f, ...);                              // unchecked writes are fine here
 *     if (drt_outfile_finish(&o) || drt_outfile_commit(&o)) ...  // checked, then renamed
 *     drt_outfile_discard(&o);                        // always: drops what is left
 *
 * drt_outfile_open creates ".<name>.tmp.XXXXXX" beside path (O_CREAT |
 * O_EXCL | O_NOFOLLOW: never through a symlink, never over another file;
 * mode 0666 less the umask, or the mode of the file it will replace).
 * drt_outfile_finish checks ferror, fflush and fclose; drt_outfile_commit
 * renames the temp onto path, so a reader sees the previous file or the
 * complete new one. Until the commit, and after any failure, the previous
 * file at path keeps its bytes. Finishing and committing are separate so
 * that several files can be made complete before any replaces its path.
 *
 * A path that exists and is not a regular file (/dev/stdout, /dev/full, a
 * FIFO) cannot be replaced by a rename: it is opened and written directly,
 * with the same checks. Every failure is DRT_ERR_IO "<path>: cannot write:
 * <reason>". */
#define DRT_PATH_MAX 4096 /* Linux's PATH_MAX, which strict C11 does not define */
typedef struct drt_outfile {
    FILE *f;                 /* write here; NULL when not open */
    char path[DRT_PATH_MAX]; /* the final name */
    char tmp[DRT_PATH_MAX];  /* the temp name; "" when there is none to rename (f writes path itself) */
} drt_outfile;

drt_status drt_outfile_open(drt_outfile *o, const char *path);
/* every write checked and the file closed (o->f NULL after); not renamed */
drt_status drt_outfile_finish(drt_outfile *o);
/* renames a finished temp onto the path */
drt_status drt_outfile_commit(drt_outfile *o);
/* closes and removes what was not committed; the path untouched; a no-op
 * when nothing is left */
void drt_outfile_discard(drt_outfile *o);

/* path split at its last '/': dir ("." when none; "/" for "/x") into
 * dir[dn] and *base, the last component; 0 when path names no file ("d/")
 * or dir does not fit */
int drt_split_path(const char *path, char *dir, size_t dn, const char **base);

/* ---- output directories ------------------------------------------------ */

/* A directory written whole or not at all (drt_quantize_model, diffrt
 * quantize --out, diffrt report --out):
 *
 *     drt_outdir d;
 *     if (drt_outdir_open(&d, out, &opts)) return fail;  // message set
 *     ... write every file into d.tmp, created new (O_EXCL), check it ...
 *     if (failed) { drt_outdir_discard(&d); return fail; }
 *     if (drt_outdir_commit(&d)) return fail;            // d.tmp removed
 *
 * drt_outdir_check refuses, as DRT_ERR_INVALID_ARG with one line naming
 * the target as opts->label does: a path that names no directory ("", "."
 * or ".." as its last name, the root), is a symbolic link, exists and is
 * not a directory, is opts->protect (through any spelling: after realpath,
 * or the same device and inode) or contains it, holds one of the files in
 * opts->keep (after realpath: a file the input reads through a symbolic
 * link into the target), or exists and is not empty without opts->force.
 * A path it cannot look at is DRT_ERR_IO. It creates nothing.
 *
 * drt_outdir_open checks the same, then makes the fresh directory
 * ".<name>.tmp.XXXXXX" beside the target (mkdtemp: nothing in it can be a
 * planted symlink) and holds a flock on it. drt_outdir_commit moves it
 * into place: onto a target that is missing or empty by rename, over a
 * non-empty one (force) by exchanging the two (renameat2 RENAME_EXCHANGE;
 * where the file system has none, the old one is renamed aside first) and
 * then removing the old tree without following any symlink in it, so no
 * file of the old directory survives; the new directory gets the mode
 * mkdir would have given it. Until then a previous target is untouched,
 * and a killed run leaves only the dot-named temp. On a failure of commit
 * the temp is removed and the target is as it was (DRT_ERR_IO "cannot move
 * the new directory to <target>: <reason>").
 *
 * drt_outdir_open also removes the temps that runs for the same target
 * left when killed: directories beside it named exactly ".<name>.tmp." and
 * six letters or digits, owned by this user, last changed before this
 * open began and not locked, i.e. no live run's. Nothing else is touched:
 * no other name, no file, no symlink, no ".<name>.old.*" (the previous
 * target, were a run killed between the two renames of the fallback
 * above). Each removal, and an old tree that could not be fully removed,
 * is told to opts->note as one line ("removed <temp>, left by a run that
 * did not finish"); the library prints nothing. */
typedef struct drt_outdir_opts {
    int force;               /* a non-empty target may be replaced as a whole */
    const char *protect;     /* a directory (the input) the target must not be or contain; NULL: none */
    const char *const *keep; /* n_keep files (the input's) that must not lie inside the target */
    int n_keep;              /* 0: none */
    const char *label;       /* the target's name in messages ("--out"); NULL: "out_dir" */
    const char *force_name;  /* what a message says to pass for force ("--force"); NULL: "force" */
    void (*note)(void *ctx, const char *line); /* notices, one line each; NULL: none */
    void *ctx;
} drt_outdir_opts;

typedef struct drt_outdir {
    char path[DRT_PATH_MAX]; /* the target, absolute, its parent resolved */
    char tmp[DRT_PATH_MAX];  /* write here; "" when not open */
    const char *shown;       /* the target as given (the caller's string), for messages */
    int force;
    void (*note)(void *ctx, const char *line);
    void *ctx;
    int lock, locked; /* an fd of tmp holding its flock, when locked */
} drt_outdir;

drt_status drt_outdir_check(const char *path, const drt_outdir_opts *opts);
drt_status drt_outdir_open(drt_outdir *d, const char *path, const drt_outdir_opts *opts);
drt_status drt_outdir_commit(drt_outdir *d);
/* removes d->tmp and all in it; the target untouched; a no-op when not open
 * (a zeroed drt_outdir included) */
void drt_outdir_discard(drt_outdir *d);

#ifdef __cplusplus
}
#endif
#endif
