/* main() for the fuzz harnesses in builds without libFuzzer (any compiler):
 * runs every file named on the command line, or found (recursively) in a
 * directory named there, through LLVMFuzzerTestOneInput once, in name order.
 * ctest runs it on tests/fuzz/corpus/<name> and tests/fuzz/regress/<name>,
 * so the seeds and every input that once crashed are checked by each test
 * run (under the sanitizers in CI). A harness check that fails aborts. */
#define _XOPEN_SOURCE 700
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"

static int g_runs;

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void run_file(const char *path) {
    size_t n;
    uint8_t *in = fz_read_file(path, &n);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(in, n);
    free(in);
    g_runs++;
}

static void run_path(const char *path) {
    struct stat sb;
    FZ_CHECK(stat(path, &sb) == 0, "%s: %s", path, strerror(errno));
    if (!S_ISDIR(sb.st_mode)) {
        run_file(path);
        return;
    }
    DIR *d = opendir(path);
    FZ_CHECK(d, "cannot open %s: %s", path, strerror(errno));
    char **names = NULL;
    size_t n = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (e->d_name[0] == '.') continue; /* ., .., hidden files */
        names = realloc(names, sizeof *names * (n + 1));
        FZ_CHECK(names, "out of memory");
        size_t len = strlen(path) + strlen(e->d_name) + 2;
        names[n] = malloc(len);
        FZ_CHECK(names[n], "out of memory");
        snprintf(names[n++], len, "%s/%s", path, e->d_name);
    }
    closedir(d);
    if (n) qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        run_path(names[i]);
        free(names[i]);
    }
    free(names);
}

int main(int argc, char **argv) {
    LLVMFuzzerInitialize(&argc, &argv);
    for (int i = 1; i < argc; i++) {
        struct stat sb;
        if (stat(argv[i], &sb) != 0 && errno == ENOENT) continue; /* e.g. no regress/ yet */
        run_path(argv[i]);
    }
    printf("%s: %d inputs replayed, no failure\n", argv[0], g_runs);
    return 0;
}
