/* drt_util.h: the CPU counts, DIFFRT_THREADS and the clock's exported face
 * (drt_clock_s, include/diffrt/util.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "drt_error.h"
#include "drt_settings.h"
#include "drt_util.h"

int drt_cpu_online(void) {
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

int drt_cpu_count(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    return drt_cpu_online();
}

/* reads one integer from a sysfs file; -1 when it cannot */
static long read_long(const char *path) {
    long v = -1;
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    if (fscanf(f, "%ld", &v) != 1) v = -1;
    fclose(f);
    return v;
}

int drt_physical_cores(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) != 0) return drt_cpu_online();
    int ncpu = CPU_COUNT(&set), ncores = 0;
    long seen[CPU_SETSIZE];
    for (int c = 0; c < CPU_SETSIZE; c++) {
        if (!CPU_ISSET(c, &set)) continue;
        char path[96];
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/core_id", c);
        long core = read_long(path);
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id", c);
        long pkg = read_long(path);
        if (pkg < 0) pkg = 0;
        if (core < 0) return ncpu > 0 ? ncpu : 1;
        /* a core is (package, core id): core ids repeat across packages */
        long id = pkg * 1000000 + core;
        int dup = 0;
        for (int i = 0; i < ncores && !dup; i++) dup = seen[i] == id;
        if (!dup) seen[ncores++] = id;
    }
    return ncores > 0 ? ncores : 1;
}

drt_status drt_threads_env(int fallback, int *out) {
    long long n;
    drt_status s = drt_setting_int(NULL, "cpu.threads", &n); /* the registry checks [1, 1024] */
    if (s != DRT_OK) return s;
    *out = n > 0 ? (int)n : fallback;
    return DRT_OK;
}

double drt_clock_s(void) {
    return drt_now_s();
}

void drt_release_pages(const void *p, size_t n) {
    const long page = sysconf(_SC_PAGESIZE);
    if (page <= 0 || !p) return;
    uintptr_t a = (uintptr_t)p, e = a + n;
    uintptr_t lo = (a + (uintptr_t)page - 1) & ~((uintptr_t)page - 1), hi = e & ~((uintptr_t)page - 1);
    if (hi > lo) (void)madvise((void *)lo, hi - lo, MADV_DONTNEED);
}

/* drt_printable (include/diffrt/util.h): s copied for use inside a
 * one-line message, shown so that no byte of it
 * can act on a terminal: C0 controls, DEL and bytes that are not UTF-8
 * become \xNN; C1 controls (U+0080..U+009F: U+009B is a CSI), the line and
 * paragraph separators and the bidirectional overrides become \uNNNN; other
 * characters are kept. A string longer than the buffer is cut after a whole
 * character or escape, with "...". Names come from untrusted files. */
const char *drt_printable(const char *s, char *buf, size_t n) {
    if (n == 0) return buf;
    if (!s) s = "(null)";
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0, mark = 0; /* mark: where "..." goes if the rest does not fit */
    for (size_t i = 0; u[i];) {
        char one[8];
        size_t k = 0, used = 1;
        unsigned c = u[i];
        if (c >= 0x20 && c < 0x7f) {
            one[k++] = (char)c;
        } else if (c < 0x80) {
            k = (size_t)snprintf(one, sizeof one, "\\x%02x", c);
        } else {
            /* a well-formed UTF-8 sequence: no overlong form, no surrogate,
             * nothing past U+10FFFF */
            size_t len = c >= 0xc2 && c <= 0xdf ? 2 : c >= 0xe0 && c <= 0xef ? 3 : c >= 0xf0 && c <= 0xf4 ? 4 : 0;
            uint32_t cp = len == 2 ? c & 0x1f : len == 3 ? c & 0x0f : c & 0x07;
            size_t j = 1;
            for (; j < len && (u[i + j] & 0xc0) == 0x80; j++) cp = cp << 6 | (u[i + j] & 0x3f);
            int ok = len && j == len && !(len == 3 && (cp < 0x800 || (cp >= 0xd800 && cp <= 0xdfff))) &&
                     !(len == 4 && (cp < 0x10000 || cp > 0x10ffff));
            if (!ok) {
                k = (size_t)snprintf(one, sizeof one, "\\x%02x", c);
            } else if (cp <= 0x9f || cp == 0x2028 || cp == 0x2029 || (cp >= 0x202a && cp <= 0x202e) ||
                       (cp >= 0x2066 && cp <= 0x2069)) {
                k = (size_t)snprintf(one, sizeof one, "\\u%04x", (unsigned)cp);
                used = len;
            } else {
                memcpy(one, u + i, len);
                k = len;
                used = len;
            }
        }
        if (o + k + 1 > n) { /* does not fit: cut at the mark */
            if (n >= 4) {
                memcpy(buf + mark, "...", 4);
            } else {
                buf[0] = 0;
            }
            return buf;
        }
        memcpy(buf + o, one, k);
        o += k;
        i += used;
        if (o + 4 <= n) mark = o;
    }
    buf[o] = 0;
    return buf;
}
