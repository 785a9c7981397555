/* Hostile model directories (issue 12). A model directory is untrusted input:
 * each case builds one broken directory at test time from a bundled fixture
 * (no binary file is committed), runs the diffrt CLI on it as a user would,
 * in a child process with a hard timeout, and checks
 *   - the exit status (1: a bad model; 0 for the cases that must still work),
 *   - that stderr is exactly one line and holds the expected text (and not a
 *     raw file value shown as a number),
 *   - that it ended within the timeout (a FIFO must not hang it), and that
 *     its peak RSS stayed near that of a run which fails at once (a number in
 *     a file must not cost memory).
 * Then misaligned data: the fixtures' tensors behind a header that puts the
 * data section at an odd offset load, every weight a backend reads is aligned
 * for its dtype (aligned checkpoints are used in place, misaligned tensors
 * copied), and the logits are bit-identical to the aligned file's on ref and
 * cpu. Every case's message is printed, for the issue note. */
#define _DEFAULT_SOURCE /* wait4 */
#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "diffrt/diffrt.h"
#include "drt_checked.h"
#include "drt_test.h"
#include "drt_util.h"
#include "model.h"
#include "safetensors.h"

#define ROOT DRT_TMP_DIR "/hostile"
#define BASE "hf_llama_gqa"
#define TIMEOUT_S 10.0
#define RSS_SLACK_KB (128L * 1024) /* over the peak of a run that fails at once: GBs are the fault */

/* ---- files ------------------------------------------------------------------ */

static void rm_rf(const char *p) {
    struct stat sb;
    if (lstat(p, &sb) != 0) return;
    if (!S_ISDIR(sb.st_mode)) {
        unlink(p);
        return;
    }
    DIR *d = opendir(p);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
        char q[2048];
        snprintf(q, sizeof q, "%s/%s", p, e->d_name);
        rm_rf(q);
    }
    if (d) closedir(d);
    rmdir(p);
}

static unsigned char *slurp(const char *path, size_t *n) {
    *n = 0;
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long len = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(len > 0 ? (size_t)len : 1);
    if (p && len > 0 && fread(p, 1, (size_t)len, f) != (size_t)len) {
        free(p);
        p = NULL;
    }
    fclose(f);
    if (p) *n = (size_t)len;
    return p;
}

static void spit(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    DRT_CHECK(f && (n == 0 || fwrite(p, 1, n, f) == n), "cannot write %s", path);
    if (f) fclose(f);
}

static void copy_file(const char *src, const char *dst) {
    size_t n;
    unsigned char *p = slurp(src, &n);
    DRT_CHECK(p != NULL, "cannot read %s", src);
    if (p) spit(dst, p, n);
    free(p);
}

/* dir/name into buf */
static const char *at(char *buf, size_t n, const char *dir, const char *name) {
    int k = snprintf(buf, n, "%s/%s", dir, name);
    DRT_CHECK(k >= 0 && (size_t)k < n, "path too long: %s/%s", dir, name);
    return buf;
}

/* ---- safetensors files taken apart and put back ----------------------------- */

typedef struct {
    cJSON *header;
    unsigned char *raw; /* the whole file */
    size_t n_raw;
    const unsigned char *data; /* into raw */
    size_t n_data;
} st_parts;

static int st_split(const char *path, st_parts *p) {
    memset(p, 0, sizeof *p);
    p->raw = slurp(path, &p->n_raw);
    if (!p->raw || p->n_raw < 8) return 0;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p->raw[i];
    if (hlen > p->n_raw - 8) return 0;
    char *text = malloc((size_t)hlen + 1);
    memcpy(text, p->raw + 8, (size_t)hlen);
    text[hlen] = 0;
    p->header = cJSON_Parse(text);
    free(text);
    p->data = p->raw + 8 + hlen;
    p->n_data = p->n_raw - 8 - (size_t)hlen;
    return p->header != NULL;
}

static void st_free(st_parts *p) {
    cJSON_Delete(p->header);
    free(p->raw);
    memset(p, 0, sizeof *p);
}

/* length field, header JSON padded with spaces so the data section starts at
 * a file offset equal to `mod` modulo 8, then n bytes of data */
static void st_join(const char *path, const cJSON *header, unsigned mod, const void *data, size_t n) {
    char *text = cJSON_PrintUnformatted(header);
    size_t len = strlen(text);
    size_t pad = (mod + 8 - (8 + len) % 8) % 8;
    uint64_t hlen = len + pad;
    size_t total = 8 + (size_t)hlen + n;
    unsigned char *buf = malloc(total);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(hlen >> (8 * i));
    memcpy(buf + 8, text, len);
    memset(buf + 8 + len, ' ', pad);
    if (n) memcpy(buf + 8 + hlen, data, n);
    spit(path, buf, total);
    free(buf);
    free(text);
}

/* rewrites dir/model.safetensors: the header edited by `edit`, data as is */
static void st_edit(const char *dir, void (*edit)(cJSON *hdr, size_t n_data)) {
    char p[1200];
    at(p, sizeof p, dir, "model.safetensors");
    st_parts s;
    DRT_CHECK(st_split(p, &s), "cannot split %s", p);
    if (!s.header) return;
    edit(s.header, s.n_data);
    st_join(p, s.header, 0, s.data, s.n_data);
    st_free(&s);
}

/* the 8-byte length field of dir/model.safetensors set to v */
static void st_set_len(const char *dir, uint64_t v) {
    char p[1200];
    size_t n;
    unsigned char *raw = slurp(at(p, sizeof p, dir, "model.safetensors"), &n);
    if (!raw || n < 8) return;
    for (int i = 0; i < 8; i++) raw[i] = (unsigned char)(v >> (8 * i));
    spit(p, raw, n);
    free(raw);
}

/* model.safetensors replaced by an index mapping every fixture tensor to `shard` */
static void write_index(const char *dir, const char *shard) {
    char p[1200];
    st_parts s;
    DRT_CHECK(st_split(DRT_FIXTURES_DIR "/" BASE "/model.safetensors", &s), "split fixture");
    cJSON *root = cJSON_CreateObject(), *wm = cJSON_AddObjectToObject(root, "weight_map");
    const cJSON *e;
    cJSON_ArrayForEach(e, s.header) {
        if (strcmp(e->string, "__metadata__") != 0) cJSON_AddStringToObject(wm, e->string, shard);
    }
    char *text = cJSON_Print(root);
    spit(at(p, sizeof p, dir, "model.safetensors.index.json"), text, strlen(text));
    free(text);
    cJSON_Delete(root);
    st_free(&s);
    unlink(at(p, sizeof p, dir, "model.safetensors"));
}

/* ---- the directory builders ------------------------------------------------- */

static void mk_fifo(const char *dir, const char *name) {
    char p[1200];
    unlink(at(p, sizeof p, dir, name));
    DRT_CHECK(mkfifo(p, 0644) == 0, "mkfifo %s: %s", p, strerror(errno));
}
static void fifo_config(const char *d) {
    mk_fifo(d, "config.json");
}
static void fifo_weights(const char *d) {
    mk_fifo(d, "model.safetensors");
}
static void fifo_tokenizer(const char *d) {
    mk_fifo(d, "tokenizer.json");
}
static void fifo_index(const char *d) {
    char p[1200];
    unlink(at(p, sizeof p, d, "model.safetensors"));
    mk_fifo(d, "model.safetensors.index.json");
}

static void mk_subdir(const char *dir, const char *name) {
    char p[1200];
    unlink(at(p, sizeof p, dir, name));
    DRT_CHECK(mkdir(p, 0755) == 0, "mkdir %s: %s", p, strerror(errno));
}
static void dir_config(const char *d) {
    mk_subdir(d, "config.json");
}
static void dir_weights(const char *d) {
    mk_subdir(d, "model.safetensors");
}

static void mk_link(const char *dir, const char *name, const char *target) {
    char p[1200];
    unlink(at(p, sizeof p, dir, name));
    DRT_CHECK(symlink(target, p) == 0, "symlink %s: %s", p, strerror(errno));
}
static void devzero_config(const char *d) {
    mk_link(d, "config.json", "/dev/zero");
}
static void loop_config(const char *d) {
    mk_link(d, "config.json", "config.json");
}
static void loop_weights(const char *d) {
    mk_link(d, "model.safetensors", "loop.safetensors");
    mk_link(d, "loop.safetensors", "model.safetensors");
}

/* a unix socket named config.json (bound from inside the directory: a
 * socket path is limited to ~108 bytes, a build directory may be longer) */
static void socket_config(const char *d) {
    char p[1200];
    unlink(at(p, sizeof p, d, "config.json"));
    int cwd = open(".", O_RDONLY | O_DIRECTORY), fd = socket(AF_UNIX, SOCK_STREAM, 0);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    snprintf(sa.sun_path, sizeof sa.sun_path, "config.json");
    int ok = cwd >= 0 && fd >= 0 && chdir(d) == 0 && bind(fd, (struct sockaddr *)&sa, sizeof sa) == 0;
    DRT_CHECK(ok, "cannot bind a socket at %s: %s", p, strerror(errno));
    if (cwd >= 0) DRT_CHECK(fchdir(cwd) == 0, "fchdir: %s", strerror(errno));
    if (fd >= 0) close(fd);
    if (cwd >= 0) close(cwd);
}

/* a copy of the fixture's weights beside the case directories */
#define OUTSIDE ROOT "/outside.safetensors"
static void shard_parent(const char *d) {
    write_index(d, "../outside.safetensors");
}
static void shard_absolute(const char *d) {
    write_index(d, OUTSIDE);
}
static void shard_subdir(const char *d) {
    char p[1200], q[1200];
    mkdir(at(p, sizeof p, d, "sub"), 0755);
    rename(at(p, sizeof p, d, "model.safetensors"), at(q, sizeof q, d, "sub/model.safetensors"));
    write_index(d, "sub/model.safetensors");
}
static void shard_link_outside(const char *d) {
    write_index(d, "model-00001-of-00001.safetensors");
    mk_link(d, "model-00001-of-00001.safetensors", "../outside.safetensors");
}
static void shard_link_inside(const char *d) {
    char p[1200], q[1200];
    rename(at(p, sizeof p, d, "model.safetensors"), at(q, sizeof q, d, "real.safetensors"));
    write_index(d, "model-00001-of-00001.safetensors");
    mk_link(d, "model-00001-of-00001.safetensors", "real.safetensors");
}
/* a shard name pointed at a text file: its first 8 bytes, "root:x:0", read
 * as a little-endian u64 are 3475222254926655346 and must not be printed */
static void shard_text_file(const char *d) {
    char p[1200];
    const char *txt = "root:x:0:0:root:/root:/bin/bash\ndaemon:x:1:1::/usr/sbin:/usr/sbin/nologin\n";
    spit(at(p, sizeof p, d, "notes.txt"), txt, strlen(txt));
    write_index(d, "notes.txt");
}
/* a shard name that would write to the terminal were it shown raw */
static void shard_escape(const char *d) {
    write_index(d, "model\x1b[2J\xc2\x9b.safetensors");
}
/* the index with a tensor named twice in weight_map */
static void index_dup_key(const char *d) {
    char p[1200];
    write_index(d, "model.safetensors");
    size_t n;
    char *text = (char *)slurp(at(p, sizeof p, d, "model.safetensors.index.json"), &n);
    char *wm = text ? strstr(text, "\"weight_map\"") : NULL;
    char *brace = wm ? strchr(wm, '{') : NULL;
    DRT_CHECK(brace != NULL, "no weight_map in %s", p);
    if (!brace) {
        free(text);
        return;
    }
    static const char dup[] = "\"x\": \"a.safetensors\", \"x\": \"b.safetensors\", ";
    size_t at1 = (size_t)(brace - text) + 1;
    char *out = malloc(n + sizeof dup);
    memcpy(out, text, at1);
    memcpy(out + at1, dup, sizeof dup - 1);
    memcpy(out + at1 + sizeof dup - 1, text + at1, n - at1);
    spit(p, out, n + sizeof dup - 1);
    free(out);
    free(text);
}
/* 150000 distinct shard names: a quadratic de-duplication takes minutes */
static void many_shards(const char *d) {
    char p[1200];
    unlink(at(p, sizeof p, d, "model.safetensors"));
    size_t cap = 150000 * 48, o = 0;
    char *t = malloc(cap);
    o += (size_t)snprintf(t + o, cap - o, "{\"weight_map\": {");
    for (int i = 0; i < 150000; i++)
        o += (size_t)snprintf(t + o, cap - o, "%s\"t%d\": \"s%06d.safetensors\"", i ? ", " : "", i, i);
    o += (size_t)snprintf(t + o, cap - o, "}}");
    spit(at(p, sizeof p, d, "model.safetensors.index.json"), t, o);
    free(t);
}

static void len_past_file(const char *d) {
    char p[1200];
    struct stat sb;
    stat(at(p, sizeof p, d, "model.safetensors"), &sb);
    st_set_len(d, (uint64_t)sb.st_size - 8 + 1);
}
static void len_2_63(const char *d) {
    st_set_len(d, (uint64_t)1 << 63);
}
static void truncated(const char *d) {
    char p[1200];
    size_t n;
    unsigned char *raw = slurp(at(p, sizeof p, d, "model.safetensors"), &n);
    if (raw && n > 100) spit(p, raw, n - 100);
    free(raw);
}
static void empty_weights(const char *d) {
    char p[1200];
    spit(at(p, sizeof p, d, "model.safetensors"), "", 0);
}
static void not_json(const char *d) {
    char p[1200];
    unsigned char b[8 + 16] = {16};
    memcpy(b + 8, "this is not json", 16);
    spit(at(p, sizeof p, d, "model.safetensors"), b, sizeof b);
}

static void set_offsets(cJSON *hdr, const char *name, cJSON *b, cJSON *e) {
    cJSON *off = cJSON_CreateArray();
    cJSON_AddItemToArray(off, b);
    cJSON_AddItemToArray(off, e);
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(hdr, name), "data_offsets", off);
}
static void edit_past_end(cJSON *hdr, size_t n_data) {
    /* model.norm.weight: 64 f32, its end 4 bytes past the data section */
    set_offsets(hdr, "model.norm.weight", cJSON_CreateNumber((double)n_data + 4 - 256),
                cJSON_CreateNumber((double)n_data + 4));
}
static void edit_overlap(cJSON *hdr, size_t n_data) {
    cJSON *a = cJSON_GetObjectItemCaseSensitive(
        cJSON_GetObjectItemCaseSensitive(hdr, "model.layers.0.input_layernorm.weight"), "data_offsets");
    set_offsets(hdr, "model.layers.0.post_attention_layernorm.weight", cJSON_Duplicate(cJSON_GetArrayItem(a, 0), 1),
                cJSON_Duplicate(cJSON_GetArrayItem(a, 1), 1));
}
static void edit_offsets_2_64(cJSON *hdr, size_t n_data) {
    set_offsets(hdr, "model.norm.weight", cJSON_CreateRaw("0"), cJSON_CreateRaw("18446744073709551616"));
}
static void edit_shape_overflow(cJSON *hdr, size_t n_data) {
    cJSON *sh = cJSON_CreateArray();
    for (int i = 0; i < 3; i++) cJSON_AddItemToArray(sh, cJSON_CreateRaw("4294967296"));
    cJSON_ReplaceItemInObjectCaseSensitive(cJSON_GetObjectItemCaseSensitive(hdr, "model.norm.weight"), "shape", sh);
}
static void offsets_past_end(const char *d) {
    st_edit(d, edit_past_end);
}
static void offsets_overlap(const char *d) {
    st_edit(d, edit_overlap);
}
static void offsets_2_64(const char *d) {
    st_edit(d, edit_offsets_2_64);
}
static void shape_overflow(const char *d) {
    st_edit(d, edit_shape_overflow);
}

/* an empty tensor `name` of dtype `dt` added at the end of the data section:
 * a tensor the layout does not read */
static const char *g_extra_name, *g_extra_dtype;
static void edit_add_empty(cJSON *hdr, size_t n_data) {
    cJSON *t = cJSON_CreateObject(), *sh = cJSON_CreateArray(), *off = cJSON_CreateArray();
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(0));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)n_data));
    cJSON_AddItemToArray(off, cJSON_CreateNumber((double)n_data));
    cJSON_AddStringToObject(t, "dtype", g_extra_dtype);
    cJSON_AddItemToObject(t, "shape", sh);
    cJSON_AddItemToObject(t, "data_offsets", off);
    cJSON_AddItemToObject(hdr, g_extra_name, t);
}
static void add_empty(const char *d, const char *name, const char *dtype) {
    g_extra_name = name, g_extra_dtype = dtype;
    st_edit(d, edit_add_empty);
}
/* a DiffLlama tensor in a checkpoint whose config.json says llama */
static void stray_lambda(const char *d) {
    add_empty(d, "model.layers.0.self_attn.lambda_q1", "F32");
}
/* an optimizer's U64 step counter in a Hugging Face checkpoint */
static void stray_u64(const char *d) {
    add_empty(d, "opt.step", "U64");
}
/* the RoPE table older Hugging Face checkpoints stored: harmless */
static void rope_inv_freq(const char *d) {
    add_empty(d, "model.layers.0.self_attn.rotary_emb.inv_freq", "F32");
}

/* a tied checkpoint that also stores lm_head.weight: the embedding's bytes
 * appended under that name, with byte `flip` changed (-1: none) */
static void add_head_copy(const char *d, long flip) {
    char p[1200];
    at(p, sizeof p, d, "model.safetensors");
    st_parts s;
    DRT_CHECK(st_split(p, &s), "cannot split %s", p);
    if (!s.header) return;
    cJSON *e = cJSON_GetObjectItemCaseSensitive(s.header, "model.embed_tokens.weight");
    cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    size_t b = (size_t)cJSON_GetArrayItem(off, 0)->valuedouble, en = (size_t)cJSON_GetArrayItem(off, 1)->valuedouble;
    unsigned char *data = malloc(s.n_data + (en - b));
    memcpy(data, s.data, s.n_data);
    memcpy(data + s.n_data, s.data + b, en - b);
    if (flip >= 0) data[s.n_data + (size_t)flip] ^= 0x40;
    cJSON *t = cJSON_Duplicate(e, 1), *no = cJSON_CreateArray();
    cJSON_AddItemToArray(no, cJSON_CreateNumber((double)s.n_data));
    cJSON_AddItemToArray(no, cJSON_CreateNumber((double)(s.n_data + (en - b))));
    cJSON_ReplaceItemInObjectCaseSensitive(t, "data_offsets", no);
    cJSON_AddItemToObject(s.header, "lm_head.weight", t);
    st_join(p, s.header, 0, data, s.n_data + (en - b));
    free(data);
    st_free(&s);
}
static void tied_head_copy(const char *d) {
    add_head_copy(d, -1);
}
static void tied_head_differs(const char *d) {
    add_head_copy(d, 1001);
}

/* a sharded checkpoint whose weight_map lists a U64 tensor: the index
 * accepts it, the loader then refuses it as a tensor no layout reads */
static void shard_foreign(const char *d) {
    char p[1200], q[1200];
    add_empty(d, "opt.step", "U64");
    rename(at(p, sizeof p, d, "model.safetensors"), at(q, sizeof q, d, "model-00001-of-00001.safetensors"));
    write_index(d, "model-00001-of-00001.safetensors");
    size_t n;
    char *text = (char *)slurp(at(p, sizeof p, d, "model.safetensors.index.json"), &n);
    cJSON *root = text ? cJSON_ParseWithLength(text, n) : NULL;
    free(text);
    DRT_CHECK(root != NULL, "cannot read back %s", p);
    if (!root) return;
    cJSON_AddStringToObject(cJSON_GetObjectItemCaseSensitive(root, "weight_map"), "opt.step",
                            "model-00001-of-00001.safetensors");
    text = cJSON_Print(root);
    spit(p, text, strlen(text));
    free(text);
    cJSON_Delete(root);
}

/* diff-mlx: an LM head it never has, optimizer state it skips, the names
 * with and without its "model." prefix at once, no weights file, and a
 * weight of a dtype diffrt does not compute with */
static void mlx_lm_head(const char *d) {
    add_empty(d, "lm_head.weight", "F32");
}
static void mlx_opt_step(const char *d) {
    add_empty(d, "opt.step", "U64");
}
static void mlx_bare_embed(const char *d) {
    add_empty(d, "tok_embed.weight", "F32");
}
static void mlx_no_weights(const char *d) {
    char p[1200];
    unlink(at(p, sizeof p, d, "model.safetensors"));
}
static void edit_norm_u64(cJSON *hdr, size_t n_data) {
    (void)n_data;
    cJSON *t = cJSON_GetObjectItemCaseSensitive(hdr, "model.final_norm.scale"), *sh = cJSON_CreateArray();
    cJSON_AddItemToArray(sh, cJSON_CreateNumber(32)); /* the same 256 bytes as F32 [64] */
    cJSON_ReplaceItemInObjectCaseSensitive(t, "dtype", cJSON_CreateString("U64"));
    cJSON_ReplaceItemInObjectCaseSensitive(t, "shape", sh);
}
static void mlx_norm_u64(const char *d) {
    st_edit(d, edit_norm_u64);
}

/* the same header and data, the data section at an odd offset */
static void misaligned(const char *d) {
    char p[1200];
    st_parts s;
    DRT_CHECK(st_split(at(p, sizeof p, d, "model.safetensors"), &s), "split %s", p);
    if (s.header) st_join(p, s.header, 1, s.data, s.n_data);
    st_free(&s);
}

/* ---- the cases ---------------------------------------------------------------- */

typedef enum { CMD_RUN, CMD_INFO, CMD_PROMPT } cmd_kind;

typedef struct {
    const char *name;
    const char *fixture;           /* NULL: BASE */
    const char *cfg[8];            /* config.json edits: key, JSON value (NULL: removed) */
    void (*make)(const char *dir); /* then this, on the copied directory */
    cmd_kind cmd;
    int want_rc;
    const char *must_say[2]; /* in the one stderr line; "@" stands for the case directory */
    const char *must_not;    /* never in stderr */
} hostile_case;

// clang-format off
static const hostile_case CASES[] = {
    /* 1. sizes: config dimensions are bounded before anything is sized from them */
    {"heads_x_head_dim_past_2^64", "hf_diffllama_gqa", {"num_attention_heads", "4294967296", "head_dim", "4294967296"}, NULL, CMD_RUN, 1,
     {"@/config.json: field \"num_attention_heads\" is 4294967296, allowed 1..4096", NULL}, NULL},
    {"heads_x_head_dim_2^58", "hf_diffllama_gqa", {"num_attention_heads", "536870912", "head_dim", "536870912"}, NULL, CMD_RUN, 1,
     {"field \"num_attention_heads\" is 536870912, allowed 1..4096", NULL}, NULL},
    {"head_dim_over_bound", NULL, {"head_dim", "8192", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"head_dim\" is 8192, allowed 2..4096", NULL}, NULL},
    {"heads_x_head_dim_vs_q_proj", NULL, {"num_attention_heads", "4096", "head_dim", "4096"}, NULL, CMD_RUN, 1,
     {"tensor \"model.layers.0.self_attn.q_proj.weight\" has shape (64, 64) but config.json implies (16777216, 64)", NULL}, NULL},
    {"vocab_x_dim_past_2^64", NULL, {"vocab_size", "4294967296", "hidden_size", "4294967296"}, NULL, CMD_RUN, 1,
     {"field \"vocab_size\" is 4294967296, allowed 1..16777216", NULL}, NULL},
    {"vocab_x_dim_vs_embedding", NULL, {"vocab_size", "16777216", "hidden_size", "1048576"}, NULL, CMD_RUN, 1,
     {"tensor \"model.embed_tokens.weight\" has shape (256, 64) but config.json implies (16777216, 1048576)", NULL}, NULL},
    {"layers_1e8", NULL, {"num_hidden_layers", "100000000", NULL, NULL}, NULL, CMD_INFO, 1,
     {"@/config.json: field \"num_hidden_layers\" is 100000000, allowed 1..4096", NULL}, NULL},
    {"layers_1e7", NULL, {"num_hidden_layers", "10000000", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"num_hidden_layers\" is 10000000, allowed 1..4096", NULL}, NULL},
    {"layers_4096_of_2", NULL, {"num_hidden_layers", "4096", NULL, NULL}, NULL, CMD_RUN, 1,
     {"@/model.safetensors: missing tensor \"model.layers.2.input_layernorm.weight\"", NULL}, NULL},
    /* 2. numbers: range-checked before conversion, the field and range named */
    {"layers_negative", NULL, {"num_hidden_layers", "-2", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"num_hidden_layers\" is -2, allowed 1..4096", NULL}, NULL},
    {"layers_fraction", NULL, {"num_hidden_layers", "2.5", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"num_hidden_layers\" is 2.5, expected an integer in 1..4096", NULL}, NULL},
    {"layers_1e300", NULL, {"num_hidden_layers", "1e300", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"num_hidden_layers\" is 1e+300, allowed 1..4096", NULL}, NULL},
    {"hidden_size_1e400_inf", NULL, {"hidden_size", "1e400", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"hidden_size\" is inf, allowed 1..1048576", NULL}, NULL},
    {"vocab_nan_string", NULL, {"vocab_size", "\"NaN\"", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"vocab_size\" is a string, expected an integer in 1..16777216", NULL}, NULL},
    {"eos_past_int", NULL, {"eos_token_id", "4294967296", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"eos_token_id\" is 4294967296, allowed 0..2147483647", NULL}, NULL},
    {"bos_list_past_int", NULL, {"bos_token_id", "[1, 1e12]", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"bos_token_id[1]\" is 1000000000000, allowed 0..2147483647", NULL}, NULL},
    {"eos_negative", NULL, {"eos_token_id", "-5", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"eos_token_id\" is -5, allowed 0..2147483647", NULL}, NULL},
    {"rope_theta_1e300", NULL, {"rope_parameters", "{\"rope_theta\": 1e300, \"rope_type\": \"default\"}", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"rope_parameters.rope_theta\" is 1e+300, allowed (0, 1e+12]", NULL}, NULL},
    {"rms_norm_eps_negative", NULL, {"rms_norm_eps", "-1e-6", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"rms_norm_eps\" is -1e-06, allowed (0, 1]", NULL}, NULL},
    {"rope_factor_zero", NULL, {"rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"linear\", \"factor\": 0}", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"rope_parameters.factor\" is 0, allowed (0.001, 65536]", NULL}, NULL},
    {"llama3_old_ctx_fraction", "hf_diffllama_gqa", {"rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16.5}", NULL, NULL}, NULL, CMD_RUN, 1,
     {"field \"rope_parameters.original_max_position_embeddings\" is 16.5, expected an integer in 1..16777216", NULL}, NULL},
    /* strings from the file stay on one line in the message */
    {"model_type_newline", NULL, {"model_type", "\"gpt2\\nSECOND LINE\"", NULL, NULL}, NULL, CMD_RUN, 1,
     {"model_type \"gpt2\\x0aSECOND LINE\" is not supported", NULL}, NULL},
    {"rope_type_escape", NULL, {"rope_parameters", "{\"rope_theta\": 10000.0, \"factor\": 2.0, \"rope_type\": \"yarn\\u001b[2J\\r\"}", NULL, NULL}, NULL, CMD_RUN, 1,
     {"rope_scaling type \"yarn\\x1b[2J\\x0d\" is not supported", NULL}, NULL},
    {"rope_type_csi", NULL, {"rope_parameters", "{\"rope_theta\": 10000.0, \"factor\": 2.0, \"rope_type\": \"yarn\\u009b2J\\u0085\"}", NULL, NULL}, NULL, CMD_RUN, 1,
     {"rope_scaling type \"yarn\\u009b2J\\u0085\" is not supported", NULL}, NULL},
    {"model_type_raw_bytes", NULL, {"model_type", "\"gpt2\xc2\x9b\xff\xfe\"", NULL, NULL}, NULL, CMD_RUN, 1,
     {"model_type \"gpt2\\u009b\\xff\\xfe\" is not supported", NULL}, NULL},
    {"shard_name_escape", NULL, {0}, shard_escape, CMD_RUN, 1,
     {"shard \"model\\x1b[2J\\u009b.safetensors\" is not a plain file name", NULL}, NULL},
    /* one reading: a key twice in the shard index is refused, not read as cJSON's first */
    {"index_duplicate_key", NULL, {0}, index_dup_key, CMD_RUN, 1,
     {"@/model.safetensors.index.json: duplicate key \"x\" (at $.weight_map.x)", NULL}, NULL},
    /* 3. files: regular files only, never a blocking open; shards stay inside */
    {"config_fifo", NULL, {0}, fifo_config, CMD_INFO, 1, {"@/config.json: not a regular file (a FIFO)", NULL}, NULL},
    {"weights_fifo", NULL, {0}, fifo_weights, CMD_RUN, 1, {"@/model.safetensors: not a regular file (a FIFO)", NULL}, NULL},
    {"index_fifo", NULL, {0}, fifo_index, CMD_RUN, 1, {"@/model.safetensors.index.json: not a regular file (a FIFO)", NULL}, NULL},
    {"tokenizer_fifo", NULL, {0}, fifo_tokenizer, CMD_PROMPT, 1, {"@/tokenizer.json: not a regular file (a FIFO)", NULL}, NULL},
    {"config_directory", NULL, {0}, dir_config, CMD_RUN, 1, {"@/config.json: not a regular file (a directory)", NULL}, NULL},
    {"weights_directory", NULL, {0}, dir_weights, CMD_RUN, 1, {"@/model.safetensors: not a regular file (a directory)", NULL}, NULL},
    {"config_dev_zero", NULL, {0}, devzero_config, CMD_RUN, 1, {"@/config.json: not a regular file (a character device)", NULL}, NULL},
    {"config_socket", NULL, {0}, socket_config, CMD_RUN, 1, {"@/config.json: not a regular file (a socket)", NULL}, NULL},
    {"config_symlink_loop", NULL, {0}, loop_config, CMD_RUN, 1, {"@/config.json: cannot open: Too many levels of symbolic links", NULL}, NULL},
    {"weights_symlink_loop", NULL, {0}, loop_weights, CMD_RUN, 1, {"@/model.safetensors: cannot open: Too many levels of symbolic links", NULL}, NULL},
    {"shard_parent_traversal", NULL, {0}, shard_parent, CMD_RUN, 1,
     {"@/model.safetensors.index.json: weight_map: tensor \"", "\": shard \"../outside.safetensors\" is not a plain file name in the model directory"}, NULL},
    {"shard_absolute_path", NULL, {0}, shard_absolute, CMD_RUN, 1, {"outside.safetensors\" is not a plain file name in the model directory", NULL}, NULL},
    {"shard_with_slash", NULL, {0}, shard_subdir, CMD_RUN, 1, {"shard \"sub/model.safetensors\" is not a plain file name", NULL}, NULL},
    {"shard_symlink_outside", NULL, {0}, shard_link_outside, CMD_RUN, 1,
     {"shard \"model-00001-of-00001.safetensors\": ", "model-00001-of-00001.safetensors: is a symbolic link to a file outside the model directory"}, NULL},
    {"shard_symlink_inside", NULL, {0}, shard_link_inside, CMD_RUN, 0, {NULL, NULL}, NULL},
    {"shard_is_a_text_file", NULL, {0}, shard_text_file, CMD_RUN, 1,
     {"notes.txt: not a safetensors file (header length field exceeds the file size of", NULL}, "3475222254926655346"},
    {"index_150000_shards", NULL, {0}, many_shards, CMD_RUN, 1,
     {"shard \"s000000.safetensors\": ", "s000000.safetensors: cannot open: No such file or directory"}, NULL},
    /* the safetensors file itself */
    {"header_length_past_file", NULL, {0}, len_past_file, CMD_RUN, 1,
     {"@/model.safetensors: not a safetensors file (header length field exceeds the file size of", NULL}, NULL},
    {"header_length_2^63", NULL, {0}, len_2_63, CMD_RUN, 1,
     {"@/model.safetensors: not a safetensors file (header length field exceeds the file size of", NULL}, "9223372036854775808"},
    {"data_truncated", NULL, {0}, truncated, CMD_RUN, 1, {"end past the data section", NULL}, NULL},
    {"data_offsets_past_end", NULL, {0}, offsets_past_end, CMD_RUN, 1, {"tensor \"model.norm.weight\": data_offsets", "end past the data section"}, NULL},
    {"data_offsets_overlap", NULL, {0}, offsets_overlap, CMD_RUN, 1, {"model.layers.0.input_layernorm.weight", "overlap"}, NULL},
    {"data_offsets_2^64", NULL, {0}, offsets_2_64, CMD_RUN, 1, {"tensor \"model.norm.weight\": \"data_offsets\" must be an array of 2 non-negative integers", NULL}, NULL},
    {"shape_bytes_past_2^64", NULL, {0}, shape_overflow, CMD_RUN, 1, {"tensor \"model.norm.weight\": shape [4294967296, 4294967296, 4294967296] of F32 overflows 64-bit byte count", NULL}, NULL},
    {"weights_empty_file", NULL, {0}, empty_weights, CMD_RUN, 1, {"@/model.safetensors: file is 0 bytes, too short", NULL}, NULL},
    {"header_not_json", NULL, {0}, not_json, CMD_RUN, 1, {"@/model.safetensors: header is not valid JSON", NULL}, NULL},
    /* 4. misaligned data loads, and runs like the aligned file */
    /* transformers-5 spellings (rope_parameters, dtype) in the own layouts' configs: the same output */
    {"v1_transformers5_config", "unilm_v1", {"rope_theta", NULL, "rope_scaling", NULL, "torch_dtype", NULL, "rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"default\"}"}, NULL, CMD_RUN, 0, {NULL, NULL}, NULL},
    {"v2_transformers5_config", "diff_v2", {"rope_theta", NULL, "rope_scaling", NULL, "torch_dtype", NULL, "rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 16}"}, NULL, CMD_RUN, 0, {NULL, NULL}, NULL},
    {"v2_rope_parameters_used", "diff_v2", {"rope_theta", NULL, "rope_scaling", NULL, "rope_parameters", "{\"rope_theta\": 10000.0, \"rope_type\": \"yarn\", \"factor\": 8.0}", NULL, NULL}, NULL, CMD_RUN, 1,
     {"rope_scaling type \"yarn\" is not supported", NULL}, NULL},
    /* model_type "diff_llama": two unrelated families, refused by name */
    {"diff_llama_peihaowang", NULL, {"model_type", "\"diff_llama\"", "attn_family", "\"diff_attn\""}, NULL, CMD_INFO, 1,
     {"model_type \"diff_llama\" with \"attn_family\" is peihaowang's differential Llama", "no public modeling code"}, NULL},
    {"diff_llama_amazingvince", NULL, {"model_type", "\"diff_llama\"", "num_kv_heads", "2"}, NULL, CMD_INFO, 1,
     {"is amazingvince/diff-llama, which is not differential attention", "no causal mask"}, NULL},
    {"diff_llama_neither", NULL, {"model_type", "\"diff_llama\"", NULL, NULL}, NULL, CMD_INFO, 1,
     {"model_type \"diff_llama\" is used by two unrelated families", "this config has neither key"}, NULL},
    /* tensors the layout does not read: an error unless known harmless */
    {"stray_tensor", NULL, {0}, stray_lambda, CMD_RUN, 1,
     {"@/model.safetensors: tensor \"model.layers.0.self_attn.lambda_q1\" is not part of the hf-llama layout", NULL}, NULL},
    {"stray_tensor_u64", NULL, {0}, stray_u64, CMD_RUN, 1,
     {"@/model.safetensors: tensor \"opt.step\" (U64) is not part of the hf-llama layout", NULL}, NULL},
    {"rotary_inv_freq_ignored", NULL, {0}, rope_inv_freq, CMD_RUN, 0, {NULL, NULL}, NULL},
    {"tied_lm_head_copy", "hf_llama_bf16", {0}, tied_head_copy, CMD_RUN, 0, {NULL, NULL}, NULL},
    {"tied_lm_head_differs", "hf_llama_bf16", {0}, tied_head_differs, CMD_RUN, 1,
     {"@/model.safetensors: tensor \"lm_head.weight\" is not a copy of \"model.embed_tokens.weight\", but config.json says tie_word_embeddings", NULL}, NULL},
    {"shard_stray_u64", NULL, {0}, shard_foreign, CMD_RUN, 1,
     {"@/model-00001-of-00001.safetensors: tensor \"opt.step\" (U64) is not part of the hf-llama layout", NULL}, NULL},
    /* diff-mlx: its own config keys, prefix, file names and skipped tensors */
    {"mlx_dims_disagree", "mlx_diff", {"model", "{\"dim\": 64, \"n_layers\": 2, \"n_heads_vanilla\": 4, \"qk_head_dim\": 8, \"vocab_size\": 256, \"mlp_intermediate\": 96}", NULL, NULL}, NULL, CMD_INFO, 1,
     {"@/config.json: model.n_heads_vanilla 4 x model.qk_head_dim 8 != model.dim 64", NULL}, NULL},
    {"mlx_layers_1e7", "mlx_diff", {"model", "{\"dim\": 64, \"n_layers\": 10000000, \"n_heads_vanilla\": 4, \"qk_head_dim\": 16, \"vocab_size\": 256, \"mlp_intermediate\": 96}", NULL, NULL}, NULL, CMD_RUN, 1,
     {"@/config.json: field \"model.n_layers\" is 10000000, allowed 1..4096", NULL}, NULL},
    {"mlx_stray_tensor", "mlx_diff", {0}, mlx_lm_head, CMD_RUN, 1,
     {"@/model.safetensors: tensor \"lm_head.weight\" is not part of the mlx-diff layout", NULL}, NULL},
    {"mlx_opt_step_skipped", "mlx_diff", {0}, mlx_opt_step, CMD_RUN, 0, {NULL, NULL}, NULL},
    {"mlx_both_prefixes", "mlx_diff", {0}, mlx_bare_embed, CMD_RUN, 1,
     {"both \"model.tok_embed.weight\" and \"tok_embed.weight\"", NULL}, NULL},
    {"mlx_no_weights", "mlx_diff", {0}, mlx_no_weights, CMD_RUN, 1,
     {"@: no model.safetensors, model.safetensors.index.json or latest.safetensors", NULL}, NULL},
    {"mlx_weight_u64", "mlx_diff", {0}, mlx_norm_u64, CMD_RUN, 1,
     {"@/model.safetensors: tensor \"model.final_norm.scale\" is U64; expected F32, F16 or BF16", NULL}, NULL},
    {"data_misaligned", NULL, {0}, misaligned, CMD_RUN, 0, {NULL, NULL}, NULL},
    {"data_misaligned_f16", "hf_diffllama_f16", {0}, misaligned, CMD_RUN, 0, {NULL, NULL}, NULL},
};
// clang-format on

/* ---- running the CLI ---------------------------------------------------------- */

typedef struct {
    int rc; /* exit status; 128 + signal when killed */
    int timed_out;
    double secs;
    long maxrss_kb;
    char out[8192], err[8192];
} cli_result;

static void read_into(const char *path, char *buf, size_t n) {
    size_t len;
    unsigned char *p = slurp(path, &len);
    len = p ? (len < n - 1 ? len : n - 1) : 0;
    if (p) memcpy(buf, p, len);
    buf[len] = 0;
    free(p);
}

/* fork/exec diffrt with stdout and stderr to files; polls with wait4 and
 * kills the child at TIMEOUT_S */
static void run_cli(char *const argv[], cli_result *r) {
    memset(r, 0, sizeof *r);
    const char *out = ROOT "/.stdout", *err = ROOT "/.stderr";
    double t0 = drt_now_s();
    pid_t pid = fork();
    if (pid == 0) {
        int o = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644), e = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        int in = open("/dev/null", O_RDONLY);
        if (o < 0 || e < 0 || in < 0 || dup2(o, 1) < 0 || dup2(e, 2) < 0 || dup2(in, 0) < 0) _exit(126);
#ifndef DIFFRT_SANITIZE_BUILD
        /* a loader that sizes allocations from the config could otherwise take
         * the machine's memory; sanitizers reserve terabytes of address space */
        struct rlimit rl = {(rlim_t)8 << 30, (rlim_t)8 << 30};
        setrlimit(RLIMIT_AS, &rl);
#endif
        execv(DRT_CLI_PATH, argv);
        _exit(127);
    }
    DRT_CHECK(pid > 0, "fork: %s", strerror(errno));
    if (pid <= 0) return;
    int st = 0;
    struct rusage ru;
    for (;;) {
        pid_t w = wait4(pid, &st, WNOHANG, &ru);
        if (w == pid) break;
        if (w < 0 && errno != EINTR) break;
        if (drt_now_s() - t0 > TIMEOUT_S) {
            kill(pid, SIGKILL);
            wait4(pid, &st, 0, &ru);
            r->timed_out = 1;
            break;
        }
        nanosleep(&(struct timespec){0, 5000000}, NULL);
    }
    r->secs = drt_now_s() - t0;
    r->maxrss_kb = ru.ru_maxrss;
    r->rc = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
    read_into(out, r->out, sizeof r->out);
    read_into(err, r->err, sizeof r->err);
}

static void run_cmd(cmd_kind k, const char *dir, cli_result *r) {
    char *run[] = {"diffrt", "run", "--model", (char *)dir, "--tokens", "1,2,3", "-n", "2", "--backend", "ref", NULL};
    char *info[] = {"diffrt", "info", "--model", (char *)dir, NULL};
    char *prompt[] = {"diffrt", "run", "--model", (char *)dir, "--prompt", "hi", "-n", "2", "--backend", "ref", NULL};
    run_cli(k == CMD_RUN ? run : k == CMD_INFO ? info : prompt, r);
}

/* needle with "@" replaced by dir */
static int says(const char *msg, const char *needle, const char *dir) {
    char want[2048];
    const char *a = strchr(needle, '@');
    if (!a) return strstr(msg, needle) != NULL;
    snprintf(want, sizeof want, "%.*s%s%s", (int)(a - needle), needle, dir, a + 1);
    return strstr(msg, want) != NULL;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; *s; s++) n += *s == '\n';
    return n;
}

static void make_case_dir(const hostile_case *c, char *dir, size_t n) {
    snprintf(dir, n, "%s/%s", ROOT, c->name);
    rm_rf(dir);
    DRT_CHECK(mkdir(dir, 0755) == 0, "mkdir %s: %s", dir, strerror(errno));
    const char *fx = c->fixture ? c->fixture : BASE;
    char src[1200], dst[1200];
    snprintf(src, sizeof src, "%s/%s/model.safetensors", DRT_FIXTURES_DIR, fx);
    copy_file(src, at(dst, sizeof dst, dir, "model.safetensors"));
    snprintf(src, sizeof src, "%s/%s/config.json", DRT_FIXTURES_DIR, fx);
    size_t len;
    char *text = (char *)slurp(src, &len);
    cJSON *root = text ? cJSON_ParseWithLength(text, len) : NULL;
    free(text);
    DRT_CHECK(root != NULL, "cannot parse %s", src);
    for (int i = 0; root && i < 8 && c->cfg[i]; i += 2) {
        cJSON_DeleteItemFromObjectCaseSensitive(root, c->cfg[i]);
        if (!c->cfg[i + 1]) continue;
        /* raw: the text exactly as written ("1e400", "4294967296"), not as
         * cJSON would print the double it parses it into */
        cJSON_AddItemToObject(root, c->cfg[i], cJSON_CreateRaw(c->cfg[i + 1]));
    }
    char *cfg = root ? cJSON_Print(root) : NULL;
    if (cfg) spit(at(dst, sizeof dst, dir, "config.json"), cfg, strlen(cfg));
    free(cfg);
    cJSON_Delete(root);
    if (c->cmd == CMD_PROMPT) {
        snprintf(src, sizeof src, "%s/../tokenizer/bytes256.json", DRT_FIXTURES_DIR);
        copy_file(src, at(dst, sizeof dst, dir, "tokenizer.json"));
    }
    if (c->make) c->make(dir);
}

static long g_base_rss_kb[3]; /* by cmd_kind */

/* what a clean model prints: the stdout a successful case must match */
static void reference_output(const char *fixture, char *out, size_t n) {
    char dir[1200];
    cli_result r;
    snprintf(dir, sizeof dir, "%s/%s", DRT_FIXTURES_DIR, fixture);
    run_cmd(CMD_RUN, dir, &r);
    DRT_CHECK(r.rc == 0, "%s: clean run exited %d: %s", fixture, r.rc, r.err);
    snprintf(out, n, "%s", r.out);
}

static void run_case(const hostile_case *c) {
    char dir[1200];
    make_case_dir(c, dir, sizeof dir);
    cli_result r;
    run_cmd(c->cmd, dir, &r);
    /* the message as the note lists it: first line, without "diffrt: " */
    const char *msg = strncmp(r.err, "diffrt: ", 8) == 0 ? r.err + 8 : r.err;
    int mlen = (int)strcspn(msg, "\n");
    printf("%-28s exit %d %5.2f s %4ld MiB  %.*s%s\n", c->name, r.rc, r.secs, r.maxrss_kb >> 10,
           c->want_rc == 0 && r.rc == 0 ? 7 : mlen, c->want_rc == 0 && r.rc == 0 ? "(loads)" : msg,
           r.timed_out ? "  TIMED OUT" : "");
    DRT_CHECK(!r.timed_out, "case %s: still running after %.0f s (killed)", c->name, TIMEOUT_S);
    DRT_CHECK(r.rc == c->want_rc, "case %s: exit %d, expected %d; stderr: %s", c->name, r.rc, c->want_rc, r.err);
    if (c->want_rc == 0) {
        char want[8192];
        reference_output(c->fixture ? c->fixture : BASE, want, sizeof want);
        DRT_CHECK(strcmp(r.out, want) == 0, "case %s: printed %s, the clean model %s", c->name, r.out, want);
        return;
    }
    DRT_CHECK(count_lines(r.err) == 1 && r.err[strlen(r.err) - 1] == '\n',
              "case %s: stderr is not exactly one line:\n%s", c->name, r.err);
    for (int i = 0; i < 2; i++)
        if (c->must_say[i])
            DRT_CHECK(says(r.err, c->must_say[i], dir), "case %s: stderr lacks \"%s\": %s", c->name, c->must_say[i],
                      r.err);
    if (c->must_not)
        DRT_CHECK(strstr(r.err, c->must_not) == NULL, "case %s: stderr shows raw bytes as %s: %s", c->name, c->must_not,
                  r.err);
    /* no byte of a file reaches the terminal raw: C0, DEL, C1, not UTF-8 */
    const unsigned char *u = (const unsigned char *)r.err;
    long raw = -1;
    for (size_t i = 0; u[i] && raw < 0;) {
        unsigned b = u[i];
        size_t len = b < 0x80                 ? 1
                     : b >= 0xc2 && b <= 0xdf ? 2
                     : b >= 0xe0 && b <= 0xef ? 3
                     : b >= 0xf0 && b <= 0xf4 ? 4
                                              : 0;
        int bad = (b < 0x20 && !(b == '\n' && u[i + 1] == 0)) || b == 0x7f || len == 0 ||
                  (b == 0xc2 && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f);
        for (size_t j = 1; j < len && !bad; j++) bad = (u[i + j] & 0xc0) != 0x80;
        if (bad) raw = (long)i;
        i += len ? len : 1;
    }
    DRT_CHECK(raw < 0, "case %s: stderr holds the raw byte 0x%02x at %ld: %s", c->name, raw < 0 ? 0 : u[raw], raw,
              r.err);
    DRT_CHECK(r.maxrss_kb <= g_base_rss_kb[c->cmd] + RSS_SLACK_KB,
              "case %s: peak RSS %ld KiB, the same command failing at once peaks at %ld KiB", c->name, r.maxrss_kb,
              g_base_rss_kb[c->cmd]);
}

/* ---- misaligned data in process: alignment, in place, bit-identical logits ---- */

/* number of weights a backend reads whose pointer is not aligned for its dtype */
static int misaligned_weights(const drt_model *m) {
    int bad = 0;
    const drt_host_weight *g[] = {&m->embed, &m->final_norm, &m->lm_head};
    for (int i = 0; i < 3; i++) bad += g[i]->data && (uintptr_t)g[i]->data % drt_dtype_size(g[i]->type);
    for (int l = 0; l < m->info.n_layers; l++) {
        const drt_layer_weights *lw = &m->layers[l];
        const drt_host_weight *ws[] = {&lw->attn_norm, &lw->ffn_norm, &lw->wq, &lw->wk, &lw->wv, &lw->wo,
                                       &lw->w_lambda,  &lw->subln,    &lw->wg, &lw->wu, &lw->wd};
        for (int i = 0; i < 11; i++) bad += ws[i]->data && (uintptr_t)ws[i]->data % drt_dtype_size(ws[i]->type) != 0;
    }
    return bad;
}

static float *logits_of(const char *dir, const char *backend, int *vocab, int *misaligned_n, int *embed_copied) {
    drt_model *m = NULL;
    drt_session *s = NULL;
    float *lg = NULL;
    if (drt_model_load(dir, &m) != DRT_OK) {
        DRT_CHECK(0, "%s: %s", dir, drt_last_error());
        return NULL;
    }
    *misaligned_n = misaligned_weights(m);
    *embed_copied = m->embed.owned != NULL;
    *vocab = m->info.vocab;
    drt_session_opts so = {.backend = backend, .max_ctx = 16, .threads = 2};
    int32_t ids[6] = {1, 5, 9, 200, 3, 7};
    lg = malloc(sizeof(float) * 6 * (size_t)*vocab);
    if (drt_session_create(m, &so, &s) != DRT_OK || drt_session_forward(s, ids, 6, lg, 1) != DRT_OK) {
        DRT_CHECK(0, "%s on %s: %s", dir, backend, drt_last_error());
        free(lg);
        lg = NULL;
    }
    drt_session_free(s);
    drt_model_free(m);
    return lg;
}

static void misaligned_logits(const char *fixture, unsigned mod) {
    char src[1200], dir[1200], p[1200], q[1200];
    snprintf(src, sizeof src, "%s/%s", DRT_FIXTURES_DIR, fixture);
    snprintf(dir, sizeof dir, "%s/logits_%s_mod%u", ROOT, fixture, mod);
    rm_rf(dir);
    mkdir(dir, 0755);
    copy_file(at(p, sizeof p, src, "config.json"), at(q, sizeof q, dir, "config.json"));
    st_parts s;
    DRT_CHECK(st_split(at(p, sizeof p, src, "model.safetensors"), &s), "split %s", p);
    if (!s.header) return;
    st_join(at(p, sizeof p, dir, "model.safetensors"), s.header, mod, s.data, s.n_data);
    st_free(&s);
    const char *backends[] = {"ref", "cpu"};
    for (int b = 0; b < 2; b++) {
        int va = 0, vb = 0, bad_a = -1, bad_b = -1, copied_a = -1, copied_b = -1;
        float *a = logits_of(src, backends[b], &va, &bad_a, &copied_a);
        float *m = logits_of(dir, backends[b], &vb, &bad_b, &copied_b);
        DRT_CHECK(bad_a == 0 && bad_b == 0, "%s mod %u: %d / %d weights misaligned in memory", fixture, mod, bad_a,
                  bad_b);
        DRT_CHECK(!copied_a, "%s: the aligned embedding was copied, not used in place", fixture);
        DRT_CHECK(copied_b, "%s mod %u: the misaligned embedding is used in place", fixture, mod);
        int same = a && m && va == vb && memcmp(a, m, sizeof(float) * 6 * (size_t)va) == 0;
        printf("%-28s %s: %s\n", fixture, backends[b],
               same ? "logits bit-identical to the aligned file" : "LOGITS DIFFER");
        DRT_CHECK(same, "%s with its data at offset %u mod 8: logits on %s differ from the aligned file", fixture, mod,
                  backends[b]);
        free(a);
        free(m);
    }
}

/* ---- the checked-arithmetic helpers themselves ---------------------------------- */

static void checked_arithmetic(void) {
    int64_t r;
    uint64_t u;
    size_t z;
    DRT_CHECK(drt_mul_ok(4096, 4096, &r) && r == 16777216, "4096 * 4096");
    DRT_CHECK(!drt_mul_ok((int64_t)1 << 32, (int64_t)1 << 31, &r), "2^63 said to fit int64");
    DRT_CHECK(drt_mul_ok(-((int64_t)1 << 31), (int64_t)1 << 32, &r) && r == INT64_MIN, "-2^63");
    DRT_CHECK(!drt_add_ok(INT64_MAX, 1, &r), "INT64_MAX + 1");
    DRT_CHECK(!drt_mul_u64_ok((uint64_t)1 << 32, (uint64_t)1 << 32, &u), "2^64 said to fit uint64");
    DRT_CHECK(drt_mul_u64_ok((uint64_t)1 << 32, ((uint64_t)1 << 32) - 1, &u), "2^64 - 2^32");
    DRT_CHECK(!drt_add_u64_ok(UINT64_MAX, 1, &u), "UINT64_MAX + 1");
    DRT_CHECK(!drt_mul_size_ok(SIZE_MAX / 2 + 1, 2, &z), "SIZE_MAX + 1");
    DRT_CHECK(!drt_add_size_ok(SIZE_MAX, 1, &z), "SIZE_MAX + 1 (add)");
    DRT_CHECK(!drt_bytes_ok(-1, 4, &z), "a negative count is not a size");
    DRT_CHECK(!drt_bytes_ok(INT64_MAX, 8, &z), "INT64_MAX * 8 bytes");
    DRT_CHECK(drt_bytes_ok(1 << 20, 4, &z) && z == (size_t)4 << 20, "1 Mi floats");
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0); /* in order with the FAIL lines on stderr */
    signal(SIGPIPE, SIG_IGN);
    rm_rf(ROOT);
    DRT_CHECK(mkdir(ROOT, 0755) == 0, "mkdir %s: %s", ROOT, strerror(errno));
    copy_file(DRT_FIXTURES_DIR "/" BASE "/model.safetensors", OUTSIDE);
    checked_arithmetic();

    /* the peak RSS of each command when it fails before reading anything: the
     * bound the error cases are held to (the CLI maps its GPU libraries at
     * start, and info also probes every backend) */
    for (int k = CMD_RUN; k <= CMD_PROMPT; k++) {
        cli_result r;
        run_cmd((cmd_kind)k, ROOT "/no_such_model", &r);
        DRT_CHECK(r.rc == 1 && strstr(r.err, "no_such_model/config.json"), "baseline command %d: exit %d: %s", k, r.rc,
                  r.err);
        g_base_rss_kb[k] = r.maxrss_kb;
    }
    printf("baseline: run / info fail at once with peaks of %ld / %ld MiB; error cases may add %ld "
           "MiB\n",
           g_base_rss_kb[CMD_RUN] >> 10, g_base_rss_kb[CMD_INFO] >> 10, RSS_SLACK_KB >> 10);

    int n = (int)(sizeof CASES / sizeof CASES[0]);
    for (int i = 0; i < n; i++) run_case(&CASES[i]);
    printf("%d hostile directories\n", n);

    misaligned_logits("hf_llama_gqa", 1);
    misaligned_logits("hf_llama_gqa", 2);
    misaligned_logits("hf_diffllama_f16", 1);
    misaligned_logits("unilm_v1", 3);
    misaligned_logits("diff_v2_bf16", 1);
    return drt_test_summary("test_hostile_model");
}
