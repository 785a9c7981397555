/* Run-time loading of the Vulkan API (see vk_loader.h). */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_settings.h"
#include "vk_loader.h"

static pthread_once_t g_once = PTHREAD_ONCE_INIT;
static void *g_lib;
static PFN_vkGetInstanceProcAddr g_gipa;
static char g_why[256];

static const char *loader_name(void) {
    const char *e = NULL; /* process-wide: the loader is opened once (environment only) */
    if (drt_setting_str(NULL, "vulkan.loader", &e) == DRT_OK && e && *e) return e;
#if defined(__APPLE__)
    return "libvulkan.1.dylib";
#else
    return "libvulkan.so.1";
#endif
}

/* The loader stays open for the life of the process: drivers register
 * atexit handlers and thread-local state that must outlive dlclose. */
static void open_loader(void) {
    const char *name = loader_name();
    g_lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!g_lib) {
        const char *e = dlerror();
        snprintf(g_why, sizeof g_why, "cannot load the Vulkan loader %s (%s; Debian: apt-get install libvulkan1)", name,
                 e ? e : "not found");
        return;
    }
    /* dlsym returns void *; the cast to a function pointer goes through memcpy
     * because ISO C has no conversion between the two */
    void *p = dlsym(g_lib, "vkGetInstanceProcAddr");
    if (!p) {
        snprintf(g_why, sizeof g_why, "%s has no vkGetInstanceProcAddr", name);
        return;
    }
    memcpy(&g_gipa, &p, sizeof p);
}

int vk_load_global(vk_fns *f, char *why, size_t n) {
    pthread_once(&g_once, open_loader);
    memset(f, 0, sizeof *f);
    if (!g_gipa) {
        snprintf(why, n, "%s", g_why);
        return -1;
    }
    f->vkGetInstanceProcAddr = g_gipa;
    f->vkEnumerateInstanceVersion = (PFN_vkEnumerateInstanceVersion)g_gipa(NULL, "vkEnumerateInstanceVersion");
#define LOAD_GLOBAL(name)                                                                                              \
    if (!(f->name = (PFN_##name)g_gipa(NULL, #name))) {                                                                \
        snprintf(why, n, "the Vulkan loader has no %s", #name);                                                        \
        return -1;                                                                                                     \
    }
    VK_GLOBAL_FNS(LOAD_GLOBAL)
#undef LOAD_GLOBAL
    return 0;
}

int vk_load_instance(vk_fns *f, VkInstance inst, int debug, char *why, size_t n) {
#define LOAD_INSTANCE(name)                                                                                            \
    if (!(f->name = (PFN_##name)f->vkGetInstanceProcAddr(inst, #name))) {                                              \
        snprintf(why, n, "the Vulkan instance has no %s", #name);                                                      \
        return -1;                                                                                                     \
    }
    VK_INSTANCE_FNS(LOAD_INSTANCE)
    if (debug) {
        VK_DEBUG_FNS(LOAD_INSTANCE)
    }
#undef LOAD_INSTANCE
    return 0;
}

int vk_load_device(vk_fns *f, VkDevice dev, char *why, size_t n) {
#define LOAD_DEVICE(name)                                                                                              \
    if (!(f->name = (PFN_##name)f->vkGetDeviceProcAddr(dev, #name))) {                                                 \
        snprintf(why, n, "the Vulkan device has no %s", #name);                                                        \
        return -1;                                                                                                     \
    }
    VK_DEVICE_FNS(LOAD_DEVICE)
#undef LOAD_DEVICE
    return 0;
}

const char *vk_result_str(VkResult r) {
    switch (r) {
    case VK_SUCCESS: return "VK_SUCCESS";
    case VK_NOT_READY: return "VK_NOT_READY";
    case VK_TIMEOUT: return "VK_TIMEOUT";
    case VK_INCOMPLETE: return "VK_INCOMPLETE";
    case VK_ERROR_OUT_OF_HOST_MEMORY: return "VK_ERROR_OUT_OF_HOST_MEMORY";
    case VK_ERROR_OUT_OF_DEVICE_MEMORY: return "VK_ERROR_OUT_OF_DEVICE_MEMORY";
    case VK_ERROR_INITIALIZATION_FAILED: return "VK_ERROR_INITIALIZATION_FAILED";
    case VK_ERROR_DEVICE_LOST: return "VK_ERROR_DEVICE_LOST";
    case VK_ERROR_MEMORY_MAP_FAILED: return "VK_ERROR_MEMORY_MAP_FAILED";
    case VK_ERROR_LAYER_NOT_PRESENT: return "VK_ERROR_LAYER_NOT_PRESENT";
    case VK_ERROR_EXTENSION_NOT_PRESENT: return "VK_ERROR_EXTENSION_NOT_PRESENT";
    case VK_ERROR_FEATURE_NOT_PRESENT: return "VK_ERROR_FEATURE_NOT_PRESENT";
    case VK_ERROR_INCOMPATIBLE_DRIVER: return "VK_ERROR_INCOMPATIBLE_DRIVER";
    case VK_ERROR_TOO_MANY_OBJECTS: return "VK_ERROR_TOO_MANY_OBJECTS";
    case VK_ERROR_FORMAT_NOT_SUPPORTED: return "VK_ERROR_FORMAT_NOT_SUPPORTED";
    case VK_ERROR_FRAGMENTED_POOL: return "VK_ERROR_FRAGMENTED_POOL";
    case VK_ERROR_OUT_OF_POOL_MEMORY: return "VK_ERROR_OUT_OF_POOL_MEMORY";
    case VK_ERROR_INVALID_SHADER_NV: return "VK_ERROR_INVALID_SHADER_NV";
    default: return "VkResult error";
    }
}
