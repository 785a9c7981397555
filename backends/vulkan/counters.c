/* Vulkan: the counters every part of the backend adds to (buffers,
 * pipelines, submissions, validation messages) and the call that reads
 * them (drt_vulkan.h, for tests). */
#include "vk_internal.h"

drt_vk_counters vk_counters;

void drt_vk_get_counters(drt_vk_counters *out) {
    *out = vk_counters;
}
