/* Text in, text out for `diffrt run`: the prompt from --prompt TEXT or
 * --prompt-file F ("-" is stdin), encoded with DIR/tokenizer.json (BOS added
 * as the tokenizer's post-processor says), and the generated ids streamed to
 * a FILE as UTF-8 text, whole characters only, as soon as they are complete. */
#ifndef DIFFRT_CLI_TEXT_H
#define DIFFRT_CLI_TEXT_H

#include <stdint.h>
#include <stdio.h>

#include "diffrt/tokenizer.h"

typedef struct {
    drt_tokenizer *tok;
    drt_tokenizer_stream st;
    char *buf;
    size_t len, cap;
    FILE *out;
    int32_t eos;       /* the id generation stops at; -1 when none is known */
    int at_line_start; /* the last byte written was '\n' (or nothing written) */
    int over_context;  /* cli_text_begin failed: the prompt makes more ids than max_ids */
} cli_text;

/* Reads the prompt: `prompt` itself when not NULL, else the file
 * `prompt_file` ("-" reads stdin to its end). *text is malloc'd and
 * NUL-terminated, *len bytes. */
drt_status cli_read_prompt(const char *prompt, const char *prompt_file, char **text, size_t *len);

/* Loads model_dir/tokenizer.json, reads and encodes the prompt, and prepares
 * ct to print to `out`. model_vocab: the model's vocabulary size (prompt ids
 * must be below it); model_eos: the config's eos id, or -1, in which case the
 * tokenizer's end-of-text special token (<|end_of_text|>, <|endoftext|>,
 * </s>) is used when it has one. max_ids > 0: the prompt may make at most
 * that many ids (the context), checked while encoding, so a huge prompt or a
 * hostile tokenizer.json stops early (drt_tokenizer_encode_max); 0: no
 * limit. *ids is malloc'd. On failure ct holds nothing to free and the
 * message names the file or the problem. */
drt_status cli_text_begin(cli_text *ct, const char *model_dir, const char *prompt, const char *prompt_file,
                          int model_vocab, int model_eos, int max_ids, FILE *out, int32_t **ids, int *n_ids);

/* Writes the text of one generated id (special tokens are not printed) and
 * flushes: complete characters appear at once, a character split across
 * tokens when its last byte arrives. */
drt_status cli_text_put(cli_text *ct, int32_t id);

/* Writes what is pending (an incomplete character becomes U+FFFD), then a
 * newline unless the text already ends with one. */
drt_status cli_text_end(cli_text *ct);

void cli_text_free(cli_text *ct);

#endif
