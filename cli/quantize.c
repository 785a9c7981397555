/* diffrt quantize: a model directory with its projection weights in q8_0 or
 * q4_0 (docs/quantization.md).
 *
 * drt_quantize_model (include/diffrt/quantize.h) does the work: every 2-D
 * "*.weight" tensor but the token embedding whose rows are a multiple of 32
 * long is quantized row by row; the rest (embedding, norms, lambdas, any
 * row length not a multiple of 32) is copied as it is. The output
 * model.safetensors holds the blocks as U8 [rows, blocks, block bytes] with
 * the format in __metadata__; config.json, tokenizer.json,
 * generation_config.json and tokenizer_config.json are copied.
 *
 * drt_quantize_model also writes the whole directory as a fresh
 * ".DIR2.tmp.XXXXXX" beside DIR2, loads it back there, and only then moves
 * it into place (drt_outdir, include/diffrt/util.h): a failure, a full disk
 * or a kill never leaves DIR2 half written, and a previous DIR2 stays as it
 * was until the new one is complete. DIR2 must be missing or empty; --force
 * replaces it as a whole. The CLI checks DIR2 first (cli_outdir_check) so
 * that a refusal names --out and --force. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli.h"
#include "opts.h"
#include "outfile.h"
#include "diffrt/diffrt.h"
#include "diffrt/quantize.h"

static const char ABOUT_Q[] =
    "Writes DIR2/model.safetensors with DIR's projection weights quantized (2-D *.weight\n"
    "tensors but the embedding, rows a multiple of 32), everything else as stored, and copies\n"
    "config.json, tokenizer.json, generation_config.json and tokenizer_config.json (those\n"
    "present). DIR2 must not exist or be empty; with --force an existing\n"
    "DIR2 is replaced as a whole. DIR2 is written beside itself under a temporary name, checked,\n"
    "then moved into place.\n";

/* progress on stderr: one updated line on a terminal, else a line per tenth;
 * the library's notices as lines of their own */
typedef struct {
    int tty;
    const char *type;
    int open_line; /* a progress line on the terminal that no newline ended */
} progress_ctx;

static void progress(void *ctx, int done, int n, const char *name, int64_t rows, int64_t cols) {
    progress_ctx *p = ctx;
    p->open_line = p->tty && name;
    if (!name) {
        if (p->tty) fprintf(stderr, "\n");
    } else if (p->tty) {
        fprintf(stderr, "\rquantize: %d/%d tensors, %.60s (%lld x %lld) -> %s\033[K", done, n, name, (long long)rows,
                (long long)cols, p->type);
    } else if (done * 10 / n != (done - 1) * 10 / n) {
        fprintf(stderr, "quantize: %d/%d tensors\n", done, n);
    }
}

static void note(void *ctx, const char *line) {
    const progress_ctx *p = ctx;
    fprintf(stderr, "%sdiffrt: quantize: %s\n", p->tty ? "\r\033[K" : "", line);
}

int cmd_quantize(int argc, char **argv) {
    const char *model = NULL, *type = NULL, *out = NULL;
    int force = 0;
    const cli_opt opts[] = {
        {.name = "--model", .kind = CLI_STR, .dst = &model, .meta = "DIR", .help = "the model to quantize"},
        {.name = "--type",
         .kind = CLI_STR,
         .dst = &type,
         .meta = "q8_0|q4_0",
         .help = "8-bit or 4-bit blocks (docs/quantization.md)"},
        {.name = "--out", .kind = CLI_STR, .dst = &out, .meta = "DIR2", .help = "the quantized model's directory"},
        {.name = "--force", .kind = CLI_FLAG, .dst = &force, .help = "replace an existing DIR2 as a whole"},
        {0}};
    const cli_cmd cmd = {.name = "quantize",
                         .synopsis = "--model DIR --type q8_0|q4_0 --out DIR2 [--force]",
                         .about = ABOUT_Q,
                         .opts = opts};
    int prc = cli_parse(&cmd, argc, argv);
    if (prc != CLI_PARSED) return prc;
    if (!model || !type || !out)
        return cli_die("quantize: --model DIR, --type q8_0|q4_0 and --out DIR2 are required%s", "");
    drt_dtype qt = strcmp(type, "q8_0") == 0 ? DRT_Q8_0 : strcmp(type, "q4_0") == 0 ? DRT_Q4_0 : DRT_DTYPE_COUNT;
    if (qt == DRT_DTYPE_COUNT) return cli_die("quantize: --type must be q8_0 or q4_0, got \"%s\"", type);

    /* --out's rules in the CLI's words first; drt_quantize_model checks
     * them again (and the model's files) before it writes anything */
    drt_outdir_opts oo;
    cli_outdir_opts(&oo, "quantize", force, model);
    int orc = cli_outdir_check("quantize", out, &oo);
    if (orc) return orc;

    progress_ctx pc = {.tty = isatty(2), .type = type};
    drt_quantize_opts qo = {.progress = progress, .ctx = &pc, .force = force, .note = note};
    drt_quantize_result res;
    drt_status st = drt_quantize_model(model, qt, out, &qo, &res);
    if (st != DRT_OK) {
        if (pc.open_line) fprintf(stderr, "\n");
        fprintf(stderr, "diffrt: quantize: %s\n", drt_last_error());
        return st == DRT_ERR_INVALID_ARG ? 2 : 1;
    }
    fprintf(stderr, "quantize: %d of %d tensors to %s; %.2f MiB -> %.2f MiB; wrote %s%smodel.safetensors\n",
            res.n_quantized, res.n_tensors, type, res.bytes_in / 1048576.0, res.bytes_out / 1048576.0, out,
            cli_ends_with(out, "/") ? "" : "/");
    return 0;
}
