/* Overflow-checked arithmetic for sizes and counts that come from files.
 *
 * A model directory is untrusted input: every size, count or offset the
 * loader derives from a config.json or safetensors header value (shape x
 * dtype size, heads x head_dim, vocab x hidden, per-layer allocations, the
 * parameter count) is formed with one of these, never with a bare `*` or `+`
 * whose wrap would turn a huge request into a small allocation.
 *
 * Each returns 1 and stores the exact result when it is representable in the
 * result type, else returns 0 and leaves *out unspecified. They are the
 * compiler builtins, so the check costs a flag test, not a division. */
#ifndef DRT_CHECKED_H
#define DRT_CHECKED_H

#include <stddef.h>
#include <stdint.h>

#if !defined(__GNUC__) && !defined(__clang__)
#error "drt_checked.h needs __builtin_mul_overflow (GCC >= 5 or Clang >= 3.8)"
#endif

static inline int drt_mul_ok(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int drt_add_ok(int64_t a, int64_t b, int64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline int drt_mul_u64_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int drt_add_u64_ok(uint64_t a, uint64_t b, uint64_t *out) {
    return !__builtin_add_overflow(a, b, out);
}
static inline int drt_mul_size_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_mul_overflow(a, b, out);
}
static inline int drt_add_size_ok(size_t a, size_t b, size_t *out) {
    return !__builtin_add_overflow(a, b, out);
}

/* n elements of `elem` bytes as a size_t, for malloc: n must be >= 0 and the
 * byte count must fit. */
static inline int drt_bytes_ok(int64_t n, size_t elem, size_t *out) {
    return n >= 0 && !__builtin_mul_overflow(n, elem, out);
}

#endif
