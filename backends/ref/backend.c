/* The CPU reference backend ("ref"): host memory, and one node runner that maps a
 * graph node onto the plain kernels of ref_ops.h. The dispatcher also runs
 * other backends' fallbacks through it (run_node, found in the registry). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ref_ops.h"
#include "drt_error.h"
#include "drt_graph.h"
#include "drt_util.h"

static int64_t rows_of(const drt_tensor *t) {
    return drt_nelem(t) / t->ne[t->nd - 1];
}

/* an attention kernel's scratch row (ref_ops.h) could not be allocated */
static drt_status scratch_oom(const drt_tensor *t, int S) {
    return drt_set_error(DRT_ERR_OOM, "ref: %s %s: cannot allocate the scratch row for %d key positions",
                         drt_op_name(t->op), t->name, S);
}

drt_status drt_ref_run_node(const drt_tensor *t, void *dst, void *const *srcs, const drt_exec *ex) {
    const drt_tensor *a = t->src[0], *b = t->src[1];
    float *y = dst;
    const float *x0 = srcs[0], *x1 = srcs[1];
    const int32_t *rows = srcs[DRT_SRC_ROWS]; /* the position ops' (T, 2) */
    switch (t->op) {
    case DRT_OP_EMBED: {
        const int32_t *ids = srcs[0];
        int V = (int)b->ne[0];
        for (int64_t i = 0; i < a->ne[0]; i++)
            if (ids[i] < 0 || ids[i] >= V)
                return drt_set_error(DRT_ERR_INVALID_ARG, "EMBED: token id %d at position %lld is outside [0, %d)",
                                     ids[i], (long long)i, V);
        drt_ref_embed(y, ids, (int)a->ne[0], srcs[1], b->type, V, (int)b->ne[1]);
        return DRT_OK;
    }
    case DRT_OP_RMSNORM: drt_ref_rmsnorm(y, x0, (int)rows_of(a), (int)a->ne[a->nd - 1], x1, t->fp[0]); return DRT_OK;
    case DRT_OP_MATMUL: {
        const drt_matmul_shape m = drt_matmul_dims(t);
        drt_ref_matmul(y, x0, srcs[1], m.wtype, (int)m.B, (int)m.Bw, (int)m.T, (int)m.N, (int)m.K, m.trans_w, m.scale);
        return DRT_OK;
    }
    case DRT_OP_ROPE: drt_ref_rope(y, x0, (int)a->ne[0], (int)a->ne[1], (int)a->ne[2], rows, x1); return DRT_OK;
    case DRT_OP_DUAL_SOFTMAX:
        if (!drt_ref_dual_softmax(y, x0, x1, (int)a->ne[0], (int)a->ne[1], (int)a->ne[2], t->fp[0], srcs[2]))
            return scratch_oom(t, (int)a->ne[2]);
        return DRT_OK;
    case DRT_OP_DIFF_ATTN: {
        int T = (int)a->ne[0];
        if (!drt_ref_diff_attn_kv(y, x0, x1, srcs[2], b->type, T, rows, (int)a->ne[1], (int)b->ne[1], (int)b->ne[2],
                                  (int)a->ne[3], (int)t->src[2]->ne[2], t->fp[0], srcs[3], t->ip[1]))
            return scratch_oom(t, ex->max_keys);
        return DRT_OK;
    }
    case DRT_OP_ATTN: {
        int T = (int)a->ne[0];
        if (!drt_ref_attn_kv(y, x0, x1, srcs[2], b->type, T, rows, (int)a->ne[1], (int)b->ne[1], (int)a->ne[2],
                             (int)t->src[2]->ne[2], t->ip[1]))
            return scratch_oom(t, ex->max_keys);
        return DRT_OK;
    }
    case DRT_OP_GROUPNORM:
        drt_ref_groupnorm(y, x0, (int)a->ne[0], (int)a->ne[1], (int)a->ne[2], x1, t->fp[0], t->fp[1]);
        return DRT_OK;
    case DRT_OP_SWIGLU: drt_ref_swiglu(y, x0, x1, drt_nelem(t)); return DRT_OK;
    case DRT_OP_SIGMOID: drt_ref_sigmoid(y, x0, drt_nelem(t)); return DRT_OK;
    case DRT_OP_ADD: drt_ref_add(y, x0, x1, drt_nelem(t)); return DRT_OK;
    case DRT_OP_KV_WRITE:
        /* dst aliases the cache (srcs[1]) */
        drt_ref_kv_write_typed(y, t->type, x0, (int)a->ne[0], drt_nelem(a) / (a->ne[0] ? a->ne[0] : 1), rows);
        return DRT_OK;
    case DRT_OP_PERMUTE: {
        int64_t ne[4];
        int perm[4];
        drt_permute_4d(t, ne, perm); /* padded at the front to 4 dims */
        drt_ref_permute(y, x0, ne, perm);
        return DRT_OK;
    }
    case DRT_OP_NONE:
    case DRT_OP_COUNT: break;
    }
    return drt_set_error(DRT_ERR_UNSUPPORTED, "cpu: op %s has no reference kernel", drt_op_name(t->op));
}

/* ---- backend table ------------------------------------------------------- */

static drt_status ref_probe(int *n, char *why, size_t wn) {
    *n = 1;
    return DRT_OK;
}

static drt_status ref_device_name(int dev, char *buf, size_t n) {
    snprintf(buf, n, "host CPU (%d cores; reference kernels, single-threaded)", drt_cpu_online());
    return DRT_OK;
}

static drt_status ref_device_props(int dev, drt_device_props *out) {
    drt_host_cpu_props(out);
    return DRT_OK;
}

static drt_status ref_init(drt_backend *be, int dev) {
    be->device = 0;
    return DRT_OK;
}

static drt_status ref_buf_alloc(drt_backend *be, size_t size, drt_buffer *out) {
    void *p = NULL;
    size_t sz = (size + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, sz) != 0 || !p)
        return drt_set_error(DRT_ERR_OOM, "ref: cannot allocate %zu bytes of host memory", size);
    out->handle = p;
    out->host = p;
    out->size = size;
    return DRT_OK;
}

static void ref_buf_free(drt_backend *be, drt_buffer *b) {
    free(b->handle);
    b->handle = b->host = NULL;
}

static drt_status ref_upload(drt_backend *be, drt_buffer *b, size_t off, const void *src, size_t n) {
    memcpy((char *)b->host + off, src, n);
    return DRT_OK;
}

static drt_status ref_download(drt_backend *be, const drt_buffer *b, size_t off, void *dst, size_t n) {
    memcpy(dst, (const char *)b->host + off, n);
    return DRT_OK;
}

static bool ref_supports(drt_backend *be, const drt_tensor *t) {
    return true;
}

static drt_status ref_compute(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex) {
    for (int i = 0; i < n; i++) {
        drt_tensor *t = nodes[i];
        void *srcs[DRT_MAX_SRC] = {0};
        for (int j = 0; j < DRT_MAX_SRC; j++)
            if (t->src[j]) srcs[j] = drt_host_ptr(t->src[j]);
        drt_status s = drt_ref_run_node(t, drt_host_ptr(t), srcs, ex);
        if (s != DRT_OK) return s;
    }
    return DRT_OK;
}

static drt_status ref_sync(drt_backend *be) {
    return DRT_OK;
}

const drt_backend_ops drt_ref_backend_ops = {
    .name = "ref",
    .probe = ref_probe,
    .device_name = ref_device_name,
    .init = ref_init,
    .shutdown = NULL,
    .buf_alloc = ref_buf_alloc,
    .buf_free = ref_buf_free,
    .upload = ref_upload,
    .download = ref_download,
    .supports = ref_supports,
    .compute = ref_compute,
    .synchronize = ref_sync,
    .device_props = ref_device_props,
    .run_node = drt_ref_run_node,
};
