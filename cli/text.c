/* Text prompts and streamed text output for `diffrt run`; see text.h. */
#include "text.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "diffrt/util.h" /* drt_set_error, drt_printable */

#define PROMPT_MAX ((size_t)64 << 20)

/* Reads a stream to its end. A prompt file is the user's own choice on the
 * command line, not a file of the model directory: it may be a pipe or a FIFO
 * (--prompt-file <(cmd)), and waiting for its writer is what the user asked
 * for. Model files go through drt_read_text_file, which refuses those. */
static drt_status read_stream(FILE *f, const char *name, char **text, size_t *len) {
    size_t cap = 4096, n = 0;
    char *buf = malloc(cap);
    if (!buf) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", name);
    for (;;) {
        if (n + 1 == cap) {
            if (cap > PROMPT_MAX) {
                free(buf);
                return drt_set_error(DRT_ERR_IO, "%s: prompt over the %zu MiB limit", name, PROMPT_MAX >> 20);
            }
            char *nb = realloc(buf, cap * 2);
            if (!nb) {
                free(buf);
                return drt_set_error(DRT_ERR_OOM, "%s: out of memory", name);
            }
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - 1 - n, f);
        n += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        free(buf);
        return drt_set_error(DRT_ERR_IO, "%s: read failed: %s", name, strerror(errno));
    }
    buf[n] = 0;
    *text = buf;
    *len = n;
    return DRT_OK;
}

drt_status cli_read_prompt(const char *prompt, const char *prompt_file, char **text, size_t *len) {
    *text = NULL;
    *len = 0;
    if (prompt) {
        size_t n = strlen(prompt);
        char *s = malloc(n + 1);
        if (!s) return drt_set_error(DRT_ERR_OOM, "out of memory");
        memcpy(s, prompt, n + 1);
        *text = s;
        *len = n;
        return DRT_OK;
    }
    if (!prompt_file) return drt_set_error(DRT_ERR_INVALID_ARG, "no prompt given");
    if (strcmp(prompt_file, "-") == 0) return read_stream(stdin, "stdin", text, len);
    FILE *f = fopen(prompt_file, "rb");
    if (!f) return drt_set_error(DRT_ERR_IO, "%s: cannot open: %s", prompt_file, strerror(errno));
    struct stat sb;
    drt_status s = fstat(fileno(f), &sb) == 0 && S_ISDIR(sb.st_mode)
                       ? drt_set_error(DRT_ERR_IO, "%s: is a directory", prompt_file)
                       : read_stream(f, prompt_file, text, len);
    fclose(f);
    return s;
}

drt_status cli_text_begin(cli_text *ct, const char *model_dir, const char *prompt, const char *prompt_file,
                          int model_vocab, int model_eos, int max_ids, FILE *out, int32_t **ids, int *n_ids) {
    memset(ct, 0, sizeof *ct);
    *ids = NULL;
    *n_ids = 0;
    size_t dl = strlen(model_dir);
    char *path = malloc(dl + sizeof "/tokenizer.json");
    if (!path) return drt_set_error(DRT_ERR_OOM, "out of memory");
    memcpy(path, model_dir, dl);
    memcpy(path + dl, "/tokenizer.json", sizeof "/tokenizer.json");
    struct stat sb;
    if (stat(path, &sb) != 0) {
        drt_status s = drt_set_error(DRT_ERR_IO,
                                     "%s: %s; a text prompt needs the model's tokenizer.json "
                                     "(or give --tokens ID,ID,...)",
                                     path, strerror(errno));
        free(path);
        return s;
    }
    drt_tokenizer *tok = NULL;
    int over_context = 0;
    char *text = NULL;
    size_t len = 0;
    drt_status s = drt_tokenizer_load(path, &tok);
    if (!s) s = cli_read_prompt(prompt, prompt_file, &text, &len);
    if (!s) {
        s = drt_tokenizer_encode_max(tok, text, len, 1, max_ids, ids, n_ids);
        if (s) { /* say where the text came from (drt_set_error may quote drt_last_error()) */
            const char *from = prompt ? "--prompt" : strcmp(prompt_file, "-") ? prompt_file : "stdin";
            if (max_ids > 0 && s == DRT_ERR_INVALID_ARG) {
                over_context = 1;
                s = drt_set_error(s,
                                  "%s: %s: the prompt must fit the context of %d tokens (--ctx, else "
                                  "max_position_embeddings)",
                                  from, drt_last_error(), max_ids);
            } else
                s = drt_set_error(s, "%s: %s", from, drt_last_error());
        }
    }
    if (!s && *n_ids == 0)
        s = drt_set_error(DRT_ERR_INVALID_ARG, "the prompt is empty and %s adds no BOS token: nothing to start from",
                          path);
    for (int i = 0; !s && i < *n_ids; i++)
        if ((*ids)[i] >= model_vocab) {
            const char *name = drt_tokenizer_id_to_token(tok, (*ids)[i]);
            char shown[64];
            s = drt_set_error(DRT_ERR_FORMAT,
                              "%s: prompt token %d (\"%s\") is outside the model's vocabulary of "
                              "%d: is this the model's tokenizer?",
                              path, (*ids)[i], drt_printable(name ? name : "?", shown, sizeof shown), model_vocab);
        }
    free(text);
    free(path);
    if (s) {
        free(*ids);
        *ids = NULL;
        *n_ids = 0;
        drt_tokenizer_free(tok);
        ct->over_context = over_context;
        return s;
    }
    ct->tok = tok;
    ct->out = out;
    ct->eos = model_eos >= 0 ? model_eos : drt_tokenizer_eos_id(tok);
    ct->at_line_start = 1;
    drt_tokenizer_stream_init(&ct->st);
    return DRT_OK;
}

static drt_status write_out(cli_text *ct) {
    if (ct->len) {
        if (fwrite(ct->buf, 1, ct->len, ct->out) != ct->len)
            return drt_set_error(DRT_ERR_IO, "cannot write the output: %s", strerror(errno));
        ct->at_line_start = ct->buf[ct->len - 1] == '\n';
        ct->len = 0;
    }
    fflush(ct->out);
    return DRT_OK;
}

drt_status cli_text_put(cli_text *ct, int32_t id) {
    drt_status s = drt_tokenizer_stream_push(ct->tok, &ct->st, id, 1, &ct->buf, &ct->len, &ct->cap);
    return s ? s : write_out(ct);
}

drt_status cli_text_end(cli_text *ct) {
    drt_status s = drt_tokenizer_stream_flush(ct->tok, &ct->st, &ct->buf, &ct->len, &ct->cap);
    if (!s) s = write_out(ct);
    if (!s && !ct->at_line_start) {
        fputc('\n', ct->out);
        ct->at_line_start = 1;
        fflush(ct->out);
    }
    return s;
}

void cli_text_free(cli_text *ct) {
    if (!ct) return;
    drt_tokenizer_free(ct->tok);
    free(ct->buf);
    memset(ct, 0, sizeof *ct);
}
