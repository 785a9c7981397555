/* Vulkan entry points loaded at run time (no link-time dependency on
 * libvulkan): dlopen("libvulkan.so.1"), vkGetInstanceProcAddr, then the
 * instance- and device-level functions into one table. A machine without a
 * loader or a driver gets a reason string, never a crash. */
#ifndef DRT_VK_LOADER_H
#define DRT_VK_LOADER_H

#include <stddef.h>

#ifndef VK_NO_PROTOTYPES
#define VK_NO_PROTOTYPES
#endif
#include <vulkan/vulkan.h>

/* X(name): every function the backend calls, by the level it is loaded at */
#define VK_GLOBAL_FNS(X)                                                                                               \
    X(vkCreateInstance)                                                                                                \
    X(vkEnumerateInstanceExtensionProperties)                                                                          \
    X(vkEnumerateInstanceLayerProperties)

#define VK_INSTANCE_FNS(X)                                                                                             \
    X(vkDestroyInstance)                                                                                               \
    X(vkEnumeratePhysicalDevices)                                                                                      \
    X(vkGetPhysicalDeviceProperties)                                                                                   \
    X(vkGetPhysicalDeviceProperties2)                                                                                  \
    X(vkGetPhysicalDeviceFeatures2)                                                                                    \
    X(vkGetPhysicalDeviceMemoryProperties)                                                                             \
    X(vkGetPhysicalDeviceQueueFamilyProperties)                                                                        \
    X(vkEnumerateDeviceExtensionProperties)                                                                            \
    X(vkCreateDevice)                                                                                                  \
    X(vkGetDeviceProcAddr)

/* from VK_EXT_debug_utils, loaded only when validation is on */
#define VK_DEBUG_FNS(X)                                                                                                \
    X(vkCreateDebugUtilsMessengerEXT)                                                                                  \
    X(vkDestroyDebugUtilsMessengerEXT)

#define VK_DEVICE_FNS(X)                                                                                               \
    X(vkDestroyDevice)                                                                                                 \
    X(vkGetDeviceQueue)                                                                                                \
    X(vkDeviceWaitIdle)                                                                                                \
    X(vkCreateBuffer)                                                                                                  \
    X(vkDestroyBuffer)                                                                                                 \
    X(vkGetBufferMemoryRequirements)                                                                                   \
    X(vkAllocateMemory)                                                                                                \
    X(vkFreeMemory)                                                                                                    \
    X(vkBindBufferMemory)                                                                                              \
    X(vkMapMemory)                                                                                                     \
    X(vkUnmapMemory)                                                                                                   \
    X(vkCreateShaderModule)                                                                                            \
    X(vkDestroyShaderModule)                                                                                           \
    X(vkCreateDescriptorSetLayout)                                                                                     \
    X(vkDestroyDescriptorSetLayout)                                                                                    \
    X(vkCreatePipelineLayout)                                                                                          \
    X(vkDestroyPipelineLayout)                                                                                         \
    X(vkCreatePipelineCache)                                                                                           \
    X(vkDestroyPipelineCache)                                                                                          \
    X(vkCreateComputePipelines)                                                                                        \
    X(vkDestroyPipeline)                                                                                               \
    X(vkCreateDescriptorPool)                                                                                          \
    X(vkDestroyDescriptorPool)                                                                                         \
    X(vkAllocateDescriptorSets)                                                                                        \
    X(vkUpdateDescriptorSets)                                                                                          \
    X(vkCreateCommandPool)                                                                                             \
    X(vkDestroyCommandPool)                                                                                            \
    X(vkAllocateCommandBuffers)                                                                                        \
    X(vkBeginCommandBuffer)                                                                                            \
    X(vkEndCommandBuffer)                                                                                              \
    X(vkResetCommandBuffer)                                                                                            \
    X(vkCmdBindPipeline)                                                                                               \
    X(vkCmdBindDescriptorSets)                                                                                         \
    X(vkCmdPushConstants)                                                                                              \
    X(vkCmdDispatch)                                                                                                   \
    X(vkCmdPipelineBarrier)                                                                                            \
    X(vkCmdCopyBuffer)                                                                                                 \
    X(vkCreateFence)                                                                                                   \
    X(vkDestroyFence)                                                                                                  \
    X(vkResetFences)                                                                                                   \
    X(vkWaitForFences)                                                                                                 \
    X(vkQueueSubmit)

#define VK_FN_MEMBER(name) PFN_##name name;

/* The one function table: global, instance and device level. */
typedef struct vk_fns {
    PFN_vkGetInstanceProcAddr vkGetInstanceProcAddr;
    PFN_vkEnumerateInstanceVersion vkEnumerateInstanceVersion; /* NULL on a 1.0 loader */
    VK_GLOBAL_FNS(VK_FN_MEMBER)
    VK_INSTANCE_FNS(VK_FN_MEMBER)
    VK_DEBUG_FNS(VK_FN_MEMBER)
    VK_DEVICE_FNS(VK_FN_MEMBER)
} vk_fns;

/* Opens the loader (once per process; DIFFRT_VK_LOADER overrides the file
 * name, e.g. to test a machine without one) and fills the global-level
 * functions. 0, or -1 with a reason in why. */
int vk_load_global(vk_fns *f, char *why, size_t n);
/* Instance-level functions (and VK_EXT_debug_utils ones when debug). */
int vk_load_instance(vk_fns *f, VkInstance inst, int debug, char *why, size_t n);
int vk_load_device(vk_fns *f, VkDevice dev, char *why, size_t n);

const char *vk_result_str(VkResult r);

#endif
