/* Vulkan: MATMUL with q8_0 / q4_0 weights. Two kernels:
 *   rows    CPU devices (shaders/matvec_q.comp): a lane owns R weight rows
 *           and walks them in 4-block super-blocks read as 64-bit words, no
 *           reduction; needs shaderInt64, K % 128 == 0, the W byte offset
 *           % 8 == 0 and the x offset % 4 == 0;
 *   output  otherwise (shaders/matmul_q.comp): one invocation per column,
 *           bytewise loads.
 * Both use each weight they unpack for up to 32 rows t (rows_t): decode
 * rows of up to 32 sequences stream every weight once.
 * CPU reference: backends/ref/matmul.c.
 *
 * Checked against the reference (exit status 0: every case within bound):
 *   diffrt conform --backend vulkan --op MATMUL
 *   and with --set vulkan.fp16=0, vulkan.subgroup=0, vulkan.tune=gpu (cpu); the q8_0 / q4_0 cases are the MATMUL cases
 * of those dtypes for the variants those pick (lavapipe runs it here; ctest conform)
 */
#include <stdio.h>

#include "drt_error.h"
#include "vk_internal.h"

/* push constants: the mirror of matmul_q.comp's and matvec_q.comp's PC
 * blocks (o_w in bytes) */
typedef struct {
    uint32_t o_x, o_w, o_y, B, Bw, T, N, K;
    float scale;
} matmul_q_pc;

/* rows t per lane (rows kernel) or invocation (output kernel): each
 * unpacked weight serves up to 32. Measured on lavapipe with the rows
 * kernel (1 -> 4 raised the q4_0 134M prefill 18 -> 19 tok/s, q8_0 13 ->
 * 15; then bench_decode_gemv --layers 4 --rows T, 2 rows n a lane, 2
 * loaded cores, min ms, at most 4 / 8 / 32 rows t: T=8 q8_0 106 / 88 / -,
 * q4_0 96 / 85 / -; T=32 q8_0 - / 353 / 276, q4_0 - / 335 / 312; T=128
 * q8_0 1692 / - / 1052, q4_0 1517 / 1328 / 1222). On GPUs the same,
 * unmeasured. */
static uint32_t rows_t(uint32_t T) {
    return T < 32 ? T : 32;
}

/* rows n per lane of the rows kernel; 0: the output kernel. eo_x, o_w:
 * x's element offset, W's byte offset in their bindings. Each x value a
 * lane loads serves its R rows: 2 for T <= 2 (T=1 K=4096 N=16384: q8_0
 * 50/38/49 ms, q4_0 24/25/37 ms for 1/2/4 rows), else as many as keep the
 * lane's R x TT accumulators at most 64, up to 8 (bench_decode_gemv
 * --layers 4, min ms, R = 2 / 4 / 8 / 16: T=8 q8_0 87 / 79 / 73 / 89,
 * q4_0 88 / 75 / 62 / 62; T=16 q8_0 147 / 119, q4_0 152 / 125; T=32 q8_0
 * 265 / 206 / 202, q4_0 305 / 227 / 204). Compile time bounds R x TT too:
 * R=8 with 32 rows t took 15 s, R=4 4.5 s, R=2 1.6 s. */
static uint32_t rows_per_lane(const vk_ctx *c, uint32_t K, uint32_t T, uint32_t eo_x, uint32_t o_w) {
    if (!c->tune_cpu || !c->use_i64 || K % 128 != 0 || eo_x % 4 != 0 || o_w % 8 != 0) return 0;
    const uint32_t tt = rows_t(T);
    uint32_t r = 8;
    while (r > 2 && r * tt > 64) r /= 2;
    return tt <= 2 ? 2 : r;
}

/* "q4_0 rows wg8 x2 t4", "q8_0 blocks, invocation per column t8" */
const char *vk_matmul_q_variant(const vk_ctx *c, const drt_tensor *t) {
    static _Thread_local char buf[8][64];
    static _Thread_local int next;
    const char *q = t->src[1]->type == DRT_Q8_0 ? "q8_0" : "q4_0";
    const drt_matmul_shape m = drt_matmul_dims(t);
    uint32_t r = rows_per_lane(c, (uint32_t)m.K, (uint32_t)m.T, t->src[0]->buf ? vk_eoff(t->src[0]) : 0,
                               t->src[1]->buf ? vk_eoff(t->src[1]) : 0);
    char *s = buf[next++ & 7];
    if (r)
        snprintf(s, sizeof buf[0], "%s rows wg%u x%u t%u", q, vk_cpu_lanes(c), r, rows_t((uint32_t)m.T));
    else
        snprintf(s, sizeof buf[0], "%s blocks, invocation per column t%u", q, rows_t((uint32_t)m.T));
    return s;
}

drt_status vk_matmul_q(vk_ctx *c, const drt_tensor *t) {
    const drt_tensor *a = t->src[0], *w = t->src[1];
    const drt_matmul_shape m = drt_matmul_dims(t);
    const uint32_t B = (uint32_t)m.B, Bw = (uint32_t)m.Bw, T = (uint32_t)m.T, K = (uint32_t)m.K, N = (uint32_t)m.N;
    const bool q8 = w->type == DRT_Q8_0;
    vk_binds b = {.src = {a, w}, .dst = t};
    matmul_q_pc pc = {vk_eoff(a), vk_eoff(w), vk_eoff(t), B, Bw, T, N, K, t->fp[0]};
    uint32_t r = rows_per_lane(c, K, T, pc.o_x, pc.o_w);
    if (r) {
        uint32_t tt = rows_t(T);
        uint32_t spec[4] = {vk_cpu_lanes(c), 0, r, tt};
        /* two workgroups per core, each striding over N (as the f16 GEMV) */
        uint32_t gx = (N + spec[0] * r - 1) / (spec[0] * r);
        if (gx > 2 * c->n_cpus) gx = 2 * c->n_cpus;
        return vk_dispatch(c, q8 ? VK_SH_MATVEC_Q8 : VK_SH_MATVEC_Q4, spec, 4, &b, &pc, sizeof pc, gx,
                           (T + tt - 1) / tt, B);
    }
    const uint32_t tt = rows_t(T);
    uint32_t spec[3] = {vk_wg(c, 64, 64), c->use_sg, tt};
    return vk_dispatch(c, q8 ? VK_SH_MATMUL_Q8 : VK_SH_MATMUL_Q4, spec, 3, &b, &pc, sizeof pc,
                       (N + spec[0] - 1) / spec[0], (T + tt - 1) / tt, B);
}
