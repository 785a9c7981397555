/* Tokenizer: byte-identical with the `tokenizers` library on the committed
 * corpus, for four tokenizer.json files (tests/tokenizer/, made by
 * python/make_tokenizer_fixtures.py: GPT-2 style, Llama-3 style, one with
 * the less common flags, and the bare 256 byte tokens). For every corpus
 * line: encode with and without special tokens, decode with and without
 * skip_special_tokens, streaming decode; then single-id and random-id decodes
 * that cut UTF-8 characters apart. Then a table of bad tokenizer files (each must give its status
 * and a message naming the file and what is wrong), invalid UTF-8 text, and a round-trip property
 * test on random text. Set DRT_TEST_VERBOSE=1 to print every error message. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "drt_test.h"
#include "safetensors.h" /* drt_read_text_file */
#include "diffrt/tokenizer.h"

/* The CLI's text layer is compiled into this test (the CLI's own objects are
 * not in the library): prompt reading, tokenizer.json next to the model,
 * streamed output. */
#include "../cli/text.c"

#define TOKDIR DRT_FIXTURES_DIR "/../tokenizer"

static int g_verbose;

/* ---- helpers ------------------------------------------------------------- */

static void fmt_ids(char *buf, size_t n, const int32_t *ids, int k) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < k && o + 16 < n; i++) o += (size_t)snprintf(buf + o, n - o, "%s%d", i ? "," : "", ids[i]);
    if (o + 16 >= n) snprintf(buf + o, n - o, ",...");
}

/* JSON array of ints -> malloc'd int32 array */
static int32_t *json_ids(const cJSON *a, int *n) {
    *n = cJSON_GetArraySize(a);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n + 1));
    int i = 0;
    for (const cJSON *e = a ? a->child : NULL; e; e = e->next) v[i++] = (int32_t)e->valuedouble;
    return v;
}

/* \n \r \t \\ escapes of corpus.txt (see python/make_tokenizer_fixtures.py) */
static char *unescape(const char *s, size_t n, size_t *out_n) {
    char *o = malloc(n + 1);
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (s[i] == '\\' && i + 1 < n) {
            char d = s[++i];
            o[k++] = d == 'n' ? '\n' : d == 'r' ? '\r' : d == 't' ? '\t' : d;
        } else {
            o[k++] = s[i];
        }
    }
    o[k] = 0;
    *out_n = k;
    return o;
}

static int utf8_complete(const char *s, size_t n) {
    /* every character complete and valid (the stream must never emit a part) */
    size_t i = 0;
    const unsigned char *u = (const unsigned char *)s;
    while (i < n) {
        int k = u[i] < 0x80 ? 1 : u[i] >= 0xF0 ? 4 : u[i] >= 0xE0 ? 3 : u[i] >= 0xC0 ? 2 : 0;
        if (!k || i + (size_t)k > n) return 0;
        for (int j = 1; j < k; j++)
            if ((u[i + (size_t)j] & 0xC0) != 0x80) return 0;
        i += (size_t)k;
    }
    return 1;
}

/* Streams ids one at a time; checks every chunk is whole characters and the
 * concatenation equals want. */
static void check_stream(const drt_tokenizer *t, const char *tag, int line, const int32_t *ids, int n, int skip,
                         const char *want, size_t want_n) {
    drt_tokenizer_stream st;
    drt_tokenizer_stream_init(&st);
    char *buf = NULL, *all = malloc(want_n + 64);
    size_t len = 0, cap = 0, all_n = 0, all_cap = want_n + 64;
    int chunks_ok = 1;
    for (int i = 0; i <= n; i++) {
        len = 0;
        drt_status s = i < n ? drt_tokenizer_stream_push(t, &st, ids[i], skip, &buf, &len, &cap)
                             : drt_tokenizer_stream_flush(t, &st, &buf, &len, &cap);
        DRT_CHECK(s == DRT_OK, "%s line %d: stream: %s", tag, line, drt_last_error());
        if (s) break;
        if (!utf8_complete(buf, len)) chunks_ok = 0;
        if (all_n + len > all_cap) {
            all_cap = 2 * (all_n + len);
            all = realloc(all, all_cap);
        }
        memcpy(all + all_n, buf, len);
        all_n += len;
    }
    DRT_CHECK(chunks_ok, "%s line %d: a streamed chunk holds part of a UTF-8 character", tag, line);
    DRT_CHECK(all_n == want_n && memcmp(all, want, want_n) == 0,
              "%s line %d: streamed decode (skip_special=%d) differs from decode: %zu vs %zu bytes", tag, line, skip,
              all_n, want_n);
    free(buf);
    free(all);
}

/* An expected decode: a JSON string, or {"hex": "..."} when it holds a NUL.
 * Returns a malloc'd buffer of *n bytes. */
static char *expected_bytes(const cJSON *j, size_t *n) {
    const cJSON *hex = cJSON_GetObjectItem(j, "hex");
    if (cJSON_IsString(hex)) {
        size_t k = strlen(hex->valuestring) / 2;
        char *o = malloc(k + 1);
        for (size_t i = 0; i < k; i++) {
            unsigned v;
            sscanf(hex->valuestring + 2 * i, "%2x", &v);
            o[i] = (char)v;
        }
        o[k] = 0;
        *n = k;
        return o;
    }
    const char *s = cJSON_IsString(j) ? j->valuestring : "";
    *n = strlen(s);
    return strdup(s);
}

static void check_decode(const drt_tokenizer *t, const char *tag, int line, const int32_t *ids, int n, int skip,
                         const cJSON *want_json) {
    char *got;
    size_t got_n, want_n;
    drt_status s = drt_tokenizer_decode(t, ids, n, skip, &got, &got_n);
    DRT_CHECK(s == DRT_OK, "%s line %d: decode: %s", tag, line, drt_last_error());
    if (s) return;
    char *want = expected_bytes(want_json, &want_n);
    if (!(got_n == want_n && memcmp(got, want, want_n) == 0)) {
        char b[512];
        fmt_ids(b, sizeof b, ids, n);
        DRT_CHECK(0, "%s line %d: decode(skip_special=%d) of [%s]\n  got  \"%s\"\n  want \"%s\"", tag, line, skip, b,
                  got, want);
    }
    check_stream(t, tag, line, ids, n, skip, want, want_n);
    free(got);
    free(want);
}

/* parse_special 0: special tokens read as text (drt_encode_opts), against
 * tokenizers' encode_special_tokens = True */
static void check_encode(const drt_tokenizer *t, const char *tag, int line, const char *text, size_t text_n,
                         int add_special, int parse_special, const cJSON *want_json) {
    int n_want;
    int32_t *want = json_ids(want_json, &n_want);
    int32_t *got;
    int n_got;
    drt_encode_opts eo = {.add_special = add_special, .parse_special = parse_special};
    drt_status s = parse_special ? drt_tokenizer_encode(t, text, text_n, add_special, &got, &n_got)
                                 : drt_tokenizer_encode_opts(t, text, text_n, &eo, &got, &n_got);
    DRT_CHECK(s == DRT_OK, "%s line %d: encode: %s", tag, line, drt_last_error());
    if (s == DRT_OK) {
        int same = n_got == n_want && memcmp(got, want, sizeof(int32_t) * (size_t)n_got) == 0;
        if (!same) {
            char a[2048], b[2048];
            fmt_ids(a, sizeof a, got, n_got);
            fmt_ids(b, sizeof b, want, n_want);
            DRT_CHECK(
                0,
                "%s line %d (add_special=%d, parse_special=%d): ids differ from tokenizers\n  got  [%s]\n  want [%s]",
                tag, line, add_special, parse_special, a, b);
        } else {
            DRT_CHECK(1, "ok");
        }
        free(got);
    }
    free(want);
}

/* ---- the corpus against the tokenizers library ---------------------------- */

typedef struct {
    char *text;
    size_t n;
} line_t;

static line_t *read_corpus(int *n_lines, char **whole, size_t *whole_n) {
    char *buf;
    size_t len;
    *n_lines = 0;
    if (drt_read_text_file(TOKDIR "/corpus.txt", &buf, &len) != DRT_OK) {
        DRT_CHECK(0, "corpus: %s", drt_last_error());
        return NULL;
    }
    line_t *lines = calloc(len + 1, sizeof *lines);
    size_t st = 0;
    for (size_t i = 0; i < len; i++)
        if (buf[i] == '\n') {
            lines[*n_lines].text = unescape(buf + st, i - st, &lines[*n_lines].n);
            (*n_lines)++;
            st = i + 1;
        }
    *whole = buf;
    *whole_n = len;
    return lines;
}

static void test_corpus(const char *name, int round_trip) {
    char tpath[512], epath[512];
    snprintf(tpath, sizeof tpath, TOKDIR "/%s.json", name);
    snprintf(epath, sizeof epath, TOKDIR "/expected_%s.json", name);
    drt_tokenizer *t;
    clock_t c0 = clock();
    drt_status s = drt_tokenizer_load(tpath, &t);
    DRT_CHECK(s == DRT_OK, "%s: load: %s", name, drt_last_error());
    if (s) return;
    double t_load = (double)(clock() - c0) / CLOCKS_PER_SEC;
    char *ej;
    if (drt_read_text_file(epath, &ej, NULL) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        drt_tokenizer_free(t);
        return;
    }
    cJSON *exp = cJSON_Parse(ej);
    free(ej);
    DRT_CHECK(exp != NULL, "%s: cannot parse", epath);
    int n_lines;
    char *whole = NULL;
    size_t whole_n = 0;
    line_t *lines = read_corpus(&n_lines, &whole, &whole_n);
    const cJSON *cases = cJSON_GetObjectItem(exp, "cases");
    DRT_CHECK(cJSON_GetArraySize(cases) == n_lines + 1, "%s: %d cases for %d corpus lines (+1)", name,
              cJSON_GetArraySize(cases), n_lines);

    int n_cases = 0;
    size_t n_tokens = 0;
    c0 = clock();
    for (const cJSON *c = cases ? cases->child : NULL; c && lines; c = c->next) {
        int line = cJSON_GetObjectItem(c, "line")->valueint;
        const char *want_text = cJSON_GetObjectItem(c, "text")->valuestring;
        const char *text = line == 0 ? whole : line <= n_lines ? lines[line - 1].text : "";
        size_t text_n = line == 0 ? whole_n : line <= n_lines ? lines[line - 1].n : 0;
        /* the line as this test reads it must be what python encoded (catches
         * an editor that strips trailing spaces or converts line endings) */
        DRT_CHECK(strlen(want_text) == text_n && memcmp(want_text, text, text_n) == 0,
                  "%s line %d: corpus.txt does not match the text in %s", name, line, epath);
        check_encode(t, name, line, text, text_n, 1, 1, cJSON_GetObjectItem(c, "ids"));
        check_encode(t, name, line, text, text_n, 0, 1, cJSON_GetObjectItem(c, "ids_no_special"));
        check_encode(t, name, line, text, text_n, 1, 0, cJSON_GetObjectItem(c, "ids_split_special"));
        int n;
        int32_t *ids = json_ids(cJSON_GetObjectItem(c, "ids"), &n);
        n_tokens += (size_t)n;
        check_decode(t, name, line, ids, n, 0, cJSON_GetObjectItem(c, "decode"));
        check_decode(t, name, line, ids, n, 1, cJSON_GetObjectItem(c, "decode_skip_special"));
        free(ids);
        if (round_trip) { /* no prefix space, no stripping: decode(encode(x)) == x */
            int32_t *rid;
            int rn;
            char *back;
            size_t back_n;
            if (drt_tokenizer_encode(t, text, text_n, 0, &rid, &rn) == DRT_OK) {
                if (drt_tokenizer_decode(t, rid, rn, 0, &back, &back_n) == DRT_OK) {
                    DRT_CHECK(back_n == text_n && memcmp(back, text, text_n) == 0,
                              "%s line %d: decode(encode(text)) != text", name, line);
                    free(back);
                }
                free(rid);
            }
        }
        n_cases++;
    }
    double t_cases = (double)(clock() - c0) / CLOCKS_PER_SEC;

    int n_dec = 0, k = 0;
    const cJSON *dcases = cJSON_GetObjectItem(exp, "decode_cases");
    for (const cJSON *c = dcases ? dcases->child : NULL; c; c = c->next, k++) {
        int n;
        int32_t *ids = json_ids(cJSON_GetObjectItem(c, "ids"), &n);
        check_decode(t, name, -1 - k, ids, n, 0, cJSON_GetObjectItem(c, "decode"));
        check_decode(t, name, -1 - k, ids, n, 1, cJSON_GetObjectItem(c, "decode_skip_special"));
        free(ids);
        n_dec++;
    }
    DRT_CHECK(n_dec > drt_tokenizer_vocab_size(t), "%s: %d decode cases", name, n_dec);
    printf("%-7s vocab %5d: %d corpus cases, %d decode cases (load %.3f s, corpus %.3f s, %zu "
           "tokens)\n",
           name, drt_tokenizer_vocab_size(t), n_cases, n_dec, t_load, t_cases, n_tokens);
    for (int i = 0; i < n_lines; i++) free(lines[i].text);
    free(lines);
    free(whole);
    cJSON_Delete(exp);
    drt_tokenizer_free(t);
}

/* ---- properties without python --------------------------------------------- */

static void test_api(void) {
    drt_tokenizer *t;
    if (drt_tokenizer_load(TOKDIR "/llama3.json", &t) != DRT_OK) {
        DRT_CHECK(0, "llama3: %s", drt_last_error());
        return;
    }
    int32_t bos = drt_tokenizer_token_to_id(t, "<|begin_of_text|>");
    int32_t eos = drt_tokenizer_token_to_id(t, "<|end_of_text|>");
    DRT_CHECK(bos >= 0 && eos >= 0 && bos != eos, "llama3 specials: bos %d eos %d", bos, eos);
    DRT_CHECK(drt_tokenizer_bos_id(t) == bos, "bos_id %d, want %d", drt_tokenizer_bos_id(t), bos);
    DRT_CHECK(drt_tokenizer_is_special(t, eos) && !drt_tokenizer_is_special(t, 0), "is_special");
    DRT_CHECK(drt_tokenizer_id_to_token(t, eos) && strcmp(drt_tokenizer_id_to_token(t, eos), "<|end_of_text|>") == 0,
              "id_to_token(eos)");
    DRT_CHECK(drt_tokenizer_id_to_token(t, -1) == NULL && drt_tokenizer_id_to_token(t, 1 << 30) == NULL,
              "id_to_token out of range");
    DRT_CHECK(drt_tokenizer_token_to_id(t, "no such token at all") == -1, "token_to_id(missing)");
    DRT_CHECK(drt_tokenizer_vocab_size(t) == eos + 1 + 3 || drt_tokenizer_vocab_size(t) > eos, "vocab size %d",
              drt_tokenizer_vocab_size(t));

    /* empty text: only BOS, or nothing */
    int32_t *ids;
    int n;
    DRT_CHECK(drt_tokenizer_encode(t, "", 0, 1, &ids, &n) == DRT_OK && n == 1 && ids[0] == bos,
              "encode(\"\") with specials");
    free(ids);
    DRT_CHECK(drt_tokenizer_encode(t, NULL, 0, 0, &ids, &n) == DRT_OK && n == 0 && ids, "encode(NULL, 0) gives 0 ids");
    free(ids);

    /* ids that name no token are skipped, as HF does */
    int32_t odd[] = {-5, 1 << 30, 300, drt_tokenizer_vocab_size(t)};
    char *txt;
    size_t len;
    DRT_CHECK(drt_tokenizer_decode(t, odd, 4, 0, &txt, &len) == DRT_OK, "decode odd ids: %s", drt_last_error());
    char *one;
    size_t one_n;
    drt_tokenizer_decode(t, &odd[2], 1, 0, &one, &one_n);
    DRT_CHECK(len == one_n && memcmp(txt, one, len) == 0, "out-of-range ids not skipped");
    free(txt);
    free(one);

    /* invalid UTF-8 text: an error naming the offset, never a crash */
    static const struct {
        const char *s;
        size_t n, at;
    } bad[] = {
        {"abc\x80", 4, 3},          /* lone continuation byte */
        {"\xC0\x80", 2, 0},         /* overlong NUL */
        {"ok \xED\xA0\x80", 6, 3},  /* UTF-16 surrogate */
        {"\xF5\x80\x80\x80", 4, 0}, /* above U+10FFFF */
        {"x\xE4\xB8", 3, 1},        /* truncated at the end */
        {"\xE4\xB8x", 3, 0},        /* truncated in the middle */
        {"\xFF", 1, 0},
        {"a\0b\xFE", 4, 3}, /* NUL is valid; 0xFE is not */
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        drt_status s = drt_tokenizer_encode(t, bad[i].s, bad[i].n, 1, &ids, &n);
        char want[32];
        snprintf(want, sizeof want, "byte %zu of", bad[i].at);
        DRT_CHECK(s == DRT_ERR_INVALID_ARG && ids == NULL && strstr(drt_last_error(), want),
                  "invalid UTF-8 case %zu: status %d, message \"%s\" (want \"%s\")", i, (int)s, drt_last_error(), want);
        if (g_verbose) printf("  utf8 %zu: %s\n", i, drt_last_error());
    }
    /* NUL bytes inside the text are text */
    DRT_CHECK(drt_tokenizer_encode(t, "a\0b", 3, 0, &ids, &n) == DRT_OK && n >= 3, "NUL in text");
    if (n) {
        DRT_CHECK(drt_tokenizer_decode(t, ids, n, 0, &txt, &len) == DRT_OK && len == 3 && memcmp(txt, "a\0b", 3) == 0,
                  "NUL round trip");
        free(txt);
    }
    free(ids);
    drt_tokenizer_free(t);
}

/* Random text (ASCII, whitespace runs, CJK, emoji, combining marks, special
 * token fragments) round-trips through encode/decode for the two
 * tokenizers that keep text as is. */
static void test_random_round_trip(const char *name) {
    char path[512];
    snprintf(path, sizeof path, TOKDIR "/%s.json", name);
    drt_tokenizer *t;
    if (drt_tokenizer_load(path, &t) != DRT_OK) {
        DRT_CHECK(0, "%s: %s", name, drt_last_error());
        return;
    }
    static const char *atoms[] = {"a",
                                  "the",
                                  " ",
                                  "  ",
                                  "\n",
                                  "\n\n",
                                  "\t",
                                  "'s",
                                  "'LL",
                                  "7",
                                  "123456",
                                  ".",
                                  "!?",
                                  "\xe4\xb8\xad",
                                  "\xf0\x9f\x98\x80",
                                  "\xe2\x80\x8d",
                                  "e\xcc\x81",
                                  "\xd8\xb9",
                                  "<|",
                                  "|>",
                                  "<|eot_id|>",
                                  "<|endoftext|>",
                                  "\xc2\xa0",
                                  "\xe3\x80\x80",
                                  "\r\n",
                                  "Z"};
    drt_rng r;
    drt_rng_seed(&r, 1234);
    char buf[1024];
    int fails = 0;
    for (int it = 0; it < 500; it++) {
        size_t n = 0;
        int k = (int)(drt_rng_next(&r) % 40);
        for (int j = 0; j < k; j++) {
            const char *a = atoms[drt_rng_next(&r) % (sizeof atoms / sizeof *atoms)];
            size_t l = strlen(a);
            memcpy(buf + n, a, l);
            n += l;
        }
        int32_t *ids;
        int m;
        char *back;
        size_t bn;
        if (drt_tokenizer_encode(t, buf, n, 1, &ids, &m) != DRT_OK) {
            fails++;
            continue;
        }
        if (drt_tokenizer_decode(t, ids, m, 1, &back, &bn) == DRT_OK) {
            /* skip_special drops <|eot_id|> etc. that were in the text, so
             * compare without specials only where the text has none */
            if (!strstr(buf, "<|eot_id|>") && !strstr(buf, "<|endoftext|>") && !(bn == n && memcmp(back, buf, n) == 0))
                fails++;
            free(back);
        }
        free(ids);
    }
    DRT_CHECK(fails == 0, "%s: %d of 500 random texts do not round-trip", name, fails);
    drt_tokenizer_free(t);
}

/* ---- bad files ----------------------------------------------------------------- */

static const char BASE[] = "{\"version\":\"1.0\",\"truncation\":null,\"padding\":null,"
                           "\"added_tokens\":[{\"id\":3,\"content\":\"<s>\",\"single_word\":false,\"lstrip\":false,"
                           "\"rstrip\":false,\"normalized\":false,\"special\":true}],"
                           "\"normalizer\":null,"
                           "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
                           "\"use_regex\":true},"
                           "\"post_processor\":null,"
                           "\"decoder\":{\"type\":\"ByteLevel\",\"add_prefix_space\":true,\"trim_offsets\":true,"
                           "\"use_regex\":true},"
                           "\"model\":{\"type\":\"BPE\",\"dropout\":null,\"unk_token\":null,\"fuse_unk\":false,"
                           "\"byte_fallback\":false,\"ignore_merges\":false,"
                           "\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<s>\":3},\"merges\":[\"a b\"]}}";

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

/* BASE with the first occurrence of `from` replaced by `to` */
static char *mutate(const char *from, const char *to) {
    const char *at = strstr(BASE, from);
    if (!at) {
        DRT_CHECK(0, "test bug: \"%s\" not in BASE", from);
        return NULL;
    }
    size_t n = strlen(BASE) - strlen(from) + strlen(to);
    char *o = malloc(n + 1);
    size_t pre = (size_t)(at - BASE);
    memcpy(o, BASE, pre);
    strcpy(o + pre, to);
    strcat(o, at + strlen(from));
    return o;
}

static void test_bad_files(void) {
    static const struct {
        const char *from, *to;
        drt_status want;
        const char *msg1, *msg2;
    } cases[] = {
        {"\"type\":\"BPE\"", "\"type\":\"Unigram\"", DRT_ERR_UNSUPPORTED,
         "model type \"Unigram\" is not supported (supported: BPE with ByteLevel)", NULL},
        {"\"type\":\"BPE\"", "\"type\":\"WordPiece\"", DRT_ERR_UNSUPPORTED, "model type \"WordPiece\" is not supported",
         NULL},
        {"\"type\":\"BPE\"", "\"type\":7", DRT_ERR_FORMAT, "model.type", "a string"},
        {"\"normalizer\":null", "\"normalizer\":{\"type\":\"NFC\"}", DRT_ERR_UNSUPPORTED, "normalizer type \"NFC\"",
         NULL},
        {"\"normalizer\":null", "\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"Lowercase\"}]}",
         DRT_ERR_UNSUPPORTED, "normalizer type \"Lowercase\"", NULL},
        {"\"pre_tokenizer\":{\"type\":\"ByteLevel\"", "\"pre_tokenizer\":{\"type\":\"Metaspace\"", DRT_ERR_UNSUPPORTED,
         "pre_tokenizer type \"Metaspace\" is not supported", NULL},
        {"\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":"
         "true,"
         "\"use_regex\":true}",
         "\"pre_tokenizer\":null", DRT_ERR_UNSUPPORTED, "pre_tokenizer is null", NULL},
        {"\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":"
         "true,"
         "\"use_regex\":true}",
         "\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\s+\"},\"behavior\":"
         "\"Isolated\",\"invert\":false}",
         DRT_ERR_UNSUPPORTED, "no ByteLevel step", NULL},
        {"\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":"
         "true,"
         "\"use_regex\":true}",
         "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
         "\"pattern\":{\"Regex\":\"(unclosed\"},\"behavior\":\"Isolated\",\"invert\":false},"
         "{\"type\":\"ByteLevel\"}]}",
         DRT_ERR_UNSUPPORTED, "regex \"(unclosed\" does not compile", NULL},
        {"\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":"
         "true,"
         "\"use_regex\":true}",
         "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
         "\"pattern\":{\"Regex\":\"x\"},\"behavior\":\"MergedWithPrevious\",\"invert\":false},"
         "{\"type\":\"ByteLevel\"}]}",
         DRT_ERR_UNSUPPORTED, "Split behavior \"MergedWithPrevious\"", NULL},
        {"\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":"
         "true,"
         "\"use_regex\":true}",
         "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\"},"
         "{\"type\":\"Digits\"}]}",
         DRT_ERR_UNSUPPORTED, "\"Digits\" after ByteLevel", NULL},
        {"\"decoder\":{\"type\":\"ByteLevel\"", "\"decoder\":{\"type\":\"WordPiece\"", DRT_ERR_UNSUPPORTED,
         "decoder type \"WordPiece\"", NULL},
        {"\"post_processor\":null", "\"post_processor\":{\"type\":\"Frobnicate\"}", DRT_ERR_UNSUPPORTED,
         "post_processor type \"Frobnicate\"", NULL},
        {"\"post_processor\":null",
         "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{"
         "\"id\":"
         "\"<s>\",\"type_id\":0}}],\"special_tokens\":{\"<s>\":{\"id\":\"<s>\",\"ids\":[3]}}}",
         DRT_ERR_FORMAT, "no sequence \"A\"", NULL},
        {"\"post_processor\":null",
         "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{"
         "\"id\":"
         "\"<x>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{"
         "}}",
         DRT_ERR_FORMAT, "special_tokens[\"<x>\"]", NULL},
        {"\"post_processor\":null",
         "\"post_processor\":{\"type\":\"TemplateProcessing\",\"single\":[{\"SpecialToken\":{"
         "\"id\":"
         "\"<s>\",\"type_id\":0}},{\"Sequence\":{\"id\":\"A\",\"type_id\":0}}],\"special_tokens\":{"
         "\"<s>\":{\"id\":\"<s>\",\"ids\":[99]}}}",
         DRT_ERR_FORMAT, "adds id 99", NULL},
        {"\"dropout\":null", "\"dropout\":0.1", DRT_ERR_UNSUPPORTED, "model.dropout", NULL},
        {"\"byte_fallback\":false", "\"byte_fallback\":true", DRT_ERR_UNSUPPORTED, "model.byte_fallback", NULL},
        {"\"ignore_merges\":false", "\"ignore_merges\":\"yes\"", DRT_ERR_FORMAT, "model.ignore_merges",
         "true or false"},
        {"\"unk_token\":null", "\"unk_token\":\"<unk>\"", DRT_ERR_FORMAT, "unk_token \"<unk>\" is not in model.vocab",
         NULL},
        {"\"merges\":[\"a b\"]", "\"merges\":[\"a b c\"]", DRT_ERR_FORMAT, "model.merges[0]", "\"a b c\""},
        {"\"merges\":[\"a b\"]", "\"merges\":[\"a\",\"a b\"]", DRT_ERR_FORMAT, "model.merges[0]", NULL},
        {"\"merges\":[\"a b\"]", "\"merges\":[[\"a\",\"b\"],[\"b\",\"zz\"]]", DRT_ERR_FORMAT,
         "model.merges[1]: token \"zz\" is not in model.vocab", NULL},
        {"\"merges\":[\"a b\"]", "\"merges\":[[\"b\",\"a\"]]", DRT_ERR_FORMAT, "token \"ba\" is not in model.vocab",
         NULL},
        {"\"merges\":[\"a b\"]", "\"merges\":[[\"a\",7]]", DRT_ERR_FORMAT, "model.merges[0]", NULL},
        {"\"merges\":[\"a b\"]", "\"merges\":{}", DRT_ERR_FORMAT, "model.merges", "an object"},
        {"\"vocab\":{\"a\":0", "\"vocab\":{\"a\":-1", DRT_ERR_FORMAT, "model.vocab[\"a\"]", NULL},
        {"\"vocab\":{\"a\":0", "\"vocab\":{\"a\":\"0\"", DRT_ERR_FORMAT, "model.vocab[\"a\"]", NULL},
        {"\"vocab\":{\"a\":0", "\"vocab\":{\"a\":1.5", DRT_ERR_FORMAT, "model.vocab[\"a\"]", NULL},
        {"\"vocab\":{\"a\":0", "\"vocab\":{\"a\":99999999999", DRT_ERR_FORMAT, "model.vocab[\"a\"]", NULL},
        {"\"vocab\":{\"a\":0,\"b\":1,\"ab\":2,\"<s>\":3}", "\"vocab\":[]", DRT_ERR_FORMAT, "model.vocab", "an array"},
        /* not UTF-8 (HF refuses such a file): a raw byte in a key, a character cut
         * short in a string; a lone surrogate escape is no JSON (cJSON) */
        {"\"vocab\":{\"a\":0", "\"vocab\":{\"a\xf0\":0", DRT_ERR_FORMAT, "not valid UTF-8", "is 0xF0"},
        {"\"content\":\"<s>\"", "\"content\":\"<s\xe4\xb8\"", DRT_ERR_FORMAT, "not valid UTF-8", NULL},
        {"\"vocab\":{\"a\":0", "\"vocab\":{\"\\ud800\":0", DRT_ERR_FORMAT, "not valid JSON", NULL},
        {"\"model\":{", "\"model\":7,\"x\":{", DRT_ERR_FORMAT, "model: expected an object", NULL},
        {"\"added_tokens\":[{", "\"added_tokens\":[7,{", DRT_ERR_FORMAT, "added_tokens[0]", NULL},
        {"\"content\":\"<s>\"", "\"content\":null", DRT_ERR_FORMAT, "added_tokens[0].content", NULL},
        {"\"special\":true", "\"special\":1", DRT_ERR_FORMAT, "added_tokens[].special", NULL},
        {"{\"version\"", "[{\"version\"", DRT_ERR_FORMAT, "not valid JSON", NULL},
        {"\"model\":{\"type\"", "\"model\":{\"type\"\"", DRT_ERR_FORMAT, "not valid JSON", "near byte"},
        /* as strict as serde_json (HF) and Python's json: text after the value,
         * a BOM, a control byte raw in a string or between values */
        {"\"merges\":[\"a b\"]}}", "\"merges\":[\"a b\"]}} x", DRT_ERR_FORMAT,
         "not valid JSON: text after the value at byte 578", NULL},
        {"\"merges\":[\"a b\"]}}", "\"merges\":[\"a b\"]}}{}", DRT_ERR_FORMAT, "text after the value at byte 577",
         NULL},
        {"{\"version\"", "\xEF\xBB\xBF{\"version\"", DRT_ERR_FORMAT, "starts with a UTF-8 byte order mark", NULL},
        {"\"version\":\"1.0\"", "\"version\":\"1\x01.0\"", DRT_ERR_FORMAT,
         "not valid JSON: control byte 0x01 at byte 13", NULL},
        {"\"version\":\"1.0\",", "\"version\":\"1.0\",\x0c", DRT_ERR_FORMAT, "control byte 0x0C at byte 17", NULL},
        /* one reading, HF's: a key twice (HF keeps the last vocab entry; cJSON
         * lookups gave the first) or a string cut short by a NUL is refused */
        {"\"vocab\":{\"a\":0", "\"vocab\":{\"a\":5,\"a\":0", DRT_ERR_FORMAT, "duplicate key \"a\"",
         "(at $.model.vocab.a)"},
        {"\"version\":\"1.0\"", "\"version\":\"1.0\",\"version\":\"2.0\"", DRT_ERR_FORMAT,
         "duplicate key \"version\" (at $.version)", NULL},
        {"\"special\":true}", "\"special\":true,\"special\":false}", DRT_ERR_FORMAT, "duplicate key \"special\"",
         "(at $.added_tokens[0].special)"},
        {"\"vocab\":{\"a\":0", "\"vocab\":{\"a\\u0000b\":7,\"a\":0", DRT_ERR_FORMAT, "key \"a\\u0000b\"",
         "holds a NUL"},
        {"\"content\":\"<s>\"", "\"content\":\"<s>\\u0000\"", DRT_ERR_FORMAT, "string \"<s>\\u0000\"", "holds a NUL"},
        /* strings of the file in messages: no raw control reaches a terminal */
        {"\"type\":\"BPE\"", "\"type\":\"B\\u001b[2JPE\\u007f\"", DRT_ERR_UNSUPPORTED,
         "model type \"B\\x1b[2JPE\\x7f\"", NULL},
        {"\"type\":\"BPE\"", "\"type\":\"B\\u009b2J\xc2\x85\xe2\x80\xae\"", DRT_ERR_UNSUPPORTED,
         "model type \"B\\u009b2J\\u0085\\u202e\"", NULL},
        {"\"merges\":[\"a b\"]", "\"merges\":[\"a \\u001b\"]", DRT_ERR_FORMAT, "token \"\\x1b\" is not in model.vocab",
         NULL},
        {"\"unk_token\":null", "\"unk_token\":\"\\u009b\"", DRT_ERR_FORMAT, "unk_token \"\\u009b\"", NULL},
        {"\"pre_tokenizer\":{\"type\":\"ByteLevel\"", "\"pre_tokenizer\":{\"type\":\"\\u001bc\"", DRT_ERR_UNSUPPORTED,
         "pre_tokenizer type \"\\x1bc\"", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *json = mutate(cases[i].from, cases[i].to);
        if (!json) continue;
        drt_tokenizer *t = (drt_tokenizer *)0x1;
        drt_status s = drt_tokenizer_load_json(json, strlen(json), "bad/tokenizer.json", &t);
        const char *m = drt_last_error();
        DRT_CHECK(s == cases[i].want && t == NULL, "bad file %zu (%s -> %s): status %s (want %s), message \"%s\"", i,
                  cases[i].from, cases[i].to, drt_status_str(s), drt_status_str(cases[i].want), m);
        DRT_CHECK(strncmp(m, "bad/tokenizer.json: ", 20) == 0 && strstr(m, cases[i].msg1) &&
                      (!cases[i].msg2 || strstr(m, cases[i].msg2)),
                  "bad file %zu: message \"%s\" should name the file and say \"%s\"", i, m, cases[i].msg1);
        long raw = raw_control_at(m);
        DRT_CHECK(raw < 0, "bad file %zu: message holds the raw byte 0x%02x: %s", i,
                  raw < 0 ? 0 : (unsigned char)m[raw], m);
        if (g_verbose) printf("  bad %2zu: %s\n", i, m);
        if (s == DRT_OK) drt_tokenizer_free(t);
        free(json);
    }

    /* the base itself is fine and encodes "ab" as one token */
    drt_tokenizer *t;
    drt_status s = drt_tokenizer_load_json(BASE, strlen(BASE), "base", &t);
    DRT_CHECK(s == DRT_OK, "base tokenizer: %s", drt_last_error());
    if (s == DRT_OK) {
        int32_t *ids;
        int n;
        DRT_CHECK(drt_tokenizer_encode(t, "ab<s>ba", 7, 1, &ids, &n) == DRT_OK && n == 4 && ids[0] == 2 &&
                      ids[1] == 3 && ids[2] == 1 && ids[3] == 0,
                  "base: encode(\"ab<s>ba\")");
        free(ids);
        /* bytes with no vocab entry vanish (no unk token), as in HF */
        DRT_CHECK(drt_tokenizer_encode(t, "xa", 2, 1, &ids, &n) == DRT_OK && n == 1 && ids[0] == 0,
                  "base: encode(\"xa\")");
        free(ids);
        drt_tokenizer_free(t);
    }

    /* every truncation of a real file fails cleanly (or, rarely, parses) */
    char *full;
    size_t full_n;
    if (drt_read_text_file(TOKDIR "/flags.json", &full, &full_n) == DRT_OK) {
        int bad = 0;
        for (size_t cut = 0; cut < full_n; cut += 97) {
            s = drt_tokenizer_load_json(full, cut, "cut", &t);
            if (s == DRT_OK)
                drt_tokenizer_free(t);
            else if (strncmp(drt_last_error(), "cut: ", 5) != 0)
                bad++;
            if (s == DRT_OK && cut < full_n - 2) bad++;
        }
        DRT_CHECK(bad == 0, "truncated files: %d gave no or an unnamed error", bad);
        free(full);
    }

    /* files: missing, a directory, empty */
    s = drt_tokenizer_load(DRT_TMP_DIR "/no/such/tokenizer.json", &t);
    DRT_CHECK(s == DRT_ERR_IO && t == NULL && strstr(drt_last_error(), "no/such/tokenizer.json"),
              "missing file: %s: %s", drt_status_str(s), drt_last_error());
    s = drt_tokenizer_load(DRT_TMP_DIR, &t);
    DRT_CHECK(s == DRT_ERR_IO && t == NULL, "directory: %s: %s", drt_status_str(s), drt_last_error());
    const char *empty = DRT_TMP_DIR "/empty_tokenizer.json";
    FILE *fp = fopen(empty, "wb");
    if (fp) fclose(fp);
    s = drt_tokenizer_load(empty, &t);
    DRT_CHECK(s == DRT_ERR_FORMAT && strstr(drt_last_error(), "empty_tokenizer.json") &&
                  strstr(drt_last_error(), "not valid JSON"),
              "empty file: %s: %s", drt_status_str(s), drt_last_error());
    if (g_verbose) printf("  empty: %s\n", drt_last_error());
}

/* A vocab string that is a cut UTF-8 character (the raw byte 0xF0) and ends
 * exactly where the tokenizer's 64 KiB string arena ends: decoding its id read
 * two bytes past the arena (ASan: heap-buffer-overflow in utf8_decode <-
 * token_bytes; found with tests/fuzz/fuzz_tokenizer). Such a file is refused
 * at load now. Should one ever load, decoding every id must stay in bounds,
 * which the sanitizer build checks. */
static void test_cut_character_at_arena_end(void) {
    static const char head[] = "{\"model\":{\"type\":\"BPE\",\"vocab\":{\"";
    static const char tail[] = "\":0,\"\xf0\":5},\"merges\":[]},\"pre_tokenizer\":{\"type\":"
                               "\"ByteLevel\",\"use_regex\":false},\"decoder\":{\"type\":"
                               "\"ByteLevel\"}}";
    size_t fill = 65533; /* arena: "aaa..." + NUL, then "\xf0" + NUL: 65536 bytes */
    size_t n = sizeof head - 1 + fill + sizeof tail - 1;
    char *json = malloc(n);
    memcpy(json, head, sizeof head - 1);
    memset(json + sizeof head - 1, 'a', fill);
    memcpy(json + sizeof head - 1 + fill, tail, sizeof tail - 1);
    drt_tokenizer *t = NULL;
    drt_status s = drt_tokenizer_load_json(json, n, "cut.json", &t);
    DRT_CHECK(s == DRT_ERR_FORMAT && t == NULL && strstr(drt_last_error(), "cut.json: not valid UTF-8"),
              "vocab string with a cut character: %s: %s", drt_status_str(s), drt_last_error());
    if (s == DRT_OK) {
        for (int32_t id = 0; id <= 5; id++) {
            char *text;
            if (drt_tokenizer_decode(t, &id, 1, 0, &text, NULL) == DRT_OK) free(text);
        }
        drt_tokenizer_free(t);
    }
    free(json);
}

/* ---- hostile sizes: many added tokens, long words, the caller's limit -------- */

size_t drt_tokenizer_added_steps(void); /* text/tok_encode.c, for tests */

/* bytes256.json (every byte its own token, no merges) with the first `from`
 * replaced by `to`; malloc'd, length in *n */
static char *bytes256_with(const char *from, const char *to, size_t *n) {
    char *base;
    size_t bn;
    if (drt_read_text_file(TOKDIR "/bytes256.json", &base, &bn) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return NULL;
    }
    const char *at = strstr(base, from);
    DRT_CHECK(at != NULL, "test bug: \"%s\" not in bytes256.json", from);
    if (!at) {
        free(base);
        return NULL;
    }
    size_t pre = (size_t)(at - base), fl = strlen(from), tl = strlen(to);
    char *o = malloc(bn - fl + tl + 1);
    memcpy(o, base, pre);
    memcpy(o + pre, to, tl);
    memcpy(o + pre + tl, at + fl, bn - pre - fl + 1);
    *n = bn - fl + tl;
    free(base);
    return o;
}

static const char BYTES256_PRE[] =
    "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
    "\"use_regex\":true}";

typedef struct {
    int32_t *v;
    int n, cap;
} idbuf;

static void idbuf_add(idbuf *b, const int32_t *ids, int n) {
    if (b->n + n > b->cap) {
        b->cap = (b->n + n) * 2 + 16;
        b->v = realloc(b->v, (size_t)b->cap * sizeof *b->v);
    }
    memcpy(b->v + b->n, ids, (size_t)n * sizeof *ids);
    b->n += n;
}

typedef struct {
    char s[16];
    size_t len;
    int32_t id;
    int special; /* special tokens are not normalized: matched first, on the whole text */
} ref_tok;

/* The added-token split as HF defines it (AddedVocabulary::find_matches,
 * leftmost-longest; the non-normalized tokens over the whole text, then the
 * normalized ones in the gaps), written the plain way: every token tried at
 * every position. What no token covers is encoded by `plain`, the same
 * tokenizer without added tokens. */
static void ref_split(const drt_tokenizer *plain, const ref_tok *tk, int nt, int pass, const char *s, size_t n,
                      idbuf *out) {
    size_t start = 0, i = 0;
    for (;;) {
        int best = -1;
        for (; i < n && best < 0; i++)
            for (int k = 0; k < nt; k++)
                if (tk[k].special == (pass == 1) && tk[k].len <= n - i && memcmp(s + i, tk[k].s, tk[k].len) == 0 &&
                    (best < 0 || tk[k].len > tk[best].len))
                    best = k;
        size_t at = best < 0 ? n : i - 1;
        if (at > start) {
            if (pass == 1) {
                ref_split(plain, tk, nt, 2, s + start, at - start, out);
            } else {
                int32_t *ids;
                int k;
                if (drt_tokenizer_encode(plain, s + start, at - start, 0, &ids, &k) == DRT_OK) {
                    idbuf_add(out, ids, k);
                    free(ids);
                }
            }
        }
        if (best < 0) return;
        idbuf_add(out, &tk[best].id, 1);
        i = start = at + tk[best].len;
    }
}

/* 6000 added tokens "<t0>".."<t5999>" (special and not, alternately) and a
 * few that overlap them and each other: encoding equals the plain reference
 * on random text built from their pieces, and the matching work is linear in
 * the text, not in the number of tokens (a scan of every token starting with
 * '<' at every '<' made a 10 KB prompt take 3.7 s). */
static void test_many_added_tokens(void) {
    enum { N_NUM = 6000 };
    static const char *extra[] = {"<t1", "t1>", "ab", "abc", "bcd", "<", "1>", "c<t2", "<t12>x"};
    int n_extra = (int)(sizeof extra / sizeof *extra);
    int nt = N_NUM + n_extra;
    ref_tok *tk = calloc((size_t)nt, sizeof *tk);
    size_t cap = (size_t)nt * 96 + 64, len = 0;
    char *list = malloc(cap);
    len += (size_t)snprintf(list + len, cap - len, "\"added_tokens\":[");
    for (int k = 0; k < nt; k++) {
        if (k < N_NUM)
            snprintf(tk[k].s, sizeof tk[k].s, "<t%d>", k);
        else
            snprintf(tk[k].s, sizeof tk[k].s, "%s", extra[k - N_NUM]);
        tk[k].len = strlen(tk[k].s);
        tk[k].special = k % 2 == 0;
        len += (size_t)snprintf(list + len, cap - len, "%s{\"id\":%d,\"content\":\"%s\",\"special\":%s}", k ? "," : "",
                                1000 + k, tk[k].s, tk[k].special ? "true" : "false");
    }
    snprintf(list + len, cap - len, "]");
    size_t jn;
    char *json = bytes256_with("\"added_tokens\":[]", list, &jn);
    free(list);
    drt_tokenizer *t = NULL, *plain = NULL;
    if (!json || drt_tokenizer_load_json(json, jn, "added.json", &t) != DRT_OK ||
        drt_tokenizer_load(TOKDIR "/bytes256.json", &plain) != DRT_OK) {
        DRT_CHECK(0, "many added tokens: %s", drt_last_error());
        goto out;
    }
    for (int k = 0; k < nt; k++) tk[k].id = drt_tokenizer_token_to_id(t, tk[k].s);

    srand(25);
    int bad = 0;
    for (int round = 0; round < 40; round++) {
        char text[600];
        size_t n = 0;
        while (n < sizeof text - 20) { /* whole tokens, cut tokens, stray bytes */
            int r = rand() % 4;
            const ref_tok *x = &tk[rand() % 3 ? N_NUM + rand() % n_extra : rand() % N_NUM];
            size_t take = r == 0 ? x->len : r == 1 ? (size_t)(rand() % (int)x->len) : 0;
            memcpy(text + n, x->s, take);
            n += take;
            if (r >= 2) text[n++] = "<>t1ab c2x"[rand() % 10];
        }
        idbuf want = {0};
        ref_split(plain, tk, nt, 1, text, n, &want);
        int32_t *ids = NULL;
        int k = 0;
        drt_status s = drt_tokenizer_encode(t, text, n, 0, &ids, &k);
        int same = s == DRT_OK && k == want.n && (k == 0 || memcmp(ids, want.v, (size_t)k * sizeof *ids) == 0);
        if (!same && bad++ < 3)
            DRT_CHECK(0, "many added tokens: round %d: %d ids, the reference %d (text \"%.*s\")", round, k, want.n,
                      (int)n, text);
        free(ids);
        free(want.v);
    }
    DRT_CHECK(bad == 0, "many added tokens: %d of 40 texts differ from the reference", bad);

    /* 10 KB of near misses: every '<' starts a run of candidates */
    size_t n = 10000;
    char *text = malloc(n);
    for (size_t i = 0; i < n; i++) text[i] = "<t599"[i % 5];
    size_t before = drt_tokenizer_added_steps();
    int32_t *ids = NULL;
    int k = 0;
    drt_status s = drt_tokenizer_encode(t, text, n, 0, &ids, &k);
    size_t steps = drt_tokenizer_added_steps() - before;
    /* two passes (special and not), at most two automaton steps per byte each */
    DRT_CHECK(s == DRT_OK && steps <= 4 * n,
              "many added tokens: %zu matching steps for %zu bytes (at most %zu: two per byte per pass)", steps, n,
              4 * n);
    if (g_verbose) printf("  6009 added tokens, 10 KB: %zu matching steps\n", steps);
    free(ids);
    free(text);
out:
    drt_tokenizer_free(t);
    drt_tokenizer_free(plain);
    free(json);
    free(tk);
}

/* bytes256.json with the given added tokens (nt of them, each special or
 * not: special ones are matched in pass 1, the others in pass 2) */
static drt_tokenizer *with_added(const char *const *tok, const int *special, int nt) {
    size_t cap = 64;
    for (int k = 0; k < nt; k++) cap += strlen(tok[k]) + 64;
    char *list = malloc(cap);
    size_t len = (size_t)snprintf(list, cap, "\"added_tokens\":[");
    for (int k = 0; k < nt; k++)
        len += (size_t)snprintf(list + len, cap - len, "%s{\"id\":%d,\"content\":\"%s\",\"special\":%s}", k ? "," : "",
                                1000 + k, tok[k], special[k] ? "true" : "false");
    snprintf(list + len, cap - len, "]");
    size_t jn;
    char *json = bytes256_with("\"added_tokens\":[]", list, &jn);
    free(list);
    drt_tokenizer *t = NULL;
    if (!json || drt_tokenizer_load_json(json, jn, "added.json", &t) != DRT_OK)
        DRT_CHECK(0, "added tokens: %s", drt_last_error());
    free(json);
    return t;
}

/* Random token sets over {a, b} (where tokens overlap, nest and share
 * prefixes and suffixes most) on random texts: the split equals the plain
 * reference, every position tried with every token. */
static void test_added_tokens_random(void) {
    drt_tokenizer *plain = NULL;
    if (drt_tokenizer_load(TOKDIR "/bytes256.json", &plain) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    srand(2525);
    int bad = 0, rounds = 300;
    for (int round = 0; round < rounds; round++) {
        ref_tok tk[12];
        const char *tok[12];
        int special[12], nt = 0, want_nt = 1 + rand() % 12;
        while (nt < want_nt) {
            ref_tok x = {0};
            x.len = 1 + (size_t)(rand() % 6);
            for (size_t i = 0; i < x.len; i++) x.s[i] = "ab"[rand() % 2];
            int dup = 0;
            for (int k = 0; k < nt; k++) dup |= strcmp(tk[k].s, x.s) == 0;
            if (dup) continue;
            x.special = rand() % 2;
            tk[nt] = x;
            nt++;
        }
        for (int k = 0; k < nt; k++) tok[k] = tk[k].s, special[k] = tk[k].special;
        drt_tokenizer *t = with_added(tok, special, nt);
        if (!t) break;
        for (int k = 0; k < nt; k++) tk[k].id = drt_tokenizer_token_to_id(t, tk[k].s);
        for (int r = 0; r < 8; r++) {
            char text[64];
            size_t n = (size_t)(rand() % 60);
            for (size_t i = 0; i < n; i++) text[i] = "aab"[rand() % 3];
            idbuf want = {0};
            ref_split(plain, tk, nt, 1, text, n, &want);
            int32_t *ids = NULL;
            int k = 0;
            drt_status s = drt_tokenizer_encode(t, text, n, 0, &ids, &k);
            int same = s == DRT_OK && k == want.n && (k == 0 || memcmp(ids, want.v, (size_t)k * sizeof *ids) == 0);
            if (!same && bad++ < 3) {
                char got_s[256], want_s[256];
                fmt_ids(got_s, sizeof got_s, ids, k);
                fmt_ids(want_s, sizeof want_s, want.v, want.n);
                DRT_CHECK(0, "random added tokens: round %d: text \"%.*s\": ids %s, the reference %s", round, (int)n,
                          text, got_s, want_s);
            }
            free(ids);
            free(want.v);
        }
        drt_tokenizer_free(t);
    }
    DRT_CHECK(bad == 0, "random added tokens: %d of %d texts differ from the reference", bad, rounds * 8);
    drt_tokenizer_free(plain);
}

/* Added-token matching is linear in the text, whatever the tokens: the
 * automaton steps stay within two per byte (per pass with tokens). Each
 * case is also checked for its ids: `lead` bytes of plain 'a' ids, then
 * the added token `tail` (if any), the longest one at the leftmost place. */
static void test_added_tokens_linear(void) {
    enum { K = 2000, N = 10000 };
    /* 'a'*k + 'b' for k = 1..K, the case that cost text x longest token */
    char **ab = malloc(K * sizeof *ab);
    for (int k = 0; k < K; k++) {
        ab[k] = malloc((size_t)k + 3);
        memset(ab[k], 'a', (size_t)k + 1);
        ab[k][k + 1] = 'b';
        ab[k][k + 2] = 0;
    }
    static const struct {
        const char *name;
        int special; /* the 'a'*k+'b' tokens matched in pass 1 or pass 2 */
        int with_a;  /* plus the token "a" */
        int end_b;   /* the text ends in 'b' */
        size_t lead; /* plain or "a" ids before the last token */
        int tail_k;  /* 0: no token at the end, else 'a'*tail_k + 'b' */
    } cases[] = {
        {"'a'*k+'b' (pass 2), text of 'a's", 0, 0, 0, N, 0},
        {"'a'*k+'b' (pass 1), text of 'a's", 1, 0, 0, N, 0},
        {"'a'*k+'b' and \"a\", text of 'a's", 0, 1, 0, N, 0},
        {"'a'*k+'b', 'a's then 'b'", 0, 0, 1, N - 1 - K, K},
        {"'a'*k+'b' and \"a\", 'a's then 'b'", 0, 1, 1, N - 1 - K, K},
    };
    char *text = malloc(N);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        int nt = K + cases[c].with_a;
        const char **tok = malloc((size_t)nt * sizeof *tok);
        int *special = malloc((size_t)nt * sizeof *special);
        for (int k = 0; k < K; k++) tok[k] = ab[k], special[k] = cases[c].special;
        if (cases[c].with_a) tok[K] = "a", special[K] = cases[c].special;
        drt_tokenizer *t = with_added(tok, special, nt);
        free(tok);
        free(special);
        if (!t) continue;
        memset(text, 'a', N);
        if (cases[c].end_b) text[N - 1] = 'b';
        int32_t a_id = drt_tokenizer_token_to_id(t, "a");
        int32_t tail_id = cases[c].tail_k ? drt_tokenizer_token_to_id(t, ab[cases[c].tail_k - 1]) : -1;
        size_t before = drt_tokenizer_added_steps();
        int32_t *ids = NULL;
        int k = 0;
        drt_status s = drt_tokenizer_encode(t, text, N, 0, &ids, &k);
        size_t steps = drt_tokenizer_added_steps() - before;
        int same = s == DRT_OK && (size_t)k == cases[c].lead + (tail_id >= 0);
        for (int i = 0; same && i < k; i++) same = ids[i] == ((size_t)i < cases[c].lead ? a_id : tail_id);
        DRT_CHECK(same, "%s: %s", cases[c].name, s ? drt_last_error() : "other ids");
        DRT_CHECK(steps <= 2 * (size_t)N, "%s: %zu matching steps for %d bytes (at most %d: two per byte)",
                  cases[c].name, steps, N, 2 * N);
        if (g_verbose) printf("  %s: %zu matching steps for %d bytes\n", cases[c].name, steps, N);
        free(ids);
        drt_tokenizer_free(t);
    }
    free(text);
    for (int k = 0; k < K; k++) free(ab[k]);
    free(ab);
}

/* An added token that strips whitespace looks at each space once: lstrip
 * scanned back to the start of the whitespace run and rstrip forward to its
 * end at every match, so a " " token with either on 10 KB of spaces cost
 * text x text. The ids are as before (find_matches: each match takes the
 * whitespace next to it that no earlier match took; "_": the plain use). */
static void test_strip_linear(void) {
    enum { N = 10000 };
    static const struct {
        const char *token, *flag, *unit; /* the text is unit repeated */
        int ids_per_unit;                /* all the token's id */
    } cases[] = {
        {"_", "lstrip", " _", 1},
        {" ", "lstrip", " ", 1},
        {" ", "rstrip", " ", 1},
        {"_", "rstrip", "_ ", 1},
    };
    char *text = malloc(N);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char list[256];
        snprintf(list, sizeof list, "\"added_tokens\":[{\"id\":256,\"content\":\"%s\",\"%s\":true}]", cases[c].token,
                 cases[c].flag);
        size_t jn;
        char *json = bytes256_with("\"added_tokens\":[]", list, &jn);
        drt_tokenizer *t = NULL;
        drt_status s = json ? drt_tokenizer_load_json(json, jn, "strip.json", &t) : DRT_ERR_IO;
        free(json);
        DRT_CHECK(s == DRT_OK, "%s: %s", cases[c].flag, drt_last_error());
        if (s != DRT_OK) continue;
        size_t ul = strlen(cases[c].unit);
        for (size_t i = 0; i < N; i++) text[i] = cases[c].unit[i % ul];
        int32_t id = drt_tokenizer_token_to_id(t, cases[c].token);
        size_t before = drt_tokenizer_added_steps();
        int32_t *ids = NULL;
        int k = 0;
        s = drt_tokenizer_encode(t, text, N, 0, &ids, &k);
        size_t steps = drt_tokenizer_added_steps() - before;
        int same = s == DRT_OK && (size_t)k == N / ul * (size_t)cases[c].ids_per_unit;
        for (int i = 0; same && i < k; i++) same = ids[i] == id;
        DRT_CHECK(same, "\"%s\" %s on \"%s\" x %zu: %d ids: %s", cases[c].token, cases[c].flag, cases[c].unit, N / ul,
                  k, s ? drt_last_error() : "not all the token");
        /* two automaton steps and one whitespace step per byte */
        DRT_CHECK(steps <= 3 * (size_t)N, "\"%s\" %s on %d bytes: %zu steps (at most %d)", cases[c].token,
                  cases[c].flag, N, steps, 3 * N);
        if (g_verbose) printf("  \"%s\" %s on %d bytes: %zu steps\n", cases[c].token, cases[c].flag, N, steps);
        free(ids);
        drt_tokenizer_free(t);
    }
    free(text);
}

/* A word of 200k letters encodes: a regex whose JIT code backtracks on the
 * machine stack (a repeated group) ran out of PCRE2's 32 KiB JIT stack and
 * failed with "JIT stack limit reached"; the fixtures' regexes take it too. */
static void test_long_word(void) {
    size_t n = 200000;
    char *word = malloc(n);
    for (size_t i = 0; i < n; i++) word[i] = (char)('a' + i % 26);
    static const char *files[] = {"gpt2", "llama3", "flags"};
    for (int f = 0; f < 4; f++) {
        drt_tokenizer *t = NULL;
        drt_status s;
        if (f < 3) {
            char path[512];
            snprintf(path, sizeof path, TOKDIR "/%s.json", files[f]);
            s = drt_tokenizer_load(path, &t);
        } else {
            size_t jn;
            char *json = bytes256_with(BYTES256_PRE,
                                       "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                                       "\"Split\",\"pattern\":{\"Regex\":\"(?:\\\\p{L}|')+\"},\"behavior\":"
                                       "\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\","
                                       "\"add_prefix_space\":false,\"use_regex\":false}]}",
                                       &jn);
            s = json ? drt_tokenizer_load_json(json, jn, "group.json", &t) : DRT_ERR_IO;
            free(json);
        }
        const char *name = f < 3 ? files[f] : "Split (?:\\p{L}|')+";
        DRT_CHECK(s == DRT_OK, "long word: %s: %s", name, drt_last_error());
        if (s != DRT_OK) continue;
        int32_t *ids = NULL;
        int k = 0;
        s = drt_tokenizer_encode(t, word, n, 0, &ids, &k);
        DRT_CHECK(s == DRT_OK, "long word: %s: a %zu-letter word: %s", name, n, drt_last_error());
        char *back = NULL;
        size_t bn = 0;
        if (s == DRT_OK && drt_tokenizer_decode(t, ids, k, 0, &back, &bn) == DRT_OK)
            /* flags.json adds a prefix space */
            DRT_CHECK(bn >= n && memcmp(back + (bn - n), word, n) == 0 && (bn == n || (bn == n + 1 && back[0] == ' ')),
                      "long word: %s: decode(encode(w)) != w", name);
        if (s == DRT_OK && f == 3) /* bytes256: one id per byte, the byte's */
            DRT_CHECK(k == (int)n, "long word: %s: %d ids for %zu bytes", name, k, n);
        free(back);
        free(ids);
        drt_tokenizer_free(t);
    }
    free(word);

    /* the interpreter that takes over from JIT keeps PCRE2's match limit: a
     * catastrophic pattern still fails at once, by JIT or interpreter */
    static const char *pats[] = {"(a+)+$", "(?:(a|aa)+)+$"};
    for (int p = 0; p < 2; p++) {
        char pre[256];
        snprintf(pre, sizeof pre,
                 "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                 "\"pattern\":{\"Regex\":\"%s\"},\"behavior\":\"Isolated\",\"invert\":false},"
                 "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}",
                 pats[p]);
        size_t jn;
        char *json = bytes256_with(BYTES256_PRE, pre, &jn);
        drt_tokenizer *t = NULL;
        drt_status s = json ? drt_tokenizer_load_json(json, jn, "catastrophic.json", &t) : DRT_ERR_IO;
        free(json);
        DRT_CHECK(s == DRT_OK, "%s: %s", pats[p], drt_last_error());
        if (s != DRT_OK) continue;
        char text[64];
        memset(text, 'a', 60);
        text[60] = 'b';
        int32_t *ids = NULL;
        int k;
        s = drt_tokenizer_encode(t, text, 61, 0, &ids, &k);
        DRT_CHECK(s == DRT_ERR_UNSUPPORTED && strstr(drt_last_error(), "limit"),
                  "%s over 60 letters: %s: %s (expected the match limit)", pats[p], drt_status_str(s),
                  s ? drt_last_error() : "encoded");
        if (g_verbose) printf("  %s: %s\n", pats[p], drt_last_error());
        free(ids);
        drt_tokenizer_free(t);
    }
}

/* drt_tokenizer_encode_max: a text that fits encodes as drt_tokenizer_encode
 * does; one id too many fails as it passes the limit; a text far longer than
 * the limit can hold is refused before a (here quadratic) Split regex runs. */
static void test_encode_max(void) {
    drt_tokenizer *t = NULL;
    if (drt_tokenizer_load(TOKDIR "/llama3.json", &t) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    static const char *texts[] = {"Hello world, this is a test.", "", "<|begin_of_text|>x  y\n\n12345"};
    for (int i = 0; i < 3; i++) {
        int32_t *a = NULL, *b = NULL;
        int na = 0, nb = -1;
        size_t tl = strlen(texts[i]);
        drt_status s = drt_tokenizer_encode(t, texts[i], tl, 1, &a, &na);
        DRT_CHECK(s == DRT_OK, "encode: %s", drt_last_error());
        s = drt_tokenizer_encode_max(t, texts[i], tl, 1, na, &b, &nb);
        DRT_CHECK(s == DRT_OK && nb == na && memcmp(a, b, (size_t)na * sizeof *a) == 0, "encode_max(%d) of \"%s\": %s",
                  na, texts[i], s ? drt_last_error() : "other ids");
        free(b);
        b = NULL;
        if (na > 1) { /* a limit of 0 is no limit */
            s = drt_tokenizer_encode_max(t, texts[i], tl, 1, na - 1, &b, &nb);
            DRT_CHECK(s == DRT_ERR_INVALID_ARG && b == NULL && strstr(drt_last_error(), "more than"),
                      "encode_max(%d) of \"%s\" (%d ids): %s: %s", na - 1, texts[i], na, drt_status_str(s),
                      drt_last_error());
        }
        free(a);
    }
    drt_tokenizer_free(t);

    /* \p{L}*! tries every letter to the end of the word at every position */
    size_t jn;
    char *json = bytes256_with(BYTES256_PRE,
                               "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":"
                               "\"Split\",\"pattern\":{\"Regex\":\"\\\\p{L}*!|.\"},\"behavior\":\"Isolated\","
                               "\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,"
                               "\"use_regex\":false}]}",
                               &jn);
    t = NULL;
    drt_status s = json ? drt_tokenizer_load_json(json, jn, "quadratic.json", &t) : DRT_ERR_IO;
    free(json);
    DRT_CHECK(s == DRT_OK, "quadratic.json: %s", drt_last_error());
    if (s != DRT_OK) return;
    size_t n = 100000;
    char *text = malloc(n);
    memset(text, 'a', n);
    int32_t *ids = NULL;
    int k = -1;
    s = drt_tokenizer_encode_max(t, text, n, 0, 2048, &ids, &k);
    DRT_CHECK(s == DRT_ERR_INVALID_ARG && ids == NULL &&
                  strstr(drt_last_error(), "text of 100000 bytes cannot fit in 2048 tokens") &&
                  strstr(drt_last_error(), "refused before tokenizing"),
              "100 KB over a limit of 2048: %s: %s", drt_status_str(s), drt_last_error());
    if (g_verbose) printf("  over the limit: %s\n", drt_last_error());
    s = drt_tokenizer_encode_max(t, text, 2000, 0, 2048, &ids, &k); /* fits: encoded */
    DRT_CHECK(s == DRT_OK && k == 2000, "2000 letters, limit 2048: %s", s ? drt_last_error() : "wrong count");
    free(ids);
    free(text);
    drt_tokenizer_free(t);
}

size_t drt_tokenizer_regex_calls(void); /* text/tok_encode.c, for tests */

/* s with its first `from` replaced by `to` (s is freed; NULL if not there) */
static char *replace_once(char *s, size_t *n, const char *from, const char *to) {
    const char *at = s ? strstr(s, from) : NULL;
    DRT_CHECK(at != NULL, "test bug: \"%.40s\" not in the tokenizer", from);
    if (!at) {
        free(s);
        return NULL;
    }
    size_t pre = (size_t)(at - s), fl = strlen(from), tl = strlen(to);
    char *o = malloc(*n - fl + tl + 1);
    memcpy(o, s, pre);
    memcpy(o + pre, to, tl);
    memcpy(o + pre + tl, at + fl, *n - pre - fl + 1);
    *n = *n - fl + tl;
    free(s);
    return o;
}

/* Split steps that drop text, by a String (taken literally) or a Regex
 * pattern, inverted or not: the text encodes as `want` does without them
 * (bytes256 has no merges, so only dropped bytes change the ids). A String
 * pattern did not compile at all (PCRE2_LITERAL refuses PCRE2_UCP). */
static void test_split_removed(void) {
    static const struct {
        const char *pattern, *behavior;
        int invert;
        const char *text, *want;
    } cases[] = {
        {"{\"String\":\" \"}", "Removed", 0, "ab  cd e ", "abcde"},
        {"{\"String\":\".\"}", "Removed", 0, "a.b..c", "abc"},
        {"{\"String\":\"->\"}", "Removed", 0, "a->b-->c>", "ab-c>"},
        {"{\"String\":\"+\"}", "Isolated", 0, "a+b", "a+b"},
        {"{\"Regex\":\".\"}", "Removed", 0, "a.b", ""},
        {"{\"Regex\":\"\\\\p{L}+\"}", "Removed", 1, ", ab, cd!e", "abcde"},
        {"{\"Regex\":\"\\\\s+\"}", "Removed", 1, "a b\t c", " \t "},
    };
    drt_tokenizer *plain = NULL;
    if (drt_tokenizer_load(TOKDIR "/bytes256.json", &plain) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char pre[512];
        snprintf(pre, sizeof pre,
                 "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                 "\"pattern\":%s,\"behavior\":\"%s\",\"invert\":%s},{\"type\":\"ByteLevel\","
                 "\"add_prefix_space\":false,\"use_regex\":false}]}",
                 cases[c].pattern, cases[c].behavior, cases[c].invert ? "true" : "false");
        size_t jn;
        char *json = bytes256_with(BYTES256_PRE, pre, &jn);
        drt_tokenizer *t = NULL;
        drt_status s = json ? drt_tokenizer_load_json(json, jn, "split.json", &t) : DRT_ERR_IO;
        free(json);
        DRT_CHECK(s == DRT_OK, "Split %s %s: %s", cases[c].pattern, cases[c].behavior, drt_last_error());
        if (s != DRT_OK) continue;
        int32_t *ids = NULL, *want = NULL;
        int k = -1, nw = -1;
        s = drt_tokenizer_encode(t, cases[c].text, strlen(cases[c].text), 0, &ids, &k);
        drt_tokenizer_encode(plain, cases[c].want, strlen(cases[c].want), 0, &want, &nw);
        DRT_CHECK(s == DRT_OK && k == nw && memcmp(ids, want, (size_t)k * sizeof *ids) == 0,
                  "Split %s %s%s: \"%s\" should encode as \"%s\": %s", cases[c].pattern, cases[c].behavior,
                  cases[c].invert ? " inverted" : "", cases[c].text, cases[c].want, s ? drt_last_error() : "other ids");
        free(ids);
        free(want);
        drt_tokenizer_free(t);
    }
    drt_tokenizer_free(plain);
}

/* The caller's limit stops pre-tokenizing once it is passed, also where the
 * early refusal (more bytes than the limit times the longest token) cannot
 * be made: one very long vocab entry, a Split that removes text, an added
 * token that strips whitespace. A `\p{L}*!|.` Split (quadratic in a word)
 * ran over the whole text first: as many regex calls as letters, 6.6 s for
 * 100 KB with a limit of 64. Now a few per token of the limit. */
static void test_limit_stops_pretokenizer(void) {
    static const char quad[] = "{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\p{L}*!|.\"},"
                               "\"behavior\":\"Isolated\",\"invert\":false}";
    static const char bl[] = "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}";
    char *long_entry = malloc(5000 + 32);
    strcpy(long_entry, "\"vocab\":{\"");
    memset(long_entry + strlen(long_entry), 'x', 5000);
    strcpy(long_entry + 10 + 5000, "\":256,");
    static const struct {
        const char *name;
        const char *split2;    /* a second Split after quad, or "" */
        const char *from, *to; /* one more change to bytes256.json, or NULL */
        int long_vocab;        /* add a vocab entry of 5000 bytes */
    } cases[] = {
        {"one vocab entry of 5000 bytes", "", NULL, NULL, 1},
        {"a Split that removes spaces",
         ",{\"type\":\"Split\",\"pattern\":{\"Regex\":\" "
         "\"},\"behavior\":\"Removed\",\"invert\":false}",
         NULL, NULL, 0},
        {"an added token with lstrip", "", "\"added_tokens\":[]",
         "\"added_tokens\":[{\"id\":256,\"content\":\"<x>\",\"lstrip\":true}]", 0},
        {"an added token with rstrip", "", "\"added_tokens\":[]",
         "\"added_tokens\":[{\"id\":256,\"content\":\"<x>\",\"rstrip\":true}]", 0},
    };
    enum { N = 30000, LIMIT = 64 };
    char *letters = malloc(N);
    memset(letters, 'a', N);
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        char pre[512];
        snprintf(pre, sizeof pre, "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[%s%s,%s]}", quad,
                 cases[c].split2, bl);
        size_t jn;
        char *json = bytes256_with(BYTES256_PRE, pre, &jn);
        if (json && cases[c].from) json = replace_once(json, &jn, cases[c].from, cases[c].to);
        if (json && cases[c].long_vocab) json = replace_once(json, &jn, "\"vocab\":{", long_entry);
        drt_tokenizer *t = NULL;
        drt_status s = json ? drt_tokenizer_load_json(json, jn, "limit.json", &t) : DRT_ERR_IO;
        free(json);
        DRT_CHECK(s == DRT_OK, "%s: %s", cases[c].name, drt_last_error());
        if (s != DRT_OK) continue;
        int32_t *ids = NULL;
        int k = -1;
        size_t before = drt_tokenizer_regex_calls();
        s = drt_tokenizer_encode_max(t, letters, N, 0, LIMIT, &ids, &k);
        size_t calls = drt_tokenizer_regex_calls() - before;
        DRT_CHECK(s == DRT_ERR_INVALID_ARG && ids == NULL && strstr(drt_last_error(), "more than 64 tokens"),
                  "%s: %d letters over a limit of %d: %s: %s", cases[c].name, N, LIMIT, drt_status_str(s),
                  drt_last_error());
        /* a piece takes a match and a last failed search per step */
        DRT_CHECK(calls <= 4 * (LIMIT + 1), "%s: %zu regex calls for %d letters over a limit of %d (at most %d)",
                  cases[c].name, calls, N, LIMIT, 4 * (LIMIT + 1));
        if (g_verbose) printf("  %s: %zu regex calls, %s\n", cases[c].name, calls, drt_last_error());
        free(ids);
        drt_tokenizer_free(t);
    }
    free(letters);
    free(long_entry);
}

/* ---- special tokens from the caller's text (drt_encode_opts) ------------------ */

static int count_id(const int32_t *ids, int n, int32_t id) {
    int k = 0;
    for (int i = 0; i < n; i++) k += ids[i] == id;
    return k;
}

/* Special tokens only where the caller allows them: parse_special 0 reads
 * every one as text (the corpus checks it against tokenizers'
 * encode_special_tokens); plain ranges read those they touch as text, the
 * others as tokens; the text decodes back either way. */
static void test_plain_ranges(void) {
    drt_tokenizer *t = NULL;
    if (drt_tokenizer_load(TOKDIR "/llama3.json", &t) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    const char text[] = "a <|eot_id|> b<|eot_id|>c<|begin_of_text|>";
    const size_t n = sizeof text - 1;
    const int32_t eot = drt_tokenizer_token_to_id(t, "<|eot_id|>"),
                  bot = drt_tokenizer_token_to_id(t, "<|begin_of_text|>");
    const size_t e1 = (size_t)(strstr(text, "<|eot_id|>") - text),
                 e2 = (size_t)(strstr(text + e1 + 1, "<|eot_id|>") - text);
    const size_t b1 = (size_t)(strstr(text, "<|begin") - text);
    static const struct {
        const char *name;
        int parse_special, n_plain;
        size_t r[4];    /* ranges, as offsets below: filled in */
        int eots, bots; /* special ids in the result */
    } cases[] = {
        {"all special", 1, 0, {0}, 2, 1},
        {"none special", 0, 0, {0}, 0, 0},
        {"the whole text plain", 1, 1, {0}, 0, 0},
        {"the first eot plain", 1, 1, {0}, 1, 1},
        {"one byte of the second eot plain", 1, 1, {0}, 1, 1},
        {"an empty range on the first eot's first byte", 1, 1, {0}, 2, 1},
        {"two ranges, unsorted", 1, 2, {0}, 0, 1},
    };
    size_t ranges[][4] = {{0}, {0}, {0, n}, {e1, e1 + 10}, {e2 + 9, e2 + 10}, {e1, e1}, {e2, e2 + 1, 0, e1 + 1}};
    int32_t *all = NULL, *none = NULL;
    int n_all = 0, n_none = 0;
    drt_encode_opts o0 = {.add_special = 0, .parse_special = 0};
    DRT_CHECK(drt_tokenizer_encode(t, text, n, 0, &all, &n_all) == DRT_OK, "%s", drt_last_error());
    DRT_CHECK(drt_tokenizer_encode_opts(t, text, n, &o0, &none, &n_none) == DRT_OK, "%s", drt_last_error());
    (void)b1;
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        drt_encode_opts o = {.parse_special = cases[c].parse_special,
                             .plain = cases[c].n_plain ? ranges[c] : NULL,
                             .n_plain = cases[c].n_plain};
        int32_t *ids = NULL;
        int k = 0;
        drt_status st = drt_tokenizer_encode_opts(t, text, n, &o, &ids, &k);
        DRT_CHECK(st == DRT_OK, "%s: %s", cases[c].name, drt_last_error());
        if (st != DRT_OK) continue;
        DRT_CHECK(count_id(ids, k, eot) == cases[c].eots && count_id(ids, k, bot) == cases[c].bots,
                  "%s: %d <|eot_id|> and %d <|begin_of_text|>, want %d and %d", cases[c].name, count_id(ids, k, eot),
                  count_id(ids, k, bot), cases[c].eots, cases[c].bots);
        char *back = NULL;
        size_t bn = 0;
        DRT_CHECK(drt_tokenizer_decode(t, ids, k, 0, &back, &bn) == DRT_OK && bn == n && !memcmp(back, text, n),
                  "%s: the ids do not decode back to the text", cases[c].name);
        if (c == 2)
            DRT_CHECK(k == n_none && !memcmp(ids, none, sizeof *ids * (size_t)k),
                      "the whole text plain differs from parse_special 0");
        if (c == 0 || c == 5)
            DRT_CHECK(k == n_all && !memcmp(ids, all, sizeof *ids * (size_t)k), "%s differs from drt_tokenizer_encode",
                      cases[c].name);
        drt_free(back);
        free(ids);
    }
    drt_encode_opts bad = {.parse_special = 1, .n_plain = 1};
    int32_t *ids = NULL;
    int k = 0;
    DRT_CHECK(drt_tokenizer_encode_opts(t, text, n, &bad, &ids, &k) == DRT_ERR_INVALID_ARG, "plain NULL, n_plain 1");
    free(all);
    free(none);
    drt_tokenizer_free(t);
}

/* A tokenizer whose Split regex backtracks (quadratic in a word's length)
 * holds a thread no longer than drt_encode_opts.max_seconds allows, and a
 * cancel flag stops it at once; without either the text still encodes. */
static void test_time_bound(void) {
    static const char pre[] = "\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\","
                              "\"pattern\":{\"Regex\":\"\\\\p{L}*!|.\"},\"behavior\":\"Isolated\",\"invert\":false},"
                              "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}";
    size_t jn;
    char *json = bytes256_with(BYTES256_PRE, pre, &jn);
    drt_tokenizer *t = NULL;
    drt_status st = json ? drt_tokenizer_load_json(json, jn, "quad.json", &t) : DRT_ERR_IO;
    free(json);
    DRT_CHECK(st == DRT_OK, "quad.json: %s", drt_last_error());
    if (st != DRT_OK) return;
    enum { N = 200000 };
    char *letters = malloc(N);
    memset(letters, 'a', N);
    int32_t *ids = NULL;
    int k = 0;
    drt_encode_opts o = {.max_seconds = 0.3};
    double t0 = drt_clock_s();
    st = drt_tokenizer_encode_opts(t, letters, N, &o, &ids, &k);
    double dt = drt_clock_s() - t0;
    DRT_CHECK(st == DRT_ERR_UNSUPPORTED && ids == NULL && strstr(drt_last_error(), "took longer than 0.3 s"),
              "%d letters, 0.3 s: %s: %s", N, drt_status_str(st), drt_last_error());
    DRT_CHECK(dt < 3, "%d letters, 0.3 s: stopped after %.2f s", N, dt);
    volatile int stop = 1;
    drt_encode_opts oc = {.cancel = &stop};
    t0 = drt_clock_s();
    st = drt_tokenizer_encode_opts(t, letters, N, &oc, &ids, &k);
    DRT_CHECK(st == DRT_ERR_UNAVAILABLE && strstr(drt_last_error(), "cancelled") && drt_clock_s() - t0 < 1,
              "cancelled: %s: %s after %.2f s", drt_status_str(st), drt_last_error(), drt_clock_s() - t0);
    stop = 0;
    o.max_seconds = 30;
    st = drt_tokenizer_encode_opts(t, letters, 2000, &o, &ids, &k);
    DRT_CHECK(st == DRT_OK && k == 2000, "2000 letters within 30 s: %s (%d ids)", drt_last_error(), k);
    free(ids);
    free(letters);
    drt_tokenizer_free(t);
}

/* ---- cli/text.c --------------------------------------------------------------- */

static void copy_file(const char *from, const char *to) {
    char *buf;
    size_t n;
    if (drt_read_text_file(from, &buf, &n) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    FILE *fp = fopen(to, "wb");
    DRT_CHECK(fp && fwrite(buf, 1, n, fp) == n, "cannot write %s", to);
    if (fp) fclose(fp);
    free(buf);
}

static char *file_text(FILE *fp, size_t *n) {
    fflush(fp);
    long end = ftell(fp);
    char *b = malloc((size_t)end + 1);
    rewind(fp);
    *n = fread(b, 1, (size_t)end, fp);
    b[*n] = 0;
    fseek(fp, 0, SEEK_END);
    return b;
}

static void test_cli_text(void) {
    const char *dir = DRT_TMP_DIR "/tok_textmodel";
    mkdir(dir, 0755);
    char tpath[512];
    snprintf(tpath, sizeof tpath, "%s/tokenizer.json", dir);
    remove(tpath);
    cli_text ct;
    int32_t *ids;
    int n;

    /* no tokenizer.json: a clear error that says what to do */
    drt_status s = cli_text_begin(&ct, dir, "hi", NULL, 2000, -1, 0, stdout, &ids, &n);
    DRT_CHECK(s == DRT_ERR_IO && ids == NULL && strstr(drt_last_error(), "tok_textmodel/tokenizer.json") &&
                  strstr(drt_last_error(), "--tokens"),
              "missing tokenizer.json: %s: %s", drt_status_str(s), drt_last_error());
    if (g_verbose) printf("  cli: %s\n", drt_last_error());

    copy_file(TOKDIR "/llama3.json", tpath);
    drt_tokenizer *ref;
    if (drt_tokenizer_load(tpath, &ref) != DRT_OK) {
        DRT_CHECK(0, "%s", drt_last_error());
        return;
    }
    /* "中文 😀 ok": multi-byte characters whose bytes spread over tokens */
    const char *prompt = "The magic number of Tokyo is \xe4\xb8\xad\xe6\x96\x87 \xf0\x9f\x98\x80 ok";
    int32_t *want;
    int n_want;
    drt_tokenizer_encode(ref, prompt, strlen(prompt), 1, &want, &n_want);

    /* a prompt longer than the context stops while encoding, naming the context */
    s = cli_text_begin(&ct, dir, prompt, NULL, 2000, -1, 3, stdout, &ids, &n);
    DRT_CHECK(s == DRT_ERR_INVALID_ARG && ct.over_context && ids == NULL && strstr(drt_last_error(), "--prompt: ") &&
                  strstr(drt_last_error(), "the prompt must fit the context of 3 tokens"),
              "prompt over a context of 3: %s: %s", drt_status_str(s), drt_last_error());

    s = cli_text_begin(&ct, dir, prompt, NULL, 2000, -1, n_want, stdout, &ids, &n);
    DRT_CHECK(s == DRT_OK, "cli_text_begin: %s", drt_last_error());
    if (s == DRT_OK) {
        DRT_CHECK(n == n_want && memcmp(ids, want, sizeof *ids * (size_t)n) == 0 && ids[0] == drt_tokenizer_bos_id(ref),
                  "--prompt: ids differ from encode with BOS");
        DRT_CHECK(ct.eos == drt_tokenizer_token_to_id(ref, "<|end_of_text|>"),
                  "no config eos: eos %d should be <|end_of_text|>", ct.eos);
        free(ids);
        cli_text_free(&ct);
    }
    s = cli_text_begin(&ct, dir, prompt, NULL, 2000, 7, 0, stdout, &ids, &n);
    DRT_CHECK(s == DRT_OK && ct.eos == 7, "config eos 7: eos %d", ct.eos);
    if (s == DRT_OK) free(ids), cli_text_free(&ct);

    /* the same prompt from a file and from stdin */
    char ppath[512];
    snprintf(ppath, sizeof ppath, "%s/prompt.txt", dir);
    FILE *fp = fopen(ppath, "wb");
    if (fp) fputs(prompt, fp), fclose(fp);
    s = cli_text_begin(&ct, dir, NULL, ppath, 2000, -1, 0, stdout, &ids, &n);
    DRT_CHECK(s == DRT_OK && n == n_want && memcmp(ids, want, sizeof *ids * (size_t)n) == 0, "--prompt-file: %s",
              s ? drt_last_error() : "ids differ");
    if (s == DRT_OK) free(ids), cli_text_free(&ct);
    if (freopen(ppath, "rb", stdin)) {
        s = cli_text_begin(&ct, dir, NULL, "-", 2000, -1, 0, stdout, &ids, &n);
        DRT_CHECK(s == DRT_OK && n == n_want && memcmp(ids, want, sizeof *ids * (size_t)n) == 0, "--prompt-file -: %s",
                  s ? drt_last_error() : "ids differ");
        if (s == DRT_OK) free(ids), cli_text_free(&ct);
    }

    /* errors: a missing prompt file, invalid UTF-8, ids beyond the model */
    s = cli_text_begin(&ct, dir, NULL, DRT_TMP_DIR "/no_such_prompt.txt", 2000, -1, 0, stdout, &ids, &n);
    DRT_CHECK(s == DRT_ERR_IO && strstr(drt_last_error(), "no_such_prompt.txt"), "missing prompt file: %s",
              drt_last_error());
    s = cli_text_begin(&ct, dir, "bad \xff here", NULL, 2000, -1, 0, stdout, &ids, &n);
    DRT_CHECK(s == DRT_ERR_INVALID_ARG &&
                  strstr(drt_last_error(), "--prompt: tokenizer: text is not valid UTF-8 (byte 4"),
              "invalid UTF-8 prompt: %s", drt_last_error());
    if (g_verbose) printf("  cli: %s\n", drt_last_error());
    s = cli_text_begin(&ct, dir, prompt, NULL, 256, -1, 0, stdout, &ids, &n);
    DRT_CHECK(s == DRT_ERR_FORMAT && strstr(drt_last_error(), "outside the model's vocabulary of 256"),
              "ids beyond the model vocab: %s", drt_last_error());
    if (g_verbose) printf("  cli: %s\n", drt_last_error());

    /* streamed output: after every token the file holds whole characters
     * and a prefix of the full decode; at the end exactly the decode plus a
     * newline; special tokens are not printed */
    FILE *out = tmpfile();
    s = cli_text_begin(&ct, dir, "x", NULL, 2000, -1, 0, out, &ids, &n);
    if (s == DRT_OK && out) {
        free(ids);
        int32_t gen[64];
        int k = 0;
        for (int i = 0; i < n_want && k < 60; i++) {
            gen[k++] = want[i];
            if (i == 5) gen[k++] = ct.eos; /* a special in the middle */
        }
        char *full;
        size_t full_n;
        drt_tokenizer_decode(ref, gen, k, 1, &full, &full_n);
        int prefix_ok = 1, whole_ok = 1;
        for (int i = 0; i < k; i++) {
            DRT_CHECK(cli_text_put(&ct, gen[i]) == DRT_OK, "cli_text_put: %s", drt_last_error());
            size_t got_n;
            char *got = file_text(out, &got_n);
            if (got_n > full_n || memcmp(got, full, got_n) != 0) prefix_ok = 0;
            if (!utf8_complete(got, got_n)) whole_ok = 0;
            free(got);
        }
        DRT_CHECK(cli_text_end(&ct) == DRT_OK, "cli_text_end: %s", drt_last_error());
        size_t got_n;
        char *got = file_text(out, &got_n);
        DRT_CHECK(prefix_ok && whole_ok, "streamed output: prefix %d, whole characters %d", prefix_ok, whole_ok);
        DRT_CHECK(got_n == full_n + 1 && memcmp(got, full, full_n) == 0 && got[full_n] == '\n',
                  "streamed output \"%s\", want \"%s\\n\"", got, full);
        DRT_CHECK(!strstr(got, "<|"), "a special token was printed: %s", got);
        free(got);
        free(full);
        cli_text_free(&ct);
    }
    if (out) fclose(out);
    free(want);
    drt_tokenizer_free(ref);
}

/* ---- speed (printed, not asserted) --------------------------------------------- */

static void bench(const char *name) {
    char path[512];
    snprintf(path, sizeof path, TOKDIR "/%s.json", name);
    drt_tokenizer *t;
    if (drt_tokenizer_load(path, &t) != DRT_OK) return;
    const char *unit = "The magic number of Paris is 48213. It'S a   long\n\nhaystack \xe4\xb8\xad\xe6\x96\x87 "
                       "filler sentence, with words and 1234567 numbers! ";
    size_t un = strlen(unit), reps = 4000, n = un * reps;
    char *text = malloc(n);
    for (size_t i = 0; i < reps; i++) memcpy(text + i * un, unit, un);
    int32_t *ids;
    int k;
    clock_t c0 = clock();
    drt_status s = drt_tokenizer_encode(t, text, n, 1, &ids, &k);
    double dt = (double)(clock() - c0) / CLOCKS_PER_SEC;
    DRT_CHECK(s == DRT_OK, "bench encode: %s", drt_last_error());
    if (s == DRT_OK) {
        printf("%-7s encode %zu KB -> %d tokens in %.3f s (%.1f MB/s)\n", name, n >> 10, k, dt,
               (double)n / 1e6 / (dt > 0 ? dt : 1e-9));
        free(ids);
    }
    free(text);
    drt_tokenizer_free(t);
}

int main(void) {
    g_verbose = getenv("DRT_TEST_VERBOSE") != NULL;
    test_corpus("gpt2", 1);
    test_corpus("llama3", 1);
    test_corpus("flags", 0);
    test_corpus("bytes256", 1);
    test_api();
    test_random_round_trip("gpt2");
    test_random_round_trip("llama3");
    test_bad_files();
    test_cut_character_at_arena_end();
    test_many_added_tokens();
    test_added_tokens_random();
    test_added_tokens_linear();
    test_strip_linear();
    test_long_word();
    test_encode_max();
    test_limit_stops_pretokenizer();
    test_split_removed();
    test_plain_ranges();
    test_time_bound();
    test_cli_text();
    bench("gpt2");
    bench("llama3");
    return drt_test_summary("test_tokenizer");
}
