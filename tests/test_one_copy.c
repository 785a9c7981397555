/* One resident copy of a quantized model's weights on the cpu backend
 * (issue 30): a q8_0 / q4_0 weight repacked for the int8-dot kernels
 * replaces the mapped file pages it was made from.
 *   - after a session's load, a prefill of more than 128 rows (the GEMM) and
 *     decode steps, the checkpoint mapping's resident bytes stay below the
 *     file's size less its quantized tensors (before, every quantized byte
 *     stayed resident beside its copy);
 *   - the GEMM widens its panels from the repacked copy: a prefill gives
 *     the logits of a session that reads the original (cpu.repack=0) bit for
 *     bit, in the f32 and the bf16 mode; that session reads pages the first
 *     one dropped, so they come back from the file.
 * The resident-bytes check needs the repack (a CPU with AVX512-VNNI and
 * VBMI); elsewhere it is skipped with a note (exit 77) after the rest. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "diffrt/diffrt.h"
#include "diffrt/quantize.h"
#include "drt_test.h"
#include "safetensors.h"

#define MODEL DRT_MODELS_DIR "/diff-v1-tiny"
#define T 140 /* > 128: the GEMM path (cpu_fast.h CPU_GEMV_MAX_T) */
#define STEPS 4

/* resident KiB of the mappings of path in this process (smaps), -1 when none */
static long mapping_rss_kib(const char *path) {
    FILE *f = fopen("/proc/self/smaps", "r");
    if (!f) return -1;
    char line[4096];
    int in = 0;
    long kib = -1;
    while (fgets(line, sizeof line, f)) {
        unsigned long lo, hi;
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2) {
            const char *p = strchr(line, '/');
            size_t n = p ? strcspn(p, "\n") : 0;
            in = p && n == strlen(path) && strncmp(p, path, n) == 0;
            if (in && kib < 0) kib = 0;
        } else if (in && strncmp(line, "Rss:", 4) == 0) {
            kib += strtol(line + 4, NULL, 10);
        }
    }
    fclose(f);
    return kib;
}

static drt_status prefill(drt_model *m, const char *settings, float *out) {
    drt_settings *set = NULL;
    drt_status st = drt_settings_create(&set);
    if (st == DRT_OK && settings) {
        char buf[128];
        snprintf(buf, sizeof buf, "%s", settings);
        char *eq = strchr(buf, '=');
        *eq = 0;
        st = drt_settings_set(set, buf, eq + 1);
    }
    drt_session_opts o = {.backend = "cpu", .max_ctx = T + STEPS + 1, .settings = set};
    drt_session *s = NULL;
    if (st == DRT_OK) st = drt_session_create(m, &o, &s);
    int32_t ids[T];
    for (int i = 0; i < T; i++) ids[i] = (int32_t)((i * 37 + 5) % 800 + 3);
    drt_model_info info;
    drt_model_get_info(m, &info);
    const int V = info.vocab;
    float *tmp = malloc(sizeof(float) * (size_t)V);
    if (st == DRT_OK) st = drt_session_forward(s, ids, T, out, 0);
    for (int i = 0; st == DRT_OK && i < STEPS; i++) {
        int32_t t = (int32_t)(i * 11 + 7);
        st = drt_session_forward(s, &t, 1, tmp, 0);
    }
    free(tmp);
    drt_session_free(s);
    drt_settings_free(set);
    return st;
}

static int has_repack(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi");
#else
    return 0;
#endif
}

static int has_bf16(void) {
#if defined(__x86_64__)
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16");
#else
    return 0;
#endif
}

static int one_type(drt_dtype type, const char *tname) {
    char dir[512], file[600];
    snprintf(dir, sizeof dir, "%s/one_copy_%s", DRT_TMP_DIR, tname);
    snprintf(file, sizeof file, "%s/model.safetensors", dir);
    char cmd[700];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0 || mkdir(dir, 0755) != 0) {
        DRT_CHECK(0, "%s: cannot make %s", tname, dir);
        return 0;
    }
    if (drt_quantize_model(MODEL, type, dir, NULL, NULL) != DRT_OK) {
        DRT_CHECK(0, "%s: quantize: %s", tname, drt_last_error());
        return 0;
    }
    /* the bytes of the quantized tensors (U8 blocks) */
    drt_st_file sf;
    if (drt_st_open(file, &sf) != DRT_OK) {
        DRT_CHECK(0, "%s: %s", tname, drt_last_error());
        return 0;
    }
    size_t qbytes = 0, fsize = sf.map_size;
    int nq = 0;
    for (int i = 0; i < sf.n_tensors; i++)
        if (sf.tensors[i].dtype == DRT_Q8_0 || sf.tensors[i].dtype == DRT_Q4_0) qbytes += sf.tensors[i].nbytes, nq++;
    drt_st_close(&sf);

    drt_model *m = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) {
        DRT_CHECK(0, "%s: load: %s", tname, drt_last_error());
        return 0;
    }
    drt_model_info info;
    drt_model_get_info(m, &info);
    const int V = info.vocab;
    float *a = malloc(sizeof(float) * (size_t)V), *b = malloc(sizeof(float) * (size_t)V);
    for (int i = 0; i < V; i++) a[i] = b[i] = NAN;
    int skipped = 0;
    DRT_CHECK(prefill(m, NULL, a) == DRT_OK, "%s: prefill (repacked): %s", tname, drt_last_error());
    long rss = mapping_rss_kib(file);
    /* what may stay: the file less its quantized tensors, plus the two
     * partial pages at each tensor's ends and the header's page */
    long bound = (long)((fsize - qbytes) / 1024) + 8L * nq + 8;
    if (has_repack()) {
        DRT_CHECK(rss >= 0 && rss <= bound,
                  "%s: %ld KiB of %s resident after a session with repacked weights; at most %ld (file %zu KiB, "
                  "quantized tensors %zu KiB in %d)",
                  tname, rss, file, bound, fsize / 1024, qbytes / 1024, nq);
        printf("test_one_copy: %s: %ld KiB of the %zu KiB file resident (bound %ld; %zu KiB quantized)\n", tname, rss,
               fsize / 1024, bound, qbytes / 1024);
    } else {
        printf("test_one_copy: %s: no repack on this CPU (AVX512-VNNI and VBMI): resident bytes not checked\n", tname);
        skipped = 1;
    }
    /* the original, read again: the dropped pages come back from the file */
    DRT_CHECK(prefill(m, "cpu.repack=0", b) == DRT_OK, "%s: prefill (original): %s", tname, drt_last_error());
    int same = memcmp(a, b, sizeof(float) * (size_t)V) == 0;
    DRT_CHECK(same, "%s: T=%d prefill logits differ between the repacked copy and the original", tname, T);
    if (has_bf16()) {
        for (int i = 0; i < V; i++) a[i] = b[i] = NAN;
        DRT_CHECK(prefill(m, "cpu.precision=bf16", a) == DRT_OK, "%s: bf16: %s", tname, drt_last_error());
        /* bf16 mode, original: repack off */
        drt_settings *set = NULL;
        drt_settings_create(&set);
        drt_settings_set(set, "cpu.precision", "bf16");
        drt_settings_set(set, "cpu.repack", "0");
        drt_session_opts o = {.backend = "cpu", .max_ctx = T + STEPS + 1, .settings = set};
        drt_session *s = NULL;
        int32_t ids[T];
        for (int i = 0; i < T; i++) ids[i] = (int32_t)((i * 37 + 5) % 800 + 3);
        drt_status st = drt_session_create(m, &o, &s);
        if (st == DRT_OK) st = drt_session_forward(s, ids, T, b, 0);
        DRT_CHECK(st == DRT_OK, "%s: bf16 original: %s", tname, drt_last_error());
        drt_session_free(s);
        drt_settings_free(set);
        DRT_CHECK(memcmp(a, b, sizeof(float) * (size_t)V) == 0,
                  "%s: bf16 mode: T=%d prefill logits differ between the repacked copy and the original", tname, T);
    }
    free(a);
    free(b);
    drt_model_free(m);
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    if (system(cmd) != 0) fprintf(stderr, "test_one_copy: cannot remove %s\n", dir);
    return skipped;
}

int main(void) {
    int skipped = one_type(DRT_Q8_0, "q8_0");
    skipped |= one_type(DRT_Q4_0, "q4_0");
    int rc = drt_test_summary("test_one_copy");
    return rc == 0 && skipped ? 77 : rc; /* 77: SKIP_RETURN_CODE in tests/CMakeLists.txt */
}
