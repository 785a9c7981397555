/* HTTP/1.1 framing of diffrt serve (serve/h1.c), as a table of raw heads
 * and chunked bodies, each with the status RFC 9112 wants (0: valid) and,
 * for the valid ones, how the message is framed:
 *   - request smuggling: Content-Length with Transfer-Encoding, differing
 *     lengths, codings other than chunked or chunked not last, TE in
 *     HTTP/1.0, whitespace before a colon, obs-fold, bare CR and LF, NUL and
 *     other control bytes in the target and in field values, %00;
 *   - Host: none, two, invalid, in 1.0 and 1.1, absolute-form targets;
 *   - limits: the request line (414), the head and the field count (431);
 *   - chunked bodies: sizes, extensions, trailers and every malformation,
 *     each decoded whole and again one byte at a time (same result);
 *   - every prefix of a valid head is "incomplete", never an error.
 * Each head is parsed from an exact-size malloc'd buffer (a read past its
 * end is a heap overflow under ASan). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_test.h"
#include "h1.h"

static int parse_n(const char *s, size_t n, srv_h1_req *r) {
    char *b = malloc(n ? n : 1);
    if (!b) abort();
    memcpy(b, s, n);
    int rc = srv_h1_parse_head(b, n, r);
    free(b);
    return rc;
}

typedef struct {
    const char *head;
    size_t len;
    int status;        /* 0: valid */
    long long cl;      /* valid: Content-Length (-1 none) */
    int chunked, keep; /* valid: chunked body, keep-alive */
    const char *path, *host;
} head_case;

/* sizeof, not strlen: some heads hold a NUL */
#define OK(h, cl, ch, ka, path, host)                                                                                  \
    { h, sizeof(h) - 1, 0, cl, ch, ka, path, host }
#define BAD(h, st)                                                                                                     \
    { h, sizeof(h) - 1, st, 0, 0, 0, NULL, NULL }

static const head_case HEADS[] = {
    /* valid framing */
    OK("GET /health HTTP/1.1\r\nHost: a\r\n\r\n", -1, 0, 1, "/health", "a"),
    OK("GET /health HTTP/1.0\r\n\r\n", -1, 0, 0, "/health", ""),
    OK("GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", -1, 0, 1, "/health", ""),
    OK("GET /health HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n", -1, 0, 0, "/health", "a"),
    OK("GET /health HTTP/1.1\r\nHost: a\r\nConnection: Keep-Alive, CLOSE\r\n\r\n", -1, 0, 0, "/health", "a"),
    OK("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\n", 5, 0, 1, "/x", "a"),
    OK("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nContent-Length: 5\r\n\r\n", 5, 0, 1, "/x", "a"),
    OK("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 5\r\n\r\n", 5, 0, 1, "/x", "a"),
    OK("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length:  0 \r\n\r\n", 0, 0, 1, "/x", "a"),
    OK("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n", -1, 1, 1, "/x", "a"),
    OK("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: CHUNKED\r\n\r\n", -1, 1, 1, "/x", "a"),
    OK("POST /x HTTP/1.1\r\nhost: a:8080\r\ntransfer-encoding: Chunked\r\n\r\n", -1, 1, 1, "/x", "a:8080"),
    OK("GET /v1/models?a=b&c=%20 HTTP/1.1\r\nHost: [::1]:80\r\n\r\n", -1, 0, 1, "/v1/models", "[::1]:80"),
    OK("GET http://h.example:81/health?x HTTP/1.1\r\nHost: other\r\n\r\n", -1, 0, 1, "/health", "h.example:81"),
    OK("GET HTTP://h/ HTTP/1.1\r\nHost: h\r\n\r\n", -1, 0, 1, "/", "h"),
    OK("OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n", -1, 0, 1, "*", "a"),
    OK("\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\n\r\n", -1, 0, 1, "/", "a"), /* empty lines before it */
    OK("GET / HTTP/1.2\r\nHost: a\r\n\r\n", -1, 0, 1, "/", "a"),         /* a later 1.x reads as 1.1 */
    OK("GET / HTTP/1.1\r\nHost:\r\n\r\n", -1, 0, 1, "/", ""),            /* empty Host: 9112 3.2 allows it */
    OK("GET / HTTP/1.1\r\nHost: a\r\nX-Obs: caf\xc3\xa9\r\n\r\n", -1, 0, 1, "/", "a"), /* obs-text */
    OK("GET / HTTP/1.1\r\nHost: a\r\nExpect: 100-Continue\r\n\r\n", -1, 0, 1, "/", "a"),
    /* smuggling: the length must be unambiguous */
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Length: 4\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 17\r\nContent-Length: 5\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5, 6\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: +5\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: -1\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 0x10\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 5 5\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length:\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 99999999999999999999\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length : 16\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length\t: 16\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\n Content-Length: 16\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nX: y\r\n Content-Length: 16\r\n\r\n", 400), /* obs-fold */
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: gzip, chunked\r\n\r\n", 501),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: xchunked\r\n\r\n", 501),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked;q=1\r\n\r\n", 501),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n", 501),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, chunked\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding:\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: ,\r\n\r\n", 400),
    BAD("POST /x HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nX: \x01\r\n\r\n", 400),
    /* line endings and control bytes */
    BAD("GET / HTTP/1.1\nHost: a\n\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\nX: a\rb\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\nX: a\0b\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\0.b\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\nX: a\x7f\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\nX\x01Y: a\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\nX\0Y: a\r\n\r\n", 400), /* strchr matches the NUL: not a tchar */
    BAD("GET\0 / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nContent-Length\0: 5\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\n: a\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\nX-No-Colon\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\nX(Y): a\r\n\r\n", 400),
    /* the request line */
    BAD("GET /health\0x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET /health%00 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET /health?a=%00 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET /health%0 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET /health%zz HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET /a\"b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET /a#b HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET /\xc3\xa9 HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET  / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET / x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET /\tx HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET / HTTP/1.1 \r\nHost: a\r\n\r\n", 400),
    BAD("GET / http/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET / HTTP/11\r\nHost: a\r\n\r\n", 400),
    BAD("GET /\r\nHost: a\r\n\r\n", 400),
    BAD("G\x01T / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD(" GET / HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET * HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET ftp://h/ HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET http:///x HTTP/1.1\r\nHost: a\r\n\r\n", 400),
    BAD("GET / HTTP/2.0\r\nHost: a\r\n\r\n", 505),
    BAD("GET / HTTP/0.9\r\nHost: a\r\n\r\n", 505),
    /* Host */
    BAD("GET / HTTP/1.1\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\nHost: b\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a\r\nhost: a\r\n\r\n", 400),
    BAD("GET / HTTP/1.0\r\nHost: a\r\nHost: a\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a b\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a/b\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a:8x\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: [zz]\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a@b\r\n\r\n", 400),
    BAD("GET / HTTP/1.1\r\nHost: a%00\r\n\r\n", 400),
    /* Expect */
    BAD("POST /x HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\n", 417),
};

static void check_heads(void) {
    for (size_t i = 0; i < sizeof HEADS / sizeof HEADS[0]; i++) {
        const head_case *c = &HEADS[i];
        size_t n = c->len;
        srv_h1_req r;
        int rc = parse_n(c->head, n, &r);
        DRT_CHECK(rc == 1, "head %zu %.40s: not complete (%d)", i, c->head, rc);
        DRT_CHECK(r.status == c->status, "head %zu %.60s: status %d (%s), want %d", i, c->head, r.status, r.msg,
                  c->status);
        if (c->status) {
            DRT_CHECK(r.msg[0], "head %zu: no message", i);
            for (const char *m = r.msg; *m; m++)
                DRT_CHECK(*m >= 0x20 && *m < 0x7f, "head %zu: a message byte 0x%02x", i, (unsigned char)*m);
            continue;
        }
        DRT_CHECK(r.content_length == c->cl && r.chunked == c->chunked && r.keep_alive == c->keep,
                  "head %zu %.50s: length %lld chunked %d keep-alive %d", i, c->head, (long long)r.content_length,
                  r.chunked, r.keep_alive);
        DRT_CHECK(r.head_len == n, "head %zu: head_len %zu of %zu", i, r.head_len, n);
        char path[64], host[64];
        snprintf(path, sizeof path, "%.*s", (int)r.path.len, c->head + r.path.off);
        snprintf(host, sizeof host, "%.*s", (int)r.host.len, c->head + r.host.off);
        if (!r.path.len) snprintf(path, sizeof path, "/");
        DRT_CHECK(strcmp(path, c->path) == 0 && strcmp(host, c->host) == 0, "head %zu: path \"%s\" host \"%s\"", i,
                  path, host);
        /* every prefix is incomplete, never wrong */
        for (size_t k = 0; k < n; k++) {
            int p = parse_n(c->head, k, &r);
            DRT_CHECK(p == 0, "head %zu: its first %zu bytes give %d (status %d %s)", i, k, p, r.status, r.msg);
        }
    }
}

static void check_limits(void) {
    srv_h1_req r;
    size_t big = 40000;
    char *b = malloc(big + 64);
    /* a 40 KB target: 414 as soon as the line passes 8 KiB, end or not */
    memcpy(b, "GET /", 5);
    memset(b + 5, 'a', big);
    DRT_CHECK(parse_n(b, 5 + big, &r) == 1 && r.status == 414, "a 40 KB target: status %d", r.status);
    /* a 40 KB field: 431 */
    int k = snprintf(b, 64, "GET / HTTP/1.1\r\nHost: a\r\nX: ");
    memset(b + k, 'a', big);
    DRT_CHECK(parse_n(b, (size_t)k + big, &r) == 1 && r.status == 431, "a 40 KB field: status %d", r.status);
    /* 101 fields: 431 */
    size_t n = (size_t)snprintf(b, 64, "GET / HTTP/1.1\r\nHost: a\r\n");
    for (int i = 0; i < 100; i++) n += (size_t)sprintf(b + n, "X: %d\r\n", i);
    n += (size_t)sprintf(b + n, "\r\n");
    DRT_CHECK(parse_n(b, n, &r) == 1 && r.status == 431, "101 fields: status %d", r.status);
    free(b);
}

/* ---- chunked bodies ---- */

typedef struct {
    const char *in;
    size_t len;
    int status;       /* 0: valid */
    const char *data; /* valid: the decoded bytes */
    size_t left;      /* valid: bytes of in after the body (pipelined) */
} chunk_case;

#define C(s) s, sizeof(s) - 1
static const chunk_case CHUNKS[] = {
    {C("5\r\nhello\r\n0\r\n\r\n"), 0, "hello", 0},
    {C("5\r\nhello\r\n6\r\n world\r\n0\r\n\r\nGET"), 0, "hello world", 3},
    {C("A\r\n0123456789\r\n0\r\n\r\n"), 0, "0123456789", 0},
    {C("a;name=value\r\n0123456789\r\n0\r\n\r\n"), 0, "0123456789", 0},
    {C("1 ; x\r\na\r\n0\r\n\r\n"), 0, "a", 0},
    {C("1;x=\"q;\\\"s\"\r\na\r\n0\r\n\r\n"), 0, "a", 0},
    {C("0\r\nX-Trailer: 1\r\nY: 2\r\n\r\n"), 0, "", 0},
    {C("000001\r\na\r\n0000\r\n\r\n"), 0, "a", 0},
    {C("0x5\r\nhello\r\n0\r\n\r\n"), 400, NULL, 0},
    {C("-5\r\nhello\r\n0\r\n\r\n"), 400, NULL, 0},
    {C("\r\nhello\r\n0\r\n\r\n"), 400, NULL, 0},
    {C("5\nhello\r\n0\r\n\r\n"), 400, NULL, 0},
    {C("5\r\nhello\n0\r\n\r\n"), 400, NULL, 0},
    {C("5\r\nhelloX\r\n0\r\n\r\n"), 400, NULL, 0},
    {C("5\r\nhello\r\n0\r\n\n"), 400, NULL, 0},
    {C("5 \r\nhello\r\n0\r\n\r\n"), 400, NULL, 0},
    {C("5;a\x01\r\nhello\r\n0\r\n\r\n"), 400, NULL, 0},
    {C("5;a\0\r\nhello\r\n0\r\n\r\n"), 400, NULL, 0},
    {C("1000000000000000\r\n"), 400, NULL, 0},
    {C("0\r\n X: folded\r\n\r\n"), 400, NULL, 0},
    {C("0\r\nX : y\r\n\r\n"), 400, NULL, 0},
    {C("0\r\nX: \x01\r\n\r\n"), 400, NULL, 0},
    {C("0\r\nX: y\n\r\n"), 400, NULL, 0},
    {C("g\r\n"), 400, NULL, 0},
};

/* feeds in[0..n) in pieces of `step` bytes (0: whole); the status, and the
 * decoded data in out */
static int feed(const char *in, size_t n, size_t step, char *out, size_t *out_n, size_t *used) {
    srv_h1_chunked d;
    srv_h1_chunked_init(&d);
    size_t at = 0;
    *out_n = 0;
    while (at < n && !d.done && !d.status) {
        size_t k = step && n - at > step ? step : n - at;
        size_t got = 0;
        char *piece = malloc(k);
        memcpy(piece, in + at, k);
        size_t u = srv_h1_chunked_feed(&d, piece, k, out + *out_n, 4096 - *out_n, &got);
        free(piece);
        *out_n += got;
        at += u;
        if (u < k && !d.done && !d.status) return -1; /* stopped early with room left */
    }
    *used = at;
    if (!d.status && !d.done) return -2; /* incomplete */
    return d.status;
}

static void check_chunked(void) {
    char out[4096];
    for (size_t i = 0; i < sizeof CHUNKS / sizeof CHUNKS[0]; i++) {
        const chunk_case *c = &CHUNKS[i];
        size_t n = c->len;
        for (size_t step = 0; step <= 1; step++) {
            size_t got = 0, used = 0;
            int st = feed(c->in, n, step, out, &got, &used);
            DRT_CHECK(st == c->status, "chunked %zu %.30s (step %zu): status %d, want %d", i, c->in, step, st,
                      c->status);
            if (c->status || st) continue;
            DRT_CHECK(got == strlen(c->data) && memcmp(out, c->data, got) == 0, "chunked %zu: data \"%.*s\"", i,
                      (int)got, out);
            DRT_CHECK(n - used == c->left, "chunked %zu: %zu bytes left after the body, want %zu", i, n - used,
                      c->left);
        }
    }
    /* a trailer section past 32 KiB: 431 */
    size_t big = 40000;
    char *b = malloc(big + 16);
    memcpy(b, "0\r\nX: ", 6);
    memset(b + 6, 'a', big);
    size_t got, used;
    char *o = malloc(4096);
    DRT_CHECK(feed(b, big + 6, 0, o, &got, &used) == 431, "a 40 KB trailer");
    free(o);
    free(b);
}

int main(void) {
    check_heads();
    check_limits();
    check_chunked();
    return drt_test_summary("test_serve_h1");
}
