/* Hostile runs of the diffrt command (issue 12): long prompts, contexts,
 * counts, token lists and thread counts out of range, and models whose
 * weights hold NaN or Inf. Each case runs `diffrt` as a subprocess
 * (fork/exec, no shell) with a hard timeout, on inputs built here from the
 * bundled fixtures (no binary file is committed), and asserts:
 *   - the exit status;
 *   - what stderr says, on ONE line: for an error stderr is exactly one line
 *     holding the expected text; for a success exactly one line holds it
 *     (a warning is printed once, beside the prefill/decode timings);
 *   - the time bound: an error must come before any prefill work (a 50000-
 *     token prompt on a model of 64 positions is refused in well under a
 *     second, not prefilled for seconds).
 * DIFFRT_CLI=path runs another diffrt binary (e.g. one built before a fix). */
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "diffrt/diffrt.h"
#include "drt_half.h"
#include "drt_test.h"
#include "drt_util.h"
#include "safetensors.h"

#define KILL_AFTER_S 10.0 /* the hard timeout of every case */
#define LONG_TOKENS 50000 /* "1,1,...": 100 KB, under the 128 KiB limit of one argument */
#define LONG_TEXT 60000   /* bytes of a text prompt, one token each (bytes256 tokenizer) */

static char g_tmp[1024];                     /* DRT_TMP_DIR/hostile */
static char g_text[1100], g_long_file[1100]; /* a text model dir; a long prompt file */
static char *g_long_tokens;

/* ---- inputs, built from the fixtures -------------------------------------------- */

static int copy_file(const char *from, const char *to) {
    char *text = NULL;
    size_t n = 0;
    if (drt_read_text_file(from, &text, &n) != DRT_OK) return 0;
    FILE *f = fopen(to, "wb");
    int ok = f && fwrite(text, 1, n, f) == n;
    if (f) ok &= fclose(f) == 0;
    free(text);
    return ok;
}

/* dir = g_tmp/<name>: the config.json (and tokenizer.json, when there is
 * one) of the model in src, and its model.safetensors with element `at` of
 * tensor `poison` set to v (in the tensor's dtype) */
static int poisoned_model(char *dir, size_t n, const char *name, const char *src, const char *poison, int64_t at,
                          float v) {
    char from[1200], to[1200];
    snprintf(dir, n, "%s/%s", g_tmp, name);
    mkdir(dir, 0755);
    snprintf(from, sizeof from, "%s/config.json", src);
    snprintf(to, sizeof to, "%s/config.json", dir);
    if (!copy_file(from, to)) return 0;
    snprintf(from, sizeof from, "%s/tokenizer.json", src);
    snprintf(to, sizeof to, "%s/tokenizer.json", dir);
    if (access(from, R_OK) == 0 && !copy_file(from, to)) return 0;
    snprintf(from, sizeof from, "%s/model.safetensors", src);
    snprintf(to, sizeof to, "%s/model.safetensors", dir);
    drt_st_file f;
    if (drt_st_open(from, &f) != DRT_OK) return 0;
    drt_st_write_tensor *w = calloc((size_t)f.n_tensors, sizeof *w);
    void *copy = NULL;
    int found = 0;
    for (int i = 0; w && i < f.n_tensors; i++) {
        const drt_st_tensor *t = &f.tensors[i];
        w[i] = (drt_st_write_tensor){t->name, t->dtype, t->ndim, {0}, t->data};
        memcpy(w[i].shape, t->shape, sizeof w[i].shape);
        if (strcmp(t->name, poison) != 0 || (copy = malloc(t->nbytes)) == NULL) continue;
        memcpy(copy, t->data, t->nbytes);
        if (t->dtype == DRT_F32)
            ((float *)copy)[at] = v;
        else if (t->dtype == DRT_BF16)
            ((uint16_t *)copy)[at] = (uint16_t)(drt_f32_to_bits(v) >> 16);
        else if (t->dtype == DRT_F16)
            ((uint16_t *)copy)[at] = drt_f32_to_f16(v);
        w[i].data = copy;
        found = 1;
    }
    int ok = found && drt_st_write(to, w, f.n_tensors) == DRT_OK;
    free(copy);
    free(w);
    drt_st_close(&f);
    return ok;
}

static char g_nan[1100], g_inf[1100], g_nan_bf16[1100], g_nan_niah[1100];

static int setup(void) {
    snprintf(g_tmp, sizeof g_tmp, "%s/hostile", DRT_TMP_DIR);
    mkdir(g_tmp, 0755);
    /* a text model: hf_llama_gqa (V = 256, 64 positions) + the 256-byte tokenizer */
    char p[1200];
    snprintf(g_text, sizeof g_text, "%s/text", g_tmp);
    mkdir(g_text, 0755);
    int ok = 1;
    snprintf(p, sizeof p, "%s/config.json", g_text);
    ok &= copy_file(DRT_FIXTURES_DIR "/hf_llama_gqa/config.json", p);
    snprintf(p, sizeof p, "%s/model.safetensors", g_text);
    ok &= copy_file(DRT_FIXTURES_DIR "/hf_llama_gqa/model.safetensors", p);
    snprintf(p, sizeof p, "%s/tokenizer.json", g_text);
    ok &= copy_file(DRT_FIXTURES_DIR "/../tokenizer/bytes256.json", p);
    /* a prompt of LONG_TEXT tokens, and a --tokens list of LONG_TOKENS */
    snprintf(g_long_file, sizeof g_long_file, "%s/long_prompt.txt", g_tmp);
    FILE *f = fopen(g_long_file, "wb");
    for (int i = 0; f && i < LONG_TEXT; i++) fputc('a' + i % 26, f);
    ok &= f && fclose(f) == 0;
    g_long_tokens = malloc(2 * LONG_TOKENS);
    for (int i = 0; g_long_tokens && i < LONG_TOKENS; i++) {
        g_long_tokens[2 * i] = '1';
        g_long_tokens[2 * i + 1] = i + 1 < LONG_TOKENS ? ',' : 0;
    }
    ok &= g_long_tokens != NULL;
    /* NaN and Inf weights: one element of layer 1's MLP down projection
     * (f32), and of layer 0's query projection (bf16) */
    ok &= poisoned_model(g_nan, sizeof g_nan, "nan", DRT_FIXTURES_DIR "/hf_llama_gqa",
                         "model.layers.1.mlp.down_proj.weight", 0, NAN);
    ok &= poisoned_model(g_inf, sizeof g_inf, "inf", DRT_FIXTURES_DIR "/hf_llama_gqa",
                         "model.layers.1.mlp.down_proj.weight", 5, INFINITY);
    ok &= poisoned_model(g_nan_bf16, sizeof g_nan_bf16, "nan_bf16", DRT_FIXTURES_DIR "/hf_llama_bf16",
                         "model.layers.0.self_attn.q_proj.weight", 17, NAN);
    /* the bundled diff-v1 model (f16), for niah: its tokenizer comes along */
    ok &= poisoned_model(g_nan_niah, sizeof g_nan_niah, "nan_niah", DRT_MODELS_DIR "/diff-v1-tiny",
                         "model.layers.2.self_attn.o_proj.weight", 3, NAN);
    return ok;
}

/* ---- running the command --------------------------------------------------------- */

typedef struct {
    int rc;        /* exit status; 128 + signal when killed */
    int timed_out; /* killed after KILL_AFTER_S */
    double secs;
    char err[16384]; /* stderr */
} result;

static void run_cli(const char *cli, char **argv, const char *env, result *r) {
    char err_path[1200];
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", g_tmp);
    memset(r, 0, sizeof *r);
    double t0 = drt_now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int nul = open("/dev/null", O_RDWR);
        if (fd < 0 || nul < 0) _exit(126);
        dup2(nul, 0);
        dup2(nul, 1);
        dup2(fd, 2);
        if (env) {
            char name[64];
            const char *eq = strchr(env, '=');
            snprintf(name, sizeof name, "%.*s", eq ? (int)(eq - env) : 0, env);
            if (eq) setenv(name, eq + 1, 1);
        }
        execv(cli, argv);
        _exit(127);
    }
    int st = 0;
    for (;;) {
        pid_t w = pid > 0 ? waitpid(pid, &st, WNOHANG) : -1;
        if (w != 0) break;
        if (drt_now_s() - t0 > KILL_AFTER_S) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            r->timed_out = 1;
            break;
        }
        nanosleep(&(struct timespec){0, 5 * 1000 * 1000}, NULL);
    }
    r->secs = drt_now_s() - t0;
    r->rc = pid < 0 ? -1 : WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
    FILE *f = fopen(err_path, "rb");
    if (f) {
        size_t k = fread(r->err, 1, sizeof r->err - 1, f);
        r->err[k] = 0;
        fclose(f);
    }
}

/* lines of s holding sub */
static int lines_with(const char *s, const char *sub, int *n_lines) {
    int n = 0, hits = 0;
    while (*s) {
        const char *e = strchr(s, '\n');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char line[4096];
        snprintf(line, sizeof line, "%.*s", (int)(len < sizeof line ? len : sizeof line - 1), s);
        hits += strstr(line, sub) != NULL;
        n++;
        s += len + (e ? 1 : 0);
    }
    *n_lines = n;
    return hits;
}

/* ---- the cases ------------------------------------------------------------------- */

typedef struct {
    const char *name;
    /* arguments after the command name, split at spaces; {gqa} {text} {nan} {inf}
     * {nan_bf16} {diff} are model dirs, {long_tokens} a LONG_TOKENS-id list,
     * {long_file} a LONG_TEXT-token prompt file, {empty} an empty argument */
    const char *args;
    const char *env; /* NAME=value for the child, or NULL */
    int want_rc;
    const char *must_say; /* on exactly one line of stderr; an error: stderr is that line */
    double max_s;         /* time bound */
    int chatty;           /* the command reports progress on stderr: of an error, only
                             the "diffrt: " lines are held to one */
} hostile_case;

#define FAST 5.0 /* errors before any work: startup, parse, load (sanitizer builds included) */

static const hostile_case CASES[] = {
    /* context: a prompt longer than max_position_embeddings, no --ctx */
    {"long_tokens_default_ctx", "run --model {gqa} --tokens {long_tokens} -n 4", NULL, 2,
     "prompt (50000 tokens) + -n 4 exceeds the context 64 (max_position_embeddings); pass --ctx N", 2.0, 0},
    {"long_text_default_ctx", "run --model {text} --prompt-file {long_file} -n 8", NULL, 2,
     "the prompt must fit the context of 64 tokens (--ctx, else max_position_embeddings)", 2.0, 0},
    {"prompt_plus_n_over_default_ctx", "run --model {gqa} --tokens 1,2,3 -n 62", NULL, 2,
     "prompt (3 tokens) + -n 62 exceeds the context 64 (max_position_embeddings); pass --ctx N "
     "to raise it",
     FAST, 0},
    {"n_huge_default_ctx", "run --model {gqa} --tokens 1 -n 1048576", NULL, 2, "pass --ctx N", FAST, 0},
    {"prompt_plus_n_over_ctx", "run --model {gqa} --tokens 1,2,3 -n 100 --ctx 50", NULL, 2,
     "prompt (3 tokens) + -n 100 exceeds --ctx 50", FAST, 0},
    {"ctx_past_max_positions", "run --model {gqa} --tokens 1,2,3 -n 70 --no-stop --ctx 80", NULL, 0,
     "warning: --ctx 80 is past the model's max_position_embeddings 64", 8.0, 0},
    {"fits_exactly", "run --model {gqa} --tokens 1,2,3,4 -n 60 --no-stop", NULL, 0, "decode:", 8.0, 0},
    {"ctx_zero", "run --model {gqa} --tokens 1 --ctx 0", NULL, 2, "--ctx wants an integer", FAST, 0},
    {"ctx_negative", "run --model {gqa} --tokens 1 --ctx -5", NULL, 2, "--ctx wants an integer", FAST, 0},
    {"ctx_huge", "run --model {gqa} --tokens 1 --ctx 99999999999", NULL, 2, "--ctx wants an integer in [1, 16777216]",
     FAST, 0},
    {"ctx_non_numeric", "run --model {gqa} --tokens 1 --ctx 12k", NULL, 2, "--ctx wants", FAST, 0},
    {"niah_ctx_zero", "niah --model {gqa} --ctx 0", NULL, 2, "--ctx wants", FAST, 0},
    /* counts */
    {"n_negative", "run --model {gqa} --tokens 1 -n -1", NULL, 2, "-n wants an integer >= 0", FAST, 0},
    {"n_huge", "run --model {gqa} --tokens 1 -n 99999999999", NULL, 2, "-n wants", FAST, 0},
    {"n_non_numeric", "run --model {gqa} --tokens 1 -n ten", NULL, 2, "-n wants", FAST, 0},
    {"threads_zero", "run --model {gqa} --tokens 1 --threads 0", NULL, 2, "--threads wants an integer in [1, 1024]",
     FAST, 0},
    {"threads_negative", "run --model {gqa} --tokens 1 --threads -4", NULL, 2, "--threads wants", FAST, 0},
    {"threads_huge", "run --model {gqa} --tokens 1 --threads 100000", NULL, 2, "--threads wants", FAST, 0},
    {"threads_env_huge", "run --model {gqa} --tokens 1", "DIFFRT_THREADS=100000", 1,
     "DIFFRT_THREADS=100000: expected an integer in [1, 1024]", FAST, 0},
    {"temp_nan", "run --model {gqa} --tokens 1 --temp nan", NULL, 2, "--temp wants a finite", FAST, 0},
    {"temp_inf", "run --model {gqa} --tokens 1 --temp inf", NULL, 2, "--temp wants a finite", FAST, 0},
    /* token lists */
    {"token_past_vocab", "run --model {gqa} --tokens 1,256", NULL, 1,
     "token id 256 (position 1) is outside the vocabulary [0, 256)", FAST, 0},
    {"token_negative", "run --model {gqa} --tokens 5,-3", NULL, 1, "token id -3 (position 1) is outside the vocabulary",
     FAST, 0},
    {"token_past_int", "run --model {gqa} --tokens 1,2147483648", NULL, 2, "comma-separated", FAST, 0},
    {"token_garbage", "run --model {gqa} --tokens 1;2", NULL, 2, "comma-separated", FAST, 0},
    {"tokens_empty", "run --model {gqa} --tokens {empty}", NULL, 2, "comma-separated", FAST, 0},
    {"tokens_double_comma", "run --model {gqa} --tokens 1,,2", NULL, 2, "comma-separated", FAST, 0},
    /* prompts */
    {"empty_prompt", "run --model {text} --prompt {empty}", NULL, 1, "the prompt is empty", FAST, 0},
    {"empty_stdin", "run --model {text} --prompt-file -", NULL, 1, "the prompt is empty", FAST, 0},
    {"missing_prompt_file", "run --model {text} --prompt-file /nonexistent/prompt.txt", NULL, 1,
     "/nonexistent/prompt.txt", FAST, 0},
    /* backends */
    {"unknown_backend", "run --model {gqa} --tokens 1 --backend nosuch", NULL, 1, "unknown backend \"nosuch\"", FAST,
     0},
    {"bad_device", "run --model {gqa} --tokens 1 --device 99", NULL, 1, "device index 99 out of range", FAST, 0},
    /* non-finite weights: an error naming the position, never a sampled token */
    {"nan_weights", "run --model {nan} --tokens 1,2,3 -n 4", NULL, 1,
     "logits at position 2 are not finite (NaN); the model's weights or activations overflowed; "
     "rerun with -v",
     FAST, 0},
    {"nan_weights_verbose", "run --model {nan} --tokens 1,2,3 -n 4 -v", NULL, 1,
     "first non-finite output: MATMUL 'layers.1.mlp.down' (layer 1), whose weight "
     "'model.layers.1.mlp.down_proj.weight' holds NaN",
     FAST, 0},
    {"nan_weights_env_switch", "run --model {nan} --tokens 7 -n 2", "DIFFRT_CHECK_FINITE=1", 1,
     "logits at position 0 are not finite (NaN); first non-finite output: MATMUL "
     "'layers.1.mlp.down' (layer 1)",
     FAST, 0},
    {"nan_weights_ref_backend", "run --model {nan} --tokens 1,2 -v --backend ref", NULL, 1,
     "MATMUL 'layers.1.mlp.down' (layer 1)", FAST, 0},
    {"inf_weights", "run --model {inf} --tokens 1,2,3 -n 4", NULL, 1, "logits at position 2 are not finite", FAST, 0},
    {"inf_weights_verbose", "run --model {inf} --tokens 1,2,3 -n 4 -v", NULL, 1,
     "MATMUL 'layers.1.mlp.down' (layer 1), whose weight 'model.layers.1.mlp.down_proj.weight' "
     "holds Inf",
     FAST, 0},
    /* a NaN in q reaches the logits through the cpu backend's prefill attention
     * (its exp kept NaN as e^-87 before), so it is caught at the prefill */
    {"nan_bf16_weights_verbose", "run --model {nan_bf16} --tokens 1,2,3,4 -n 4 -v", NULL, 1,
     "diffrt: prefill: logits at position 3 are not finite (NaN); first non-finite output: MATMUL "
     "'layers.0.attn.q' (layer 0), whose weight 'model.layers.0.self_attn.q_proj.weight' holds NaN",
     FAST, 0},
    {"nan_weights_niah", "niah --model {nan_niah} --samples 1", NULL, 1, "diffrt: niah: logits at position ", FAST, 1},
    {"nan_weights_niah_env_switch", "niah --model {nan_niah} --samples 1", "DIFFRT_CHECK_FINITE=1", 1,
     "MATMUL 'layers.2.attn.out' (layer 2), whose weight "
     "'model.layers.2.self_attn.o_proj.weight' holds NaN",
     FAST, 1},
    {"niah_ctx_past_max_positions", "niah --model {nan_niah} --samples 1 --ctx 200", NULL, 1,
     "warning: niah --ctx 200 is past the model's max_position_embeddings 192", FAST, 1},
    {"nan_weights_info_backend", "info --model {nan} --backend cpu", NULL, 1, "logits at position 1 are not finite",
     FAST, 0},
};

static const char *subst(const char *tok) {
    if (strcmp(tok, "{gqa}") == 0) return DRT_FIXTURES_DIR "/hf_llama_gqa";
    if (strcmp(tok, "{text}") == 0) return g_text;
    if (strcmp(tok, "{nan}") == 0) return g_nan;
    if (strcmp(tok, "{inf}") == 0) return g_inf;
    if (strcmp(tok, "{nan_bf16}") == 0) return g_nan_bf16;
    if (strcmp(tok, "{nan_niah}") == 0) return g_nan_niah;
    if (strcmp(tok, "{long_tokens}") == 0) return g_long_tokens;
    if (strcmp(tok, "{long_file}") == 0) return g_long_file;
    if (strcmp(tok, "{empty}") == 0) return "";
    return tok;
}

static void run_case(const char *cli, const hostile_case *c) {
    char args[1024], *argv[64];
    int argc = 0;
    snprintf(args, sizeof args, "%s", c->args);
    argv[argc++] = (char *)cli;
    for (char *save = NULL, *t = strtok_r(args, " ", &save); t && argc < 63; t = strtok_r(NULL, " ", &save))
        argv[argc++] = (char *)subst(t);
    argv[argc] = NULL;
    static result r;
    run_cli(cli, argv, c->env, &r);
    int n_lines = 0, hits = lines_with(r.err, c->must_say, &n_lines);
    printf("%-28s exit %d in %.2f s: %s%s", c->name, r.rc, r.secs, c->want_rc ? r.err : "(ok)",
           c->want_rc && r.err[0] ? "" : "\n");
    DRT_CHECK(!r.timed_out, "%s: killed after %.0f s (diffrt %s)", c->name, KILL_AFTER_S, c->args);
    DRT_CHECK(r.rc == c->want_rc, "%s: exit %d, expected %d; stderr:\n%s", c->name, r.rc, c->want_rc, r.err);
    DRT_CHECK(hits == 1, "%s: %d stderr lines hold \"%s\", expected exactly 1; stderr:\n%s", c->name, hits, c->must_say,
              r.err);
    if (c->want_rc && c->chatty) {
        int errs = lines_with(r.err, "diffrt: ", &n_lines) - lines_with(r.err, "diffrt: warning", &n_lines);
        DRT_CHECK(errs == 1, "%s: an error must be one line on stderr, got %d:\n%s", c->name, errs, r.err);
    } else if (c->want_rc) {
        DRT_CHECK(n_lines == 1 && r.err[strlen(r.err) - 1] == '\n',
                  "%s: an error must be one line on stderr, got %d:\n%s", c->name, n_lines, r.err);
    }
    DRT_CHECK(r.secs <= c->max_s, "%s: took %.2f s, bound %.1f s", c->name, r.secs, c->max_s);
    /* a warning is said once, and only where one is expected */
    int warn = lines_with(r.err, "warning", &n_lines);
    DRT_CHECK(warn == (strstr(c->must_say, "warning") ? 1 : 0), "%s: %d warning lines:\n%s", c->name, warn, r.err);
}

int main(void) {
    const char *cli = getenv("DIFFRT_CLI");
    if (!cli || !*cli) cli = DRT_CLI_PATH;
    unsetenv("DIFFRT_CHECK_FINITE"); /* the cases that want it set it */
    unsetenv("DIFFRT_THREADS");
    if (!setup()) {
        DRT_CHECK(0, "cannot build the hostile inputs under %s: %s", g_tmp, drt_last_error());
        return drt_test_summary("test_hostile_run");
    }
    for (size_t i = 0; i < sizeof CASES / sizeof CASES[0]; i++) run_case(cli, &CASES[i]);
    free(g_long_tokens);
    return drt_test_summary("test_hostile_run");
}
