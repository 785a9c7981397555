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

/* Removes the tree at path without following any symlink in it (nftw
 * FTW_PHYS | FTW_DEPTH); 0 or -1 with errno of the first failure. */
int cli_remove_tree(const char *path);

/* An output directory (diffrt quantize --out) written whole or not at all:
 *
 *     cli_outdir d;
 *     if ((rc = cli_outdir_open(&d, "quantize", out, force, model_dir))) return rc;
 *     ... write every file into d.tmp, load it back, check it ...
 *     if (failed) { cli_outdir_discard(&d); return 1; }
 *     return cli_outdir_commit(&d, "quantize");
 *
 * cli_outdir_open refuses (returns 2, message printed) a path that is a
 * symlink, exists and is not a directory, is the protected directory (the
 * input, through any spelling) or contains it, or exists and is not empty
 * without force; else it makes the fresh directory ".<name>.tmp.XXXXXX"
 * beside path (mkdtemp: nothing in it can be a planted symlink) and returns
 * 0 (1 when that fails). cli_outdir_commit moves it into place: onto a path
 * that is missing or empty by rename, over a non-empty one (force) by
 * exchanging the two (renameat2 RENAME_EXCHANGE; where the file system has
 * none, the old one is renamed aside first) and then removing the old tree,
 * so no file of the old directory survives. Until then a previous output at
 * path is untouched, and a killed run leaves only the dot-named temp.
 *
 * A run holds a flock on its temp until commit or discard. cli_outdir_open
 * removes (with one line on stderr) the temps that runs for the same target
 * left when killed: directories beside it named exactly ".<name>.tmp." and
 * six letters or digits, owned by this user, last changed before this run
 * began and not locked, i.e. no live run's. Nothing else is touched: no
 * other name, no file, no symlink, no ".<name>.old.*" (the previous output,
 * were a run killed between the two renames of the fallback above). */
typedef struct cli_outdir {
    char path[PATH_MAX]; /* the target, absolute, its parent resolved */
    char tmp[PATH_MAX];  /* write here; "" when not open */
    const char *shown;   /* the target as given, for messages */
    int force;           /* a non-empty target may be replaced */
    int lock, locked;    /* an fd of tmp holding its flock, when locked */
} cli_outdir;

int cli_outdir_open(cli_outdir *d, const char *what, const char *path, int force, const char *protect);
/* 0, or 1 with the message printed and d->tmp removed */
int cli_outdir_commit(cli_outdir *d, const char *what);
/* removes d->tmp and all in it; the target untouched */
void cli_outdir_discard(cli_outdir *d);

#endif
