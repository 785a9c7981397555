/* The tokenizer's inside (text/): the struct behind drt_tokenizer and the
 * helpers its files share. tok_load.c reads tokenizer.json into it,
 * tok_encode.c turns text into ids, tok_decode.c ids into text, utf8.c holds
 * the growable buffers and the UTF-8 steps. Nothing above text/ includes it:
 * the interface is include/diffrt/tokenizer.h. */
#ifndef DRT_TOK_INTERNAL_H
#define DRT_TOK_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "diffrt/tokenizer.h"

#define MAX_TOKEN_ID (1 << 24) /* ids are below it */
#define MAX_SPLITS 8           /* Split pre-tokenizers in one sequence */

typedef struct {
    int32_t *v;
    size_t n, cap;
} ivec;
typedef struct {
    char *p;
    size_t n, cap;
} bbuf;
#define WHITE_SPACE_CLASS                                                                                              \
    "\\x{9}-\\x{D}\\x{20}\\x{85}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}"                        \
    "\\x{205F}\\x{3000}"
/* string -> int32; strings live in the tokenizer's arena (offset, length). */
typedef struct {
    uint32_t off, len;
    int32_t val; /* -1: empty slot */
} smap_slot;
typedef struct {
    smap_slot *slots;
    size_t mask, n;
} smap;
/* (id, id) -> (rank, new id) */
typedef struct {
    uint64_t key; /* UINT64_MAX: empty */
    int32_t rank, new_id;
} mmap_slot;
typedef struct {
    mmap_slot *slots;
    size_t mask, n;
} mmap;

typedef struct {
    uint32_t off, len; /* content in the arena */
    int32_t id;
    unsigned char special, lstrip, rstrip, single_word, normalized;
} added_tok;
/* Added tokens of one kind (normalized or not) for leftmost-longest
 * matching: an Aho-Corasick automaton over the tokens written backwards, so
 * that one right-to-left pass over a text gives, at every position, the
 * longest token starting there (longest_from). Nodes are numbered
 * breadth-first, so the children of node v are the nodes child[v] ..
 * child[v+1]-1, sorted by the byte on their edge. */
typedef struct {
    int32_t *child;      /* n_nodes + 1 */
    unsigned char *byte; /* byte on the edge into the node */
    int32_t *fail;       /* longest proper suffix that is a node */
    int32_t *out;        /* longest token (into added[]) that is a suffix of the node, -1: none */
    int32_t n_nodes;     /* 0: no tokens of this kind */
} matcher;
enum { SPLIT_ISOLATED, SPLIT_REMOVED };
typedef struct {
    pcre2_code *re;
    int behavior, invert;
} split_step;
enum { DEC_NONE, DEC_BYTELEVEL };
typedef struct {
    uint32_t off, len;  /* 0,0 and kind 0: no token */
    unsigned char kind; /* 0 none, 1 model vocab, 2 added */
    unsigned char special;
} id_entry;
struct drt_tokenizer {
    char *arena;
    size_t arena_n, arena_cap;
    smap vocab; /* model vocab */
    smap added_map;
    mmap merges;
    id_entry *ids;
    int n_ids;           /* max id + 1 */
    int32_t vocab_count; /* entries in the model vocab (HF get_vocab_size) */
    added_tok *added;
    int n_added;
    matcher m_raw, m_norm;
    pcre2_code *word_re; /* Rust regex \w, for single_word; NULL when unused */
    split_step splits[MAX_SPLITS];
    int n_splits;
    int bl_prefix_space;
    pcre2_code *bl_re; /* the GPT-2 regex when ByteLevel use_regex */
    int ignore_merges, fuse_unk;
    int32_t unk_id;
    int32_t byte_id[256];        /* vocab id of the byte-level char of each byte */
    uint32_t byte_char[256];     /* bytes_to_unicode */
    int16_t char_byte[324];      /* inverse, -1 when none */
    int32_t *pre_ids, *post_ids; /* post-processor, single sequence */
    int n_pre, n_post;
    int decoder;
    /* every id encode makes stands for at most max_tok_bytes bytes of the
     * text when bytes_bounded (no step drops text: every byte has a token,
     * no Split "Removed", no added token strips whitespace), so a text of
     * more than max_tokens * max_tok_bytes bytes cannot fit in max_tokens */
    size_t max_tok_bytes;
    int bytes_bounded;
};

/* utf8.c */
int drt_tok_ivec_push(ivec *a, int32_t x);
int drt_tok_bbuf_put(bbuf *b, const void *src, size_t n);
size_t drt_tok_utf8_check(const char *s, size_t n);
uint32_t drt_tok_utf8_decode(const unsigned char *s, int *len);
int drt_tok_utf8_encode(uint32_t cp, char *out);
size_t drt_tok_utf8_prev(const char *s, size_t i);
int drt_tok_is_white_space(uint32_t c);
size_t drt_tok_utf8_lossy(const unsigned char *b, size_t n, int final, bbuf *out);

/* tok_load.c: the tokenizer's strings and maps, for encode and decode */
const char *drt_tok_arena_str(const drt_tokenizer *t, uint32_t off);
int32_t drt_tok_smap_get(const drt_tokenizer *t, const smap *m, const char *s, size_t n);
const mmap_slot *drt_tok_mmap_get(const mmap *m, int32_t a, int32_t b);
int32_t drt_tok_ac_child(const matcher *m, int32_t v, unsigned char c);

#endif
