/* The op table: one row per op with its name, its shape checks and its
 * napkin math (FLOPs and bytes moved) for the perf reports. */
#include <stdio.h>
#include <string.h>

#include "drt_error.h"
#include "drt_graph.h"
#include "drt_kv.h"

#define WHY(...) (snprintf(err, n, __VA_ARGS__), false)

static bool is_weight_type(drt_dtype t) {
    return t == DRT_F32 || t == DRT_F16 || t == DRT_BF16;
}

static bool same_shape(const drt_tensor *a, const drt_tensor *b) {
    if (a->nd != b->nd) return false;
    for (int i = 0; i < a->nd; i++)
        if (a->ne[i] != b->ne[i]) return false;
    return true;
}

static void shape_str(const drt_tensor *t, char *buf, size_t n) {
    size_t o = (size_t)snprintf(buf, n, "(");
    for (int i = 0; i < t->nd && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, i ? ",%lld" : "%lld", (long long)t->ne[i]);
    if (o < n) snprintf(buf + o, n - o, ")");
}

/* formats into the next of four buffers, so one message can show 4 shapes */
static const char *shape_ring(const drt_tensor *t, char (*sb)[64], int *i) {
    char *b = sb[(*i)++ % 4];
    shape_str(t, b, 64);
    return b;
}
#define SHAPE(t) shape_ring((t), sb, &sbi)
#define SHAPEBUF                                                                                                       \
    char sb[4][64];                                                                                                    \
    int sbi = 0

static bool need_f32(const drt_tensor *t, const char *what, char *err, size_t n) {
    if (t->type != DRT_F32) return WHY("%s must be f32, got %s", what, drt_dtype_name(t->type));
    return true;
}

/* a KV cache (or the k and v an attention reads): f32, f16 or q8_0, the
 * last of which needs rows of whole blocks (drt_kv.h) */
static bool need_kv(const drt_tensor *t, const char *what, char *err, size_t n) {
    if (!drt_kv_type_ok(t->type)) return WHY("%s must be f32, f16 or q8_0, got %s", what, drt_dtype_name(t->type));
    if (t->type == DRT_Q8_0 && t->ne[t->nd - 1] % DRT_QK)
        return WHY("%s is q8_0: its rows of %lld must be whole blocks of %d", what, (long long)t->ne[t->nd - 1],
                   DRT_QK);
    return true;
}

static bool need_kv_pair(const drt_tensor *k, const drt_tensor *v, char *err, size_t n) {
    if (!need_kv(k, "k", err, n) || !need_kv(v, "v", err, n)) return false;
    if (k->type != v->type)
        return WHY("k and v must have one type, got %s and %s", drt_dtype_name(k->type), drt_dtype_name(v->type));
    return true;
}

/* ---- checks ------------------------------------------------------------ */

/* the position ops' rows input: (T, 2) i32 for the T rows of x */
static bool check_rows(const drt_tensor *t, int64_t T, char *err, size_t n) {
    const drt_tensor *r = t->src[DRT_SRC_ROWS];
    SHAPEBUF;
    if (!r) return WHY("the rows input (base, pos per row) is missing");
    if (r->type != DRT_I32 || r->nd != 2 || r->ne[0] != T || r->ne[1] != 2)
        return WHY("rows must be i32 (T=%lld,2), got %s %s", (long long)T, drt_dtype_name(r->type), SHAPE(r));
    return true;
}

static bool check_embed(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *ids = t->src[0], *E = t->src[1];
    SHAPEBUF;
    if (ids->type != DRT_I32 || ids->nd != 1)
        return WHY("ids must be i32 (T), got %s %s", drt_dtype_name(ids->type), SHAPE(ids));
    if (E->nd != 2 || !is_weight_type(E->type))
        return WHY("table must be f32/f16/bf16 (V,D), got %s %s", drt_dtype_name(E->type), SHAPE(E));
    return true;
}

static bool check_rmsnorm(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *x = t->src[0], *w = t->src[1];
    SHAPEBUF;
    if (!need_f32(x, "x", err, n)) return false;
    if (w && (w->type != DRT_F32 || w->nd != 1 || w->ne[0] != x->ne[x->nd - 1]))
        return WHY("weight must be f32 (%lld), got %s %s", (long long)x->ne[x->nd - 1], drt_dtype_name(w->type),
                   SHAPE(w));
    if (!(t->fp[0] >= 0)) return WHY("eps must be >= 0, got %g", (double)t->fp[0]);
    return true;
}

static bool check_matmul(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *x = t->src[0], *w = t->src[1];
    SHAPEBUF;
    if (!need_f32(x, "x", err, n)) return false;
    int quant = w->type == DRT_Q8_0 || w->type == DRT_Q4_0;
    if (!is_weight_type(w->type) && !quant)
        return WHY("w must be f32/f16/bf16/q8_0/q4_0, got %s", drt_dtype_name(w->type));
    if (x->nd < 2 || x->nd > 3) return WHY("x must be (T,K) or (B,T,K), got %s", SHAPE(x));
    if (quant && (t->ip[0] || w->ne[w->nd - 1] % 32))
        return WHY("%s weights must be (N,K) rows with K a multiple of 32, not transposed; got %s%s",
                   drt_dtype_name(w->type), SHAPE(w), t->ip[0] ? " (transposed)" : "");
    if (w->nd < 2 || w->nd > 3) return WHY("w must be (N,K) or (Bw,N,K), got %s", SHAPE(w));
    const drt_matmul_shape m = drt_matmul_dims(t); /* x and w ranks are checked above */
    int64_t wk = m.trans_w ? w->ne[w->nd - 2] : w->ne[w->nd - 1];
    if (wk != m.K) return WHY("inner dims differ: x %s, w %s%s", SHAPE(x), SHAPE(w), m.trans_w ? " (transposed)" : "");
    if (m.Bw < 1 || m.B % m.Bw != 0)
        return WHY("batch %lld of x is not a multiple of batch %lld of w", (long long)m.B, (long long)m.Bw);
    return true;
}

static bool check_rope(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *x = t->src[0], *f = t->src[1];
    SHAPEBUF;
    if (!need_f32(x, "x", err, n)) return false;
    if (x->nd != 3 || x->ne[2] % 2) return WHY("x must be (T,Hn,d) with d even, got %s", SHAPE(x));
    if (f->type != DRT_F32 || f->nd != 1 || f->ne[0] != x->ne[2] / 2)
        return WHY("inv_freq must be f32 (%lld), got %s", (long long)x->ne[2] / 2, SHAPE(f));
    return check_rows(t, x->ne[0], err, n);
}

static bool check_lambda_th(const drt_tensor *l, int64_t T, int64_t H, char *err, size_t n) {
    SHAPEBUF;
    if (!l) return true;
    if (l->type != DRT_F32 || l->nd != 2 || l->ne[0] != T || l->ne[1] != H)
        return WHY("lambda must be f32 (T=%lld,H=%lld), got %s", (long long)T, (long long)H, SHAPE(l));
    return true;
}

static bool check_dual_softmax(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *s1 = t->src[0], *s2 = t->src[1];
    SHAPEBUF;
    if (!need_f32(s1, "s1", err, n) || !need_f32(s2, "s2", err, n)) return false;
    if (s1->nd != 3 || !same_shape(s1, s2))
        return WHY("s1, s2 must both be (H,T,S), got %s and %s", SHAPE(s1), SHAPE(s2));
    if (s1->ne[2] < s1->ne[1]) return WHY("S=%lld < T=%lld", (long long)s1->ne[2], (long long)s1->ne[1]);
    return check_lambda_th(t->src[2], s1->ne[1], s1->ne[0], err, n);
}

static bool check_diff_attn(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    SHAPEBUF;
    if (!need_f32(q, "q", err, n) || !need_kv_pair(k, v, err, n)) return false;
    if (q->nd != 4 || q->ne[2] != 2) return WHY("q must be (T,H,2,dk), got %s", SHAPE(q));
    if (k->nd != 4 || (k->ne[2] != 1 && k->ne[2] != 2) || k->ne[3] != q->ne[3])
        return WHY("k must be (S,G,m,dk=%lld) with m in {1,2}, got %s", (long long)q->ne[3], SHAPE(k));
    if (v->nd != 3 || v->ne[0] != k->ne[0] || v->ne[1] != k->ne[1])
        return WHY("v must be (S,G,dv) with S, G of k %s, got %s", SHAPE(k), SHAPE(v));
    int64_t H = q->ne[1], G = k->ne[1];
    if (G < 1 || G > H || H % G) return WHY("H=%lld is not a multiple of G=%lld", (long long)H, (long long)G);
    if (!check_lambda_th(t->src[3], q->ne[0], H, err, n)) return false;
    return check_rows(t, q->ne[0], err, n);
}

static bool check_attn(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *q = t->src[0], *k = t->src[1], *v = t->src[2];
    SHAPEBUF;
    if (!need_f32(q, "q", err, n) || !need_kv_pair(k, v, err, n)) return false;
    if (q->nd != 3) return WHY("q must be (T,H,dk), got %s", SHAPE(q));
    if (k->nd != 3 || k->ne[2] != q->ne[2])
        return WHY("k must be (S,G,dk=%lld), got %s", (long long)q->ne[2], SHAPE(k));
    if (v->nd != 3 || v->ne[0] != k->ne[0] || v->ne[1] != k->ne[1])
        return WHY("v must be (S,G,dv) with S, G of k %s, got %s", SHAPE(k), SHAPE(v));
    int64_t H = q->ne[1], G = k->ne[1];
    if (G < 1 || G > H || H % G) return WHY("H=%lld is not a multiple of G=%lld", (long long)H, (long long)G);
    if (t->src[3]) return WHY("ATTN takes no lambda");
    return check_rows(t, q->ne[0], err, n);
}

static bool check_groupnorm(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *x = t->src[0], *w = t->src[1];
    SHAPEBUF;
    if (!need_f32(x, "x", err, n)) return false;
    if (x->nd != 3) return WHY("x must be (T,H,dv), got %s", SHAPE(x));
    if (w && (w->type != DRT_F32 || w->nd != 1 || w->ne[0] != x->ne[2]))
        return WHY("weight must be f32 (%lld), got %s", (long long)x->ne[2], SHAPE(w));
    return true;
}

static bool check_binary(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *a = t->src[0], *b = t->src[1];
    SHAPEBUF;
    if (!need_f32(a, "a", err, n) || !need_f32(b, "b", err, n)) return false;
    if (!same_shape(a, b)) return WHY("shapes differ: %s and %s", SHAPE(a), SHAPE(b));
    return true;
}

static bool check_unary(const drt_tensor *t, char *err, size_t n) {
    return need_f32(t->src[0], "x", err, n);
}

static bool check_kv_write(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *src = t->src[0], *c = t->src[1];
    SHAPEBUF;
    if (!need_f32(src, "src", err, n) || !need_kv(c, "cache", err, n)) return false;
    bool ok = src->nd == c->nd;
    for (int i = 1; ok && i < c->nd; i++) ok = src->ne[i] == c->ne[i];
    if (!ok) return WHY("src %s does not fit cache %s", SHAPE(src), SHAPE(c));
    return check_rows(t, src->ne[0], err, n);
}

static bool check_permute(const drt_tensor *t, char *err, size_t n) {
    const drt_tensor *x = t->src[0];
    if (!need_f32(x, "x", err, n)) return false;
    int seen = 0;
    for (int a = 0; a < x->nd; a++) {
        int p = t->ip[a];
        if (p < 0 || p >= x->nd || (seen >> p) & 1) return WHY("perm is not a permutation of %d dims", x->nd);
        seen |= 1 << p;
    }
    return true;
}

/* ---- napkin math ----------------------------------------------------------
 * bytes: every input read once, the output written once (what a kernel with
 * perfect reuse moves), the rows tensor aside. Attention reads each row's
 * pos + 1 keys of the cache (ex->key_pairs over all rows). */

static double tbytes(const drt_tensor *t) {
    return t ? (double)drt_nbytes(t) : 0;
}

static double bytes_io(const drt_tensor *t, const drt_exec *ex) {
    double b = tbytes(t);
    for (int i = 0; i < DRT_MAX_SRC; i++) b += i == DRT_SRC_ROWS ? 0 : tbytes(t->src[i]);
    return b;
}

static double flops_zero(const drt_tensor *t, const drt_exec *ex) {
    return 0;
}
static double flops_elem(const drt_tensor *t, const drt_exec *ex) {
    return (double)drt_nelem(t);
}
static double flops_elem4(const drt_tensor *t, const drt_exec *ex) {
    return 4.0 * drt_nelem(t);
}

static double flops_matmul(const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *x = t->src[0];
    return 2.0 * (double)drt_nelem(t) * (double)x->ne[x->nd - 1];
}

/* (query, key) pairs the rows attend: sum over rows of pos + 1 */
static double causal_pairs(const drt_exec *ex) {
    return ex ? ex->key_pairs : 0;
}

static double flops_diff_attn(const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *q = t->src[0], *v = t->src[2];
    int64_t H = q->ne[1], dk = q->ne[3], dv = v->ne[2];
    /* two q.k dots (2*2*dk) and one combined weight times v (2*dv) per pair */
    return causal_pairs(ex) * (double)H * (4.0 * dk + 2.0 * dv);
}

static double flops_attn(const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *q = t->src[0], *v = t->src[2];
    int64_t H = q->ne[1], dk = q->ne[2], dv = v->ne[2];
    return causal_pairs(ex) * (double)H * (2.0 * dk + 2.0 * dv);
}

/* every key a row attends read once: rows of one sequence share theirs
 * (the longest of them), separate sequences do not */
static double keys_read(const drt_exec *ex) {
    double keys = 0;
    for (int t = 0; ex && t < ex->n_rows; t++) {
        const int32_t *r = ex->rows + 2 * t;
        int last = t + 1 == ex->n_rows || r[2] != r[0] || r[3] != r[1] + 1;
        if (last) keys += r[1] + 1; /* the last row of a run of one sequence */
    }
    return keys;
}

static double bytes_attn(const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *k = t->src[1], *v = t->src[2];
    double kv = keys_read(ex) * (double)(drt_row_bytes(k->type, drt_nelem(k) / k->ne[0]) +
                                         drt_row_bytes(v->type, drt_nelem(v) / v->ne[0]));
    return tbytes(t->src[0]) + kv + tbytes(t) + tbytes(t->src[3]);
}

static double flops_dual_softmax(const drt_tensor *t, const drt_exec *ex) {
    return 10.0 * (double)drt_nelem(t); /* max, exp, sum, scale for two maps */
}

static double bytes_kv_write(const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *x = t->src[0];
    return tbytes(x) + (double)drt_row_bytes(t->src[1]->type, drt_nelem(x));
}

static double flops_norm(const drt_tensor *t, const drt_exec *ex) {
    return 4.0 * drt_nelem(t);
}

static const drt_op_info g_ops[DRT_OP_COUNT] = {
    [DRT_OP_NONE] = {"NONE", 0, 0, NULL, flops_zero, bytes_io},
    [DRT_OP_EMBED] = {"EMBED", 2, 2, check_embed, flops_zero, bytes_io},
    [DRT_OP_RMSNORM] = {"RMSNORM", 1, 2, check_rmsnorm, flops_norm, bytes_io},
    [DRT_OP_MATMUL] = {"MATMUL", 2, 2, check_matmul, flops_matmul, bytes_io},
    [DRT_OP_ROPE] = {"ROPE", 2, 5, check_rope, flops_elem4, bytes_io},
    [DRT_OP_DUAL_SOFTMAX] = {"DUAL_SOFTMAX", 2, 3, check_dual_softmax, flops_dual_softmax, bytes_io},
    [DRT_OP_DIFF_ATTN] = {"DIFF_ATTN", 3, 5, check_diff_attn, flops_diff_attn, bytes_attn},
    [DRT_OP_ATTN] = {"ATTN", 3, 5, check_attn, flops_attn, bytes_attn},
    [DRT_OP_GROUPNORM] = {"GROUPNORM", 1, 2, check_groupnorm, flops_norm, bytes_io},
    [DRT_OP_SWIGLU] = {"SWIGLU", 2, 2, check_binary, flops_elem4, bytes_io},
    [DRT_OP_SIGMOID] = {"SIGMOID", 1, 1, check_unary, flops_elem4, bytes_io},
    [DRT_OP_ADD] = {"ADD", 2, 2, check_binary, flops_elem, bytes_io},
    [DRT_OP_KV_WRITE] = {"KV_WRITE", 2, 5, check_kv_write, flops_zero, bytes_kv_write},
    [DRT_OP_PERMUTE] = {"PERMUTE", 1, 1, check_permute, flops_zero, bytes_io},
};

const drt_op_info *drt_op_get(drt_op op) {
    return (unsigned)op < DRT_OP_COUNT ? &g_ops[op] : &g_ops[DRT_OP_NONE];
}

const char *drt_op_name(drt_op op) {
    return drt_op_get(op)->name;
}

drt_status drt_exec_rows(drt_exec *ex, const int32_t *rows, int n) {
    *ex = (drt_exec){.n_rows = n, .rows = rows};
    if (n < 0 || (n > 0 && !rows))
        return drt_set_error(DRT_ERR_INVALID_ARG, "rows: %d rows at %p", n, (const void *)rows);
    for (int t = 0; t < n; t++) {
        int32_t base = rows[2 * t], pos = rows[2 * t + 1];
        if (base < 0 || pos < 0 || pos == INT32_MAX)
            return drt_set_error(DRT_ERR_INVALID_ARG, "row %d: cache base %d, position %d (each must be >= 0)", t, base,
                                 pos);
        if (pos + 1 > ex->max_keys) ex->max_keys = pos + 1;
        ex->key_pairs += (double)pos + 1;
    }
    ex->first_pos = n ? rows[1] : 0;
    return DRT_OK;
}

drt_status drt_exec_seq(drt_exec *ex, int32_t *rows, int T, int base, int p0) {
    for (int t = 0; t < T; t++) {
        rows[2 * t] = base;
        rows[2 * t + 1] = p0 + t;
    }
    drt_exec tmp;
    return drt_exec_rows(ex ? ex : &tmp, rows, T);
}

drt_status drt_op_check_exec(const drt_tensor *t, const drt_exec *ex) {
    const drt_tensor *r = t->src[DRT_SRC_ROWS];
    if (!r) return DRT_OK;
    if (!ex->rows || ex->n_rows != r->ne[0])
        return drt_set_error(DRT_ERR_INVALID_ARG, "%s: the run gives %d rows, the graph has %lld", drt_op_name(t->op),
                             ex->rows ? ex->n_rows : 0, (long long)r->ne[0]);
    if (t->op == DRT_OP_ROPE) return DRT_OK; /* every pos >= 0 (drt_exec_rows) */
    int64_t cap = t->src[1]->ne[0];
    for (int i = 0; i < ex->n_rows; i++) {
        int64_t base = ex->rows[2 * i], pos = ex->rows[2 * i + 1];
        if (base + pos >= cap)
            return drt_set_error(DRT_ERR_INVALID_ARG,
                                 "%s: row %d (cache base %lld, position %lld) is past the cache of %lld rows",
                                 drt_op_name(t->op), i, (long long)base, (long long)pos, (long long)cap);
    }
    return DRT_OK;
}

/* ---- shape decoders: a node's fields as the kernels read them ---------- */

void drt_permute_4d(const drt_tensor *node, int64_t ne[4], int perm[4]) {
    const drt_tensor *x = node->src[0];
    int pad = 4 - x->nd;
    for (int i = 0; i < 4; i++) {
        ne[i] = 1;
        perm[i] = i;
    }
    for (int i = 0; i < x->nd; i++) {
        ne[pad + i] = x->ne[i];
        perm[pad + i] = pad + node->ip[i];
    }
}

drt_matmul_shape drt_matmul_dims(const drt_tensor *node) {
    const drt_tensor *x = node->src[0], *w = node->src[1];
    drt_matmul_shape m = {
        .B = x->nd == 3 ? x->ne[0] : 1,
        .Bw = w->nd == 3 ? w->ne[0] : 1,
        .T = x->ne[x->nd - 2],
        .N = node->ne[node->nd - 1],
        .K = x->ne[x->nd - 1],
        .trans_w = node->ip[0],
        .scale = node->fp[0],
        .wtype = w->type,
    };
    return m;
}
