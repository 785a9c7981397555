/* diffrt quantize: a model directory with its projection weights in q8_0 or
 * q4_0 (docs/quantization.md).
 *
 * Every 2-D "*.weight" tensor but the token embedding whose rows are a
 * multiple of 32 long is quantized row by row (drt_quantize_row); the rest
 * (embedding, norms, lambdas, any row length not a multiple of 32) is
 * copied as it is. The output model.safetensors holds the blocks as U8
 * [rows, blocks, block bytes] with the format in __metadata__; config.json
 * and tokenizer.json are copied.
 *
 * The whole directory is written as a fresh ".DIR2.tmp.XXXXXX" beside DIR2,
 * loaded back there, and only then moved into place (cli_outdir in
 * cli/outfile.h): a failure, a full disk or a kill never leaves DIR2 half
 * written, and a previous DIR2 stays as it was until the new one is
 * complete. DIR2 must be missing or empty; --force replaces it as a whole. */
#define _DEFAULT_SOURCE /* realpath */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli.h"
#include "opts.h"
#include "outfile.h"
#include "diffrt/diffrt.h"
#include "drt_quant.h"
#include "safetensors.h"

static const char ABOUT_Q[] =
    "Writes DIR2/model.safetensors with DIR's projection weights quantized (2-D *.weight\n"
    "tensors but the embedding, rows a multiple of 32), everything else as stored, and copies\n"
    "config.json and tokenizer.json. DIR2 must not exist or be empty; with --force an existing\n"
    "DIR2 is replaced as a whole. DIR2 is written beside itself under a temporary name, checked,\n"
    "then moved into place.\n";

/* Is tensor t one diffrt quantize converts? */
static int quantizable(const drt_st_tensor *t) {
    return t->ndim == 2 && cli_ends_with(t->name, ".weight") && !strstr(t->name, "embed_tokens") &&
           (t->dtype == DRT_F32 || t->dtype == DRT_F16 || t->dtype == DRT_BF16) && t->shape[1] > 0 &&
           t->shape[1] % DRT_QK == 0;
}

/* Copies DIR/name to OUT/name (a small text file); a missing optional file is fine. */
static int copy_file(const char *dir, const char *out, const char *name, int required) {
    char src[PATH_MAX], dst[PATH_MAX];
    snprintf(src, sizeof src, "%s/%s", dir, name);
    snprintf(dst, sizeof dst, "%s/%s", out, name);
    struct stat sb;
    if (!required && stat(src, &sb) != 0 && errno == ENOENT) return 0;
    char *text = NULL;
    size_t len = 0;
    if (drt_read_text_file(src, &text, &len) != DRT_OK) return cli_fail("quantize");
    /* a new file in the fresh directory, never through a symlink */
    int fd = open(dst, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0666);
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (fd >= 0 && !f) close(fd);
    int ok = f && fwrite(text, 1, len, f) == len;
    if (f && fclose(f) != 0) ok = 0;
    free(text);
    if (!ok) {
        fprintf(stderr, "diffrt: quantize: cannot write %s: %s\n", dst, strerror(errno));
        return 1;
    }
    return 0;
}

/* t's rows quantized to qt into *out (malloc'd, *qb bytes); *row is the f32 scratch row. 0, else 1 */
static int quantize_tensor(const drt_st_tensor *t, drt_dtype qt, const char *model, float **row, size_t *row_cap,
                           void **out, size_t *qb) {
    int64_t rows = t->shape[0], cols = t->shape[1];
    *qb = drt_row_bytes(qt, cols) * (size_t)rows;
    void *q = malloc(*qb ? *qb : 1);
    if ((size_t)cols > *row_cap) {
        free(*row);
        *row_cap = (size_t)cols;
        *row = malloc(*row_cap * sizeof **row);
    }
    if (!q || !*row) {
        free(q);
        fprintf(stderr, "diffrt: quantize: out of memory for %s\n", t->name);
        return 1;
    }
    *out = q;
    for (int64_t r = 0; r < rows; r++) {
        for (int64_t c = 0; c < cols; c++) {
            (*row)[c] = drt_st_elem_f32(t, r * cols + c);
            if (!isfinite((*row)[c])) {
                fprintf(stderr, "diffrt: quantize: %s: tensor \"%s\" holds a non-finite value at [%lld, %lld]\n", model,
                        t->name, (long long)r, (long long)c);
                return 1;
            }
        }
        drt_quantize_row(*row, qt, (char *)q + drt_row_bytes(qt, cols) * (size_t)r, cols);
    }
    return 0;
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
    int orc = cli_outdir_open(&od, "quantize", out, force, rin);
    if (orc) return orc;

    drt_st_set set;
    if (drt_st_set_open_dir(model, &set) != DRT_OK) {
        cli_outdir_discard(&od);
        return cli_fail("quantize");
    }
    int n = set.n_names, rc = 1, nq = 0;
    drt_st_write_tensor *w = calloc((size_t)(n > 0 ? n : 1), sizeof *w);
    void **owned = calloc((size_t)(n > 0 ? n : 1), sizeof *owned);
    float *row = NULL;
    size_t row_cap = 0;
    uint64_t bytes_in = 0, bytes_out = 0;
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof tmp, "%s/model.safetensors", od.tmp);
    if (!w || !owned) {
        fprintf(stderr, "diffrt: quantize: out of memory\n");
        goto done;
    }
    const int tty = isatty(2);
    for (int i = 0; i < n; i++) {
        const drt_st_tensor *t = set.by_name[i];
        w[i] = (drt_st_write_tensor){.name = t->name, .dtype = t->dtype, .ndim = t->ndim, .data = t->data};
        for (int k = 0; k < 4; k++) w[i].shape[k] = t->shape[k];
        bytes_in += t->nbytes;
        if (!quantizable(t)) {
            bytes_out += t->nbytes;
            continue;
        }
        int64_t rows = t->shape[0], cols = t->shape[1];
        size_t qb = 0;
        if (quantize_tensor(t, qt, model, &row, &row_cap, &owned[i], &qb)) goto done;
        w[i].dtype = qt;
        w[i].data = owned[i];
        bytes_out += qb;
        nq++;
        /* progress: one updated line on a terminal, else a line per tenth */
        if (tty)
            fprintf(stderr, "\rquantize: %d/%d tensors, %.60s (%lld x %lld) -> %s\033[K", i + 1, n, t->name,
                    (long long)rows, (long long)cols, type);
        else if ((i + 1) * 10 / n != i * 10 / n)
            fprintf(stderr, "quantize: %d/%d tensors\n", i + 1, n);
    }
    if (tty) fprintf(stderr, "\n");
    if (drt_st_write(tmp, w, n) != DRT_OK) {
        cli_fail("quantize");
        goto done;
    }
    if (copy_file(model, od.tmp, "config.json", 1) || copy_file(model, od.tmp, "tokenizer.json", 0)) goto done;
    if (drt_model_load(od.tmp, &m) != DRT_OK) {
        cli_fail("quantize: the written model does not load");
        goto done;
    }
    drt_model_free(m);
    if (cli_outdir_commit(&od, "quantize")) goto done;
    fprintf(stderr, "quantize: %d of %d tensors to %s; %.2f MiB -> %.2f MiB; wrote %s%smodel.safetensors\n", nq, n,
            type, bytes_in / 1048576.0, bytes_out / 1048576.0, out, cli_ends_with(out, "/") ? "" : "/");
    rc = 0;
done:
    if (rc) cli_outdir_discard(&od);
    for (int i = 0; owned && i < n; i++) free(owned[i]);
    free(owned);
    free(w);
    free(row);
    drt_st_set_close(&set);
    return rc;
}
