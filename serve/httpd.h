/* The server's HTTP/1.1 connections (serve/httpd.c): one epoll thread
 * accepts, reads heads and bodies through the strict framing of h1.h,
 * writes responses, and parks connections whose answer other threads are
 * preparing. It knows nothing of OpenAI: serve/http.c routes the requests
 * through the callbacks below.
 *
 * Threads: every callback runs on the HTTP thread, and so does every
 * srv_conn_* call but srv_conn_resume. A connection the handler parked
 * (srv_conn_suspend) is neither read, written, timed out nor freed until
 * some thread calls srv_conn_resume on it (or the server stops): other
 * threads may keep its pointer, and its socket, while it is parked.
 *
 * Per request: on_head (the head is valid; respond now, e.g. 401, or
 * return to have the body read), then on_body (the whole body), then any
 * number of on_resume (after a park without a response), and on_done once
 * (the response sent whole, or the connection lost). A response is fixed
 * (srv_conn_respond) or streamed with chunked coding from a reader
 * (srv_conn_stream). Framing errors are answered here (400, 413, 414, 417,
 * 431, 501, 505, with an OpenAI error body) and close the connection. */
#ifndef DRT_SRV_HTTPD_H
#define DRT_SRV_HTTPD_H

#include <stddef.h>

typedef struct srv_conn srv_conn;
typedef struct srv_httpd srv_httpd;

typedef struct {
    const char *name, *value;
} srv_hdr;

typedef struct {
    void *cls;
    void (*on_head)(void *cls, srv_conn *c);
    void (*on_body)(void *cls, srv_conn *c, char *body, size_t len); /* body: malloc'd, NUL after len; the callee's */
    void (*on_resume)(void *cls, srv_conn *c);
    void (*on_done)(void *cls, srv_conn *c, void *ctx, int ok); /* ctx: srv_conn_set_ctx's */
    void (*on_refused)(void *cls, int status);                  /* a framing error was answered (metrics) */
    void (*on_accept)(void *cls, int fd);                       /* NULL: none */
} srv_httpd_cb;

typedef struct {
    const char *host; /* numeric IPv4 or IPv6 */
    int port;         /* 0: any free one */
    int max_conns, max_conns_per_ip;
    int idle_timeout_s; /* no traffic this long, or a head not complete this long after its first byte: closed */
    int body_timeout_s; /* a body not complete this long after its head: closed */
    long max_body;      /* bytes; past it 413 */
} srv_httpd_opts;

/* Listens and starts the HTTP thread. 0, or -1 with a message in err. The
 * port listened on goes to *port. */
int srv_httpd_start(const srv_httpd_opts *o, const srv_httpd_cb *cb, srv_httpd **out, int *port, char *err,
                    size_t errn);
/* Stops the thread, closes every connection (on_done with ok 0 for those
 * with a request, parked ones too) and frees d. */
void srv_httpd_stop(srv_httpd *d);
int srv_httpd_connections(srv_httpd *d);

/* ---- the request (HTTP thread, during it) ---- */
const char *srv_conn_method(const srv_conn *c);
const char *srv_conn_path(const srv_conn *c); /* the target's path, escapes as sent ("/" for none) */
const char *srv_conn_host(const srv_conn *c); /* Host, or the absolute-form target's authority; "" for none */
int srv_conn_minor(const srv_conn *c);        /* HTTP/1.0 or 1.1 */
/* the first field called name (any case), trimmed; NULL when absent */
const char *srv_conn_header(const srv_conn *c, const char *name);
int srv_conn_fd(const srv_conn *c);
void srv_conn_set_ctx(srv_conn *c, void *ctx);
void *srv_conn_ctx(const srv_conn *c);

/* ---- responses (HTTP thread) ---- */
/* The whole response; body malloc'd (NULL with len 0: none), taken. Headers
 * are copied. close: close the connection after it. */
void srv_conn_respond(srv_conn *c, int status, const srv_hdr *h, int nh, char *body, size_t len, int close);

#define SRV_READ_SUSPENDED 0 /* nothing now: the reader called srv_conn_suspend */
#define SRV_READ_END (-1)    /* the stream is complete */
#define SRV_READ_ABORT (-2)  /* the stream failed: the connection is closed without its end */
/* >0: that many bytes in buf (at most max), or one of the above */
typedef long (*srv_reader)(void *cls, char *buf, size_t max);
/* A 200-style streamed response (chunked in HTTP/1.1; to the close in 1.0).
 * rfree(rcls) is called when the response ends either way. */
void srv_conn_stream(srv_conn *c, int status, const srv_hdr *h, int nh, srv_reader rd, void *rcls,
                     void (*rfree)(void *));

/* Parks c when the current callback returns (HTTP thread). */
void srv_conn_suspend(srv_conn *c);
/* Unparks c (any thread): on_resume runs, or the stream's reader again. A
 * resume that comes before the park it answers cancels that park. */
void srv_conn_resume(srv_conn *c);

#endif
