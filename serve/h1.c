/* HTTP/1.1 request framing (h1.h): the head, then chunked bodies. Every
 * rule is one check here, in the order the bytes come: a line is found
 * (CRLF only), its bytes are checked, then the fields that frame the
 * message (Host, Content-Length, Transfer-Encoding, Connection, Expect)
 * are read as a whole. The grammar is RFC 9112's and RFC 9110's; where they
 * let a recipient be lenient (bare LF, obs-fold, whitespace in odd places),
 * this one is not: leniency is what lets a proxy and a server read one
 * stream as two different requests. */
#include "h1.h"

#include <stdio.h>
#include <string.h>

/* ---- characters ------------------------------------------------------- */

/* tchar: "!#$%&'*+-.^_`|~", DIGIT, ALPHA */
static int is_tchar(unsigned char c) {
    /* c != 0: strchr finds the terminating NUL too */
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c && strchr("!#$%&'*+-.^_`|~", c));
}

/* a field value byte: VCHAR, obs-text, SP, HTAB */
static int is_vbyte(unsigned char c) {
    return c == ' ' || c == '\t' || (c >= 0x21 && c != 0x7F);
}

static int is_hex(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int hexval(unsigned char c) {
    return c <= '9' ? c - '0' : (c | 0x20) - 'a' + 10;
}

/* RFC 3986 unreserved and sub-delims */
static int is_unreserved(unsigned char c) {
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '-' || c == '.' ||
           c == '_' || c == '~';
}

static int is_subdelim(unsigned char c) {
    return c && strchr("!$&'()*+,;=", c);
}

static int lower(unsigned char c) {
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* s[0..n) equals the word w, ignoring ASCII case */
static int ieq(const char *s, size_t n, const char *w) {
    if (strlen(w) != n) return 0;
    for (size_t i = 0; i < n; i++)
        if (lower((unsigned char)s[i]) != lower((unsigned char)w[i])) return 0;
    return 1;
}

static int fail(srv_h1_req *r, int status, const char *msg) {
    r->status = status;
    snprintf(r->msg, sizeof r->msg, "%s", msg);
    return 1;
}

/* ---- lines -------------------------------------------------------------- */

/* The line starting at buf[at]: 1 with its end (the CR) in *end; 0 when no
 * CRLF has come yet; -1 for a bare LF or CR (a CR as the last byte so far
 * waits for the next one). */
static int find_line(const char *buf, size_t n, size_t at, size_t *end) {
    for (size_t i = at; i < n; i++) {
        if (buf[i] == '\n') return -1;
        if (buf[i] != '\r') continue;
        if (i + 1 == n) return 0;
        if (buf[i + 1] != '\n') return -1;
        *end = i;
        return 1;
    }
    return 0;
}

/* ---- the target --------------------------------------------------------- */

/* s[0..n): pchar, "/" and "?" only, every '%' followed by two hex digits,
 * never %00; the reason when not, else NULL */
static const char *check_uri_chars(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '%') {
            if (i + 2 >= n || !is_hex((unsigned char)s[i + 1]) || !is_hex((unsigned char)s[i + 2]))
                return "a '%' in the target without two hex digits";
            if (s[i + 1] == '0' && s[i + 2] == '0') return "a percent-encoded NUL (%00) in the target";
            i += 2;
            continue;
        }
        if (!(is_unreserved(c) || is_subdelim(c) || c == ':' || c == '@' || c == '/' || c == '?'))
            return c < 0x20 || c == 0x7F ? "a control byte in the target" : "a byte the target may not hold";
    }
    return NULL;
}

/* host [":" port], host a reg-name, IPv4 or [IP-literal]; "" is allowed */
static int valid_authority(const char *s, size_t n) {
    size_t i = 0;
    if (n && s[0] == '[') {
        for (i = 1; i < n && s[i] != ']'; i++)
            if (!(is_hex((unsigned char)s[i]) || s[i] == ':' || s[i] == '.')) return 0;
        if (i == n || i == 1) return 0;
        i++;
    } else {
        for (; i < n && s[i] != ':'; i++) {
            unsigned char c = (unsigned char)s[i];
            if (c == '%') {
                if (i + 2 >= n || !is_hex((unsigned char)s[i + 1]) || !is_hex((unsigned char)s[i + 2]) ||
                    (s[i + 1] == '0' && s[i + 2] == '0'))
                    return 0;
                i += 2;
            } else if (!is_unreserved(c) && !is_subdelim(c)) {
                return 0;
            }
        }
    }
    if (i == n) return 1;
    if (s[i] != ':') return 0;
    for (i++; i < n; i++)
        if (s[i] < '0' || s[i] > '9') return 0;
    return 1;
}

static int parse_target(const char *buf, srv_h1_req *r) {
    const char *t = buf + r->target.off;
    size_t n = r->target.len;
    if (n == 1 && t[0] == '*') {
        if (r->method.len != 7 || memcmp(buf + r->method.off, "OPTIONS", 7) != 0)
            return fail(r, 400, "the target * is only for OPTIONS");
        r->path = r->target;
        return 0;
    }
    size_t p = 0; /* where the path starts */
    if (t[0] != '/') {
        size_t s = 0;
        while (s < n && t[s] != ':') s++;
        if (s + 2 >= n || t[s + 1] != '/' || t[s + 2] != '/' || !(ieq(t, s, "http") || ieq(t, s, "https")))
            return fail(r, 400, "the target is neither a path (/...) nor an http URL");
        size_t a = s + 3, e = a;
        while (e < n && t[e] != '/' && t[e] != '?') e++;
        if (e == a || !valid_authority(t + a, e - a)) return fail(r, 400, "the target's authority is not host[:port]");
        r->host = (srv_h1_span){r->target.off + (uint32_t)a, (uint32_t)(e - a)};
        r->absolute_form = 1;
        p = e;
    }
    const char *why = check_uri_chars(t + p, n - p);
    if (why) return fail(r, 400, why);
    size_t q = p;
    while (q < n && t[q] != '?') q++;
    r->path = (srv_h1_span){r->target.off + (uint32_t)p, (uint32_t)(q - p)};
    if (q < n) r->query = (srv_h1_span){r->target.off + (uint32_t)q + 1, (uint32_t)(n - q - 1)};
    return 0;
}

/* ---- the request line --------------------------------------------------- */

static int parse_request_line(const char *buf, size_t at, size_t end, srv_h1_req *r) {
    size_t i = at;
    while (i < end && is_tchar((unsigned char)buf[i])) i++;
    if (i == at || i == end || buf[i] != ' ')
        return fail(r, 400, "the request line is not METHOD SP TARGET SP VERSION");
    r->method = (srv_h1_span){(uint32_t)at, (uint32_t)(i - at)};
    size_t ts = ++i;
    while (i < end && buf[i] != ' ') {
        unsigned char c = (unsigned char)buf[i];
        if (c < 0x21 || c == 0x7F)
            return fail(r, 400, c == '\t' ? "a tab in the request line" : "a control byte in the request line");
        i++;
    }
    if (i == ts || i == end) return fail(r, 400, "the request line is not METHOD SP TARGET SP VERSION");
    r->target = (srv_h1_span){(uint32_t)ts, (uint32_t)(i - ts)};
    const char *v = buf + i + 1;
    size_t vn = end - i - 1;
    if (vn != 8 || memcmp(v, "HTTP/", 5) != 0 || v[5] < '0' || v[5] > '9' || v[6] != '.' || v[7] < '0' || v[7] > '9')
        return fail(r, 400, "the request line does not end in HTTP/1.1 or HTTP/1.0");
    if (v[5] != '1') return fail(r, 505, "this server speaks HTTP/1.1 and HTTP/1.0 only");
    r->minor = v[7] == '0' ? 0 : 1;
    return parse_target(buf, r);
}

/* ---- field lines --------------------------------------------------------- */

static int parse_field(const char *buf, size_t at, size_t end, srv_h1_req *r) {
    if (buf[at] == ' ' || buf[at] == '\t')
        return fail(r, 400, "a field line starts with whitespace (obs-fold is not accepted)");
    size_t i = at;
    while (i < end && is_tchar((unsigned char)buf[i])) i++;
    if (i == end || buf[i] != ':') {
        if (i < end && (buf[i] == ' ' || buf[i] == '\t'))
            return fail(r, 400, "whitespace between a field name and its colon");
        return fail(r, 400, i == at ? "a field line without a name" : "a field name that is not a token");
    }
    if (i == at) return fail(r, 400, "a field line without a name");
    size_t vs = i + 1, ve = end;
    for (size_t k = vs; k < ve; k++)
        if (!is_vbyte((unsigned char)buf[k]))
            return fail(r, 400, buf[k] == 0 ? "a NUL byte in a field value" : "a control byte in a field value");
    while (vs < ve && (buf[vs] == ' ' || buf[vs] == '\t')) vs++;
    while (ve > vs && (buf[ve - 1] == ' ' || buf[ve - 1] == '\t')) ve--;
    if (r->n_fields == SRV_H1_MAX_FIELDS) return fail(r, 431, "more than 100 field lines");
    r->fields[r->n_fields++] = (srv_h1_field){{(uint32_t)at, (uint32_t)(i - at)}, {(uint32_t)vs, (uint32_t)(ve - vs)}};
    return 0;
}

/* ---- the framing fields -------------------------------------------------- */

/* Calls fn on every member of the comma list `name` over all its lines
 * (empty members skipped, each trimmed); stops at fn's first nonzero. */
typedef int (*member_fn)(const char *s, size_t n, void *arg);
static int each_member(const char *buf, const srv_h1_req *r, const char *name, member_fn fn, void *arg) {
    for (int f = 0; f < r->n_fields; f++) {
        if (!ieq(buf + r->fields[f].name.off, r->fields[f].name.len, name)) continue;
        const char *v = buf + r->fields[f].value.off;
        size_t n = r->fields[f].value.len, a = 0;
        while (a <= n) {
            size_t b = a;
            while (b < n && v[b] != ',') b++;
            size_t s = a, e = b;
            while (s < e && (v[s] == ' ' || v[s] == '\t')) s++;
            while (e > s && (v[e - 1] == ' ' || v[e - 1] == '\t')) e--;
            if (e > s) {
                int rc = fn(v + s, e - s, arg);
                if (rc) return rc;
            }
            a = b + 1;
        }
    }
    return 0;
}

static int count_fields(const char *buf, const srv_h1_req *r, const char *name, int *last) {
    int k = 0;
    for (int f = 0; f < r->n_fields; f++)
        if (ieq(buf + r->fields[f].name.off, r->fields[f].name.len, name)) k++, *last = f;
    return k;
}

typedef struct {
    int64_t v;
    int bad;
} cl_acc;

static int cl_member(const char *s, size_t n, void *arg) {
    cl_acc *a = arg;
    int64_t v = 0;
    if (n > 19) return a->bad = 1;
    for (size_t i = 0; i < n; i++) {
        if (s[i] < '0' || s[i] > '9') return a->bad = 1;
        v = v * 10 + (s[i] - '0');
    }
    if (v > ((int64_t)1 << 62) || (a->v >= 0 && a->v != v)) return a->bad = 1;
    a->v = v;
    return 0;
}

typedef struct {
    int n, chunked_at, other;
    char other_name[40];
} te_acc;

static int te_member(const char *s, size_t n, void *arg) {
    te_acc *a = arg;
    if (ieq(s, n, "chunked")) {
        if (a->chunked_at >= 0) a->other = a->other ? a->other : 2; /* twice */
        a->chunked_at = a->n;
    } else if (!a->other) {
        a->other = 1;
        size_t k = n < sizeof a->other_name - 1 ? n : sizeof a->other_name - 1;
        for (size_t i = 0; i < k; i++) a->other_name[i] = s[i] >= 0x20 && s[i] < 0x7F ? s[i] : '?';
        a->other_name[k] = 0;
    }
    a->n++;
    return 0;
}

static int conn_member(const char *s, size_t n, void *arg) {
    int *ka = arg;
    if (ieq(s, n, "close")) *ka = 0;
    if (ieq(s, n, "keep-alive") && *ka != 0) *ka = 1;
    return 0;
}

static int framing(const char *buf, srv_h1_req *r) {
    int last = -1;
    int hosts = count_fields(buf, r, "host", &last);
    if (r->minor == 1 && hosts != 1)
        return fail(r, 400, hosts ? "more than one Host field line" : "an HTTP/1.1 request without a Host field");
    if (hosts > 1) return fail(r, 400, "more than one Host field line");
    if (hosts) {
        srv_h1_span h = r->fields[last].value;
        if (!valid_authority(buf + h.off, h.len)) return fail(r, 400, "the Host field is not host[:port]");
        if (!r->absolute_form) r->host = h;
    }
    cl_acc cl = {-1, 0};
    int has_cl = count_fields(buf, r, "content-length", &last) > 0;
    each_member(buf, r, "content-length", cl_member, &cl);
    if (has_cl && (cl.bad || cl.v < 0))
        return fail(r, 400, "Content-Length is not one number (lines or list members that differ, or not digits)");
    te_acc te = {0, -1, 0, ""};
    int has_te = count_fields(buf, r, "transfer-encoding", &last) > 0;
    each_member(buf, r, "transfer-encoding", te_member, &te);
    if (has_te) {
        if (r->minor == 0) return fail(r, 400, "Transfer-Encoding in an HTTP/1.0 request");
        if (has_cl) return fail(r, 400, "both Content-Length and Transfer-Encoding: the body's length is ambiguous");
        if (te.other == 1) {
            char m[sizeof r->msg];
            snprintf(m, sizeof m, "the transfer coding \"%s\" is not supported (only chunked)", te.other_name);
            return fail(r, 501, m);
        }
        if (te.n == 0 || te.other == 2 || te.chunked_at != te.n - 1)
            return fail(r, 400, "Transfer-Encoding must end in chunked, once");
        r->chunked = 1;
    }
    r->content_length = has_cl ? cl.v : -1;
    int ka = r->minor == 1 ? 2 : -1; /* 2: 1.1's default, kept unless close; -1: 1.0's, until keep-alive */
    each_member(buf, r, "connection", conn_member, &ka);
    r->keep_alive = ka > 0;
    srv_h1_span ex;
    if (srv_h1_field_get(buf, r, "expect", &ex)) {
        if (!ieq(buf + ex.off, ex.len, "100-continue"))
            return fail(r, 417, "the only Expect understood is 100-continue");
        r->expect_continue = r->minor == 1; /* 9110 10.1.1: ignored in HTTP/1.0 */
    }
    return 0;
}

int srv_h1_field_get(const char *buf, const srv_h1_req *r, const char *name, srv_h1_span *v) {
    for (int f = 0; f < r->n_fields; f++)
        if (ieq(buf + r->fields[f].name.off, r->fields[f].name.len, name)) {
            *v = r->fields[f].value;
            return 1;
        }
    return 0;
}

int srv_h1_parse_head(const char *buf, size_t n, srv_h1_req *r) {
    memset(r, 0, sizeof *r);
    r->content_length = -1;
    size_t at = 0;
    for (int k = 0; k < 4 && at + 1 < n && buf[at] == '\r' && buf[at + 1] == '\n'; k++) at += 2;
    size_t end;
    int line = find_line(buf, n, at, &end);
    if (line < 0) return fail(r, 400, "a line of the head does not end in CRLF");
    if (line == 0) {
        if (n - at > SRV_H1_MAX_LINE) return fail(r, 414, "the request line is longer than 8 KiB");
        return 0;
    }
    if (end - at > SRV_H1_MAX_LINE) return fail(r, 414, "the request line is longer than 8 KiB");
    if (parse_request_line(buf, at, end, r)) return 1;
    at = end + 2;
    for (;;) {
        line = find_line(buf, n, at, &end);
        if (line < 0) return fail(r, 400, "a line of the head does not end in CRLF");
        if (line == 0 || end + 2 > SRV_H1_MAX_HEAD) {
            if ((line == 0 ? n : end + 2) > SRV_H1_MAX_HEAD)
                return fail(r, 431, "the request head is larger than 32 KiB");
            return 0;
        }
        if (end == at) break; /* the empty line: the head is complete */
        if (parse_field(buf, at, end, r)) return 1;
        at = end + 2;
    }
    r->head_len = end + 2;
    framing(buf, r);
    return 1;
}

/* ---- chunked bodies ------------------------------------------------------ */

enum {
    C_SIZE,
    C_SIZE_MORE,
    C_BWS,
    C_EXT,
    C_SIZE_LF,
    C_DATA,
    C_DATA_CR,
    C_DATA_LF,
    C_TLINE,
    C_TNAME,
    C_TVALUE,
    C_TLF,
    C_END_LF
};

void srv_h1_chunked_init(srv_h1_chunked *d) {
    memset(d, 0, sizeof *d);
}

static size_t cfail(srv_h1_chunked *d, int status, const char *msg, size_t at) {
    d->status = status;
    snprintf(d->msg, sizeof d->msg, "%s", msg);
    return at;
}

size_t srv_h1_chunked_feed(srv_h1_chunked *d, const char *in, size_t n, char *out, size_t out_cap, size_t *out_n) {
    size_t i = 0;
    *out_n = 0;
    while (i < n && !d->done && !d->status) {
        unsigned char c = (unsigned char)in[i];
        if (d->state == C_DATA) {
            size_t k = n - i < d->left ? n - i : (size_t)d->left;
            if (k > out_cap - *out_n) k = out_cap - *out_n;
            if (!k) break;
            memcpy(out + *out_n, in + i, k);
            *out_n += k, i += k, d->left -= k;
            if (!d->left) d->state = C_DATA_CR;
            continue;
        }
        if (d->state >= C_TLINE && ++d->trailer > SRV_H1_MAX_HEAD)
            return cfail(d, 431, "the chunked trailer section is larger than 32 KiB", i);
        if (d->state <= C_EXT && ++d->line_len > 4096) return cfail(d, 400, "a chunk size line longer than 4 KiB", i);
        switch (d->state) {
        case C_SIZE:
        case C_SIZE_MORE:
            if (is_hex(c)) {
                if (++d->digits > 15) return cfail(d, 400, "a chunk size of more than 15 hex digits", i);
                d->left = d->left << 4 | (uint64_t)hexval(c);
                d->state = C_SIZE_MORE;
            } else if (d->state == C_SIZE) {
                return cfail(d, 400, "a chunk size that is not hex digits", i);
            } else if (c == ';') {
                d->state = C_EXT;
            } else if (c == ' ' || c == '\t') {
                d->state = C_BWS;
            } else if (c == '\r') {
                d->state = C_SIZE_LF;
            } else {
                return cfail(d, 400, "a chunk size that is not hex digits", i);
            }
            break;
        case C_BWS: /* whitespace after the size is allowed only before a ';' */
            if (c == ';')
                d->state = C_EXT;
            else if (c != ' ' && c != '\t')
                return cfail(d, 400, "whitespace after a chunk size not followed by ';'", i);
            break;
        case C_EXT:
            if (c == '\r')
                d->state = C_SIZE_LF;
            else if (!is_vbyte(c))
                return cfail(d, 400, "a control byte in a chunk extension", i);
            break;
        case C_SIZE_LF:
            if (c != '\n') return cfail(d, 400, "a chunk size line that does not end in CRLF", i);
            d->line_len = 0, d->digits = 0;
            d->state = d->left ? C_DATA : C_TLINE;
            break;
        case C_DATA_CR:
            if (c != '\r') return cfail(d, 400, "chunk data longer than its size, or not followed by CRLF", i);
            d->state = C_DATA_LF;
            break;
        case C_DATA_LF:
            if (c != '\n') return cfail(d, 400, "chunk data not followed by CRLF", i);
            d->state = C_SIZE;
            break;
        case C_TLINE: /* the start of a trailer field line, or the final CRLF */
            if (c == '\r')
                d->state = C_END_LF;
            else if (is_tchar(c))
                d->state = C_TNAME;
            else
                return cfail(d, 400, "a trailer line that is not a field line", i);
            break;
        case C_TNAME:
            if (c == ':')
                d->state = C_TVALUE;
            else if (!is_tchar(c))
                return cfail(d, 400, "a trailer field name that is not a token", i);
            break;
        case C_TVALUE:
            if (c == '\r')
                d->state = C_TLF;
            else if (!is_vbyte(c))
                return cfail(d, 400, "a control byte in a trailer field", i);
            break;
        case C_TLF:
            if (c != '\n') return cfail(d, 400, "a trailer line that does not end in CRLF", i);
            d->state = C_TLINE;
            break;
        case C_END_LF:
            if (c != '\n') return cfail(d, 400, "the chunked body does not end in CRLF", i);
            d->done = 1;
            break;
        }
        i++;
    }
    return i;
}
