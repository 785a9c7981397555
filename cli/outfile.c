/* Output files written whole or not at all; stdout checked at exit
 * (cli/outfile.h). */
#define _GNU_SOURCE /* __fpending */
#include "outfile.h"

#include "diffrt/diffrt.h"

#include <errno.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>

int cli_out_open(cli_outfile *o, const char *what, const char *path) {
    if (drt_outfile_open(o, path) == DRT_OK) return 0;
    fprintf(stderr, "diffrt: %s: %s\n", what, drt_last_error());
    return 1;
}

int cli_out_close(cli_outfile *o, const char *what) {
    if (!o->f) return 1;
    drt_status s = drt_outfile_finish(o);
    if (s == DRT_OK) s = drt_outfile_commit(o);
    drt_outfile_discard(o);
    if (s == DRT_OK) return 0;
    fprintf(stderr, "diffrt: %s: %s\n", what, drt_last_error());
    return 1;
}

void cli_out_discard(cli_outfile *o) {
    drt_outfile_discard(o);
}

int cli_out_write_text(const char *what, const char *path, const char *text) {
    if (!text) {
        fprintf(stderr, "diffrt: %s: %s: cannot write: %s\n", what, path, strerror(ENOMEM));
        return 1;
    }
    cli_outfile o;
    if (cli_out_open(&o, what, path)) return 1;
    size_t n = strlen(text);
    fwrite(text, 1, n, o.f);
    if (!n || text[n - 1] != '\n') fputc('\n', o.f);
    return cli_out_close(&o, what); /* checks the writes above */
}

int cli_close_stdout(int rc) {
    /* as coreutils' close_stdout: a closed stdout (EBADF) that was never
     * written to is no error */
    int bad = ferror(stdout), pending = __fpending(stdout) > 0, err = 0;
    errno = 0;
    if (fflush(stdout) != 0) bad = 1, err = errno;
    if (fclose(stdout) != 0 && !err && (pending || bad || errno != EBADF)) bad = 1, err = errno;
    if (!bad) return rc;
    /* glibc drops what a failed write could not write: an error seen before
     * the flush here has lost its errno, and gets no reason */
    if (err)
        fprintf(stderr, "diffrt: error writing standard output: %s\n", strerror(err));
    else
        fprintf(stderr, "diffrt: error writing standard output\n");
    return rc ? rc : 1;
}

/* ---- output directories ---------------------------------------------------------- */

/* a notice of drt_outdir (ctx: the command) on stderr */
static void print_note(void *ctx, const char *line) {
    fprintf(stderr, "diffrt: %s: %s\n", (const char *)ctx, line);
}

void cli_outdir_opts(drt_outdir_opts *o, const char *what, int force, const char *protect) {
    *o = (drt_outdir_opts){.force = force,
                           .protect = protect,
                           .label = "--out",
                           .force_name = "--force",
                           .note = print_note,
                           .ctx = (void *)what};
}

/* 0 for DRT_OK, else the message printed and 2 (a refusal) or 1 */
static int outdir_rc(drt_status s, const char *what) {
    if (s == DRT_OK) return 0;
    fprintf(stderr, "diffrt: %s: %s\n", what, drt_last_error());
    return s == DRT_ERR_INVALID_ARG ? 2 : 1;
}

int cli_outdir_check(const char *what, const char *path, const drt_outdir_opts *o) {
    return outdir_rc(drt_outdir_check(path, o), what);
}

int cli_outdir_open(cli_outdir *d, const char *what, const char *path, const drt_outdir_opts *o) {
    return outdir_rc(drt_outdir_open(d, path, o), what);
}

void cli_outdir_discard(cli_outdir *d) {
    drt_outdir_discard(d);
}

int cli_outdir_commit(cli_outdir *d, const char *what) {
    if (drt_outdir_commit(d) == DRT_OK) return 0;
    fprintf(stderr, "diffrt: %s: %s\n", what, drt_last_error());
    return 1;
}
