/* What every command shares (cli.h): the one-line messages and exit
 * statuses, --set and --kv-type turned into settings, a suffix test. */
#include <stdio.h>
#include <string.h>

#include "cli.h"
#include "diffrt/diffrt.h"

int cli_die(const char *fmt, const char *arg) {
    fprintf(stderr, "diffrt: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    return 2;
}

int cli_fail(const char *what) {
    fprintf(stderr, "diffrt: %s: %s\n", what, drt_last_error());
    return 1;
}

int cli_settings(const char *cmd, const char *spec, drt_settings **out) {
    *out = NULL;
    if (!spec) return 0;
    if (drt_settings_create(out) != DRT_OK) return cli_fail(cmd);
    char buf[1024];
    if (strlen(spec) >= sizeof buf) return cli_die("--set: longer than 1023 characters%s", "");
    memcpy(buf, spec, strlen(spec) + 1);
    for (char *item = buf, *next; item; item = next) {
        next = strchr(item, ',');
        if (next) *next++ = 0;
        char *eq = strchr(item, '=');
        char msg[1200];
        if (!eq || eq == item) {
            snprintf(msg, sizeof msg, "%s: --set wants NAME=VALUE[,NAME=VALUE...], got \"%.200s\"", cmd, spec);
            return cli_die("%s", msg);
        }
        *eq = 0;
        if (drt_settings_set(*out, item, eq + 1) != DRT_OK) {
            snprintf(msg, sizeof msg, "%s: --set: %s", cmd, drt_last_error());
            return cli_die("%s", msg);
        }
    }
    return 0;
}

int cli_kv_type(const char *cmd, const char *kv, drt_settings **set) {
    if (!kv) return 0;
    if (!*set && drt_settings_create(set) != DRT_OK) return cli_fail(cmd);
    if (drt_settings_set(*set, "kv_type", kv) != DRT_OK) {
        char msg[600];
        snprintf(msg, sizeof msg, "%s: --kv-type: %s", cmd, drt_last_error());
        return cli_die("%s", msg);
    }
    return 0;
}

int cli_ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), k = strlen(suffix);
    return n >= k && strcmp(s + n - k, suffix) == 0;
}
