/* drt_util.h: the CPU counts and DIFFRT_THREADS. */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "drt_error.h"
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
        snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu%d/topology/physical_package_id",
                 c);
        long pkg = read_long(path);
        if (pkg < 0) pkg = 0;
        if (core < 0) return ncpu > 0 ? ncpu : 1;
        /* a core is (package, core id): core ids repeat across packages */
        long id = pkg * 1000000 + core;
        int dup = 0;
        for (int i = 0; i < ncores && !dup; i++)
            dup = seen[i] == id;
        if (!dup) seen[ncores++] = id;
    }
    return ncores > 0 ? ncores : 1;
}

drt_status drt_threads_env(int fallback, int *out) {
    const char *env = getenv("DIFFRT_THREADS");
    if (env && *env) {
        char *end;
        long n = strtol(env, &end, 10);
        if (*end || n < 1 || n > DRT_MAX_THREADS)
            return drt_set_error(DRT_ERR_INVALID_ARG,
                                 "DIFFRT_THREADS=%s: expected an integer in [1, %d]", env,
                                 DRT_MAX_THREADS);
        *out = (int)n;
        return DRT_OK;
    }
    *out = fallback;
    return DRT_OK;
}
