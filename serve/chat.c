/* Chat templates (chat.h): detection by markers in tokenizer_config.json and
 * one hand-written renderer per format, each checked byte for byte against
 * Jinja's rendering of the real template (tests/test_serve_chat.c,
 * tests/fixtures/chat/, python/make_chat_fixtures.py). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat.h"
#include "request.h"

#define CHAT_CONFIG_MAX ((size_t)16 << 20) /* tokenizer_config.json; real ones are a few MiB at most */

/* add_bos 0 for the llama3 family: their templates write bos_token, so by
 * name they render "<|begin_of_text|>" too (srv_chat_detect sets 1 for a
 * template that does not) */
static const srv_chat_template TEMPLATES[] = {
    {SRV_CHAT_LLAMA3, "llama3", 0, "<|eot_id|>", NULL},
    {SRV_CHAT_LLAMA31, "llama3.1", 0, "<|eot_id|>", NULL},
    {SRV_CHAT_CHATML, "chatml", 1, "<|im_end|>", NULL},
    {SRV_CHAT_PLAIN, "plain", 1, NULL, "\nUser:"},
};
static const srv_chat_template NONE_TEMPLATE = {SRV_CHAT_NONE, "none", 1, NULL, NULL};

#define LLAMA3_BOS "<|begin_of_text|>"
/* what the Llama 3.1 template writes ahead of the system message when no
 * date_string is passed (its default) and there are no tools */
#define LLAMA31_SYSTEM_HEAD                                                                                            \
    "<|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"

int srv_chat_by_name(const char *name, srv_chat_template *out) {
    for (size_t i = 0; name && i < sizeof TEMPLATES / sizeof TEMPLATES[0]; i++)
        if (strcmp(name, TEMPLATES[i].name) == 0) {
            if (out) *out = TEMPLATES[i];
            return 0;
        }
    return -1;
}

/* ---- detection ---------------------------------------------------------- */

/* Reads path whole into a NUL-terminated malloc'd buffer, at most
 * CHAT_CONFIG_MAX bytes. 1: read; 0: no such file; -1: an error, in why.
 * stat before open: a device node is never opened, a FIFO is refused without
 * the open that would wait for a writer (O_NONBLOCK covers one swapped in
 * between the two). */
static int read_small_file(const char *path, char **out, size_t *len, char *why, size_t why_n) {
    *out = NULL;
    *len = 0;
    struct stat sb;
    if (stat(path, &sb) != 0) {
        if (errno == ENOENT) return 0;
        snprintf(why, why_n, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (!S_ISREG(sb.st_mode)) {
        snprintf(why, why_n, "%s: not a regular file", path);
        return -1;
    }
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        snprintf(why, why_n, "%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
        snprintf(why, why_n, "%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if ((unsigned long long)sb.st_size > CHAT_CONFIG_MAX) {
        snprintf(why, why_n, "%s: file is %lld bytes, over the %zu MiB limit", path, (long long)sb.st_size,
                 CHAT_CONFIG_MAX >> 20);
        close(fd);
        return -1;
    }
    /* read to EOF, not to st_size: a file that grows meanwhile still stops at
     * the limit */
    size_t cap = (size_t)sb.st_size + 1, n = 0;
    char *buf = malloc(cap);
    for (;;) {
        if (!buf) {
            snprintf(why, why_n, "%s: out of memory", path);
            close(fd);
            return -1;
        }
        if (n + 1 == cap) {
            if (n >= CHAT_CONFIG_MAX) {
                snprintf(why, why_n, "%s: over the %zu MiB limit", path, CHAT_CONFIG_MAX >> 20);
                free(buf);
                close(fd);
                return -1;
            }
            cap = cap * 2 > CHAT_CONFIG_MAX + 1 ? CHAT_CONFIG_MAX + 1 : cap * 2;
            char *nb = realloc(buf, cap);
            if (!nb) free(buf);
            buf = nb;
            continue;
        }
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR) continue;
        if (r < 0) {
            snprintf(why, why_n, "%s: cannot read: %s", path, strerror(errno));
            free(buf);
            close(fd);
            return -1;
        }
        if (r == 0) break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    *out = buf;
    *len = n;
    return 1;
}

/* 1 when the template uses bos_token inside a Jinja expression or statement
 * ({{ bos_token }}, {{- bos_token }}, {% set content = bos_token + ... %}):
 * the rendered text then starts with the BOS text. A mention in a comment or
 * in the literal text does not count. */
static int writes_bos(const char *t) {
    for (const char *p = strstr(t, "bos_token"); p; p = strstr(p + 1, "bos_token")) {
        /* the nearest tag delimiter before it decides where it is */
        for (const char *q = p; q - t >= 2; q--) {
            char a = q[-2], b = q[-1];
            if (a == '{' && (b == '{' || b == '%')) return 1;
            if ((a == '{' && b == '#') || (b == '}' && (a == '}' || a == '%' || a == '#'))) break;
        }
    }
    return 0;
}

/* The template's form by its markers (chat.h). */
static void detect_form(const char *tmpl, srv_chat_template *out) {
    *out = NONE_TEMPLATE;
    if (strstr(tmpl, "<|start_header_id|>") && strstr(tmpl, "<|end_header_id|>")) {
        srv_chat_by_name(strstr(tmpl, "Cutting Knowledge Date") ? "llama3.1" : "llama3", out);
        out->add_bos = !writes_bos(tmpl);
    } else if (strstr(tmpl, "<|im_start|>")) {
        /* the renderer writes no BOS text: where a chatml template writes
         * bos_token, the tokenizer's post-processor adds the same BOS */
        srv_chat_by_name("chatml", out);
    }
}

static const char *json_kind(const cJSON *v) {
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsArray(v)) return "a list";
    if (cJSON_IsObject(v)) return "an object";
    return "null";
}

/* the last member called key (Python's json, which Hugging Face reads the
 * file with, keeps the last of duplicate keys; cJSON's lookup the first) */
static const cJSON *last_member(const cJSON *obj, const char *key) {
    const cJSON *found = NULL, *e;
    cJSON_ArrayForEach(e, obj) if (e->string && strcmp(e->string, key) == 0) found = e;
    return found;
}

drt_status srv_chat_detect(const char *dir, srv_chat_template *out, char *why, size_t why_n) {
    char whybuf[8];
    if (!why || why_n == 0) why = whybuf, why_n = sizeof whybuf;
    why[0] = '\0';
    if (out) *out = NONE_TEMPLATE;
    if (!dir || !out) {
        snprintf(why, why_n, "srv_chat_detect: %s is NULL", dir ? "out" : "dir");
        return DRT_ERR_INVALID_ARG;
    }
    size_t dl = strlen(dir);
    char *path = malloc(dl + sizeof "/tokenizer_config.json");
    if (!path) {
        snprintf(why, why_n, "out of memory");
        return DRT_ERR_OOM;
    }
    memcpy(path, dir, dl);
    memcpy(path + dl, "/tokenizer_config.json", sizeof "/tokenizer_config.json");
    char *text = NULL;
    size_t len = 0;
    int r = read_small_file(path, &text, &len, why, why_n);
    if (r <= 0) {
        if (r == 0) snprintf(why, why_n, "no tokenizer_config.json");
        free(path);
        return r == 0 ? DRT_OK : DRT_ERR_IO;
    }
    drt_status st = DRT_OK;
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        size_t at = end && end >= text && end <= text + len ? (size_t)(end - text) : 0;
        snprintf(why, why_n, "%s: invalid JSON (at byte %zu)", path, at);
        st = DRT_ERR_FORMAT;
        goto done;
    }
    if (!cJSON_IsObject(root)) {
        snprintf(why, why_n, "%s: expected a JSON object, got %s", path, json_kind(root));
        st = DRT_ERR_FORMAT;
        goto done;
    }
    const cJSON *ct = last_member(root, "chat_template");
    const char *from = "";
    if (cJSON_IsArray(ct)) {
        const cJSON *e, *def = NULL;
        int i = 0;
        cJSON_ArrayForEach(e, ct) {
            const cJSON *nm = cJSON_IsObject(e) ? last_member(e, "name") : NULL;
            const cJSON *tp = cJSON_IsObject(e) ? last_member(e, "template") : NULL;
            if (!cJSON_IsString(nm) || !cJSON_IsString(tp)) {
                snprintf(why, why_n,
                         "%s: \"chat_template\"[%d] is not an object with \"name\" and \"template\" strings", path, i);
                st = DRT_ERR_FORMAT;
                goto done;
            }
            if (strcmp(nm->valuestring, "default") == 0) def = tp;
            i++;
        }
        if (!def) {
            snprintf(why, why_n, "chat_template has no template named \"default\"");
            goto done;
        }
        ct = def;
        from = " (the list's \"default\")";
    } else if (ct && !cJSON_IsNull(ct) && !cJSON_IsString(ct)) {
        snprintf(why, why_n, "%s: \"chat_template\" is %s, expected a string or a list of {\"name\", \"template\"}",
                 path, json_kind(ct));
        st = DRT_ERR_FORMAT;
        goto done;
    }
    if (!cJSON_IsString(ct)) {
        snprintf(why, why_n, "no chat_template in tokenizer_config.json");
        goto done;
    }
    detect_form(ct->valuestring, out);
    if (out->kind == SRV_CHAT_NONE)
        snprintf(why, why_n, "chat_template of an unknown form");
    else
        snprintf(why, why_n, "tokenizer_config.json chat_template%s%s", from,
                 out->add_bos ? "" : ", which writes the BOS text");
done:
    if (st != DRT_OK) *out = NONE_TEMPLATE;
    cJSON_Delete(root);
    free(text);
    free(path);
    return st;
}

/* ---- rendering ---------------------------------------------------------- */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
    size_t *plain; /* [2 * n_plain]: where each message's content went */
    int n_plain, cap_plain;
} sbuf;

/* put of a message's content: its byte range is remembered, so that the
 * tokenizer reads no special token inside it (drt_encode_opts.plain) */
static void put(sbuf *b, const char *s, size_t n);
static void put_content(sbuf *b, const char *s, size_t n) {
    size_t at = b->n;
    put(b, s, n);
    if (b->oom || !n) return;
    if (b->n_plain == b->cap_plain) {
        int nc = b->cap_plain ? b->cap_plain * 2 : 8;
        size_t *np = realloc(b->plain, sizeof *np * 2 * (size_t)nc);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->plain = np, b->cap_plain = nc;
    }
    b->plain[2 * b->n_plain] = at;
    b->plain[2 * b->n_plain + 1] = b->n;
    b->n_plain++;
}

static void put(sbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (n >= b->cap - b->n) {
        if (n > SIZE_MAX / 2 - b->n) {
            b->oom = 1;
            return;
        }
        size_t need = b->n + n + 1;
        size_t cap = b->cap * 2 > need ? b->cap * 2 : need;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
}

static void puts_(sbuf *b, const char *s) {
    put(b, s, strlen(s));
}

/* Python's str.isspace(), which Jinja's trim (str.strip()) removes */
static int py_space(unsigned cp) {
    return (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20) || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
           (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F ||
           cp == 0x3000;
}

/* the code point of the UTF-8 sequence at s[0..n) (valid UTF-8: the
 * messages are checked), its length in *k */
static unsigned utf8_at(const unsigned char *s, size_t n, size_t *k) {
    unsigned c = s[0];
    size_t m = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
    if (m > n) m = n;
    unsigned cp = m == 1 ? c : c & (0x7F >> m);
    for (size_t i = 1; i < m; i++) cp = cp << 6 | (s[i] & 0x3F);
    *k = m;
    return cp;
}

/* content | trim: s[*a..*b) without the whitespace at either end */
static void trim(const char *s, size_t n, size_t *a, size_t *b) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, j = n, k;
    while (i < j && py_space(utf8_at(u + i, j - i, &k))) i += k;
    while (j > i) {
        size_t st = j - 1;
        while (st > i && j - st < 4 && (u[st] & 0xC0) == 0x80) st--; /* back to the lead byte */
        if (!py_space(utf8_at(u + st, j - st, &k))) break;
        j = st;
    }
    *a = i, *b = j;
}

static void put_trimmed(sbuf *b, const srv_message *m) {
    size_t i, j;
    trim(m->content, m->len, &i, &j);
    put_content(b, m->content + i, j - i);
}

static const char *role_name(srv_role r) {
    return r == SRV_ROLE_SYSTEM ? "system" : r == SRV_ROLE_USER ? "user" : "assistant";
}

/* '<|start_header_id|>' + role + '<|end_header_id|>\n\n' + content|trim + '<|eot_id|>' */
static void llama3_message(sbuf *b, const srv_message *m) {
    puts_(b, "<|start_header_id|>");
    puts_(b, role_name(m->role));
    puts_(b, "<|end_header_id|>\n\n");
    put_trimmed(b, m);
    puts_(b, "<|eot_id|>");
}

static void render_llama3(sbuf *b, const srv_chat_template *t, const srv_message *msgs, int n) {
    int first = 0;
    if (!t->add_bos) puts_(b, LLAMA3_BOS);
    if (t->kind == SRV_CHAT_LLAMA31) {
        /* the system header is always there; the first message, when it is a
         * system message, goes into it */
        puts_(b, LLAMA31_SYSTEM_HEAD);
        if (msgs[0].role == SRV_ROLE_SYSTEM) {
            put_trimmed(b, &msgs[0]);
            first = 1;
        }
        puts_(b, "<|eot_id|>");
    }
    for (int i = first; i < n; i++) llama3_message(b, &msgs[i]);
    puts_(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

static void render_chatml(sbuf *b, const srv_message *msgs, int n) {
    for (int i = 0; i < n; i++) {
        puts_(b, "<|im_start|>");
        puts_(b, role_name(msgs[i].role));
        puts_(b, "\n");
        put_content(b, msgs[i].content, msgs[i].len);
        puts_(b, "<|im_end|>\n");
    }
    puts_(b, "<|im_start|>assistant\n");
}

static void render_plain(sbuf *b, const srv_message *msgs, int n) {
    for (int i = 0; i < n; i++) {
        srv_role r = msgs[i].role;
        puts_(b, r == SRV_ROLE_SYSTEM ? "System: " : r == SRV_ROLE_USER ? "User: " : "Assistant: ");
        put_trimmed(b, &msgs[i]);
        puts_(b, "\n");
    }
    puts_(b, "Assistant:");
}

int srv_chat_render(const srv_chat_template *t, const srv_message *msgs, int n, char **text, size_t *len,
                    srv_error *err) {
    return srv_chat_render_spans(t, msgs, n, text, len, NULL, NULL, err);
}

int srv_chat_render_spans(const srv_chat_template *t, const srv_message *msgs, int n, char **text, size_t *len,
                          size_t **plain, int *n_plain, srv_error *err) {
    if (text) *text = NULL;
    if (len) *len = 0;
    if (plain) *plain = NULL;
    if (n_plain) *n_plain = 0;
    if (!text || !len)
        return srv_error_set(err, 500, "server_error", NULL, NULL, "srv_chat_render: %s is NULL",
                             text ? "len" : "text");
    if (!t || t->kind == SRV_CHAT_NONE)
        return srv_error_set(err, 400, "invalid_request_error", NULL, NULL,
                             "this model has no chat template; use /v1/completions or --chat-template");
    if (n < 1 || !msgs)
        return srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages must not be empty");
    for (int i = 0; i < n; i++) {
        if ((int)msgs[i].role < (int)SRV_ROLE_SYSTEM || (int)msgs[i].role > (int)SRV_ROLE_ASSISTANT)
            return srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages[%d]: unknown role", i);
        if (!msgs[i].content)
            return srv_error_set(err, 400, "invalid_request_error", NULL, "messages", "messages[%d]: no content", i);
    }
    sbuf b = {NULL, 0, 0, 0, NULL, 0, 0};
    switch (t->kind) {
    case SRV_CHAT_LLAMA3:
    case SRV_CHAT_LLAMA31: render_llama3(&b, t, msgs, n); break;
    case SRV_CHAT_CHATML: render_chatml(&b, msgs, n); break;
    case SRV_CHAT_PLAIN: render_plain(&b, msgs, n); break;
    case SRV_CHAT_NONE: break;
    }
    if (b.oom || !b.p) {
        free(b.p);
        free(b.plain);
        return srv_error_set(err, 500, "server_error", NULL, NULL, "out of memory rendering the chat template");
    }
    *text = b.p;
    *len = b.n;
    if (plain) {
        *plain = b.plain;
        *n_plain = b.n_plain;
    } else {
        free(b.plain);
    }
    return 0;
}
