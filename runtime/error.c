#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"

/* The message of this thread, in one of two buffers: the arguments may point
 * into the current message (a caller wrapping drt_last_error() with its
 * context), so the new text is formatted into the other buffer and only then
 * becomes current. 16 KiB holds a message with three PATH_MAX paths, so a
 * path is never cut. No heap: a thread's last message stays reachable (LSan
 * runs with use_tls=0, and a malloc'd buffer held only by a thread-local
 * pointer read as a leak at exit). */
#define MSG_MAX 16384
static _Thread_local char g_msg[2][MSG_MAX];
static _Thread_local int g_cur;

drt_status drt_set_error(drt_status s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_msg[!g_cur], MSG_MAX, fmt, ap);
    va_end(ap);
    g_cur = !g_cur;
    return s;
}

const char *drt_last_error(void) {
    return g_msg[g_cur];
}

const char *drt_status_str(drt_status s) {
    switch (s) {
    case DRT_OK: return "ok";
    case DRT_ERR_INVALID_ARG: return "invalid argument";
    case DRT_ERR_IO: return "i/o error";
    case DRT_ERR_FORMAT: return "bad format";
    case DRT_ERR_UNSUPPORTED: return "unsupported";
    case DRT_ERR_UNAVAILABLE: return "unavailable";
    case DRT_ERR_OOM: return "out of memory";
    case DRT_ERR_BACKEND: return "backend error";
    case DRT_ERR_NUMERIC: return "non-finite values";
    case DRT_ERR_BUSY: return "busy";
    }
    return "unknown status";
}

const char *drt_dtype_name(drt_dtype t) {
    static const char *names[DRT_DTYPE_COUNT] = {"f32", "f16", "bf16", "i32", "q8_0", "q4_0"};
    return (unsigned)t < DRT_DTYPE_COUNT ? names[t] : "?";
}

size_t drt_dtype_size(drt_dtype t) {
    static const size_t sizes[DRT_DTYPE_COUNT] = {4, 2, 2, 4, 34, 18};
    return (unsigned)t < DRT_DTYPE_COUNT ? sizes[t] : 0;
}

int drt_dtype_block(drt_dtype t) {
    return t == DRT_Q8_0 || t == DRT_Q4_0 ? 32 : (unsigned)t < DRT_DTYPE_COUNT ? 1 : 0;
}

size_t drt_dtype_align(drt_dtype t) {
    return drt_dtype_block(t) > 1 ? 1 : drt_dtype_size(t);
}

size_t drt_row_bytes(drt_dtype t, int64_t n) {
    int bl = drt_dtype_block(t);
    return bl > 0 && n > 0 ? (size_t)(n / bl) * drt_dtype_size(t) : 0;
}

void drt_free(void *p) {
    free(p);
}
