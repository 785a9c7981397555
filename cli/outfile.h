/* Output files that are written whole or not at all, and standard output
 * checked at exit (cli/outfile.c).
 *
 * A file the CLI writes (--json, --junit, report.md, ...) goes through
 * cli_out_open / cli_out_close:
 *
 *     cli_outfile o;
 *     if (cli_out_open(&o, "niah", path)) return 1;   // message printed
 *     fprintf(o.f, ...);                               // unchecked writes are fine here
 *     if (cli_out_close(&o, "niah")) return 1;         // every write checked, then renamed
 *
 * cli_out_open creates ".<name>.tmp.XXXXXX" beside path (O_CREAT | O_EXCL:
 * never through a symlink, never over another file); cli_out_close checks
 * ferror, fflush and fclose and only then renames the temp onto path, so a
 * reader sees either the previous file or the complete new one. On any
 * failure the temp is removed, the previous file at path (if any) keeps its
 * bytes, and one line "diffrt: <what>: <path>: cannot write: <reason>" is
 * printed. cli_out_discard drops an open file without touching path (an
 * error elsewhere: nothing that looks complete is left).
 *
 * A path that exists and is not a regular file (/dev/stdout, /dev/full, a
 * FIFO) cannot be replaced by a rename: it is opened and written directly,
 * with the same checks. A path that is a symlink is replaced by the new
 * file, never written through. */
#ifndef DRT_CLI_OUTFILE_H
#define DRT_CLI_OUTFILE_H

#include <limits.h>
#include <stdio.h>

#include "diffrt/util.h"

typedef drt_outfile cli_outfile; /* include/diffrt/util.h: f, path, tmp */

/* 0, or 1 with the message printed (o->f is then NULL) */
int cli_out_open(cli_outfile *o, const char *what, const char *path);
/* 0, or 1 with the message printed; o->f is NULL after either */
int cli_out_close(cli_outfile *o, const char *what);
/* closes and removes the temp; path untouched. A no-op when o->f is NULL. */
void cli_out_discard(cli_outfile *o);

/* text (NULL: out of memory), ending in a newline, written whole to path
 * through cli_out_open / cli_out_close; 0, or 1 with the message printed */
int cli_out_write_text(const char *what, const char *path, const char *text);

/* The end of every command (cli/main.c): flushes and closes stdout; when a
 * write to it failed, now or before, prints "diffrt: error writing standard
 * output: <reason>" (no reason when an earlier write lost its errno) and
 * returns 1 (rc when rc is already nonzero), else rc. */
int cli_close_stdout(int rc);

/* An output directory (diffrt quantize --out, diffrt report --out) written
 * whole or not at all: drt_outdir (include/diffrt/util.h, where the rules
 * are), with the messages naming "--out" and "--force":
 *
 *     drt_outdir_opts o;
 *     cli_outdir_opts(&o, "report", force, NULL);       // then o.keep, ...
 *     cli_outdir d;
 *     if ((rc = cli_outdir_open(&d, "report", out, &o))) return rc;
 *     ... write every file into d.tmp, check it ...
 *     if (failed) { cli_outdir_discard(&d); return 1; }
 *     return cli_outdir_commit(&d, "report");
 *
 * Each prints its message as "diffrt: <what>: <message>", and the notices
 * (a killed run's temp removed) the same way. */
typedef drt_outdir cli_outdir;

/* *o for --out: force, protect (the input directory; NULL: none), the
 * CLI's words, notices printed for the command `what` (which must outlive
 * o); no keep list */
void cli_outdir_opts(drt_outdir_opts *o, const char *what, int force, const char *protect);
/* drt_outdir_check: 0; 2 for a refused --out, 1 when it cannot be looked
 * at (the message printed either way) */
int cli_outdir_check(const char *what, const char *path, const drt_outdir_opts *o);
/* drt_outdir_open: 0; 2 for a refused --out, 1 when the temp cannot be
 * made (the message printed either way) */
int cli_outdir_open(cli_outdir *d, const char *what, const char *path, const drt_outdir_opts *o);
/* 0, or 1 with the message printed and d->tmp removed */
int cli_outdir_commit(cli_outdir *d, const char *what);
/* removes d->tmp and all in it; the target untouched */
void cli_outdir_discard(cli_outdir *d);

#endif
