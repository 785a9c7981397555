/* safetensors reader/writer: round trips, then tables of bad files. Every bad
 * file must give the expected status and a one-line message naming the file
 * and the offending tensor/field, and must not crash (this suite also runs
 * under -fsanitize=address,undefined). Set DRT_TEST_VERBOSE=1 to print the
 * message of every bad case. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "drt_test.h"
#include "safetensors.h"

#define TMP DRT_TMP_DIR "/st_tmp"

static int g_verbose;

static void make_dir(const char *p) {
    if (mkdir(p, 0755) != 0 && errno != EEXIST) DRT_CHECK(0, "mkdir %s: %s", p, strerror(errno));
}

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *fp = fopen(path, "wb");
    DRT_CHECK(fp != NULL, "cannot create %s", path);
    if (!fp) return;
    DRT_CHECK(n == 0 || fwrite(p, 1, n, fp) == n, "short write to %s", path);
    fclose(fp);
}

/* 8-byte little-endian length field, then `hlen` header bytes, then n_data
 * bytes of a counting pattern. */
static void write_raw(const char *path, uint64_t len_field, const char *header, size_t hlen, size_t n_data) {
    size_t n = 8 + hlen + n_data;
    unsigned char *buf = malloc(n);
    DRT_CHECK(buf != NULL, "malloc");
    if (!buf) return;
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(len_field >> (8 * i));
    memcpy(buf + 8, header, hlen);
    for (size_t i = 0; i < n_data; i++) buf[8 + hlen + i] = (unsigned char)(i * 7 + 1);
    write_bytes(path, buf, n);
    free(buf);
}

/* Offset of the first byte of m that could act on a terminal (a C0 control,
 * DEL, a C1 control U+0080..U+009F, a byte that is not UTF-8), or -1. */
static long raw_control_at(const char *m) {
    const unsigned char *u = (const unsigned char *)m;
    for (size_t i = 0; u[i];) {
        unsigned c = u[i];
        size_t len = c < 0x80                 ? 1
                     : c >= 0xc2 && c <= 0xdf ? 2
                     : c >= 0xe0 && c <= 0xef ? 3
                     : c >= 0xf0 && c <= 0xf4 ? 4
                                              : 0;
        if (c < 0x20 || c == 0x7f || len == 0 || (c == 0xc2 && u[i + 1] >= 0x80 && u[i + 1] <= 0x9f)) return (long)i;
        for (size_t j = 1; j < len; j++)
            if ((u[i + j] & 0xc0) != 0x80) return (long)i;
        i += len;
    }
    return -1;
}

/* status, one line, no raw control bytes, and every non-NULL needle in the message */
static void check_error(const char *label, drt_status got, drt_status want, const char *n1, const char *n2,
                        const char *n3) {
    const char *msg = drt_last_error();
    long raw = raw_control_at(msg);
    DRT_CHECK(raw < 0, "%s: message holds the raw byte 0x%02x at %ld", label, raw < 0 ? 0 : (unsigned char)msg[raw],
              raw);
    const char *needles[3] = {n1, n2, n3};
    DRT_CHECK(got == want, "%s: status %s, expected %s (message: %s)", label, drt_status_str(got), drt_status_str(want),
              msg);
    DRT_CHECK(strchr(msg, '\n') == NULL, "%s: message is more than one line: %s", label, msg);
    for (int i = 0; i < 3; i++)
        if (needles[i])
            DRT_CHECK(strstr(msg, needles[i]) != NULL, "%s: message lacks \"%s\": %s", label, needles[i], msg);
    if (g_verbose) printf("  %-22s %-12s %s\n", label, drt_status_str(got), msg);
}

/* ---- round trips ---------------------------------------------------------- */

static void test_round_trip(void) {
    float a[2 * 3] = {1, -2, 3.5f, 0, 1e-3f, -7};
    uint16_t h[4] = {0x3c00, 0xc000, 0x7bff, 0x0001}; /* f16 bit patterns */
    uint16_t bf[2 * 1 * 2 * 3];
    for (int i = 0; i < 12; i++) bf[i] = (uint16_t)(0x3f80 + i);
    int32_t ids[5] = {0, -1, 2147483647, -2147483647 - 1, 42};
    float scalar = 3.25f;
    drt_st_write_tensor w[] = {
        {"model.embed.weight", DRT_F32, 2, {2, 3}, a},  {"h", DRT_F16, 1, {4}, h},
        {"layers.0.bf", DRT_BF16, 4, {2, 1, 2, 3}, bf}, {"ids", DRT_I32, 1, {5}, ids},
        {"scalar", DRT_F32, 0, {0}, &scalar},           {"empty", DRT_F32, 2, {0, 7}, NULL},
    };
    int n = (int)(sizeof w / sizeof w[0]);
    const char *path = TMP "/round_trip.safetensors";
    drt_status st = drt_st_write(path, w, n);
    DRT_CHECK(st == DRT_OK, "write %s: %s", path, drt_last_error());

    /* header length is padded to a multiple of 8 with spaces */
    char *raw = NULL;
    size_t raw_len = 0;
    st = drt_read_text_file(path, &raw, &raw_len);
    DRT_CHECK(st == DRT_OK && raw_len >= 8, "reading back %s: %s", path, drt_last_error());
    if (raw && raw_len >= 8) {
        uint64_t hlen = 0;
        for (int i = 7; i >= 0; i--) hlen = hlen << 8 | (unsigned char)raw[i];
        DRT_CHECK(hlen % 8 == 0, "header length %llu not a multiple of 8", (unsigned long long)hlen);
        DRT_CHECK(hlen < raw_len && raw[8] == '{', "header does not start with '{'");
        DRT_CHECK(raw_len == 8 + hlen + 24 + 8 + 24 + 20 + 4, "file size %zu", raw_len);
    }
    free(raw);

    drt_st_file f;
    st = drt_st_open(path, &f);
    DRT_CHECK(st == DRT_OK, "open %s: %s", path, drt_last_error());
    if (st != DRT_OK) return;
    DRT_CHECK(f.n_tensors == n, "n_tensors %d, expected %d", f.n_tensors, n);
    const unsigned char *prev_end = NULL;
    for (int i = 0; i < n; i++) {
        const drt_st_tensor *t = drt_st_find(&f, w[i].name);
        DRT_CHECK(t != NULL, "tensor %s not found", w[i].name);
        if (!t) continue;
        size_t nb = drt_dtype_size(w[i].dtype);
        for (int k = 0; k < w[i].ndim; k++) nb *= (size_t)w[i].shape[k];
        DRT_CHECK(strcmp(t->name, w[i].name) == 0, "%s: name %s", w[i].name, t->name);
        DRT_CHECK(t->dtype == w[i].dtype, "%s: dtype %s", w[i].name, drt_dtype_name(t->dtype));
        DRT_CHECK(t->ndim == w[i].ndim, "%s: ndim %d, expected %d", w[i].name, t->ndim, w[i].ndim);
        for (int k = 0; k < w[i].ndim && k < 4; k++)
            DRT_CHECK(t->shape[k] == w[i].shape[k], "%s: shape[%d]", w[i].name, k);
        DRT_CHECK(t->nbytes == nb, "%s: nbytes %zu, expected %zu", w[i].name, t->nbytes, nb);
        DRT_CHECK(nb == 0 || memcmp(t->data, w[i].data, nb) == 0, "%s: data differs", w[i].name);
        /* written contiguously in the given order */
        const unsigned char *d = t->data;
        if (prev_end) DRT_CHECK(d == prev_end, "%s: not right after the previous tensor", t->name);
        prev_end = d + nb;
    }
    DRT_CHECK(drt_st_find(&f, "absent") == NULL, "find of an absent name");
    DRT_CHECK(drt_st_find(&f, "") == NULL, "find of the empty name");
    drt_st_close(&f);
    DRT_CHECK(f.map == NULL && f.tensors == NULL && f.n_tensors == 0, "close clears the struct");
    drt_st_close(&f); /* twice is harmless */
}

/* the exact bytes the reference implementation writes for one tensor */
static void test_exact_bytes(void) {
    const char *path = TMP "/exact.safetensors";
    float one = 1.0f;
    drt_st_write_tensor w = {"a", DRT_F32, 1, {1}, &one};
    DRT_CHECK(drt_st_write(path, &w, 1) == DRT_OK, "write: %s", drt_last_error());
    static const char hdr[] = "{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]}}  ";
    unsigned char want[8 + sizeof hdr - 1 + 4] = {56, 0, 0, 0, 0, 0, 0, 0};
    memcpy(want + 8, hdr, sizeof hdr - 1);
    memcpy(want + 8 + sizeof hdr - 1, &one, 4);
    char *got = NULL;
    size_t len = 0;
    DRT_CHECK(drt_read_text_file(path, &got, &len) == DRT_OK, "read: %s", drt_last_error());
    DRT_CHECK(len == sizeof want && got && memcmp(got, want, len) == 0,
              "bytes differ from the reference layout (%zu bytes, header %.64s)", len, got ? got + 8 : "");
    free(got);

    /* zero tensors: "{}" padded to 8 */
    path = TMP "/zero.safetensors";
    DRT_CHECK(drt_st_write(path, NULL, 0) == DRT_OK, "write zero tensors: %s", drt_last_error());
    drt_st_file f;
    DRT_CHECK(drt_st_open(path, &f) == DRT_OK && f.n_tensors == 0, "open zero tensors: %s", drt_last_error());
    DRT_CHECK(drt_st_find(&f, "a") == NULL, "find in an empty file");
    drt_st_close(&f);
}

static void write_index(const char *dir, const char *json) {
    char p[1024];
    snprintf(p, sizeof p, "%s/model.safetensors.index.json", dir);
    write_bytes(p, json, strlen(json));
}

static void test_sharded(void) {
    const char *dir = TMP "/sharded";
    make_dir(dir);
    float a[4] = {1, 2, 3, 4}, b[2] = {5, 6}, c[3] = {7, 8, 9};
    drt_st_write_tensor s1[] = {{"a", DRT_F32, 2, {2, 2}, a}, {"b", DRT_F32, 1, {2}, b}};
    drt_st_write_tensor s2[] = {{"c", DRT_F32, 1, {3}, c}};
    DRT_CHECK(drt_st_write(TMP "/sharded/model-00001-of-00002.safetensors", s1, 2) == DRT_OK, "write shard 1: %s",
              drt_last_error());
    DRT_CHECK(drt_st_write(TMP "/sharded/model-00002-of-00002.safetensors", s2, 1) == DRT_OK, "write shard 2: %s",
              drt_last_error());
    write_index(dir, "{\"metadata\": {\"total_size\": 36}, \"weight_map\": {"
                     "\"a\": \"model-00001-of-00002.safetensors\","
                     "\"c\": \"model-00002-of-00002.safetensors\","
                     "\"b\": \"model-00001-of-00002.safetensors\"}}");
    drt_st_set s;
    drt_status st = drt_st_set_open_dir(dir, &s);
    DRT_CHECK(st == DRT_OK, "open sharded dir: %s", drt_last_error());
    if (st == DRT_OK) {
        DRT_CHECK(s.n_files == 2, "n_files %d, expected 2", s.n_files);
        const drt_st_tensor *ta = drt_st_set_find(&s, "a"), *tb = drt_st_set_find(&s, "b"),
                            *tc = drt_st_set_find(&s, "c");
        DRT_CHECK(ta && ta->nbytes == 16 && memcmp(ta->data, a, 16) == 0, "sharded a");
        DRT_CHECK(tb && tb->nbytes == 8 && memcmp(tb->data, b, 8) == 0, "sharded b");
        DRT_CHECK(tc && tc->nbytes == 12 && memcmp(tc->data, c, 12) == 0, "sharded c");
        DRT_CHECK(drt_st_set_find(&s, "d") == NULL, "set find of an absent name");
        drt_st_set_close(&s);
        DRT_CHECK(s.n_files == 0 && s.files == NULL, "set close clears the struct");
    }

    /* a single model.safetensors wins over an index */
    dir = TMP "/single";
    make_dir(dir);
    DRT_CHECK(drt_st_write(TMP "/single/model.safetensors", s2, 1) == DRT_OK, "write single: %s", drt_last_error());
    st = drt_st_set_open_dir(dir, &s);
    DRT_CHECK(st == DRT_OK && s.n_files == 1 && drt_st_set_find(&s, "c"), "single dir: %s", drt_last_error());
    drt_st_set_close(&s);
}

/* ---- bad headers ----------------------------------------------------------- */

typedef struct {
    const char *name;   /* the file is TMP/<name>.safetensors */
    const char *header; /* JSON text after the length field */
    size_t header_len;  /* 0: strlen(header) */
    size_t n_data;      /* bytes after the header */
    drt_status want;
    const char *needle[2]; /* must appear in the message besides the file name */
    int n_tensors;         /* when want == DRT_OK */
} header_case;

#define T(dt, sh, off) "{\"dtype\":" dt ",\"shape\":" sh ",\"data_offsets\":" off "}"

// clang-format off
static const header_case header_cases[] = {
    /* valid edge cases */
    {"ok_empty",            "{}", 0, 0, DRT_OK, {0}, 0},
    {"ok_metadata_only",    "{\"__metadata__\":{\"format\":\"pt\"}}", 0, 0, DRT_OK, {0}, 0},
    {"ok_padded",           "{\"w\":" T("\"F32\"", "[2]", "[0,8]") "}       ", 0, 8, DRT_OK, {0}, 1},
    {"ok_scalar_and_empty", "{\"s\":" T("\"I32\"", "[]", "[0,4]") ",\"e\":" T("\"BF16\"", "[3,0]", "[4,4]")
                            ",\"z\":" T("\"F16\"", "[0]", "[4,4]") "}", 0, 4, DRT_OK, {0}, 3},
    {"ok_gap_and_trailing", "{\"w\":" T("\"F16\"", "[2]", "[4,8]") "}", 0, 16, DRT_OK, {0}, 1},
    /* not JSON / not an object */
    {"bad_not_json",      "{\"w\": ", 0, 0, DRT_ERR_FORMAT, {"not valid JSON", NULL}, 0},
    {"bad_trailing_junk", "{} x",     0, 0, DRT_ERR_FORMAT, {"not valid JSON", NULL}, 0},
    /* as strict as serde_json, which the safetensors library reads with:
     * a second value, a BOM, a control byte cJSON alone takes as blank */
    {"bad_trailing_value", "{}{}",    0, 0, DRT_ERR_FORMAT, {"header is not valid JSON: text after the value at byte 2", NULL}, 0},
    {"bad_bom_header",    "\xEF\xBB\xBF{}", 0, 0, DRT_ERR_FORMAT, {"header starts with a UTF-8 byte order mark", NULL}, 0},
    {"bad_control_blank", "{\x0c}",   0, 0, DRT_ERR_FORMAT, {"header is not valid JSON: control byte 0x0C at byte 1", NULL}, 0},
    {"bad_control_in_key", "{\"__metadata__\":{\"a\tb\":\"x\"}}", 0, 0, DRT_ERR_FORMAT, {"control byte 0x09 at byte 19", NULL}, 0},
    {"bad_empty_header",  "",         0, 0, DRT_ERR_FORMAT, {"not valid JSON", NULL}, 0},
    {"bad_nul_in_header", "{}\0  ",   5, 0, DRT_ERR_FORMAT, {"NUL byte", NULL}, 0},
    {"bad_array_root",    "[1, 2]",   0, 0, DRT_ERR_FORMAT, {"not an object", NULL}, 0},
    {"bad_string_root",   "\"w\"",    0, 0, DRT_ERR_FORMAT, {"not an object", NULL}, 0},
    {"bad_entry_number",  "{\"w\": 5}",         0, 0, DRT_ERR_FORMAT, {"\"w\"", "not a JSON object"}, 0},
    {"bad_entry_array",   "{\"w\": [\"F32\"]}", 0, 0, DRT_ERR_FORMAT, {"\"w\"", "not a JSON object"}, 0},
    /* offsets and sizes */
    {"bad_offsets_past_end", "{\"model.norm.weight\":" T("\"F32\"", "[2]", "[0,8]") "}", 0, 4,
     DRT_ERR_FORMAT, {"\"model.norm.weight\"", "end past the data section (4 bytes)"}, 0},
    {"bad_offsets_huge", "{\"w\":" T("\"F32\"", "[0]", "[9007199254740992,9007199254740992]") "}", 0, 4,
     DRT_ERR_FORMAT, {"\"w\"", "end past the data section"}, 0},
    {"bad_begin_after_end", "{\"w\":" T("\"F32\"", "[2]", "[8,0]") "}", 0, 8,
     DRT_ERR_FORMAT, {"\"w\"", "[8, 0] begin after end"}, 0},
    {"bad_nbytes", "{\"w\":" T("\"F32\"", "[3]", "[0,8]") "}", 0, 12,
     DRT_ERR_FORMAT, {"\"w\"", "hold 8 bytes, shape [3] of F32 needs 12"}, 0},
    {"bad_nbytes_bf16", "{\"w\":" T("\"BF16\"", "[2,2]", "[0,16]") "}", 0, 16,
     DRT_ERR_FORMAT, {"\"w\"", "shape [2, 2] of BF16 needs 8"}, 0},
    {"bad_shape_overflow", "{\"w\":" T("\"F32\"", "[4294967296,4294967296,4294967296]", "[0,0]") "}", 0, 0,
     DRT_ERR_FORMAT, {"\"w\"", "overflows"}, 0},
    {"bad_overlap", "{\"a\":" T("\"F32\"", "[2]", "[0,8]") ",\"b\":" T("\"F32\"", "[2]", "[4,12]") "}", 0, 12,
     DRT_ERR_FORMAT, {"\"a\" [0, 8] and \"b\" [4, 12] overlap", NULL}, 0},
    {"bad_overlap_same", "{\"a\":" T("\"F16\"", "[2]", "[0,4]") ",\"b\":" T("\"F16\"", "[2]", "[0,4]") "}", 0, 4,
     DRT_ERR_FORMAT, {"overlap", "\"b\""}, 0},
    {"bad_overlap_empty_inside", "{\"a\":" T("\"F32\"", "[2]", "[0,8]") ",\"e\":" T("\"F32\"", "[0]", "[4,4]") "}", 0, 8,
     DRT_ERR_FORMAT, {"overlap", "\"e\""}, 0},
    {"bad_duplicate_name", "{\"a\":" T("\"F32\"", "[0]", "[0,0]") ",\"a\":" T("\"F32\"", "[0]", "[0,0]") "}", 0, 0,
     DRT_ERR_FORMAT, {"duplicate key \"a\"", "(at $.a)"}, 0},
    /* one reading, as Python's json and the safetensors library: a key twice
     * at any depth, or a name cut short by a NUL, is refused */
    {"bad_duplicate_metadata_key", "{\"__metadata__\":{\"format\":\"pt\",\"format\":\"np\"}}", 0, 0,
     DRT_ERR_FORMAT, {"duplicate key \"format\"", "(at $.__metadata__.format)"}, 0},
    {"bad_duplicate_field", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1],\"shape\":[2],\"data_offsets\":[0,4]}}", 0, 8,
     DRT_ERR_FORMAT, {"duplicate key \"shape\"", "(at $.w.shape)"}, 0},
    {"bad_name_nul_escape", "{\"a\\u0000b\":" T("\"F32\"", "[0]", "[0,0]") "}", 0, 0,
     DRT_ERR_FORMAT, {"key \"a\\u0000b\"", "holds a NUL"}, 0},
    {"bad_value_nul_escape", "{\"__metadata__\":{\"format\":\"p\\u0000t\"}}", 0, 0,
     DRT_ERR_FORMAT, {"string \"p\\u0000t\"", "holds a NUL"}, 0},
    /* dtype */
    /* standard dtypes diffrt does not compute with open, into f.foreign
     * (n_tensors counts `tensors` only; test_foreign checks the list) */
    {"ok_foreign_f64",      "{\"w\":" T("\"F64\"", "[1]", "[0,8]") "}", 0, 8, DRT_OK, {0}, 0},
    {"ok_foreign_u64_i8",   "{\"s\":" T("\"U64\"", "[]", "[0,8]") ",\"w\":" T("\"F32\"", "[1]", "[8,12]")
                            ",\"b\":" T("\"I8\"", "[1]", "[12,13]") "}", 0, 13, DRT_OK, {0}, 1},
    {"bad_foreign_size",    "{\"w\":" T("\"U64\"", "[2]", "[0,8]") "}", 0, 8, DRT_ERR_FORMAT, {"\"w\"", "shape [2] of U64 needs 16"}, 0},
    {"bad_foreign_overlap", "{\"w\":" T("\"U64\"", "[1]", "[0,8]") ",\"v\":" T("\"F32\"", "[1]", "[4,8]") "}", 0, 8, DRT_ERR_FORMAT, {"overlap", NULL}, 0},
    {"bad_dtype_f128",      "{\"w\":" T("\"F128\"", "[1]", "[0,16]") "}", 0, 16, DRT_ERR_UNSUPPORTED, {"\"w\"", "dtype \"F128\" not supported"}, 0},
    {"bad_dtype_foo",       "{\"w\":" T("\"FOO\"", "[1]", "[0,4]") "}", 0, 4, DRT_ERR_UNSUPPORTED, {"\"w\"", "\"FOO\""}, 0},
    {"bad_dtype_lowercase", "{\"w\":" T("\"f32\"", "[1]", "[0,4]") "}", 0, 4, DRT_ERR_UNSUPPORTED, {"\"w\"", "\"f32\""}, 0},
    {"bad_dtype_number",    "{\"w\":" T("32",      "[1]", "[0,4]") "}", 0, 4, DRT_ERR_FORMAT, {"\"w\"", "\"dtype\" is not a string"}, 0},
    /* block formats: U8 [rows, blocks, block bytes] named in __metadata__ (docs/quantization.md) */
    {"ok_q8_0", "{\"__metadata__\":{\"diffrt.dtype.w\":\"q8_0\"},\"w\":" T("\"U8\"", "[2,1,34]", "[0,68]") "}", 0, 68, DRT_OK, {0}, 1},
    {"ok_q4_0", "{\"__metadata__\":{\"diffrt.dtype.w\":\"q4_0\"},\"w\":" T("\"U8\"", "[3,2,18]", "[0,108]") "}", 0, 108, DRT_OK, {0}, 1},
    {"bad_u8_no_metadata", "{\"w\":" T("\"U8\"", "[2,1,34]", "[0,68]") "}", 0, 68, DRT_ERR_UNSUPPORTED, {"\"w\"", "U8 without a block format"}, 0},
    {"bad_u8_other_tensor", "{\"__metadata__\":{\"diffrt.dtype.v\":\"q8_0\"},\"w\":" T("\"U8\"", "[2,1,34]", "[0,68]") "}", 0, 68, DRT_ERR_UNSUPPORTED, {"\"w\"", "U8 without a block format"}, 0},
    {"bad_u8_format", "{\"__metadata__\":{\"diffrt.dtype.w\":\"q5_1\"},\"w\":" T("\"U8\"", "[2,1,34]", "[0,68]") "}", 0, 68, DRT_ERR_UNSUPPORTED, {"\"w\"", "block format \"q5_1\""}, 0},
    {"bad_q8_block_bytes", "{\"__metadata__\":{\"diffrt.dtype.w\":\"q8_0\"},\"w\":" T("\"U8\"", "[2,1,18]", "[0,36]") "}", 0, 36, DRT_ERR_FORMAT, {"\"w\"", "shape [rows, blocks, 34]"}, 0},
    {"bad_q4_two_dims", "{\"__metadata__\":{\"diffrt.dtype.w\":\"q4_0\"},\"w\":" T("\"U8\"", "[2,18]", "[0,36]") "}", 0, 36, DRT_ERR_FORMAT, {"\"w\"", "got 2 dims"}, 0},
    {"bad_q8_nbytes", "{\"__metadata__\":{\"diffrt.dtype.w\":\"q8_0\"},\"w\":" T("\"U8\"", "[2,1,34]", "[0,60]") "}", 0, 68, DRT_ERR_FORMAT, {"\"w\"", "needs 68"}, 0},
    /* missing fields */
    {"bad_missing_dtype",   "{\"w\":{\"shape\":[1],\"data_offsets\":[0,4]}}",   0, 4, DRT_ERR_FORMAT, {"\"w\"", "missing field \"dtype\""}, 0},
    {"bad_missing_shape",   "{\"w\":{\"dtype\":\"F32\",\"data_offsets\":[0,4]}}", 0, 4, DRT_ERR_FORMAT, {"\"w\"", "missing field \"shape\""}, 0},
    {"bad_missing_offsets", "{\"w\":{\"dtype\":\"F32\",\"shape\":[1]}}",         0, 4, DRT_ERR_FORMAT, {"\"w\"", "missing field \"data_offsets\""}, 0},
    /* shape */
    {"bad_shape_negative", "{\"w\":" T("\"F32\"", "[2,-3]",      "[0,8]") "}", 0, 8, DRT_ERR_FORMAT, {"\"w\"", "shape[1] is -3"}, 0},
    {"bad_shape_fraction", "{\"w\":" T("\"F32\"", "[1.5]",       "[0,4]") "}", 0, 4, DRT_ERR_FORMAT, {"\"w\"", "shape[0] is 1.5"}, 0},
    {"bad_shape_string",   "{\"w\":" T("\"F32\"", "[\"2\"]",     "[0,8]") "}", 0, 8, DRT_ERR_FORMAT, {"\"w\"", "shape[0] is not a number"}, 0},
    {"bad_shape_too_big",  "{\"w\":" T("\"F32\"", "[1e300]",     "[0,8]") "}", 0, 8, DRT_ERR_FORMAT, {"\"w\"", "shape[0] is 1e+300"}, 0},
    {"bad_shape_object",   "{\"w\":" T("\"F32\"", "{}",          "[0,4]") "}", 0, 4, DRT_ERR_FORMAT, {"\"w\"", "\"shape\" is not an array"}, 0},
    {"bad_shape_5d",       "{\"w\":" T("\"F32\"", "[1,1,1,1,1]", "[0,4]") "}", 0, 4, DRT_ERR_UNSUPPORTED, {"\"w\"", "5 dims, at most 4"}, 0},
    /* data_offsets */
    {"bad_offsets_one",      "{\"w\":" T("\"F32\"", "[1]", "[4]")       "}", 0, 4, DRT_ERR_FORMAT, {"\"w\"", "\"data_offsets\" must be an array of 2"}, 0},
    {"bad_offsets_three",    "{\"w\":" T("\"F32\"", "[1]", "[0,4,8]")   "}", 0, 8, DRT_ERR_FORMAT, {"\"w\"", "\"data_offsets\" must be an array of 2"}, 0},
    {"bad_offsets_negative", "{\"w\":" T("\"F32\"", "[1]", "[-4,0]")    "}", 0, 4, DRT_ERR_FORMAT, {"\"w\"", "\"data_offsets\""}, 0},
    {"bad_offsets_string",   "{\"w\":" T("\"F32\"", "[1]", "[\"0\",4]") "}", 0, 4, DRT_ERR_FORMAT, {"\"w\"", "\"data_offsets\""}, 0},
    {"bad_offsets_object",   "{\"w\":" T("\"F32\"", "[1]", "{\"0\":4}") "}", 0, 4, DRT_ERR_FORMAT, {"\"w\"", "\"data_offsets\""}, 0},
    /* a name with a newline must not break the one-line message; no control
     * character (C0, DEL, C1 such as U+009B CSI) or byte that is not UTF-8
     * reaches the terminal: each is shown escaped (check_error checks every
     * message for raw ones) */
    {"bad_name_newline", "{\"a\\nb\":" T("\"F65\"", "[1]", "[0,8]") "}", 0, 8, DRT_ERR_UNSUPPORTED, {"\"a\\x0ab\"", NULL}, 0},
    {"bad_name_esc", "{\"a\\u001b[2Jb\\u007f\":" T("\"F65\"", "[1]", "[0,8]") "}", 0, 8, DRT_ERR_UNSUPPORTED, {"\"a\\x1b[2Jb\\x7f\"", NULL}, 0},
    {"bad_name_c1_escape", "{\"a\\u009b2J\\u0085\":" T("\"F65\"", "[1]", "[0,8]") "}", 0, 8, DRT_ERR_UNSUPPORTED, {"\"a\\u009b2J\\u0085\"", NULL}, 0},
    {"bad_name_c1_raw", "{\"a\xc2\x9b" "2J\xe2\x80\xae\":" T("\"F65\"", "[1]", "[0,8]") "}", 0, 8, DRT_ERR_UNSUPPORTED, {"\"a\\u009b2J\\u202e\"", NULL}, 0},
    {"bad_name_invalid_utf8", "{\"a\xff\xc2\xe2\x82 \xc3\xa9\":" T("\"F65\"", "[1]", "[0,8]") "}", 0, 8, DRT_ERR_UNSUPPORTED, {"\"a\\xff\\xc2\\xe2\\x82 \xc3\xa9\"", NULL}, 0},
    {"bad_dtype_esc", "{\"w\":" T("\"F\\u001b]0;x\\u0007\"", "[1]", "[0,4]") "}", 0, 4, DRT_ERR_UNSUPPORTED, {"dtype \"F\\x1b]0;x\\x07\"", NULL}, 0},
};
// clang-format on

static void test_header_cases(void) {
    int n = (int)(sizeof header_cases / sizeof header_cases[0]);
    for (int i = 0; i < n; i++) {
        const header_case *c = &header_cases[i];
        char path[512], fname[128];
        snprintf(fname, sizeof fname, "%s.safetensors", c->name);
        snprintf(path, sizeof path, TMP "/%s", fname);
        size_t hlen = c->header_len ? c->header_len : strlen(c->header);
        write_raw(path, hlen, c->header, hlen, c->n_data);
        drt_st_file f;
        memset(&f, 0x5a, sizeof f); /* open must initialise everything */
        drt_status st = drt_st_open(path, &f);
        if (c->want == DRT_OK) {
            DRT_CHECK(st == DRT_OK, "%s: %s", c->name, drt_last_error());
            DRT_CHECK(st != DRT_OK || f.n_tensors == c->n_tensors, "%s: n_tensors %d, expected %d", c->name,
                      f.n_tensors, c->n_tensors);
            if (st == DRT_OK) drt_st_close(&f);
            continue;
        }
        check_error(c->name, st, c->want, fname, c->needle[0], c->needle[1]);
        DRT_CHECK(f.map == NULL && f.tensors == NULL && f.n_tensors == 0 && f.path == NULL,
                  "%s: failed open leaves the struct non-empty", c->name);
        drt_st_close(&f); /* closing a failed open is harmless */
    }
}

/* ---- bad files made by damaging a valid one -------------------------------- */

/* how much of the valid file is kept */
typedef enum { KEEP_ALL, KEEP_FIRST, CUT_LAST, KEEP_HALF_HEADER } keep_mode;

typedef struct {
    const char *name;
    keep_mode keep;
    size_t n;    /* bytes for KEEP_FIRST / CUT_LAST */
    int set_len; /* overwrite the length field with len_value */
    uint64_t len_value;
    drt_status want;
    const char *needle[2];
    const char *must_not; /* the length field as a number: never echoed */
} damage_case;

/* the source file holds "a" (24 bytes) then "b" (16 bytes) */
// clang-format off
static const damage_case damage_cases[] = {
    {"cut_in_data",   CUT_LAST,         6, 0, 0, DRT_ERR_FORMAT, {"\"b\"", "[24, 40] end past the data section (34 bytes)"}, NULL},
    {"cut_in_header", KEEP_HALF_HEADER, 0, 0, 0, DRT_ERR_FORMAT, {"not a safetensors file", "header length field exceeds the file size of 64 bytes"}, "112"},
    {"cut_in_length", KEEP_FIRST,       5, 0, 0, DRT_ERR_FORMAT, {"5 bytes", "too short"}, NULL},
    {"cut_to_empty",  KEEP_FIRST,       0, 0, 0, DRT_ERR_FORMAT, {"0 bytes", "too short"}, NULL},
    {"len_past_end",  KEEP_ALL, 0, 1, 4096,           DRT_ERR_FORMAT, {"not a safetensors file", "header length field exceeds the file size of 160 bytes"}, "4096"},
    {"len_max",       KEEP_ALL, 0, 1, UINT64_MAX,     DRT_ERR_FORMAT, {"not a safetensors file", "header length field exceeds the file size"}, "18446744073709551615"},
    {"len_wraps",     KEEP_ALL, 0, 1, UINT64_MAX - 7, DRT_ERR_FORMAT, {"not a safetensors file", "header length field exceeds the file size"}, "18446744073709551608"},
    {"len_zero",      KEEP_ALL, 0, 1, 0,              DRT_ERR_FORMAT, {"not valid JSON", NULL}, NULL},
    {"len_short",     KEEP_ALL, 0, 1, 16,             DRT_ERR_FORMAT, {"not valid JSON", NULL}, NULL},
};
// clang-format on

static void test_damage_cases(void) {
    const char *good = TMP "/damage_src.safetensors";
    float a[6] = {1, 2, 3, 4, 5, 6}, b[4] = {7, 8, 9, 10};
    drt_st_write_tensor w[] = {{"a", DRT_F32, 2, {2, 3}, a}, {"b", DRT_F32, 1, {4}, b}};
    DRT_CHECK(drt_st_write(good, w, 2) == DRT_OK, "write: %s", drt_last_error());
    char *bytes = NULL;
    size_t len = 0;
    DRT_CHECK(drt_read_text_file(good, &bytes, &len) == DRT_OK && len > 48, "read back: %s", drt_last_error());
    if (!bytes || len <= 48) {
        free(bytes);
        return;
    }
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | (unsigned char)bytes[i];

    int n = (int)(sizeof damage_cases / sizeof damage_cases[0]);
    for (int i = 0; i < n; i++) {
        const damage_case *c = &damage_cases[i];
        char path[512], fname[128];
        snprintf(fname, sizeof fname, "%s.safetensors", c->name);
        snprintf(path, sizeof path, TMP "/%s", fname);
        size_t keep = len;
        if (c->keep == KEEP_FIRST) keep = c->n;
        if (c->keep == CUT_LAST) keep = len - c->n;
        if (c->keep == KEEP_HALF_HEADER) keep = 8 + (size_t)hlen / 2;
        char *buf = malloc(len);
        if (!buf) continue;
        memcpy(buf, bytes, len);
        if (c->set_len)
            for (int k = 0; k < 8; k++) buf[k] = (char)(unsigned char)(c->len_value >> (8 * k));
        write_bytes(path, buf, keep);
        free(buf);
        drt_st_file f;
        drt_status st = drt_st_open(path, &f);
        check_error(c->name, st, c->want, fname, c->needle[0], c->needle[1]);
        if (c->must_not)
            DRT_CHECK(strstr(drt_last_error(), c->must_not) == NULL,
                      "%s: message shows the length field's value %s: %s", c->name, c->must_not, drt_last_error());
        if (st == DRT_OK) drt_st_close(&f);
    }
    free(bytes);
}

/* Seeded random damage to a valid file: every result is either a file whose
 * tensors all lie inside the mapping, or an error naming the file. Run under
 * the sanitizers this is where an out-of-bounds read would show. */
static void test_mutations(void) {
    const char *src = TMP "/damage_src.safetensors", *path = TMP "/mutated.safetensors";
    char *bytes = NULL;
    size_t len = 0;
    if (drt_read_text_file(src, &bytes, &len) != DRT_OK || len < 16) {
        DRT_CHECK(0, "read %s: %s", src, drt_last_error());
        free(bytes);
        return;
    }
    static const char tokens[] = "{}[]\",:-0123456789eE. \\FI";
    char *buf = malloc(len);
    drt_rng r;
    drt_rng_seed(&r, 1234);
    int n_ok = 0, n_bad = 0;
    for (int it = 0; buf && it < 3000; it++) {
        memcpy(buf, bytes, len);
        size_t n = len;
        int edits = 1 + (int)(drt_rng_next(&r) % 4);
        for (int e = 0; e < edits; e++) {
            size_t at = (size_t)(drt_rng_next(&r) % n);
            switch (drt_rng_next(&r) % 4) {
            case 0: buf[at] = (char)drt_rng_next(&r); break;
            case 1: buf[at] = tokens[drt_rng_next(&r) % (sizeof tokens - 1)]; break;
            case 2: n = at > 8 ? at : n; break;                  /* truncate */
            case 3: buf[at % 8] = (char)drt_rng_next(&r); break; /* length field */
            }
        }
        write_bytes(path, buf, n);
        drt_st_file f;
        drt_status st = drt_st_open(path, &f);
        if (st == DRT_OK) {
            n_ok++;
            const char *lo = f.map, *hi = lo + f.map_size;
            for (int i = 0; i < f.n_tensors; i++) {
                const char *d = f.tensors[i].data;
                DRT_CHECK(d >= lo && d <= hi && f.tensors[i].nbytes <= (size_t)(hi - d),
                          "mutation %d: tensor %s outside the mapping", it, f.tensors[i].name);
            }
            drt_st_close(&f);
        } else {
            n_bad++;
            const char *msg = drt_last_error();
            DRT_CHECK(strstr(msg, "mutated.safetensors") && !strchr(msg, '\n'), "mutation %d: message %s", it, msg);
        }
    }
    if (g_verbose) printf("  mutations: %d opened, %d rejected\n", n_ok, n_bad);
    free(buf);
    free(bytes);
}

/* ---- files and directories ------------------------------------------------ */

static void test_paths(void) {
    drt_st_file f;
    drt_st_set s;
    drt_status st = drt_st_open(TMP "/no_such_file.safetensors", &f);
    check_error("nonexistent_file", st, DRT_ERR_IO, "no_such_file.safetensors", "cannot open", NULL);
    st = drt_st_open(TMP, &f);
    check_error("open_a_directory", st, DRT_ERR_IO, "st_tmp", "not a regular file", NULL);

    make_dir(TMP "/empty_dir");
    st = drt_st_set_open_dir(TMP "/empty_dir", &s);
    check_error("dir_without_model", st, DRT_ERR_IO, "empty_dir",
                "no model.safetensors or model.safetensors.index.json", NULL);
    st = drt_st_set_open_dir(TMP "/no_such_dir", &s);
    check_error("nonexistent_dir", st, DRT_ERR_IO, "no_such_dir", "no model.safetensors", NULL);

    float x[2] = {1, 2};
    drt_st_write_tensor w[] = {{"x", DRT_F32, 1, {2}, x}, {"y", DRT_F32, 1, {2}, x}};

    /* the index names a shard that is not there */
    make_dir(TMP "/missing_shard");
    DRT_CHECK(drt_st_write(TMP "/missing_shard/model-00001-of-00002.safetensors", w, 1) == DRT_OK, "write: %s",
              drt_last_error());
    write_index(TMP "/missing_shard", "{\"weight_map\": {\"x\": \"model-00001-of-00002.safetensors\","
                                      "\"y\": \"model-00002-of-00002.safetensors\"}}");
    st = drt_st_set_open_dir(TMP "/missing_shard", &s);
    check_error("index_missing_shard", st, DRT_ERR_IO, "model.safetensors.index.json",
                "model-00002-of-00002.safetensors", "cannot open");
    DRT_CHECK(s.n_files == 0 && s.files == NULL, "failed set open leaves the struct non-empty");

    /* the index maps a name to a shard that does not hold it */
    make_dir(TMP "/wrong_shard");
    DRT_CHECK(drt_st_write(TMP "/wrong_shard/a.safetensors", w, 1) == DRT_OK, "write: %s", drt_last_error());
    DRT_CHECK(drt_st_write(TMP "/wrong_shard/b.safetensors", w + 1, 1) == DRT_OK, "write: %s", drt_last_error());
    write_index(TMP "/wrong_shard", "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"a.safetensors\"}}");
    st = drt_st_set_open_dir(TMP "/wrong_shard", &s);
    check_error("index_tensor_not_in_shard", st, DRT_ERR_FORMAT, "model.safetensors.index.json",
                "tensor \"y\" not found in shard \"a.safetensors\"", NULL);

    /* a bad shard: its own message, prefixed by the index */
    make_dir(TMP "/bad_shard");
    write_raw(TMP "/bad_shard/s.safetensors", 2, "[]", 2, 0);
    write_index(TMP "/bad_shard", "{\"weight_map\": {\"x\": \"s.safetensors\"}}");
    st = drt_st_set_open_dir(TMP "/bad_shard", &s);
    check_error("index_bad_shard", st, DRT_ERR_FORMAT, "bad_shard/s.safetensors", "not an object", NULL);

    /* the same name in two shards: drt_st_set_find would return the wrong one */
    make_dir(TMP "/dup_shard");
    DRT_CHECK(drt_st_write(TMP "/dup_shard/a.safetensors", w, 2) == DRT_OK, "write: %s", drt_last_error());
    DRT_CHECK(drt_st_write(TMP "/dup_shard/b.safetensors", w + 1, 1) == DRT_OK, "write: %s", drt_last_error());
    write_index(TMP "/dup_shard", "{\"weight_map\": {\"x\": \"a.safetensors\", \"y\": \"b.safetensors\"}}");
    st = drt_st_set_open_dir(TMP "/dup_shard", &s);
    check_error("index_name_in_two_shards", st, DRT_ERR_FORMAT, "model.safetensors.index.json", "\"y\"",
                "earlier shard");

    /* malformed index files */
    static const struct {
        const char *name, *json, *needle;
    } idx[] = {
        {"index_not_json", "{\"weight_map\": ", "not valid JSON"},
        /* Python's json (transformers reads the index with it) refuses these */
        {"index_trailing_data", "{\"weight_map\": {}} {\"weight_map\": {}}",
         "not valid JSON: text after the value at byte 19"},
        {"index_bom", "\xEF\xBB\xBF{\"weight_map\": {}}", "starts with a UTF-8 byte order mark"},
        {"index_no_weight_map", "{\"metadata\": {}}", "\"weight_map\""},
        {"index_weight_map_array", "{\"weight_map\": [\"a.safetensors\"]}", "\"weight_map\""},
        {"index_root_array", "[{\"weight_map\": {}}]", "\"weight_map\""},
        {"index_shard_not_string", "{\"weight_map\": {\"x\": 3}}", "tensor \"x\": expected a shard"},
        {"index_shard_empty", "{\"weight_map\": {\"x\": \"\"}}", "tensor \"x\": expected a shard"},
        /* shard names are plain file names inside the directory */
        {"index_shard_parent", "{\"weight_map\": {\"x\": \"../a.safetensors\"}}",
         "tensor \"x\": shard \"../a.safetensors\" is not a plain file name in the model "
         "directory"},
        {"index_shard_absolute", "{\"weight_map\": {\"x\": \"/etc/passwd\"}}",
         "shard \"/etc/passwd\" is not a plain file name"},
        {"index_shard_subdir", "{\"weight_map\": {\"x\": \"sub/a.safetensors\"}}",
         "shard \"sub/a.safetensors\" is not a plain file name"},
        {"index_shard_dot", "{\"weight_map\": {\"x\": \".\"}}", "shard \".\" is not a plain"},
        {"index_shard_dotdot", "{\"weight_map\": {\"x\": \"..\"}}", "shard \"..\" is not a plain"},
        {"index_shard_nul", "{\"weight_map\": {\"x\": \"a.safetensors\\u0000/../../b\"}}", "\\u0000 escape (NUL)"},
        {"index_shard_overlong",
         "{\"weight_map\": {\"x\": \"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"
         ".safetensors\"}}",
         "is not a plain file name"},
    };
    for (size_t i = 0; i < sizeof idx / sizeof idx[0]; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, TMP "/%s", idx[i].name);
        make_dir(dir);
        write_index(dir, idx[i].json);
        st = drt_st_set_open_dir(dir, &s);
        check_error(idx[i].name, st, DRT_ERR_FORMAT, idx[i].name, idx[i].needle, NULL);
    }
}

/* ---- writer arguments and text files --------------------------------------- */

static void test_writer_args(void) {
    float x[2] = {1, 2};
    drt_st_write_tensor five = {"w", DRT_F32, 5, {1, 1, 1, 1}, x};
    drt_status st = drt_st_write(TMP "/w5.safetensors", &five, 1);
    check_error("write_5_dims", st, DRT_ERR_INVALID_ARG, "w5.safetensors", "\"w\": ndim 5", NULL);
    drt_st_write_tensor dup[] = {{"w", DRT_F32, 1, {1}, x}, {"w", DRT_F32, 1, {1}, x}};
    st = drt_st_write(TMP "/wdup.safetensors", dup, 2);
    check_error("write_duplicate", st, DRT_ERR_INVALID_ARG, "wdup.safetensors", "\"w\" given twice", NULL);
    drt_st_write_tensor neg = {"w", DRT_F32, 1, {-1}, x};
    st = drt_st_write(TMP "/wneg.safetensors", &neg, 1);
    check_error("write_negative_dim", st, DRT_ERR_INVALID_ARG, "wneg.safetensors", "shape[0]", NULL);
    drt_st_write_tensor nodata = {"w", DRT_F32, 1, {2}, NULL};
    st = drt_st_write(TMP "/wnull.safetensors", &nodata, 1);
    check_error("write_null_data", st, DRT_ERR_INVALID_ARG, "wnull.safetensors", "data is NULL", NULL);
    st = drt_st_write(TMP "/no_such_dir/x.safetensors", NULL, 0);
    check_error("write_bad_path", st, DRT_ERR_IO, "no_such_dir/x.safetensors", "cannot write", NULL);
}

static void test_text_file(void) {
    const char *p = TMP "/config.json";
    const char *text = "{\"hidden_size\": 64}\n";
    write_bytes(p, text, strlen(text));
    char *buf = NULL;
    size_t len = 0;
    drt_status st = drt_read_text_file(p, &buf, &len);
    DRT_CHECK(st == DRT_OK && len == strlen(text) && buf && strcmp(buf, text) == 0, "read text file: %s",
              drt_last_error());
    free(buf);

    /* bigger than the first buffer, to exercise growth */
    size_t big = 100000;
    char *src = malloc(big);
    if (src) {
        for (size_t i = 0; i < big; i++) src[i] = (char)('a' + i % 26);
        write_bytes(TMP "/big.txt", src, big);
        st = drt_read_text_file(TMP "/big.txt", &buf, &len);
        DRT_CHECK(st == DRT_OK && len == big && memcmp(buf, src, big) == 0 && buf[big] == 0,
                  "read 100000-byte file: %s", drt_last_error());
        free(buf);
        free(src);
    }

    st = drt_read_text_file(TMP "/no_such.json", &buf, &len);
    check_error("text_nonexistent", st, DRT_ERR_IO, "no_such.json", "cannot open", NULL);
    DRT_CHECK(buf == NULL, "out is NULL after a failure");
    st = drt_read_text_file(TMP, &buf, &len);
    check_error("text_directory", st, DRT_ERR_IO, "st_tmp", "directory", NULL);

    /* a sparse file one byte over the limit */
    const char *huge = TMP "/huge.json";
    write_bytes(huge, "", 0);
    DRT_CHECK(truncate(huge, ((off_t)64 << 20) + 1) == 0, "truncate: %s", strerror(errno));
    st = drt_read_text_file(huge, &buf, &len);
    check_error("text_too_large", st, DRT_ERR_IO, "huge.json", "64 MiB limit", NULL);
    remove(huge);

    /* only regular files: a FIFO would block the open or the read forever, a
     * device may never end; both readers refuse them without opening them */
    const char *fifo = TMP "/fifo.json";
    remove(fifo);
    DRT_CHECK(mkfifo(fifo, 0644) == 0, "mkfifo: %s", strerror(errno));
    st = drt_read_text_file(fifo, &buf, &len);
    check_error("text_fifo", st, DRT_ERR_IO, "fifo.json", "not a regular file (a FIFO)", NULL);
    drt_st_file f;
    st = drt_st_open(fifo, &f);
    check_error("st_fifo", st, DRT_ERR_IO, "fifo.json", "not a regular file (a FIFO)", NULL);
    st = drt_read_text_file("/dev/zero", &buf, &len);
    check_error("text_device", st, DRT_ERR_IO, "/dev/zero", "not a regular file (a character device)", NULL);
    const char *loop = TMP "/loop.json";
    remove(loop);
    DRT_CHECK(symlink("loop.json", loop) == 0, "symlink: %s", strerror(errno));
    st = drt_read_text_file(loop, &buf, &len);
    check_error("text_symlink_loop", st, DRT_ERR_IO, "loop.json", strerror(ELOOP), NULL);
    st = drt_st_open(loop, &f);
    check_error("st_symlink_loop", st, DRT_ERR_IO, "loop.json", strerror(ELOOP), NULL);
}

/* A tensor of a standard dtype diffrt does not compute with opens into the
 * file's `foreign` list, sorted, with its dtype name and data; `tensors`
 * never holds it, drt_st_find never finds it. */
static void test_foreign(void) {
    const char *h = "{\"s\":" T("\"U64\"", "[]", "[0,8]") ",\"w\":" T("\"F32\"", "[1]", "[8,12]") ",\"b\":" T(
        "\"I8\"", "[1]", "[12,13]") "}";
    const char *path = TMP "/foreign.safetensors";
    write_raw(path, strlen(h), h, strlen(h), 13);
    drt_st_file f;
    drt_status st = drt_st_open(path, &f);
    DRT_CHECK(st == DRT_OK, "foreign: %s", drt_last_error());
    if (st != DRT_OK) return;
    DRT_CHECK(f.n_tensors == 1 && strcmp(f.tensors[0].name, "w") == 0, "foreign: tensors holds only \"w\"");
    DRT_CHECK(f.n_foreign == 2, "foreign: n_foreign %d, expected 2", f.n_foreign);
    if (f.n_foreign == 2) {
        DRT_CHECK(strcmp(f.foreign[0].name, "b") == 0 && strcmp(f.foreign[0].foreign_dtype, "I8") == 0 &&
                      f.foreign[0].nbytes == 1,
                  "foreign[0] is b, I8, 1 byte");
        DRT_CHECK(strcmp(f.foreign[1].name, "s") == 0 && strcmp(f.foreign[1].foreign_dtype, "U64") == 0 &&
                      f.foreign[1].nbytes == 8 && f.foreign[1].ndim == 0,
                  "foreign[1] is s, U64 scalar, 8 bytes");
    }
    DRT_CHECK(drt_st_find(&f, "s") == NULL && drt_st_find(&f, "w") != NULL, "drt_st_find skips foreign tensors");
    DRT_CHECK(f.tensors[0].foreign_dtype == NULL, "a usable tensor has no foreign dtype");
    drt_st_close(&f);
    DRT_CHECK(f.foreign == NULL && f.n_foreign == 0, "close clears the foreign list");
}

int main(void) {
    g_verbose = getenv("DRT_TEST_VERBOSE") != NULL;
    make_dir(TMP);
    test_round_trip();
    test_exact_bytes();
    test_sharded();
    test_header_cases();
    test_foreign();
    test_damage_cases();
    test_mutations();
    test_paths();
    test_writer_args();
    test_text_file();
    return drt_test_summary("test_safetensors");
}
