/* conform's op case table: every case a struct of named fields (a field the
 * op does not read stays 0, cf_case_check), and how a case becomes a graph.
 * Adding a case is one line here; the runner, the reports and --list take it
 * from the table. */
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "conform_internal.h"

#define F16 DRT_F16
#define BF16 DRT_BF16
#define Q8 DRT_Q8_0
#define Q4 DRT_Q4_0

/* Shapes follow docs/design.md section 6: T=1 (decode), sizes that are not
 * multiples of any tile, GQA (G < H), p0 > 0, logits of +-300 and more,
 * dk in {64,128}, dv in {64,128,256}. Attention caches get 3 spare rows past
 * S = p0 + T filled with NaN: a kernel that reads past S fails. */
const cf_opcase CF_CASES[] = {
    /* EMBED: ids (T) into E (V, D) */
    {.op = DRT_OP_EMBED, .T = 1, .V = 37, .D = 64},
    {.op = DRT_OP_EMBED, .T = 37, .V = 300, .D = 129, .wt = F16},
    {.op = DRT_OP_EMBED, .T = 5, .V = 11, .D = 65, .wt = BF16},
    /* RMSNORM: x (T, C) */
    {.op = DRT_OP_RMSNORM, .T = 1, .C = 37, .eps = 1e-6f},
    {.op = DRT_OP_RMSNORM, .T = 37, .C = 129, .eps = 1e-5f},
    {.op = DRT_OP_RMSNORM, .T = 8, .C = 4096, .eps = 1e-5f},
    {.op = DRT_OP_RMSNORM, .T = 3, .C = 4097, .mag = 300, .no_weight = 1, .eps = 1e-6f},
    /* MATMUL: x (B, T, K), w (Bw, N, K) or with trans_w (Bw, K, N) */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 129, .N = 37, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 37, .K = 129, .N = 67, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 64, .K = 64, .N = 64, .scale = 0.3f},
    {.op = DRT_OP_MATMUL, .T = 64, .K = 256, .N = 128, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 3, .K = 1025, .N = 130, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 1000, .N = 129, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 37, .K = 129, .N = 65, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 1000, .N = 129, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 37, .K = 129, .N = 65, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 8, .Bw = 2, .T = 9, .K = 64, .N = 33, .scale = 0.125f},
    {.op = DRT_OP_MATMUL, .B = 8, .Bw = 2, .T = 1, .K = 64, .N = 33, .scale = 0.125f},
    {.op = DRT_OP_MATMUL, .B = 4, .Bw = 4, .T = 7, .K = 40, .N = 65, .trans_w = 1, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 6, .Bw = 3, .T = 1, .K = 17, .N = 129, .trans_w = 1, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 3, .T = 5, .K = 33, .N = 70, .trans_w = 1, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 2, .Bw = 2, .T = 5, .K = 33, .N = 70, .wt = F16, .scale = 2},
    /* several K blocks, several T blocks, N not a multiple of any panel
     * (the cpu backend's packed GEMM: KC 256, MC up to 128, NR up to 32) */
    {.op = DRT_OP_MATMUL, .T = 150, .K = 520, .N = 97, .wt = BF16, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 70, .K = 700, .N = 300, .wt = F16, .scale = 1},
    /* past 128 rows (the cpu backend's GEMV limit on avx512): the GEMM for
     * f32, f16 and the q formats with K not a multiple of 512, the int8-dot
     * row chunks (32 rows a pass, and a remainder) for K = 512 */
    {.op = DRT_OP_MATMUL, .T = 150, .K = 129, .N = 67, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 140, .K = 700, .N = 65, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 133, .K = 320, .N = 67, .wt = Q8, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 133, .K = 320, .N = 67, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 300, .K = 512, .N = 20, .wt = Q4, .scale = 1},
    /* q8_0 / q4_0 weights (K a multiple of 32): GEMV rows, GEMM with a K tail
     * past one packed block, odd N, batches sharing weights, a scale */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 1024, .N = 37, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 1024, .N = 37, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 5, .K = 96, .N = 130, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 9, .K = 96, .N = 130, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 70, .K = 320, .N = 67, .wt = Q8, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 70, .K = 320, .N = 67, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 4, .Bw = 2, .T = 7, .K = 64, .N = 33, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 2, .T = 3, .K = 64, .N = 33, .wt = Q4, .scale = 2},
    /* GEMV edge cases (the cpu backend's int8-dot q4_0 GEMV works on quads
     * of blocks, a last one partial): an odd block count (a lone last
     * block), one block, T = 8, batches with their own w */
    {.op = DRT_OP_MATMUL, .T = 3, .K = 96, .N = 37, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 2, .K = 32, .N = 5, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 2, .K = 32, .N = 5, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 2, .Bw = 2, .T = 8, .K = 160, .N = 9, .wt = Q4, .scale = 0.25f},
    {.op = DRT_OP_MATMUL, .B = 3, .Bw = 3, .T = 4, .K = 224, .N = 6, .wt = Q8, .scale = 1},
    /* q4_0 there goes four blocks at a time, then a partial quad: a quad
     * and three blocks, a quad and two */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 224, .N = 7, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 4, .K = 192, .N = 11, .wt = Q4, .scale = 1},
    /* its x levels at extreme magnitudes (blocks under 2^-60 are scaled up
     * by 2^64 first, so 1 / s stays finite) */
    {.op = DRT_OP_MATMUL, .T = 2, .K = 224, .N = 7, .wt = Q4, .mag = 1e-36f, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 2, .K = 224, .N = 7, .wt = Q4, .mag = 1e30f, .scale = 1},
    /* the Vulkan rows kernel for CPU devices (backends/vulkan/shaders/matvec_q.comp, K %
     * 128 == 0): one super-block, N below a subgroup, odd N with 2 rows a
     * lane, a grid that strides over N, batches with their own or shared w */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 128, .N = 5, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 128, .N = 5, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 512, .N = 17, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 512, .N = 17, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 256, .N = 301, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 2, .K = 256, .N = 301, .wt = Q4, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .B = 2, .Bw = 2, .T = 3, .K = 384, .N = 19, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 3, .T = 5, .K = 256, .N = 9, .wt = Q4, .scale = 1},
    /* the OpenCL GEMVs for CPU devices (8 q8_0 or 4 q4_0 rows an item): N
     * past a multiple of them, batches at T = 1 with shared w */
    {.op = DRT_OP_MATMUL, .B = 4, .Bw = 2, .T = 1, .K = 96, .N = 13, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 3, .T = 1, .K = 64, .N = 6, .wt = Q4, .scale = 0.5f},
    /* the cpu backend's T = 1 int8-dot GEMV on repacked weights (matmul.c
     * qt_rows: superblocks of 16 blocks, the last partial): a full one and
     * half (the 134M model's K = 768), 16 + 9 blocks, a lone block, 17
     * blocks with batches sharing w */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 768, .N = 19, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 800, .N = 10, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 32, .N = 6, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 2, .T = 1, .K = 544, .N = 7, .wt = Q8, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .B = 2, .T = 9, .K = 300, .N = 130, .trans_w = 1, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 1000, .N = 77, .scale = 1},
    /* the decode step of a batch (issue 27): 2..37 rows against one weight,
     * which every backend's multi-row kernels read once for all of them.
     * First the CUDA rows kernel's edges: K past whole 64-wide tiles and
     * several K splits (q: K a multiple of 32), N past whole 64-column
     * tiles */
    {.op = DRT_OP_MATMUL, .T = 2, .K = 200, .N = 70, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 5, .K = 136, .N = 67, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 256, .N = 65, .wt = F16, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 1000, .N = 130, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 200, .N = 67, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 520, .N = 70, .wt = BF16, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 136, .N = 129, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 2, .K = 160, .N = 70, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 5, .K = 160, .N = 67, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 288, .N = 65, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 160, .N = 130, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 544, .N = 67, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 288, .N = 70, .wt = Q4, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 1056, .N = 129, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 200, .N = 67, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 136, .N = 70, .scale = 1},
    /* the OpenCL rows kernels' (4 weight rows x all T, in tiles of 4, then 2
     * and 1 rows): T of 2, 3 (2+1), 5 (4+1), 8, 16, 31 (4*7+2+1), 32; N past
     * whole groups of 4, K with a tail past whole vectors, batches with
     * shared and own w */
    {.op = DRT_OP_MATMUL, .T = 2, .K = 200, .N = 37, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 3, .K = 136, .N = 38, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 5, .K = 200, .N = 37, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 768, .N = 66, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 136, .N = 35, .wt = F16, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 256, .N = 70, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 2, .T = 11, .K = 96, .N = 21, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 2, .K = 256, .N = 37, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 5, .K = 160, .N = 38, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 768, .N = 66, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 96, .N = 35, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 256, .N = 70, .wt = Q8, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 2, .K = 256, .N = 37, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 5, .K = 160, .N = 38, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 768, .N = 66, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 96, .N = 35, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 31, .K = 64, .N = 13, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 256, .N = 70, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 3, .Bw = 3, .T = 7, .K = 64, .N = 9, .wt = Q4, .scale = 1},
    /* the Vulkan kernels': K % 128 == 0 (its rows kernel for CPU devices)
     * and not, rows past a multiple of a kernel's rows, and 37 rows (the
     * GEMM past the rows kernels' 32) */
    {.op = DRT_OP_MATMUL, .T = 2, .K = 256, .N = 70, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 136, .N = 33, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 260, .N = 67, .wt = F16, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 256, .N = 300, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 96, .N = 19, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 384, .N = 13, .wt = Q8, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 5, .K = 256, .N = 21, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 160, .N = 35, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 16, .K = 128, .N = 35, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 32, .K = 256, .N = 9, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 37, .K = 256, .N = 11, .wt = Q8, .scale = 1},
    /* prefill past 32 rows with K a multiple of 512: the cpu backend's
     * int8-dot GEMV over every row (on avx512; the GEMM elsewhere), also at
     * the magnitudes of the x levels' scaling */
    {.op = DRT_OP_MATMUL, .T = 70, .K = 1024, .N = 67, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 45, .K = 512, .N = 35, .wt = Q4, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 33, .K = 1536, .N = 9, .wt = Q4, .mag = 1e-36f, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 33, .K = 1536, .N = 9, .wt = Q8, .mag = 1e30f, .scale = 1},
    /* ROPE: x (T, H, d); inv_freq of theta 10000 */
    {.op = DRT_OP_ROPE, .T = 1, .H = 4, .d = 64, .p0 = 17},
    {.op = DRT_OP_ROPE, .T = 37, .H = 3, .d = 128},
    {.op = DRT_OP_ROPE, .T = 5, .H = 8, .d = 16, .p0 = 3000},
    /* rows of several sequences (batches): each row at its own position */
    {.op = DRT_OP_ROPE, .T = 9, .H = 2, .d = 64, .p0 = 500, .runs = {1, 5, 1, 2}},
    /* DUAL_SOFTMAX: scores (H, T, S), p0 = S - T */
    {.op = DRT_OP_DUAL_SOFTMAX, .H = 4, .T = 1, .S = 33, .lambda = 0.8f},
    {.op = DRT_OP_DUAL_SOFTMAX, .H = 3, .T = 37, .S = 37, .lambda = 0.3f},
    {.op = DRT_OP_DUAL_SOFTMAX, .H = 2, .T = 17, .S = 300, .lambda_th = 1},
    {.op = DRT_OP_DUAL_SOFTMAX, .H = 2, .T = 9, .S = 129, .mag = 300, .lambda = 0.5f},
    /* DIFF_ATTN: q (T, H, 2, dk), k (S, G, m, dk), v (S, G, dv), S = p0 + T,
     * mag = |q| (300 gives logits of several hundred); T*H/G query rows per
     * kv group of 1, 2, 4, 8 and more */
    {.op = DRT_OP_DIFF_ATTN, .T = 1, .H = 8, .G = 2, .m = 2, .dk = 64, .dv = 128, .p0 = 76, .lambda = 0.6f},
    {.op = DRT_OP_DIFF_ATTN, .T = 37, .H = 4, .G = 4, .m = 2, .dk = 64, .dv = 128, .lambda = 0.2f},
    {.op = DRT_OP_DIFF_ATTN, .T = 13, .H = 4, .G = 2, .m = 1, .dk = 128, .dv = 128, .p0 = 37, .lambda_th = 1},
    {.op = DRT_OP_DIFF_ATTN, .T = 16, .H = 2, .G = 1, .m = 2, .dk = 128, .dv = 256, .lambda = 0.9f},
    {.op = DRT_OP_DIFF_ATTN, .T = 5, .H = 3, .G = 3, .m = 2, .dk = 64, .dv = 64, .p0 = 129, .lambda = 0.5f},
    {.op = DRT_OP_DIFF_ATTN, .T = 33, .H = 4, .G = 2, .m = 1, .dk = 64, .dv = 64, .mag = 300, .lambda_th = 1},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 5,
     .H = 2,
     .G = 2,
     .m = 2,
     .dk = 64,
     .dv = 128,
     .p0 = 125,
     .mag = 300,
     .lambda = 0.7f},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 1,
     .H = 6,
     .G = 3,
     .m = 1,
     .dk = 128,
     .dv = 128,
     .p0 = 199,
     .mag = 300,
     .lambda_th = 1},
    {.op = DRT_OP_DIFF_ATTN, .T = 1, .H = 8, .G = 1, .m = 2, .dk = 128, .dv = 256, .p0 = 300, .lambda = 0.4f},
    {.op = DRT_OP_DIFF_ATTN, .T = 7, .H = 2, .G = 1, .m = 2, .dk = 16, .dv = 40, .p0 = 3, .lambda = 0.8f},
    {.op = DRT_OP_DIFF_ATTN, .T = 1, .H = 4, .G = 4, .m = 2, .dk = 64, .dv = 64, .p0 = 50, .lambda = 0.3f},
    {.op = DRT_OP_DIFF_ATTN, .T = 2, .H = 4, .G = 4, .m = 1, .dk = 64, .dv = 256, .p0 = 70, .mag = 300, .lambda_th = 1},
    {.op = DRT_OP_DIFF_ATTN, .T = 33, .H = 4, .G = 2, .m = 1, .dk = 64, .dv = 64, .mag = 900, .lambda_th = 1},
    /* many query blocks per head; decode with few heads and a long cache
     * (keys split across threads, partials merged) */
    {.op = DRT_OP_DIFF_ATTN, .T = 70, .H = 3, .G = 1, .m = 2, .dk = 64, .dv = 128, .p0 = 40, .lambda = 0.35f},
    {.op = DRT_OP_DIFF_ATTN, .T = 1, .H = 1, .G = 1, .m = 2, .dk = 64, .dv = 128, .p0 = 700, .lambda = 0.45f},
    {.op = DRT_OP_DIFF_ATTN, .T = 2, .H = 2, .G = 1, .m = 1, .dk = 64, .dv = 64, .p0 = 600, .mag = 300, .lambda_th = 1},
    /* the decomposed lowering (the cache has exactly S rows: it reads all) */
    {.op = DRT_OP_DIFF_ATTN,
     .T = 5,
     .H = 4,
     .G = 2,
     .m = 2,
     .dk = 64,
     .dv = 128,
     .p0 = 9,
     .decomposed = 1,
     .lambda = 0.6f},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 1,
     .H = 4,
     .G = 2,
     .m = 1,
     .dk = 64,
     .dv = 64,
     .p0 = 20,
     .lambda_th = 1,
     .decomposed = 1},
    /* batches: rows of several sequences, each attending its own slot's
     * keys (runs: row counts; sequence i from position p0*i/(n-1)): decode
     * rows alone, a prompt chunk among decode rows, a chunk longer than a
     * vector of queries, GQA, m = 1, per-token lambda, logits of 300 */
    {.op = DRT_OP_DIFF_ATTN,
     .T = 5,
     .H = 4,
     .G = 2,
     .m = 2,
     .dk = 64,
     .dv = 128,
     .p0 = 90,
     .lambda = 0.6f,
     .runs = {1, 1, 1, 1, 1}},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 12,
     .H = 4,
     .G = 4,
     .m = 2,
     .dk = 64,
     .dv = 64,
     .p0 = 40,
     .lambda = 0.3f,
     .runs = {1, 9, 1, 1}},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 41,
     .H = 2,
     .G = 1,
     .m = 1,
     .dk = 128,
     .dv = 128,
     .p0 = 60,
     .lambda_th = 1,
     .runs = {2, 37, 2}},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 8,
     .H = 6,
     .G = 3,
     .m = 2,
     .dk = 64,
     .dv = 128,
     .p0 = 300,
     .mag = 300,
     .lambda = 0.5f,
     .runs = {3, 1, 4}},
    /* ATTN: q (T, H, dk), k (S, G, dk), v (S, G, dv), S = p0 + T */
    {.op = DRT_OP_ATTN, .T = 6, .H = 4, .G = 2, .dk = 64, .dv = 64, .p0 = 70, .runs = {1, 1, 3, 1}},
    {.op = DRT_OP_ATTN, .T = 24, .H = 2, .G = 1, .dk = 64, .dv = 128, .p0 = 33, .mag = 300, .runs = {1, 20, 3}},
    {.op = DRT_OP_ATTN, .T = 1, .H = 8, .G = 2, .dk = 64, .dv = 64, .p0 = 76},
    {.op = DRT_OP_ATTN, .T = 37, .H = 4, .G = 4, .dk = 128, .dv = 128},
    {.op = DRT_OP_ATTN, .T = 7, .H = 6, .G = 2, .dk = 64, .dv = 256, .p0 = 83},
    {.op = DRT_OP_ATTN, .T = 20, .H = 2, .G = 1, .dk = 64, .dv = 64, .mag = 300},
    {.op = DRT_OP_ATTN, .T = 3, .H = 4, .G = 1, .dk = 128, .dv = 128, .p0 = 61, .mag = 300},
    {.op = DRT_OP_ATTN, .T = 1, .H = 4, .G = 4, .dk = 64, .dv = 128, .p0 = 33},
    {.op = DRT_OP_ATTN, .T = 1, .H = 6, .G = 3, .dk = 128, .dv = 64, .p0 = 9},
    {.op = DRT_OP_ATTN, .T = 70, .H = 2, .G = 1, .dk = 64, .dv = 64, .p0 = 20},
    {.op = DRT_OP_ATTN, .T = 1, .H = 1, .G = 1, .dk = 64, .dv = 128, .p0 = 500},
    /* KV caches of f16 and q8_0 (drt_kv.h), read as stored: decode rows of
     * one head a group and of 2, 8 and 32 heads a group (the cpu backend's
     * heads in lanes, past 256 keys: split), runs of prompt rows, batches */
    {.op = DRT_OP_ATTN, .T = 1, .H = 32, .G = 4, .dk = 64, .dv = 64, .p0 = 700, .kvt = DRT_F16},
    {.op = DRT_OP_ATTN, .T = 1, .H = 32, .G = 4, .dk = 64, .dv = 64, .p0 = 700, .kvt = DRT_Q8_0},
    {.op = DRT_OP_ATTN, .T = 1, .H = 32, .G = 1, .dk = 64, .dv = 64, .p0 = 90, .kvt = DRT_F16},
    {.op = DRT_OP_ATTN, .T = 6, .H = 4, .G = 2, .dk = 64, .dv = 64, .p0 = 70, .runs = {1, 1, 3, 1}, .kvt = DRT_F16},
    {.op = DRT_OP_ATTN, .T = 37, .H = 4, .G = 4, .dk = 128, .dv = 128, .kvt = DRT_Q8_0},
    {.op = DRT_OP_ATTN,
     .T = 24,
     .H = 2,
     .G = 1,
     .dk = 64,
     .dv = 128,
     .p0 = 33,
     .mag = 300,
     .runs = {1, 20, 3},
     .kvt = DRT_Q8_0},
    {.op = DRT_OP_ATTN, .T = 5, .H = 6, .G = 3, .dk = 40, .dv = 24, .p0 = 9, .runs = {1, 3, 1}, .kvt = DRT_F16},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 1,
     .H = 16,
     .G = 2,
     .m = 2,
     .dk = 64,
     .dv = 128,
     .p0 = 600,
     .lambda = 0.4f,
     .kvt = DRT_F16},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 3,
     .H = 16,
     .G = 4,
     .m = 1,
     .dk = 64,
     .dv = 64,
     .p0 = 300,
     .lambda_th = 1,
     .runs = {1, 1, 1},
     .kvt = DRT_Q8_0},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 8,
     .H = 6,
     .G = 3,
     .m = 2,
     .dk = 64,
     .dv = 128,
     .p0 = 300,
     .mag = 300,
     .lambda = 0.5f,
     .runs = {3, 1, 4},
     .kvt = DRT_Q8_0},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 41,
     .H = 2,
     .G = 1,
     .m = 1,
     .dk = 128,
     .dv = 128,
     .p0 = 60,
     .lambda_th = 1,
     .runs = {2, 37, 2},
     .kvt = DRT_F16},
    /* GROUPNORM: x (T, H, dv) */
    {.op = DRT_OP_GROUPNORM, .T = 1, .H = 8, .dv = 128, .scale = 0.2f},
    {.op = DRT_OP_GROUPNORM, .T = 37, .H = 3, .dv = 256, .scale = 0.65f},
    {.op = DRT_OP_GROUPNORM, .T = 5, .H = 4, .dv = 37, .no_weight = 1, .scale = 1},
    /* SWIGLU / SIGMOID / ADD: (rows, cols) */
    {.op = DRT_OP_SWIGLU, .rows = 1, .cols = 1000, .mag = 4},
    {.op = DRT_OP_SWIGLU, .rows = 37, .cols = 129, .mag = 300},
    {.op = DRT_OP_SIGMOID, .rows = 1, .cols = 7, .mag = 30},
    {.op = DRT_OP_SIGMOID, .rows = 33, .cols = 129, .mag = 300},
    {.op = DRT_OP_ADD, .rows = 1, .cols = 4097},
    {.op = DRT_OP_ADD, .rows = 37, .cols = 129},
    /* an output past 2 MiB: the CUDA backend downloads it through its two
     * pinned 2 MiB chunks (cuda.staged), the second one partial */
    {.op = DRT_OP_ADD, .rows = 1100, .cols = 521},
    /* KV_WRITE: src (T, G, m, d) into a cache (cap, G, m, d) at p0, or m = 0:
     * (cap, G, d) */
    {.op = DRT_OP_KV_WRITE, .T = 1, .cap = 64, .G = 2, .m = 2, .d = 64, .p0 = 63},
    {.op = DRT_OP_KV_WRITE, .T = 7, .cap = 40, .G = 3, .d = 128, .p0 = 5},
    /* several sequences, each into its own slot of cap rows */
    {.op = DRT_OP_KV_WRITE, .T = 6, .cap = 24, .G = 2, .m = 2, .d = 64, .p0 = 17, .runs = {1, 4, 1}},
    {.op = DRT_OP_KV_WRITE, .T = 5, .cap = 16, .G = 1, .d = 32, .p0 = 9, .runs = {1, 1, 1, 1, 1}},
    {.op = DRT_OP_KV_WRITE, .T = 37, .cap = 37, .G = 1, .m = 1, .d = 16},
    {.op = DRT_OP_KV_WRITE, .T = 6, .cap = 24, .G = 2, .m = 2, .d = 64, .p0 = 17, .runs = {1, 4, 1}, .kvt = DRT_F16},
    {.op = DRT_OP_KV_WRITE, .T = 7, .cap = 40, .G = 3, .d = 40, .p0 = 5, .kvt = DRT_F16},
    {.op = DRT_OP_KV_WRITE, .T = 1, .cap = 64, .G = 2, .m = 2, .d = 64, .p0 = 63, .kvt = DRT_Q8_0},
    {.op = DRT_OP_KV_WRITE, .T = 5, .cap = 16, .G = 1, .d = 128, .p0 = 9, .runs = {1, 1, 1, 1, 1}, .kvt = DRT_Q8_0},
    /* PERMUTE: x (ne[0..nd)) to axes perm[0..nd) */
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {3, 5, 2, 7}, .perm = {2, 1, 0, 3}},
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {9, 4, 1, 33}, .perm = {1, 0, 2, 3}},
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {2, 3, 4, 5}, .perm = {3, 2, 1, 0}},
    {.op = DRT_OP_PERMUTE, .nd = 3, .ne = {5, 4, 9}, .perm = {1, 0, 2}},
    {.op = DRT_OP_PERMUTE, .nd = 2, .ne = {37, 129}, .perm = {1, 0}},
    /* OpenCL register-blocked MATMUL variants (issue 16): skinny T = 2, 3
     * with K and N past whole vectors/blocks; a GEMV whose K is all tail;
     * outer (trans_w) with whole 32-column blocks only, rows past a block */
    {.op = DRT_OP_MATMUL, .T = 2, .K = 37, .N = 19, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 3, .K = 100, .N = 33, .wt = BF16, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 7, .N = 9, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 2, .Bw = 2, .T = 6, .K = 40, .N = 64, .trans_w = 1, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 5, .K = 33, .N = 96, .trans_w = 1, .wt = F16, .scale = 1},
    /* OpenCL CPU attention: flash with GQA rows crossing a lane block, m = 1,
     * dk/dv not whole vectors; decode with rows at different t (T = 2), one
     * partial key block, large logits, and dv off the vector width (the
     * local-memory kernel) */
    {.op = DRT_OP_DIFF_ATTN, .T = 9, .H = 4, .G = 2, .m = 2, .dk = 64, .dv = 128, .p0 = 7, .lambda = 0.6f},
    {.op = DRT_OP_DIFF_ATTN, .T = 11, .H = 2, .G = 2, .m = 1, .dk = 32, .dv = 48, .p0 = 5, .mag = 300, .lambda_th = 1},
    {.op = DRT_OP_DIFF_ATTN, .T = 2, .H = 4, .G = 2, .m = 2, .dk = 64, .dv = 128, .p0 = 50, .lambda = 0.4f},
    {.op = DRT_OP_DIFF_ATTN, .T = 1, .H = 2, .G = 1, .m = 2, .dk = 32, .dv = 32, .p0 = 3, .lambda = 0.5f},
    {.op = DRT_OP_DIFF_ATTN, .T = 1, .H = 2, .G = 2, .m = 2, .dk = 64, .dv = 64, .p0 = 40, .mag = 300, .lambda_th = 1},
    {.op = DRT_OP_DIFF_ATTN, .T = 1, .H = 4, .G = 4, .m = 2, .dk = 64, .dv = 40, .p0 = 30, .lambda = 0.3f},
    {.op = DRT_OP_ATTN, .T = 6, .H = 4, .G = 1, .dk = 32, .dv = 32, .p0 = 10},
    {.op = DRT_OP_ATTN, .T = 2, .H = 2, .G = 1, .dk = 16, .dv = 16, .p0 = 9, .mag = 300},
    /* MATMUL edges of the Vulkan kernel variants (backends/vulkan/matmul.c):
     * T = 5..8 just past GEMV (register tiles of 8 rows, rows past T not
     * written); K a multiple of 4 (whole-vec4 loads of x and W, two packed
     * words for f16/bf16) and not (K % 4 == 2: packed words per pair; odd K:
     * element by element); N not a multiple of the 32-column tile; batches
     * with Bw < B, transposed too */
    {.op = DRT_OP_MATMUL, .T = 5, .K = 64, .N = 33, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 6, .K = 132, .N = 70, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 130, .N = 45, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 7, .K = 131, .N = 31, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 9, .K = 128, .N = 96, .wt = F16, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .B = 4, .Bw = 2, .T = 13, .K = 64, .N = 40, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 6, .Bw = 2, .T = 5, .K = 36, .N = 33, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 4, .Bw = 2, .T = 11, .K = 68, .N = 37, .trans_w = 1, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 33, .K = 256, .N = 130, .trans_w = 1, .wt = F16, .scale = 1},
    /* GEMVs with K in 16s (Vulkan on CPU devices: 16 packed f16/bf16
     * weights per step as 64-bit loads), more 4-row blocks than workgroups,
     * batched with a shared weight, T up to the GEMV's 4 */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 1024, .N = 37, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 2, .K = 128, .N = 70, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .B = 3, .T = 1, .K = 256, .N = 33, .wt = F16, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 4, .K = 48, .N = 130, .wt = F16, .scale = 1},
    /* the CUDA decode GEMV 2 (K split over 8 warps of 256 weights each): K
     * past 2048, so that warps take several chunks and some one fewer; rows
     * per block 4, 2 and 1 by N (the emulator's 16 SMs: N >= 128, >= 64) */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 4360, .N = 131, .wt = BF16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 6, .K = 2568, .N = 67, .wt = F16, .scale = 0.5f},
    {.op = DRT_OP_MATMUL, .T = 8, .K = 2056, .N = 9, .wt = BF16, .scale = 1},
    /* Vulkan lanes attention (backends/vulkan/shaders/attention_lanes.comp, CPU devices):
     * 4 rows per lane with split keys, a partial last row block, GQA of 4,
     * T != S; 2 rows per lane split with m = 1 and large logits; dk/dv of
     * 80, 96 and 128 (both maps 256 wide); ATTN split and dv off 64 */
    {.op = DRT_OP_DIFF_ATTN, .T = 16, .H = 2, .G = 1, .m = 2, .dk = 64, .dv = 128, .p0 = 300, .lambda = 0.55f},
    {.op = DRT_OP_DIFF_ATTN, .T = 19, .H = 8, .G = 2, .m = 2, .dk = 80, .dv = 96, .p0 = 13, .lambda = 0.25f},
    {.op = DRT_OP_DIFF_ATTN,
     .T = 20,
     .H = 2,
     .G = 2,
     .m = 1,
     .dk = 96,
     .dv = 80,
     .p0 = 200,
     .mag = 300,
     .lambda_th = 1},
    {.op = DRT_OP_DIFF_ATTN, .T = 40, .H = 2, .G = 1, .m = 2, .dk = 128, .dv = 128, .lambda = 0.7f},
    {.op = DRT_OP_ATTN, .T = 8, .H = 4, .G = 1, .dk = 64, .dv = 64, .p0 = 250},
    {.op = DRT_OP_ATTN, .T = 24, .H = 3, .G = 1, .dk = 96, .dv = 80, .p0 = 17, .mag = 300},
    /* decode rows with more than 8 heads a kv group, past 256 keys, dv not a
     * multiple of a vector */
    {.op = DRT_OP_ATTN, .T = 1, .H = 20, .G = 2, .dk = 64, .dv = 64, .p0 = 299},
    {.op = DRT_OP_DIFF_ATTN, .T = 2, .H = 12, .G = 1, .m = 2, .dk = 32, .dv = 48, .p0 = 600, .lambda = 0.4f},
    {.op = DRT_OP_DIFF_ATTN, .T = 1, .H = 16, .G = 1, .m = 1, .dk = 64, .dv = 72, .p0 = 40, .mag = 300, .lambda_th = 1},
    /* PERMUTE with the inner axis contiguous on both sides in 4s (vectorised
     * copies) and an outer axis the thread walks (n0 > 1) */
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {3, 5, 2, 8}, .perm = {2, 1, 0, 3}},
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {6, 3, 70, 12}, .perm = {1, 2, 0, 3}},
    /* PERMUTE keeping the inner axes (Vulkan: copy regions from 64 bytes):
     * runs of 16, runs of 3*20 merged across a size-1 axis, an identity
     * (one region), two kept axes with an outer pair swapped */
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {5, 3, 7, 16}, .perm = {2, 1, 0, 3}},
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {4, 1, 3, 20}, .perm = {1, 0, 2, 3}},
    {.op = DRT_OP_PERMUTE, .nd = 3, .ne = {6, 5, 33}, .perm = {0, 1, 2}},
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {7, 3, 2, 17}, .perm = {1, 0, 2, 3}},
};
const int CF_N_CASES = (int)(sizeof CF_CASES / sizeof CF_CASES[0]);

/* Perf shapes: what issue 3 and docs/design.md section 7 ask to be measured. */
const cf_opcase CF_PERF_CASES[] = {
    {.op = DRT_OP_MATMUL, .T = 1024, .K = 1024, .N = 1024, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 1024, .N = 4096, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 512, .K = 1024, .N = 4096, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 1024, .N = 4096, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 512, .K = 1024, .N = 4096, .wt = BF16, .scale = 1},
    /* the 134M DiffLlama's MLP, prefill and decode (bench/run_cpu.sh) */
    {.op = DRT_OP_MATMUL, .T = 512, .K = 768, .N = 2048, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 768, .N = 2048, .wt = F16, .scale = 1},
    /* diff-v1-tiny's decode GEMVs (dim 128, MLP 384): per-dispatch costs */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 128, .N = 384, .wt = F16, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 384, .N = 128, .wt = F16, .scale = 1},
    /* decode GEMV streaming a 128 MiB f16 weight from memory (past any cache) */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 4096, .N = 16384, .wt = F16, .scale = 1},
    /* the same rows as q8_0 / q4_0, and the 134M model's MLP decode */
    {.op = DRT_OP_MATMUL, .T = 1, .K = 4096, .N = 16384, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 4096, .N = 16384, .wt = Q4, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 768, .N = 2048, .wt = Q8, .scale = 1},
    {.op = DRT_OP_MATMUL, .T = 1, .K = 768, .N = 2048, .wt = Q4, .scale = 1},
    {.op = DRT_OP_DIFF_ATTN, .T = 1024, .H = 8, .G = 8, .m = 2, .dk = 64, .dv = 128, .lambda = 0.5f},
    {.op = DRT_OP_DIFF_ATTN, .T = 1024, .H = 8, .G = 8, .m = 2, .dk = 64, .dv = 128, .decomposed = 1, .lambda = 0.5f},
    {.op = DRT_OP_DIFF_ATTN, .T = 1, .H = 8, .G = 8, .m = 2, .dk = 64, .dv = 128, .p0 = 1023, .lambda = 0.5f},
    /* decode, decomposed */
    {.op = DRT_OP_DIFF_ATTN,
     .T = 1,
     .H = 8,
     .G = 8,
     .m = 2,
     .dk = 64,
     .dv = 128,
     .p0 = 1023,
     .decomposed = 1,
     .lambda = 0.5f},
    {.op = DRT_OP_ATTN, .T = 1024, .H = 8, .G = 8, .dk = 64, .dv = 128},
    {.op = DRT_OP_ATTN, .T = 1, .H = 8, .G = 8, .dk = 64, .dv = 128, .p0 = 1023},
    {.op = DRT_OP_DUAL_SOFTMAX, .H = 8, .T = 1024, .S = 1024, .lambda = 0.5f},
    {.op = DRT_OP_RMSNORM, .T = 512, .C = 4096},
    {.op = DRT_OP_ROPE, .T = 512, .H = 32, .d = 128},
    {.op = DRT_OP_SWIGLU, .rows = 512, .cols = 11008, .mag = 4},
    {.op = DRT_OP_ADD, .rows = 512, .cols = 4096},
    {.op = DRT_OP_GROUPNORM, .T = 512, .H = 16, .dv = 256, .scale = 0},
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {512, 16, 2, 128}, .perm = {2, 1, 0, 3}},
    /* the same bytes with 64-byte runs, and as one copy (KV_WRITE of 512
     * rows of 16x2x128 into a cache at p0 = 256): a copy's yardstick */
    {.op = DRT_OP_PERMUTE, .nd = 4, .ne = {512, 128, 2, 16}, .perm = {2, 1, 0, 3}},
    {.op = DRT_OP_KV_WRITE, .T = 512, .cap = 1024, .G = 16, .m = 2, .d = 128, .p0 = 256},
};
const int CF_N_PERF = (int)(sizeof CF_PERF_CASES / sizeof CF_PERF_CASES[0]);

/* ---- which fields an op reads ------------------------------------------------ */

#define OPB(o) (1ull << DRT_OP_##o)
_Static_assert(DRT_OP_COUNT <= 64, "FIELDS[].ops is a 64-bit mask of ops");
#define ATTN_OPS (OPB(DIFF_ATTN) | OPB(ATTN))

/* Every field but op, with the ops that read it: a case that sets any other
 * is a typo in the table (a MATMUL case given .S, say), refused. */
static const struct {
    const char *name;
    size_t off, size;
    unsigned long long ops;
} FIELDS[] = {
#define F(f, ops)                                                                                                      \
    { #f, offsetof(cf_opcase, f), sizeof(((cf_opcase *)0)->f), ops }
    F(wt, OPB(MATMUL) | OPB(EMBED)),
    F(T, OPB(EMBED) | OPB(RMSNORM) | OPB(MATMUL) | OPB(ROPE) | OPB(DUAL_SOFTMAX) | ATTN_OPS | OPB(GROUPNORM) |
             OPB(KV_WRITE)),
    F(B, OPB(MATMUL)),
    F(Bw, OPB(MATMUL)),
    F(K, OPB(MATMUL)),
    F(N, OPB(MATMUL)),
    F(trans_w, OPB(MATMUL)),
    F(V, OPB(EMBED)),
    F(D, OPB(EMBED)),
    F(C, OPB(RMSNORM)),
    F(H, OPB(ROPE) | OPB(DUAL_SOFTMAX) | ATTN_OPS | OPB(GROUPNORM)),
    F(G, ATTN_OPS | OPB(KV_WRITE)),
    F(m, OPB(DIFF_ATTN) | OPB(KV_WRITE)),
    F(d, OPB(ROPE) | OPB(KV_WRITE)),
    F(dk, ATTN_OPS),
    F(dv, ATTN_OPS | OPB(GROUPNORM)),
    F(S, OPB(DUAL_SOFTMAX)),
    F(cap, OPB(KV_WRITE)),
    F(rows, OPB(SWIGLU) | OPB(SIGMOID) | OPB(ADD)),
    F(cols, OPB(SWIGLU) | OPB(SIGMOID) | OPB(ADD)),
    F(nd, OPB(PERMUTE)),
    F(ne, OPB(PERMUTE)),
    F(perm, OPB(PERMUTE)),
    F(p0, OPB(ROPE) | ATTN_OPS | OPB(KV_WRITE)),
    F(runs, OPB(ROPE) | ATTN_OPS | OPB(KV_WRITE)),
    F(mag, OPB(RMSNORM) | OPB(MATMUL) | OPB(DUAL_SOFTMAX) | ATTN_OPS | OPB(SWIGLU) | OPB(SIGMOID) | OPB(ADD)),
    F(scale, OPB(MATMUL) | OPB(GROUPNORM)),
    F(eps, OPB(RMSNORM)),
    F(lambda, OPB(DUAL_SOFTMAX) | OPB(DIFF_ATTN)),
    F(lambda_th, OPB(DUAL_SOFTMAX) | OPB(DIFF_ATTN)),
    F(no_weight, OPB(RMSNORM) | OPB(GROUPNORM)),
    F(decomposed, OPB(DIFF_ATTN)),
    F(kvt, ATTN_OPS | OPB(KV_WRITE)),
#undef F
};

drt_status cf_case_check(const cf_opcase *c) {
    static const unsigned char zero[sizeof(cf_opcase)];
    if (c->op <= 0 || c->op >= DRT_OP_COUNT)
        return drt_set_error(DRT_ERR_INVALID_ARG, "conform case: op %d", (int)c->op);
    for (size_t i = 0; i < sizeof FIELDS / sizeof FIELDS[0]; i++)
        if (!(FIELDS[i].ops & (1ull << c->op)) && memcmp((const char *)c + FIELDS[i].off, zero, FIELDS[i].size))
            return drt_set_error(DRT_ERR_INVALID_ARG, "conform case: %s does not read .%s", drt_op_name(c->op),
                                 FIELDS[i].name);
    return DRT_OK;
}

const char *cf_case_dtype(const cf_opcase *c) {
    if (c->op == DRT_OP_KV_WRITE || c->op == DRT_OP_ATTN || c->op == DRT_OP_DIFF_ATTN) return drt_dtype_name(c->kvt);
    return c->op == DRT_OP_MATMUL || c->op == DRT_OP_EMBED ? drt_dtype_name(c->wt) : "f32";
}

/* ---- building a case ------------------------------------------------------------ */

static drt_tensor *add_in(cf_built *b, drt_tensor *t, int kind, float mag, int bound) {
    if (!t) return NULL;
    b->in[b->n_in] = t;
    b->kind[b->n_in] = kind;
    b->mag[b->n_in] = mag;
    b->bound[b->n_in] = bound;
    b->n_in++;
    return t;
}

static float or1(float v) {
    return v != 0 ? v : 1;
}

static void build_matmul(const cf_opcase *c, cf_built *b) {
    drt_graph *g = b->g;
    int B = c->B ? c->B : 1, Bw = c->Bw ? c->Bw : 1, T = c->T, K = c->K, N = c->N, tr = c->trans_w;
    float scale = c->scale;
    drt_tensor *x = B > 1 ? drt_new_tensor_3d(g, DRT_F32, B, T, K, "x") : drt_new_tensor_2d(g, DRT_F32, T, K, "x");
    drt_tensor *w;
    if (B > 1 || Bw > 1)
        w = tr ? drt_new_tensor_3d(g, c->wt, Bw, K, N, "w") : drt_new_tensor_3d(g, c->wt, Bw, N, K, "w");
    else
        w = tr ? drt_new_tensor_2d(g, c->wt, K, N, "w") : drt_new_tensor_2d(g, c->wt, N, K, "w");
    add_in(b, x, IN_UNIFORM, or1(c->mag), 0);
    add_in(b, w, IN_UNIFORM, 1, 0);
    b->node = drt_matmul_ex(g, x, w, tr, scale);
    snprintf(b->desc, sizeof b->desc, "B=%d Bw=%d T=%d K=%d N=%d w=%s%s scale=%g", B, Bw, T, K, N,
             drt_dtype_name(c->wt), tr ? " trans_w" : "", (double)scale);
}

/* The case's rows into b (drt_exec): one sequence of T rows at p0, or the
 * sequences of c->runs, sequence i at positions p0*i/(n-1).. in slot n-1-i
 * (slots of slot_rows cache rows; slot_rows 0: as the positions need, plus
 * 3 spare rows). Returns the number of sequences, 0 when they do not fit. */
static int case_rows(const cf_opcase *c, int slot_rows, cf_built *b) {
    int n = 0, len[8] = {c->T}, at[8] = {c->p0};
    while (n < 8 && c->runs[n]) n++;
    if (n == 0)
        n = 1;
    else
        for (int i = 0; i < n; i++) {
            len[i] = c->runs[i];
            at[i] = n > 1 ? (int)((int64_t)c->p0 * i / (n - 1)) : c->p0;
        }
    int rows = 0, need = 0;
    for (int i = 0; i < n; i++) {
        rows += len[i];
        if (at[i] + len[i] > need) need = at[i] + len[i];
    }
    if (rows != c->T || c->T > CF_MAX_ROWS) return 0;
    b->slot_rows = slot_rows ? slot_rows : need + 3;
    if (need > b->slot_rows) return 0;
    size_t o = strlen(b->desc);
    if (c->runs[0]) o += (size_t)snprintf(b->desc + o, sizeof b->desc - o, " seqs");
    for (int i = 0, t = 0; i < n; i++) {
        int slot = n - 1 - i;
        for (int j = 0; j < len[i]; j++, t++) {
            b->rows[2 * t] = slot * b->slot_rows;
            b->rows[2 * t + 1] = at[i] + j;
        }
        if (c->runs[0] && o < sizeof b->desc)
            o += (size_t)snprintf(b->desc + o, sizeof b->desc - o, "%s slot%d@%dx%d", i ? "," : "", slot, at[i],
                                  len[i]);
    }
    b->n_rows = c->T;
    return n;
}

int cf_row_visible(const cf_built *b, int64_t r) {
    for (int t = 0; t < b->n_rows; t++)
        if (r >= b->rows[2 * t] && r <= (int64_t)b->rows[2 * t] + b->rows[2 * t + 1]) return 1;
    return 0;
}

/* DIFF_ATTN and ATTN: the caches get 3 spare rows past each sequence's last
 * position; rows no row attends are NaN (the decomposed lowering reads every
 * row: exactly S) */
static void build_attention(const cf_opcase *c, cf_built *b) {
    drt_graph *g = b->g;
    int T = c->T, H = c->H, G = c->G, m = c->m, dk = c->dk, dv = c->dv, S = c->p0 + T;
    float mag = or1(c->mag);
    if (c->decomposed) {
        drt_tensor *q = add_in(b, drt_new_tensor_4d(g, DRT_F32, T, H, 2, dk, "q"), IN_UNIFORM, mag, 0);
        drt_tensor *k = add_in(b, drt_new_tensor_4d(g, DRT_F32, S, G, m, dk, "k"), IN_CACHE, 1, S);
        drt_tensor *v = add_in(b, drt_new_tensor_3d(g, DRT_F32, S, G, dv, "v"), IN_CACHE, 1, S);
        drt_tensor *l = c->lambda_th ? add_in(b, drt_new_tensor_2d(g, DRT_F32, T, H, "lambda"), IN_UNIT, 1, 0) : NULL;
        b->node = drt_diff_attn_decomposed(g, q, k, v, c->lambda, l);
        snprintf(b->desc, sizeof b->desc, "decomposed T=%d S=%d p0=%d H=%d G=%d m=%d dk=%d dv=%d lambda=%s |q|<=%g", T,
                 S, c->p0, H, G, m, dk, dv, l ? "per-token" : "scalar", (double)mag);
        return;
    }
    /* one sequence: its S and p0; several: each one's slot, start and rows (case_rows) */
    char one[48] = "";
    if (!c->runs[0]) snprintf(one, sizeof one, " S=%d p0=%d", S, c->p0);
    char kv[16] = ""; /* the KV cache type where it is not f32 */
    if (c->kvt) snprintf(kv, sizeof kv, " kv=%s", drt_dtype_name(c->kvt));
    if (c->op == DRT_OP_ATTN)
        snprintf(b->desc, sizeof b->desc, "T=%d%s H=%d G=%d dk=%d dv=%d |q|<=%g%s", T, one, H, G, dk, dv, (double)mag,
                 kv);
    else
        snprintf(b->desc, sizeof b->desc, "T=%d%s H=%d G=%d m=%d dk=%d dv=%d lambda=%s |q|<=%g%s", T, one, H, G, m, dk,
                 dv, c->lambda_th ? "per-token" : "scalar", (double)mag, kv);
    int n = case_rows(c, 0, b);
    if (!n) return;
    int64_t cap = (int64_t)n * b->slot_rows;
    drt_tensor *rows = drt_new_rows(g, T);
    if (c->op == DRT_OP_ATTN) {
        drt_tensor *q = add_in(b, drt_new_tensor_3d(g, DRT_F32, T, H, dk, "q"), IN_UNIFORM, mag, 0);
        drt_tensor *k = add_in(b, drt_new_tensor_3d(g, c->kvt, cap, G, dk, "k"), IN_CACHE, 1, 0);
        drt_tensor *v = add_in(b, drt_new_tensor_3d(g, c->kvt, cap, G, dv, "v"), IN_CACHE, 1, 0);
        b->node = drt_attn(g, q, k, v, rows);
        return;
    }
    drt_tensor *q = add_in(b, drt_new_tensor_4d(g, DRT_F32, T, H, 2, dk, "q"), IN_UNIFORM, mag, 0);
    drt_tensor *k = add_in(b, drt_new_tensor_4d(g, c->kvt, cap, G, m, dk, "k"), IN_CACHE, 1, 0);
    drt_tensor *v = add_in(b, drt_new_tensor_3d(g, c->kvt, cap, G, dv, "v"), IN_CACHE, 1, 0);
    drt_tensor *l = c->lambda_th ? add_in(b, drt_new_tensor_2d(g, DRT_F32, T, H, "lambda"), IN_UNIT, 1, 0) : NULL;
    b->node = drt_diff_attn(g, q, k, v, c->lambda, l, rows);
}

static void build_norm(const cf_opcase *c, cf_built *b) {
    drt_graph *g = b->g;
    if (c->op == DRT_OP_RMSNORM) {
        float mag = or1(c->mag);
        drt_tensor *x = add_in(b, drt_new_tensor_2d(g, DRT_F32, c->T, c->C, "x"), IN_UNIFORM, mag, 0);
        drt_tensor *w = c->no_weight ? NULL : add_in(b, drt_new_tensor_1d(g, DRT_F32, c->C, "w"), IN_UNIFORM, 1, 0);
        b->node = drt_rmsnorm(g, x, w, c->eps);
        snprintf(b->desc, sizeof b->desc, "T=%d C=%d eps=%g%s |x|<=%g", c->T, c->C, (double)c->eps,
                 w ? "" : " no-weight", (double)mag);
        return;
    }
    float scale = c->scale;
    drt_tensor *x = add_in(b, drt_new_tensor_3d(g, DRT_F32, c->T, c->H, c->dv, "x"), IN_UNIFORM, 1, 0);
    drt_tensor *w = c->no_weight ? NULL : add_in(b, drt_new_tensor_1d(g, DRT_F32, c->dv, "w"), IN_UNIFORM, 1, 0);
    b->node = drt_groupnorm(g, x, w, 1e-5f, scale);
    snprintf(b->desc, sizeof b->desc, "T=%d H=%d dv=%d scale=%g%s", c->T, c->H, c->dv, (double)scale,
             w ? "" : " no-weight");
}

static void build_elementwise(const cf_opcase *c, cf_built *b) {
    drt_graph *g = b->g;
    float mag = or1(c->mag);
    drt_tensor *x = add_in(b, drt_new_tensor_2d(g, DRT_F32, c->rows, c->cols, c->op == DRT_OP_SIGMOID ? "x" : "a"),
                           IN_UNIFORM, mag, 0);
    if (c->op == DRT_OP_SIGMOID) {
        b->node = drt_sigmoid(g, x);
    } else {
        drt_tensor *y = add_in(b, drt_new_tensor_2d(g, DRT_F32, c->rows, c->cols, "b"), IN_UNIFORM, mag, 0);
        b->node = c->op == DRT_OP_ADD ? drt_add(g, x, y) : drt_swiglu(g, x, y);
    }
    snprintf(b->desc, sizeof b->desc, "%dx%d |x|<=%g", c->rows, c->cols, (double)mag);
}

/* KV_WRITE: cap cache rows per sequence's slot */
static void build_kv_write(const cf_opcase *c, cf_built *b) {
    drt_graph *g = b->g;
    int T = c->T, G = c->G, m = c->m, d = c->d;
    snprintf(b->desc, sizeof b->desc, "T=%d cache=%d rows of %dx%dx%d%s%s", T, c->cap, G, m ? m : 1, d,
             c->kvt ? " " : "", c->kvt ? drt_dtype_name(c->kvt) : "");
    if (!c->runs[0]) snprintf(b->desc + strlen(b->desc), sizeof b->desc - strlen(b->desc), " p0=%d", c->p0);
    int n = case_rows(c, c->cap, b);
    if (!n) return;
    int64_t Sc = (int64_t)n * c->cap;
    drt_tensor *src, *cache;
    if (m) {
        src = drt_new_tensor_4d(g, DRT_F32, T, G, m, d, "src");
        cache = drt_new_tensor_4d(g, c->kvt, Sc, G, m, d, "cache");
    } else {
        src = drt_new_tensor_3d(g, DRT_F32, T, G, d, "src");
        cache = drt_new_tensor_3d(g, c->kvt, Sc, G, d, "cache");
    }
    add_in(b, src, IN_UNIFORM, 1, 0);
    add_in(b, cache, IN_KV_DST, 1, 0);
    b->node = drt_kv_write(g, src, cache, drt_new_rows(g, T));
}

/* the ops of one or two tensors and a few parameters */
static void build_small(const cf_opcase *c, cf_built *b) {
    drt_graph *g = b->g;
    switch (c->op) {
    case DRT_OP_EMBED: {
        drt_tensor *ids = add_in(b, drt_new_tensor_1d(g, DRT_I32, c->T, "ids"), IN_IDS, 0, c->V);
        drt_tensor *E = add_in(b, drt_new_tensor_2d(g, c->wt, c->V, c->D, "E"), IN_UNIFORM, 1, 0);
        b->node = drt_embed(g, ids, E);
        snprintf(b->desc, sizeof b->desc, "T=%d V=%d D=%d E=%s", c->T, c->V, c->D, drt_dtype_name(c->wt));
        break;
    }
    case DRT_OP_ROPE: {
        snprintf(b->desc, sizeof b->desc, "T=%d Hn=%d d=%d", c->T, c->H, c->d);
        if (!c->runs[0]) snprintf(b->desc + strlen(b->desc), sizeof b->desc - strlen(b->desc), " p0=%d", c->p0);
        if (!case_rows(c, 0, b)) break;
        drt_tensor *x = add_in(b, drt_new_tensor_3d(g, DRT_F32, c->T, c->H, c->d, "x"), IN_UNIFORM, 1, 0);
        drt_tensor *f = add_in(b, drt_new_tensor_1d(g, DRT_F32, c->d / 2, "inv_freq"), IN_INV_FREQ, 1, c->d);
        b->node = drt_rope(g, x, f, drt_new_rows(g, c->T));
        break;
    }
    case DRT_OP_DUAL_SOFTMAX: {
        int H = c->H, T = c->T, S = c->S;
        float mag = or1(c->mag);
        drt_tensor *s1 = add_in(b, drt_new_tensor_3d(g, DRT_F32, H, T, S, "s1"), IN_UNIFORM, mag, 0);
        drt_tensor *s2 = add_in(b, drt_new_tensor_3d(g, DRT_F32, H, T, S, "s2"), IN_UNIFORM, mag, 0);
        drt_tensor *l = c->lambda_th ? add_in(b, drt_new_tensor_2d(g, DRT_F32, T, H, "lambda"), IN_UNIT, 1, 0) : NULL;
        b->node = drt_dual_softmax(g, s1, s2, c->lambda, l);
        b->p0 = S - T;
        snprintf(b->desc, sizeof b->desc, "H=%d T=%d S=%d p0=%d lambda=%s |s|<=%g", H, T, S, S - T,
                 l ? "per-token" : "scalar", (double)mag);
        break;
    }
    case DRT_OP_PERMUTE: {
        int nd = c->nd;
        const int *n = c->ne, *p = c->perm;
        int64_t ne[4] = {n[0], n[1], n[2], n[3]};
        drt_tensor *x = add_in(b, drt_new_tensor(g, DRT_F32, nd, ne, "x"), IN_UNIFORM, 1, 0);
        b->node = drt_permute(g, x, p[0], p[1], nd > 2 ? p[2] : -1, nd > 3 ? p[3] : -1);
        snprintf(b->desc, sizeof b->desc, "nd=%d (%d,%d,%d,%d) perm (%d,%d,%d,%d)", nd, n[0], n[1], n[2], n[3], p[0],
                 p[1], p[2], p[3]);
        break;
    }
    default: break;
    }
}

drt_status cf_build_case(const cf_opcase *c, cf_built *b) {
    memset(b, 0, sizeof *b);
    drt_status st = cf_case_check(c);
    if (st != DRT_OK) return st;
    drt_graph *g = b->g = drt_graph_new();
    if (!g) return drt_set_error(DRT_ERR_OOM, "out of memory");
    b->p0 = c->p0;
    switch (c->op) {
    case DRT_OP_MATMUL: build_matmul(c, b); break;
    case DRT_OP_DIFF_ATTN:
    case DRT_OP_ATTN: build_attention(c, b); break;
    case DRT_OP_RMSNORM:
    case DRT_OP_GROUPNORM: build_norm(c, b); break;
    case DRT_OP_SWIGLU:
    case DRT_OP_SIGMOID:
    case DRT_OP_ADD: build_elementwise(c, b); break;
    case DRT_OP_KV_WRITE: build_kv_write(c, b); break;
    case DRT_OP_EMBED:
    case DRT_OP_ROPE:
    case DRT_OP_DUAL_SOFTMAX:
    case DRT_OP_PERMUTE: build_small(c, b); break;
    default: return drt_set_error(DRT_ERR_INVALID_ARG, "conform: no case builder for %s", drt_op_name(c->op));
    }
    if (!b->node && !g->err)
        return drt_set_error(DRT_ERR_INVALID_ARG, "conform case %s %s: runs[] must sum to T (at most %d rows) and fit",
                             drt_op_name(c->op), b->desc, CF_MAX_ROWS);
    if (!b->node) return drt_set_error(g->err, "conform case %s %s: %s", drt_op_name(c->op), b->desc, drt_last_error());
    b->out = c->op == DRT_OP_KV_WRITE ? b->node->src[1] : b->node;
    /* read after the run, and poisoned before it: its own storage, so no
     * earlier node of a multi-node case writes over the poison */
    b->out->flags |= DRT_TF_OUTPUT;
    return DRT_OK;
}
