/* Chat templates (serve/chat.c): a conversation rendered into the prompt
 * text a model was trained on.
 *
 * There is no Jinja engine here. The template is detected by its markers in
 * DIR/tokenizer_config.json's "chat_template" (a string, or a list of
 * {"name","template"} of which "default" is used): "<|start_header_id|>" and
 * "<|end_header_id|>" are llama3 (the 3.1 form, which puts "Cutting
 * Knowledge Date: ... Today Date: ..." in a system header, is llama3.1),
 * "<|im_start|>" is chatml. Each is rendered by hand-written C, byte for
 * byte as the template renders under Jinja (tests/test_serve_chat.c checks
 * that against python3-jinja2's output of the real template strings).
 * "plain" is diffrt's own opt-in format for base models: for each message
 * in order "System: ", "User: " or "Assistant: " by its role, then its
 * content trimmed (as llama3's | trim: the whitespace of Python's
 * str.strip() at both ends), then "\n"; after the last one "Assistant:",
 * with no space or newline after the colon. Encoded with the tokenizer's
 * BOS (add_bos 1), stopped at "\nUser:". System "Be brief." and user "Hi"
 * give "System: Be brief.\nUser: Hi\nAssistant:".
 *
 * What the others render (add_generation_prompt=true, no tools):
 *   llama3    [BOS], per message "<|start_header_id|>ROLE<|end_header_id|>\n\n"
 *             + trim(CONTENT) + "<|eot_id|>", then
 *             "<|start_header_id|>assistant<|end_header_id|>\n\n";
 *   llama3.1  [BOS] "<|start_header_id|>system<|end_header_id|>\n\n"
 *             "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
 *             + trim(the first message's content if it is a system message,
 *             else "") + "<|eot_id|>", then the other messages as llama3 (a
 *             later system message gets a header of its own). The date is
 *             the template's default date_string; Llama 3.2/3.3 templates,
 *             which take today's date from strftime_now under Hugging Face,
 *             are rendered with it too;
 *   chatml    per message "<|im_start|>ROLE\n" + CONTENT (untrimmed) +
 *             "<|im_end|>\n", then "<|im_start|>assistant\n".
 * [BOS] is "<|begin_of_text|>", written when add_bos is 0. ROLE is
 * "system", "user" or "assistant". */
#ifndef DRT_SRV_CHAT_H
#define DRT_SRV_CHAT_H

#include "diffrt/diffrt.h"
#include "srv_types.h"

typedef enum { SRV_CHAT_NONE = 0, SRV_CHAT_LLAMA3, SRV_CHAT_LLAMA31, SRV_CHAT_CHATML, SRV_CHAT_PLAIN } srv_chat_kind;

typedef struct {
    srv_chat_kind kind;
    const char *name;        /* "llama3", "llama3.1", "chatml", "plain", "none" */
    int add_bos;             /* 1: encode the rendered text with the tokenizer's special tokens (BOS) added;
                                0: the text already starts with the BOS text the template writes (the
                                llama3 family when the template uses bos_token inside a {{ }} or {% %}
                                tag, as Meta's do; by name llama3 and llama3.1 are 0). chatml is always
                                1: its renderer writes no BOS text, and where a chatml template writes
                                bos_token, the tokenizer's post-processor adds that same BOS */
    const char *end_of_turn; /* the token text that ends the assistant's turn ("<|eot_id|>",
                                "<|im_end|>"): its id stops generation; NULL for none */
    const char *stop;        /* a stop string the format implies ("\nUser:" for plain), or NULL */
} srv_chat_template;

/* Detects the template of model dir `dir` from tokenizer_config.json. No
 * file, no "chat_template" key, or a template of no known form: DRT_OK with
 * kind SRV_CHAT_NONE (*why says which, for the server's startup line). A
 * file that cannot be read or parsed: an error naming the file
 * (drt_last_error is not set: the message goes to why). The file is
 * untrusted: read with a size limit (16 MiB). */
drt_status srv_chat_detect(const char *dir, srv_chat_template *out, char *why, size_t why_n);

/* The template called `name` ("llama3", "llama3.1", "chatml", "plain");
 * -1 for an unknown name. */
int srv_chat_by_name(const char *name, srv_chat_template *out);

/* Renders msgs[0..n) followed by the assistant turn's opening, so the model
 * writes the assistant's reply next. *text is malloc'd, NUL-terminated,
 * *len bytes. Returns 0, or -1 with *err set (400: e.g. a conversation the
 * format cannot hold; 500 out of memory). */
int srv_chat_render(const srv_chat_template *t, const srv_message *msgs, int n, char **text, size_t *len,
                    srv_error *err);
/* srv_chat_render, and where the messages' contents lie in the text:
 * *plain (malloc'd, NULL for none) holds *n_plain [start, end) byte ranges,
 * for drt_encode_opts.plain: special tokens come from the template only,
 * never from what a user wrote. plain and n_plain may be NULL. */
int srv_chat_render_spans(const srv_chat_template *t, const srv_message *msgs, int n, char **text, size_t *len,
                          size_t **plain, int *n_plain, srv_error *err);

#endif
