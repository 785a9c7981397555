/* What the Vulkan backend exposes beyond drt_backend_ops, for tests and
 * tools: validation-layer message counts and process-wide counters.
 *
 * Environment read by the backend:
 *   DIFFRT_VK_VALIDATION=1  enable VK_LAYER_KHRONOS_validation (with
 *                           synchronization validation) and a debug-utils
 *                           messenger that prints and counts every warning
 *                           and error it reports; instance creation fails
 *                           when the layer is not installed
 *   DIFFRT_VK_SUBGROUP=0    reductions through shared memory even where the
 *                           device has subgroup arithmetic
 *   DIFFRT_VK_FP16=0        f16 weights read as packed 32-bit words even where
 *                           the device has 16-bit storage
 *   DIFFRT_VK_INT64=0       the CPU-device GEMV reads packed f16/bf16 in 32-bit
 *                           words even where the device has shaderInt64
 *   DIFFRT_VK_SPLIT_BYTES=n decode GEMV weights over n bytes bound in blocks of
 *                           rows (as those past maxStorageBufferRange), for tests
 *   DIFFRT_VK_COPY=0        KV_WRITE and PERMUTE through their shaders even
 *                           where they are plain copies (vkCmdCopyBuffer)
 *   DIFFRT_VK_TUNE=gpu|cpu  workgroup sizes and tiles chosen as for a GPU / a
 *                           CPU device, whatever the device is (default: by
 *                           its type), e.g. to run the GPU shapes on lavapipe
 *   DIFFRT_VK_LOADER=path   the Vulkan loader to dlopen (default libvulkan.so.1) */
#ifndef DRT_VULKAN_H
#define DRT_VULKAN_H

#include <stdint.h>

typedef struct {
    int64_t validation_messages; /* warnings + errors from the validation layer */
    int validation_enabled;      /* an instance was created with the layer on */
    int64_t compute_submits;     /* forward-pass command buffers submitted */
    int64_t transfer_submits;    /* staging copies (upload/download) submitted */
    int64_t dispatches;
    int64_t copies;          /* vkCmdCopyBuffer commands in forward passes (KV_WRITE, PERMUTE) */
    int64_t barriers;        /* pipeline barriers between dispatches */
    int64_t pipelines;       /* compute pipelines created */
    int64_t descriptor_sets; /* descriptor sets written (new or recycled) */
    int64_t buffers;         /* device buffers created */
} drt_vk_counters;

/* Process-wide, cumulative over every Vulkan backend instance. */
__attribute__((visibility("default"))) void drt_vk_get_counters(drt_vk_counters *out);

#endif
