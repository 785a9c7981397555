/* Files written whole or not at all (runtime/drt_outfile.h). */
#define _DEFAULT_SOURCE /* realpath */
#include "drt_outfile.h"

#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "drt_error.h"

int drt_split_path(const char *path, char *dir, size_t dn, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    if (!**base) return 0; /* "dir/": names no file */
    if (!slash) return snprintf(dir, dn, ".") < (int)dn;
    size_t n = slash == path ? 1 : (size_t)(slash - path); /* "/x" -> "/" */
    if (n >= dn) return 0;
    memcpy(dir, path, n);
    dir[n] = 0;
    return 1;
}

static drt_status cannot(const char *path, int err) {
    return drt_set_error(DRT_ERR_IO, "%s: cannot write: %s", path, err ? strerror(err) : "write error");
}

drt_status drt_outfile_open(drt_outfile *o, const char *path) {
    memset(o, 0, sizeof *o);
    if (snprintf(o->path, sizeof o->path, "%s", path) >= (int)sizeof o->path) return cannot(path, ENAMETOOLONG);
    struct stat sb;
    int exists = stat(path, &sb) == 0;
    if (exists && S_ISDIR(sb.st_mode)) return cannot(path, EISDIR);
    if (exists && !S_ISREG(sb.st_mode)) /* a device or a FIFO: no rename can replace it, and none should */
        return (o->f = fopen(path, "w")) ? DRT_OK : cannot(path, errno);
    char dir[PATH_MAX];
    const char *base;
    if (!drt_split_path(path, dir, sizeof dir, &base))
        return drt_set_error(DRT_ERR_IO, "%s: cannot write: not a file name", path);
    /* O_EXCL on a fresh name: never through a symlink, never over a file;
     * 0666 so that the umask, not mkstemp's 0600, decides the final mode */
    static unsigned counter;
    int fd = -1, err = EEXIST;
    for (int tries = 0; fd < 0 && err == EEXIST && tries < 100; tries++) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        unsigned r = (unsigned)getpid() * 2654435761u ^ (unsigned)ts.tv_nsec ^ (++counter * 40503u);
        if (snprintf(o->tmp, sizeof o->tmp, "%s/.%.200s.tmp.%06x", dir, base, r & 0xffffffu) >= (int)sizeof o->tmp) {
            err = ENAMETOOLONG;
            break;
        }
        fd = open(o->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
        err = fd < 0 ? errno : 0;
    }
    if (fd >= 0 && exists && fchmod(fd, sb.st_mode & 07777) != 0) err = errno; /* the mode it replaces */
    if (fd >= 0 && !err && !(o->f = fdopen(fd, "w"))) err = errno;
    if (!o->f) {
        if (fd >= 0) {
            close(fd);
            unlink(o->tmp);
        }
        o->tmp[0] = 0;
        return cannot(path, err);
    }
    return DRT_OK;
}

drt_status drt_outfile_finish(drt_outfile *o) {
    if (!o->f) return DRT_OK;
    /* the flush and close give the reason; a write that failed before them
     * (glibc then drops its buffer) has lost its errno */
    int bad = ferror(o->f), err = 0;
    errno = 0;
    if (fflush(o->f) != 0) bad = 1, err = errno;
    if (fclose(o->f) != 0 && !err) bad = 1, err = errno;
    o->f = NULL;
    if (!bad) return DRT_OK;
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = 0;
    return cannot(o->path, err);
}

drt_status drt_outfile_commit(drt_outfile *o) {
    if (o->f) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_outfile_commit: %s is not finished", o->path);
    if (!o->tmp[0]) return DRT_OK;
    int err = rename(o->tmp, o->path) != 0 ? errno : 0;
    if (err) unlink(o->tmp);
    o->tmp[0] = 0;
    return err ? cannot(o->path, err) : DRT_OK;
}

void drt_outfile_discard(drt_outfile *o) {
    if (o->f) fclose(o->f);
    o->f = NULL;
    if (o->tmp[0]) unlink(o->tmp);
    o->tmp[0] = 0;
}

int drt_same_file(const char *a, const char *b) {
    struct stat sa, sb;
    int ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    if (ea || eb) return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    char da[PATH_MAX], db[PATH_MAX], ra[PATH_MAX], rb[PATH_MAX];
    const char *na, *nb;
    if (!drt_split_path(a, da, sizeof da, &na) || !drt_split_path(b, db, sizeof db, &nb)) return strcmp(a, b) == 0;
    if (!realpath(da, ra) || !realpath(db, rb)) return strcmp(a, b) == 0;
    return strcmp(ra, rb) == 0 && strcmp(na, nb) == 0;
}
