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
 * The whole directory is written as a fresh ".DIR2.tmp.XXXXXX" beside DIR2,
 * loaded back there, and only then moved into place (cli_outdir in
 * cli/outfile.h): a failure, a full disk or a kill never leaves DIR2 half
 * written, and a previous DIR2 stays as it was until the new one is
 * complete. DIR2 must be missing or empty; --force replaces it as a whole. */
#define _DEFAULT_SOURCE /* realpath */
#include <limits.h>
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

/* progress on stderr: one updated line on a terminal, else a line per tenth */
typedef struct {
    int tty;
    const char *type;
} progress_ctx;

static void progress(void *ctx, int done, int n, const char *name, int64_t rows, int64_t cols) {
    const progress_ctx *p = ctx;
    if (!name) {
        if (p->tty) fprintf(stderr, "\n");
    } else if (p->tty) {
        fprintf(stderr, "\rquantize: %d/%d tensors, %.60s (%lld x %lld) -> %s\033[K", done, n, name, (long long)rows,
                (long long)cols, p->type);
    } else if (done * 10 / n != (done - 1) * 10 / n) {
        fprintf(stderr, "quantize: %d/%d tensors\n", done, n);
    }
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

    /* the source must be a model diffrt runs */
    drt_model *m = NULL;
    if (drt_model_load(model, &m) != DRT_OK) return cli_fail("quantize");
    drt_model_free(m);

    char rin[PATH_MAX];
    if (!realpath(model, rin)) return cli_die("quantize: cannot resolve --model %s", model);
    cli_outdir od;
    drt_outdir_opts oo;
    cli_outdir_opts(&oo, "quantize", force, rin);
    int orc = cli_outdir_open(&od, "quantize", out, &oo);
    if (orc) return orc;

    progress_ctx pc = {.tty = isatty(2), .type = type};
    drt_quantize_opts qo = {.progress = progress, .ctx = &pc};
    drt_quantize_result res;
    int rc = 0;
    if (drt_quantize_model(model, qt, od.tmp, &qo, &res) != DRT_OK)
        rc = cli_fail("quantize");
    else if (drt_model_load(od.tmp, &m) != DRT_OK)
        rc = cli_fail("quantize: the written model does not load");
    if (rc) {
        cli_outdir_discard(&od);
        return rc;
    }
    drt_model_free(m);
    if (cli_outdir_commit(&od, "quantize")) {
        cli_outdir_discard(&od);
        return 1;
    }
    fprintf(stderr, "quantize: %d of %d tensors to %s; %.2f MiB -> %.2f MiB; wrote %s%smodel.safetensors\n",
            res.n_quantized, res.n_tensors, type, res.bytes_in / 1048576.0, res.bytes_out / 1048576.0, out,
            cli_ends_with(out, "/") ? "" : "/");
    return 0;
}
