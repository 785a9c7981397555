/* Vulkan: descriptor sets, one per distinct set of bound ranges, cached.
 *
 * Every shader has the same layout (bindings 0..3 = src[0..3], 4 = output,
 * 5 = rows, 6 = status). A set is keyed by the byte ranges bound at 0..5 (buffer id,
 * offset, size), hashed into VK_DS_BUCKETS chains; sets come from pools of
 * 256 made as needed. A freed buffer's sets go back to a free list. */
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "vk_internal.h"

void vk_sets_init(vk_ctx *c) {
    c->dset_free = -1;
    for (int i = 0; i < VK_DS_BUCKETS; i++) c->buckets[i] = -1;
}

void vk_sets_release(vk_ctx *c) {
    for (int i = 0; i < c->n_pools; i++) c->f.vkDestroyDescriptorPool(c->dev, c->pools[i], NULL);
    free(c->pools);
    free(c->dsets);
    c->pools = NULL;
    c->dsets = NULL;
    c->n_pools = c->n_dsets = 0;
}

static uint32_t ds_hash(const vk_range key[VK_N_KEYED]) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < VK_N_KEYED; i++) {
        h = (h ^ (uint32_t)key[i].id) * 16777619u;
        h = (h ^ (uint32_t)key[i].off) * 16777619u;
        h = (h ^ (uint32_t)key[i].size) * 16777619u;
    }
    return h % VK_DS_BUCKETS;
}

static drt_status new_set(vk_ctx *c, VkDescriptorSet *out) {
    if (c->pool_left == 0) {
        enum { SETS = 256 };
        VkDescriptorPoolSize ps = {VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, SETS * VK_N_BIND};
        VkDescriptorPoolCreateInfo pi = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_POOL_CREATE_INFO,
                                         .maxSets = SETS,
                                         .poolSizeCount = 1,
                                         .pPoolSizes = &ps};
        VkDescriptorPool *np = realloc(c->pools, sizeof *np * (size_t)(c->n_pools + 1));
        if (!np) return drt_set_error(DRT_ERR_OOM, "out of memory");
        c->pools = np;
        VkResult r = c->f.vkCreateDescriptorPool(c->dev, &pi, NULL, &c->pools[c->n_pools]);
        if (r != VK_SUCCESS)
            return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkCreateDescriptorPool: %s", vk_result_str(r));
        c->n_pools++;
        c->pool_left = SETS;
    }
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = c->pools[c->n_pools - 1],
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &c->dsl};
    VkResult r = c->f.vkAllocateDescriptorSets(c->dev, &ai, out);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkAllocateDescriptorSets: %s", vk_result_str(r));
    c->pool_left--;
    return DRT_OK;
}

drt_status vk_get_set(vk_ctx *c, const vk_buf *const bufs[VK_N_KEYED], const vk_range key[VK_N_KEYED],
                      VkDescriptorSet *out) {
    uint32_t h = ds_hash(key);
    for (int e = c->buckets[h]; e >= 0; e = c->dsets[e].next)
        if (memcmp(c->dsets[e].key, key, sizeof c->dsets[e].key) == 0) {
            *out = c->dsets[e].set;
            return DRT_OK;
        }
    int e;
    if (c->dset_free >= 0) {
        e = c->dset_free;
        c->dset_free = c->dsets[e].next;
    } else {
        if (c->n_dsets == c->cap_dsets) {
            int nc = c->cap_dsets ? 2 * c->cap_dsets : 256;
            vk_dset *nd = realloc(c->dsets, sizeof *nd * (size_t)nc);
            if (!nd) return drt_set_error(DRT_ERR_OOM, "out of memory");
            c->dsets = nd;
            c->cap_dsets = nc;
        }
        drt_status s = new_set(c, &c->dsets[c->n_dsets].set);
        if (s != DRT_OK) return s;
        e = c->n_dsets++;
    }
    VkDescriptorBufferInfo bi[VK_N_BIND];
    VkWriteDescriptorSet w[VK_N_BIND];
    for (int i = 0; i < VK_N_BIND; i++) {
        if (i < VK_N_KEYED)
            bi[i] = (VkDescriptorBufferInfo){bufs[i]->buf, key[i].off, key[i].size};
        else
            bi[i] = (VkDescriptorBufferInfo){c->status.buf, 0, VK_WHOLE_SIZE};
        w[i] = (VkWriteDescriptorSet){.sType = VK_STRUCTURE_TYPE_WRITE_DESCRIPTOR_SET,
                                      .dstSet = c->dsets[e].set,
                                      .dstBinding = (uint32_t)i,
                                      .descriptorCount = 1,
                                      .descriptorType = VK_DESCRIPTOR_TYPE_STORAGE_BUFFER,
                                      .pBufferInfo = &bi[i]};
    }
    c->f.vkUpdateDescriptorSets(c->dev, VK_N_BIND, w, 0, NULL);
    memcpy(c->dsets[e].key, key, sizeof c->dsets[e].key);
    c->dsets[e].next = c->buckets[h];
    c->buckets[h] = e;
    vk_counters.descriptor_sets++;
    *out = c->dsets[e].set;
    return DRT_OK;
}

/* A freed buffer's sets go back to the free list (ids are never reused, so
 * this is about memory, not correctness). */
void vk_forget_sets(vk_ctx *c, uint32_t id) {
    for (int h = 0; h < VK_DS_BUCKETS; h++) {
        int *link = &c->buckets[h];
        while (*link >= 0) {
            vk_dset *d = &c->dsets[*link];
            bool hit = false;
            for (int i = 0; i < VK_N_KEYED; i++) hit |= d->key[i].id == id;
            if (!hit) {
                link = &d->next;
                continue;
            }
            int e = *link;
            *link = d->next;
            d->next = c->dset_free;
            c->dset_free = e;
        }
    }
}
