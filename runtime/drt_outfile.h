/* A file written whole or not at all (runtime/outfile.c): the CLI's outputs
 * (cli/outfile.h) and conform's reports go through it.
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
#ifndef DRT_OUTFILE_H
#define DRT_OUTFILE_H

#include <limits.h>
#include <stdio.h>

#include "diffrt/diffrt.h"

typedef struct drt_outfile {
    FILE *f;             /* write here; NULL when not open */
    char path[PATH_MAX]; /* the final name */
    char tmp[PATH_MAX];  /* the temp name; "" when there is none to rename (f writes path itself) */
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

/* 1 when a and b name the same file: the same device and inode when both
 * exist, else the same directory (after realpath) and last component. */
int drt_same_file(const char *a, const char *b);

#endif
