/* Vulkan: device memory.
 *
 *   buffers    one VkBuffer + VkDeviceMemory per drt_buffer, in device-local
 *              memory; never host-visible to the runtime: upload/download go
 *              through a staging buffer (one transfer submission per chunk;
 *              transfer.c, with the backend's buffer calls).
 *   fixed      the staging buffer, the status buffer (binding 6: errors a
 *              shader found) and a dummy bound to unused slots, made with the
 *              device.
 *   scratch    the split-key attention partials, grown as needed; a replaced
 *              one is retired until the pass that uses it has run. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "vk_internal.h"

static int find_memory(const vk_ctx *c, uint32_t bits, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer) {
    for (int pass = 0; pass < 2; pass++) {
        VkMemoryPropertyFlags need = pass == 0 ? want | prefer : want;
        for (uint32_t i = 0; i < c->mem.memoryTypeCount; i++)
            if ((bits >> i & 1) && (c->mem.memoryTypes[i].propertyFlags & need) == need) return (int)i;
    }
    return -1;
}

drt_status vk_create_buffer(vk_ctx *c, size_t size, VkMemoryPropertyFlags want, VkMemoryPropertyFlags prefer,
                            vk_buf *out, void **map) {
    memset(out, 0, sizeof *out);
    VkDeviceSize sz = ((VkDeviceSize)size + 15) & ~(VkDeviceSize)15;
    if (sz == 0) sz = 16;
    VkBufferCreateInfo bi = {
        .sType = VK_STRUCTURE_TYPE_BUFFER_CREATE_INFO,
        .size = sz,
        .usage = VK_BUFFER_USAGE_STORAGE_BUFFER_BIT | VK_BUFFER_USAGE_TRANSFER_SRC_BIT |
                 VK_BUFFER_USAGE_TRANSFER_DST_BIT,
        .sharingMode = VK_SHARING_MODE_EXCLUSIVE,
    };
    VkResult r = c->f.vkCreateBuffer(c->dev, &bi, NULL, &out->buf);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_OOM, "vulkan: vkCreateBuffer(%zu bytes) failed: %s", size, vk_result_str(r));
    VkMemoryRequirements req;
    c->f.vkGetBufferMemoryRequirements(c->dev, out->buf, &req);
    int mt = find_memory(c, req.memoryTypeBits, want, prefer);
    if (mt < 0) {
        c->f.vkDestroyBuffer(c->dev, out->buf, NULL);
        out->buf = VK_NULL_HANDLE;
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: no memory type with properties 0x%x for a buffer", want);
    }
    VkMemoryAllocateInfo ai = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO, .allocationSize = req.size, .memoryTypeIndex = (uint32_t)mt};
    r = c->f.vkAllocateMemory(c->dev, &ai, NULL, &out->mem);
    if (r == VK_SUCCESS) r = c->f.vkBindBufferMemory(c->dev, out->buf, out->mem, 0);
    if (r == VK_SUCCESS && map) r = c->f.vkMapMemory(c->dev, out->mem, 0, VK_WHOLE_SIZE, 0, map);
    if (r != VK_SUCCESS) {
        if (out->mem) c->f.vkFreeMemory(c->dev, out->mem, NULL);
        c->f.vkDestroyBuffer(c->dev, out->buf, NULL);
        memset(out, 0, sizeof *out);
        return drt_set_error(r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY ? DRT_ERR_OOM
                                                                                                    : DRT_ERR_BACKEND,
                             "vulkan: cannot allocate %zu bytes of device memory: %s", size, vk_result_str(r));
    }
    out->size = sz;
    out->id = ++c->next_id;
    vk_counters.buffers++;
    return DRT_OK;
}

void vk_destroy_buffer(vk_ctx *c, vk_buf *b) {
    if (b->buf) c->f.vkDestroyBuffer(c->dev, b->buf, NULL);
    if (b->mem) c->f.vkFreeMemory(c->dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
}

drt_status vk_memory_init(vk_ctx *c) {
    const VkMemoryPropertyFlags hv = VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    drt_status s = vk_create_buffer(c, STAGING_BYTES, hv, VK_MEMORY_PROPERTY_HOST_CACHED_BIT, &c->staging,
                                    &c->staging_map);
    void *sm = NULL;
    if (s == DRT_OK) s = vk_create_buffer(c, 64, hv, 0, &c->status, &sm);
    c->status_map = sm;
    if (s == DRT_OK) s = vk_create_buffer(c, 256, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, &c->dummy, NULL);
    if (s == DRT_OK) memset(c->status_map, 0, 64);
    return s;
}

void vk_memory_release(vk_ctx *c) {
    vk_destroy_buffer(c, &c->staging);
    vk_destroy_buffer(c, &c->status);
    vk_destroy_buffer(c, &c->dummy);
    vk_destroy_buffer(c, &c->scratch);
    for (int i = 0; i < c->n_retired; i++) vk_destroy_buffer(c, &c->retired[i]);
}

/* ---- scratch ------------------------------------------------------------------ */

drt_status vk_scratch(vk_ctx *c, size_t bytes, const drt_tensor **out) {
    *out = &c->scratch_t;
    if (c->scratch.buf && c->scratch.size >= bytes) return DRT_OK;
    size_t want = bytes;
    if (c->scratch.buf) {
        if (2 * (size_t)c->scratch.size > want) want = 2 * (size_t)c->scratch.size;
        if (c->recording) {
            if (c->n_retired == (int)(sizeof c->retired / sizeof c->retired[0]))
                return drt_set_error(DRT_ERR_BACKEND, "vulkan: scratch buffer regrown too often in one pass");
            c->retired[c->n_retired++] = c->scratch;
            memset(&c->scratch, 0, sizeof c->scratch);
        } else {
            vk_forget_sets(c, c->scratch.id);
            vk_destroy_buffer(c, &c->scratch);
        }
    }
    drt_status s = vk_create_buffer(c, want, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, &c->scratch, NULL);
    if (s != DRT_OK) return s;
    c->scratch_db = (drt_buffer){.handle = &c->scratch, .size = want};
    memset(&c->scratch_t, 0, sizeof c->scratch_t);
    c->scratch_t.type = DRT_F32;
    c->scratch_t.nd = 1;
    c->scratch_t.ne[0] = (int64_t)(want / sizeof(float));
    c->scratch_t.buf = &c->scratch_db;
    snprintf(c->scratch_t.name, sizeof c->scratch_t.name, "vulkan scratch");
    return DRT_OK;
}
