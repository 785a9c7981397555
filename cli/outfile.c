/* Output files written whole or not at all; stdout checked at exit
 * (cli/outfile.h). */
#define _GNU_SOURCE /* nftw's FTW_PHYS / FTW_DEPTH, __fpending */
#include "outfile.h"

#include "diffrt/diffrt.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <ftw.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

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

static int rm_first_err;
static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    if (remove(p) != 0 && !rm_first_err) rm_first_err = errno;
    return 0;
}

int cli_remove_tree(const char *path) {
    rm_first_err = 0;
    if (nftw(path, rm_one, 16, FTW_PHYS | FTW_DEPTH) != 0 && !rm_first_err) rm_first_err = errno;
    errno = rm_first_err;
    return rm_first_err ? -1 : 0;
}

/* ---- output directories ---------------------------------------------------------- */

static int dir_is_empty(const char *path) {
    DIR *dir = opendir(path);
    if (!dir) return 0;
    struct dirent *e;
    int empty = 1;
    while (empty && (e = readdir(dir)))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0) empty = 0;
    closedir(dir);
    return empty;
}

/* name is ".<base>.tmp." (base cut as cli_outdir_open's template cuts it)
 * and six characters of mkdtemp's alphabet: a temp of this target */
static int is_outdir_temp(const char *name, const char *base) {
    char pre[256];
    int k = snprintf(pre, sizeof pre, ".%.200s.tmp.", base);
    if (k < 0 || strncmp(name, pre, (size_t)k) != 0 || strlen(name) != (size_t)k + 6) return 0;
    for (const char *c = name + k; *c; c++)
        if (!((*c >= 'a' && *c <= 'z') || (*c >= 'A' && *c <= 'Z') || (*c >= '0' && *c <= '9'))) return 0;
    return 1;
}

/* Removes from dir the temps of target base that killed runs left (see
 * cli/outfile.h): the exact name, a directory (never through a symlink),
 * this user's, changed before `start`, and its flock free. The flock is
 * what tells a live run's temp (held until commit or discard) from a dead
 * one's: a kill releases it. Where flock does not work, nothing is removed. */
static void remove_stale_temps(const char *what, const char *dir, const char *base, const struct timespec *start) {
    DIR *dh = opendir(dir);
    struct dirent *e;
    while (dh && (e = readdir(dh))) {
        if (!is_outdir_temp(e->d_name, base)) continue;
        char p[PATH_MAX];
        struct stat sb;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p || lstat(p, &sb) != 0 ||
            !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid())
            continue;
        if (sb.st_mtim.tv_sec > start->tv_sec ||
            (sb.st_mtim.tv_sec == start->tv_sec && sb.st_mtim.tv_nsec >= start->tv_nsec))
            continue; /* made since this run began: another run's */
        int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            if (cli_remove_tree(p) == 0)
                fprintf(stderr, "diffrt: %s: removed %s, left by a run that did not finish\n", what, p);
            else
                fprintf(stderr,
                        "diffrt: %s: warning: %s, left by a run that did not finish, was not fully "
                        "removed: %s\n",
                        what, p, strerror(errno));
        }
        close(fd);
    }
    if (dh) closedir(dh);
}

static void outdir_unlock(cli_outdir *d) {
    if (d->locked) close(d->lock);
    d->locked = 0;
}

int cli_outdir_open(cli_outdir *d, const char *what, const char *path, int force, const char *protect) {
    memset(d, 0, sizeof *d);
    struct timespec start;
    clock_gettime(CLOCK_REALTIME, &start);
    d->shown = path;
    d->force = force;
    char buf[PATH_MAX], real[PATH_MAX], rprot[PATH_MAX];
    size_t n = strlen(path);
    while (n > 1 && path[n - 1] == '/') n--; /* "out/" is "out" */
    if (n == 0 || n >= sizeof buf) {
        fprintf(stderr, "diffrt: %s: --out \"%s\" is not a directory name\n", what, path);
        return 2;
    }
    memcpy(buf, path, n);
    buf[n] = 0;
    struct stat sb;
    int exists = lstat(buf, &sb) == 0;
    if (!exists && errno != ENOENT) {
        fprintf(stderr, "diffrt: %s: --out %s: %s\n", what, path, strerror(errno));
        return 1;
    }
    if (exists && S_ISLNK(sb.st_mode)) {
        fprintf(stderr, "diffrt: %s: --out %s is a symbolic link; name the directory itself\n", what, path);
        return 2;
    }
    if (exists && !S_ISDIR(sb.st_mode)) {
        fprintf(stderr, "diffrt: %s: --out %s exists and is not a directory\n", what, path);
        return 2;
    }
    /* the absolute target: the directory itself when it exists, else its
     * resolved parent + the last name */
    if (exists) {
        if (!realpath(buf, real)) {
            fprintf(stderr, "diffrt: %s: --out %s: %s\n", what, path, strerror(errno));
            return 1;
        }
    } else {
        char dir[PATH_MAX], rdir[PATH_MAX];
        const char *base;
        if (!drt_split_path(buf, dir, sizeof dir, &base) || strcmp(base, ".") == 0 || strcmp(base, "..") == 0) {
            fprintf(stderr, "diffrt: %s: --out \"%s\" is not a directory name\n", what, path);
            return 2;
        }
        if (!realpath(dir, rdir)) {
            fprintf(stderr, "diffrt: %s: --out %s: cannot use its parent %s: %s\n", what, path, dir, strerror(errno));
            return 1;
        }
        if (snprintf(real, sizeof real, "%s%s%s", rdir, strcmp(rdir, "/") ? "/" : "", base) >= (int)sizeof real) {
            fprintf(stderr, "diffrt: %s: --out %s: %s\n", what, path, strerror(ENAMETOOLONG));
            return 1;
        }
    }
    if (strcmp(real, "/") == 0) {
        fprintf(stderr, "diffrt: %s: --out %s is the root directory\n", what, path);
        return 2;
    }
    if (protect && realpath(protect, rprot)) {
        size_t k = strlen(real);
        if (strcmp(real, rprot) == 0) {
            fprintf(stderr, "diffrt: %s: --out %s is the model directory itself\n", what, path);
            return 2;
        }
        if (strncmp(rprot, real, k) == 0 && rprot[k] == '/') {
            fprintf(stderr, "diffrt: %s: --out %s contains the model directory %s\n", what, path, protect);
            return 2;
        }
    }
    if (exists && !force && !dir_is_empty(real)) {
        fprintf(stderr, "diffrt: %s: --out %s already exists and is not empty; pass --force to replace it as a whole\n",
                what, path);
        return 2;
    }
    char dir[PATH_MAX];
    const char *base;
    if (!drt_split_path(real, dir, sizeof dir, &base) ||
        snprintf(d->tmp, sizeof d->tmp, "%s/.%.200s.tmp.XXXXXX", dir, base) >= (int)sizeof d->tmp ||
        snprintf(d->path, sizeof d->path, "%s", real) >= (int)sizeof d->path) {
        fprintf(stderr, "diffrt: %s: --out %s: %s\n", what, path, strerror(ENAMETOOLONG));
        d->tmp[0] = 0;
        return 1;
    }
    remove_stale_temps(what, dir, base, &start);
    if (!mkdtemp(d->tmp)) {
        fprintf(stderr, "diffrt: %s: --out %s: cannot create a directory in %s: %s\n", what, path, dir,
                strerror(errno));
        d->tmp[0] = 0;
        return 1;
    }
    /* held until commit or discard: a later run leaves a locked temp alone */
    d->lock = open(d->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->lock >= 0 && flock(d->lock, LOCK_EX | LOCK_NB) == 0)
        d->locked = 1;
    else if (d->lock >= 0)
        close(d->lock);
    return 0;
}

void cli_outdir_discard(cli_outdir *d) {
    if (d->tmp[0]) cli_remove_tree(d->tmp);
    d->tmp[0] = 0;
    outdir_unlock(d);
}

int cli_outdir_commit(cli_outdir *d, const char *what) {
    if (!d->tmp[0]) return 1;
    /* mkdtemp's 0700 becomes what mkdir would have made */
    mode_t um = umask(0);
    umask(um);
    chmod(d->tmp, 0777 & ~um);
    struct stat sb;
    int err = 0;
    if (lstat(d->path, &sb) != 0 || (S_ISDIR(sb.st_mode) && dir_is_empty(d->path))) {
        /* missing, or empty: a plain rename (POSIX replaces an empty directory) */
        if (rename(d->tmp, d->path) != 0) err = errno;
    } else if (!S_ISDIR(sb.st_mode) || !d->force) {
        err = !S_ISDIR(sb.st_mode) ? ENOTDIR : ENOTEMPTY; /* something took the name since open */
    } else if (renameat2(AT_FDCWD, d->tmp, AT_FDCWD, d->path, RENAME_EXCHANGE) == 0) {
        /* d->tmp now holds the old directory */
        if (cli_remove_tree(d->tmp) != 0)
            fprintf(stderr, "diffrt: %s: warning: the old %s, moved to %s, was not fully removed: %s\n", what, d->shown,
                    d->tmp, strerror(errno));
        d->tmp[0] = 0;
        outdir_unlock(d);
        return 0;
    } else if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        err = errno;
    } else {
        /* no exchange here: the old one aside (onto an empty mkdtemp
         * directory), the new one in, the old one removed */
        char aside[PATH_MAX], dir[PATH_MAX];
        const char *base;
        if (!drt_split_path(d->path, dir, sizeof dir, &base) ||
            snprintf(aside, sizeof aside, "%s/.%.200s.old.XXXXXX", dir, base) >= (int)sizeof aside)
            err = ENAMETOOLONG;
        else if (!mkdtemp(aside) || rename(d->path, aside) != 0)
            err = errno, rmdir(aside);
        else if (rename(d->tmp, d->path) != 0)
            err = errno, rename(aside, d->path);
        else if (cli_remove_tree(aside) != 0)
            fprintf(stderr, "diffrt: %s: warning: the old %s, moved to %s, was not fully removed: %s\n", what, d->shown,
                    aside, strerror(errno));
    }
    if (err) {
        fprintf(stderr, "diffrt: %s: cannot move the new directory to %s: %s\n", what, d->shown, strerror(err));
        cli_outdir_discard(d);
        return 1;
    }
    d->tmp[0] = 0;
    outdir_unlock(d);
    return 0;
}
