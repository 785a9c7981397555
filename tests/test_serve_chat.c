/* Chat templates (serve/chat.c). Golden: every conversation of
 * tests/fixtures/chat/NAME.json, rendered by python3-jinja2 from the template
 * string in the file (python/make_chat_fixtures.py), must come out of
 * srv_chat_render byte for byte, after srv_chat_detect has found the
 * template's form in a tokenizer_config.json holding that string. Then
 * detection on small tokenizer_config.json files (a table), the "plain"
 * format, names, and the render errors. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chat.h"
#include "drt_test.h"

#define CHAT_DIR DRT_FIXTURES_DIR "/chat"

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(text, 1, strlen(text), f);
    fclose(f);
}

/* DRT_TMP_DIR/chat_<name>/, with tokenizer_config.json holding `config`
 * (NULL: no file) */
static void make_dir(char *dir, size_t n, const char *name, const char *config) {
    snprintf(dir, n, "%s/chat_%s", DRT_TMP_DIR, name);
    mkdir(dir, 0755);
    char p[1100];
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    remove(p);
    rmdir(p);
    if (config) write_file(p, config);
}

/* the first byte where a and b differ, with 20 bytes of each around it
 * (bytes outside printable ASCII as \xNN) */
static void show_diff(const char *what, const char *got, size_t gn, const char *want, size_t wn) {
    size_t i = 0;
    while (i < gn && i < wn && got[i] == want[i]) i++;
    size_t from = i > 20 ? i - 20 : 0;
    fprintf(stderr, "  %s: first difference at byte %zu (got %zu bytes, want %zu)\n", what, i, gn, wn);
    fprintf(stderr, "    got:  \"");
    for (size_t k = from; k < gn && k < i + 20; k++)
        fprintf(stderr, (unsigned char)got[k] - 0x20u < 0x5fu ? "%c" : "\\x%02x", (unsigned char)got[k]);
    fprintf(stderr, "\"\n    want: \"");
    for (size_t k = from; k < wn && k < i + 20; k++)
        fprintf(stderr, (unsigned char)want[k] - 0x20u < 0x5fu ? "%c" : "\\x%02x", (unsigned char)want[k]);
    fprintf(stderr, "\"\n");
}

static int role_of(const char *s, srv_role *r) {
    if (strcmp(s, "system") == 0)
        *r = SRV_ROLE_SYSTEM;
    else if (strcmp(s, "user") == 0)
        *r = SRV_ROLE_USER;
    else if (strcmp(s, "assistant") == 0)
        *r = SRV_ROLE_ASSISTANT;
    else
        return -1;
    return 0;
}

/* ---- golden: Jinja's renderings of the real template strings ------------- */

static const char *GOLDEN[] = {"llama3", "llama3_no_bos", "llama3.1", "chatml"};

static void golden_file(const char *name) {
    char path[1100];
    snprintf(path, sizeof path, "%s/%s.json", CHAT_DIR, name);
    char *text = drt_test_read_file(path);
    DRT_CHECK(text, "%s: cannot read", path);
    if (!text) return;
    cJSON *doc = cJSON_Parse(text);
    free(text);
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(doc, "chat_template");
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(doc, "kind");
    const cJSON *bos = cJSON_GetObjectItemCaseSensitive(doc, "bos_token");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(doc, "cases");
    DRT_CHECK(cJSON_IsString(tmpl) && cJSON_IsString(kind) && cJSON_IsString(bos) && cJSON_IsArray(cases) &&
                  cJSON_GetArraySize(cases) > 0,
              "%s: not a chat fixture", path);
    if (!cJSON_IsString(tmpl) || !cJSON_IsString(kind) || !cJSON_IsString(bos) || !cJSON_IsArray(cases)) {
        cJSON_Delete(doc);
        return;
    }

    /* the template string as a model directory holds it */
    cJSON *cfg = cJSON_CreateObject();
    cJSON_AddStringToObject(cfg, "bos_token", bos->valuestring);
    cJSON_AddStringToObject(cfg, "chat_template", tmpl->valuestring);
    char *cfg_text = cJSON_Print(cfg);
    cJSON_Delete(cfg);
    char dir[1024], why[256];
    make_dir(dir, sizeof dir, name, cfg_text);
    free(cfg_text);
    srv_chat_template t;
    drt_status st = srv_chat_detect(dir, &t, why, sizeof why);
    DRT_CHECK(st == DRT_OK && strcmp(t.name, kind->valuestring) == 0, "%s: detected %s (%s), want %s", name, t.name,
              why, kind->valuestring);
    /* the BOS text is the renderer's to write exactly when Jinja wrote it */
    const cJSON *c0 = cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(cases, 0), "expected");
    int jinja_bos = cJSON_IsString(c0) && strncmp(c0->valuestring, bos->valuestring, strlen(bos->valuestring)) == 0;
    DRT_CHECK(t.add_bos == !jinja_bos, "%s: add_bos %d, but the template %s the BOS text", name, t.add_bos,
              jinja_bos ? "writes" : "does not write");

    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *cname = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(c, "name"));
        const cJSON *msgs = cJSON_GetObjectItemCaseSensitive(c, "messages");
        const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "expected");
        int n = cJSON_GetArraySize(msgs);
        srv_message *m = calloc((size_t)n + 1, sizeof *m);
        int k = 0, bad = !cname || !cJSON_IsString(want) || !m;
        const cJSON *e;
        cJSON_ArrayForEach(e, msgs) {
            const char *role = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "role"));
            const char *content = cJSON_GetStringValue(cJSON_GetObjectItemCaseSensitive(e, "content"));
            if (!m || !role || !content || role_of(role, &m[k].role) != 0) {
                bad = 1;
                break;
            }
            m[k].content = (char *)content;
            m[k].len = strlen(content);
            k++;
        }
        DRT_CHECK(!bad, "%s: case %s is malformed", name, cname ? cname : "?");
        if (bad) {
            free(m);
            continue;
        }
        char *out = NULL;
        size_t len = 0;
        srv_error err = {0};
        int r = srv_chat_render(&t, m, n, &out, &len, &err);
        size_t wn = strlen(want->valuestring);
        int same = r == 0 && out && len == wn && memcmp(out, want->valuestring, wn) == 0 && out[len] == '\0';
        DRT_CHECK(same, "%s/%s: srv_chat_render differs from Jinja's rendering (rc %d: %s)", name, cname, r,
                  r ? err.message : "");
        if (!same && r == 0) show_diff(cname, out, len, want->valuestring, wn);
        free(out);

        /* by name (--chat-template) the llama3 family writes the BOS text */
        srv_chat_template byname;
        if (srv_chat_by_name(t.name, &byname) == 0 && byname.add_bos == t.add_bos) {
            r = srv_chat_render(&byname, m, n, &out, &len, &err);
            same = r == 0 && len == wn && memcmp(out, want->valuestring, wn) == 0;
            DRT_CHECK(same, "%s/%s: the template named %s renders otherwise", name, cname, t.name);
            free(out);
        }
        free(m);
    }
    cJSON_Delete(doc);
}

/* ---- detection ----------------------------------------------------------- */

#define LLAMA3_T "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m.role }}<|end_header_id|>{% endfor %}"
#define CHATML_T "{% for m in messages %}<|im_start|>{{ m.role }}\\n{{ m.content }}<|im_end|>{% endfor %}"

typedef struct {
    const char *name;
    drt_status status;
    const char *kind;    /* the name detected ("none" when NONE) */
    int add_bos;         /* -1: not checked */
    const char *why_has; /* a substring of *why */
    const char *config;  /* tokenizer_config.json; NULL: no file; "<dir>": a directory by that name */
} detect_case;

#define CT(s) "{\"chat_template\": \"" s "\"}"
#define ENTRY(name, s) "{\"name\": \"" name "\", \"template\": \"" s "\"}"
#define HDR "<|start_header_id|><|end_header_id|>"

static const detect_case DETECT[] = {
    {"llama3_string", DRT_OK, "llama3", 0, "tokenizer_config.json", CT(LLAMA3_T)},
    {"llama3_bos_dash", DRT_OK, "llama3", 0, NULL, CT("{{- bos_token }}" HDR)},
    {"llama3_bos_set", DRT_OK, "llama3", 0, NULL, CT("{% set c = bos_token + c %}" HDR)},
    {"llama3_no_bos", DRT_OK, "llama3", 1, NULL, CT("<|start_header_id|>{{ role }}<|end_header_id|>")},
    {"llama3_bos_in_comment", DRT_OK, "llama3", 1, NULL, CT("{# bos_token #}bos_token" HDR)},
    {"llama31_string", DRT_OK, "llama3.1", 0, NULL, CT("{{- bos_token }}" HDR "Cutting Knowledge Date: December 2023")},
    {"only_start_header", DRT_OK, "none", -1, "chat_template of an unknown form", CT("<|start_header_id|>{{ m }}")},
    {"chatml_string", DRT_OK, "chatml", 1, NULL, CT(CHATML_T)},
    {"chatml_bos", DRT_OK, "chatml", 1, NULL, CT("{{ bos_token }}" CHATML_T)},
    {"list_default", DRT_OK, "llama3", 0, "\"default\"",
     "{\"chat_template\": [" ENTRY("tool_use", CHATML_T) ", " ENTRY("default", LLAMA3_T) "]}"},
    {"list_no_default", DRT_OK, "none", -1, "no template named \"default\"",
     "{\"chat_template\": [" ENTRY("rag", CHATML_T) "]}"},
    {"list_bad_entry", DRT_ERR_FORMAT, "none", -1, "tokenizer_config.json: \"chat_template\"[0]",
     "{\"chat_template\": [{\"name\": \"default\"}]}"},
    {"duplicate_key_last_wins", DRT_OK, "chatml", 1, NULL,
     "{\"chat_template\": \"" LLAMA3_T "\", \"chat_template\": \"" CHATML_T "\"}"},
    {"no_template", DRT_OK, "none", -1, "no chat_template", "{\"bos_token\": \"<s>\"}"},
    {"null_template", DRT_OK, "none", -1, "no chat_template", "{\"chat_template\": null}"},
    {"unknown_template", DRT_OK, "none", -1, "chat_template of an unknown form",
     CT("{% for m in messages %}### {{ m.role }}: {{ m.content }}{% endfor %}")},
    {"number_template", DRT_ERR_FORMAT, "none", -1, "tokenizer_config.json: \"chat_template\" is a number",
     "{\"chat_template\": 3}"},
    {"invalid_json", DRT_ERR_FORMAT, "none", -1, "tokenizer_config.json: invalid JSON",
     "{\"chat_template\": \"<|im_start|>\","},
    {"empty_file", DRT_ERR_FORMAT, "none", -1, "tokenizer_config.json: invalid JSON", ""},
    {"not_object", DRT_ERR_FORMAT, "none", -1, "tokenizer_config.json: expected a JSON object, got a list",
     "[\"<|im_start|>\"]"},
    {"missing_file", DRT_OK, "none", -1, "no tokenizer_config.json", NULL},
    {"a_directory", DRT_ERR_IO, "none", -1, "tokenizer_config.json: not a regular file", "<dir>"},
};

static void detect_table(void) {
    for (size_t i = 0; i < sizeof DETECT / sizeof DETECT[0]; i++) {
        const detect_case *c = &DETECT[i];
        char dir[1024], why[512];
        int is_dir = c->config && strcmp(c->config, "<dir>") == 0;
        make_dir(dir, sizeof dir, c->name, is_dir ? NULL : c->config);
        if (is_dir) {
            char p[1100];
            snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
            mkdir(p, 0755);
        }
        srv_chat_template t;
        memset(&t, 0x5a, sizeof t);
        drt_status st = srv_chat_detect(dir, &t, why, sizeof why);
        printf("  %-24s -> %-8s %s\n", c->name, st == DRT_OK ? t.name : "error", why);
        DRT_CHECK(st == c->status, "detect %s: status %d, want %d (%s)", c->name, st, c->status, why);
        DRT_CHECK(t.name && strcmp(t.name, c->kind) == 0, "detect %s: kind %s, want %s", c->name,
                  st == DRT_OK || st == c->status ? t.name : "?", c->kind);
        if (c->add_bos >= 0)
            DRT_CHECK(t.add_bos == c->add_bos, "detect %s: add_bos %d, want %d", c->name, t.add_bos, c->add_bos);
        if (c->why_has)
            DRT_CHECK(strstr(why, c->why_has), "detect %s: why \"%s\" lacks \"%s\"", c->name, why, c->why_has);
        if (st != DRT_OK)
            DRT_CHECK(strstr(why, dir), "detect %s: the error \"%s\" does not name the file", c->name, why);
    }

    /* over the size limit: a sparse file of 16 MiB + 1 byte */
    char dir[1024], why[512], p[1100];
    make_dir(dir, sizeof dir, "too_big", "{}");
    snprintf(p, sizeof p, "%s/tokenizer_config.json", dir);
    DRT_CHECK(truncate(p, (16 << 20) + 1) == 0, "truncate %s", p);
    srv_chat_template t;
    drt_status st = srv_chat_detect(dir, &t, why, sizeof why);
    printf("  %-24s -> %-8s %s\n", "too_big", st == DRT_OK ? t.name : "error", why);
    DRT_CHECK(st == DRT_ERR_IO && strstr(why, "16 MiB limit") && t.kind == SRV_CHAT_NONE, "detect too_big: %d %s", st,
              why);
    remove(p);
    /* the family's end of turn, whatever the file */
    make_dir(dir, sizeof dir, "eot", "{\"chat_template\": \"" LLAMA3_T "\"}");
    st = srv_chat_detect(dir, &t, why, sizeof why);
    DRT_CHECK(st == DRT_OK && t.end_of_turn && strcmp(t.end_of_turn, "<|eot_id|>") == 0 && !t.stop,
              "llama3 end_of_turn");
    /* a why buffer of one byte, or none */
    st = srv_chat_detect(dir, &t, why, 1);
    DRT_CHECK(st == DRT_OK && why[0] == '\0' && t.kind == SRV_CHAT_LLAMA3, "why_n 1");
    st = srv_chat_detect(dir, &t, NULL, 0);
    DRT_CHECK(st == DRT_OK && t.kind == SRV_CHAT_LLAMA3, "why NULL");
}

/* ---- names, plain, errors ------------------------------------------------ */

static void names(void) {
    static const struct {
        const char *name;
        srv_chat_kind kind;
        int add_bos;
        const char *eot, *stop;
    } N[] = {
        {"llama3", SRV_CHAT_LLAMA3, 0, "<|eot_id|>", NULL},
        {"llama3.1", SRV_CHAT_LLAMA31, 0, "<|eot_id|>", NULL},
        {"chatml", SRV_CHAT_CHATML, 1, "<|im_end|>", NULL},
        {"plain", SRV_CHAT_PLAIN, 1, NULL, "\nUser:"},
    };
    for (size_t i = 0; i < sizeof N / sizeof N[0]; i++) {
        srv_chat_template t;
        int r = srv_chat_by_name(N[i].name, &t);
        DRT_CHECK(r == 0 && t.kind == N[i].kind && strcmp(t.name, N[i].name) == 0 && t.add_bos == N[i].add_bos &&
                      (N[i].eot ? t.end_of_turn && strcmp(t.end_of_turn, N[i].eot) == 0 : !t.end_of_turn) &&
                      (N[i].stop ? t.stop && strcmp(t.stop, N[i].stop) == 0 : !t.stop),
                  "srv_chat_by_name(%s)", N[i].name);
    }
    srv_chat_template t;
    DRT_CHECK(srv_chat_by_name("none", &t) == -1, "\"none\" is not a template name");
    DRT_CHECK(srv_chat_by_name("Llama3", &t) == -1, "names are case-sensitive");
    DRT_CHECK(srv_chat_by_name("", &t) == -1 && srv_chat_by_name(NULL, &t) == -1, "empty name");
}

#define M(r, s)                                                                                                        \
    { SRV_ROLE_##r, (char *)(s), sizeof(s) - 1 }

static void plain(void) {
    static const srv_message one[] = {M(USER, "Hi there")};
    static const srv_message all[] = {M(SYSTEM, " Be brief. "), M(USER, "\nWhat is 2+2?\n"), M(ASSISTANT, "4"),
                                      M(USER, "and 3+3?")};
    static const srv_message empty[] = {M(USER, "  ")};
    static const struct {
        const char *name;
        const srv_message *m;
        int n;
        const char *want;
    } P[] = {
        {"one", one, 1, "User: Hi there\nAssistant:"},
        {"all", all, 4, "System: Be brief.\nUser: What is 2+2?\nAssistant: 4\nUser: and 3+3?\nAssistant:"},
        {"empty", empty, 1, "User: \nAssistant:"},
    };
    srv_chat_template t;
    srv_chat_by_name("plain", &t);
    for (size_t i = 0; i < sizeof P / sizeof P[0]; i++) {
        char *out = NULL;
        size_t len = 0;
        srv_error err = {0};
        int r = srv_chat_render(&t, P[i].m, P[i].n, &out, &len, &err);
        DRT_CHECK(r == 0 && len == strlen(P[i].want) && strcmp(out, P[i].want) == 0, "plain %s: \"%s\"", P[i].name,
                  out ? out : err.message);
        free(out);
    }
}

static void render_errors(void) {
    static const srv_message one[] = {M(USER, "Hi")};
    srv_chat_template none, t;
    char dir[1024];
    make_dir(dir, sizeof dir, "none_for_render", NULL);
    srv_chat_detect(dir, &none, NULL, 0);
    srv_chat_by_name("chatml", &t);
    char *out = (char *)1;
    size_t len = 7;
    srv_error err = {0};
    int r = srv_chat_render(&none, one, 1, &out, &len, &err);
    DRT_CHECK(r == -1 && err.status == 400 && !out && len == 0 && strstr(err.message, "no chat template") &&
                  strcmp(err.type, "invalid_request_error") == 0,
              "no template: rc %d status %d \"%s\"", r, err.status, err.message);
    r = srv_chat_render(NULL, one, 1, &out, &len, &err);
    DRT_CHECK(r == -1 && err.status == 400, "NULL template");
    r = srv_chat_render(&t, one, 0, &out, &len, &err);
    DRT_CHECK(r == -1 && err.status == 400 && strcmp(err.param, "messages") == 0, "no messages: %s", err.message);
    srv_message bad = {(srv_role)7, (char *)"x", 1};
    r = srv_chat_render(&t, &bad, 1, &out, &len, &err);
    DRT_CHECK(r == -1 && err.status == 400 && strstr(err.message, "messages[0]"), "unknown role: %s", err.message);
}

int main(void) {
    for (size_t i = 0; i < sizeof GOLDEN / sizeof GOLDEN[0]; i++) golden_file(GOLDEN[i]);
    detect_table();
    names();
    plain();
    render_errors();
    return drt_test_summary("test_serve_chat");
}
