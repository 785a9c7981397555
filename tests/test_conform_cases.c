/* conform's case table (conform/cases.c): every case of the conformance and
 * perf tables sets only the fields its op reads and builds; a case that sets
 * a field its op ignores (a typo in the table) is refused, naming the field;
 * named cases describe themselves as --list and the reports do, the
 * defaults (B, Bw, mag of 0 meaning 1) included. */
#include <stdio.h>
#include <string.h>

#include "conform_internal.h"
#include "drt_test.h"

static void check_table(const char *name, const cf_opcase *t, int n) {
    DRT_CHECK(n > 0, "%s: empty", name);
    for (int i = 0; i < n; i++) {
        DRT_CHECK(cf_case_check(&t[i]) == DRT_OK, "%s[%d] (%s): %s", name, i, drt_op_name(t[i].op), drt_last_error());
        cf_built b;
        drt_status st = cf_build_case(&t[i], &b);
        DRT_CHECK(st == DRT_OK && b.node && b.out && b.desc[0], "%s[%d] (%s) does not build: %s", name, i,
                  drt_op_name(t[i].op), drt_last_error());
        drt_graph_free(b.g);
        /* a duplicated line runs the same numbers twice under two seeds only */
        for (int j = 0; j < i; j++)
            DRT_CHECK(memcmp(&t[i], &t[j], sizeof t[i]) != 0, "%s[%d] repeats %s[%d]", name, i, name, j);
    }
}

int main(void) {
    check_table("CF_CASES", CF_CASES, CF_N_CASES);
    check_table("CF_PERF_CASES", CF_PERF_CASES, CF_N_PERF);

    /* every op with a builder has conformance cases */
    for (int op = 1; op < DRT_OP_COUNT; op++) {
        int n = 0;
        for (int i = 0; i < CF_N_CASES; i++) n += CF_CASES[i].op == (drt_op)op;
        cf_opcase probe = {.op = (drt_op)op};
        cf_built b;
        int builds = cf_build_case(&probe, &b) != DRT_ERR_INVALID_ARG || !strstr(drt_last_error(), "no case builder");
        drt_graph_free(b.g);
        DRT_CHECK(!builds || n > 0, "%s has a case builder but no conformance case", drt_op_name((drt_op)op));
    }

    /* a field the op does not read: refused by the check and by the builder */
    static const struct {
        cf_opcase c;
        const char *says;
    } BAD[] = {
        {{.op = DRT_OP_ROPE, .T = 1, .H = 4, .d = 64, .K = 3}, "ROPE does not read .K"},
        {{.op = DRT_OP_MATMUL, .T = 1, .K = 32, .N = 8, .scale = 1, .S = 9}, "MATMUL does not read .S"},
        {{.op = DRT_OP_MATMUL, .T = 1, .K = 32, .N = 8, .scale = 1, .lambda = 0.5f}, "MATMUL does not read .lambda"},
        {{.op = DRT_OP_ATTN, .T = 1, .H = 2, .G = 1, .dk = 16, .dv = 16, .m = 2}, "ATTN does not read .m"},
        {{.op = DRT_OP_ATTN, .T = 1, .H = 2, .G = 1, .dk = 16, .dv = 16, .decomposed = 1},
         "ATTN does not read .decomposed"},
        {{.op = DRT_OP_ADD, .rows = 2, .cols = 3, .wt = DRT_F16}, "ADD does not read .wt"},
        {{.op = DRT_OP_EMBED, .T = 1, .V = 5, .D = 4, .mag = 2}, "EMBED does not read .mag"},
        {{.op = DRT_OP_PERMUTE, .nd = 2, .ne = {2, 3}, .perm = {1, 0}, .p0 = 1}, "PERMUTE does not read .p0"},
        {{.op = DRT_OP_KV_WRITE, .T = 1, .cap = 4, .G = 1, .d = 8, .no_weight = 1},
         "KV_WRITE does not read .no_weight"},
        {{.op = DRT_OP_GROUPNORM, .T = 1, .H = 2, .dv = 8, .scale = 1, .eps = 1e-5f}, "GROUPNORM does not read .eps"},
    };
    for (size_t i = 0; i < sizeof BAD / sizeof BAD[0]; i++) {
        drt_status st = cf_case_check(&BAD[i].c);
        DRT_CHECK(st == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), BAD[i].says),
                  "bad case %zu: check gave %d \"%s\", want \"%s\"", i, (int)st, drt_last_error(), BAD[i].says);
        cf_built b;
        st = cf_build_case(&BAD[i].c, &b);
        DRT_CHECK(st == DRT_ERR_INVALID_ARG && strstr(drt_last_error(), BAD[i].says) && !b.g,
                  "bad case %zu: build gave %d \"%s\"", i, (int)st, drt_last_error());
        drt_graph_free(b.g);
    }

    /* named cases as --list describes them; B, Bw and mag of 0 are 1 */
    static const struct {
        cf_opcase c;
        const char *desc, *dtype;
    } GOOD[] = {
        {{.op = DRT_OP_MATMUL, .T = 1, .K = 129, .N = 37, .scale = 1}, "B=1 Bw=1 T=1 K=129 N=37 w=f32 scale=1", "f32"},
        {{.op = DRT_OP_MATMUL, .B = 6, .Bw = 3, .T = 1, .K = 17, .N = 129, .trans_w = 1, .wt = DRT_BF16, .scale = 0.5f},
         "B=6 Bw=3 T=1 K=17 N=129 w=bf16 trans_w scale=0.5",
         "bf16"},
        {{.op = DRT_OP_EMBED, .T = 5, .V = 11, .D = 65, .wt = DRT_F16}, "T=5 V=11 D=65 E=f16", "f16"},
        {{.op = DRT_OP_RMSNORM, .T = 3, .C = 40, .mag = 300, .no_weight = 1, .eps = 1e-6f},
         "T=3 C=40 eps=1e-06 no-weight |x|<=300",
         "f32"},
        {{.op = DRT_OP_DIFF_ATTN,
          .T = 5,
          .H = 4,
          .G = 2,
          .m = 2,
          .dk = 64,
          .dv = 128,
          .p0 = 9,
          .decomposed = 1,
          .lambda = 0.6f},
         "decomposed T=5 S=14 p0=9 H=4 G=2 m=2 dk=64 dv=128 lambda=scalar |q|<=1",
         "f32"},
        {{.op = DRT_OP_DUAL_SOFTMAX, .H = 2, .T = 17, .S = 300, .lambda_th = 1},
         "H=2 T=17 S=300 p0=283 lambda=per-token |s|<=1",
         "f32"},
        {{.op = DRT_OP_KV_WRITE, .T = 7, .cap = 40, .G = 3, .d = 128, .p0 = 5},
         "T=7 cache=40 rows of 3x1x128 p0=5",
         "f32"},
        {{.op = DRT_OP_KV_WRITE, .T = 7, .cap = 40, .G = 3, .d = 128, .p0 = 5, .kvt = DRT_Q8_0},
         "T=7 cache=40 rows of 3x1x128 q8_0 p0=5",
         "q8_0"},
        {{.op = DRT_OP_ATTN, .T = 1, .H = 4, .G = 2, .dk = 64, .dv = 64, .p0 = 9, .kvt = DRT_F16},
         "T=1 S=10 p0=9 H=4 G=2 dk=64 dv=64 |q|<=1 kv=f16",
         "f16"},
        {{.op = DRT_OP_PERMUTE, .nd = 3, .ne = {5, 4, 9}, .perm = {1, 0, 2}}, "nd=3 (5,4,9,0) perm (1,0,2,0)", "f32"},
        {{.op = DRT_OP_SIGMOID, .rows = 1, .cols = 7, .mag = 30}, "1x7 |x|<=30", "f32"},
    };
    for (size_t i = 0; i < sizeof GOOD / sizeof GOOD[0]; i++) {
        cf_built b;
        drt_status st = cf_build_case(&GOOD[i].c, &b);
        DRT_CHECK(st == DRT_OK && strcmp(b.desc, GOOD[i].desc) == 0, "good case %zu: %d \"%s\", want \"%s\" (%s)", i,
                  (int)st, b.desc, GOOD[i].desc, st == DRT_OK ? "" : drt_last_error());
        DRT_CHECK(strcmp(cf_case_dtype(&GOOD[i].c), GOOD[i].dtype) == 0, "good case %zu: dtype %s, want %s", i,
                  cf_case_dtype(&GOOD[i].c), GOOD[i].dtype);
        drt_graph_free(b.g);
    }
    return drt_test_summary("test_conform_cases");
}
