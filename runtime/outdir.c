/* Directories written whole or not at all (drt_outdir in
 * include/diffrt/util.h, where the rules are): the checks of a target, its
 * temp beside it, the move into place and the temps killed runs left. */
#define _GNU_SOURCE /* renameat2, RENAME_EXCHANGE; nftw's FTW_PHYS / FTW_DEPTH; realpath */
#include "drt_outfile.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "drt_error.h"

static _Thread_local int rm_first_err; /* nftw's callback has no context */
static int rm_one(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    if (remove(p) != 0 && !rm_first_err) rm_first_err = errno;
    return 0;
}

int drt_remove_tree(const char *path) {
    rm_first_err = 0;
    if (nftw(path, rm_one, 16, FTW_PHYS | FTW_DEPTH) != 0 && !rm_first_err) rm_first_err = errno;
    errno = rm_first_err;
    return rm_first_err ? -1 : 0;
}

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

/* one line to d's note callback, when there is one */
static void note(const drt_outdir *d, const char *fmt, ...) DRT_PRINTF(2, 3);
static void note(const drt_outdir *d, const char *fmt, ...) {
    if (!d->note) return;
    char line[3 * DRT_PATH_MAX + 128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    d->note(d->ctx, line);
}

/* ---- the checks ---------------------------------------------------------- */

typedef struct {
    const char *label, *force_name, *path;
} names;

static drt_status refuse(const names *n, const char *what) {
    return drt_set_error(DRT_ERR_INVALID_ARG, "%s %s %s", n->label, n->path, what);
}

/* real (a realpath) is dir (-> 2) or lies under it (-> 1), by name or by
 * device and inode (a bind mount); else 0. dsb: dir's stat. */
static int under(const char *real, const char *dir, const struct stat *dsb) {
    size_t k = strlen(dir);
    if (strcmp(real, dir) == 0) return 2;
    if (strncmp(real, dir, k) == 0 && (real[k] == '/' || strcmp(dir, "/") == 0)) return 1;
    if (!dsb) return 0;
    char p[DRT_PATH_MAX];
    snprintf(p, sizeof p, "%s", real);
    for (int self = 2;; self = 1) {
        struct stat sb;
        if (stat(p, &sb) == 0 && sb.st_dev == dsb->st_dev && sb.st_ino == dsb->st_ino) return self;
        char *slash = strrchr(p, '/');
        if (!slash || slash == p) return 0;
        *slash = 0;
    }
}

/* path, trailing slashes dropped, into buf; the absolute target into real
 * (the directory itself when it exists, else its resolved parent + the
 * last name); *exists, and sb its lstat */
static drt_status resolve(const names *n, char *buf, char *real, int *exists, struct stat *sb) {
    const char *path = n->path;
    size_t len = strlen(path);
    while (len > 1 && path[len - 1] == '/') len--; /* "out/" is "out" */
    if (len == 0 || len >= DRT_PATH_MAX)
        return drt_set_error(DRT_ERR_INVALID_ARG, "%s \"%s\" is not a directory name", n->label, path);
    memcpy(buf, path, len);
    buf[len] = 0;
    *exists = lstat(buf, sb) == 0;
    if (!*exists && errno != ENOENT) return drt_set_error(DRT_ERR_IO, "%s %s: %s", n->label, path, strerror(errno));
    if (*exists && S_ISLNK(sb->st_mode)) return refuse(n, "is a symbolic link; name the directory itself");
    if (*exists && !S_ISDIR(sb->st_mode)) return refuse(n, "exists and is not a directory");
    if (*exists) {
        if (!realpath(buf, real)) return drt_set_error(DRT_ERR_IO, "%s %s: %s", n->label, path, strerror(errno));
        return DRT_OK;
    }
    char dir[DRT_PATH_MAX], rdir[DRT_PATH_MAX];
    const char *base;
    if (!drt_split_path(buf, dir, sizeof dir, &base) || strcmp(base, ".") == 0 || strcmp(base, "..") == 0)
        return drt_set_error(DRT_ERR_INVALID_ARG, "%s \"%s\" is not a directory name", n->label, path);
    if (!realpath(dir, rdir))
        return drt_set_error(DRT_ERR_IO, "%s %s: cannot use its parent %s: %s", n->label, path, dir, strerror(errno));
    if (snprintf(real, DRT_PATH_MAX, "%s%s%s", rdir, strcmp(rdir, "/") ? "/" : "", base) >= DRT_PATH_MAX)
        return drt_set_error(DRT_ERR_IO, "%s %s: %s", n->label, path, strerror(ENAMETOOLONG));
    return DRT_OK;
}

/* the checks of drt_outdir_check; real gets the absolute target */
static drt_status check(const names *n, const drt_outdir_opts *o, char *real) {
    char buf[DRT_PATH_MAX], rp[DRT_PATH_MAX];
    int exists = 0;
    struct stat sb;
    drt_status s = resolve(n, buf, real, &exists, &sb);
    if (s != DRT_OK) return s;
    if (strcmp(real, "/") == 0) return refuse(n, "is the root directory");
    if (o && o->protect && realpath(o->protect, rp)) {
        int u = under(rp, real, exists ? &sb : NULL);
        if (u == 2) return refuse(n, "is the model directory itself");
        if (u == 1)
            return drt_set_error(DRT_ERR_INVALID_ARG, "%s %s contains the model directory %s", n->label, n->path,
                                 o->protect);
    }
    for (int i = 0; exists && o && o->keep && i < o->n_keep; i++)
        if (o->keep[i] && realpath(o->keep[i], rp) && under(rp, real, &sb))
            return drt_set_error(DRT_ERR_INVALID_ARG, "%s %s holds the input %s, which replacing it would delete",
                                 n->label, n->path, o->keep[i]);
    if (exists && !(o && o->force) && !dir_is_empty(real))
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "%s %s already exists and is not empty; pass %s to replace it as a whole", n->label,
                             n->path, n->force_name);
    return DRT_OK;
}

static names names_of(const char *path, const drt_outdir_opts *o) {
    return (names){.label = o && o->label ? o->label : "out_dir",
                   .force_name = o && o->force_name ? o->force_name : "force",
                   .path = path};
}

drt_status drt_outdir_check(const char *path, const drt_outdir_opts *o) {
    if (!path) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_outdir_check: path is NULL");
    names n = names_of(path, o);
    char real[DRT_PATH_MAX];
    return check(&n, o, real);
}

/* ---- the temp ------------------------------------------------------------ */

/* name is ".<base>.tmp." (base cut as drt_outdir_open's template cuts it)
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
 * util.h): the exact name, a directory (never through a symlink), this
 * user's, changed before `start`, and its flock free. The flock is what
 * tells a live run's temp (held until commit or discard) from a dead one's:
 * a kill releases it. Where flock does not work, nothing is removed. */
static void remove_stale_temps(const drt_outdir *d, const char *dir, const char *base, const struct timespec *start) {
    DIR *dh = opendir(dir);
    struct dirent *e;
    while (dh && (e = readdir(dh))) {
        if (!is_outdir_temp(e->d_name, base)) continue;
        char p[DRT_PATH_MAX];
        struct stat sb;
        if (snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= (int)sizeof p || lstat(p, &sb) != 0 ||
            !S_ISDIR(sb.st_mode) || sb.st_uid != geteuid())
            continue;
        if (sb.st_mtim.tv_sec > start->tv_sec ||
            (sb.st_mtim.tv_sec == start->tv_sec && sb.st_mtim.tv_nsec >= start->tv_nsec))
            continue; /* made since this open began: another run's */
        int fd = open(p, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) continue;
        if (flock(fd, LOCK_EX | LOCK_NB) == 0) {
            if (drt_remove_tree(p) == 0)
                note(d, "removed %s, left by a run that did not finish", p);
            else
                note(d, "warning: %s, left by a run that did not finish, was not fully removed: %s", p,
                     strerror(errno));
        }
        close(fd);
    }
    if (dh) closedir(dh);
}

drt_status drt_outdir_open(drt_outdir *d, const char *path, const drt_outdir_opts *o) {
    if (!d) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_outdir_open: d is NULL");
    memset(d, 0, sizeof *d);
    if (!path) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_outdir_open: path is NULL");
    struct timespec start;
    clock_gettime(CLOCK_REALTIME, &start);
    names n = names_of(path, o);
    d->shown = path;
    d->force = o && o->force;
    d->note = o ? o->note : NULL;
    d->ctx = o ? o->ctx : NULL;
    char real[DRT_PATH_MAX], dir[DRT_PATH_MAX];
    drt_status s = check(&n, o, real);
    if (s != DRT_OK) return s;
    const char *base;
    if (!drt_split_path(real, dir, sizeof dir, &base) ||
        snprintf(d->tmp, sizeof d->tmp, "%s/.%.200s.tmp.XXXXXX", dir, base) >= (int)sizeof d->tmp ||
        snprintf(d->path, sizeof d->path, "%s", real) >= (int)sizeof d->path) {
        d->tmp[0] = 0;
        return drt_set_error(DRT_ERR_IO, "%s %s: %s", n.label, path, strerror(ENAMETOOLONG));
    }
    remove_stale_temps(d, dir, base, &start);
    if (!mkdtemp(d->tmp)) {
        d->tmp[0] = 0;
        return drt_set_error(DRT_ERR_IO, "%s %s: cannot create a directory in %s: %s", n.label, path, dir,
                             strerror(errno));
    }
    /* held until commit or discard: a later run leaves a locked temp alone */
    d->lock = open(d->tmp, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (d->lock >= 0 && flock(d->lock, LOCK_EX | LOCK_NB) == 0)
        d->locked = 1;
    else if (d->lock >= 0)
        close(d->lock);
    return DRT_OK;
}

static void unlock(drt_outdir *d) {
    if (d->locked) close(d->lock);
    d->locked = 0;
}

void drt_outdir_discard(drt_outdir *d) {
    if (!d) return;
    if (d->tmp[0]) drt_remove_tree(d->tmp);
    d->tmp[0] = 0;
    unlock(d);
}

/* ---- the move into place -------------------------------------------------- */

/* mkdtemp's 0700 becomes what mkdir would have made: the mode of a probe
 * directory made inside it (umask and default ACL applied; reading the
 * umask would mean setting it, for every thread of the process) */
static void take_mkdir_mode(const char *tmp) {
    char probe[DRT_PATH_MAX + 16];
    struct stat sb;
    snprintf(probe, sizeof probe, "%s/.mode", tmp);
    if (mkdir(probe, 0777) != 0) return;
    if (stat(probe, &sb) == 0) chmod(tmp, sb.st_mode & 07777);
    rmdir(probe);
}

/* no exchange on this file system: the old one aside (onto an empty
 * mkdtemp directory), the new one in, the old one removed; 0 or errno */
static int replace_aside(drt_outdir *d) {
    char aside[DRT_PATH_MAX], dir[DRT_PATH_MAX];
    const char *base;
    int err = 0;
    if (!drt_split_path(d->path, dir, sizeof dir, &base) ||
        snprintf(aside, sizeof aside, "%s/.%.200s.old.XXXXXX", dir, base) >= (int)sizeof aside)
        err = ENAMETOOLONG;
    else if (!mkdtemp(aside))
        err = errno;
    else if (rename(d->path, aside) != 0)
        err = errno, rmdir(aside);
    else if (rename(d->tmp, d->path) != 0)
        err = errno, rename(aside, d->path);
    else if (drt_remove_tree(aside) != 0)
        note(d, "warning: the old %s, moved to %s, was not fully removed: %s", d->shown, aside, strerror(errno));
    return err;
}

drt_status drt_outdir_commit(drt_outdir *d) {
    if (!d || !d->tmp[0]) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_outdir_commit: the directory is not open");
    take_mkdir_mode(d->tmp);
    struct stat sb;
    int err = 0;
    if (lstat(d->path, &sb) != 0 || (S_ISDIR(sb.st_mode) && dir_is_empty(d->path))) {
        /* missing, or empty: a plain rename (POSIX replaces an empty directory) */
        if (rename(d->tmp, d->path) != 0) err = errno;
    } else if (!S_ISDIR(sb.st_mode) || !d->force) {
        err = !S_ISDIR(sb.st_mode) ? ENOTDIR : ENOTEMPTY; /* something took the name since open */
    } else if (renameat2(AT_FDCWD, d->tmp, AT_FDCWD, d->path, RENAME_EXCHANGE) == 0) {
        /* d->tmp now holds the old directory */
        if (drt_remove_tree(d->tmp) != 0)
            note(d, "warning: the old %s, moved to %s, was not fully removed: %s", d->shown, d->tmp, strerror(errno));
    } else if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
        err = errno;
    } else {
        err = replace_aside(d);
    }
    if (err) {
        drt_outdir_discard(d);
        return drt_set_error(DRT_ERR_IO, "cannot move the new directory to %s: %s", d->shown, strerror(err));
    }
    d->tmp[0] = 0;
    unlock(d);
    return DRT_OK;
}
