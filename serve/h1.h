/* HTTP/1.1 message framing (serve/h1.c): the request head and chunked
 * bodies, parsed from bytes as RFC 9112 says, with nothing left to a
 * reader's leniency. Pure: no I/O, no allocation, no globals; the
 * connection loop (serve/httpd.c) and the request fuzzer (tests/fuzz) call
 * it.
 *
 * What is refused, and how (status; every framing error also closes the
 * connection, since what follows the bad bytes cannot be delimited):
 *   - a line ending that is not CRLF (a bare LF or CR), a NUL or other
 *     control byte in the request line or a field line: 400;
 *   - a request line that is not `method SP target SP HTTP/1.x` with single
 *     spaces (up to 4 empty lines before it are skipped, as 9112 2.2
 *     allows): 400; a version HTTP/2 or later, or before 1.0: 505;
 *   - a target that is not origin-form (`/path?query`), absolute-form
 *     (`http://authority/path`) or `*` (OPTIONS only), holds a byte RFC 3986
 *     does not allow there, a `%` not followed by two hex digits, or `%00`:
 *     400; a request line longer than SRV_H1_MAX_LINE: 414;
 *   - a field line whose name is not a token, with whitespace before the
 *     colon, obs-fold (a line starting with SP or HTAB), or a value byte
 *     that is not VCHAR, obs-text, SP or HTAB: 400; a head longer than
 *     SRV_H1_MAX_HEAD or more than SRV_H1_MAX_FIELDS lines: 431;
 *   - HTTP/1.1 without exactly one Host line, more than one Host in
 *     HTTP/1.0, or a Host value that is not `host[:port]`: 400;
 *   - Content-Length that is not digits, lines or list members that differ
 *     (identical repeats are one value), or above 2^62: 400;
 *   - Transfer-Encoding together with Content-Length, in an HTTP/1.0
 *     request, chunked not the last coding or given twice: 400; any coding
 *     other than chunked: 501;
 *   - Expect other than 100-continue: 417.
 * Names compare case-insensitively; values are trimmed of SP/HTAB. */
#ifndef DRT_SRV_H1_H
#define DRT_SRV_H1_H

#include <stddef.h>
#include <stdint.h>

#define SRV_H1_MAX_HEAD 32768 /* the whole head, request line included */
#define SRV_H1_MAX_LINE 8192  /* the request line */
#define SRV_H1_MAX_FIELDS 100

typedef struct {
    uint32_t off, len;
} srv_h1_span;

typedef struct {
    srv_h1_span name, value;
} srv_h1_field;

typedef struct {
    int status;      /* 0: a valid head; else the status to answer (400, 414, 417, 431, 501, 505) */
    char msg[160];   /* what was wrong, for the error body (printable ASCII) */
    size_t head_len; /* bytes of the head, empty lines before it and its final CRLF included */
    srv_h1_span method, target, path, query, host; /* query: after '?' (len 0: none); host: the authority used */
    int minor;                                     /* HTTP/1.minor: 0 or 1 (1.2 and later read as 1) */
    srv_h1_field fields[SRV_H1_MAX_FIELDS];
    int n_fields;
    int64_t content_length; /* -1: none */
    int chunked;
    int keep_alive;      /* the connection stays open after this exchange (1.1 without close, 1.0 with keep-alive) */
    int expect_continue; /* Expect: 100-continue */
    int absolute_form;   /* the target named its authority (Host is then not the one used) */
} srv_h1_req;

/* Parses the head at buf[0..n). 0: incomplete (more bytes needed; nothing
 * is wrong yet); 1: complete, *r filled: r->status is 0 for a valid head or
 * the error to answer. A head past the limits is complete with its error as
 * soon as the limit is passed, whether or not its end has come. */
int srv_h1_parse_head(const char *buf, size_t n, srv_h1_req *r);

/* The first field named `name` (case-insensitive), its value span in *v;
 * 0 when there is none. */
int srv_h1_field_get(const char *buf, const srv_h1_req *r, const char *name, srv_h1_span *v);

/* A chunked body, decoded as it arrives. */
typedef struct {
    int state;
    uint64_t left;   /* data bytes left in the current chunk */
    int digits;      /* hex digits of the size line so far */
    size_t line_len; /* bytes of the current size or trailer line */
    size_t trailer;  /* trailer section bytes so far */
    int done;        /* the last chunk and the trailers are read */
    int status;      /* 0, or 400 / 431 with msg */
    char msg[96];
} srv_h1_chunked;

void srv_h1_chunked_init(srv_h1_chunked *d);
/* Reads in[0..n): the data bytes go to *out (at most out_cap of them; the
 * caller gives room for all of in, or sees fewer bytes consumed), *out_n
 * counts them. Returns the bytes of in consumed: all of them, unless the
 * body ended (d->done) or was malformed (d->status set; stop reading). */
size_t srv_h1_chunked_feed(srv_h1_chunked *d, const char *in, size_t n, char *out, size_t out_cap, size_t *out_n);

#endif
