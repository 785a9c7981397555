/* The tokenizer's decode: the ByteLevel decoder (a token whose characters
 * are not all in the byte alphabet is taken as raw UTF-8), then
 * String::from_utf8_lossy; and the streaming form, which holds back a
 * character's bytes until they are whole. */
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "tok_internal.h"

/* ---- decoding -------------------------------------------------------------------- */

/* Appends the bytes the decoder makes of one token (before the lossy UTF-8
 * step). Returns 0 on OOM, -1 when the id is skipped. */
static int token_bytes(const drt_tokenizer *t, int32_t id, int skip_special, int first, bbuf *out) {
    if (id < 0 || id >= t->n_ids || !t->ids[id].kind) return -1;
    if (skip_special && t->ids[id].special) return -1;
    const char *s = drt_tok_arena_str(t, t->ids[id].off);
    size_t n = t->ids[id].len;
    if (t->decoder == DEC_NONE) /* no decoder: tokens joined with spaces */
        return (first || drt_tok_bbuf_put(out, " ", 1)) && drt_tok_bbuf_put(out, s, n);
    size_t mark = out->n;
    for (size_t i = 0; i < n;) {
        int k;
        uint32_t cp = drt_tok_utf8_decode((const unsigned char *)s + i, &k);
        if (cp >= 324 || t->char_byte[cp] < 0) { /* not byte-level: the raw text */
            out->n = mark;
            return drt_tok_bbuf_put(out, s, n);
        }
        unsigned char b = (unsigned char)t->char_byte[cp];
        if (!drt_tok_bbuf_put(out, &b, 1)) return 0;
        i += (size_t)k;
    }
    return 1;
}

drt_status drt_tokenizer_decode(const drt_tokenizer *t, const int32_t *ids, int n_ids, int skip_special, char **text,
                                size_t *len) {
    if (!text) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_decode: text is NULL");
    *text = NULL;
    if (len) *len = 0;
    if (!t || n_ids < 0 || (!ids && n_ids))
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_decode: bad arguments");
    bbuf raw = {0}, out = {0};
    int first = 1, ok = 1;
    for (int i = 0; ok && i < n_ids; i++) {
        int r = token_bytes(t, ids[i], skip_special, first, &raw);
        if (r == 0) ok = 0;
        if (r == 1) first = 0;
    }
    if (ok && !raw.p) ok = drt_tok_bbuf_put(&raw, "", 0);
    if (ok) ok = drt_tok_utf8_lossy((const unsigned char *)raw.p, raw.n, 1, &out) != (size_t)-1;
    if (ok && !out.p) ok = drt_tok_bbuf_put(&out, "", 0);
    free(raw.p);
    if (!ok) {
        free(out.p);
        return drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    }
    *text = out.p;
    if (len) *len = out.n;
    return DRT_OK;
}

void drt_tokenizer_stream_init(drt_tokenizer_stream *st) {
    if (st) memset(st, 0, sizeof *st);
}

static drt_status stream_emit(drt_tokenizer_stream *st, const unsigned char *b, size_t n, int final, char **buf,
                              size_t *len, size_t *cap) {
    bbuf out = {*buf, *len, *cap};
    size_t used = drt_tok_utf8_lossy(b, n, final, &out);
    if (used == (size_t)-1) {
        *buf = out.p, *cap = out.cap;
        return drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    }
    if (!out.p && !drt_tok_bbuf_put(&out, "", 0)) return drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    st->n_pending = (int)(n - used);
    memmove(st->pending, b + used, n - used); /* at most 3 bytes: a truncated character */
    *buf = out.p, *len = out.n, *cap = out.cap;
    return DRT_OK;
}

drt_status drt_tokenizer_stream_push(const drt_tokenizer *t, drt_tokenizer_stream *st, int32_t id, int skip_special,
                                     char **buf, size_t *len, size_t *cap) {
    if (!t || !st || !buf || !len || !cap)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_stream_push: bad arguments");
    bbuf raw = {0};
    if (!drt_tok_bbuf_put(&raw, st->pending, (size_t)st->n_pending))
        return drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    int r = token_bytes(t, id, skip_special, st->n_tokens == 0, &raw);
    drt_status s = DRT_OK;
    if (r == 0) s = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    if (r == 1) st->n_tokens++;
    if (!s) s = stream_emit(st, (const unsigned char *)raw.p, raw.n, 0, buf, len, cap);
    free(raw.p);
    return s;
}

drt_status drt_tokenizer_stream_flush(const drt_tokenizer *t, drt_tokenizer_stream *st, char **buf, size_t *len,
                                      size_t *cap) {
    if (!t || !st || !buf || !len || !cap)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_stream_flush: bad arguments");
    unsigned char p[8];
    size_t n = (size_t)st->n_pending;
    memcpy(p, st->pending, n);
    return stream_emit(st, p, n, 1, buf, len, cap);
}
