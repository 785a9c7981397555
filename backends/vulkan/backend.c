/* The Vulkan backend: the drt_backend_ops table and what joins its parts.
 *
 *   device.c       instance (+ validation layer and a counting messenger
 *                  when DIFFRT_VK_VALIDATION=1), probe, device selection,
 *                  settings, the logical device and its compute queue
 *   memory.c       buffers, staging upload/download, the scratch buffer
 *   pipeline.c     shader modules, pipelines per specialization, the one
 *                  pipeline layout, workgroup-size choices
 *   descriptors.c  descriptor sets cached per set of bound ranges
 *   dispatch.c     recording a forward pass into one command buffer,
 *                  barriers by range overlap, submission and the fence
 * The op families live in matmul.c, matmul_q.c, attention.c, norm.c,
 * elementwise.c; vk_internal.h is what they share. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_module.h"
#include "drt_vulkan.h"
#include "vk_internal.h"

static void vk_shutdown(drt_backend *be) {
    vk_ctx *c = be->ctx;
    if (!c) return;
    if (c->dev) c->f.vkDeviceWaitIdle(c->dev);
    vk_pipeline_release(c);
    vk_sets_release(c);
    vk_dispatch_release(c);
    vk_memory_release(c);
    vk_device_release(c);
    free(c);
    be->ctx = NULL;
}

static drt_status vk_init(drt_backend *be, int device) {
    vk_ctx *c = calloc(1, sizeof *c);
    if (!c) return drt_set_error(DRT_ERR_OOM, "out of memory");
    vk_sets_init(c);
    be->ctx = c;
    c->settings = be->settings;
    drt_status s = vk_device_init(c, device);
    if (s == DRT_OK) s = vk_pipeline_init(c);
    if (s == DRT_OK) s = vk_dispatch_init(c);
    if (s == DRT_OK) s = vk_memory_init(c);
    if (s != DRT_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", drt_last_error());
        vk_shutdown(be);
        return drt_set_error(s, "%s", msg);
    }
    be->device = c->device_index; /* the device actually chosen */
    vk_prewarm(c);
    return DRT_OK;
}

static bool vk_supports(drt_backend *be, const drt_tensor *t) {
    const vk_ctx *c = be->ctx;
    const VkDeviceSize max_range = c->props.limits.maxStorageBufferRange;
    const drt_tensor *all[1 + DRT_MAX_SRC] = {t, t->src[0], t->src[1], t->src[2], t->src[3], t->src[4]};
    for (int i = 0; i < 1 + DRT_MAX_SRC; i++) {
        const drt_tensor *x = all[i];
        if (!x) continue;
        /* each tensor's bytes are bound from its offset rounded down to
         * VK_BIND_ALIGN; element offsets and indices are 32-bit */
        if (drt_nelem(x) >= (int64_t)UINT32_MAX - VK_BIND_ALIGN) return false;
        if (drt_nbytes(x) + VK_BIND_ALIGN + 16 > max_range && !(x == t->src[1] && vk_matmul_splits(c, t))) return false;
        if (x->view_offs % drt_dtype_size(x->type)) return false;
    }
    switch (t->op) {
    case DRT_OP_DIFF_ATTN:
    case DRT_OP_ATTN:
        if (!vk_attention_supported(c, t)) return false;
        /* a plan is being made (session creation for decode): its shape
         * class's pipelines now rather than in the first forward */
        vk_attention_prepare(be->ctx, t);
        return true;
    case DRT_OP_MATMUL:
        vk_matmul_prepare(be->ctx, t); /* its pipeline now, not in the first forward */
        return true;
    case DRT_OP_EMBED: vk_embed_prepare(be->ctx, t); return true;
    case DRT_OP_RMSNORM:
    case DRT_OP_ROPE:
    case DRT_OP_DUAL_SOFTMAX:
    case DRT_OP_GROUPNORM:
    case DRT_OP_SWIGLU:
    case DRT_OP_SIGMOID:
    case DRT_OP_ADD:
    case DRT_OP_PERMUTE: return true;
    case DRT_OP_KV_WRITE:
        /* f32, f16 and q8_0 caches (shaders/kv_write.comp) */
        vk_kv_write_prepare(be->ctx, t);
        return true;
    default: return false;
    }
}

static drt_status record_node(vk_ctx *c, const drt_tensor *t, const drt_exec *ex) {
    switch (t->op) {
    case DRT_OP_MATMUL: return vk_matmul(c, t, ex);
    case DRT_OP_EMBED: return vk_embed(c, t, ex);
    case DRT_OP_DIFF_ATTN:
    case DRT_OP_ATTN: return vk_attention(c, t, ex);
    case DRT_OP_DUAL_SOFTMAX: return vk_dual_softmax(c, t, ex);
    case DRT_OP_RMSNORM:
    case DRT_OP_GROUPNORM: return vk_norm(c, t, ex);
    default: return vk_elementwise(c, t, ex);
    }
}

static drt_status vk_compute(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex) {
    vk_ctx *c = be->ctx;
    drt_status s = vk_pass_begin(c);
    if (s != DRT_OK) return s;
    for (int i = 0; i < n; i++) {
        s = record_node(c, nodes[i], ex);
        if (s != DRT_OK) {
            vk_pass_abandon(c); /* drop what was recorded: the pass is abandoned */
            return s;
        }
    }
    return DRT_OK;
}

static drt_status vk_synchronize(drt_backend *be) {
    return vk_flush(be->ctx);
}

const drt_backend_ops drt_vulkan_backend_ops = {
    .name = "vulkan",
    .probe = vk_probe,
    .device_name = vk_device_name,
    .device_props = vk_device_props,
    .init = vk_init,
    .shutdown = vk_shutdown,
    .buf_alloc = vk_buf_alloc,
    .buf_free = vk_buf_free,
    .upload = vk_upload,
    .download = vk_download,
    .supports = vk_supports,
    .compute = vk_compute,
    .synchronize = vk_synchronize,
    .kernel_variant = vk_kernel_variant,
};

/* the module entry point: libdiffrt-vulkan.so (runtime/drt_module.h) */
DRT_DEFINE_BACKEND_MODULE(drt_vulkan_backend_ops)
