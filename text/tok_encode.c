/* The tokenizer's encode: added tokens (AddedVocabulary::find_matches),
 * the pre-tokenizers' splits, and BPE (Word::merge_all: a heap ordered by
 * merge rank then position, stale entries skipped; BPE::tokenize_with_cache
 * for ignore_merges). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "diffrt/util.h" /* drt_clock_s */
#include "drt_error.h"
#include "tok_internal.h"

/* ---- encoding -------------------------------------------------------------------- */

typedef struct {
    int32_t c, prev, next, len;
} symbol;
typedef struct {
    int32_t rank, pos, new_id;
} cand;

/* Scratch space of one encode call. */
typedef struct {
    const drt_tokenizer *t;
    ivec out;
    symbol *sym;
    cand *heap;
    size_t sym_cap, heap_cap, heap_n;
    bbuf tmp; /* byte-level mapped word, prefixed piece */
    pcre2_match_data *md;
    drt_status err;
    size_t max_out;   /* the caller's limit on ids; 0: none */
    int32_t *best[2]; /* longest_from of the added-token passes 1 and 2 */
    size_t best_cap[2];
    const char *text0;        /* the whole text (plain ranges are offsets into it) */
    const drt_encode_opts *o; /* the caller's choices */
    double deadline;          /* drt_clock_s() past which pre-tokenizing stops; 0: none */
    unsigned ticks;           /* regex matches since the last look at the clock */
} enc;

/* 0 (message set) once the output holds more ids than the caller allows:
 * checked after every word, so a text far over the limit stops early. */
static int within(enc *e) {
    if (!e->max_out || e->out.n <= e->max_out) return 1;
    e->err = drt_set_error(DRT_ERR_INVALID_ARG, "tokenizer: the text makes more than %zu tokens (the limit)",
                           e->max_out);
    return 0;
}

static int cand_less(const cand *a, const cand *b) {
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static void heap_push(enc *e, cand x) {
    size_t i = e->heap_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!cand_less(&x, &e->heap[p])) break;
        e->heap[i] = e->heap[p];
        i = p;
    }
    e->heap[i] = x;
}

static cand heap_pop(enc *e) {
    cand top = e->heap[0], x = e->heap[--e->heap_n];
    size_t i = 0, n = e->heap_n;
    for (;;) {
        size_t l = 2 * i + 1, m = i;
        const cand *best = &x;
        if (l < n && cand_less(&e->heap[l], best)) m = l, best = &e->heap[l];
        if (l + 1 < n && cand_less(&e->heap[l + 1], best)) m = l + 1;
        if (m == i) break;
        e->heap[i] = e->heap[m];
        i = m;
    }
    if (n) e->heap[i] = x;
    return top;
}

static int push_symbol(enc *e, size_t *n, int32_t id) {
    symbol *s = &e->sym[*n];
    s->c = id;
    s->prev = (int32_t)*n - 1;
    s->next = (int32_t)*n + 1;
    s->len = 1;
    (*n)++;
    return 1;
}

/* BPE of one pre-token (raw bytes); appends the ids. */
static int bpe_word(enc *e, const unsigned char *w, size_t n) {
    const drt_tokenizer *t = e->t;
    if (!n) return 1;
    if (t->ignore_merges) { /* BPE::tokenize_with_cache: the whole word when in vocab */
        e->tmp.n = 0;
        for (size_t i = 0; i < n; i++) {
            char s[4];
            int k = drt_tok_utf8_encode(t->byte_char[w[i]], s);
            if (!drt_tok_bbuf_put(&e->tmp, s, (size_t)k)) return 0;
        }
        int32_t id = drt_tok_smap_get(t, &t->vocab, e->tmp.p, e->tmp.n);
        if (id >= 0) return drt_tok_ivec_push(&e->out, id);
    }
    if (n > e->sym_cap) {
        size_t nc = n < 64 ? 64 : n;
        symbol *ns = realloc(e->sym, nc * sizeof *ns);
        cand *nh = realloc(e->heap, 3 * nc * sizeof *nh);
        if (ns) e->sym = ns;
        if (nh) e->heap = nh;
        if (!ns || !nh) return 0;
        e->sym_cap = nc;
        e->heap_cap = 3 * nc;
    }
    /* BPE::merge_word: one symbol per character of the byte-level string;
     * characters missing from the vocab become unk (fused if fuse_unk) or
     * vanish when there is no unk token */
    size_t ns = 0;
    int unk_pending = 0;
    for (size_t i = 0; i < n; i++) {
        int32_t id = t->byte_id[w[i]];
        if (id >= 0) {
            if (unk_pending) push_symbol(e, &ns, t->unk_id), unk_pending = 0;
            push_symbol(e, &ns, id);
        } else if (t->unk_id >= 0) {
            if (unk_pending && !t->fuse_unk) push_symbol(e, &ns, t->unk_id);
            unk_pending = 1;
        }
    }
    if (unk_pending) push_symbol(e, &ns, t->unk_id);
    if (!ns) return 1;
    e->sym[ns - 1].next = -1;

    /* Word::merge_all */
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < ns; i++) {
        const mmap_slot *m = drt_tok_mmap_get(&t->merges, e->sym[i].c, e->sym[i + 1].c);
        if (m) heap_push(e, (cand){m->rank, (int32_t)i, m->new_id});
    }
    while (e->heap_n) {
        cand top = heap_pop(e);
        symbol *cur = &e->sym[top.pos];
        if (cur->len == 0 || cur->next == -1) continue;
        int32_t next_pos = cur->next;
        symbol right = e->sym[next_pos];
        const mmap_slot *m = drt_tok_mmap_get(&t->merges, cur->c, right.c);
        if (!m || m->new_id != top.new_id) continue; /* stale */
        cur->c = top.new_id;
        cur->len += right.len;
        cur->next = right.next;
        e->sym[next_pos].len = 0;
        if (right.next > -1 && (size_t)right.next < ns) e->sym[right.next].prev = top.pos;
        if (cur->prev >= 0) {
            const mmap_slot *pm = drt_tok_mmap_get(&t->merges, e->sym[cur->prev].c, cur->c);
            if (pm) heap_push(e, (cand){pm->rank, cur->prev, pm->new_id});
        }
        if (cur->next > -1 && (size_t)cur->next < ns) {
            const mmap_slot *nm = drt_tok_mmap_get(&t->merges, cur->c, e->sym[cur->next].c);
            if (nm) heap_push(e, (cand){nm->rank, top.pos, nm->new_id});
        }
    }
    for (size_t i = 0; i < ns; i++)
        if (e->sym[i].len && !drt_tok_ivec_push(&e->out, e->sym[i].c)) return 0;
    return 1;
}

/* pcre2_match calls regex_pieces made on this thread (tests bound it: an
 * encode over the caller's limit stops after about `limit` pieces). */
static _Thread_local size_t regex_calls;
size_t drt_tokenizer_regex_calls(void); /* for tests; not in the public header */
size_t drt_tokenizer_regex_calls(void) {
    return regex_calls;
}

/* 0 (e->err set) once the caller's time is up or it cancelled; the clock
 * is read every 16 matches (a match is bounded by PCRE2's match limit) */
static int in_time(enc *e) {
    if (e->o->cancel && *e->o->cancel) {
        e->err = drt_set_error(DRT_ERR_UNAVAILABLE, "tokenizer: cancelled");
        return 0;
    }
    if (!e->deadline || ++e->ticks % 16) return 1;
    if (drt_clock_s() <= e->deadline) return 1;
    e->err = drt_set_error(DRT_ERR_UNSUPPORTED,
                           "tokenizer: pre-tokenizing took longer than %g s (this tokenizer's regex backtracks on "
                           "the text?); refused",
                           e->o->max_seconds);
    return 0;
}

/* Takes one piece s[start..end) of a regex_pieces text, match or gap;
 * returns 0 (e->err set) to stop. */
typedef int (*piece_fn)(enc *e, void *arg, size_t start, size_t end, int match);

/* Pattern::find_matches for a regex over s[0..n): matches and the gaps
 * between them, in order, each handed to `fn` as soon as it is found. An
 * empty match only marks a boundary. So the pieces go down the steps one
 * at a time, and a text over the caller's limit stops the regex there,
 * wherever the tokens come from: splitting the whole text first ran a
 * `\p{L}*!|.` Split (quadratic in a word's length) over all of a 100 KB
 * prompt for a context of 64. Returns 0 and sets e->err on failure. */
static int regex_pieces(enc *e, const pcre2_code *re, const char *s, size_t n, piece_fn fn, void *arg) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    if (!md) return e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory"), 0;
    size_t prev = 0, off = 0;
    int ok = 1;
    while (ok && off <= n) {
        regex_calls++;
        if (!in_time(e)) {
            ok = 0;
            break;
        }
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK, md, NULL);
        /* JIT code backtracks on a machine stack of fixed size (32 KiB by
         * default): a word of a few thousand letters overflows it. The
         * interpreter keeps its backtracking frames on the heap (bounded by
         * the match and heap limits, which stay in force), so the same match
         * is run there: same result, slower, only for such input. */
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT)
            rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, PCRE2_NO_UTF_CHECK | PCRE2_NO_JIT, md, NULL);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            e->err = drt_set_error(DRT_ERR_UNSUPPORTED, "tokenizer: regex match failed: %s", (const char *)msg);
            ok = 0;
            break;
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t ms = ov[0], me = ov[1];
        if (ms > prev) ok = fn(e, arg, prev, ms, 0);
        if (ok && me > ms) ok = fn(e, arg, ms, me, 1);
        prev = me;
        if (me > ms) {
            off = me;
        } else { /* empty match: search again one character later */
            if (ms >= n) break;
            int k;
            drt_tok_utf8_decode((const unsigned char *)s + ms, &k);
            off = ms + (size_t)k;
        }
    }
    if (ok && prev < n) ok = fn(e, arg, prev, n, 0);
    pcre2_match_data_free(md);
    return ok;
}

/* BPE of one part of a ByteLevel piece (arg: the piece), then the limit. */
static int bpe_piece(enc *e, void *arg, size_t start, size_t end, int match) {
    (void)match;
    if (!bpe_word(e, (const unsigned char *)arg + start, end - start)) {
        e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
        return 0;
    }
    return within(e);
}

/* The ByteLevel step on one piece: optional prefix space, the GPT-2 regex,
 * then BPE of each part. */
static int bytelevel_piece(enc *e, const char *s, size_t n) {
    const drt_tokenizer *t = e->t;
    char *own = NULL;
    if (t->bl_prefix_space && (n == 0 || s[0] != ' ')) {
        own = malloc(n + 1);
        if (!own) return e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory"), 0;
        own[0] = ' ';
        memcpy(own + 1, s, n);
        s = own, n = n + 1;
    }
    int ok = t->bl_re ? regex_pieces(e, t->bl_re, s, n, bpe_piece, (void *)s) : bpe_piece(e, (void *)s, 0, n, 0);
    free(own);
    return ok;
}

static int split_from(enc *e, int k, const char *s, size_t n);

typedef struct {
    const char *s;
    int k;
} split_arg;

/* A piece of Split step k: dropped when "Removed" takes it, else on to the
 * next step. */
static int split_piece(enc *e, void *arg, size_t start, size_t end, int match) {
    const split_arg *a = arg;
    const split_step *sp = &e->t->splits[a->k];
    if (sp->behavior == SPLIT_REMOVED && match != sp->invert) return 1;
    return split_from(e, a->k + 1, a->s + start, end - start);
}

/* Split steps k.. and then ByteLevel on s[0..n) (never empty: regex_pieces
 * makes no empty piece), depth first. */
static int split_from(enc *e, int k, const char *s, size_t n) {
    if (k == e->t->n_splits) return bytelevel_piece(e, s, n);
    split_arg a = {s, k};
    return regex_pieces(e, e->t->splits[k].re, s, n, split_piece, &a);
}

/* Pre-tokenizes and BPE-encodes text[0..n) (no added tokens in it). */
static int encode_plain(enc *e, const char *text, size_t n) {
    return n ? split_from(e, 0, text, n) : 1;
}

static int is_word_at(const drt_tokenizer *t, const char *s, size_t n, size_t at) {
    if (!t->word_re || at >= n) return 0;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return 0;
    int k;
    drt_tok_utf8_decode((const unsigned char *)s + at, &k);
    int rc = pcre2_match(t->word_re, (PCRE2_SPTR)(s + at), (size_t)k, 0, PCRE2_NO_UTF_CHECK | PCRE2_ANCHORED, md, NULL);
    pcre2_match_data_free(md);
    return rc >= 0;
}

/* Automaton steps longest_from took on this thread (tests bound it: at
 * most two per byte, however many and however long the tokens are). */
static _Thread_local size_t added_steps;
size_t drt_tokenizer_added_steps(void); /* for tests; not in the public header */
size_t drt_tokenizer_added_steps(void) {
    return added_steps;
}

/* best[i] = the longest token of m that starts at s[i] (into added[]), -1
 * when none, for every i < n. One pass from the end through the automaton
 * of the reversed tokens: a byte takes one edge down, and every failure
 * edge taken goes up, so the pass costs at most 2n steps. A match at each
 * position tried forward (as before) cost the length of the longest token
 * that fits there: 6000 added tokens 'a'*k + 'b' made a 10 KB prompt of
 * 'a's take 2 s. */
static void longest_from(const matcher *m, const char *s, size_t n, int32_t *best) {
    int32_t v = 0;
    for (size_t i = n; i-- > 0;) {
        unsigned char c = (unsigned char)s[i];
        int32_t u;
        while (added_steps++, (u = drt_tok_ac_child(m, v, c)) < 0 && v) v = m->fail[v];
        v = u >= 0 ? u : 0;
        best[i] = m->out[v];
    }
}

/* 1 when a special token may be read at text0[at..at+n): parse_special,
 * and no plain range overlaps it */
static int special_here(const enc *e, size_t at, size_t n) {
    if (!e->o->parse_special) return 0;
    for (int k = 0; k < e->o->n_plain; k++)
        if (at < e->o->plain[2 * k + 1] && e->o->plain[2 * k] < at + n) return 0;
    return 1;
}

/* AddedVocabulary::find_matches over s[0..n) with the tokens of m; gaps are
 * passed on to the normalized tokens (pass 1) or to encode_plain (pass 2). */
static int encode_added(enc *e, const char *s, size_t n, int pass) {
    const drt_tokenizer *t = e->t;
    const matcher *m = pass == 1 ? &t->m_raw : &t->m_norm;
    int32_t *best = NULL;
    if (m->n_nodes && n) { /* pass 1's array is in use while pass 2 runs */
        int32_t **buf = &e->best[pass - 1];
        size_t *cap = &e->best_cap[pass - 1];
        if (n > *cap) {
            free(*buf);
            *cap = 0;
            if (!(*buf = malloc(n * sizeof **buf))) {
                e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
                return 0;
            }
            *cap = n;
        }
        best = *buf;
        longest_from(m, s, n, best);
    }
    /* leftmost-longest, as the aho-corasick crate's LeftmostLongest that HF
     * uses: the first position where a token starts, the longest one there */
    size_t start_offset = 0, pos = 0;
    size_t ws_from = 1, ws_to = 0; /* s[ws_from..ws_to) is whitespace up to a non-space or n */
    while (best) {
        while (pos < n && best[pos] < 0) pos++;
        if (pos >= n) break;
        const added_tok *a = &t->added[best[pos]];
        size_t start = pos, stop = pos + a->len;
        pos = stop; /* the matcher resumes after the match, whatever is done with it */
        /* a special token where the caller wants text (HF's split_special_tokens
         * skips the match the same way: the matcher goes on after it) */
        if (t->ids[a->id].special && !special_here(e, (size_t)(s - e->text0) + start, a->len)) continue;
        if (a->single_word) {
            int start_space = start == 0 || !is_word_at(t, s, n, drt_tok_utf8_prev(s, start));
            int stop_space = stop == n || !is_word_at(t, s, n, stop);
            if (!start_space || !stop_space) continue;
        }
        /* The strips look at each byte once: lstrip stops at start_offset
         * (what lies before it is not taken anyway), and rstrip skips the
         * run of whitespace it already walked (matches move forward, so a
         * match ending inside that run gets the same end). Scanning the
         * whole run at every match cost text x text for a whitespace token
         * on a text of spaces. */
        if (a->lstrip) { /* start of the whitespace run that ends at start */
            size_t ns = start;
            while (ns > start_offset) {
                added_steps++;
                size_t p = drt_tok_utf8_prev(s, ns);
                int k;
                if (!drt_tok_is_white_space(drt_tok_utf8_decode((const unsigned char *)s + p, &k))) break;
                ns = p;
            }
            start = ns > start_offset ? ns : start_offset;
        }
        if (a->rstrip && stop >= ws_from && stop <= ws_to) {
            stop = ws_to;
        } else if (a->rstrip) {
            ws_from = stop;
            while (stop < n) {
                added_steps++;
                int k;
                if (!drt_tok_is_white_space(drt_tok_utf8_decode((const unsigned char *)s + stop, &k))) break;
                stop += (size_t)k;
            }
            ws_to = stop;
        }
        if (start > start_offset) {
            int ok = pass == 1 ? encode_added(e, s + start_offset, start - start_offset, 2)
                               : encode_plain(e, s + start_offset, start - start_offset);
            if (!ok) return 0;
        }
        if (!drt_tok_ivec_push(&e->out, a->id)) {
            e->err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
            return 0;
        }
        if (!within(e)) return 0;
        start_offset = stop;
    }
    if (start_offset < n)
        return pass == 1 ? encode_added(e, s + start_offset, n - start_offset, 2)
                         : encode_plain(e, s + start_offset, n - start_offset);
    return 1;
}

drt_status drt_tokenizer_encode(const drt_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids,
                                int *n_ids) {
    return drt_tokenizer_encode_max(t, text, len, add_special, 0, ids, n_ids);
}

drt_status drt_tokenizer_encode_max(const drt_tokenizer *t, const char *text, size_t len, int add_special,
                                    int max_tokens, int32_t **ids, int *n_ids) {
    drt_encode_opts o = {.add_special = add_special, .parse_special = 1, .max_tokens = max_tokens};
    return drt_tokenizer_encode_opts(t, text, len, &o, ids, n_ids);
}

drt_status drt_tokenizer_encode_opts(const drt_tokenizer *t, const char *text, size_t len, const drt_encode_opts *opts,
                                     int32_t **ids, int *n_ids) {
    static const drt_encode_opts zero;
    const drt_encode_opts *o = opts ? opts : &zero;
    int add_special = o->add_special, max_tokens = o->max_tokens;
    if (!ids || !n_ids) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_encode: ids is NULL");
    *ids = NULL;
    *n_ids = 0;
    if (!t || (!text && len)) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_encode: no tokenizer or text");
    size_t bad_at = drt_tok_utf8_check(text, len);
    if (bad_at != len)
        return drt_set_error(DRT_ERR_INVALID_ARG, "tokenizer: text is not valid UTF-8 (byte %zu of %zu is 0x%02X)",
                             bad_at, len, (unsigned char)text[bad_at]);
    if (len > (size_t)INT_MAX / 2)
        return drt_set_error(DRT_ERR_INVALID_ARG, "tokenizer: text of %zu bytes is too long", len);
    /* before any regex runs over the text: a pre-tokenizer regex can take
     * time quadratic in a word's length, so text that cannot fit is not
     * looked at */
    if (max_tokens > 0 && t->bytes_bounded && len / t->max_tok_bytes >= (size_t)max_tokens &&
        len > (size_t)max_tokens * t->max_tok_bytes)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "tokenizer: text of %zu bytes cannot fit in %d tokens (a token of this "
                             "tokenizer stands for at most %zu bytes); refused before tokenizing",
                             len, max_tokens, t->max_tok_bytes);
    if (o->n_plain < 0 || (o->n_plain && !o->plain))
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_tokenizer_encode_opts: %d plain ranges at %p", o->n_plain,
                             (const void *)o->plain);
    enc e = {.t = t,
             .max_out = max_tokens > 0 ? (size_t)max_tokens : 0,
             .text0 = text ? text : "",
             .o = o,
             .deadline = o->max_seconds > 0 ? drt_clock_s() + o->max_seconds : 0};
    int ok = 1;
    for (int i = 0; ok && add_special && i < t->n_pre; i++) ok = drt_tok_ivec_push(&e.out, t->pre_ids[i]);
    if (!ok) e.err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    if (ok) ok = within(&e);
    if (ok) ok = encode_added(&e, text ? text : "", len, 1);
    for (int i = 0; ok && add_special && i < t->n_post; i++) {
        ok = drt_tok_ivec_push(&e.out, t->post_ids[i]);
        if (!ok) e.err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
        if (ok) ok = within(&e);
    }
    if (ok && !e.out.v && !(e.out.v = malloc(sizeof(int32_t)))) {
        ok = 0;
        e.err = drt_set_error(DRT_ERR_OOM, "tokenizer: out of memory");
    }
    free(e.sym);
    free(e.heap);
    free(e.tmp.p);
    free(e.best[0]);
    free(e.best[1]);
    if (!ok) {
        free(e.out.v);
        return e.err ? e.err : DRT_ERR_OOM;
    }
    *ids = e.out.v;
    *n_ids = (int)e.out.n;
    return DRT_OK;
}
