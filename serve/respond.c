/* Response bodies and server-sent events in OpenAI's shapes: a completion
 * ("text_completion") or a chat completion ("chat.completion"), whole or as
 * chunks ("chat.completion.chunk"), with usage. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server.h"

static const char *served_name(const srv_job *j) {
    return j->req.model && j->req.model[0] ? j->req.model : j->S->aliases[0];
}

/* id, object, created, model */
static cJSON *envelope(const srv_job *j, const char *object) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    cJSON_AddStringToObject(o, "id", j->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)j->created);
    cJSON_AddStringToObject(o, "model", served_name(j));
    return o;
}

static cJSON *usage(const srv_job *j) {
    cJSON *u = cJSON_CreateObject();
    if (!u) return NULL;
    cJSON_AddNumberToObject(u, "prompt_tokens", j->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", j->n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", j->n_prompt + j->n_gen);
    return u;
}

/* a string of n bytes, NULs and all: written as its JSON literal, since a
 * cJSON string ends at the first NUL (srv_json_string) */
static cJSON *string_n(const char *s, size_t n) {
    char *lit = srv_json_string(s, n);
    cJSON *r = lit ? cJSON_CreateRaw(lit) : NULL;
    free(lit);
    return r;
}

static char *print_free(cJSON *o) {
    char *s = o ? cJSON_PrintUnformatted(o) : NULL;
    cJSON_Delete(o);
    return s;
}

/* "data: JSON\n\n" */
static char *event(cJSON *o) {
    char *js = print_free(o);
    if (!js) return NULL;
    size_t n = strlen(js);
    char *ev = malloc(n + 9);
    if (ev) snprintf(ev, n + 9, "data: %s\n\n", js);
    free(js);
    return ev;
}

/* The envelope with one choice {"index": 0}; the choice in *choice. NULL
 * when out of memory. */
static cJSON *with_choice(const srv_job *j, const char *object, cJSON **choice) {
    cJSON *o = envelope(j, object);
    cJSON *choices = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    if (!o || !choices || !c) {
        cJSON_Delete(c);
        cJSON_Delete(o);
        return NULL;
    }
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", 0);
    *choice = c;
    return o;
}

char *srv_body_final(const srv_job *j) {
    int chat = j->req.ep == SRV_EP_CHAT;
    cJSON *c, *o = with_choice(j, chat ? "chat.completion" : "text_completion", &c);
    if (!o) return NULL;
    cJSON *text = string_n(j->text ? j->text : "", j->text ? j->text_len : 0);
    if (chat) {
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddItemToObject(m, "content", text);
    } else {
        cJSON_AddItemToObject(c, "text", text);
    }
    cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", j->finish ? j->finish : "stop");
    cJSON_AddItemToObject(o, "usage", usage(j));
    return print_free(o);
}

/* One chunk: new text (role_chunk: the chat's opening {"role":"assistant"}),
 * or, with finish set, the closing one. */
static cJSON *chunk(const srv_job *j, const char *text, size_t n, int role_chunk, const char *finish) {
    int chat = j->req.ep == SRV_EP_CHAT;
    cJSON *c, *o = with_choice(j, chat ? "chat.completion.chunk" : "text_completion", &c);
    if (!o) return NULL;
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role_chunk) {
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddStringToObject(d, "content", "");
        } else if (!finish) {
            cJSON_AddItemToObject(d, "content", string_n(text, n));
        }
    } else {
        cJSON_AddItemToObject(c, "text", string_n(finish ? "" : text, finish ? 0 : n));
    }
    cJSON_AddNullToObject(c, "logprobs");
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    if (j->req.include_usage) cJSON_AddNullToObject(o, "usage");
    return o;
}

char *srv_sse_chunk(const srv_job *j, const char *text, size_t n, int role_chunk) {
    return event(chunk(j, text, n, role_chunk, NULL));
}

char *srv_sse_finish(const srv_job *j) {
    char *last = event(chunk(j, "", 0, 0, j->finish ? j->finish : "stop")), *use = NULL;
    if (!last) return NULL;
    if (j->req.include_usage) {
        cJSON *o = envelope(j, j->req.ep == SRV_EP_CHAT ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage(j));
        if (!(use = event(o))) {
            free(last);
            return NULL;
        }
    }
    size_t n = strlen(last) + (use ? strlen(use) : 0) + sizeof "data: [DONE]\n\n";
    char *all = malloc(n);
    if (all) snprintf(all, n, "%s%sdata: [DONE]\n\n", last, use ? use : "");
    free(last);
    free(use);
    return all;
}

char *srv_sse_error(const srv_error *e) {
    char *js = srv_error_json(e);
    if (!js) return NULL;
    size_t n = strlen(js) + 9;
    char *ev = malloc(n);
    if (ev) snprintf(ev, n, "data: %s\n\n", js);
    free(js);
    return ev;
}
