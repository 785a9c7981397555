/* drt_util.h: the CPU counts, DIFFRT_THREADS and the clock's exported face
 * (drt_clock_s, include/diffrt/util.h). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
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
