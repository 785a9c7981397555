/* The conformance harness: ONE table of op cases, run on every selected
 * backend against the CPU reference (docs/design.md section 6).
 *
 * A case builds a one-node graph on each backend from the same seeded inputs
 * (weights rounded to their dtype first, so every backend sees the same
 * numbers), poisons the output with NaN, runs, and compares with the CPU
 * reference: NMSE = sum((out-ref)^2)/sum(ref^2) <= 1e-8 for f32 paths, any
 * NaN/Inf where the reference is finite fails. A backend whose supports()
 * refuses the node is "unsupported", never "pass".
 *
 * Every verdict is a record (conform_report.h): the text table, --json and
 * --junit are all written from the same records. */
#define _GNU_SOURCE /* sched_getaffinity */
#include <sched.h>
#include <unistd.h>
#include <cjson/cJSON.h>
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <time.h>

#include "conform_report.h"
#include "drt_conform.h"
#include "drt_error.h"
#include "drt_graph.h"
#include "drt_outfile.h"
#include "drt_peak.h"
#include "drt_half.h"
#include "drt_quant.h"
#include "safetensors.h"

/* ---- the case table --------------------------------------------------------- */

enum { V_LAMBDA_TH = 1, V_NO_WEIGHT = 2, V_DECOMPOSED = 4 };

typedef struct {
    drt_op op;
    int a[10];    /* shape parameters, meaning per op (see build_case) */
    drt_dtype wt; /* weight dtype (MATMUL w, EMBED E) */
    int p0;
    float mag;    /* magnitude of uniform inputs; attention: of q (logit scale) */
    int var;
    float fparam; /* MATMUL scale, DUAL_SOFTMAX/DIFF_ATTN lambda */
} ccase;

#define F32 DRT_F32
#define F16 DRT_F16
#define BF16 DRT_BF16
#define Q8 DRT_Q8_0
#define Q4 DRT_Q4_0

/* Shapes follow docs/design.md section 6: T=1 (decode), sizes that are not
 * multiples of any tile, GQA (G < H), p0 > 0, logits of +-300 and more,
 * dk in {64,128}, dv in {64,128,256}. Attention caches get 3 spare rows past
 * S = p0 + T filled with NaN: a kernel that reads past S fails. */
static const ccase CASES[] = {
    /* EMBED {T, V, D} */
    {DRT_OP_EMBED, {1, 37, 64}, F32, 0, 1, 0, 0},
    {DRT_OP_EMBED, {37, 300, 129}, F16, 0, 1, 0, 0},
    {DRT_OP_EMBED, {5, 11, 65}, BF16, 0, 1, 0, 0},
    /* RMSNORM {T, C}, fparam = eps */
    {DRT_OP_RMSNORM, {1, 37}, F32, 0, 1, 0, 1e-6f},
    {DRT_OP_RMSNORM, {37, 129}, F32, 0, 1, 0, 1e-5f},
    {DRT_OP_RMSNORM, {8, 4096}, F32, 0, 1, 0, 1e-5f},
    {DRT_OP_RMSNORM, {3, 4097}, F32, 0, 300, V_NO_WEIGHT, 1e-6f},
    /* MATMUL {B, Bw, T, K, N, trans_w}, fparam = scale */
    {DRT_OP_MATMUL, {1, 1, 1, 129, 37, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 37, 129, 67, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 64, 64, 64, 0}, F32, 0, 1, 0, 0.3f},
    {DRT_OP_MATMUL, {1, 1, 64, 256, 128, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 3, 1025, 130, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 1000, 129, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 37, 129, 65, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 1000, 129, 0}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 37, 129, 65, 0}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {8, 2, 9, 64, 33, 0}, F32, 0, 1, 0, 0.125f},
    {DRT_OP_MATMUL, {8, 2, 1, 64, 33, 0}, F32, 0, 1, 0, 0.125f},
    {DRT_OP_MATMUL, {4, 4, 7, 40, 65, 1}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {6, 3, 1, 17, 129, 1}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {3, 1, 5, 33, 70, 1}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {2, 2, 5, 33, 70, 0}, F16, 0, 1, 0, 2},
    /* several K blocks, several T blocks, N not a multiple of any panel
     * (the cpu backend's packed GEMM: KC 256, MC up to 128, NR up to 32) */
    {DRT_OP_MATMUL, {1, 1, 150, 520, 97, 0}, BF16, 0, 1, 0, 0.5f},
    {DRT_OP_MATMUL, {1, 1, 70, 700, 300, 0}, F16, 0, 1, 0, 1},
    /* q8_0 / q4_0 weights (K a multiple of 32): GEMV rows, GEMM with a K tail
     * past one packed block, odd N, batches sharing weights, a scale */
    {DRT_OP_MATMUL, {1, 1, 1, 1024, 37, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 1024, 37, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 5, 96, 130, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 9, 96, 130, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 70, 320, 67, 0}, Q8, 0, 1, 0, 0.5f},
    {DRT_OP_MATMUL, {1, 1, 70, 320, 67, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {4, 2, 7, 64, 33, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {2, 1, 3, 64, 33, 0}, Q4, 0, 1, 0, 2},
    /* GEMV edge cases (the cpu backend's int8-dot q4_0 GEMV works on quads
     * of blocks, a last one partial): an odd block count (a lone last
     * block), one block, T = 8, batches with their own w */
    {DRT_OP_MATMUL, {1, 1, 3, 96, 37, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 2, 32, 5, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 2, 32, 5, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {2, 2, 8, 160, 9, 0}, Q4, 0, 1, 0, 0.25f},
    {DRT_OP_MATMUL, {3, 3, 4, 224, 6, 0}, Q8, 0, 1, 0, 1},
    /* q4_0 there goes four blocks at a time, then a partial quad: a quad
     * and three blocks, a quad and two */
    {DRT_OP_MATMUL, {1, 1, 1, 224, 7, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 4, 192, 11, 0}, Q4, 0, 1, 0, 1},
    /* its x levels at extreme magnitudes (blocks under 2^-60 are scaled up
     * by 2^64 first, so 1 / s stays finite) */
    {DRT_OP_MATMUL, {1, 1, 2, 224, 7, 0}, Q4, 0, 1e-36f, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 2, 224, 7, 0}, Q4, 0, 1e30f, 0, 1},
    /* the Vulkan rows kernel for CPU devices (shaders/matvec_q.comp, K %
     * 128 == 0): one super-block, N below a subgroup, odd N with 2 rows a
     * lane, a grid that strides over N, batches with their own or shared w */
    {DRT_OP_MATMUL, {1, 1, 1, 128, 5, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 128, 5, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 512, 17, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 512, 17, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 256, 301, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 2, 256, 301, 0}, Q4, 0, 1, 0, 0.5f},
    {DRT_OP_MATMUL, {2, 2, 3, 384, 19, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {3, 1, 5, 256, 9, 0}, Q4, 0, 1, 0, 1},
    /* the OpenCL GEMVs for CPU devices (8 q8_0 or 4 q4_0 rows an item): N
     * past a multiple of them, batches at T = 1 with shared w */
    {DRT_OP_MATMUL, {4, 2, 1, 96, 13, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {3, 1, 1, 64, 6, 0}, Q4, 0, 1, 0, 0.5f},
    /* the cpu backend's T = 1 int8-dot GEMV on repacked weights (matmul.c
     * qt_rows: superblocks of 16 blocks, the last partial): a full one and
     * half (the 134M model's K = 768), 16 + 9 blocks, a lone block, 17
     * blocks with batches sharing w */
    {DRT_OP_MATMUL, {1, 1, 1, 768, 19, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 800, 10, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 32, 6, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {2, 1, 1, 544, 7, 0}, Q8, 0, 1, 0, 0.5f},
    {DRT_OP_MATMUL, {2, 1, 9, 300, 130, 1}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 8, 1000, 77, 0}, F32, 0, 1, 0, 1},
    /* ROPE {T, Hn, d}; inv_freq of theta 10000 */
    {DRT_OP_ROPE, {1, 4, 64}, F32, 17, 1, 0, 0},
    {DRT_OP_ROPE, {37, 3, 128}, F32, 0, 1, 0, 0},
    {DRT_OP_ROPE, {5, 8, 16}, F32, 3000, 1, 0, 0},
    /* DUAL_SOFTMAX {H, T, S} (p0 = S - T), fparam = lambda */
    {DRT_OP_DUAL_SOFTMAX, {4, 1, 33}, F32, 0, 1, 0, 0.8f},
    {DRT_OP_DUAL_SOFTMAX, {3, 37, 37}, F32, 0, 1, 0, 0.3f},
    {DRT_OP_DUAL_SOFTMAX, {2, 17, 300}, F32, 0, 1, V_LAMBDA_TH, 0},
    {DRT_OP_DUAL_SOFTMAX, {2, 9, 129}, F32, 0, 300, 0, 0.5f},
    /* DIFF_ATTN {T, H, G, m, dk, dv}, S = p0 + T, mag = |q| (300 gives logits
     * of several hundred), fparam = lambda; T*H/G query rows per kv group of
     * 1, 2, 4, 8 and more */
    {DRT_OP_DIFF_ATTN, {1, 8, 2, 2, 64, 128}, F32, 76, 1, 0, 0.6f},
    {DRT_OP_DIFF_ATTN, {37, 4, 4, 2, 64, 128}, F32, 0, 1, 0, 0.2f},
    {DRT_OP_DIFF_ATTN, {13, 4, 2, 1, 128, 128}, F32, 37, 1, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {16, 2, 1, 2, 128, 256}, F32, 0, 1, 0, 0.9f},
    {DRT_OP_DIFF_ATTN, {5, 3, 3, 2, 64, 64}, F32, 129, 1, 0, 0.5f},
    {DRT_OP_DIFF_ATTN, {33, 4, 2, 1, 64, 64}, F32, 0, 300, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {5, 2, 2, 2, 64, 128}, F32, 125, 300, 0, 0.7f},
    {DRT_OP_DIFF_ATTN, {1, 6, 3, 1, 128, 128}, F32, 199, 300, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {1, 8, 1, 2, 128, 256}, F32, 300, 1, 0, 0.4f},
    {DRT_OP_DIFF_ATTN, {7, 2, 1, 2, 16, 40}, F32, 3, 1, 0, 0.8f},
    {DRT_OP_DIFF_ATTN, {1, 4, 4, 2, 64, 64}, F32, 50, 1, 0, 0.3f},
    {DRT_OP_DIFF_ATTN, {2, 4, 4, 1, 64, 256}, F32, 70, 300, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {33, 4, 2, 1, 64, 64}, F32, 0, 900, V_LAMBDA_TH, 0},
    /* many query blocks per head; decode with few heads and a long cache
     * (keys split across threads, partials merged) */
    {DRT_OP_DIFF_ATTN, {70, 3, 1, 2, 64, 128}, F32, 40, 1, 0, 0.35f},
    {DRT_OP_DIFF_ATTN, {1, 1, 1, 2, 64, 128}, F32, 700, 1, 0, 0.45f},
    {DRT_OP_DIFF_ATTN, {2, 2, 1, 1, 64, 64}, F32, 600, 300, V_LAMBDA_TH, 0},
    /* the decomposed lowering (the cache has exactly S rows: it reads all) */
    {DRT_OP_DIFF_ATTN, {5, 4, 2, 2, 64, 128}, F32, 9, 1, V_DECOMPOSED, 0.6f},
    {DRT_OP_DIFF_ATTN, {1, 4, 2, 1, 64, 64}, F32, 20, 1, V_DECOMPOSED | V_LAMBDA_TH, 0},
    /* ATTN {T, H, G, dk, dv}, S = p0 + T */
    {DRT_OP_ATTN, {1, 8, 2, 64, 64}, F32, 76, 1, 0, 0},
    {DRT_OP_ATTN, {37, 4, 4, 128, 128}, F32, 0, 1, 0, 0},
    {DRT_OP_ATTN, {7, 6, 2, 64, 256}, F32, 83, 1, 0, 0},
    {DRT_OP_ATTN, {20, 2, 1, 64, 64}, F32, 0, 300, 0, 0},
    {DRT_OP_ATTN, {3, 4, 1, 128, 128}, F32, 61, 300, 0, 0},
    {DRT_OP_ATTN, {1, 4, 4, 64, 128}, F32, 33, 1, 0, 0},
    {DRT_OP_ATTN, {1, 6, 3, 128, 64}, F32, 9, 1, 0, 0},
    {DRT_OP_ATTN, {70, 2, 1, 64, 64}, F32, 20, 1, 0, 0},
    {DRT_OP_ATTN, {1, 1, 1, 64, 128}, F32, 500, 1, 0, 0},
    /* GROUPNORM {T, H, dv}, fparam = scale */
    {DRT_OP_GROUPNORM, {1, 8, 128}, F32, 0, 1, 0, 0.2f},
    {DRT_OP_GROUPNORM, {37, 3, 256}, F32, 0, 1, 0, 0.65f},
    {DRT_OP_GROUPNORM, {5, 4, 37}, F32, 0, 1, V_NO_WEIGHT, 1},
    /* SWIGLU / SIGMOID / ADD {rows, cols} */
    {DRT_OP_SWIGLU, {1, 1000}, F32, 0, 4, 0, 0},
    {DRT_OP_SWIGLU, {37, 129}, F32, 0, 300, 0, 0},
    {DRT_OP_SIGMOID, {1, 7}, F32, 0, 30, 0, 0},
    {DRT_OP_SIGMOID, {33, 129}, F32, 0, 300, 0, 0},
    {DRT_OP_ADD, {1, 4097}, F32, 0, 1, 0, 0},
    {DRT_OP_ADD, {37, 129}, F32, 0, 1, 0, 0},
    /* KV_WRITE {T, S_cap, G, m, d}: 4-d cache, or m = 0: (S_cap, G, d) */
    {DRT_OP_KV_WRITE, {1, 64, 2, 2, 64}, F32, 63, 1, 0, 0},
    {DRT_OP_KV_WRITE, {7, 40, 3, 0, 128}, F32, 5, 1, 0, 0},
    {DRT_OP_KV_WRITE, {37, 37, 1, 1, 16}, F32, 0, 1, 0, 0},
    /* PERMUTE {nd, n0, n1, n2, n3, p0, p1, p2, p3} */
    {DRT_OP_PERMUTE, {4, 3, 5, 2, 7, 2, 1, 0, 3}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {4, 9, 4, 1, 33, 1, 0, 2, 3}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {4, 2, 3, 4, 5, 3, 2, 1, 0}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {3, 5, 4, 9, 0, 1, 0, 2, 0}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {2, 37, 129, 0, 0, 1, 0, 0, 0}, F32, 0, 1, 0, 0},
    /* OpenCL register-blocked MATMUL variants (issue 16): skinny T = 2, 3
     * with K and N past whole vectors/blocks; a GEMV whose K is all tail;
     * outer (trans_w) with whole 32-column blocks only, rows past a block */
    {DRT_OP_MATMUL, {1, 1, 2, 37, 19, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 3, 100, 33, 0}, BF16, 0, 1, 0, 0.5f},
    {DRT_OP_MATMUL, {1, 1, 1, 7, 9, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {2, 2, 6, 40, 64, 1}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 5, 33, 96, 1}, F16, 0, 1, 0, 1},
    /* OpenCL CPU attention: flash with GQA rows crossing a lane block, m = 1,
     * dk/dv not whole vectors; decode with rows at different t (T = 2), one
     * partial key block, large logits, and dv off the vector width (the
     * local-memory kernel) */
    {DRT_OP_DIFF_ATTN, {9, 4, 2, 2, 64, 128}, F32, 7, 1, 0, 0.6f},
    {DRT_OP_DIFF_ATTN, {11, 2, 2, 1, 32, 48}, F32, 5, 300, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {2, 4, 2, 2, 64, 128}, F32, 50, 1, 0, 0.4f},
    {DRT_OP_DIFF_ATTN, {1, 2, 1, 2, 32, 32}, F32, 3, 1, 0, 0.5f},
    {DRT_OP_DIFF_ATTN, {1, 2, 2, 2, 64, 64}, F32, 40, 300, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {1, 4, 4, 2, 64, 40}, F32, 30, 1, 0, 0.3f},
    {DRT_OP_ATTN, {6, 4, 1, 32, 32}, F32, 10, 1, 0, 0},
    {DRT_OP_ATTN, {2, 2, 1, 16, 16}, F32, 9, 300, 0, 0},
    /* MATMUL edges of the Vulkan kernel variants (backends/vulkan/matmul.c):
     * T = 5..8 just past GEMV (register tiles of 8 rows, rows past T not
     * written); K a multiple of 4 (whole-vec4 loads of x and W, two packed
     * words for f16/bf16) and not (K % 4 == 2: packed words per pair; odd K:
     * element by element); N not a multiple of the 32-column tile; batches
     * with Bw < B, transposed too */
    {DRT_OP_MATMUL, {1, 1, 5, 64, 33, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 6, 132, 70, 0}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 8, 130, 45, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 7, 131, 31, 0}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 9, 128, 96, 0}, F16, 0, 1, 0, 0.5f},
    {DRT_OP_MATMUL, {4, 2, 13, 64, 40, 0}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {6, 2, 5, 36, 33, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {4, 2, 11, 68, 37, 1}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 33, 256, 130, 1}, F16, 0, 1, 0, 1},
    /* GEMVs with K in 16s (Vulkan on CPU devices: 16 packed f16/bf16
     * weights per step as 64-bit loads), more 4-row blocks than workgroups,
     * batched with a shared weight, T up to the GEMV's 4 */
    {DRT_OP_MATMUL, {1, 1, 1, 1024, 37, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 2, 128, 70, 0}, BF16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {3, 1, 1, 256, 33, 0}, F16, 0, 1, 0, 0.5f},
    {DRT_OP_MATMUL, {1, 1, 4, 48, 130, 0}, F16, 0, 1, 0, 1},
    /* Vulkan lanes attention (shaders/attention_lanes.comp, CPU devices):
     * 4 rows per lane with split keys, a partial last row block, GQA of 4,
     * T != S; 2 rows per lane split with m = 1 and large logits; dk/dv of
     * 80, 96 and 128 (both maps 256 wide); ATTN split and dv off 64 */
    {DRT_OP_DIFF_ATTN, {16, 2, 1, 2, 64, 128}, F32, 300, 1, 0, 0.55f},
    {DRT_OP_DIFF_ATTN, {19, 8, 2, 2, 80, 96}, F32, 13, 1, 0, 0.25f},
    {DRT_OP_DIFF_ATTN, {20, 2, 2, 1, 96, 80}, F32, 200, 300, V_LAMBDA_TH, 0},
    {DRT_OP_DIFF_ATTN, {40, 2, 1, 2, 128, 128}, F32, 0, 1, 0, 0.7f},
    {DRT_OP_ATTN, {8, 4, 1, 64, 64}, F32, 250, 1, 0, 0},
    {DRT_OP_ATTN, {24, 3, 1, 96, 80}, F32, 17, 300, 0, 0},
    /* PERMUTE with the inner axis contiguous on both sides in 4s (vectorised
     * copies) and an outer axis the thread walks (n0 > 1) */
    {DRT_OP_PERMUTE, {4, 3, 5, 2, 8, 2, 1, 0, 3}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {4, 6, 3, 70, 12, 1, 2, 0, 3}, F32, 0, 1, 0, 0},
    /* PERMUTE keeping the inner axes (Vulkan: copy regions from 64 bytes):
     * runs of 16, runs of 3*20 merged across a size-1 axis, an identity
     * (one region), two kept axes with an outer pair swapped */
    {DRT_OP_PERMUTE, {4, 5, 3, 7, 16, 2, 1, 0, 3}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {4, 4, 1, 3, 20, 1, 0, 2, 3}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {3, 6, 5, 33, 0, 0, 1, 2, 0}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {4, 7, 3, 2, 17, 1, 0, 2, 3}, F32, 0, 1, 0, 0},
};
#define N_CASES ((int)(sizeof CASES / sizeof CASES[0]))

/* Perf shapes: what issue 3 and docs/design.md section 7 ask to be measured. */
static const ccase PERF_CASES[] = {
    {DRT_OP_MATMUL, {1, 1, 1024, 1024, 1024, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 1024, 4096, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 512, 1024, 4096, 0}, F32, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 1024, 4096, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 512, 1024, 4096, 0}, BF16, 0, 1, 0, 1},
    /* the 134M DiffLlama's MLP, prefill and decode (bench/run_cpu.sh) */
    {DRT_OP_MATMUL, {1, 1, 512, 768, 2048, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 768, 2048, 0}, F16, 0, 1, 0, 1},
    /* diff-v1-tiny's decode GEMVs (dim 128, MLP 384): per-dispatch costs */
    {DRT_OP_MATMUL, {1, 1, 1, 128, 384, 0}, F16, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 384, 128, 0}, F16, 0, 1, 0, 1},
    /* decode GEMV streaming a 128 MiB f16 weight from memory (past any cache) */
    {DRT_OP_MATMUL, {1, 1, 1, 4096, 16384, 0}, F16, 0, 1, 0, 1},
    /* the same rows as q8_0 / q4_0, and the 134M model's MLP decode */
    {DRT_OP_MATMUL, {1, 1, 1, 4096, 16384, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 4096, 16384, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 768, 2048, 0}, Q8, 0, 1, 0, 1},
    {DRT_OP_MATMUL, {1, 1, 1, 768, 2048, 0}, Q4, 0, 1, 0, 1},
    {DRT_OP_DIFF_ATTN, {1024, 8, 8, 2, 64, 128}, F32, 0, 1, 0, 0.5f},
    {DRT_OP_DIFF_ATTN, {1024, 8, 8, 2, 64, 128}, F32, 0, 1, V_DECOMPOSED, 0.5f},
    {DRT_OP_DIFF_ATTN, {1, 8, 8, 2, 64, 128}, F32, 1023, 1, 0, 0.5f},
    {DRT_OP_DIFF_ATTN, {1, 8, 8, 2, 64, 128}, F32, 1023, 1, V_DECOMPOSED, 0.5f}, /* decode,
                                                                                    decomposed */
    {DRT_OP_ATTN, {1024, 8, 8, 64, 128}, F32, 0, 1, 0, 0},
    {DRT_OP_ATTN, {1, 8, 8, 64, 128}, F32, 1023, 1, 0, 0},
    {DRT_OP_DUAL_SOFTMAX, {8, 1024, 1024}, F32, 0, 1, 0, 0.5f},
    {DRT_OP_RMSNORM, {512, 4096}, F32, 0, 1, 0, 0},
    {DRT_OP_ROPE, {512, 32, 128}, F32, 0, 1, 0, 0},
    {DRT_OP_SWIGLU, {512, 11008}, F32, 0, 4, 0, 0},
    {DRT_OP_ADD, {512, 4096}, F32, 0, 1, 0, 0},
    {DRT_OP_GROUPNORM, {512, 16, 256}, F32, 0, 1, 0, 0},
    {DRT_OP_PERMUTE, {4, 512, 16, 2, 128, 2, 1, 0, 3}, F32, 0, 1, 0, 0},
    /* the same bytes with 64-byte runs, and as one copy (KV_WRITE of 512
     * rows of 16x2x128 into a cache at p0 = 256): a copy's yardstick */
    {DRT_OP_PERMUTE, {4, 512, 128, 2, 16, 2, 1, 0, 3}, F32, 0, 1, 0, 0},
    {DRT_OP_KV_WRITE, {512, 1024, 16, 2, 128}, F32, 256, 1, 0, 0},
};
#define N_PERF ((int)(sizeof PERF_CASES / sizeof PERF_CASES[0]))

/* ---- building a case ----------------------------------------------------------- */

/* IN_UNIT: uniform in [0,1) (lambda); IN_INV_FREQ: theta-10000 RoPE
 * frequencies; IN_CACHE: rows past `bound` (= S) are NaN, never to be read;
 * IN_KV_DST: the rows KV_WRITE must write start as NaN */
enum { IN_UNIFORM, IN_IDS, IN_UNIT, IN_INV_FREQ, IN_CACHE, IN_KV_DST };

typedef struct {
    drt_graph *g;
    drt_tensor *node; /* the op under test */
    drt_tensor *out;  /* what is compared: the node (for KV_WRITE, the cache) */
    drt_tensor *in[5];
    int kind[5];
    float mag[5];
    int bound[5]; /* IN_IDS: exclusive upper bound */
    int n_in;
    int p0;
    char desc[200];
} built;

static drt_tensor *add_in(built *b, drt_tensor *t, int kind, float mag, int bound) {
    if (!t) return NULL;
    b->in[b->n_in] = t;
    b->kind[b->n_in] = kind;
    b->mag[b->n_in] = mag;
    b->bound[b->n_in] = bound;
    b->n_in++;
    return t;
}

static drt_status build_case(const ccase *c, built *b) {
    memset(b, 0, sizeof *b);
    drt_graph *g = b->g = drt_graph_new();
    if (!g) return drt_set_error(DRT_ERR_OOM, "out of memory");
    const int *a = c->a;
    const char *wn = drt_dtype_name(c->wt);
    b->p0 = c->p0;
    switch (c->op) {
    case DRT_OP_MATMUL: {
        int B = a[0], Bw = a[1], T = a[2], K = a[3], N = a[4], tr = a[5];
        drt_tensor *x = B > 1 ? drt_new_tensor_3d(g, F32, B, T, K, "x") : drt_new_tensor_2d(g, F32, T, K, "x");
        drt_tensor *w;
        if (B > 1 || Bw > 1)
            w = tr ? drt_new_tensor_3d(g, c->wt, Bw, K, N, "w") : drt_new_tensor_3d(g, c->wt, Bw, N, K, "w");
        else
            w = tr ? drt_new_tensor_2d(g, c->wt, K, N, "w") : drt_new_tensor_2d(g, c->wt, N, K, "w");
        add_in(b, x, IN_UNIFORM, c->mag, 0);
        add_in(b, w, IN_UNIFORM, 1, 0);
        b->node = drt_matmul_ex(g, x, w, tr, c->fparam);
        snprintf(b->desc, sizeof b->desc, "B=%d Bw=%d T=%d K=%d N=%d w=%s%s scale=%g", B, Bw, T, K, N, wn,
                 tr ? " trans_w" : "", (double)c->fparam);
        break;
    }
    case DRT_OP_EMBED: {
        drt_tensor *ids = add_in(b, drt_new_tensor_1d(g, DRT_I32, a[0], "ids"), IN_IDS, 0, a[1]);
        drt_tensor *E = add_in(b, drt_new_tensor_2d(g, c->wt, a[1], a[2], "E"), IN_UNIFORM, 1, 0);
        b->node = drt_embed(g, ids, E);
        snprintf(b->desc, sizeof b->desc, "T=%d V=%d D=%d E=%s", a[0], a[1], a[2], wn);
        break;
    }
    case DRT_OP_RMSNORM: {
        drt_tensor *x = add_in(b, drt_new_tensor_2d(g, F32, a[0], a[1], "x"), IN_UNIFORM, c->mag, 0);
        drt_tensor *w = c->var & V_NO_WEIGHT ? NULL : add_in(b, drt_new_tensor_1d(g, F32, a[1], "w"), IN_UNIFORM, 1, 0);
        b->node = drt_rmsnorm(g, x, w, c->fparam);
        snprintf(b->desc, sizeof b->desc, "T=%d C=%d eps=%g%s |x|<=%g", a[0], a[1], (double)c->fparam,
                 w ? "" : " no-weight", (double)c->mag);
        break;
    }
    case DRT_OP_ROPE: {
        drt_tensor *x = add_in(b, drt_new_tensor_3d(g, F32, a[0], a[1], a[2], "x"), IN_UNIFORM, 1, 0);
        drt_tensor *f = add_in(b, drt_new_tensor_1d(g, F32, a[2] / 2, "inv_freq"), IN_INV_FREQ, 1, a[2]);
        b->node = drt_rope(g, x, f);
        snprintf(b->desc, sizeof b->desc, "T=%d Hn=%d d=%d p0=%d", a[0], a[1], a[2], c->p0);
        break;
    }
    case DRT_OP_DUAL_SOFTMAX: {
        int H = a[0], T = a[1], S = a[2];
        drt_tensor *s1 = add_in(b, drt_new_tensor_3d(g, F32, H, T, S, "s1"), IN_UNIFORM, c->mag, 0);
        drt_tensor *s2 = add_in(b, drt_new_tensor_3d(g, F32, H, T, S, "s2"), IN_UNIFORM, c->mag, 0);
        drt_tensor *l = c->var & V_LAMBDA_TH ? add_in(b, drt_new_tensor_2d(g, F32, T, H, "lambda"), IN_UNIT, 1, 0) : NULL;
        b->node = drt_dual_softmax(g, s1, s2, c->fparam, l);
        b->p0 = S - T;
        snprintf(b->desc, sizeof b->desc, "H=%d T=%d S=%d p0=%d lambda=%s |s|<=%g", H, T, S, S - T,
                 l ? "per-token" : "scalar", (double)c->mag);
        break;
    }
    case DRT_OP_DIFF_ATTN: {
        int T = a[0], H = a[1], G = a[2], m = a[3], dk = a[4], dv = a[5], S = c->p0 + T;
        int cap = c->var & V_DECOMPOSED ? S : S + 3; /* the decomposed path reads every row */
        drt_tensor *q = add_in(b, drt_new_tensor_4d(g, F32, T, H, 2, dk, "q"), IN_UNIFORM, c->mag, 0);
        drt_tensor *k = add_in(b, drt_new_tensor_4d(g, F32, cap, G, m, dk, "k"), IN_CACHE, 1, S);
        drt_tensor *v = add_in(b, drt_new_tensor_3d(g, F32, cap, G, dv, "v"), IN_CACHE, 1, S);
        drt_tensor *l = c->var & V_LAMBDA_TH ? add_in(b, drt_new_tensor_2d(g, F32, T, H, "lambda"), IN_UNIT, 1, 0) : NULL;
        b->node = c->var & V_DECOMPOSED ? drt_diff_attn_decomposed(g, q, k, v, c->fparam, l)
                                        : drt_diff_attn(g, q, k, v, c->fparam, l);
        snprintf(b->desc, sizeof b->desc, "%sT=%d S=%d p0=%d H=%d G=%d m=%d dk=%d dv=%d lambda=%s |q|<=%g",
                 c->var & V_DECOMPOSED ? "decomposed " : "", T, S, c->p0, H, G, m, dk, dv,
                 l ? "per-token" : "scalar", (double)c->mag);
        break;
    }
    case DRT_OP_ATTN: {
        int T = a[0], H = a[1], G = a[2], dk = a[3], dv = a[4], S = c->p0 + T;
        drt_tensor *q = add_in(b, drt_new_tensor_3d(g, F32, T, H, dk, "q"), IN_UNIFORM, c->mag, 0);
        drt_tensor *k = add_in(b, drt_new_tensor_3d(g, F32, S + 3, G, dk, "k"), IN_CACHE, 1, S);
        drt_tensor *v = add_in(b, drt_new_tensor_3d(g, F32, S + 3, G, dv, "v"), IN_CACHE, 1, S);
        b->node = drt_attn(g, q, k, v);
        snprintf(b->desc, sizeof b->desc, "T=%d S=%d p0=%d H=%d G=%d dk=%d dv=%d |q|<=%g", T, S, c->p0, H, G, dk,
                 dv, (double)c->mag);
        break;
    }
    case DRT_OP_GROUPNORM: {
        drt_tensor *x = add_in(b, drt_new_tensor_3d(g, F32, a[0], a[1], a[2], "x"), IN_UNIFORM, 1, 0);
        drt_tensor *w = c->var & V_NO_WEIGHT ? NULL : add_in(b, drt_new_tensor_1d(g, F32, a[2], "w"), IN_UNIFORM, 1, 0);
        b->node = drt_groupnorm(g, x, w, 1e-5f, c->fparam);
        snprintf(b->desc, sizeof b->desc, "T=%d H=%d dv=%d scale=%g%s", a[0], a[1], a[2], (double)c->fparam,
                 w ? "" : " no-weight");
        break;
    }
    case DRT_OP_SWIGLU:
    case DRT_OP_ADD: {
        drt_tensor *x = add_in(b, drt_new_tensor_2d(g, F32, a[0], a[1], "a"), IN_UNIFORM, c->mag, 0);
        drt_tensor *y = add_in(b, drt_new_tensor_2d(g, F32, a[0], a[1], "b"), IN_UNIFORM, c->mag, 0);
        b->node = c->op == DRT_OP_ADD ? drt_add(g, x, y) : drt_swiglu(g, x, y);
        snprintf(b->desc, sizeof b->desc, "%dx%d |x|<=%g", a[0], a[1], (double)c->mag);
        break;
    }
    case DRT_OP_SIGMOID: {
        drt_tensor *x = add_in(b, drt_new_tensor_2d(g, F32, a[0], a[1], "x"), IN_UNIFORM, c->mag, 0);
        b->node = drt_sigmoid(g, x);
        snprintf(b->desc, sizeof b->desc, "%dx%d |x|<=%g", a[0], a[1], (double)c->mag);
        break;
    }
    case DRT_OP_KV_WRITE: {
        int T = a[0], Sc = a[1], G = a[2], m = a[3], d = a[4];
        drt_tensor *src, *cache;
        if (m) {
            src = drt_new_tensor_4d(g, F32, T, G, m, d, "src");
            cache = drt_new_tensor_4d(g, F32, Sc, G, m, d, "cache");
        } else {
            src = drt_new_tensor_3d(g, F32, T, G, d, "src");
            cache = drt_new_tensor_3d(g, F32, Sc, G, d, "cache");
        }
        add_in(b, src, IN_UNIFORM, 1, 0);
        add_in(b, cache, IN_KV_DST, 1, 0);
        b->node = drt_kv_write(g, src, cache);
        snprintf(b->desc, sizeof b->desc, "T=%d cache=%d rows of %dx%dx%d p0=%d", T, Sc, G, m ? m : 1, d, c->p0);
        break;
    }
    case DRT_OP_PERMUTE: {
        int nd = a[0];
        int64_t ne[4] = {a[1], a[2], a[3], a[4]};
        drt_tensor *x = add_in(b, drt_new_tensor(g, F32, nd, ne, "x"), IN_UNIFORM, 1, 0);
        b->node = drt_permute(g, x, a[5], a[6], nd > 2 ? a[7] : -1, nd > 3 ? a[8] : -1);
        snprintf(b->desc, sizeof b->desc, "nd=%d (%d,%d,%d,%d) perm (%d,%d,%d,%d)", nd, a[1], a[2], a[3], a[4], a[5],
                 a[6], a[7], a[8]);
        break;
    }
    default:
        return drt_set_error(DRT_ERR_INVALID_ARG, "conform: no case builder for %s", drt_op_name(c->op));
    }
    if (!b->node) return drt_set_error(g->err ? g->err : DRT_ERR_INVALID_ARG, "conform case %s %s: %s",
                                       drt_op_name(c->op), b->desc, drt_last_error());
    b->out = c->op == DRT_OP_KV_WRITE ? b->node->src[1] : b->node;
    /* read after the run, and poisoned before it: its own storage, so no
     * earlier node of a multi-node case writes over the poison */
    b->out->flags |= DRT_TF_OUTPUT;
    return DRT_OK;
}

/* ---- inputs ------------------------------------------------------------------- */

static uint64_t mix(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double unif(uint64_t *s) { return (double)(mix(s) >> 11) * (1.0 / 9007199254740992.0); }

/* Fills every input of b from seed, converted to its dtype, and uploads it. */
static drt_status fill_inputs(built *b, uint64_t seed) {
    for (int i = 0; i < b->n_in; i++) {
        drt_tensor *t = b->in[i];
        int64_t n = drt_nelem(t);
        uint64_t s = seed * 1000003ull + (uint64_t)i * 7919ull;
        void *h = malloc((size_t)n * 4 + 4);
        if (!h) return drt_set_error(DRT_ERR_OOM, "out of memory");
        for (int64_t j = 0; j < n; j++) {
            double u = unif(&s);
            float f;
            switch (b->kind[i]) {
            case IN_IDS: ((int32_t *)h)[j] = (int32_t)(u * b->bound[i]); continue;
            case IN_UNIT: f = (float)u; break;
            case IN_INV_FREQ: f = (float)pow(10000.0, -2.0 * (double)j / (double)b->bound[i]); break;
            default: f = (float)((2 * u - 1) * b->mag[i]); break;
            }
            if (t->type == DRT_F16) ((uint16_t *)h)[j] = drt_f32_to_f16(f);
            else if (t->type == DRT_BF16) ((uint16_t *)h)[j] = drt_f32_to_bf16(f);
            else ((float *)h)[j] = f;
        }
        /* block formats: the f32 values quantized (rows are contiguous, K a
         * multiple of 32); every backend then reads the same blocks */
        if (drt_dtype_block(t->type) > 1) {
            void *q = malloc(drt_nbytes(t) + 1);
            if (!q) {
                free(h);
                return drt_set_error(DRT_ERR_OOM, "out of memory");
            }
            drt_quantize_row((const float *)h, t->type, q, n);
            free(h);
            h = q;
        }
        int64_t row = t->ne[0] ? n / t->ne[0] : 0;
        if (b->kind[i] == IN_KV_DST) {
            /* the rows KV_WRITE must write are poisoned: unwritten rows fail */
            int64_t T = b->node->src[0]->ne[0];
            for (int64_t j = (int64_t)b->p0 * row; j < (b->p0 + T) * row && j < n; j++) ((float *)h)[j] = NAN;
        }
        if (b->kind[i] == IN_CACHE) /* rows past S must never be read */
            for (int64_t j = (int64_t)b->bound[i] * row; j < n; j++) ((float *)h)[j] = NAN;
        drt_status st = drt_tensor_set(t, h, drt_nbytes(t));
        free(h);
        if (st != DRT_OK) return st;
    }
    if (b->node->op != DRT_OP_KV_WRITE) {
        int64_t n = drt_nelem(b->out);
        float *p = malloc((size_t)n * 4 + 4);
        if (!p) return drt_set_error(DRT_ERR_OOM, "out of memory");
        for (int64_t j = 0; j < n; j++) p[j] = NAN;
        drt_status st = drt_tensor_set(b->out, p, (size_t)n * 4);
        free(p);
        if (st != DRT_OK) return st;
    }
    return DRT_OK;
}

/* ---- running one case on one backend --------------------------------------------- */

/* Runs c on be; *out_host receives the output (malloc'd) when it ran. With
 * times != NULL, runs warmup + repeats times and writes each duration. */
static drt_status run_case(drt_backend *be, const ccase *c, uint64_t seed, float **out_host, int64_t *n_out,
                           int *supported, double *times, int warmup, int repeats, built *keep) {
    built b;
    *out_host = NULL;
    drt_status st = build_case(c, &b);
    if (st != DRT_OK) {
        drt_graph_free(b.g);
        return st;
    }
    /* a case is supported when the backend runs every node of it itself */
    *supported = 1;
    for (int i = 0; i < b.g->n_nodes; i++) *supported &= be->ops->supports(be, b.g->nodes[i]) ? 1 : 0;
    if (!*supported) {
        if (keep) *keep = b; else drt_graph_free(b.g);
        return DRT_OK;
    }
    drt_plan *p = NULL;
    st = drt_plan_create(b.g, be, &p);
    if (st == DRT_OK) st = fill_inputs(&b, seed);
    drt_exec ex = {.p0 = b.p0};
    if (st == DRT_OK && !times) st = drt_plan_run(p, &ex);
    if (st == DRT_OK && times) {
        for (int i = 0; st == DRT_OK && i < warmup; i++) st = drt_plan_run(p, &ex);
        for (int i = 0; st == DRT_OK && i < repeats; i++) {
            double t0 = cf_now();
            st = drt_plan_run(p, &ex);
            times[i] = cf_now() - t0;
        }
    }
    if (st == DRT_OK) {
        *n_out = drt_nelem(b.out);
        *out_host = malloc((size_t)*n_out * 4 + 4);
        if (!*out_host) st = drt_set_error(DRT_ERR_OOM, "out of memory");
        else st = drt_tensor_get(b.out, *out_host, (size_t)*n_out * 4);
    }
    drt_plan_free(p);
    if (keep) *keep = b; else drt_graph_free(b.g);
    return st;
}

/* The verdict of out against the reference: NMSE within bound, and no
 * NaN/Inf where the reference is finite (a poisoned element left unwritten). */
static void compare(const float *out, const float *ref, int64_t n, double bound, cf_case *c) {
    double num = 0, den = 0, mx = 0;
    int64_t bad = -1;
    for (int64_t i = 0; i < n; i++) {
        if (isfinite(ref[i]) && !isfinite(out[i])) {
            if (bad < 0) bad = i;
            continue;
        }
        double d = (double)out[i] - (double)ref[i];
        num += d * d;
        den += (double)ref[i] * ref[i];
        if (fabs(d) > mx) mx = fabs(d);
    }
    c->measured = 1;
    c->bound = bound;
    c->nmse = den > 0 ? num / den : (num > 0 ? INFINITY : 0);
    c->maxerr = mx;
    if (bad >= 0) {
        c->st = CF_FAIL;
        c->nonfinite = 1;
        c->nmse = INFINITY;
        c->fail_type = "nonfinite";
        snprintf(c->detail, sizeof c->detail, "non-finite output at element %lld (reference %g)", (long long)bad,
                 (double)ref[bad]);
    } else if (!(c->nmse <= bound)) {
        c->st = CF_FAIL;
        c->fail_type = "nmse";
        snprintf(c->detail, sizeof c->detail, "NMSE %.3e > bound %.0e", c->nmse, bound);
    } else {
        c->st = CF_PASS;
    }
}

/* ---- names: ops, backends, devices --------------------------------------------------- */

/* the next non-empty item of a comma list; 0 at the end */
static int next_item(const char **cur, const char **item, size_t *len) {
    const char *p = *cur;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        *cur = e ? e + 1 : p + n;
        if (n) {
            *item = p;
            *len = n;
            return 1;
        }
        p = *cur;
    }
    return 0;
}

static int in_list(const char *list, const char *name) {
    const char *cur = list, *it;
    size_t n;
    while (next_item(&cur, &it, &n))
        if (n == strlen(name) && strncasecmp(it, name, n) == 0) return 1;
    return 0;
}

/* the name of registry entry i, compiled in or not */
static const char *reg_name(int i) {
    const drt_backend_ops *ops = drt_registry_get(i);
    if (ops) return ops->name;
    drt_backend_info bi = {0};
    drt_backend_get_info(i, &bi);
    return bi.name;
}

static int find_backend(const char *name, size_t len) {
    for (int i = 0; i < drt_registry_count(); i++) {
        const char *nm = reg_name(i);
        if (nm && strlen(nm) == len && strncasecmp(nm, name, len) == 0) return i;
    }
    return -1;
}

static int find_op(const char *name, size_t len) {
    for (int op = 1; op < DRT_OP_COUNT; op++) {
        const char *nm = drt_op_name((drt_op)op);
        if (strlen(nm) == len && strncasecmp(nm, name, len) == 0) return op;
    }
    return -1;
}

static void valid_backends(char *buf, size_t n) {
    size_t o = 0;
    buf[0] = 0;
    for (int i = 0; i < drt_registry_count() && o < n; i++)
        o += (size_t)snprintf(buf + o, n - o, "%s%s", i ? ", " : "", reg_name(i));
}

static void valid_ops(char *buf, size_t n) {
    size_t o = 0;
    for (int op = 1; op < DRT_OP_COUNT && o < n; op++)
        o += (size_t)snprintf(buf + o, n - o, "%s, ", drt_op_name((drt_op)op));
    if (o < n) snprintf(buf + o, n - o, "or none");
}

/* a usage error: the options name something that does not exist */
static drt_status DRT_PRINTF(2, 3) usage(drt_conform_result *r, const char *fmt, ...) {
    char msg[1500];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    r->usage_error = 1;
    return drt_set_error(DRT_ERR_INVALID_ARG, "%s", msg);
}

/* case-insensitive: does hay contain needle */
static int contains_nocase(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    for (const char *p = hay; *p; p++)
        if (strncasecmp(p, needle, n) == 0) return 1;
    return n == 0;
}

/* sel names device index *out of ops's ndev devices: an index, or the first
 * device whose name contains sel (case-insensitive); else 0 and the devices
 * listed in list */
static int resolve_device(const drt_backend_ops *ops, int ndev, const char *sel, int *out, char *list, size_t ln) {
    char *end;
    long idx = strtol(sel, &end, 10);
    if (*sel && !*end && isdigit((unsigned char)sel[0]) && idx < ndev) {
        *out = (int)idx;
        return 1;
    }
    size_t o = 0;
    list[0] = 0;
    for (int i = 0; i < ndev; i++) {
        char name[256];
        if (ops->device_name(i, name, sizeof name) != DRT_OK) snprintf(name, sizeof name, "?");
        if ((*end || !*sel) && contains_nocase(name, sel)) {
            *out = i;
            return 1;
        }
        if (o < ln) o += (size_t)snprintf(list + o, ln - o, "%s[%d] %s", i ? "; " : "", i, name);
    }
    return 0;
}

/* ---- per (op, backend) aggregates for the text table ------------------------------------- */

typedef struct {
    int n_pass, n_fail, n_unsup, n_unavail, any;
    double worst_key;
    const cf_case *worst;
} cell;

static void cell_add(cell *c, const cf_case *cs) {
    c->any = 1;
    if (cs->st == CF_PASS) c->n_pass++;
    if (cs->st == CF_UNSUPPORTED) c->n_unsup++;
    if (cs->st == CF_UNAVAILABLE) c->n_unavail++;
    if (cs->st != CF_FAIL) return;
    c->n_fail++;
    /* the worst failure: unmeasured ones (errors, unsupported) first, then by NMSE */
    double key = cs->measured && !cs->nonfinite ? cs->nmse : INFINITY;
    if (!c->worst || !(key <= c->worst_key)) {
        c->worst_key = key;
        c->worst = cs;
    }
}

static void cell_text(const cell *c, int available, char *txt, size_t n) {
    if (!available) snprintf(txt, n, "n/a");
    else if (c->n_fail) snprintf(txt, n, "FAIL %d/%d", c->n_fail, c->n_fail + c->n_pass + c->n_unsup);
    else if (c->n_unsup) snprintf(txt, n, "unsupported");
    else if (c->n_pass) snprintf(txt, n, "pass %d", c->n_pass);
    else snprintf(txt, n, "-");
}

/* ---- whole models --------------------------------------------------------------------- */

#define FIXED_PROMPT_T 16

typedef struct {
    int n_tok;
    int32_t tok[64];
    int from_file; /* expected.safetensors' "tokens", else the fixed prompt */
} prompt_t;

static int is_file(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISREG(s.st_mode);
}

static int is_dir(const char *path) {
    struct stat s;
    return stat(path, &s) == 0 && S_ISDIR(s.st_mode);
}

/* a model directory holds config.json */
static int is_model_dir(const char *dir) {
    char p[1100];
    snprintf(p, sizeof p, "%s/config.json", dir);
    return is_file(p);
}

/* The prompt: the "tokens" of the directory's expected.safetensors (the
 * fixtures made by python/make_fixtures.py), else a fixed one: bos (when the
 * config has one), then FIXED_PROMPT_T - 1 ids spread over the vocabulary. */
static drt_status read_prompt(const char *dir, const drt_model_info *I, prompt_t *p) {
    char path[1400];
    snprintf(path, sizeof path, "%s/expected.safetensors", dir);
    memset(p, 0, sizeof *p);
    if (!is_file(path)) {
        p->n_tok = FIXED_PROMPT_T;
        for (int i = 0; i < p->n_tok; i++)
            p->tok[i] = (int32_t)(((uint64_t)i * 7919u + 17u) % (uint64_t)I->vocab);
        if (I->bos_id >= 0 && I->bos_id < I->vocab) p->tok[0] = I->bos_id;
        return DRT_OK;
    }
    drt_st_file f;
    drt_status s = drt_st_open(path, &f);
    if (s != DRT_OK) return s;
    const drt_st_tensor *t = drt_st_find(&f, "tokens");
    if (!t || t->dtype != DRT_I32 || t->ndim != 1 || t->shape[0] < 1 || t->shape[0] > 64) {
        drt_st_close(&f);
        return drt_set_error(DRT_ERR_FORMAT, "%s: no i32 \"tokens\" of 1..64 ids", path);
    }
    p->n_tok = (int)t->shape[0];
    p->from_file = 1;
    memcpy(p->tok, t->data, sizeof(int32_t) * (size_t)p->n_tok);
    drt_st_close(&f);
    for (int i = 0; i < p->n_tok; i++)
        if (p->tok[i] < 0 || p->tok[i] >= I->vocab)
            return drt_set_error(DRT_ERR_FORMAT, "%s: token %d is outside the vocabulary [0, %d)", path, p->tok[i],
                                 I->vocab);
    return DRT_OK;
}

/* prefill logits (T,V), CF_GREEDY_N greedy tokens, and the fallback count */
static drt_status model_run(drt_model *m, const char *backend, const char *device, const prompt_t *p, float *logits,
                            int32_t *greedy, int *fallbacks, char *fb, size_t fbn) {
    drt_model_info I;
    drt_model_get_info(m, &I);
    drt_session *s;
    drt_session_opts so = {.backend = backend, .device = device, .max_ctx = p->n_tok + CF_GREEDY_N + 1};
    *fallbacks = 0;
    drt_status st = drt_session_create(m, &so, &s);
    if (st != DRT_OK) return st;
    for (int64_t i = 0; i < (int64_t)p->n_tok * I.vocab; i++) logits[i] = NAN;
    st = drt_session_forward(s, p->tok, p->n_tok, logits, 1);
    float *last = malloc(sizeof(float) * (size_t)I.vocab);
    if (!last) st = drt_set_error(DRT_ERR_OOM, "out of memory");
    if (st == DRT_OK) memcpy(last, logits + (size_t)(p->n_tok - 1) * I.vocab, sizeof(float) * (size_t)I.vocab);
    for (int i = 0; st == DRT_OK && i < CF_GREEDY_N; i++) {
        int best = 0;
        for (int v = 1; v < I.vocab; v++)
            if (last[v] > last[best]) best = v;
        greedy[i] = best;
        if (i + 1 < CF_GREEDY_N) st = drt_session_forward(s, &greedy[i], 1, last, 0);
    }
    *fallbacks = drt_session_fallbacks(s, fb, fbn);
    free(last);
    drt_session_free(s);
    return st;
}

typedef struct {
    char name[256], path[1024];
} model_ref;

static int cmp_model(const void *a, const void *b) {
    return strcmp(((const model_ref *)a)->name, ((const model_ref *)b)->name);
}

/* --models DIR: DIR itself when it is a model, else every model directory in
 * it; the other directories in it are recorded as skipped, never dropped in
 * silence. No model at all is a usage error. */
static drt_status find_models(const char *dir, cf_run *run, model_ref **out, int *n_out, drt_conform_result *r) {
    *out = NULL;
    *n_out = 0;
    size_t dl = strlen(dir);
    while (dl > 1 && dir[dl - 1] == '/') dl--;
    if (is_model_dir(dir)) {
        model_ref *m = calloc(1, sizeof *m);
        if (!m) return drt_set_error(DRT_ERR_OOM, "out of memory");
        const char *base = dir + dl;
        while (base > dir && base[-1] != '/') base--;
        snprintf(m->name, sizeof m->name, "%.*s", (int)(dir + dl - base), base);
        snprintf(m->path, sizeof m->path, "%.*s", (int)dl, dir);
        *out = m;
        *n_out = 1;
        return DRT_OK;
    }
    DIR *d = opendir(dir);
    if (!d) return usage(r, "conform: --models %s: not a model directory (no config.json) and not a folder", dir);
    model_ref *ms = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    drt_status st = DRT_OK;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[1024];
        snprintf(p, sizeof p, "%.*s/%s", (int)dl, dir, e->d_name);
        if (!is_dir(p)) continue; /* files next to the models (README.md, ...) */
        if (!is_model_dir(p)) {
            cf_skipped *ns = realloc(run->skipped, sizeof *ns * (size_t)(run->n_skipped + 1));
            if (!ns) {
                st = drt_set_error(DRT_ERR_OOM, "out of memory");
                break;
            }
            run->skipped = ns;
            snprintf(ns[run->n_skipped].path, sizeof ns->path, "%s", p);
            snprintf(ns[run->n_skipped].why, sizeof ns->why, "not a model directory (no config.json)");
            run->n_skipped++;
            continue;
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            model_ref *nm = realloc(ms, sizeof *nm * (size_t)cap);
            if (!nm) {
                st = drt_set_error(DRT_ERR_OOM, "out of memory");
                break;
            }
            ms = nm;
        }
        snprintf(ms[n].name, sizeof ms[n].name, "%s", e->d_name);
        snprintf(ms[n].path, sizeof ms[n].path, "%s", p);
        n++;
    }
    closedir(d);
    if (st == DRT_OK && n == 0)
        st = usage(r, "conform: --models %s: not a model directory (no config.json), and no model directory in it", dir);
    if (st != DRT_OK) {
        free(ms);
        return st;
    }
    qsort(ms, (size_t)n, sizeof *ms, cmp_model);
    *out = ms;
    *n_out = n;
    return DRT_OK;
}

/* ---- the run ----------------------------------------------------------------------------- */

static int median_cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static cf_case *add_case(cf_run *run, int kind, int be) {
    if (run->n_cases == run->cap_cases) {
        int cap = run->cap_cases ? 2 * run->cap_cases : 256;
        cf_case *nc = realloc(run->cases, sizeof *nc * (size_t)cap);
        if (!nc) return NULL;
        run->cases = nc;
        run->cap_cases = cap;
    }
    cf_case *c = &run->cases[run->n_cases++];
    memset(c, 0, sizeof *c);
    c->kind = kind;
    c->be = be;
    c->greedy_first_diff = -1;
    c->dtype = "f32";
    return c;
}

/* the verdict for a backend that did not run the case: unavailable, or
 * (required) a failure */
static void not_run(const cf_backend *b, cf_case *c) {
    if (b->required) {
        c->st = CF_FAIL;
        c->fail_type = "unavailable";
        snprintf(c->detail, sizeof c->detail, "required backend unavailable: %s", b->why);
    } else {
        c->st = CF_UNAVAILABLE;
        snprintf(c->detail, sizeof c->detail, "backend unavailable: %s", b->why);
    }
}

/* Checks the names in o (ops, backends, --require, --device) against the op
 * table and the registry; fills run->be with the selected backends, opened
 * on their devices. */
static drt_status select_backends(const drt_conform_opts *o, cf_run *run, drt_conform_result *r) {
    char valid[600];
    const char *cur, *it;
    size_t n;
    cur = o->ops;
    while (next_item(&cur, &it, &n))
        if (find_op(it, n) < 0 && !(n == 4 && strncasecmp(it, "none", 4) == 0)) {
            valid_ops(valid, sizeof valid);
            return usage(r, "conform: unknown op \"%.*s\" (valid: %s)", (int)n, it, valid);
        }
    const char *lists[2] = {o->backends, o->require}, *flag[2] = {"backend", "--require backend"};
    for (int l = 0; l < 2; l++) {
        cur = lists[l];
        while (next_item(&cur, &it, &n))
            if (find_backend(it, n) < 0) {
                valid_backends(valid, sizeof valid);
                return usage(r, "conform: unknown %s \"%.*s\" (valid: %s)", flag[l], (int)n, it, valid);
            }
    }
    cur = o->require;
    while (next_item(&cur, &it, &n)) {
        const char *nm = reg_name(find_backend(it, n));
        if (o->backends && *o->backends && !in_list(o->backends, nm))
            return usage(r, "conform: --require %s, but --backend %s does not select it", nm, o->backends);
    }
    /* --device BACKEND=SEL,... */
    const char *sel[CF_MAX_BE * 4] = {0}; /* per registry index, pointers into a copy */
    char devs[1024] = "";
    if (o->devices) {
        if (strlen(o->devices) >= sizeof devs) return usage(r, "conform: --device: the value is too long");
        snprintf(devs, sizeof devs, "%s", o->devices);
        for (char *p = devs, *e; p && *p; p = e) {
            e = strchr(p, ',');
            if (e) *e++ = 0;
            if (!*p) continue;
            char *eq = strchr(p, '=');
            if (!eq || eq == p || !eq[1])
                return usage(r, "conform: --device wants BACKEND=SEL[,BACKEND=SEL] (SEL: an index or a name "
                                "substring), got \"%s\"", p);
            *eq = 0;
            int bi = find_backend(p, strlen(p));
            if (bi < 0) {
                valid_backends(valid, sizeof valid);
                return usage(r, "conform: --device: unknown backend \"%s\" (valid: %s)", p, valid);
            }
            if (strcmp(reg_name(bi), "ref") == 0)
                return usage(r, "conform: --device: ref is the reference every backend is checked against; it has "
                                "one device and --device does not apply to it");
            if (o->backends && *o->backends && !in_list(o->backends, reg_name(bi)))
                return usage(r, "conform: --device %s=%s, but --backend %s does not select %s", p, eq + 1,
                             o->backends, reg_name(bi));
            if (bi >= (int)(sizeof sel / sizeof sel[0]) || sel[bi])
                return usage(r, "conform: --device names %s twice", reg_name(bi));
            sel[bi] = eq + 1;
        }
    }
    const char *env = getenv("DIFFRT_DEVICE");

    /* the selection, in registry order; a required one that is not compiled
     * in or not available is recorded, never skipped silently */
    for (int i = 0; i < drt_registry_count() && run->nbe < CF_MAX_BE; i++) {
        const drt_backend_ops *ops = drt_registry_get(i);
        const char *name = reg_name(i);
        if (o->backends && *o->backends && !in_list(o->backends, name)) continue;
        cf_backend *b = &run->be[run->nbe++];
        memset(b, 0, sizeof *b);
        b->name = name;
        b->required = in_list(o->require, name);
        b->device = -1;
        b->dev_from = "default";
        b->precision = "f32";
        b->model_bound = CF_MODEL_NMSE;
        if (!ops) {
            drt_backend_info bi = {0};
            drt_backend_get_info(i, &bi);
            snprintf(b->why, sizeof b->why, "%s", bi.reason ? bi.reason : "not compiled in");
            continue;
        }
        int ndev = 0;
        char why[256] = "";
        if (ops->probe(&ndev, why, sizeof why) != DRT_OK || ndev <= 0) {
            snprintf(b->why, sizeof b->why, "%s", why[0] ? why : "no devices found");
            continue;
        }
        /* --device, else DIFFRT_DEVICE (never on ref: the oracle and its
         * own row run on its one device), else the backend's default */
        const char *s = sel[i];
        if (s) b->dev_from = "--device";
        else if (env && *env && strcmp(name, "ref") != 0) s = env, b->dev_from = "DIFFRT_DEVICE";
        int dev = -1;
        if (s) {
            char list[900];
            snprintf(b->dev_sel, sizeof b->dev_sel, "%s", s);
            if (!resolve_device(ops, ndev, s, &dev, list, sizeof list)) {
                if (sel[i])
                    return usage(r, "conform: --device %s=%s: no such %s device (devices: %s)", name, s, name, list);
                snprintf(b->why, sizeof b->why, "DIFFRT_DEVICE=%s names no %s device (devices: %.200s)", s, name, list);
                continue;
            }
        }
        char idx[16] = "";
        if (dev >= 0) snprintf(idx, sizeof idx, "%d", dev);
        if (drt_backend_open(name, idx, &b->be) != DRT_OK) {
            snprintf(b->why, sizeof b->why, "%s", drt_last_error());
            continue;
        }
        b->device = b->be->device >= 0 ? b->be->device : 0;
        if (ops->device_name(b->device, b->dev_desc, sizeof b->dev_desc) != DRT_OK) b->dev_desc[0] = 0;
        if (ops->device_props && ops->device_props(b->device, &b->props) == DRT_OK) b->have_props = 1;
        if (ops->precision) b->precision = ops->precision(b->be);
    }
    return DRT_OK;
}

/* All or nothing: both reports are complete before either replaces the file
 * at its path; when one cannot be written, neither path changes. */
static void write_reports(cf_run *run, drt_outfile *jo, drt_outfile *xo, drt_status *st) {
    const drt_conform_opts *o = run->o;
    if (*st != DRT_OK && !run->error[0]) snprintf(run->error, sizeof run->error, "%s", drt_last_error());
    drt_status s = DRT_OK;
    if (jo->f) s = cf_write_json(run, jo->f, o->json_path);
    if (xo->f && s == DRT_OK) s = cf_write_junit(run, xo->f, o->junit_path);
    if (s == DRT_OK) s = drt_outfile_finish(jo);
    if (s == DRT_OK) s = drt_outfile_finish(xo);
    if (s == DRT_OK) s = drt_outfile_commit(jo);
    if (s == DRT_OK) s = drt_outfile_commit(xo);
    drt_outfile_discard(jo);
    drt_outfile_discard(xo);
    if (*st == DRT_OK) *st = s;
}

/* a percentage of a peak, or ">peak" when above 100 (a measurement
 * problem, not a fact), "-" when there is no peak */
static void pct_txt(double p, char *buf, size_t n) {
    if (p <= 0) snprintf(buf, n, "-");
    else if (p > 100) snprintf(buf, n, ">peak");
    else snprintf(buf, n, "%.1f%%", p);
}

/* CPUs this process may run on (the cpu backend's default threads) */
static int host_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) return CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

drt_status drt_conform_run(const drt_conform_opts *o, drt_conform_result *r) {
    memset(r, 0, sizeof *r);
    FILE *out = o->out;
    cf_run run = {.o = o, .t_start = cf_now()};
    time_t now = time(NULL);
    struct tm tmv;
    if (gmtime_r(&now, &tmv)) strftime(run.started_at, sizeof run.started_at, "%Y-%m-%dT%H:%M:%SZ", &tmv);
    model_ref *models = NULL;
    int n_models = 0;
    drt_backend *ref = NULL;
    drt_outfile jo = {0}, xo = {0};
    const int no_ops = in_list(o->ops, "none");

    if (o->perf && o->junit_path) return usage(r, "conform: --junit reports conformance, not --perf timings");
    if (o->list && (o->json_path || o->junit_path)) return usage(r, "conform: --list prints the case table only");
    drt_status st = select_backends(o, &run, r);
    if (st == DRT_OK && o->models_dir && !o->list && !o->perf)
        st = find_models(o->models_dir, &run, &models, &n_models, r);
    if (st == DRT_OK && o->json_path && o->junit_path && drt_same_file(o->json_path, o->junit_path))
        st = usage(r, "conform: --json %s and --junit %s name the same file", o->json_path, o->junit_path);
    if (st == DRT_OK && o->json_path && drt_outfile_open(&jo, o->json_path) != DRT_OK)
        st = usage(r, "conform: --json: %s", drt_last_error());
    if (st == DRT_OK && o->junit_path && drt_outfile_open(&xo, o->junit_path) != DRT_OK)
        st = usage(r, "conform: --junit: %s", drt_last_error());
    if (st != DRT_OK) goto finish;

    for (int k = 0; k < run.nbe; k++) {
        cf_backend *b = &run.be[k];
        if (!b->be) {
            if (b->required) r->unavailable_required++;
            if (out && !o->list)
                fprintf(out, "backend %-8s unavailable%s: %s\n", b->name, b->required ? " (REQUIRED)" : "", b->why);
        } else if (out && !o->list) {
            fprintf(out, "backend %-8s device %d (%s%s%s): %s; precision %s\n", b->name, b->device, b->dev_from,
                    b->dev_sel[0] ? " " : "", b->dev_sel, b->dev_desc[0] ? b->dev_desc : "?", b->precision);
        }
    }
    for (int i = 0; out && i < run.n_skipped; i++)
        fprintf(out, "models: %s: %s, skipped\n", run.skipped[i].path, run.skipped[i].why);
    /* the oracle: the reference on its one device, whatever DIFFRT_DEVICE says */
    st = drt_backend_open("ref", "", &ref);
    if (st != DRT_OK) goto done;

    if (o->list) {
        for (int i = 0; i < N_CASES; i++) {
            if (o->ops && *o->ops && !in_list(o->ops, drt_op_name(CASES[i].op))) continue;
            built b;
            if (build_case(&CASES[i], &b) == DRT_OK && out) fprintf(out, "%-13s %s\n", drt_op_name(CASES[i].op), b.desc);
            drt_graph_free(b.g);
        }
        goto done;
    }

    if (o->perf) {
        run.perf = cJSON_CreateArray();
        int reps = o->repeats > 0 ? o->repeats : 5, warm = o->warmup >= 0 ? o->warmup : 1;
        double *times = malloc(sizeof(double) * (size_t)reps);
        int any_over = 0;
        if (!times || !run.perf) {
            free(times);
            st = drt_set_error(DRT_ERR_OOM, "out of memory");
            goto done;
        }
        /* each backend's own peaks (drt_measure_peak, as diffrt bench):
         * streaming bandwidth and GEMM FLOP/s, each the best of steady runs
         * of growing size, so a kernel rarely beats them; one that does is
         * flagged, never printed as more than 100% */
        double peak_bw[CF_MAX_BE] = {0}, peak_fl[CF_MAX_BE] = {0};
        for (int k = 0; k < run.nbe && !no_ops; k++) {
            drt_backend *be = run.be[k].be;
            if (!be) continue;
            drt_peak_opts po = {.weight_dtype = DRT_F16};
            if (be->ops->buf_wrap) /* host memory: also a threaded host read loop */
                po.host_threads = strcmp(run.be[k].name, "ref") == 0 ? 1 : be->threads > 0 ? be->threads : host_cpus();
            drt_peak pk;
            st = drt_measure_peak(be, &po, &pk);
            if (st != DRT_OK) break;
            peak_bw[k] = pk.gbytes_per_s;
            peak_fl[k] = pk.gflops;
            if (out)
                fprintf(out, "peak %-8s %.2f GB/s (%s), %.2f GFLOP/s (%s), best of %d\n", run.be[k].name,
                        peak_bw[k], pk.bw_probe, peak_fl[k], pk.flops_probe, pk.runs);
        }
        if (out && st == DRT_OK)
            fprintf(out, "%-13s %-8s %-58s %10s %10s %9s %7s %7s  %s\n", "op", "backend", "shape", "median ms", "GFLOP/s",
                    "GB/s", "%FLOP", "%BW", "kernel (when the backend names it)");
        for (int i = 0; i < N_PERF && st == DRT_OK && !no_ops; i++) {
            const ccase *c = &PERF_CASES[i];
            if (o->ops && *o->ops && !in_list(o->ops, drt_op_name(c->op))) continue;
            for (int k = 0; k < run.nbe && st == DRT_OK; k++) {
                if (!run.be[k].be) continue;
                float *res = NULL;
                int64_t n;
                int sup;
                built b;
                st = run_case(run.be[k].be, c, 1000 + (uint64_t)i, &res, &n, &sup, times, warm, reps, &b);
                free(res);
                if (st != DRT_OK || !sup) {
                    if (st == DRT_OK && out)
                        fprintf(out, "%-13s %-8s %-58s %10s\n", drt_op_name(c->op), run.be[k].name, b.desc, "unsupported");
                    drt_graph_free(b.g);
                    continue;
                }
                qsort(times, (size_t)reps, sizeof(double), median_cmp);
                double med = times[reps / 2];
                drt_exec ex = {.p0 = b.p0};
                double fl = 0, by = 0; /* every node's napkin math: a decomposed case counts its own work */
                for (int q = 0; q < b.g->n_nodes; q++) {
                    const drt_op_info *info = drt_op_get(b.g->nodes[q]->op);
                    fl += info->flops(b.g->nodes[q], &ex);
                    by += info->bytes(b.g->nodes[q], &ex);
                }
                double gf = fl / med * 1e-9, gb = by / med * 1e-9;
                /* the kernel variants the backend says it ran, in node order */
                char kv[160] = "";
                size_t kvn = 0;
                for (int q = 0; q < b.g->n_nodes && run.be[k].be->ops->kernel_variant; q++) {
                    const char *v = run.be[k].be->ops->kernel_variant(run.be[k].be, b.g->nodes[q]);
                    if (v && kvn < sizeof kv)
                        kvn += (size_t)snprintf(kv + kvn, sizeof kv - kvn, "%s%.60s", kvn ? " + " : "", v);
                }
                double pf = peak_fl[k] > 0 ? 100 * gf / peak_fl[k] : 0, pb = peak_bw[k] > 0 ? 100 * gb / peak_bw[k] : 0;
                char tf[16], tb[16];
                pct_txt(pf, tf, sizeof tf);
                pct_txt(pb, tb, sizeof tb);
                any_over |= pf > 100 || pb > 100;
                if (out)
                    fprintf(out, "%-13s %-8s %-58s %10.3f %10.2f %9.2f %7s %7s%s%s\n", drt_op_name(c->op),
                            run.be[k].name, b.desc, med * 1e3, gf, gb, tf, tb, kv[0] ? "  " : "", kv);
                cJSON *j = cJSON_CreateObject();
                cJSON_AddStringToObject(j, "kind", "perf");
                cJSON_AddStringToObject(j, "op", drt_op_name(c->op));
                cJSON_AddStringToObject(j, "backend", run.be[k].name);
                cJSON_AddStringToObject(j, "description", b.desc);
                cJSON_AddNumberToObject(j, "median_s", med);
                cJSON_AddNumberToObject(j, "repeats", reps);
                cJSON_AddNumberToObject(j, "gflops", gf);
                cJSON_AddNumberToObject(j, "gbytes_per_s", gb);
                cJSON_AddNumberToObject(j, "peak_gflops", peak_fl[k]);
                cJSON_AddNumberToObject(j, "peak_gbytes_per_s", peak_bw[k]);
                /* a fraction of a peak, or null with a flag when above 1 */
                cJSON_AddItemToObject(j, "fraction_of_peak_flops",
                                      pf > 0 && pf <= 100 ? cJSON_CreateNumber(pf / 100) : cJSON_CreateNull());
                cJSON_AddItemToObject(j, "fraction_of_peak_bw",
                                      pb > 0 && pb <= 100 ? cJSON_CreateNumber(pb / 100) : cJSON_CreateNull());
                cJSON_AddBoolToObject(j, "above_peak", pf > 100 || pb > 100);
                if (kv[0]) cJSON_AddStringToObject(j, "kernel", kv);
                cJSON_AddItemToArray(run.perf, j);
                drt_graph_free(b.g);
            }
        }
        free(times);
        if (out && any_over)
            fprintf(out, "(>peak: faster than the measured peak: the working set stayed in cache between runs, or "
                         "the peak was under-measured; not a fraction)\n");
        goto done;
    }

    /* op cases */
    for (int i = 0; i < N_CASES && !no_ops; i++) {
        const ccase *c = &CASES[i];
        const char *opn = drt_op_name(c->op);
        if (o->ops && *o->ops && !in_list(o->ops, opn)) continue;
        uint64_t seed = 0x5eed0000ull + (uint64_t)i;
        float *refout = NULL;
        int64_t n;
        int sup;
        built b;
        st = run_case(ref, c, seed, &refout, &n, &sup, NULL, 0, 0, &b);
        if (st != DRT_OK) goto done;
        char desc[200];
        snprintf(desc, sizeof desc, "%s", b.desc);
        drt_graph_free(b.g);
        for (int k = 0; k < run.nbe; k++) {
            const cf_backend *bk = &run.be[k];
            cf_case *cc = add_case(&run, CF_KIND_OP, k);
            if (!cc) {
                free(refout);
                st = drt_set_error(DRT_ERR_OOM, "out of memory");
                goto done;
            }
            cc->op = opn;
            snprintf(cc->desc, sizeof cc->desc, "%s", desc);
            cc->dtype = c->op == DRT_OP_MATMUL || c->op == DRT_OP_EMBED ? drt_dtype_name(c->wt) : "f32";
            cc->seed = seed;
            cc->has_seed = 1;
            if (!bk->be) {
                not_run(bk, cc);
                continue;
            }
            float *res = NULL;
            int64_t n2 = 0;
            built bb = {0};
            double t0 = cf_now();
            drt_status s2 = run_case(bk->be, c, seed, &res, &n2, &sup, NULL, 0, 0, &bb);
            cc->time_s = cf_now() - t0;
            /* the bound the backend declares for this node in its precision
             * mode; docs/design.md section 6: none may be looser than 5e-4 */
            double bound = CF_F32_NMSE;
            if (bb.node && bk->be->ops->nmse_bound) bound = bk->be->ops->nmse_bound(bk->be, bb.node);
            if (!(bound <= CF_REDUCED_NMSE)) bound = CF_REDUCED_NMSE;
            drt_graph_free(bb.g);
            cc->bound = bound;
            if (s2 != DRT_OK) {
                cc->st = CF_FAIL;
                cc->fail_type = "error";
                snprintf(cc->detail, sizeof cc->detail, "run failed: %s", drt_last_error());
            } else if (!sup) {
                cc->unsupported = 1;
                if (bk->required) {
                    cc->st = CF_FAIL;
                    cc->fail_type = "unsupported";
                    snprintf(cc->detail, sizeof cc->detail, "unsupported on a required backend");
                } else {
                    cc->st = CF_UNSUPPORTED;
                    snprintf(cc->detail, sizeof cc->detail, "unsupported: the backend does not run this op");
                }
            } else {
                compare(res, refout, n, bound, cc);
            }
            free(res);
        }
        free(refout);
    }

    /* whole models: the reference's logits and greedy tokens are the oracle */
    for (int mi = 0; mi < n_models; mi++) {
        const char *dir = models[mi].path;
        drt_model *m = NULL;
        drt_model_info I = {0};
        prompt_t pr = {0};
        char why[700] = "";
        float *rl = NULL, *bl = NULL;
        int32_t rg[CF_GREEDY_N], bg[CF_GREEDY_N];
        int fbn = 0;
        char fb[300] = "";
        if (drt_model_load(dir, &m) != DRT_OK) {
            snprintf(why, sizeof why, "cannot load the model: %s", drt_last_error());
        } else {
            drt_model_get_info(m, &I);
            if (read_prompt(dir, &I, &pr) != DRT_OK) snprintf(why, sizeof why, "no prompt: %s", drt_last_error());
        }
        size_t nl = (size_t)pr.n_tok * (size_t)(I.vocab > 0 ? I.vocab : 1);
        if (!why[0]) {
            rl = malloc(nl * 4);
            bl = malloc(nl * 4);
            if (!rl || !bl) {
                free(rl);
                free(bl);
                drt_model_free(m);
                st = drt_set_error(DRT_ERR_OOM, "out of memory");
                goto done;
            }
            if (model_run(m, "ref", "", &pr, rl, rg, &fbn, fb, sizeof fb) != DRT_OK)
                snprintf(why, sizeof why, "the reference run failed: %s", drt_last_error());
        }
        char desc[240];
        if (m)
            snprintf(desc, sizeof desc, "%s layout, %s weights, T=%d %s + %d greedy", I.layout_name,
                     drt_dtype_name(I.weight_dtype), pr.n_tok,
                     pr.from_file ? "prompt of expected.safetensors" : "fixed prompt", CF_GREEDY_N);
        else
            snprintf(desc, sizeof desc, "not loaded");
        for (int k = 0; k < run.nbe; k++) {
            const cf_backend *bk = &run.be[k];
            cf_case *cc = add_case(&run, CF_KIND_MODEL, k);
            if (!cc) {
                st = drt_set_error(DRT_ERR_OOM, "out of memory");
                break;
            }
            snprintf(cc->model, sizeof cc->model, "%s", models[mi].name);
            snprintf(cc->path, sizeof cc->path, "%s", dir);
            snprintf(cc->desc, sizeof cc->desc, "%s", desc);
            cc->dtype = m ? drt_dtype_name(I.weight_dtype) : "f32";
            if (!bk->be) {
                not_run(bk, cc);
                continue;
            }
            cc->bound = bk->model_bound;
            if (why[0]) {
                cc->st = CF_FAIL;
                cc->fail_type = "error";
                snprintf(cc->detail, sizeof cc->detail, "%.*s", (int)sizeof cc->detail - 1, why);
                continue;
            }
            char dev[16];
            snprintf(dev, sizeof dev, "%d", bk->device);
            double t0 = cf_now();
            drt_status s2 = model_run(m, bk->name, bk->be->device >= 0 ? dev : "", &pr, bl, bg, &fbn, fb, sizeof fb);
            cc->time_s = cf_now() - t0;
            cc->fallbacks = fbn;
            if (s2 != DRT_OK) {
                cc->st = CF_FAIL;
                cc->fail_type = "error";
                snprintf(cc->detail, sizeof cc->detail, "run failed: %s", drt_last_error());
                continue;
            }
            double num = 0, den = 0, mx = 0;
            int nonfinite = 0;
            for (size_t i = 0; i < nl; i++) {
                if (!isfinite(bl[i])) nonfinite = 1;
                double dd = (double)bl[i] - rl[i];
                num += dd * dd;
                den += (double)rl[i] * rl[i];
                if (fabs(dd) > mx) mx = fabs(dd);
            }
            cc->measured = 1;
            cc->nonfinite = nonfinite;
            cc->nmse = nonfinite ? INFINITY : den > 0 ? num / den : (num > 0 ? INFINITY : 0);
            cc->maxerr = mx;
            for (int i = 0; i < CF_GREEDY_N && cc->greedy_first_diff < 0; i++)
                if (bg[i] != rg[i]) cc->greedy_first_diff = i;
            cc->st = CF_PASS;
            if (nonfinite) {
                cc->st = CF_FAIL;
                cc->fail_type = "nonfinite";
                snprintf(cc->detail, sizeof cc->detail, "non-finite logits");
            } else if (!(cc->nmse <= cc->bound)) {
                cc->st = CF_FAIL;
                cc->fail_type = "nmse";
                snprintf(cc->detail, sizeof cc->detail, "logits NMSE %.3e > bound %.0e", cc->nmse, cc->bound);
            } else if (cc->greedy_first_diff >= 0) {
                int g = cc->greedy_first_diff;
                cc->st = CF_FAIL;
                cc->fail_type = "greedy";
                snprintf(cc->detail, sizeof cc->detail, "greedy token %d is %d, reference %d", g, bg[g], rg[g]);
            } else if (fbn > 0) {
                if (bk->required) {
                    cc->st = CF_FAIL;
                    cc->fail_type = "fallback";
                }
                snprintf(cc->detail, sizeof cc->detail, "%d node runs fell back to the CPU reference%s: %.170s", fbn,
                         bk->required ? " on a required backend" : "", fb);
            }
        }
        free(rl);
        free(bl);
        drt_model_free(m);
        if (st != DRT_OK) goto done;
    }

    /* the table: one row per op and per model, one column per backend */
    if (out) {
        fprintf(out, "\n%-24s", "op \\ backend");
        for (int k = 0; k < run.nbe; k++) fprintf(out, " %-12s", run.be[k].name);
        fprintf(out, "\n");
        for (int op = 1; op < DRT_OP_COUNT; op++) {
            cell cl[CF_MAX_BE] = {0};
            int any = 0;
            for (int i = 0; i < run.n_cases; i++) {
                const cf_case *c = &run.cases[i];
                if (c->kind == CF_KIND_OP && strcmp(c->op, drt_op_name((drt_op)op)) == 0) cell_add(&cl[c->be], c), any = 1;
            }
            if (!any) continue;
            fprintf(out, "%-24s", drt_op_name((drt_op)op));
            for (int k = 0; k < run.nbe; k++) {
                char txt[32];
                cell_text(&cl[k], run.be[k].be != NULL, txt, sizeof txt);
                fprintf(out, " %-12s", txt);
            }
            fprintf(out, "\n");
        }
        for (int i = 0; i < run.n_cases; i += run.nbe) {
            const cf_case *c = &run.cases[i];
            if (c->kind != CF_KIND_MODEL) continue;
            fprintf(out, "model:%-18s", c->model);
            for (int k = 0; k < run.nbe; k++) {
                const cf_case *ck = &run.cases[i + k];
                const char *txt = !run.be[k].be       ? "n/a"
                                  : ck->st == CF_FAIL ? "FAIL"
                                  : ck->st == CF_PASS ? (ck->detail[0] ? "pass*" : "pass")
                                                      : CF_STATUS_NAME[ck->st];
                fprintf(out, " %-12s", txt);
            }
            fprintf(out, "\n");
        }
        int hdr = 0;
        char line[1400];
        for (int op = 1; op < DRT_OP_COUNT; op++)
            for (int k = 0; k < run.nbe; k++) {
                cell cl = {0};
                for (int i = 0; i < run.n_cases; i++) {
                    const cf_case *c = &run.cases[i];
                    if (c->be == k && c->kind == CF_KIND_OP && strcmp(c->op, drt_op_name((drt_op)op)) == 0) cell_add(&cl, c);
                }
                if (!cl.worst || !run.be[k].be) continue;
                if (!hdr++) fprintf(out, "\nfailures (worst case per op and backend):\n");
                cf_case_line(&run, cl.worst, line, sizeof line);
                fprintf(out, "  FAIL %s: %s\n", run.be[k].name, line);
            }
        for (int i = 0; i < run.n_cases; i++) {
            const cf_case *c = &run.cases[i];
            if (c->kind != CF_KIND_MODEL || !run.be[c->be].be || !c->detail[0]) continue;
            cf_case_line(&run, c, line, sizeof line);
            fprintf(out, "  %s %s: %s\n", c->st == CF_FAIL ? "FAIL" : "note", run.be[c->be].name, line);
        }
    }
    int counts[CF_N_STATUS];
    cf_count(&run, -1, counts);
    r->pass = counts[CF_PASS];
    r->fail = counts[CF_FAIL];
    r->unsupported = counts[CF_UNSUPPORTED];
    if (out) {
        fprintf(out, "\n%d passed, %d failed, %d unsupported, %d unavailable", r->pass, r->fail, r->unsupported,
                counts[CF_UNAVAILABLE]);
        for (int k = 0; k < run.nbe; k++)
            if (run.be[k].required && !run.be[k].be) fprintf(out, "; required backend %s unavailable", run.be[k].name);
        fprintf(out, "\n");
    }

done:
    write_reports(&run, &jo, &xo, &st);
    drt_backend_close(ref);
finish:
    /* a usage error writes no report, and leaves any file at its path as it was */
    drt_outfile_discard(&jo);
    drt_outfile_discard(&xo);
    for (int k = 0; k < run.nbe; k++) drt_backend_close(run.be[k].be);
    free(models);
    free(run.cases);
    free(run.skipped);
    cJSON_Delete(run.perf);
    return st;
}
