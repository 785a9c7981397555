/* Small host helpers every layer shares (runtime, backends, model, conform,
 * the CLI, tests, benchmarks): one clock, one splitmix64, one CPU count, one
 * reading of DIFFRT_THREADS. Internal to diffrt, not installed.
 *
 * The clock and splitmix64 are static inline so that programs which do not
 * link libdiffrt (bench/membw.c, bench/blas_sgemm.c) use the same ones; the
 * rest lives in runtime/util.c. */
#ifndef DRT_UTIL_H
#define DRT_UTIL_H

#include <stdint.h>
#include <time.h>

#include "diffrt/diffrt.h"
#include "diffrt/util.h"

/* Seconds on CLOCK_MONOTONIC (never steps back; its zero is arbitrary): for
 * intervals only. Needs _POSIX_C_SOURCE >= 199309L, which the build sets.
 * Exported as drt_clock_s (include/diffrt/util.h) for the public API. */
static inline double drt_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The splitmix64 output function (a bijection of 64-bit words): also a
 * cheap well-mixed hash of one word. */
static inline uint64_t drt_mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* splitmix64 (Steele, Lea, Flood 2014; Vigna's constants): adds the golden
 * gamma 0x9e3779b97f4a7c15 to *state and returns drt_mix64 of the new state.
 * The sampler, the NIAH generator (python/niah/generate.py mirrors it),
 * conform's inputs and the tests' drt_rng all draw from it: changing a
 * constant changes generated prompts and sampled tokens. Seed 0 gives
 * 0xe220a8397b1dcdaf, 0x6e789e6aa1b965f4, 0x06c45d188009454f first. */
static inline uint64_t drt_splitmix64(uint64_t *state) {
    return drt_mix64(*state += 0x9e3779b97f4a7c15ull);
}

/* drt_cpu_count, drt_cpu_online and drt_physical_cores (runtime/util.c)
 * are public: include/diffrt/util.h. */

/* The most threads DIFFRT_THREADS (or a requested count) may ask for. */
#define DRT_MAX_THREADS 1024

/* Worker threads from DIFFRT_THREADS: its value when set and non-empty (an
 * integer in [1, DRT_MAX_THREADS], else DRT_ERR_INVALID_ARG naming the value),
 * else fallback (e.g. drt_physical_cores()). */
drt_status drt_threads_env(int fallback, int *out);

/* Drops the resident pages that lie wholly inside [p, p + n) (madvise
 * MADV_DONTNEED). Only for bytes of a read-only file mapping
 * (drt_st_tensor.mapped, DRT_TF_MAPPED): a later read brings them back from
 * the file, where anonymous memory would read zeros. */
void drt_release_pages(const void *p, size_t n);

/* Opens a file of a model directory for reading. It must be a regular file:
 * the path is stat'ed first, so a device node is never opened (opening one
 * can have side effects), then opened O_RDONLY|O_NONBLOCK|O_CLOEXEC (a FIFO
 * put there after the stat cannot block the open) and checked again with
 * fstat. Anything else is DRT_ERR_IO "<path>: not a regular file (a FIFO)";
 * a symbolic link loop is "<path>: cannot open: Too many levels of symbolic
 * links". On success *fd is the descriptor and *size the file size
 * (runtime/files.c, with drt_read_text_file and drt_path_join, which are
 * public: include/diffrt/util.h). */
drt_status drt_open_regular(const char *path, int *fd, uint64_t *size);

struct cJSON;
/* Parses text[0..len) as one JSON document, as strictly as Python's json
 * and serde_json (cJSON alone is laxer): drt_json_validate with
 * DRT_JSON_NO_NUL (include/diffrt/util.h) first, so a BOM, a control byte,
 * a number JSON does not allow, text after the value, a key twice in one
 * object or a \u0000 escape is DRT_ERR_FORMAT, one line naming the file
 * (and `what` in it, e.g. "header"; NULL: the file itself) and the byte
 * offset or the key's path. Used for config.json, tokenizer.json,
 * safetensors headers and the shard index. */
drt_status drt_json_parse(const char *text, size_t len, const char *name, const char *what, struct cJSON **out);

#endif
