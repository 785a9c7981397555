/* libFuzzer harness: the tokenizer (text/).
 *
 * Byte 0 of the input picks what the rest is:
 *   bits 0-1  mode  0: a tokenizer.json, then a NUL, then text to encode
 *                      (a fixed sample when there is none);
 *                   1: text, encoded with a bundled tokenizer;
 *                   2: token ids (int16 little-endian, so negative and
 *                      out-of-vocab ids too), decoded with a bundled tokenizer;
 *                   3: bytes, each turned into the id of its byte-level token
 *                      and streamed one at a time (characters cut apart);
 *   bits 2-3  which bundled tokenizer (tests/tokenizer: gpt2, llama3, flags,
 *             bytes256);
 *   bit 4     add_special for encode; bit 5 skip_special for decode.
 *
 * Checked on every run (abort = finding):
 *   - a load or encode either succeeds or fails with a message; encode fails
 *     on text that is not valid UTF-8 and, with a bundled tokenizer, succeeds
 *     on every valid text;
 *   - every id encode returns is in [0, 2^24) (bundled: names a token);
 *   - decode gives valid UTF-8 of the length it reports, NUL-terminated;
 *   - streaming decode, one id at a time then flush, gives exactly the bytes
 *     of the whole decode (the promise in tokenizer.h), and its buffer is
 *     valid UTF-8 after every push;
 *   - gpt2, llama3, bytes256 (no prefix space, no stripping): decoding what
 *     encode made of a valid text, specials kept, gives the text back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "harness.h"
#include "diffrt/tokenizer.h"

static const char *const bundled_names[4] = {"gpt2", "llama3", "flags", "bytes256"};
static const int bundled_round_trip[4] = {1, 1, 0, 1};
static drt_tokenizer *bundled[4];
static int32_t byte_ids[4][256]; /* id of each byte's byte-level token, -1 when none */

static const char SAMPLE[] = "Hello, world! It's 2024: \xe4\xb8\xad\xe6\x96\x87 caf\xc3\xa9 "
                             "\xf0\x9f\x98\x80\n\tx  y\r\n<|endoftext|><s> 12345 'll";

/* Strict UTF-8: no overlongs, no surrogates, nothing above U+10FFFF. */
static int utf8_ok(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned c = s[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (!k || n - i < k) return 0;
        unsigned lo = c == 0xE0 ? 0xA0 : c == 0xF0 ? 0x90 : 0x80;
        unsigned hi = c == 0xED ? 0x9F : c == 0xF4 ? 0x8F : 0xBF;
        if (k > 1 && (s[i + 1] < lo || s[i + 1] > hi)) return 0;
        for (size_t j = 2; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        i += k;
    }
    return 1;
}

/* GPT-2's bytes_to_unicode: printable Latin-1 is itself, the rest U+0100.. */
static int byte_char_utf8(int b, char out[4]) {
    int n = 0;
    for (int x = 0; x < b; x++) n += !((x >= '!' && x <= '~') || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE && x <= 0xFF));
    int printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    unsigned cp = printable ? (unsigned)b : 256u + (unsigned)n;
    if (cp < 0x80) return out[0] = (char)cp, 1;
    out[0] = (char)(0xC0 | (cp >> 6));
    out[1] = (char)(0x80 | (cp & 0x3F));
    return 2;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    for (int k = 0; k < 4; k++) {
        char name[64], path[600];
        snprintf(name, sizeof name, "%s.json", bundled_names[k]);
        FZ_CHECK(drt_tokenizer_load(fz_join(path, sizeof path, fz_tokenizer_dir(), name), &bundled[k]) == DRT_OK,
                 "%s (set DRT_TOKENIZER_DIR?)", drt_last_error());
        for (int b = 0; b < 256; b++) {
            char s[5] = {0};
            byte_char_utf8(b, s);
            byte_ids[k][b] = drt_tokenizer_token_to_id(bundled[k], s);
        }
    }
    return 0;
}

/* decode, streamed decode, and their agreement */
static void check_decode(const drt_tokenizer *t, const int32_t *ids, int n, int skip) {
    char *text = NULL;
    size_t len = 0;
    drt_status s = drt_tokenizer_decode(t, ids, n, skip, &text, &len);
    FZ_CHECK(s == DRT_OK, "decode of %d ids failed: %s", n, drt_last_error());
    FZ_CHECK(text && text[len] == 0, "decode: no NUL at text[len]");
    FZ_CHECK(utf8_ok((const unsigned char *)text, len), "decode gave invalid UTF-8");

    drt_tokenizer_stream st;
    drt_tokenizer_stream_init(&st);
    char *buf = NULL;
    size_t blen = 0, cap = 0;
    for (int i = 0; i < n; i++) {
        size_t before = blen;
        s = drt_tokenizer_stream_push(t, &st, ids[i], skip, &buf, &blen, &cap);
        FZ_CHECK(s == DRT_OK, "stream_push failed: %s", drt_last_error());
        FZ_CHECK(buf && buf[blen] == 0 && blen < cap && blen >= before, "stream buffer not NUL-terminated");
        /* what this push appended is whole characters */
        FZ_CHECK(utf8_ok((const unsigned char *)buf + before, blen - before),
                 "stream emitted an incomplete character after id %d (#%d)", ids[i], i);
    }
    s = drt_tokenizer_stream_flush(t, &st, &buf, &blen, &cap);
    FZ_CHECK(s == DRT_OK, "stream_flush failed: %s", drt_last_error());
    FZ_CHECK(st.n_pending == 0, "%d bytes pending after flush", st.n_pending);
    FZ_CHECK(blen == len && memcmp(buf, text, len) == 0,
             "streamed decode (%zu bytes) differs from decode (%zu bytes), %d ids", blen, len, n);
    for (int i = 0; i < n; i++) {
        const char *tok = drt_tokenizer_id_to_token(t, ids[i]);
        if (tok) fz_touch(tok, strlen(tok));
        (void)drt_tokenizer_is_special(t, ids[i]);
    }
    free(buf);
    free(text);
}

/* encode, the ids' range, decode of the result, round trip where it holds */
static void check_encode(const drt_tokenizer *t, const char *text, size_t n, int add_special, int skip, int bundled_tok,
                         int round_trip) {
    int32_t *ids = NULL;
    int n_ids = -1;
    drt_set_error(DRT_OK, "%s", "");
    drt_status s = drt_tokenizer_encode(t, text, n, add_special, &ids, &n_ids);
    int valid = utf8_ok((const unsigned char *)text, n);
    if (s != DRT_OK) {
        FZ_CHECK(!ids && n_ids == 0, "failed encode left ids");
        FZ_CHECK(drt_last_error()[0], "encode: status %d without a message", (int)s);
        FZ_CHECK(!valid || !bundled_tok, "encode of %zu bytes of valid UTF-8 failed: %s", n, drt_last_error());
        return;
    }
    FZ_CHECK(valid, "encode accepted invalid UTF-8");
    FZ_CHECK(ids && n_ids >= 0, "encode: ids %p, n %d", (void *)ids, n_ids);
    int vocab = drt_tokenizer_vocab_size(t);
    for (int i = 0; i < n_ids; i++) {
        FZ_CHECK(ids[i] >= 0 && ids[i] < (1 << 24), "encode gave id %d", ids[i]);
        if (bundled_tok)
            FZ_CHECK(ids[i] < vocab && drt_tokenizer_id_to_token(t, ids[i]), "encode gave id %d, which names no token",
                     ids[i]);
    }
    check_decode(t, ids, n_ids, skip);
    if (round_trip && !add_special) {
        char *back = NULL;
        size_t bn = 0;
        FZ_CHECK(drt_tokenizer_decode(t, ids, n_ids, 0, &back, &bn) == DRT_OK, "%s", drt_last_error());
        FZ_CHECK(bn == n && memcmp(back, text, n) == 0, "round trip: %zu bytes of text decode to %zu different bytes",
                 n, bn);
        free(back);
    }
    free(ids);
}

static void fuzz_json(const uint8_t *data, size_t size, int add_special, int skip) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t jn = nul ? (size_t)(nul - data) : size;
    const char *text = nul ? (const char *)nul + 1 : SAMPLE;
    size_t tn = nul ? size - jn - 1 : sizeof SAMPLE - 1;
    if (nul && tn == 0) text = SAMPLE, tn = sizeof SAMPLE - 1;
    drt_tokenizer *t = NULL;
    drt_set_error(DRT_OK, "%s", "");
    drt_status s = drt_tokenizer_load_json((const char *)data, jn, "fuzz.json", &t);
    if (s != DRT_OK) {
        FZ_CHECK(!t, "failed load left a tokenizer");
        FZ_CHECK(drt_last_error()[0], "load: status %d without a message", (int)s);
        return;
    }
    int vocab = drt_tokenizer_vocab_size(t);
    FZ_CHECK(vocab >= 0 && vocab <= (1 << 24), "vocab size %d", vocab);
    int32_t bos = drt_tokenizer_bos_id(t);
    FZ_CHECK(bos == -1 || drt_tokenizer_id_to_token(t, bos), "bos %d names no token", bos);
    check_encode(t, text, tn, add_special, skip, 0, 0);
    /* every id up to 512 and a few outside, one at a time and together */
    int32_t ids[520];
    int n = 0;
    for (int32_t id = -2; id < 512 && n < 520; id++) ids[n++] = id;
    ids[n++] = vocab;
    ids[n++] = vocab > 0 ? vocab - 1 : 0;
    check_decode(t, ids, n, skip);
    drt_tokenizer_free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int mode = data[0] & 3, k = (data[0] >> 2) & 3;
    int add_special = (data[0] >> 4) & 1, skip = (data[0] >> 5) & 1;
    data++, size--;
    const drt_tokenizer *t = bundled[k];
    if (mode == 0) {
        fuzz_json(data, size, add_special, skip);
    } else if (mode == 1) {
        check_encode(t, (const char *)data, size, add_special, skip, 1, bundled_round_trip[k]);
    } else {
        int n = mode == 2 ? (int)(size / 2) : (int)size;
        int32_t *ids = malloc(sizeof *ids * ((size_t)n + 1));
        FZ_CHECK(ids, "out of memory");
        for (int i = 0; i < n; i++) {
            if (mode == 3) {
                ids[i] = byte_ids[k][data[i]];
            } else {
                int16_t v; /* host order */
                memcpy(&v, data + 2 * i, sizeof v);
                ids[i] = v;
            }
        }
        check_decode(t, ids, n, skip);
        free(ids);
    }
    return 0;
}
