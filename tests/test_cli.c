/* The diffrt command, run as a user runs it:
 *   - `diffrt run --temp 0` on every fixture prints the source
 *     implementation's 32 greedy tokens;
 *   - bad arguments exit 2 with one line on stderr; a bad model exits 1;
 *   - info lists every backend, the model summary and the settings, each
 *     block once;
 *   - `diffrt niah --compare` on the bundled diff-v1 model: agrees with its
 *     own --json output, and reports (exit 1) a tampered answer. */
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "drt_graph.h"
#include "drt_test.h"
#include "ref_ops.h"
#include "safetensors.h"
#include "diffrt/tokenizer.h"

/* runs cmd, captures stdout (and stderr when merged by the caller) */
static int run(const char *cmd, char *out, size_t n) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t k = fread(out, 1, n - 1, p);
    out[k] = 0;
    int st = pclose(p);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void greedy_fixture(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/%s/expected.safetensors", DRT_FIXTURES_DIR, name);
    drt_st_file ex;
    if (drt_st_open(path, &ex) != DRT_OK) return;
    const drt_st_tensor *tok = drt_st_find(&ex, "tokens"), *gr = drt_st_find(&ex, "greedy");
    if (!tok || !gr) {
        DRT_CHECK(0, "%s: no tokens/greedy", name);
        drt_st_close(&ex);
        return;
    }
    char cmd[4096], want[1024] = "", out[8192];
    int o = snprintf(cmd, sizeof cmd, "'%s' run --model '%s/%s' --temp 0 --no-stop -n %lld --tokens ", DRT_CLI_PATH,
                     DRT_FIXTURES_DIR, name, (long long)gr->shape[0]);
    for (int i = 0; i < tok->shape[0]; i++)
        o += snprintf(cmd + o, sizeof cmd - (size_t)o, i ? ",%d" : "%d", ((const int32_t *)tok->data)[i]);
    snprintf(cmd + o, sizeof cmd - (size_t)o, " 2>/dev/null");
    size_t w = 0;
    for (int i = 0; i < gr->shape[0]; i++)
        w += (size_t)snprintf(want + w, sizeof want - w, i ? ",%d" : "%d", ((const int32_t *)gr->data)[i]);
    snprintf(want + w, sizeof want - w, "\n");
    int rc = run(cmd, out, sizeof out);
    DRT_CHECK(rc == 0, "%s: diffrt run exited %d", name, rc);
    DRT_CHECK(strcmp(out, want) == 0, "%s: diffrt run printed\n  %s  expected\n  %s", name, out, want);
    drt_st_close(&ex);
}

/* Text in, text out on a V = 256 fixture with the 256-byte tokenizer next to
 * it: --prompt and --prompt-file - print the same text, and that text is the
 * decode of the ids that --tokens (with the prompt's ids) prints. */
static void text_mode(void) {
    const char *prompt = "Hello, w\xc3\xb6rld \xe4\xb8\xad";
    char dir[1024], cmd[4096], a[8192], b[8192], ids_out[8192];
    snprintf(dir, sizeof dir, "%s/cli_text_model", DRT_TMP_DIR);
    snprintf(cmd, sizeof cmd,
             "mkdir -p '%s' && cp '%s/hf_llama_gqa/config.json' "
             "'%s/hf_llama_gqa/model.safetensors' '%s' && "
             "cp '%s/../tokenizer/bytes256.json' '%s/tokenizer.json'",
             dir, DRT_FIXTURES_DIR, DRT_FIXTURES_DIR, dir, DRT_FIXTURES_DIR, dir);
    DRT_CHECK(system(cmd) == 0, "cannot make %s", dir);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --prompt '%s' -n 24 --no-stop 2>/dev/null", DRT_CLI_PATH, dir,
             prompt);
    DRT_CHECK(run(cmd, a, sizeof a) == 0 && strlen(a) > 1, "run --prompt failed: %s", a);
    snprintf(cmd, sizeof cmd,
             "printf '%%s' '%s' | '%s' run --model '%s' --prompt-file - -n 24 --no-stop "
             "2>/dev/null",
             prompt, DRT_CLI_PATH, dir);
    DRT_CHECK(run(cmd, b, sizeof b) == 0 && strcmp(a, b) == 0, "--prompt-file - printed\n%s\nnot\n%s", b, a);

    drt_tokenizer *t;
    char tpath[1100];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", dir);
    if (drt_tokenizer_load(tpath, &t) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    int32_t *ids, gen[64];
    int n, k = 0;
    drt_tokenizer_encode(t, prompt, strlen(prompt), 1, &ids, &n);
    int o = snprintf(cmd, sizeof cmd, "'%s' run --model '%s' -n 24 --no-stop --tokens ", DRT_CLI_PATH, dir);
    for (int i = 0; i < n; i++) o += snprintf(cmd + o, sizeof cmd - (size_t)o, i ? ",%d" : "%d", ids[i]);
    snprintf(cmd + o, sizeof cmd - (size_t)o, " 2>/dev/null");
    DRT_CHECK(run(cmd, ids_out, sizeof ids_out) == 0, "run --tokens failed");
    for (char *p = ids_out, *end; k < 64; p = end + 1) {
        long v = strtol(p, &end, 10);
        if (end == p) break;
        gen[k++] = (int32_t)v;
        if (*end != ',') break;
    }
    char *want;
    size_t wn;
    drt_tokenizer_decode(t, gen, k, 1, &want, &wn);
    /* the text output ends with a newline added when the text has none */
    size_t an = strlen(a);
    DRT_CHECK(k == 24 && strncmp(a, want, wn) == 0 && an == wn + (wn && want[wn - 1] == '\n' ? 0 : 1),
              "text output\n%s\nis not the decode of %s (\"%s\")", a, ids_out, want);
    free(want);
    free(ids);
    drt_tokenizer_free(t);
}

/* niah --compare: a run agrees with its own --json output; changing one
 * predicted answer of a 5-sample file drops agreement to 0.8, which fails
 * --min-agree 0.99 (exit 1) and passes --min-agree 0.8; wrong settings,
 * samples missing from the file, and unreadable files are errors (exit 2). */
static void niah_compare(void) {
    const char *m = DRT_MODELS_DIR "/diff-v1-tiny";
    char ref[1100], bad[1100], cmd[4096], out[16384];
    snprintf(ref, sizeof ref, "%s/niah_self.json", DRT_TMP_DIR);
    snprintf(bad, sizeof bad, "%s/niah_tampered.json", DRT_TMP_DIR);
    snprintf(cmd, sizeof cmd, "'%s' niah --model %s --samples 1 --json '%s' 2>&1", DRT_CLI_PATH, m, ref);
    int rc = run(cmd, out, sizeof out);
    DRT_CHECK(rc == 0 && strstr(out, "overall"), "niah --json: exit %d:\n%s", rc, out);

    FILE *f = fopen(ref, "rb");
    char *txt = calloc(1, 1 << 20);
    if (f) {
        size_t n = fread(txt, 1, (1 << 20) - 1, f);
        txt[n] = 0;
        fclose(f);
    }
    cJSON *root = cJSON_Parse(txt), *arr = cJSON_GetObjectItem(root, "samples");
    free(txt);
    DRT_CHECK(cJSON_GetArraySize(arr) == 5, "niah --json wrote %d records, expected 5", cJSON_GetArraySize(arr));
    cJSON *p = cJSON_GetObjectItem(cJSON_GetArrayItem(arr, 2), "predicted");
    if (p) cJSON_SetValuestring(p, strcmp(p->valuestring, "1") ? "1" : "2");
    char *o = cJSON_Print(root);
    f = fopen(bad, "wb");
    if (f && o) fputs(o, f);
    if (f) fclose(f);
    free(o);
    cJSON_Delete(root);

    struct {
        const char *args, *file;
        int want_rc;
        const char *must_say;
    } cases[] = {
        {"--samples 1", ref, 0, "answers 5/5 (1.000)"},
        {"--samples 1", bad, 1, "below --min-agree"},
        {"--samples 1 --min-agree 0.8", bad, 0, "answers 4/5 (0.800)"},
        {"--samples 1 --needles 2", ref, 2, "other settings"},
        {"--samples 2", ref, 2, "has no sample"},
        {"--samples 1", "/nonexistent.json", 2, "cannot read"},
        {"--samples 1", DRT_FIXTURES_DIR "/hf_llama_gqa/config.json", 2, "not a niah result"},
        {"--samples 1 --min-agree 1.5", ref, 2, "--min-agree wants"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        snprintf(cmd, sizeof cmd, "'%s' niah --model %s %s --compare '%s' 2>&1", DRT_CLI_PATH, m, cases[i].args,
                 cases[i].file);
        rc = run(cmd, out, sizeof out);
        DRT_CHECK(rc == cases[i].want_rc && strstr(out, cases[i].must_say),
                  "diffrt niah %s --compare %s: exit %d (expected %d), output should say \"%s\":\n%s", cases[i].args,
                  cases[i].file, rc, cases[i].want_rc, cases[i].must_say, out);
    }
}

typedef struct {
    const char *args;
    int want_rc;
    const char *must_say;
} cli_case;

/* Every command's argument loop, with its last argument alone: an unknown
 * option there is "unknown argument" (not "needs a value"), and each option
 * that takes a value says it needs one. Exit 2, one line. */
static void last_argument(void) {
    static const struct {
        const char *cmd, *value_opts;
    } cmds[] = {
        {"run", "--model --tokens --prompt --prompt-file --backend --device -n --ctx --threads --top-k --seed --temp "
                "--top-p --set"},
        {"niah", "--model --backend --device --threads --json --compare --logits-vs --attn-bits --min-accuracy "
                 "--min-agree --needles --queries --samples --seed --ctx --depths --set"},
        {"conform", "--backend --op --require --device --models --json --junit --repeats --warmup --set"},
        {"bench", "--model --backend --device --json -p -n -r --threads --peak-gbps --peak-gflops --set"},
        {"report", "--out"},
        {"quantize", "--model --type --out"},
        {"analyze", "--model --json --samples --seed --ctx --depths --set"},
        {"info", "--model --backend --set"},
    };
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++) {
        char cmd[1024], out[4096], want[256], after[128];
        /* unknown, alone and after the first option with a value */
        snprintf(after, sizeof after, "%.*s v --bogus", (int)strcspn(cmds[c].value_opts, " "), cmds[c].value_opts);
        const char *bogus[2] = {"--bogus", after};
        for (int b = 0; b < 2; b++) {
            snprintf(cmd, sizeof cmd, "'%s' %s %s 2>&1", DRT_CLI_PATH, cmds[c].cmd, bogus[b]);
            int rc = run(cmd, out, sizeof out);
            DRT_CHECK(rc == 2 && strstr(out, "unknown argument \"--bogus\"") && !strstr(out, "needs a value") &&
                          strchr(out, '\n') == out + strlen(out) - 1,
                      "diffrt %s %s: exit %d (want 2), should say unknown argument \"--bogus\" in one line:\n%s",
                      cmds[c].cmd, bogus[b], rc, out);
        }
        char opts[512];
        snprintf(opts, sizeof opts, "%s", cmds[c].value_opts);
        for (char *o = strtok(opts, " "); o; o = strtok(NULL, " ")) {
            snprintf(cmd, sizeof cmd, "'%s' %s %s 2>&1", DRT_CLI_PATH, cmds[c].cmd, o);
            snprintf(want, sizeof want, "%s: %s needs a value", cmds[c].cmd, o);
            int rc = run(cmd, out, sizeof out);
            DRT_CHECK(rc == 2 && strstr(out, want), "diffrt %s %s: exit %d (want 2), should say \"%s\":\n%s",
                      cmds[c].cmd, o, rc, want, out);
        }
    }
}

/* Every command's --help comes from its option table (cli/opts.c): the usage
 * line, then a line per option; each option the command takes is listed
 * there, at the start of its line ("  --name" or "  -x, --name"). */
static void help_lists_options(void) {
    static const struct {
        const char *cmd, *opts;
    } cmds[] = {
        {"run", "--model --tokens --prompt --prompt-file -n --backend --threads --device --set --ctx --temp --top-k "
                "--top-p --seed --no-stop -v,_--verbose -h,_--help"},
        {"niah", "--model --needles --queries --ctx --depths --samples --seed --backend --device --threads --set "
                 "--attention --json --compare --min-accuracy --min-agree --no-fallback --logits-vs --attn-bits "
                 "-h,_--help"},
        {"conform", "--backend --require --op --device --set --models --json --junit --list --perf --repeats "
                    "--warmup -h,_--help"},
        {"bench", "--model --backend -p -n -r --device --threads --set --peak-gbps --peak-gflops --json --csv --md "
                  "-h,_--help"},
        {"report", "--out --force -h,_--help"},
        {"quantize", "--model --type --out --force -h,_--help"},
        {"analyze", "--model --samples --depths --seed --ctx --json --set -h,_--help"},
        {"info", "--model --backend --set -h,_--help"},
    };
    for (size_t c = 0; c < sizeof cmds / sizeof cmds[0]; c++)
        for (int h = 0; h < 2; h++) {
            char cmd[1024], out[16384], want[128], opts[512];
            snprintf(cmd, sizeof cmd, "'%s' %s %s 2>/dev/null", DRT_CLI_PATH, cmds[c].cmd, h ? "-h" : "--help");
            int rc = run(cmd, out, sizeof out);
            snprintf(want, sizeof want, "usage: diffrt %s ", cmds[c].cmd);
            DRT_CHECK(rc == 0 && strncmp(out, want, strlen(want)) == 0,
                      "diffrt %s %s: exit %d (want 0), stdout should start with \"%s\":\n%s", cmds[c].cmd,
                      h ? "-h" : "--help", rc, want, out);
            snprintf(opts, sizeof opts, "%s", cmds[c].opts);
            for (char *o = strtok(opts, " "); o; o = strtok(NULL, " ")) {
                for (char *u = o; *u; u++)
                    if (*u == '_') *u = ' ';
                char line[96];
                snprintf(line, sizeof line, "\n  %s", o);
                const char *at = strstr(out, line);
                char next = at ? at[strlen(line)] : 0;
                DRT_CHECK(at && (next == ' ' || next == '\n'), "diffrt %s --help: no line for option \"%s\":\n%s",
                          cmds[c].cmd, o, out);
            }
        }
}

/* docs/cli.md shows `diffrt --help` and each command's --help as the
 * binary prints them: the option tables are the one source, and the page
 * must not drift from them. `diffrt --help` is the commands' table: a line
 * per command, and no command's options. */
static void help_matches_docs(void) {
    char *doc = NULL;
    if (drt_read_text_file(DRT_FIXTURES_DIR "/../../docs/cli.md", &doc, NULL) != DRT_OK) {
        DRT_CHECK(0, "docs/cli.md: %s", drt_last_error());
        return;
    }
    static const char *cmds[] = {"info",   "run",      "conform", "niah",  "bench",
                                 "report", "quantize", "analyze", "serve", "--help"};
    const size_t n_cmds = sizeof cmds / sizeof cmds[0];
    char top[16384], cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' --help 2>/dev/null", DRT_CLI_PATH);
    int top_rc = run(cmd, top, sizeof top);
    DRT_CHECK(top_rc == 0 && !strstr(top, "\n  --"), "diffrt --help: exit %d, should list commands, not options:\n%s",
              top_rc, top);
    for (size_t c = 0; c + 1 < n_cmds; c++) {
        char line[64];
        snprintf(line, sizeof line, "\n  %s ", cmds[c]);
        DRT_CHECK(strstr(top, line) != NULL, "diffrt --help: no line for the command %s:\n%s", cmds[c], top);
    }
    for (size_t c = 0; c < n_cmds; c++) {
        char head[64], out[16384];
        snprintf(head, sizeof head, "### diffrt %s\n\n```\n", cmds[c]);
        const char *at = strstr(doc, head);
        const char *end = at ? strstr(at + strlen(head), "```") : NULL;
        const char *name = strcmp(cmds[c], "--help") ? cmds[c] : "";
        snprintf(cmd, sizeof cmd, "'%s' %s --help 2>/dev/null", DRT_CLI_PATH, name);
        int rc = run(cmd, out, sizeof out);
        size_t n = at && end ? (size_t)(end - at - strlen(head)) : 0;
        DRT_CHECK(rc == 0 && at && end && n == strlen(out) && memcmp(at + strlen(head), out, n) == 0,
                  "docs/cli.md: the section \"### diffrt %s\" should hold `diffrt %s%s--help` as it prints:\n%s",
                  cmds[c], name, *name ? " " : "", out);
    }
    free(doc);
}

/* diffrt info prints each block once: the backends, the model (with
 * --model), the settings in force, and (with --backend) the fallback line;
 * --backend without --model is a usage error before any output. */
static void info_blocks_once(void) {
    static const struct {
        const char *args;
        int model, fallback;
    } cases[] = {
        {"info", 0, 0},
        {"info --model " DRT_MODELS_DIR "/diff-v1-tiny", 1, 0},
        {"info --model " DRT_MODELS_DIR "/diff-v1-tiny --backend cpu --set cpu.threads=1", 1, 1},
    };
    static const char *heads[] = {"backends\n", "\nmodel ", "\nsettings (", "\nbackend cpu: prefill"};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[2048], out[16384];
        snprintf(cmd, sizeof cmd, "'%s' %s 2>/dev/null", DRT_CLI_PATH, cases[i].args);
        int rc = run(cmd, out, sizeof out);
        const int want[4] = {1, cases[i].model, 1, cases[i].fallback};
        for (int h = 0; h < 4; h++) {
            int n = 0;
            for (const char *p = strstr(out, heads[h]); p; p = strstr(p + 1, heads[h])) n++;
            DRT_CHECK(rc == 0 && n == want[h], "diffrt %s: exit %d, \"%s\" %d times (want %d):\n%s", cases[i].args, rc,
                      heads[h], n, want[h], out);
        }
    }
    char cmd[1024], out[4096];
    snprintf(cmd, sizeof cmd, "'%s' info --backend cpu 2>&1", DRT_CLI_PATH);
    int rc = run(cmd, out, sizeof out);
    DRT_CHECK(rc == 2 && strcmp(out, "diffrt: info: --backend needs --model DIR\n") == 0,
              "diffrt info --backend cpu: exit %d (want 2), want one line:\n%s", rc, out);
}

/* The option parser on hostile and odd arguments: exit status and the one
 * line it prints. */
static void option_parser(void) {
#define GQA DRT_FIXTURES_DIR "/hf_llama_gqa"
    static const cli_case cases[] = {
        /* unknown: names the command's own --help; --opt=value is not a form the parser takes */
        {"run --bogus", 2, "diffrt: run: unknown argument \"--bogus\" (see diffrt run --help)"},
        {"niah --model x -q", 2, "diffrt: niah: unknown argument \"-q\" (see diffrt niah --help)"},
        {"run --model " GQA " --tokens 1 --ctx=8", 2, "unknown argument \"--ctx=8\""},
        {"info --verbose", 2, "diffrt: info: unknown argument \"--verbose\" (see diffrt info --help)"},
        {"report a.json stray-arg --out", 2, "diffrt: report: --out needs a value (see diffrt report --help)"},
        {"report --out d -x", 2, "diffrt: report: unknown argument \"-x\""},
        /* a missing value */
        {"conform --list --repeats", 2, "diffrt: conform: --repeats needs a value (see diffrt conform --help)"},
        {"analyze --model", 2, "diffrt: analyze: --model needs a value (see diffrt analyze --help)"},
        /* bad values: the option's own wording, then the value */
        {"run --model " GQA " --tokens 1 --ctx 0", 2,
         "diffrt: run: --ctx wants an integer in [1, 16777216], got \"0\""},
        {"run --model " GQA " --tokens 1 --threads 1025", 2,
         "run: --threads wants an integer in [1, 1024], got \"1025\""},
        {"run --model " GQA " --tokens 1 -n -1", 2, "run: -n wants an integer >= 0, got \"-1\""},
        {"run --model " GQA " --tokens 1 --temp inf", 2, "run: --temp wants a finite number >= 0, got \"inf\""},
        {"run --model " GQA " --tokens 1 --top-p nan", 2, "run: --top-p wants a number in (0, 1], got \"nan\""},
        {"run --model " GQA " --tokens 1 --top-k 1x", 2, "run: --top-k wants an integer >= 0, got \"1x\""},
        {"run --model " GQA " --tokens 1 --seed 99999999999999999999", 2, "run: --seed wants an integer >= 0"},
        {"niah --model x --seed -1", 2, "niah: --seed wants an integer >= 0, got \"-1\""},
        {"niah --model x --needles 65", 2, "niah: --needles wants 1..64, got \"65\""},
        {"niah --model x --samples 4294967297", 2, "niah: --samples wants an integer >= 1, got \"4294967297\""},
        {"niah --model x --min-agree 1.5", 2, "niah: --min-agree wants a fraction 0..1, got \"1.5\""},
        {"niah --model x --min-accuracy -0.1", 2, "niah: --min-accuracy wants a fraction 0..1, got \"-0.1\""},
        {"niah --model x --attn-bits 25", 2, "niah: --attn-bits wants 2..24, got \"25\""},
        {"niah --model x --ctx 128,", 2, "niah: --ctx wants comma-separated lengths, got \"128,\""},
        {"niah --model x --depths 0,101", 2, "niah: --depths wants comma-separated percents 0..100, got \"0,101\""},
        {"conform --warmup -1", 2, "conform: --warmup wants an integer >= 0, got \"-1\""},
        {"bench --peak-gbps 0", 2, "bench: --peak-gbps wants a number > 0, got \"0\""},
        {"bench -r 1001", 2, "bench: -r wants an integer in [1, 1000], got \"1001\""},
        {"analyze --ctx 15", 2, "analyze: --ctx wants 16..1048576, got \"15\""},
        {"analyze --depths ,", 2, "analyze: --depths wants percents 0..100, got \",\""},
        /* repeated: a flag twice is the flag; a value option takes its last value */
        {"run --model /nonexistent --model " GQA " --tokens 1,2 -n 1 -v --verbose", 0, "node runs fell back"},
        {"run --model " GQA " --tokens 1,2 -n 1 --ctx 1 --ctx 8 --no-stop --no-stop", 0, "prefill: 2 tokens"},
        {"bench --csv --csv --backend cpu", 2, "bench: --model DIR is required"},
        {"bench --csv --md", 2, "bench: give one of --csv and --md"},
        {"quantize --force --force --model x", 2,
         "quantize: --model DIR, --type q8_0|q4_0 and --out DIR2 are required"},
        /* a value that looks like an option is the value */
        {"run --model --tokens --tokens 1", 1, "--tokens/config.json"},
    };
#undef GQA
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[2048], out[8192];
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", DRT_CLI_PATH, cases[i].args);
        int rc = run(cmd, out, sizeof out);
        DRT_CHECK(rc == cases[i].want_rc && strstr(out, cases[i].must_say),
                  "diffrt %s: exit %d (want %d), output should say \"%s\":\n%s", cases[i].args, rc, cases[i].want_rc,
                  cases[i].must_say, out);
        if (cases[i].want_rc == 2)
            DRT_CHECK(strchr(out, '\n') == out + strlen(out) - 1, "diffrt %s: want one line:\n%s", cases[i].args, out);
    }
}

/* The reference backend's allocation failure names "ref" (it said "cpu"):
 * a 16M-position KV cache under a 1 GiB address-space limit. Not under the
 * sanitizers (their shadow memory needs far more address space). */
static void ref_oom_names_ref(void) {
#ifndef DIFFRT_SANITIZE_BUILD
    char cmd[2048], out[8192];
    snprintf(cmd, sizeof cmd,
             "ulimit -v 1048576 && '%s' run --model '%s/diff-v2-tiny' --backend ref --tokens 1,2 -n 1 "
             "--ctx 16000000 2>&1",
             DRT_CLI_PATH, DRT_MODELS_DIR);
    int rc = run(cmd, out, sizeof out);
    DRT_CHECK(rc == 1 && strstr(out, "diffrt: run: ref: cannot allocate") && !strstr(out, "cpu"),
              "diffrt run --backend ref out of memory: exit %d (want 1), should say \"ref: cannot allocate\":\n%s", rc,
              out);

    /* an ATTN node over 2^28 key positions: its scratch row (2 GiB of doubles)
     * fails under an address-space limit 512 MiB above what the child uses,
     * before any input is read; the node's error names ref and the node */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        long pages = 0;
        FILE *f = fopen("/proc/self/statm", "r");
        if (!f || fscanf(f, "%ld", &pages) != 1) _exit(3);
        fclose(f);
        rlim_t cap = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + (512ull << 20);
        struct rlimit rl = {cap, cap};
        if (setrlimit(RLIMIT_AS, &rl) != 0) _exit(3);
        drt_tensor q = {0}, k = {0}, v = {0}, node = {0};
        q.nd = k.nd = v.nd = node.nd = 3;
        q.ne[0] = q.ne[1] = q.ne[2] = 1; /* T, H, dk */
        k.ne[0] = k.ne[1] = k.ne[2] = 1; /* (S, G, dk): only G is read */
        v.ne[0] = v.ne[1] = v.ne[2] = 1; /* (S, G, dv): only dv is read */
        node.op = DRT_OP_ATTN;
        node.src[0] = &q;
        node.src[1] = &k;
        node.src[2] = &v;
        snprintf(node.name, sizeof node.name, "attn.7");
        float y = 0, in = 0;
        int32_t rows[2] = {0, (1 << 28) - 1}; /* one row at position 2^28 - 1 */
        void *srcs[DRT_MAX_SRC] = {&in, &in, &in, NULL, rows};
        drt_exec ex;
        drt_exec_rows(&ex, rows, 1);
        drt_status s = drt_ref_run_node(&node, &y, srcs, &ex);
        _exit(s == DRT_ERR_OOM && isnan(y) && strstr(drt_last_error(), "ref: ATTN attn.7: cannot allocate") ? 0
              : s == DRT_OK                                                                                 ? 1
                                                                                                            : 2);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    DRT_CHECK(pid > 0 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the ref ATTN scratch allocation failure: child exit %d (0: an error naming ref and the node; "
              "1: no error; 2: another error; 3: no limit set)",
              WIFEXITED(st) ? WEXITSTATUS(st) : -1);
#endif
}

/* parses "a,b,c\n" into ids; the count */
static int parse_ids(const char *s, int32_t *ids, int cap) {
    int k = 0;
    for (const char *p = s; k < cap; p++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        ids[k++] = (int32_t)v;
        p = end;
        if (*p != ',') break;
    }
    return k;
}

/* Every eos id stops `diffrt run`, not only the first (Llama 3 lists three):
 * eos_token_id [x, g] in config.json, or x in config.json and [x, g] in
 * generation_config.json, where x never comes and g is the greedy path's
 * j-th token, ends the run right after printing g. */
static void eos_list_stops(void) {
    char dir[1024], cmd[4096], out[8192];
    snprintf(dir, sizeof dir, "%s/cli_eos_model", DRT_TMP_DIR);
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s' && cp '%s/hf_llama_gqa/model.safetensors' '%s'", dir, dir,
             DRT_FIXTURES_DIR, dir);
    DRT_CHECK(system(cmd) == 0, "cannot make %s", dir);
    char src[1200], cfg_path[1200], gen_path[1200];
    snprintf(src, sizeof src, "%s/hf_llama_gqa/config.json", DRT_FIXTURES_DIR);
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    snprintf(gen_path, sizeof gen_path, "%s/generation_config.json", dir);
    FILE *f = fopen(src, "rb");
    char text[8192];
    size_t n = f ? fread(text, 1, sizeof text - 1, f) : 0;
    if (f) fclose(f);
    text[n] = 0;
    cJSON *cfg = cJSON_Parse(text);
    DRT_CHECK(cfg != NULL, "cannot parse %s", src);
    if (!cfg) return;
    int vocab = cJSON_GetObjectItem(cfg, "vocab_size")->valueint;

    /* the greedy path with no eos at all */
    cJSON_DeleteItemFromObject(cfg, "eos_token_id");
    char *t = cJSON_Print(cfg);
    f = fopen(cfg_path, "wb");
    fputs(t, f);
    fclose(f);
    free(t);
    snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --tokens 5,6,7 -n 8 2>/dev/null", DRT_CLI_PATH, dir);
    int32_t seq[8];
    DRT_CHECK(run(cmd, out, sizeof out) == 0 && parse_ids(out, seq, 8) == 8, "no eos: 8 tokens, got %s", out);
    int j = 1; /* the first token after the first that is new */
    while (j < 8 && (seq[j] == seq[0] || (j > 1 && seq[j] == seq[1]))) j++;
    int x = 3; /* an id the path never takes */
    for (int again = 1; again;) {
        again = 0;
        for (int i = 0; i < 8; i++) again |= seq[i] == x;
        if (again) x++;
    }
    DRT_CHECK(j < 7 && x < vocab, "no usable greedy path: %s", out);
    char want[256];
    int w = 0;
    for (int i = 0; i <= j; i++) w += snprintf(want + w, sizeof want - (size_t)w, i ? ",%d" : "%d", seq[i]);
    snprintf(want + w, sizeof want - (size_t)w, "\n");

    for (int where = 0; where < 2; where++) {
        cJSON *list = cJSON_CreateArray();
        cJSON_AddItemToArray(list, cJSON_CreateNumber(x));
        cJSON_AddItemToArray(list, cJSON_CreateNumber(seq[j]));
        cJSON_DeleteItemFromObject(cfg, "eos_token_id");
        unlink(gen_path);
        if (where == 0) {
            cJSON_AddItemToObject(cfg, "eos_token_id", list);
        } else {
            cJSON_AddNumberToObject(cfg, "eos_token_id", x);
            cJSON *g = cJSON_CreateObject();
            cJSON_AddItemToObject(g, "eos_token_id", list);
            t = cJSON_Print(g);
            f = fopen(gen_path, "wb");
            fputs(t, f);
            fclose(f);
            free(t);
            cJSON_Delete(g);
        }
        t = cJSON_Print(cfg);
        f = fopen(cfg_path, "wb");
        fputs(t, f);
        fclose(f);
        free(t);
        const char *what = where ? "generation_config.json [x, g]" : "config.json [x, g]";
        DRT_CHECK(run(cmd, out, sizeof out) == 0 && strcmp(out, want) == 0, "eos %s: printed %s, expected %s", what,
                  out, want);
        snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --tokens 5,6,7 -n 8 --no-stop 2>/dev/null", DRT_CLI_PATH, dir);
        int32_t all[8];
        DRT_CHECK(run(cmd, out, sizeof out) == 0 && parse_ids(out, all, 8) == 8 && memcmp(all, seq, sizeof all) == 0,
                  "eos %s, --no-stop: %s", what, out);
        snprintf(cmd, sizeof cmd, "'%s' run --model '%s' --tokens 5,6,7 -n 8 2>/dev/null", DRT_CLI_PATH, dir);
    }
    cJSON_Delete(cfg);
}

/* diffrt quantize on diff-mlx checkpoints: the plain one quantizes (its
 * tok_embed stays unquantized, as the loader requires) and loads back; so
 * does the published one, under the trainer's file name latest.safetensors,
 * with its optimizer state (a U64 step among it), which is not written. */
static void quantize_mlx(void) {
    static const char *const models[] = {"mlx_diff", "mlx_diff_opt"};
    for (int i = 0; i < 2; i++) {
        char out[8192], cmd[16384], dir[1024];
        snprintf(dir, sizeof dir, "%s/cli_mlx_q8_%d", DRT_TMP_DIR, i);
        snprintf(cmd, sizeof cmd,
                 "rm -rf '%s' && '%s' quantize --model '%s/%s' --type q8_0 --out '%s' >/dev/null 2>&1 && "
                 "'%s' run --model '%s' --tokens 5,6,7 -n 4 --no-stop 2>/dev/null",
                 dir, DRT_CLI_PATH, DRT_FIXTURES_DIR, models[i], dir, DRT_CLI_PATH, dir);
        int32_t ids[8];
        DRT_CHECK(run(cmd, out, sizeof out) == 0 && parse_ids(out, ids, 8) == 4, "quantized %s: %s", models[i], out);
        char file[1100];
        snprintf(file, sizeof file, "%s/model.safetensors", dir);
        drt_st_file f;
        int opt = -1;
        if (drt_st_open(file, &f) == DRT_OK) {
            opt = 0;
            for (int t = 0; t < f.n_tensors; t++) opt += strncmp(f.tensors[t].name, "opt.", 4) == 0;
            opt += f.n_foreign;
            drt_st_close(&f);
        }
        DRT_CHECK(opt == 0, "quantized %s: %d optimizer tensors written (-1: no file)", models[i], opt);
    }
}

int main(void) {
    DIR *d = opendir(DRT_FIXTURES_DIR);
    struct dirent *e;
    int n = 0;
    while (d && (e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[1300];
        snprintf(p, sizeof p, "%s/%s/expected.safetensors", DRT_FIXTURES_DIR, e->d_name);
        FILE *f = fopen(p, "rb");
        if (!f) continue;
        fclose(f);
        greedy_fixture(e->d_name);
        n++;
    }
    if (d) closedir(d);
    DRT_CHECK(n >= 4, "only %d fixtures", n);
    text_mode();
    eos_list_stops();
    quantize_mlx();
    niah_compare();
    last_argument();
    help_lists_options();
    help_matches_docs();
    info_blocks_once();
    option_parser();
    ref_oom_names_ref();

    const cli_case cases[] = {
        {"--help", 0, "usage"},
        {"", 2, "usage"},
        {"frobnicate", 2, "unknown command"},
        {"run --tokens 1,2", 2, "--model"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa", 2, "--tokens"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --tokens 1,x", 2, "comma-separated"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --tokens 1,2,", 2, "comma-separated"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --tokens 1 --temp -1", 2, "--temp"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --tokens 1 --top-p 0", 2, "--top-p"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --tokens 1 -n", 2, "needs a value"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --tokens 1,999", 1, "vocabulary"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --tokens 1 --backend nosuch", 1, "unknown backend"},
        {"run --model /nonexistent --tokens 1", 1, "/nonexistent/config.json"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --tokens 1 -n 100 --ctx 50", 2, "exceed"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --tokens 1,2,3 -n 5 --temp 0.8 --top-k 20 --top-p 0.9 --seed 7",
         0, "decode:"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --prompt hi", 1, "hf_llama_gqa/tokenizer.json"},
        {"run --model " DRT_FIXTURES_DIR "/hf_llama_gqa --prompt hi --tokens 1", 2, "give one of"},
        {"info", 0, "cpu"},
        {"info", 0, "opencl"},
        {"info --model " DRT_FIXTURES_DIR "/unilm_v1", 0, "lambda_init"},
        {"info --model " DRT_FIXTURES_DIR "/diff_v2", 0, "diff-v2"},
        /* niah's prompt count in 64-bit, with a limit: 32 x 32 x 1e6 x 64 wrapped an int */
        {"niah --model /nonexistent --ctx 1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,"
         "27,28,29,30,31,32 --depths 0,1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20,21,22,23,24,25,26,27,28,"
         "29,30,31 --samples 1000000 --needles 64 --queries 64",
         2, "niah: 32 ctx x 32 depths x 1000000 samples x 64 queries = 6.554e+10 prompts, over the limit"},
        {"niah --model /nonexistent --ctx 1,2,3 --samples 1000000", 2, "= 1.5e+07 prompts, over the limit"},
        {"niah --model /nonexistent --samples 1000000", 1, "/nonexistent"}, /* 5e6: within the limit */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char cmd[2048], out[16384];
        snprintf(cmd, sizeof cmd, "'%s' %s 2>&1", DRT_CLI_PATH, cases[i].args);
        int rc = run(cmd, out, sizeof out);
        DRT_CHECK(rc == cases[i].want_rc, "diffrt %s: exit %d, expected %d; output:\n%s", cases[i].args, rc,
                  cases[i].want_rc, out);
        DRT_CHECK(strstr(out, cases[i].must_say), "diffrt %s: output lacks \"%s\":\n%s", cases[i].args,
                  cases[i].must_say, out);
    }
    /* sampling is reproducible from its seed */
    char a[512], b[512], cmd[1024];
    snprintf(cmd, sizeof cmd, "'%s' run --model %s/hf_llama_gqa --tokens 5,6 -n 12 --temp 1 --seed 42 2>/dev/null",
             DRT_CLI_PATH, DRT_FIXTURES_DIR);
    run(cmd, a, sizeof a);
    run(cmd, b, sizeof b);
    DRT_CHECK(strcmp(a, b) == 0 && strlen(a) > 10, "same seed, different samples: %s vs %s", a, b);
    return drt_test_summary("test_cli");
}
