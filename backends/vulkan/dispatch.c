/* Vulkan: recording and submission.
 *
 * compute() records every node of a run into ONE command buffer: per node
 * a cached pipeline (pipeline.c), a cached descriptor set (descriptors.c:
 * per set of bound ranges, each tensor's bytes from its offset rounded
 * down to VK_BIND_ALIGN), push constants (element offsets inside those
 * ranges, shapes) and a dispatch, preceded by a buffer memory barrier
 * only when it depends on an earlier dispatch (ranges overlap: tensors
 * that share the runtime's activation arena at disjoint offsets do not
 * order each other). synchronize() is one vkQueueSubmit and one fence
 * wait; then the status buffer (errors a shader found, e.g. an EMBED id
 * out of range) is checked. Uploads and downloads (memory.c) use a second
 * command buffer, one submission per staging chunk. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "vk_internal.h"

drt_status vk_dispatch_init(vk_ctx *c) {
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = c->qfam};
    VkResult r = c->f.vkCreateCommandPool(c->dev, &cpi, NULL, &c->cmd_pool);
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = c->cmd_pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    if (r == VK_SUCCESS) r = c->f.vkAllocateCommandBuffers(c->dev, &cai, &c->cmd);
    if (r == VK_SUCCESS) r = c->f.vkAllocateCommandBuffers(c->dev, &cai, &c->xfer);
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (r == VK_SUCCESS) r = c->f.vkCreateFence(c->dev, &fi, NULL, &c->fence);
    if (r != VK_SUCCESS) return drt_set_error(DRT_ERR_BACKEND, "vulkan: device setup failed: %s", vk_result_str(r));
    return DRT_OK;
}

void vk_dispatch_release(vk_ctx *c) {
    if (!c->dev) return;
    if (c->fence) c->f.vkDestroyFence(c->dev, c->fence, NULL);
    if (c->cmd_pool) c->f.vkDestroyCommandPool(c->dev, c->cmd_pool, NULL);
}

/* ---- submission -------------------------------------------------------------- */

drt_status vk_submit_wait(vk_ctx *c, VkCommandBuffer cb) {
    VkSubmitInfo si = {.sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    VkResult r = c->f.vkQueueSubmit(c->queue, 1, &si, c->fence);
    if (r == VK_SUCCESS) r = c->f.vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
    if (r == VK_SUCCESS) r = c->f.vkResetFences(c->dev, 1, &c->fence);
    if (r != VK_SUCCESS) return drt_set_error(DRT_ERR_BACKEND, "vulkan: submission failed: %s", vk_result_str(r));
    return DRT_OK;
}

void vk_global_barrier(vk_ctx *c, VkCommandBuffer cb, VkPipelineStageFlags src, VkAccessFlags sa,
                       VkPipelineStageFlags dst, VkAccessFlags da) {
    VkMemoryBarrier mb = {.sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = sa, .dstAccessMask = da};
    c->f.vkCmdPipelineBarrier(cb, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

drt_status vk_begin(vk_ctx *c, VkCommandBuffer cb) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r = c->f.vkBeginCommandBuffer(cb, &bi);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkBeginCommandBuffer failed: %s", vk_result_str(r));
    return DRT_OK;
}

/* Submits the recorded forward pass (if any) and waits for it. */
drt_status vk_flush(vk_ctx *c) {
    if (!c->recording) return DRT_OK;
    c->recording = false;
    c->n_pend_w = c->n_pend_r = 0;
    /* shader and copy writes -> the host (status buffer) and later transfers */
    vk_global_barrier(c, c->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                      VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    VkResult r = c->f.vkEndCommandBuffer(c->cmd);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkEndCommandBuffer failed: %s", vk_result_str(r));
    drt_status s = vk_submit_wait(c, c->cmd);
    vk_counters.compute_submits++;
    for (int i = 0; i < c->n_retired; i++) { /* no recorded work uses them now */
        vk_forget_sets(c, c->retired[i].id);
        vk_destroy_buffer(c, &c->retired[i]);
    }
    c->n_retired = 0;
    if (s != DRT_OK) return s;
    if (c->status_map[0] == 1)
        return drt_set_error(DRT_ERR_INVALID_ARG, "EMBED: token id %d at position %u is outside [0, %u)",
                             (int)c->status_map[1], c->status_map[2], c->status_map[3]);
    return DRT_OK;
}

drt_status vk_pass_begin(vk_ctx *c) {
    if (c->recording) return DRT_OK;
    drt_status s = vk_begin(c, c->cmd);
    if (s != DRT_OK) return s;
    c->recording = true;
    c->n_pend_w = c->n_pend_r = 0;
    c->status_map[0] = 0;
    /* uploads (transfer writes) before this pass are visible to its
     * shaders and copies */
    vk_global_barrier(c, c->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                      VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                      VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                          VK_ACCESS_TRANSFER_WRITE_BIT);
    return DRT_OK;
}

void vk_pass_abandon(vk_ctx *c) {
    c->f.vkEndCommandBuffer(c->cmd);
    c->f.vkResetCommandBuffer(c->cmd, 0);
    c->recording = false;
}

/* ---- grids ---------------------------------------------------------------------- */

uint32_t vk_groups(const vk_ctx *c, uint64_t n, uint32_t wg) {
    uint64_t g = (n + wg - 1) / wg, cap = 65535;
    if (c->tune_cpu) cap = 4 * (uint64_t)c->n_cpus;
    return g == 0 ? 1 : g < cap ? (uint32_t)g : (uint32_t)cap;
}

void vk_grid_2d(uint64_t n, uint32_t *gx, uint32_t *gy) {
    if (n <= 65535) {
        *gx = n ? (uint32_t)n : 1;
        *gy = 1;
        return;
    }
    *gx = 65535;
    *gy = (uint32_t)((n + 65534) / 65535);
}

/* ---- recording ------------------------------------------------------------------ */

uint32_t vk_eoff(const drt_tensor *t) {
    /* block formats (q8_0, q4_0): the offset in bytes */
    return (uint32_t)(t->offs % VK_BIND_ALIGN / drt_dtype_align(t->type));
}

static const vk_buf *buf_of(const vk_ctx *c, const drt_tensor *t) {
    return t ? (const vk_buf *)t->buf->handle : &c->dummy;
}

/* The bytes a dispatch binds for t: from t->offs rounded down to
 * VK_BIND_ALIGN (vk_eoff is the element offset from there) to t's end
 * rounded up to 16 bytes (buffers are sized in 16s), within the buffer.
 * A NULL slot binds the whole dummy buffer. */
static vk_range range_of(const vk_ctx *c, const drt_tensor *t) {
    const vk_buf *b = buf_of(c, t);
    if (!t) return (vk_range){b->id, 0, b->size};
    uint64_t off = t->offs / VK_BIND_ALIGN * VK_BIND_ALIGN;
    uint64_t end = ((uint64_t)t->offs + drt_nbytes(t) + 15) / 16 * 16;
    if (end > b->size) end = b->size;
    if (end <= off) return (vk_range){b->id, 0, b->size}; /* empty: nothing is accessed */
    return (vk_range){b->id, off, end - off};
}

/* Dependencies are tracked per bound range: that is what a dispatch
 * accesses as far as Vulkan (and the synchronization validation layer) can
 * tell. Tensors in separate buffers never conflict; tensors in the same
 * buffer (views of one base, or the activation arena) conflict when their
 * ranges overlap. */
static bool pending(const vk_use *list, int n, const vk_range *r) {
    for (int i = 0; i < n; i++)
        if (list[i].r.id == r->id && list[i].r.off < r->off + r->size && r->off < list[i].r.off + list[i].r.size)
            return true;
    return false;
}

static void add_use(vk_use *list, int *n, const vk_range *r, VkBuffer buf) {
    for (int i = 0; i < *n; i++)
        if (memcmp(&list[i].r, r, sizeof *r) == 0) return;
    list[(*n)++] = (vk_use){*r, buf};
}

/* A barrier covering every range written since the last one: those writes
 * (by shaders or by copies) become visible to later shader and copy reads
 * and writes (and later writes wait for earlier reads). */
static void barrier(vk_ctx *c) {
    VkBufferMemoryBarrier bm[VK_MAX_PENDING];
    for (int i = 0; i < c->n_pend_w; i++)
        bm[i] = (VkBufferMemoryBarrier){.sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
                                        .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                                        .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                                                         VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                                        .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
                                        .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
                                        .buffer = c->pend_w[i].buf,
                                        .offset = c->pend_w[i].r.off,
                                        .size = c->pend_w[i].r.size};
    const VkPipelineStageFlags st = VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    c->f.vkCmdPipelineBarrier(c->cmd, st, st, 0, 0, NULL, (uint32_t)c->n_pend_w, bm, 0, NULL);
    c->n_pend_w = c->n_pend_r = 0;
    vk_counters.barriers++;
}

/* Hazards of a command reading rd[0..nr) and writing wr[0..nw) against the
 * commands recorded since the last barrier (read-after-write,
 * write-after-write, write-after-read): a barrier first when there is one;
 * then the ranges join the pending lists. */
static void track(vk_ctx *c, const vk_range *rd, const VkBuffer *rbuf, int nr, const vk_range *wr, const VkBuffer *wbuf,
                  int nw) {
    bool dep = c->n_pend_w + nw > VK_MAX_PENDING || c->n_pend_r + nr > VK_MAX_PENDING;
    for (int i = 0; i < nw && !dep; i++)
        dep = pending(c->pend_w, c->n_pend_w, &wr[i]) || pending(c->pend_r, c->n_pend_r, &wr[i]);
    for (int i = 0; i < nr && !dep; i++) dep = pending(c->pend_w, c->n_pend_w, &rd[i]);
    if (dep) barrier(c);
    for (int i = 0; i < nr; i++) add_use(c->pend_r, &c->n_pend_r, &rd[i], rbuf[i]);
    for (int i = 0; i < nw; i++) add_use(c->pend_w, &c->n_pend_w, &wr[i], wbuf[i]);
}

drt_status vk_copy(vk_ctx *c, const drt_tensor *src, const drt_tensor *dst, const VkBufferCopy *reg, uint32_t n) {
    if (n == 0) return DRT_OK;
    const vk_buf *sb = buf_of(c, src), *db = buf_of(c, dst);
    const vk_range rr = range_of(c, src), wr = range_of(c, dst);
    track(c, &rr, &sb->buf, 1, &wr, &db->buf, 1);
    c->f.vkCmdCopyBuffer(c->cmd, sb->buf, db->buf, n, reg);
    vk_counters.copies++;
    return DRT_OK;
}

drt_status vk_dispatch(vk_ctx *c, vk_shader sh, const uint32_t *spec, int nspec, const vk_binds *b, const void *pc,
                       uint32_t pcn, uint32_t gx, uint32_t gy, uint32_t gz) {
    const VkPhysicalDeviceLimits *lim = &c->props.limits;
    if (gx > lim->maxComputeWorkGroupCount[0] || gy > lim->maxComputeWorkGroupCount[1] ||
        gz > lim->maxComputeWorkGroupCount[2])
        return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: grid %ux%ux%u exceeds the device's %ux%ux%u", gx, gy, gz,
                             lim->maxComputeWorkGroupCount[0], lim->maxComputeWorkGroupCount[1],
                             lim->maxComputeWorkGroupCount[2]);
    VkPipeline pipe = VK_NULL_HANDLE;
    drt_status s = vk_pipeline(c, sh, spec, nspec, &pipe);
    if (s != DRT_OK) return s;
    const drt_tensor *in[VK_N_KEYED] = {b->src[0], b->src[1], b->src[2], b->src[3], NULL, b->rows};
    const vk_buf *bufs[VK_N_KEYED] = {buf_of(c, in[0]), buf_of(c, in[1]),  buf_of(c, in[2]),
                                      buf_of(c, in[3]), buf_of(c, b->dst), buf_of(c, in[5])};
    const vk_range key[VK_N_KEYED] = {range_of(c, in[0]), range_of(c, in[1]),  range_of(c, in[2]),
                                      range_of(c, in[3]), range_of(c, b->dst), range_of(c, in[5])};
    VkDescriptorSet set;
    s = vk_get_set(c, bufs, key, &set);
    if (s != DRT_OK) return s;

    /* hazards against the commands recorded since the last barrier */
    const vk_range st = {c->status.id, 0, c->status.size};
    const vk_range wr[2] = {key[4], st}; /* written: the output, maybe the status */
    const VkBuffer wbuf[2] = {bufs[4]->buf, c->status.buf};
    vk_range rd[VK_N_KEYED];
    VkBuffer rbuf[VK_N_KEYED];
    int nr = 0;
    for (int i = 0; i < VK_N_KEYED; i++)
        if (in[i]) {
            rd[nr] = key[i];
            rbuf[nr++] = bufs[i]->buf;
        }
    track(c, rd, rbuf, nr, wr, wbuf, b->status ? 2 : 1);

    c->f.vkCmdBindPipeline(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    c->f.vkCmdBindDescriptorSets(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->layout, 0, 1, &set, 0, NULL);
    c->f.vkCmdPushConstants(c->cmd, c->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pcn, pc);
    c->f.vkCmdDispatch(c->cmd, gx, gy, gz);
    vk_counters.dispatches++;
    return DRT_OK;
}
