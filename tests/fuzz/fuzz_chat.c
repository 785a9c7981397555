/* libFuzzer harness: diffrt serve's chat templates (serve/chat.c), the
 * detection from a tokenizer_config.json and the renderer.
 *
 * Input: byte 0 picks what is fuzzed. With bit 7 set, the rest is a
 * tokenizer_config.json, written to a scratch directory and detected
 * (srv_chat_detect): it detects or fails with a message, never crashes,
 * and a detected template renders a fixed conversation. Otherwise bits
 * 0-1 pick the template (llama3, llama3.1, chatml, plain) and the rest is
 * a conversation: records of one role byte (modulo 3) and a length byte,
 * then that many content bytes (made valid UTF-8 without NUL, as the
 * request parser leaves them). What must hold:
 *   - rendering succeeds, gives no NUL and is the same twice;
 *   - the plain ranges (where each message's content went) are in order,
 *     inside the text, and hold exactly that content (trimmed where the
 *     template trims), so the tokenizer reads no special token a user
 *     wrote and every special token the template wrote. */
#define _GNU_SOURCE /* memmem */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat.h"
#include "harness.h"
#include "request.h"

#define MAX_MSGS 32

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    return 0;
}

/* s[0..n) made valid UTF-8 without NUL: a byte that starts no valid
 * character becomes '?' */
static void make_text(char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        size_t k = 1;
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x80) {
            k = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 0;
            if (!k || i + k > n || !srv_utf8_ok(s + i, k)) k = 0;
        } else if (!c) {
            k = 0;
        }
        if (!k) {
            s[i++] = '?';
            continue;
        }
        i += k;
    }
}

static void render(const srv_chat_template *t, const srv_message *m, int n) {
    char *text = NULL, *again = NULL;
    size_t len = 0, len2 = 0, *plain = NULL;
    int n_plain = 0;
    srv_error e;
    int rc = srv_chat_render_spans(t, m, n, &text, &len, &plain, &n_plain, &e);
    FZ_CHECK(rc == 0, "%s: render failed: %s", t->name, e.message);
    FZ_CHECK(strlen(text) == len, "%s: a NUL in the rendered text", t->name);
    FZ_CHECK(srv_chat_render(t, m, n, &again, &len2, &e) == 0 && len2 == len && !memcmp(text, again, len),
             "%s: rendered twice, different", t->name);
    /* each range lies inside one message's content, in message order, past
     * the one before; chatml writes contents whole: one range per non-empty
     * message, the same bytes */
    size_t prev = 0;
    int j = 0;
    for (int k = 0; k < n_plain; k++) {
        size_t s0 = plain[2 * k], s1 = plain[2 * k + 1];
        FZ_CHECK(s0 >= prev && s0 < s1 && s1 <= len, "%s: range %d [%zu, %zu) out of order or place (len %zu)", t->name,
                 k, s0, s1, len);
        while (j < n && !memmem(m[j].content, m[j].len, text + s0, s1 - s0)) j++;
        FZ_CHECK(j < n, "%s: range %d holds no message's content, in order", t->name, k);
        if (t->kind == SRV_CHAT_CHATML) {
            while (j < n && !m[j].len) j++;
            FZ_CHECK(j < n && s1 - s0 == m[j].len && !memcmp(text + s0, m[j].content, m[j].len),
                     "chatml: range %d is not message %d whole", k, j);
        }
        j++;
        prev = s1;
    }
    if (t->kind == SRV_CHAT_CHATML) {
        int nonempty = 0;
        for (int i = 0; i < n; i++) nonempty += m[i].len > 0;
        FZ_CHECK(n_plain == nonempty, "chatml: %d ranges for %d contents", n_plain, nonempty);
    }
    free(text);
    free(again);
    free(plain);
}

static void detect(const uint8_t *data, size_t size) {
    char dir[512], path[600];
    fz_join(dir, sizeof dir, fz_tmpdir(), "chat");
    fz_join(path, sizeof path, dir, "tokenizer_config.json");
    static int made;
    if (!made) {
        char mk[700];
        snprintf(mk, sizeof mk, "mkdir -p '%s'", dir);
        FZ_CHECK(system(mk) == 0, "cannot make %s", dir);
        made = 1;
    }
    fz_write_file(path, data, size);
    srv_chat_template t;
    char why[256];
    drt_status st = srv_chat_detect(dir, &t, why, sizeof why);
    FZ_CHECK(st == DRT_OK || why[0], "detect failed (%d) without a reason", (int)st);
    if (st != DRT_OK || t.kind == SRV_CHAT_NONE) return;
    srv_message m[2] = {{SRV_ROLE_SYSTEM, "Be brief.", 9}, {SRV_ROLE_USER, "Hi <|eot_id|>", 13}};
    render(&t, m, 2);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    if (data[0] & 0x80) {
        detect(data + 1, size - 1);
        return 0;
    }
    static const char *const NAMES[] = {"llama3", "llama3.1", "chatml", "plain"};
    srv_chat_template t;
    FZ_CHECK(srv_chat_by_name(NAMES[data[0] & 3], &t) == 0, "no template %s", NAMES[data[0] & 3]);
    srv_message m[MAX_MSGS];
    int n = 0;
    size_t at = 1;
    while (at + 2 <= size && n < MAX_MSGS) {
        srv_role role = (srv_role)(data[at] % 3);
        size_t len = data[at + 1];
        at += 2;
        if (len > size - at) len = size - at;
        char *c = malloc(len + 1);
        FZ_CHECK(c, "out of memory");
        memcpy(c, data + at, len);
        c[len] = 0;
        make_text(c, len);
        m[n++] = (srv_message){role, c, len};
        at += len;
    }
    if (n) render(&t, m, n);
    for (int i = 0; i < n; i++) free(m[i].content);
    return 0;
}
