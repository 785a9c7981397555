/* The tokenizer's growable buffers and its UTF-8 steps: strict validation,
 * decode and encode of one character, Unicode White_Space, and the lossy
 * conversion String::from_utf8_lossy makes (U+FFFD per invalid chunk). */
#include <stdlib.h>
#include <string.h>

#include "tok_internal.h"

int drt_tok_ivec_push(ivec *a, int32_t x) {
    if (a->n == a->cap) {
        size_t nc = a->cap ? a->cap * 2 : 64;
        int32_t *nv = realloc(a->v, nc * sizeof *nv);
        if (!nv) return 0;
        a->v = nv;
        a->cap = nc;
    }
    a->v[a->n++] = x;
    return 1;
}
int drt_tok_bbuf_put(bbuf *b, const void *src, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap : 256;
        while (nc < b->n + n + 1) nc *= 2;
        char *np = realloc(b->p, nc);
        if (!np) return 0;
        b->p = np;
        b->cap = nc;
    }
    if (n) memcpy(b->p + b->n, src, n);
    b->n += n;
    b->p[b->n] = 0;
    return 1;
}

/* Length of the valid UTF-8 character at s[0..n), 0 when invalid. Strict:
 * no overlongs, no surrogates, nothing above U+10FFFF. */
static int utf8_valid_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) return n >= 2 && (s[1] & 0xC0) == 0x80 ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
        if (n < 3 || (s[2] & 0xC0) != 0x80) return 0;
        unsigned lo = c == 0xE0 ? 0xA0 : 0x80, hi = c == 0xED ? 0x9F : 0xBF;
        return s[1] >= lo && s[1] <= hi ? 3 : 0;
    }
    if (c >= 0xF0 && c <= 0xF4) {
        if (n < 4 || (s[2] & 0xC0) != 0x80 || (s[3] & 0xC0) != 0x80) return 0;
        unsigned lo = c == 0xF0 ? 0x90 : 0x80, hi = c == 0xF4 ? 0x8F : 0xBF;
        return s[1] >= lo && s[1] <= hi ? 4 : 0;
    }
    return 0;
}
/* Offset of the first invalid byte, or n when s is valid UTF-8. */
size_t drt_tok_utf8_check(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        int k = utf8_valid_len(u + i, n - i);
        if (!k) return i;
        i += (size_t)k;
    }
    return n;
}
/* Decodes the (valid) character at s; *len gets its byte length. */
uint32_t drt_tok_utf8_decode(const unsigned char *s, int *len) {
    unsigned c = s[0];
    if (c < 0x80) return *len = 1, c;
    if (c < 0xE0) return *len = 2, ((c & 0x1Fu) << 6) | (s[1] & 0x3Fu);
    if (c < 0xF0) return *len = 3, ((c & 0x0Fu) << 12) | ((s[1] & 0x3Fu) << 6) | (s[2] & 0x3Fu);
    *len = 4;
    return ((c & 0x07u) << 18) | ((s[1] & 0x3Fu) << 12) | ((s[2] & 0x3Fu) << 6) | (s[3] & 0x3Fu);
}
int drt_tok_utf8_encode(uint32_t cp, char *out) {
    if (cp < 0x80) return out[0] = (char)cp, 1;
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}
/* Start of the character that ends just before s[i] (s valid UTF-8, i > 0). */
size_t drt_tok_utf8_prev(const char *s, size_t i) {
    do i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}
/* Unicode White_Space: Rust's char::is_whitespace, regex \s, Oniguruma \s. */
int drt_tok_is_white_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}
/* Rust's String::from_utf8_lossy on b[0..n), appended to out: each maximal
 * invalid prefix becomes one U+FFFD (core::str::Utf8Chunks). When !final, a
 * truncated but so far valid character at the end is left unconsumed; the
 * return value is the number of bytes consumed (or (size_t)-1 on OOM). */
size_t drt_tok_utf8_lossy(const unsigned char *b, size_t n, int final, bbuf *out) {
    static const char FFFD[3] = {(char)0xEF, (char)0xBF, (char)0xBD};
    size_t i = 0, valid_start = 0;
    while (i < n) {
        size_t start = i;
        unsigned c = b[i++];
        int ok = 1, truncated = 0;
        if (c >= 0x80) {
            int w = (c >= 0xC2 && c <= 0xDF) ? 2 : (c >= 0xE0 && c <= 0xEF) ? 3 : (c >= 0xF0 && c <= 0xF4) ? 4 : 0;
            if (!w) ok = 0;
            for (int k = 1; ok && k < w; k++) {
                if (i == n) {
                    truncated = 1;
                    break;
                }
                unsigned d = b[i], lo = 0x80, hi = 0xBF;
                if (k == 1) {
                    if (c == 0xE0) lo = 0xA0;
                    if (c == 0xED) hi = 0x9F;
                    if (c == 0xF0) lo = 0x90;
                    if (c == 0xF4) hi = 0x8F;
                }
                if (d < lo || d > hi)
                    ok = 0;
                else
                    i++;
            }
        }
        if (ok && !truncated) continue;
        if (truncated && !final) {
            if (!drt_tok_bbuf_put(out, b + valid_start, start - valid_start)) return (size_t)-1;
            return start;
        }
        /* b[start..i) is one invalid chunk */
        if (!drt_tok_bbuf_put(out, b + valid_start, start - valid_start) || !drt_tok_bbuf_put(out, FFFD, 3))
            return (size_t)-1;
        valid_start = i;
    }
    if (!drt_tok_bbuf_put(out, b + valid_start, n - valid_start)) return (size_t)-1;
    return n;
}
