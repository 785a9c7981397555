/* Every output of the diffrt command is checked (issue 25, class 2):
 *   - stdout: every command printing into /dev/full exits 1 with
 *     "diffrt: error writing standard output" (and 0 into /dev/null);
 *   - --json (niah, analyze, bench, conform) and --junit (conform): into
 *     /dev/full, into a missing directory, or cut short by a full disk
 *     (RLIMIT_FSIZE, SIGXFSZ ignored: writes fail with EFBIG) it is an error
 *     naming the file, the file that was there keeps its bytes and no temp
 *     file is left; conform's two reports are replaced together or not at all;
 *   - --json and --junit naming one file, however spelled: exit 2;
 *   - conform --json on a model folder whose name is not UTF-8: the file is
 *     valid UTF-8 and valid JSON, the bad bytes as U+FFFD. */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "drt_test.h"

#define M DRT_MODELS_DIR "/diff-v1-tiny"
static char S[1024]; /* the scratch folder */

/* sh -c cmd in S; its stdout (cmd redirects what it wants there) into out;
 * fsize > 0: RLIMIT_FSIZE in bytes, SIGXFSZ ignored (a disk that fills up) */
static int sh(const char *cmd, long fsize, char *out, size_t n) {
    int fd[2];
    if (pipe(fd) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        dup2(fd[1], 1);
        close(fd[0]);
        close(fd[1]);
        if (chdir(S) != 0) _exit(127);
        if (fsize > 0) {
            struct rlimit rl = {(rlim_t)fsize, (rlim_t)fsize};
            signal(SIGXFSZ, SIG_IGN);
            setrlimit(RLIMIT_FSIZE, &rl);
        }
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    close(fd[1]);
    size_t k = 0;
    ssize_t r;
    char chunk[4096];
    while ((r = read(fd[0], chunk, sizeof chunk)) > 0) /* all of it: the child never blocks on a full pipe */
        for (ssize_t j = 0; j < r && k + 1 < n; j++) out[k++] = chunk[j];
    out[k] = 0;
    close(fd[0]);
    int st;
    if (pid < 0 || waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void put(const char *name, const char *text) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", S, name);
    FILE *f = fopen(p, "w");
    DRT_CHECK(f && fputs(text, f) >= 0 && fclose(f) == 0, "cannot write %s", p);
}

/* the file's bytes, or "<missing>" */
static char *get(const char *name, char *buf, size_t n) {
    char p[2048];
    snprintf(p, sizeof p, "%s/%s", S, name);
    char *t = drt_test_read_file(p);
    snprintf(buf, n, "%s", t ? t : "<missing>");
    free(t);
    return buf;
}

/* names starting with '.' in S (temp files left behind), but . and .. */
static int dot_files(void) {
    DIR *d = opendir(S);
    int k = 0;
    struct dirent *e;
    while (d && (e = readdir(d)))
        if (e->d_name[0] == '.' && strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) k++;
    if (d) closedir(d);
    return k;
}

static const char *CMDS[] = {
    "info",
    "--version",
    "--help",
    "run --model " M " --backend cpu --tokens 1,2,3 -n 2",
    "run --model " M " --backend ref --prompt hello -n 2",
    "niah --model " M " --backend cpu --samples 1 --ctx 128 --depths 50",
    "conform --op ADD --backend ref",
    "analyze --model " M " --samples 1 --ctx 64 --depths 50",
    "bench --model " M " --backend ref -p 0 -n 2 -r 1 --peak-gbps 10 --peak-gflops 10",
    "quantize --help",
};

static void stdout_checked(void) {
    char cmd[4096], out[16384];
    for (size_t i = 0; i < sizeof CMDS / sizeof CMDS[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>&1", DRT_CLI_PATH, CMDS[i]);
        int rc = sh(cmd, 0, out, sizeof out);
        DRT_CHECK(rc == 0, "diffrt %s >/dev/null: exit %d, expected 0", CMDS[i], rc);
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1 >/dev/full", DRT_CLI_PATH, CMDS[i]);
        rc = sh(cmd, 0, out, sizeof out);
        DRT_CHECK(rc == 1 && strstr(out, "diffrt: error writing standard output"),
                  "diffrt %s >/dev/full: exit %d (expected 1), stderr should say \"error writing standard "
                  "output\":\n%s",
                  CMDS[i], rc, out);
    }
}

/* a command that writes FILE (its last argument) */
static const struct {
    const char *cmd, *file; /* "%s" in cmd: the file */
    const char *ok_marker;  /* in the file when written */
} WRITERS[] = {
    {"niah --model " M " --backend cpu --samples 1 --ctx 128 --depths 50 --json %s", "niah.json", "\"summary\""},
    {"analyze --model " M " --samples 1 --ctx 64 --depths 50 --json %s", "analyze.json", "\"hidden_states\""},
    {"bench --model " M " --backend ref -p 0 -n 2 -r 1 --peak-gbps 10 --peak-gflops 10 --json %s", "bench.json",
     "\"schema_version\""},
    {"conform --op ADD --backend ref --json %s", "conform.json", "\"summary\""},
    {"conform --op ADD --backend ref --junit %s", "conform.xml", "<testsuites"},
};

static void files_checked(void) {
    char cmd[4096], args[2048], out[16384], buf[65536];
    for (size_t i = 0; i < sizeof WRITERS / sizeof WRITERS[0]; i++) {
        const char *w = WRITERS[i].cmd, *file = WRITERS[i].file;
        int conform = strncmp(w, "conform", 7) == 0;
        /* written: the control, so that the failures below are the file's;
         * over a file of mode 0600, which keeps its mode */
        char p[2048];
        snprintf(p, sizeof p, "%s/%s", S, file);
        put(file, "old bytes\n");
        chmod(p, 0600);
        snprintf(args, sizeof args, w, file);
        snprintf(cmd, sizeof cmd, "'%s' %s >/dev/null 2>&1", DRT_CLI_PATH, args);
        int rc = sh(cmd, 0, out, sizeof out);
        get(file, buf, sizeof buf);
        DRT_CHECK(rc == 0 && strstr(buf, WRITERS[i].ok_marker), "diffrt %s: exit %d, %s lacks %s", args, rc, file,
                  WRITERS[i].ok_marker);
        struct stat sb;
        DRT_CHECK(stat(p, &sb) == 0 && (sb.st_mode & 0777) == 0600, "diffrt %s: %s's mode 0600 became %o", args, file,
                  (unsigned)(sb.st_mode & 0777));
        DRT_CHECK(dot_files() == 0, "diffrt %s: %d temp files left", args, dot_files());

        /* /dev/full */
        snprintf(args, sizeof args, w, "/dev/full");
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1 >/dev/null", DRT_CLI_PATH, args);
        rc = sh(cmd, 0, out, sizeof out);
        DRT_CHECK(rc == 1 && strstr(out, "/dev/full: ") && strstr(out, "cannot write") &&
                      strstr(out, "No space left on device"),
                  "diffrt %s: exit %d (expected 1), stderr should say \"cannot write /dev/full\":\n%s", args, rc, out);

        /* a folder that is not there: conform checks its outputs before any
         * work (a bad argument, 2), the others when they write (1) */
        snprintf(args, sizeof args, w, "nodir/x.out");
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1 >/dev/null", DRT_CLI_PATH, args);
        rc = sh(cmd, 0, out, sizeof out);
        DRT_CHECK(rc == (conform ? 2 : 1) && strstr(out, "nodir/x.out") && strstr(out, "No such file or directory"),
                  "diffrt %s: exit %d (expected %d), stderr should name nodir/x.out:\n%s", args, rc, conform ? 2 : 1,
                  out);

        /* the disk fills up during the write: the old file keeps its bytes */
        put(file, "old bytes\n");
        snprintf(args, sizeof args, w, file);
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1 >/dev/null", DRT_CLI_PATH, args);
        rc = sh(cmd, 100, out, sizeof out);
        DRT_CHECK(rc == 1 && strstr(out, file) && strstr(out, "cannot write"),
                  "diffrt %s with a 100-byte file size limit: exit %d (expected 1), stderr should name %s:\n%s", args,
                  rc, file, out);
        DRT_CHECK(strcmp(get(file, buf, sizeof buf), "old bytes\n") == 0,
                  "diffrt %s failed to write, yet %s changed: now\n%.300s", args, file, buf);
        DRT_CHECK(dot_files() == 0, "diffrt %s failed: %d temp files left", args, dot_files());
    }
}

/* conform's two reports: one failing replaces neither, and deletes nothing */
static void conform_pair(void) {
    char cmd[4096], out[16384], buf[4096];
    static const struct {
        const char *args;
        int rc;
        const char *must_say;
    } C[] = {
        {"--json keep.json --junit /dev/full", 1, "/dev/full: cannot write"},
        {"--json keep.json --junit nodir/r.xml", 2, "--junit: nodir/r.xml: cannot write"},
        {"--json /dev/full --junit keep.xml", 1, "/dev/full: cannot write"},
        {"--json nodir/r.json --junit keep.xml", 2, "--json: nodir/r.json: cannot write"},
        /* the same file, however spelled */
        {"--json keep.json --junit keep.json", 2, "name the same file"},
        {"--json keep.json --junit ./keep.json", 2, "name the same file"},
        {"--json new.json --junit ../outputs.tmp/new.json", 2, "name the same file"},
        {"--json new.json --junit .//new.json", 2, "name the same file"},
    };
    for (size_t i = 0; i < sizeof C / sizeof C[0]; i++) {
        put("keep.json", "old json\n");
        put("keep.xml", "old xml\n");
        snprintf(cmd, sizeof cmd, "'%s' conform --op ADD --backend ref %s 2>&1 >/dev/null", DRT_CLI_PATH, C[i].args);
        int rc = sh(cmd, 0, out, sizeof out);
        DRT_CHECK(rc == C[i].rc && strstr(out, C[i].must_say),
                  "diffrt conform %s: exit %d (expected %d), should say \"%s\":\n%s", C[i].args, rc, C[i].rc,
                  C[i].must_say, out);
        DRT_CHECK(strcmp(get("keep.json", buf, sizeof buf), "old json\n") == 0,
                  "diffrt conform %s: keep.json changed: now %.200s", C[i].args, buf);
        DRT_CHECK(strcmp(get("keep.xml", buf, sizeof buf), "old xml\n") == 0,
                  "diffrt conform %s: keep.xml changed: now %.200s", C[i].args, buf);
        DRT_CHECK(strcmp(get("new.json", buf, sizeof buf), "<missing>") == 0, "diffrt conform %s wrote new.json",
                  C[i].args);
        DRT_CHECK(dot_files() == 0, "diffrt conform %s: %d temp files left", C[i].args, dot_files());
    }
}

/* strict UTF-8 (RFC 3629): no overlong forms, surrogates or code points
 * past U+10FFFF; the offset of the first bad byte, or -1 */
static long utf8_bad(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80                 ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (!k || i + k > n) return (long)i;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return (long)i;
        if ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] > 0x9F) || (c == 0xF0 && s[i + 1] < 0x90) ||
            (c == 0xF4 && s[i + 1] > 0x8F))
            return (long)i;
        i += k;
    }
    return -1;
}

static void utf8_names(void) {
    char cmd[4096], out[16384], p[2048];
    /* a model whose folder name is "m" 0xFF 0xFE "x", and a folder "n" C3 28
     * (a cut sequence) that is not a model */
    snprintf(cmd, sizeof cmd,
             "mkdir -p ms/'m\377\376x' ms/'n\303(' && cp '%s/config.json' '%s/model.safetensors' ms/'m\377\376x'/", M,
             M);
    int rc = sh(cmd, 0, out, sizeof out);
    DRT_CHECK(rc == 0, "cannot make the model folder: %s", out);
    snprintf(cmd, sizeof cmd, "'%s' conform --op none --backend ref --models ms --json u.json 2>&1", DRT_CLI_PATH);
    rc = sh(cmd, 0, out, sizeof out);
    DRT_CHECK(rc == 0, "diffrt conform --models ms: exit %d:\n%s", rc, out);
    snprintf(p, sizeof p, "%s/u.json", S);
    char *js = drt_test_read_file(p);
    DRT_CHECK(js != NULL, "no u.json");
    if (!js) return;
    long bad = utf8_bad((const unsigned char *)js, strlen(js));
    DRT_CHECK(bad < 0, "u.json is not UTF-8 at byte %ld: ...%.40s", bad, js + (bad > 20 ? bad - 20 : 0));
    cJSON *root = cJSON_Parse(js);
    DRT_CHECK(root != NULL, "u.json does not parse");
    int model = 0, skipped = 0;
    cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "cases")) {
        const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(c, "model"));
        const char *kind = cJSON_GetStringValue(cJSON_GetObjectItem(c, "kind"));
        if (m && kind && !strcmp(kind, "model") && strcmp(m, "m\xEF\xBF\xBD\xEF\xBF\xBDx") == 0) model++;
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(root, "models_skipped")) {
        const char *m = cJSON_GetStringValue(cJSON_GetObjectItem(c, "path"));
        if (m && strcmp(m, "ms/n\xEF\xBF\xBD(") == 0) skipped++;
    }
    DRT_CHECK(model == 1 && skipped == 1,
              "u.json: %d cases of model \"m\\ufffd\\ufffdx\" (expected 1), %d skipped \"ms/n\\ufffd(\" (expected 1)",
              model, skipped);
    cJSON_Delete(root);
    free(js);
}

int main(void) {
    snprintf(S, sizeof S, "%s/outputs.tmp", DRT_TMP_DIR);
    char cmd[4096], out[1024];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", S, S);
    if (system(cmd) != 0) return 1;
    stdout_checked();
    files_checked();
    conform_pair();
    utf8_names();
    if (drt_test_failures == 0) {
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", S);
        DRT_CHECK(sh(cmd, 0, out, sizeof out) == 0, "cannot remove %s", S);
    }
    return drt_test_summary("test_outputs");
}
