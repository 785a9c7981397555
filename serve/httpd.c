/* HTTP/1.1 connections on one epoll thread (httpd.h).
 *
 * A connection goes READ_HEAD -> READ_BODY -> HANDLER -> WRITE or STREAM
 * and back to READ_HEAD (keep-alive; pipelined bytes already read are
 * parsed at once), or to LINGER: after a response that closes the
 * connection, the write side is shut and what the client still sends is
 * read and dropped for a moment, so that a close with unread bytes (the
 * kernel then sends RST) does not destroy the response on its way. While
 * a request is handled nothing more is read from its socket: the next
 * request waits in the kernel's buffer, and a client that leaves is seen by
 * the writes (or by the scheduler's probe of a parked connection).
 *
 * Parking takes the socket out of epoll; srv_conn_resume queues the
 * connection on a list under wake_mu and writes the eventfd. Every other
 * field is the HTTP thread's. */
#define _GNU_SOURCE /* accept4 */
#include "httpd.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "diffrt/util.h"
#include "h1.h"
#include "request.h"

#define IN_CAP (SRV_H1_MAX_HEAD + 65536) /* the most a connection reads ahead */
#define LINGER_S 2.0
#define DISCARD_MAX (4 << 20) /* an unread body up to this size is read and dropped after an early answer */
#define STREAM_CHUNK 16384

enum { ST_READ_HEAD, ST_READ_BODY, ST_HANDLER, ST_WRITE, ST_STREAM, ST_LINGER };
enum { RESP_NONE, RESP_FIXED, RESP_STREAM };

struct srv_conn {
    srv_httpd *d;
    int fd;
    unsigned char ip[16];
    int ip_len;
    int state;
    struct srv_conn *prev, *next;   /* every connection */
    struct srv_conn *wake_next;     /* the resume list (under wake_mu) */
    int parked, queued, resume_req; /* under wake_mu */
    int want_park;                  /* srv_conn_suspend during a callback */
    int in_head;                    /* inside on_head: a response now leaves the body unread */
    int is_parked;                  /* the HTTP thread's copy of parked */
    int eof;                        /* the client shut its side (a half close, or gone) */
    int dead;                       /* closed; freed after this batch of events */
    char *in;
    size_t in_len, in_cap;
    /* the request */
    char *head; /* the head's bytes, spans NUL-terminated */
    srv_h1_req req;
    char *host;
    int head_only, keep_alive, in_request;
    void *ctx;
    char *body;
    size_t body_len, body_cap;
    int64_t body_left; /* Content-Length bytes still to come */
    srv_h1_chunked ch;
    int64_t discard; /* body bytes to drop before the next request (-1: close instead) */
    /* the response */
    int resp;
    char *out;
    size_t out_len, out_off, out_cap;
    srv_reader rd;
    void *rcls;
    void (*rfree)(void *);
    int stream_chunked, stream_done;
    double t_last, t_head, t_body, t_linger;
};

struct srv_httpd {
    srv_httpd_opts o;
    srv_httpd_cb cb;
    int lfd, ep, efd;
    pthread_t th;
    atomic_int stop;
    atomic_int n_conns;
    srv_conn *conns;
    srv_conn *dead; /* closed in this batch of events, freed after it */
    pthread_mutex_t wake_mu;
    srv_conn *wake;
    double next_sweep;
};

/* ---- small helpers ------------------------------------------------------- */

static int buf_put(char **p, size_t *len, size_t *cap, const void *s, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t nc = (*len + n + 1) * 2;
        char *np = realloc(*p, nc);
        if (!np) return -1;
        *p = np, *cap = nc;
    }
    memcpy(*p + *len, s, n);
    *len += n;
    (*p)[*len] = 0;
    return 0;
}

static int out_put(srv_conn *c, const void *s, size_t n) {
    if (c->out_off == c->out_len) c->out_off = c->out_len = 0;
    return buf_put(&c->out, &c->out_len, &c->out_cap, s, n);
}

static int out_fmt(srv_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int out_fmt(srv_conn *c, const char *fmt, ...) {
    char b[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(b, sizeof b, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof b) return -1;
    return out_put(c, b, (size_t)k);
}

static const char *reason(int s) {
    switch (s) {
    case 100: return "Continue";
    case 200: return "OK";
    case 204: return "No Content";
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 403: return "Forbidden";
    case 404: return "Not Found";
    case 405: return "Method Not Allowed";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 414: return "URI Too Long";
    case 417: return "Expectation Failed";
    case 421: return "Misdirected Request";
    case 431: return "Request Header Fields Too Large";
    case 500: return "Internal Server Error";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    case 505: return "HTTP Version Not Supported";
    default: return s < 300 ? "OK" : s < 500 ? "Bad Request" : "Internal Server Error";
    }
}

static void epoll_set(srv_conn *c, uint32_t ev, int op) {
    struct epoll_event e = {.events = ev, .data.ptr = c};
    epoll_ctl(c->d->ep, op, c->fd, &e);
}

/* what the connection waits for in its state */
static void watch(srv_conn *c) {
    uint32_t ev = 0;
    if (c->dead || c->is_parked) return;
    if (c->out_len > c->out_off) ev |= EPOLLOUT;
    if (!c->eof && (c->state == ST_READ_HEAD || c->state == ST_READ_BODY || c->state == ST_LINGER))
        ev |= EPOLLIN | EPOLLRDHUP;
    epoll_set(c, ev, EPOLL_CTL_MOD);
}

static void end_request(srv_conn *c, int ok) {
    if (c->in_request && c->d->cb.on_done) c->d->cb.on_done(c->d->cb.cls, c, c->ctx, ok);
    c->in_request = 0;
    c->ctx = NULL;
    if (c->rfree) c->rfree(c->rcls);
    c->rfree = NULL, c->rd = NULL, c->rcls = NULL;
    free(c->head), free(c->host), free(c->body);
    c->head = c->host = c->body = NULL;
    c->body_len = c->body_cap = 0;
    c->resp = RESP_NONE;
    c->stream_done = 0;
}

/* Closes c now; its memory goes at the end of the batch of events (an
 * event of this batch may still name it: c->dead says to skip it). */
static void conn_close(srv_conn *c) {
    srv_httpd *d = c->d;
    if (c->dead) return;
    end_request(c, 0);
    epoll_ctl(d->ep, EPOLL_CTL_DEL, c->fd, NULL);
    close(c->fd);
    if (c->prev)
        c->prev->next = c->next;
    else
        d->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    atomic_fetch_sub(&d->n_conns, 1);
    c->dead = 1;
    c->next = d->dead;
    d->dead = c;
}

static void free_dead(srv_httpd *d) {
    while (d->dead) {
        srv_conn *c = d->dead;
        d->dead = c->next;
        free(c->in);
        free(c->out);
        free(c);
    }
}

/* ---- responses ----------------------------------------------------------- */

static void date_header(char *b, size_t n) {
    time_t t = time(NULL);
    struct tm tm;
    gmtime_r(&t, &tm);
    strftime(b, n, "%a, %d %b %Y %H:%M:%S GMT", &tm);
}

static int put_head(srv_conn *c, int status, const srv_hdr *h, int nh) {
    char date[64];
    date_header(date, sizeof date);
    int r = out_fmt(c, "HTTP/1.1 %d %s\r\nDate: %s\r\n", status, reason(status), date);
    for (int i = 0; r == 0 && i < nh; i++) {
        r = out_put(c, h[i].name, strlen(h[i].name));
        if (!r) r = out_put(c, ": ", 2);
        if (!r) r = out_put(c, h[i].value, strlen(h[i].value));
        if (!r) r = out_put(c, "\r\n", 2);
    }
    if (r == 0 && !c->keep_alive) r = out_put(c, "Connection: close\r\n", 19);
    if (r == 0 && c->keep_alive && c->req.minor == 0) r = out_put(c, "Connection: keep-alive\r\n", 24);
    return r;
}

static void flush(srv_conn *c);

void srv_conn_respond(srv_conn *c, int status, const srv_hdr *h, int nh, char *body, size_t len, int close_after) {
    if (c->resp != RESP_NONE) { /* one response a request */
        free(body);
        return;
    }
    if (close_after || (c->in_head && c->discard < 0)) c->keep_alive = 0;
    c->resp = RESP_FIXED;
    int r = put_head(c, status, h, nh);
    if (!r) r = status == 204 ? out_put(c, "\r\n", 2) : out_fmt(c, "Content-Length: %zu\r\n\r\n", len);
    if (!r && len && !c->head_only) r = out_put(c, body, len);
    free(body);
    c->state = ST_WRITE;
    if (r) c->keep_alive = 0; /* out of memory: what is there goes, then the close */
}

void srv_conn_stream(srv_conn *c, int status, const srv_hdr *h, int nh, srv_reader rd, void *rcls,
                     void (*rfree)(void *)) {
    if (c->resp != RESP_NONE) {
        if (rfree) rfree(rcls);
        return;
    }
    c->resp = RESP_STREAM;
    c->rd = rd, c->rcls = rcls, c->rfree = rfree;
    c->stream_chunked = c->req.minor == 1;
    if (!c->stream_chunked) c->keep_alive = 0; /* HTTP/1.0: the close ends the body */
    int r = put_head(c, status, h, nh);
    if (!r && c->stream_chunked) r = out_put(c, "Transfer-Encoding: chunked\r\n", 28);
    if (!r) r = out_put(c, "\r\n", 2);
    if (r) c->keep_alive = 0;
    c->state = ST_STREAM;
}

static void send_error(srv_conn *c, int status, const char *msg) {
    srv_error e;
    srv_error_set(&e, status, status >= 500 ? "server_error" : "invalid_request_error", NULL, NULL, "%s", msg);
    char *body = srv_error_json(&e);
    srv_hdr h[2] = {{"Content-Type", "application/json"}, {"x-should-retry", "false"}};
    if (c->resp != RESP_NONE) { /* a response is on its way already: it is cut short */
        free(body);
        return conn_close(c);
    }
    srv_conn_respond(c, status, h, status >= 500 ? 2 : 1, body, body ? strlen(body) : 0, 1);
    if (c->d->cb.on_refused) c->d->cb.on_refused(c->d->cb.cls, status);
}

/* ---- parking ------------------------------------------------------------- */

void srv_conn_suspend(srv_conn *c) {
    c->want_park = 1;
}

void srv_conn_resume(srv_conn *c) {
    srv_httpd *d = c->d;
    pthread_mutex_lock(&d->wake_mu);
    if (c->parked && !c->queued) {
        c->queued = 1;
        c->wake_next = d->wake;
        d->wake = c;
    } else if (!c->parked) {
        c->resume_req = 1;
    }
    pthread_mutex_unlock(&d->wake_mu);
    uint64_t one = 1;
    ssize_t w = write(d->efd, &one, sizeof one);
    (void)w;
}

/* After a callback: parks c if it asked to (1), unless a resume came first
 * (2: the callback is due again); 0 when it did not ask. */
static int maybe_park(srv_conn *c) {
    if (!c->want_park) return 0;
    c->want_park = 0;
    srv_httpd *d = c->d;
    pthread_mutex_lock(&d->wake_mu);
    int early = c->resume_req;
    c->resume_req = 0;
    if (!early) c->parked = 1;
    pthread_mutex_unlock(&d->wake_mu);
    if (early) return 2;
    c->is_parked = 1;
    epoll_ctl(d->ep, EPOLL_CTL_DEL, c->fd, NULL);
    return 1;
}

/* ---- the stream ---------------------------------------------------------- */

/* The stream's next bytes, asked for once the output is all written (so a
 * park never leaves bytes unsent): 0 when some (or the end) were added; 1
 * when c parked or was closed. */
static int pump(srv_conn *c) {
    char buf[STREAM_CHUNK];
    for (;;) {
        long n = c->rd(c->rcls, buf, sizeof buf);
        if (n > 0) {
            int r = c->stream_chunked ? out_fmt(c, "%lx\r\n", n) : 0;
            if (!r) r = out_put(c, buf, (size_t)n);
            if (!r && c->stream_chunked) r = out_put(c, "\r\n", 2);
            if (r) return conn_close(c), 1;
            return 0;
        }
        if (n == SRV_READ_SUSPENDED) {
            if (maybe_park(c) == 1) return 1;
            continue; /* resumed before it parked: read again */
        }
        if (n == SRV_READ_ABORT) return conn_close(c), 1;
        c->stream_done = 1;
        if (c->stream_chunked && out_put(c, "0\r\n\r\n", 5)) return conn_close(c), 1;
        return 0;
    }
}

/* ---- reading requests ---------------------------------------------------- */

static void process(srv_conn *c);

/* The head's copy with its spans NUL-terminated (the byte after each span
 * is a delimiter: SP, ':', '?', OWS or CR). */
static int take_head(srv_conn *c) {
    srv_h1_req *r = &c->req;
    if (!(c->head = malloc(r->head_len + 1))) return -1;
    memcpy(c->head, c->in, r->head_len);
    c->head[r->head_len] = 0;
    if (!(c->host = malloc((size_t)r->host.len + 1))) return -1;
    memcpy(c->host, c->in + r->host.off, r->host.len);
    c->host[r->host.len] = 0;
    c->head[r->method.off + r->method.len] = 0;
    for (int i = 0; i < r->n_fields; i++) {
        c->head[r->fields[i].name.off + r->fields[i].name.len] = 0;
        c->head[r->fields[i].value.off + r->fields[i].value.len] = 0;
    }
    if (r->path.len) c->head[r->path.off + r->path.len] = 0;
    if (r->query.len) c->head[r->query.off + r->query.len] = 0;
    memmove(c->in, c->in + r->head_len, c->in_len - r->head_len);
    c->in_len -= r->head_len;
    return 0;
}

/* After a handler's callback: parks c, or runs on_resume for a resume that
 * came before the park, until the handler responds or stays parked. */
static void handler_parks(srv_conn *c) {
    while (maybe_park(c) == 2 && c->resp == RESP_NONE) c->d->cb.on_resume(c->d->cb.cls, c);
}

static void body_done(srv_conn *c) {
    c->state = ST_HANDLER;
    char *b = c->body ? c->body : calloc(1, 1);
    size_t n = c->body_len;
    c->body = NULL;
    c->body_len = c->body_cap = 0;
    if (!b) return send_error(c, 500, "out of memory");
    c->d->cb.on_body(c->d->cb.cls, c, b, n);
    handler_parks(c);
}

static void start_request(srv_conn *c) {
    srv_httpd *d = c->d;
    if (take_head(c)) return send_error(c, 500, "out of memory");
    c->in_request = 1;
    c->keep_alive = c->req.keep_alive;
    c->head_only = strcmp(c->head + c->req.method.off, "HEAD") == 0;
    int has_body = c->req.chunked || c->req.content_length > 0;
    c->state = ST_HANDLER;
    /* answered from the head: the body, if any, is not for anyone. It is
     * read and dropped when its length is known and small, so the
     * connection stays open; else (chunked, large, or a client waiting for
     * 100 Continue, which may never send it) the connection closes, and a
     * response made now says so (srv_conn_respond) */
    c->discard = !has_body ? 0
                 : c->req.chunked || c->req.expect_continue || c->req.content_length > DISCARD_MAX
                     ? -1
                     : c->req.content_length;
    c->in_head = 1;
    d->cb.on_head(d->cb.cls, c);
    c->in_head = 0;
    if (c->resp != RESP_NONE) return;
    if (c->req.content_length > d->o.max_body) {
        char m[96];
        snprintf(m, sizeof m, "the body is larger than %ld bytes (--max-body)", d->o.max_body);
        return send_error(c, 413, m); /* and the connection closes */
    }
    c->discard = 0; /* the body is read */
    if (!has_body) return body_done(c);
    if (c->req.expect_continue && !c->in_len) out_put(c, "HTTP/1.1 100 Continue\r\n\r\n", 25);
    srv_h1_chunked_init(&c->ch);
    c->body_left = c->req.chunked ? 0 : c->req.content_length;
    c->t_body = drt_clock_s();
    c->state = ST_READ_BODY;
}

static void read_body(srv_conn *c) {
    srv_httpd *d = c->d;
    size_t used;
    if (!c->req.chunked) {
        used = c->in_len < (uint64_t)c->body_left ? c->in_len : (size_t)c->body_left;
        if (buf_put(&c->body, &c->body_len, &c->body_cap, c->in, used)) return send_error(c, 500, "out of memory");
        c->body_left -= (int64_t)used;
    } else {
        if (c->body_len + c->in_len + 1 > c->body_cap) {
            size_t nc = (c->body_len + c->in_len + 1) * 2;
            char *nb = realloc(c->body, nc);
            if (!nb) return send_error(c, 500, "out of memory");
            c->body = nb, c->body_cap = nc;
        }
        size_t got = 0;
        used = srv_h1_chunked_feed(&c->ch, c->in, c->in_len, c->body + c->body_len, c->body_cap - c->body_len - 1,
                                   &got);
        c->body_len += got;
        c->body[c->body_len] = 0;
        if (c->ch.status) return send_error(c, c->ch.status, c->ch.msg);
    }
    memmove(c->in, c->in + used, c->in_len - used);
    c->in_len -= used;
    if ((long)c->body_len > d->o.max_body) {
        char m[96];
        snprintf(m, sizeof m, "the body is larger than %ld bytes (--max-body)", d->o.max_body);
        return send_error(c, 413, m);
    }
    if (c->req.chunked ? c->ch.done : c->body_left == 0) body_done(c);
}

/* Runs the state machine over what has been read, then writes. */
static void process(srv_conn *c) {
    while (!c->dead && !c->is_parked) {
        if (c->state == ST_READ_HEAD && c->discard > 0) {
            size_t k = c->in_len < (uint64_t)c->discard ? c->in_len : (size_t)c->discard;
            memmove(c->in, c->in + k, c->in_len - k);
            c->in_len -= k, c->discard -= (int64_t)k;
            if (c->discard) break;
        }
        if (c->state == ST_READ_HEAD) {
            if (!c->in_len) break;
            if (!c->t_head) c->t_head = drt_clock_s();
            if (!srv_h1_parse_head(c->in, c->in_len, &c->req)) break;
            c->t_head = 0;
            if (c->req.status) {
                send_error(c, c->req.status, c->req.msg);
                break;
            }
            start_request(c);
            continue;
        }
        if (c->state == ST_READ_BODY) {
            if (!c->in_len && !(c->req.chunked ? c->ch.done : c->body_left == 0)) break;
            read_body(c);
            continue;
        }
        if (c->state == ST_LINGER) c->in_len = 0;
        break;
    }
    if (c->dead || c->is_parked) return;
    flush(c);
    /* the client shut its side: an unfinished request can never complete */
    if (!c->dead && !c->is_parked && c->eof &&
        (c->state == ST_READ_HEAD || c->state == ST_READ_BODY || c->state == ST_LINGER))
        conn_close(c);
}

/* Writes the output (and a stream's next bytes as they come); the request
 * ends when its response is complete. */
static void flush(srv_conn *c) {
    for (;;) {
        if (c->dead || c->is_parked) return;
        while (c->out_off < c->out_len) {
            ssize_t w = send(c->fd, c->out + c->out_off, c->out_len - c->out_off, MSG_NOSIGNAL);
            if (w < 0 && errno == EINTR) continue;
            if (w < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return watch(c);
            if (w <= 0) return conn_close(c);
            c->out_off += (size_t)w;
            c->t_last = drt_clock_s();
        }
        if (c->state != ST_STREAM || c->stream_done) break;
        if (pump(c)) return; /* parked or closed */
    }
    if (c->state != ST_WRITE && c->state != ST_STREAM) return watch(c);
    end_request(c, 1);
    if (c->keep_alive && c->discard >= 0 && !c->eof) {
        c->state = ST_READ_HEAD;
        memset(&c->req, 0, sizeof c->req);
        if (c->in_len) return process(c);
        return watch(c);
    }
    if (c->eof) return conn_close(c); /* nothing more can come */
    shutdown(c->fd, SHUT_WR);
    c->state = ST_LINGER;
    c->in_len = 0;
    c->t_linger = drt_clock_s() + LINGER_S;
    watch(c);
}

static void on_readable(srv_conn *c) {
    while (!c->eof) {
        if (c->in_len + 1 >= c->in_cap) {
            if (c->in_cap >= IN_CAP) break; /* enough read ahead: parse first */
            size_t nc = c->in_cap ? c->in_cap * 2 : 4096;
            char *np = realloc(c->in, nc);
            if (!np) return conn_close(c);
            c->in = np, c->in_cap = nc;
        }
        ssize_t r = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len - 1, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) break;
        if (r < 0) return conn_close(c);
        if (r == 0) {
            c->eof = 1; /* what came before it is still a request to answer */
            break;
        }
        c->in_len += (size_t)r;
        c->t_last = drt_clock_s();
        if (c->state == ST_LINGER) c->in_len = 0;
    }
    process(c);
}

/* ---- accepting ----------------------------------------------------------- */

static int same_ip(const srv_conn *a, const unsigned char *ip, int n) {
    return a->ip_len == n && memcmp(a->ip, ip, (size_t)n) == 0;
}

static void on_accept(srv_httpd *d) {
    for (;;) {
        struct sockaddr_storage ss;
        socklen_t sl = sizeof ss;
        int fd = accept4(d->lfd, (struct sockaddr *)&ss, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            return; /* EAGAIN, or out of descriptors: the next wake tries again */
        }
        unsigned char ip[16];
        int n = 0;
        if (ss.ss_family == AF_INET6) {
            memcpy(ip, &((struct sockaddr_in6 *)&ss)->sin6_addr, 16), n = 16;
        } else {
            memcpy(ip, &((struct sockaddr_in *)&ss)->sin_addr, 4), n = 4;
        }
        int same = 0;
        for (srv_conn *c = d->conns; c; c = c->next) same += same_ip(c, ip, n);
        srv_conn *c = NULL;
        if (atomic_load(&d->n_conns) < d->o.max_conns && same < d->o.max_conns_per_ip) c = calloc(1, sizeof *c);
        if (!c) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        if (d->cb.on_accept) d->cb.on_accept(d->cb.cls, fd);
        c->d = d, c->fd = fd, c->ip_len = n;
        memcpy(c->ip, ip, (size_t)n);
        c->state = ST_READ_HEAD;
        c->t_last = drt_clock_s();
        c->next = d->conns;
        if (d->conns) d->conns->prev = c;
        d->conns = c;
        atomic_fetch_add(&d->n_conns, 1);
        epoll_set(c, EPOLLIN | EPOLLRDHUP, EPOLL_CTL_ADD);
    }
}

/* ---- the loop ------------------------------------------------------------ */

static void on_wake(srv_httpd *d) {
    uint64_t v;
    ssize_t r = read(d->efd, &v, sizeof v);
    (void)r;
    pthread_mutex_lock(&d->wake_mu);
    srv_conn *list = d->wake;
    d->wake = NULL;
    for (srv_conn *c = list; c; c = c->wake_next) c->parked = 0, c->queued = 0;
    pthread_mutex_unlock(&d->wake_mu);
    while (list) {
        srv_conn *c = list;
        list = c->wake_next;
        c->is_parked = 0;
        epoll_set(c, 0, EPOLL_CTL_ADD);
        if (c->resp == RESP_NONE) {
            d->cb.on_resume(d->cb.cls, c);
            handler_parks(c);
        }
        flush(c);
    }
}

static void sweep(srv_httpd *d, double now) {
    int idle_s = d->o.idle_timeout_s, body_s = d->o.body_timeout_s;
    for (srv_conn *c = d->conns, *next; c; c = next) {
        next = c->next;
        if (c->is_parked) continue;
        int late = 0;
        switch (c->state) {
        case ST_READ_HEAD: /* silent, or a head trickling in (slowloris) */
            late = idle_s > 0 && (now - c->t_last > idle_s || (c->t_head && now - c->t_head > idle_s));
            break;
        case ST_READ_BODY: late = body_s > 0 && now - c->t_body > body_s; break;
        case ST_WRITE:
        case ST_STREAM: late = idle_s > 0 && c->out_len > c->out_off && now - c->t_last > idle_s; break;
        case ST_LINGER: late = now > c->t_linger; break;
        default: break; /* a handler has it */
        }
        if (late) conn_close(c);
    }
}

static void *loop(void *arg) {
    srv_httpd *d = arg;
    struct epoll_event ev[64];
    while (!atomic_load(&d->stop)) {
        int n = epoll_wait(d->ep, ev, 64, 100);
        for (int i = 0; i < n; i++) {
            void *p = ev[i].data.ptr;
            if (p == &d->lfd) {
                on_accept(d);
                continue;
            }
            if (p == &d->efd) {
                on_wake(d);
                continue;
            }
            srv_conn *c = p;
            uint32_t e = ev[i].events;
            if (c->dead || c->is_parked) continue;
            int reading = c->state == ST_READ_HEAD || c->state == ST_READ_BODY || c->state == ST_LINGER;
            if (e & EPOLLERR)
                conn_close(c);
            else if (reading && (e & (EPOLLIN | EPOLLHUP | EPOLLRDHUP)))
                on_readable(c);
            else if (e & EPOLLOUT)
                flush(c);
            else if (e & EPOLLHUP)
                conn_close(c);
        }
        double now = drt_clock_s();
        if (now >= d->next_sweep) {
            sweep(d, now);
            d->next_sweep = now + 0.1;
        }
        free_dead(d);
    }
    return NULL;
}

/* ---- start and stop ------------------------------------------------------ */

static int listen_on(srv_httpd *d, int *port, char *err, size_t errn) {
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof ss);
    struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
    socklen_t sl;
    if (inet_pton(AF_INET, d->o.host, &a4->sin_addr) == 1) {
        a4->sin_family = AF_INET, a4->sin_port = htons((uint16_t)d->o.port), sl = sizeof *a4;
    } else if (inet_pton(AF_INET6, d->o.host, &a6->sin6_addr) == 1) {
        a6->sin6_family = AF_INET6, a6->sin6_port = htons((uint16_t)d->o.port), sl = sizeof *a6;
    } else {
        snprintf(err, errn, "--host wants a numeric IPv4 or IPv6 address, got \"%.64s\"", d->o.host);
        return -1;
    }
    d->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (d->lfd >= 0) setsockopt(d->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (d->lfd < 0 || bind(d->lfd, (struct sockaddr *)&ss, sl) != 0 || listen(d->lfd, 512) != 0) {
        snprintf(err, errn, "cannot listen on %s port %d: %s", d->o.host, d->o.port, strerror(errno));
        return -1;
    }
    sl = sizeof ss;
    getsockname(d->lfd, (struct sockaddr *)&ss, &sl);
    *port = ntohs(ss.ss_family == AF_INET6 ? a6->sin6_port : a4->sin_port);
    return 0;
}

int srv_httpd_start(const srv_httpd_opts *o, const srv_httpd_cb *cb, srv_httpd **out, int *port, char *err,
                    size_t errn) {
    *out = NULL;
    srv_httpd *d = calloc(1, sizeof *d);
    if (!d) return snprintf(err, errn, "out of memory"), -1;
    d->o = *o, d->cb = *cb;
    d->lfd = d->ep = d->efd = -1;
    pthread_mutex_init(&d->wake_mu, NULL);
    if (listen_on(d, port, err, errn) != 0) goto fail;
    d->ep = epoll_create1(EPOLL_CLOEXEC);
    d->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    struct epoll_event e1 = {.events = EPOLLIN, .data.ptr = &d->lfd}, e2 = {.events = EPOLLIN, .data.ptr = &d->efd};
    if (d->ep < 0 || d->efd < 0 || epoll_ctl(d->ep, EPOLL_CTL_ADD, d->lfd, &e1) != 0 ||
        epoll_ctl(d->ep, EPOLL_CTL_ADD, d->efd, &e2) != 0) {
        snprintf(err, errn, "cannot set up epoll: %s", strerror(errno));
        goto fail;
    }
    if (pthread_create(&d->th, NULL, loop, d) != 0) {
        snprintf(err, errn, "cannot start the HTTP thread");
        goto fail;
    }
    *out = d;
    return 0;
fail:
    if (d->lfd >= 0) close(d->lfd);
    if (d->ep >= 0) close(d->ep);
    if (d->efd >= 0) close(d->efd);
    pthread_mutex_destroy(&d->wake_mu);
    free(d);
    return -1;
}

void srv_httpd_stop(srv_httpd *d) {
    if (!d) return;
    atomic_store(&d->stop, 1);
    uint64_t one = 1;
    ssize_t w = write(d->efd, &one, sizeof one);
    (void)w;
    pthread_join(d->th, NULL);
    while (d->conns) conn_close(d->conns);
    free_dead(d);
    close(d->lfd), close(d->ep), close(d->efd);
    pthread_mutex_destroy(&d->wake_mu);
    free(d);
}

int srv_httpd_connections(srv_httpd *d) {
    return d ? atomic_load(&d->n_conns) : 0;
}

/* ---- the request's accessors --------------------------------------------- */

const char *srv_conn_method(const srv_conn *c) {
    return c->head + c->req.method.off;
}

const char *srv_conn_path(const srv_conn *c) {
    return c->req.path.len ? c->head + c->req.path.off : "/";
}

const char *srv_conn_host(const srv_conn *c) {
    return c->host ? c->host : "";
}

int srv_conn_minor(const srv_conn *c) {
    return c->req.minor;
}

const char *srv_conn_header(const srv_conn *c, const char *name) {
    srv_h1_span v;
    return c->head && srv_h1_field_get(c->head, &c->req, name, &v) ? c->head + v.off : NULL;
}

int srv_conn_fd(const srv_conn *c) {
    return c->fd;
}

void srv_conn_set_ctx(srv_conn *c, void *ctx) {
    c->ctx = ctx;
}

void *srv_conn_ctx(const srv_conn *c) {
    return c->ctx;
}
