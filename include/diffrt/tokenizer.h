/* Byte-level BPE tokenizers read from a Hugging Face tokenizer.json (GPT-2 and
 * Llama-3 style), encoding and decoding exactly as the `tokenizers` library
 * does:
 *
 *   text -> split out added/special tokens (lstrip/rstrip/single_word/
 *   normalized as HF) -> pre-tokenizers in order (Split with a regex, ByteLevel
 *   with or without its GPT-2 regex; regexes run through PCRE2, UTF-8 + UCP)
 *   -> bytes mapped to the byte-level alphabet -> BPE merges by rank (a hash
 *   map of pairs, a heap of candidate merges; ignore_merges honoured) ->
 *   post-processor (TemplateProcessing / RobertaProcessing / BertProcessing
 *   add BOS etc. when add_special is set; ByteLevel adds nothing).
 *
 * Decoding maps each token's characters back to bytes (ByteLevel decoder) and
 * turns invalid UTF-8 into U+FFFD as Rust's String::from_utf8_lossy does.
 *
 * Anything else (Unigram/WordPiece models, normalizers, other pre-tokenizers,
 * dropout, byte_fallback, ...) is refused at load time with an error naming
 * the file, the field and the value; so is a file that is not UTF-8 (HF reads
 * it into a String), and one with a key twice in an object (HF keeps the
 * last vocab entry; the error names the key and its path) or a \u0000
 * escape. The file's "truncation" and "padding" settings are ignored (diffrt
 * never truncates or pads a prompt), as is the "id" of an added token, which
 * HF also recomputes. All functions report
 * errors through drt_last_error(); none prints. A loaded tokenizer is
 * read-only: encode and decode may run on several threads at once. */
#ifndef DRT_TOKENIZER_H
#define DRT_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "diffrt.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct drt_tokenizer drt_tokenizer;

/* Reads a tokenizer.json file. */
drt_status drt_tokenizer_load(const char *path, drt_tokenizer **out);
/* Same from memory; `name` is what error messages call the file. */
drt_status drt_tokenizer_load_json(const char *json, size_t len, const char *name, drt_tokenizer **out);
/* Unlike drt_session_free, it does not wait for calls in flight: no other
 * thread may be inside a call on t (nor use a stream of t) while it runs. */
void drt_tokenizer_free(drt_tokenizer *t);

/* One more than the largest token id (model vocab and added tokens). */
int drt_tokenizer_vocab_size(const drt_tokenizer *t);

/* Encodes `len` bytes of UTF-8 text (need not be NUL-terminated). With
 * add_special the post-processor's tokens (e.g. BOS) are added, as HF
 * `encode(text)` does by default. *ids is malloc'd (never NULL on success, even
 * for 0 ids); the caller frees it. Text that is not valid UTF-8 is an error
 * (DRT_ERR_INVALID_ARG) naming the byte offset. */
drt_status drt_tokenizer_encode(const drt_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                                int *n_ids);

/* drt_tokenizer_encode for a caller with a context of max_tokens ids (0 or
 * less: no limit): ids past max_tokens (special tokens included) are
 * DRT_ERR_INVALID_ARG "the text makes more than N tokens", found as soon as
 * the output passes N, not after the whole text is encoded. A text longer
 * than N times the most bytes one token of this tokenizer stands for cannot
 * fit and is refused the same way before any pre-tokenizer regex runs (a
 * hostile Split regex can take time quadratic in a word's length); that
 * check is skipped for a tokenizer that can drop text (a Split "Removed",
 * an added token with lstrip/rstrip, a byte with no token). A text that
 * fits encodes exactly as drt_tokenizer_encode encodes it. */
drt_status drt_tokenizer_encode_max(const drt_tokenizer *t, const char *text, size_t len, int add_special,
                                    int max_tokens, int32_t **ids, int *n_ids);

/* How drt_tokenizer_encode_opts reads a text. A zeroed struct is HF's
 * encode(text, add_special_tokens=False) with no limits. */
typedef struct {
    int add_special; /* the post-processor's tokens (BOS, ...), as HF's add_special_tokens */
    /* 1: an added token marked special, spelled in the text, becomes that
     * token (HF's default); 0: it is text like any other (HF's
     * split_special_tokens=True, OpenAI's API: a user's "<|eot_id|>" cannot
     * end a turn). Tokens not marked special are matched either way. */
    int parse_special;
    /* With parse_special 1: byte ranges [plain[2k], plain[2k + 1]) of the
     * text where special tokens are not recognized (the user's text inside
     * a rendered chat template): one that overlaps a range is read as text.
     * Ranges need not be sorted; NULL: none. */
    const size_t *plain;
    int n_plain;
    int max_tokens; /* > 0: as drt_tokenizer_encode_max */
    /* > 0: pre-tokenizing (the regexes) that runs longer than this many
     * seconds stops with DRT_ERR_UNSUPPORTED "...took longer than S s...":
     * a tokenizer.json's Split regex can backtrack badly on hostile text */
    double max_seconds;
    /* not NULL: once *cancel is nonzero (another thread sets it), encoding
     * stops within one regex match with DRT_ERR_UNAVAILABLE "...cancelled" */
    const volatile int *cancel;
} drt_encode_opts;

/* drt_tokenizer_encode with the choices of o (NULL: all zero). A text that
 * fits and a zeroed o but add_special and parse_special 1 encode exactly as
 * drt_tokenizer_encode. */
drt_status drt_tokenizer_encode_opts(const drt_tokenizer *t, const char *text, size_t len, const drt_encode_opts *o,
                                     int32_t **ids, int *n_ids);

/* Decodes ids to a malloc'd, NUL-terminated UTF-8 string of *len bytes (len
 * may be NULL). skip_special drops special tokens. Ids that name no token are
 * skipped, as HF does. */
drt_status drt_tokenizer_decode(const drt_tokenizer *t, const int32_t *ids, int n_ids, int skip_special, char **text,
                                size_t *len);

/* The token's string as stored in tokenizer.json (byte-level alphabet for
 * model tokens), or NULL when the id names no token. */
const char *drt_tokenizer_id_to_token(const drt_tokenizer *t, int32_t id);
/* The id of a token string (model vocab or added tokens), or -1. */
int32_t drt_tokenizer_token_to_id(const drt_tokenizer *t, const char *token);
/* 1 when the id is an added token marked special. */
int drt_tokenizer_is_special(const drt_tokenizer *t, int32_t id);
/* The first id the post-processor puts before the text (BOS), or -1. */
int32_t drt_tokenizer_bos_id(const drt_tokenizer *t);
/* The end-of-text special token ("<|end_of_text|>", "<|endoftext|>" or "</s>",
 * the first of these the tokenizer has as a special token), or -1. Generation
 * stops at it when the model's config.json names no eos_token_id. */
int32_t drt_tokenizer_eos_id(const drt_tokenizer *t);

/* Incremental decoding for streaming output. Feeding ids one at a time and
 * concatenating every output, then drt_tokenizer_stream_flush, gives exactly
 * the bytes drt_tokenizer_decode gives for the whole sequence. Output holds
 * only complete UTF-8 characters: a character whose bytes are split across
 * tokens is emitted when its last byte arrives. */
typedef struct {
    unsigned char pending[8]; /* bytes of an incomplete character */
    int n_pending;
    int n_tokens; /* tokens emitted so far (the no-decoder join needs it) */
} drt_tokenizer_stream;

void drt_tokenizer_stream_init(drt_tokenizer_stream *st);
/* Appends the text of `id` to *buf (malloc'd, grown as needed, *len bytes,
 * NUL-terminated; *buf may start NULL). */
drt_status drt_tokenizer_stream_push(const drt_tokenizer *t, drt_tokenizer_stream *st, int32_t id, int skip_special,
                                     char **buf, size_t *len, size_t *cap);
/* Emits what is still pending (as U+FFFD: an incomplete character at the end). */
drt_status drt_tokenizer_stream_flush(const drt_tokenizer *t, drt_tokenizer_stream *st, char **buf, size_t *len,
                                      size_t *cap);

#ifdef __cplusplus
}
#endif
#endif
