/* Files and directories written whole or not at all (runtime/outfile.c,
 * runtime/outdir.c): drt_outfile, drt_outdir and drt_split_path are public
 * (include/diffrt/util.h, where they are described); what the library adds
 * for itself is here. */
#ifndef DRT_OUTFILE_H
#define DRT_OUTFILE_H

#include <limits.h>
#include <stdio.h>

#include "diffrt/util.h" /* drt_outfile, drt_outdir, drt_split_path */

/* 1 when a and b name the same file: the same device and inode when both
 * exist, else the same directory (after realpath) and last component. */
int drt_same_file(const char *a, const char *b);

/* Removes the tree at path without following any symlink in it (nftw
 * FTW_PHYS | FTW_DEPTH); 0 or -1 with errno of the first failure. */
int drt_remove_tree(const char *path);

#endif
