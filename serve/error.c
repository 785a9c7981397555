/* The OpenAI error object and the UTF-8 check every text field goes through. */
#include <cjson/cJSON.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "request.h"

int srv_error_set(srv_error *err, int status, const char *type, const char *code, const char *param, const char *fmt,
                  ...) {
    if (!err) return -1;
    err->status = status;
    err->type = type;
    err->code = code;
    snprintf(err->param, sizeof err->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->message, sizeof err->message, fmt, ap);
    va_end(ap);
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
