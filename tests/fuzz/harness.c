/* Helpers of the fuzz harnesses; see harness.h. */
#define _XOPEN_SOURCE 700 /* nftw */
#include "harness.h"

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef DRT_FIXTURES_DIR
#define DRT_FIXTURES_DIR "tests/fixtures"
#endif
#ifndef DRT_TOKENIZER_DIR
#define DRT_TOKENIZER_DIR "tests/tokenizer"
#endif

void fz_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "fuzz: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    abort();
}

static char g_tmp[512];

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    remove(p);
    return 0;
}

static void rm_tmp(void) {
    if (g_tmp[0]) nftw(g_tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fz_tmpdir(void) {
    if (g_tmp[0]) return g_tmp;
    const char *base = getenv("DRT_FUZZ_TMPDIR");
    struct stat sb;
    if (!base || !*base) base = stat("/dev/shm", &sb) == 0 && S_ISDIR(sb.st_mode) ? "/dev/shm" : NULL;
    if (!base) base = getenv("TMPDIR");
    if (!base || !*base) base = "/tmp";
    int n = snprintf(g_tmp, sizeof g_tmp, "%s/diffrt-fuzz.XXXXXX", base);
    FZ_CHECK(n > 0 && (size_t)n < sizeof g_tmp, "temp dir name too long under %s", base);
    if (!mkdtemp(g_tmp)) {
        int err = errno;
        g_tmp[0] = 0;
        fz_fail("cannot make a temp dir under %s: %s", base, strerror(err));
    }
    atexit(rm_tmp);
    return g_tmp;
}

const char *fz_fixtures_dir(void) {
    const char *d = getenv("DRT_FIXTURES_DIR");
    return d && *d ? d : DRT_FIXTURES_DIR;
}

const char *fz_tokenizer_dir(void) {
    const char *d = getenv("DRT_TOKENIZER_DIR");
    return d && *d ? d : DRT_TOKENIZER_DIR;
}

const char *fz_join(char *buf, size_t n, const char *dir, const char *name) {
    int k = snprintf(buf, n, "%s/%s", dir, name);
    FZ_CHECK(k > 0 && (size_t)k < n, "path %s/%s too long", dir, name);
    return buf;
}

void fz_write_file(const char *path, const void *data, size_t n) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    FZ_CHECK(fd >= 0, "cannot create %s: %s", path, strerror(errno));
    const char *p = data;
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0 && errno == EINTR) continue;
        FZ_CHECK(w > 0, "cannot write %s: %s", path, strerror(errno));
        p += w;
        n -= (size_t)w;
    }
    FZ_CHECK(close(fd) == 0, "cannot close %s: %s", path, strerror(errno));
}

/* The whole file at path in an exact-size buffer (a read past it is caught
 * by ASan); *n gets its size. Aborts on failure. */
uint8_t *fz_read_file(const char *path, size_t *n) {
    FILE *fp = fopen(path, "rb");
    FZ_CHECK(fp, "cannot open %s: %s (set DRT_FIXTURES_DIR?)", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    uint8_t *buf = malloc(cap);
    FZ_CHECK(buf, "out of memory");
    for (;;) {
        if (len == cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            FZ_CHECK(buf, "out of memory");
        }
        size_t got = fread(buf + len, 1, cap - len, fp);
        if (got == 0) break;
        len += got;
    }
    FZ_CHECK(!ferror(fp), "cannot read %s", path);
    fclose(fp);
    uint8_t *out = malloc(len ? len : 1);
    FZ_CHECK(out, "out of memory");
    if (len) memcpy(out, buf, len);
    free(buf);
    *n = len;
    return out;
}

void fz_copy_file(const char *from, const char *to) {
    size_t n;
    uint8_t *buf = fz_read_file(from, &n);
    fz_write_file(to, buf, n);
    free(buf);
}

static volatile unsigned char g_sink; /* keeps the reads in fz_touch */

void fz_touch(const void *p, size_t n) {
    const unsigned char *b = p;
    unsigned char acc = 0;
    for (size_t i = 0; i < n; i++) acc ^= b[i];
    g_sink = acc;
}
