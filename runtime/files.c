/* The file and JSON helpers every layer above runtime/ reads model files
 * with: a regular file opened without side effects (drt_open_regular), a
 * whole text file under a size limit (drt_read_text_file), a path joined
 * (drt_path_join) and JSON parsed as strictly as Python reads it
 * (drt_json_parse, after drt_json_validate in runtime/json.c). The public
 * ones are declared in include/diffrt/util.h, the rest in drt_util.h. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "drt_error.h"
#include "drt_util.h"

#define TEXT_FILE_MAX ((size_t)64 << 20)

char *drt_path_join(const char *dir, const char *name) {
    if (!dir || !name) return NULL;
    size_t a = strlen(dir), b = strlen(name);
    int slash = a > 0 && dir[a - 1] != '/';
    char *p = malloc(a + (size_t)slash + b + 1);
    if (!p) return NULL;
    memcpy(p, dir, a);
    if (slash) p[a] = '/';
    memcpy(p + a + (size_t)slash, name, b + 1);
    return p;
}

/* ---- opening files -------------------------------------------------------- */

static const char *file_kind(mode_t m) {
    if (S_ISDIR(m)) return "a directory";
    if (S_ISFIFO(m)) return "a FIFO";
    if (S_ISCHR(m)) return "a character device";
    if (S_ISBLK(m)) return "a block device";
    if (S_ISSOCK(m)) return "a socket";
    if (S_ISLNK(m)) return "a symbolic link";
    return "not a file";
}

drt_status drt_open_regular(const char *path, int *fd, uint64_t *size) {
    *fd = -1;
    *size = 0;
    /* stat before open: a device node named config.json must not be opened
     * at all (opening some devices does something), and a FIFO is refused
     * here without the open that would wait for a writer */
    struct stat sb;
    if (stat(path, &sb) != 0) return drt_set_error(DRT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return drt_set_error(DRT_ERR_IO, "%s: not a regular file (%s)", path, file_kind(sb.st_mode));
    /* the entry can change between stat and open: O_NONBLOCK keeps the open
     * of a FIFO swapped in from blocking, fstat decides on what was opened */
    int f = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (f < 0) return drt_set_error(DRT_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    if (fstat(f, &sb) != 0) {
        int err = errno;
        close(f);
        return drt_set_error(DRT_ERR_IO, "%s: cannot stat: %s", path, strerror(err));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(f);
        return drt_set_error(DRT_ERR_IO, "%s: not a regular file (%s)", path, file_kind(sb.st_mode));
    }
    *fd = f;
    *size = (uint64_t)sb.st_size;
    return DRT_OK;
}

/* ---- text files ----------------------------------------------------------- */

drt_status drt_read_text_file(const char *path, char **out, size_t *len) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_read_text_file: out is NULL");
    *out = NULL;
    if (len) *len = 0;
    if (!path) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_read_text_file: path is NULL");
    int fd;
    uint64_t fsize;
    drt_status st = drt_open_regular(path, &fd, &fsize);
    if (st != DRT_OK) return st;
    char *buf = NULL;
    if (fsize > TEXT_FILE_MAX) {
        st = drt_set_error(DRT_ERR_IO, "%s: file is %" PRIu64 " bytes, over the %zu MiB limit for a text file", path,
                           fsize, TEXT_FILE_MAX >> 20);
        goto done;
    }
    /* read to EOF rather than trusting st_size: a file that grows after the
     * fstat still stops at the limit */
    size_t cap = 4096, n = 0;
    buf = malloc(cap);
    if (!buf) {
        st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", path);
        goto done;
    }
    for (;;) {
        if (n + 1 == cap) {
            if (n > TEXT_FILE_MAX) {
                st = drt_set_error(DRT_ERR_IO, "%s: over the %zu MiB limit for a text file", path, TEXT_FILE_MAX >> 20);
                goto done;
            }
            size_t ncap = cap * 2 > TEXT_FILE_MAX + 2 ? TEXT_FILE_MAX + 2 : cap * 2;
            char *nbuf = realloc(buf, ncap);
            if (!nbuf) {
                st = drt_set_error(DRT_ERR_OOM, "%s: out of memory", path);
                goto done;
            }
            buf = nbuf;
            cap = ncap;
        }
        ssize_t got = read(fd, buf + n, cap - 1 - n);
        if (got < 0 && errno == EINTR) continue;
        if (got < 0) {
            st = drt_set_error(DRT_ERR_IO, "%s: read failed: %s", path, strerror(errno));
            goto done;
        }
        if (got == 0) break;
        n += (size_t)got;
    }
    buf[n] = 0;
    *out = buf;
    buf = NULL;
    if (len) *len = n;
done:
    free(buf);
    close(fd);
    return st;
}

/* ---- JSON read as the reference tools read it ---------------------------- */

drt_status drt_json_parse(const char *text, size_t len, const char *name, const char *what, cJSON **out) {
    *out = NULL;
    /* every rule Python's json holds to and cJSON does not, and no key twice
     * (include/diffrt/util.h): after it cJSON only builds the tree */
    drt_status st = drt_json_validate(text, len, name, what, 0, DRT_JSON_NO_NUL);
    if (st != DRT_OK) return st;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, NULL, 0);
    if (!root) return drt_set_error(DRT_ERR_OOM, "%s: out of memory parsing it", name);
    *out = root;
    return DRT_OK;
}
