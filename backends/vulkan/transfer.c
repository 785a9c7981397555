/* Vulkan: the backend's buffers (drt_backend's buf_alloc, buf_free, upload,
 * download): a drt_buffer is one device-local vk_buf (memory.c); its bytes
 * go through the staging buffer, a chunk per transfer submission, after
 * the recorded pass is flushed (dispatch.c), so a download sees every
 * write before it and a freed buffer is no longer in use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "vk_internal.h"

/* ---- upload / download through staging ----------------------------------------- */

/* Copies n bytes between host memory and b at byte offset off, through the
 * staging buffer, one submission per STAGING_BYTES chunk. */
static drt_status transfer(vk_ctx *c, const vk_buf *b, size_t off, void *host, size_t n, bool up) {
    drt_status s = vk_flush(c);
    while (s == DRT_OK && n > 0) {
        size_t chunk = n < STAGING_BYTES ? n : STAGING_BYTES;
        if (up) memcpy(c->staging_map, host, chunk);
        s = vk_begin(c, c->xfer);
        if (s != DRT_OK) break;
        /* earlier shader reads/writes and copies of b happen before this copy */
        vk_global_barrier(c, c->xfer, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                          VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT, VK_PIPELINE_STAGE_TRANSFER_BIT,
                          VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
        VkBufferCopy reg = {.srcOffset = up ? 0 : off, .dstOffset = up ? off : 0, .size = chunk};
        c->f.vkCmdCopyBuffer(c->xfer, up ? c->staging.buf : b->buf, up ? b->buf : c->staging.buf, 1, &reg);
        /* the copy happens before later shaders and before the host reads staging */
        vk_global_barrier(c, c->xfer, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                          VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                          VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_HOST_READ_BIT);
        VkResult r = c->f.vkEndCommandBuffer(c->xfer);
        if (r != VK_SUCCESS) return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkEndCommandBuffer: %s", vk_result_str(r));
        s = vk_submit_wait(c, c->xfer);
        vk_counters.transfer_submits++;
        if (s == DRT_OK && !up) memcpy(host, c->staging_map, chunk);
        host = (char *)host + chunk;
        off += chunk;
        n -= chunk;
    }
    return s;
}

drt_status vk_buf_alloc(drt_backend *be, size_t size, drt_buffer *out) {
    vk_ctx *c = be->ctx;
    vk_buf *b = calloc(1, sizeof *b);
    if (!b) return drt_set_error(DRT_ERR_OOM, "out of memory");
    drt_status s = vk_create_buffer(c, size, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, b, NULL);
    if (s != DRT_OK) {
        free(b);
        return s;
    }
    out->handle = b;
    out->host = NULL;
    out->size = size;
    return DRT_OK;
}

void vk_buf_free(drt_backend *be, drt_buffer *db) {
    vk_ctx *c = be->ctx;
    vk_buf *b = db->handle;
    if (!b) return;
    vk_flush(c); /* a recorded dispatch may still use it */
    vk_forget_sets(c, b->id);
    vk_destroy_buffer(c, b);
    free(b);
    db->handle = NULL;
}

drt_status vk_upload(drt_backend *be, drt_buffer *b, size_t off, const void *src, size_t n) {
    return transfer(be->ctx, b->handle, off, (void *)src, n, true);
}

drt_status vk_download(drt_backend *be, const drt_buffer *b, size_t off, void *dst, size_t n) {
    return transfer(be->ctx, b->handle, off, dst, n, false);
}
