/* The OpenAI error object, the UTF-8 check every text field goes through,
 * and JSON strings of any bytes. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/util.h"
#include "request.h"

int srv_error_set(srv_error *err, int status, const char *type, const char *code, const char *param, const char *fmt,
                  ...) {
    if (!err) return -1;
    err->status = status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    /* the message may quote a client's text or a file's: made one line of
     * valid UTF-8 without control characters (drt_printable), cut after a
     * whole character, never inside one */
    char raw[1024];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(raw, sizeof raw, fmt, ap);
    va_end(ap);
    if (k >= (int)sizeof raw) { /* cut by vsnprintf: drop a character it split */
        size_t n = sizeof raw - 1, c = n;
        while (c > 0 && ((unsigned char)raw[c - 1] & 0xC0) == 0x80 && n - c < 3) c--;
        if (c > 0 && (unsigned char)raw[c - 1] >= 0xC0) raw[c - 1] = 0;
    }
    drt_printable(raw, err->message, sizeof err->message);
    return -1;
}

char *srv_error_json(const srv_error *err) {
    cJSON *root = cJSON_CreateObject(), *e = cJSON_AddObjectToObject(root, "error");
    if (!e) goto oom;
    if (!cJSON_AddStringToObject(e, "message", err->message)) goto oom;
    if (!cJSON_AddStringToObject(e, "type", err->type ? err->type : "server_error")) goto oom;
    if (!(err->param[0] ? cJSON_AddStringToObject(e, "param", err->param) : cJSON_AddNullToObject(e, "param")))
        goto oom;
    if (!(err->code ? cJSON_AddStringToObject(e, "code", err->code) : cJSON_AddNullToObject(e, "code"))) goto oom;
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return out;
oom:
    cJSON_Delete(root);
    return NULL;
}

int srv_utf8_ok(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c == 0) return 0;
        if (c < 0x80) {
            i++;
            continue;
        }
        int k;
        unsigned cp, min;
        if ((c & 0xE0) == 0xC0) {
            k = 1, cp = c & 0x1F, min = 0x80;
        } else if ((c & 0xF0) == 0xE0) {
            k = 2, cp = c & 0x0F, min = 0x800;
        } else if ((c & 0xF8) == 0xF0) {
            k = 3, cp = c & 0x07, min = 0x10000;
        } else {
            return 0;
        }
        if (n - i <= (size_t)k) return 0;
        for (int j = 1; j <= k; j++) {
            if ((p[i + j] & 0xC0) != 0x80) return 0;
            cp = cp << 6 | (p[i + j] & 0x3F);
        }
        if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
        i += (size_t)k + 1;
    }
    return 1;
}

char *srv_json_string(const char *s, size_t n) {
    /* what cJSON's printer writes for a C string, byte for byte (so the
     * answers stay as they were), with \u0000 for a NUL, which it cannot
     * hold: the quotes, \" \\ \b \f \n \r \t, other bytes below 0x20 as
     * \u00xx, the rest as they are */
    size_t cap = 2 + 1;
    for (size_t i = 0; i < n; i++) cap += (unsigned char)s[i] < 0x20 ? 6 : s[i] == '"' || s[i] == '\\' ? 2 : 1;
    char *out = malloc(cap), *o = out;
    if (!out) return NULL;
    *o++ = '"';
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *e = c == '"'    ? "\\\""
                        : c == '\\' ? "\\\\"
                        : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f"
                        : c == '\n' ? "\\n"
                        : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t"
                                    : NULL;
        if (e) {
            memcpy(o, e, 2);
            o += 2;
        } else if (c < 0x20) {
            o += snprintf(o, 7, "\\u%04x", c);
        } else {
            *o++ = (char)c;
        }
    }
    *o++ = '"';
    *o = 0;
    return out;
}
