/* Shared by the libFuzzer harnesses (tests/fuzz/fuzz_*.c): a scratch
 * directory per process, file helpers, and a check that aborts (a finding).
 *
 * The harnesses define the two libFuzzer entry points. Built with
 * DIFFRT_FUZZ=ON they link libFuzzer's main; in every other build they link
 * replay.c, which runs the committed seeds and regression inputs through the
 * same code once (ctest fuzz_replay_<name>). */
#ifndef DRT_FUZZ_HARNESS_H
#define DRT_FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A fresh directory for this process, removed at a normal exit (a crash
 * leaves it; scripts/fuzz.sh puts them all in one it removes): under
 * $DRT_FUZZ_TMPDIR, else /dev/shm (tmpfs: a file written per input costs
 * little), else $TMPDIR or /tmp. */
const char *fz_tmpdir(void);
/* The bundled fixtures: $DRT_FIXTURES_DIR, else the source tree's
 * tests/fixtures (compiled in); tokenizers: tests/tokenizer likewise. */
const char *fz_fixtures_dir(void);
const char *fz_tokenizer_dir(void);

/* dir "/" name into buf (aborts when it does not fit). */
const char *fz_join(char *buf, size_t n, const char *dir, const char *name);
/* Writes (creates or truncates) path; aborts on failure. */
void fz_write_file(const char *path, const void *data, size_t n);
/* Copies a file; aborts on failure. */
void fz_copy_file(const char *from, const char *to);
/* the whole file in an exact-size buffer (free() it); aborts on failure */
uint8_t *fz_read_file(const char *path, size_t *n);
/* Reads every byte (so a bad pointer or length faults here, under ASan or
 * as a SEGV past a mapping). */
void fz_touch(const void *p, size_t n);

/* Prints "fuzz: <message>" and aborts: a broken invariant, or a harness
 * that cannot set itself up. */
void fz_fail(const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 1, 2), noreturn))
#endif
    ;
#define FZ_CHECK(cond, ...)                                                                                            \
    do {                                                                                                               \
        if (!(cond)) fz_fail(__VA_ARGS__);                                                                             \
    } while (0)

#endif
