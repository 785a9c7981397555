/* The Vulkan backend: devices, memory, one command buffer per forward pass.
 *
 *   probe / device_name   a throwaway instance lists the physical devices once
 *                         per process (cached); a missing loader or driver is
 *                         a reason string, never a crash.
 *   init                  instance (+ validation layer and a counting
 *                         messenger when DIFFRT_VK_VALIDATION=1), device, one
 *                         compute queue, one descriptor set layout and one
 *                         pipeline layout shared by every shader, staging.
 *   buffers               one VkBuffer + VkDeviceMemory per drt_buffer, in
 *                         device-local memory; never host-visible to the
 *                         runtime: upload/download go through a staging
 *                         buffer (one transfer submission per chunk).
 *   compute               records the run of nodes into ONE command buffer:
 *                         per node a cached pipeline (per shader and
 *                         specialization constants), a cached descriptor set
 *                         (per set of bound ranges: each tensor's bytes,
 *                         from its offset rounded down to 256), push
 *                         constants (element offsets inside those ranges,
 *                         shapes, p0) and a dispatch, preceded by a buffer
 *                         memory barrier only when it depends on an earlier
 *                         dispatch (ranges overlap: tensors that share the
 *                         runtime's activation arena at disjoint offsets
 *                         do not order each other).
 *   synchronize           one vkQueueSubmit, one fence wait; then the status
 *                         buffer (errors a shader found, e.g. an EMBED id out
 *                         of range) is checked.
 * The op families live in matmul.c, attention.c, norm.c, elementwise.c. */
#ifdef DIFFRT_SANITIZE_BUILD
#define _GNU_SOURCE /* dl_iterate_phdr, RTLD_NODELETE */
#include <dlfcn.h>
#include <link.h>
#endif
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "drt_error.h"
#include "drt_module.h"
#include "drt_vulkan.h"
#include "vk_internal.h"

#define STAGING_BYTES ((size_t)8 << 20)

/* ---- counters and the validation messenger --------------------------------- */

static drt_vk_counters g_count;

void drt_vk_get_counters(drt_vk_counters *out) {
    *out = g_count;
}

static VKAPI_ATTR VkBool32 VKAPI_CALL debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                               VkDebugUtilsMessageTypeFlagsEXT type,
                                               const VkDebugUtilsMessengerCallbackDataEXT *d,
                                               void *user) {
    (void)type;
    (void)user;
    __atomic_add_fetch(&g_count.validation_messages, 1, __ATOMIC_RELAXED);
    fprintf(stderr, "diffrt vulkan validation %s: %s\n",
            sev & VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT ? "error" : "warning",
            d && d->pMessage ? d->pMessage : "(no message)");
    return VK_FALSE;
}


/* ---- instance ----------------------------------------------------------------- */

static bool has_ext(const VkExtensionProperties *e, uint32_t n, const char *name) {
    for (uint32_t i = 0; i < n; i++)
        if (strcmp(e[i].extensionName, name) == 0) return true;
    return false;
}

#ifdef DIFFRT_SANITIZE_BUILD
/* Sanitizer builds only. The loader dlcloses the driver (and layers) when the
 * last instance goes; LeakSanitizer then no longer scans that library's
 * globals and reports what they still point to (Mesa's lavapipe, Debian
 * 22.3.6-1+deb12u2: 128 bytes at exit) as leaked, from "<unknown module>".
 * Marking the loaded Vulkan drivers and layers RTLD_NODELETE keeps them
 * mapped, so leak reports name real leaks. */
static int pin_one(struct dl_phdr_info *info, size_t size, void *arg) {
    (void)size;
    (void)arg;
    const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
    base = base ? base + 1 : info->dlpi_name;
    if (base && (strncmp(base, "libvulkan_", 10) == 0 || strncmp(base, "libVkLayer_", 11) == 0))
        (void)dlopen(info->dlpi_name, RTLD_NOW | RTLD_NOLOAD | RTLD_NODELETE);
    return 0;
}

static void pin_driver_libraries(void) { dl_iterate_phdr(pin_one, NULL); }
#else
static void pin_driver_libraries(void) {}
#endif

/* Creates an instance (Vulkan 1.1) with the function table loaded. With
 * DIFFRT_VK_VALIDATION=1: the Khronos validation layer, synchronization
 * validation and a messenger (also covering instance creation itself). */
static int create_instance(vk_fns *f, VkInstance *inst, VkDebugUtilsMessengerEXT *msg, char *why,
                           size_t n) {
    *inst = VK_NULL_HANDLE;
    *msg = VK_NULL_HANDLE;
    if (vk_load_global(f, why, n) != 0) return -1;
    uint32_t ver = VK_API_VERSION_1_0;
    if (f->vkEnumerateInstanceVersion) f->vkEnumerateInstanceVersion(&ver);
    if (ver < VK_API_VERSION_1_1) {
        snprintf(why, n, "the Vulkan loader is version 1.0; diffrt needs 1.1");
        return -1;
    }
    int validate;
    if (drt_env_flag("DIFFRT_VK_VALIDATION", 0, &validate) != DRT_OK) {
        snprintf(why, n, "%s", drt_last_error());
        return -1;
    }
    const char *layers[1];
    uint32_t n_layers = 0;
    const char *exts[4];
    uint32_t n_exts = 0;
    VkInstanceCreateFlags flags = 0;

    uint32_t ne = 0;
    f->vkEnumerateInstanceExtensionProperties(NULL, &ne, NULL);
    VkExtensionProperties *ep = calloc(ne + 1, sizeof *ep);
    if (!ep) {
        snprintf(why, n, "out of memory");
        return -1;
    }
    f->vkEnumerateInstanceExtensionProperties(NULL, &ne, ep);
    /* lists devices that are not fully conformant (e.g. MoltenVK) too */
    if (has_ext(ep, ne, "VK_KHR_portability_enumeration")) {
        exts[n_exts++] = "VK_KHR_portability_enumeration";
        flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    free(ep);

    VkValidationFeatureEnableEXT enables[] = {
        VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT};
    VkValidationFeaturesEXT vfeat = {
        .sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT,
        .enabledValidationFeatureCount = 1,
        .pEnabledValidationFeatures = enables,
    };
    VkDebugUtilsMessengerCreateInfoEXT mci = {
        .sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
        .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                           VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
        .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                       VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
        .pfnUserCallback = debug_cb,
    };
    const void *next = NULL;
    if (validate) {
        const char *lname = "VK_LAYER_KHRONOS_validation";
        uint32_t nl = 0;
        f->vkEnumerateInstanceLayerProperties(&nl, NULL);
        VkLayerProperties *lp = calloc(nl + 1, sizeof *lp);
        if (!lp) {
            snprintf(why, n, "out of memory");
            return -1;
        }
        f->vkEnumerateInstanceLayerProperties(&nl, lp);
        bool found = false;
        for (uint32_t i = 0; i < nl; i++)
            if (strcmp(lp[i].layerName, lname) == 0) found = true;
        free(lp);
        if (!found) {
            snprintf(why, n,
                     "DIFFRT_VK_VALIDATION is set but %s is not installed (Debian: apt-get install "
                     "vulkan-validationlayers)",
                     lname);
            return -1;
        }
        layers[n_layers++] = lname;
        exts[n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
        uint32_t nle = 0;
        f->vkEnumerateInstanceExtensionProperties(lname, &nle, NULL);
        VkExtensionProperties *le = calloc(nle + 1, sizeof *le);
        if (!le) {
            snprintf(why, n, "out of memory");
            return -1;
        }
        f->vkEnumerateInstanceExtensionProperties(lname, &nle, le);
        if (has_ext(le, nle, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
            exts[n_exts++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
            mci.pNext = &vfeat;
        }
        free(le);
        next = &mci;
    }
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "diffrt",
        .pEngineName = "diffrt",
        .apiVersion = VK_API_VERSION_1_1,
    };
    VkInstanceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pNext = next,
        .flags = flags,
        .pApplicationInfo = &app,
        .enabledLayerCount = n_layers,
        .ppEnabledLayerNames = layers,
        .enabledExtensionCount = n_exts,
        .ppEnabledExtensionNames = exts,
    };
    VkResult r = f->vkCreateInstance(&ci, NULL, inst);
    if (r != VK_SUCCESS) {
        snprintf(why, n, "vkCreateInstance failed: %s%s", vk_result_str(r),
                 r == VK_ERROR_INCOMPATIBLE_DRIVER
                     ? " (no Vulkan driver installed? Debian: mesa-vulkan-drivers)"
                     : "");
        *inst = VK_NULL_HANDLE;
        return -1;
    }
    pin_driver_libraries();
    if (vk_load_instance(f, *inst, validate, why, n) != 0) {
        if (f->vkDestroyInstance) f->vkDestroyInstance(*inst, NULL);
        *inst = VK_NULL_HANDLE;
        return -1;
    }
    if (validate) {
        mci.pNext = NULL;
        r = f->vkCreateDebugUtilsMessengerEXT(*inst, &mci, NULL, msg);
        if (r != VK_SUCCESS) {
            snprintf(why, n, "vkCreateDebugUtilsMessengerEXT failed: %s", vk_result_str(r));
            f->vkDestroyInstance(*inst, NULL);
            *inst = VK_NULL_HANDLE;
            return -1;
        }
        g_count.validation_enabled = 1;
    }
    return 0;
}

static void destroy_instance(vk_fns *f, VkInstance inst, VkDebugUtilsMessengerEXT msg) {
    if (!inst) return;
    if (msg) f->vkDestroyDebugUtilsMessengerEXT(inst, msg, NULL);
    f->vkDestroyInstance(inst, NULL);
}

/* ---- devices ---------------------------------------------------------------- */

static const char *type_name(VkPhysicalDeviceType t) {
    switch (t) {
    case VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU: return "discrete GPU";
    case VK_PHYSICAL_DEVICE_TYPE_INTEGRATED_GPU: return "integrated GPU";
    case VK_PHYSICAL_DEVICE_TYPE_VIRTUAL_GPU: return "virtual GPU";
    case VK_PHYSICAL_DEVICE_TYPE_CPU: return "CPU";
    default: return "other";
    }
}

typedef struct {
    VkPhysicalDeviceProperties p;
    VkPhysicalDeviceSubgroupProperties sg;
    VkPhysicalDeviceDriverProperties drv; /* valid when have_drv */
    VkPhysicalDevice16BitStorageFeatures s16;
    VkPhysicalDeviceShaderFloat16Int8Features f16i8; /* valid when have_drv (1.2) */
    VkPhysicalDeviceMemoryProperties mem;
    bool have_drv;
} dev_info;

/* Queries what diffrt needs to know about pd. Structures newer than the
 * device's API version are never chained (that would be invalid usage). */
static void query_device(vk_fns *f, VkPhysicalDevice pd, dev_info *d) {
    memset(d, 0, sizeof *d);
    f->vkGetPhysicalDeviceProperties(pd, &d->p);
    f->vkGetPhysicalDeviceMemoryProperties(pd, &d->mem);
    if (d->p.apiVersion < VK_API_VERSION_1_1) return;
    d->have_drv = d->p.apiVersion >= VK_API_VERSION_1_2;
    d->sg.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SUBGROUP_PROPERTIES;
    d->drv.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_DRIVER_PROPERTIES;
    d->sg.pNext = d->have_drv ? &d->drv : NULL;
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2,
                                      .pNext = &d->sg};
    f->vkGetPhysicalDeviceProperties2(pd, &p2);
    d->s16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    d->f16i8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
    d->s16.pNext = d->have_drv ? &d->f16i8 : NULL;
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2,
                                    .pNext = &d->s16};
    f->vkGetPhysicalDeviceFeatures2(pd, &f2);
}

/* whether compute shaders have the subgroup operations in need */
static bool subgroup_ops(const dev_info *d, VkSubgroupFeatureFlags need) {
    need |= VK_SUBGROUP_FEATURE_BASIC_BIT;
    return (d->sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) &&
           (d->sg.supportedOperations & need) == need;
}

/* One line, what `diffrt info` prints per device (the CLI allows 255 chars). */
static void describe(const dev_info *d, char *buf, size_t n) {
    char drv[96], heaps[96] = "";
    uint32_t v = d->p.driverVersion;
    if (d->have_drv)
        snprintf(drv, sizeof drv, "%.40s, %.50s", d->drv.driverName, d->drv.driverInfo);
    else if (d->p.vendorID == 0x10de)
        snprintf(drv, sizeof drv, "version %u.%u", v >> 22, (v >> 14) & 0xff);
    else
        snprintf(drv, sizeof drv, "version %u.%u.%u", VK_API_VERSION_MAJOR(v),
                 VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
    size_t o = 0;
    for (uint32_t i = 0; i < d->mem.memoryHeapCount && o < sizeof heaps; i++) {
        const VkMemoryHeap *h = &d->mem.memoryHeaps[i];
        o += (size_t)snprintf(heaps + o, sizeof heaps - o, "%s%.1f GiB%s", i ? " + " : "",
                              (double)h->size / (1024.0 * 1024.0 * 1024.0),
                              h->flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT ? " local" : " host");
    }
    uint32_t a = d->p.apiVersion;
    int len = snprintf(buf, n,
                       "%s; %s; vendor 0x%04x; driver %s; Vulkan %u.%u.%u; subgroup %u%s; fp16 %s "
                       "(16-bit storage %s); "
                       "int8 %s; heaps %s",
                       d->p.deviceName, type_name(d->p.deviceType), d->p.vendorID, drv,
                       VK_API_VERSION_MAJOR(a), VK_API_VERSION_MINOR(a), VK_API_VERSION_PATCH(a),
                       d->sg.subgroupSize, subgroup_ops(d, VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) ? "" : " (no arithmetic)",
                       d->have_drv && d->f16i8.shaderFloat16 ? "yes" : "no",
                       d->s16.storageBuffer16BitAccess ? "yes" : "no",
                       d->have_drv && d->f16i8.shaderInt8 ? "yes" : "no", heaps);
    if (len >= (int)n && n > 4) memcpy(buf + n - 4, "...", 4); /* say so when cut */
}

/* ---- probe: once per process ----------------------------------------------- */

#define MAX_DEVICES 16
static pthread_once_t g_probe_once = PTHREAD_ONCE_INIT;
static int g_ndev;
static char g_probe_why[256];
static char g_dev_desc[MAX_DEVICES][256];
static drt_device_props g_dev_props[MAX_DEVICES];

/* the PCI vendor ids of the drivers one meets, else the id in hex */
static const char *vendor_name(uint32_t id, char *buf, size_t n) {
    static const struct {
        uint32_t id;
        const char *name;
    } T[] = {{0x1002, "AMD"},      {0x1010, "Imagination"}, {0x10de, "NVIDIA"},   {0x13b5, "ARM"},
             {0x5143, "Qualcomm"}, {0x8086, "Intel"},       {0x106b, "Apple"},    {0x10005, "Mesa"},
             {0x1af4, "virtio"},   {0x14e4, "Broadcom"},    {0x10002, "VeriSilicon"}};
    for (size_t i = 0; i < sizeof T / sizeof T[0]; i++)
        if (T[i].id == id) return T[i].name;
    snprintf(buf, n, "0x%04x", id);
    return buf;
}

static void props_of(const dev_info *d, drt_device_props *o) {
    memset(o, 0, sizeof *o);
    char vb[16];
    snprintf(o->name, sizeof o->name, "%s", d->p.deviceName);
    snprintf(o->vendor, sizeof o->vendor, "%s", vendor_name(d->p.vendorID, vb, sizeof vb));
    uint32_t v = d->p.driverVersion;
    if (d->have_drv)
        snprintf(o->driver, sizeof o->driver, "%.40s %.80s", d->drv.driverName, d->drv.driverInfo);
    else if (d->p.vendorID == 0x10de)
        snprintf(o->driver, sizeof o->driver, "version %u.%u", v >> 22, (v >> 14) & 0xff);
    else
        snprintf(o->driver, sizeof o->driver, "version %u.%u.%u", VK_API_VERSION_MAJOR(v),
                 VK_API_VERSION_MINOR(v), VK_API_VERSION_PATCH(v));
    uint32_t a = d->p.apiVersion;
    snprintf(o->api_version, sizeof o->api_version, "Vulkan %u.%u.%u", VK_API_VERSION_MAJOR(a),
             VK_API_VERSION_MINOR(a), VK_API_VERSION_PATCH(a));
    snprintf(o->type, sizeof o->type, "%s",
             d->p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU ? "CPU"
             : d->p.deviceType == VK_PHYSICAL_DEVICE_TYPE_OTHER ? "other"
                                                                : "GPU");
    /* device-local heaps (all heaps when none is device-local: a CPU device) */
    uint64_t local = 0, all = 0;
    for (uint32_t i = 0; i < d->mem.memoryHeapCount; i++) {
        all += d->mem.memoryHeaps[i].size;
        if (d->mem.memoryHeaps[i].flags & VK_MEMORY_HEAP_DEVICE_LOCAL_BIT) local += d->mem.memoryHeaps[i].size;
    }
    o->memory_bytes = local ? local : all;
    o->subgroup_size = (int)d->sg.subgroupSize;
    o->fp16 = d->have_drv ? (d->f16i8.shaderFloat16 ? 1 : 0) : -1;
    o->bf16 = 0; /* the shaders have no bf16 arithmetic path (VK_KHR_shader_bfloat16 is not used) */
}

static void probe_once(void) {
    vk_fns f;
    VkInstance inst;
    VkDebugUtilsMessengerEXT msg;
    if (create_instance(&f, &inst, &msg, g_probe_why, sizeof g_probe_why) != 0) return;
    uint32_t n = 0;
    VkResult r = f.vkEnumeratePhysicalDevices(inst, &n, NULL);
    VkPhysicalDevice pds[MAX_DEVICES];
    if (n > MAX_DEVICES) n = MAX_DEVICES;
    if (r == VK_SUCCESS || r == VK_INCOMPLETE) r = f.vkEnumeratePhysicalDevices(inst, &n, pds);
    if (r != VK_SUCCESS && r != VK_INCOMPLETE) {
        snprintf(g_probe_why, sizeof g_probe_why, "vkEnumeratePhysicalDevices failed: %s",
                 vk_result_str(r));
    } else if (n == 0) {
        snprintf(g_probe_why, sizeof g_probe_why,
                 "no Vulkan devices (no driver for this hardware?)");
    } else {
        for (uint32_t i = 0; i < n; i++) {
            dev_info d;
            query_device(&f, pds[i], &d);
            describe(&d, g_dev_desc[i], sizeof g_dev_desc[i]);
            props_of(&d, &g_dev_props[i]);
        }
        g_ndev = (int)n;
    }
    destroy_instance(&f, inst, msg);
}

static drt_status vk_probe(int *n, char *why, size_t wn) {
    pthread_once(&g_probe_once, probe_once);
    *n = g_ndev;
    if (g_ndev == 0) {
        snprintf(why, wn, "%s", g_probe_why[0] ? g_probe_why : "no Vulkan devices");
        return DRT_ERR_UNAVAILABLE;
    }
    return DRT_OK;
}

static drt_status vk_device_name(int dev, char *buf, size_t n) {
    pthread_once(&g_probe_once, probe_once);
    if (dev < 0 || dev >= g_ndev)
        return drt_set_error(DRT_ERR_INVALID_ARG, "vulkan: device %d out of range (%d devices)",
                             dev, g_ndev);
    snprintf(buf, n, "%s", g_dev_desc[dev]);
    return DRT_OK;
}

static drt_status vk_device_props(int dev, drt_device_props *out) {
    pthread_once(&g_probe_once, probe_once);
    if (dev < 0 || dev >= g_ndev)
        return drt_set_error(DRT_ERR_INVALID_ARG, "vulkan: device %d out of range (%d devices)",
                             dev, g_ndev);
    *out = g_dev_props[dev];
    return DRT_OK;
}

/* ---- memory ------------------------------------------------------------------- */

static int find_memory(const vk_ctx *c, uint32_t bits, VkMemoryPropertyFlags want,
                       VkMemoryPropertyFlags prefer) {
    for (int pass = 0; pass < 2; pass++) {
        VkMemoryPropertyFlags need = pass == 0 ? want | prefer : want;
        for (uint32_t i = 0; i < c->mem.memoryTypeCount; i++)
            if ((bits >> i & 1) && (c->mem.memoryTypes[i].propertyFlags & need) == need)
                return (int)i;
    }
    return -1;
}

static drt_status create_buffer(vk_ctx *c, size_t size, VkMemoryPropertyFlags want,
                                VkMemoryPropertyFlags prefer, vk_buf *out, void **map) {
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
        return drt_set_error(DRT_ERR_OOM, "vulkan: vkCreateBuffer(%zu bytes) failed: %s", size,
                             vk_result_str(r));
    VkMemoryRequirements req;
    c->f.vkGetBufferMemoryRequirements(c->dev, out->buf, &req);
    int mt = find_memory(c, req.memoryTypeBits, want, prefer);
    if (mt < 0) {
        c->f.vkDestroyBuffer(c->dev, out->buf, NULL);
        out->buf = VK_NULL_HANDLE;
        return drt_set_error(DRT_ERR_BACKEND,
                             "vulkan: no memory type with properties 0x%x for a buffer", want);
    }
    VkMemoryAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_MEMORY_ALLOCATE_INFO,
                               .allocationSize = req.size,
                               .memoryTypeIndex = (uint32_t)mt};
    r = c->f.vkAllocateMemory(c->dev, &ai, NULL, &out->mem);
    if (r == VK_SUCCESS) r = c->f.vkBindBufferMemory(c->dev, out->buf, out->mem, 0);
    if (r == VK_SUCCESS && map) r = c->f.vkMapMemory(c->dev, out->mem, 0, VK_WHOLE_SIZE, 0, map);
    if (r != VK_SUCCESS) {
        if (out->mem) c->f.vkFreeMemory(c->dev, out->mem, NULL);
        c->f.vkDestroyBuffer(c->dev, out->buf, NULL);
        memset(out, 0, sizeof *out);
        return drt_set_error(r == VK_ERROR_OUT_OF_DEVICE_MEMORY || r == VK_ERROR_OUT_OF_HOST_MEMORY
                                 ? DRT_ERR_OOM
                                 : DRT_ERR_BACKEND,
                             "vulkan: cannot allocate %zu bytes of device memory: %s", size,
                             vk_result_str(r));
    }
    out->size = sz;
    out->id = ++c->next_id;
    g_count.buffers++;
    return DRT_OK;
}

static void destroy_buffer(vk_ctx *c, vk_buf *b) {
    if (b->buf) c->f.vkDestroyBuffer(c->dev, b->buf, NULL);
    if (b->mem) c->f.vkFreeMemory(c->dev, b->mem, NULL);
    memset(b, 0, sizeof *b);
}

/* ---- submission -------------------------------------------------------------- */

static void forget_sets(vk_ctx *c, uint32_t id);

static drt_status submit_wait(vk_ctx *c, VkCommandBuffer cb) {
    VkSubmitInfo si = {
        .sType = VK_STRUCTURE_TYPE_SUBMIT_INFO, .commandBufferCount = 1, .pCommandBuffers = &cb};
    VkResult r = c->f.vkQueueSubmit(c->queue, 1, &si, c->fence);
    if (r == VK_SUCCESS) r = c->f.vkWaitForFences(c->dev, 1, &c->fence, VK_TRUE, UINT64_MAX);
    if (r == VK_SUCCESS) r = c->f.vkResetFences(c->dev, 1, &c->fence);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: submission failed: %s", vk_result_str(r));
    return DRT_OK;
}

static void global_barrier(vk_ctx *c, VkCommandBuffer cb, VkPipelineStageFlags src,
                           VkAccessFlags sa, VkPipelineStageFlags dst, VkAccessFlags da) {
    VkMemoryBarrier mb = {
        .sType = VK_STRUCTURE_TYPE_MEMORY_BARRIER, .srcAccessMask = sa, .dstAccessMask = da};
    c->f.vkCmdPipelineBarrier(cb, src, dst, 0, 1, &mb, 0, NULL, 0, NULL);
}

static drt_status begin(vk_ctx *c, VkCommandBuffer cb) {
    VkCommandBufferBeginInfo bi = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_BEGIN_INFO,
                                   .flags = VK_COMMAND_BUFFER_USAGE_ONE_TIME_SUBMIT_BIT};
    VkResult r = c->f.vkBeginCommandBuffer(cb, &bi);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkBeginCommandBuffer failed: %s",
                             vk_result_str(r));
    return DRT_OK;
}

/* Submits the recorded forward pass (if any) and waits for it. */
static drt_status flush(vk_ctx *c) {
    if (!c->recording) return DRT_OK;
    c->recording = false;
    c->n_pend_w = c->n_pend_r = 0;
    /* shader and copy writes -> the host (status buffer) and later transfers */
    global_barrier(c, c->cmd, VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                   VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                   VK_PIPELINE_STAGE_HOST_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                   VK_ACCESS_HOST_READ_BIT | VK_ACCESS_TRANSFER_READ_BIT |
                       VK_ACCESS_TRANSFER_WRITE_BIT);
    VkResult r = c->f.vkEndCommandBuffer(c->cmd);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkEndCommandBuffer failed: %s",
                             vk_result_str(r));
    drt_status s = submit_wait(c, c->cmd);
    g_count.compute_submits++;
    for (int i = 0; i < c->n_retired; i++) { /* no recorded work uses them now */
        forget_sets(c, c->retired[i].id);
        destroy_buffer(c, &c->retired[i]);
    }
    c->n_retired = 0;
    if (s != DRT_OK) return s;
    if (c->status_map[0] == 1)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "EMBED: token id %d at position %u is outside [0, %u)",
                             (int)c->status_map[1], c->status_map[2], c->status_map[3]);
    return DRT_OK;
}

/* Copies n bytes between host memory and b at byte offset off, through the
 * staging buffer, one submission per STAGING_BYTES chunk. */
static drt_status transfer(vk_ctx *c, const vk_buf *b, size_t off, void *host, size_t n, bool up) {
    drt_status s = flush(c);
    while (s == DRT_OK && n > 0) {
        size_t chunk = n < STAGING_BYTES ? n : STAGING_BYTES;
        if (up) memcpy(c->staging_map, host, chunk);
        s = begin(c, c->xfer);
        if (s != DRT_OK) break;
        /* earlier shader reads/writes and copies of b happen before this copy */
        global_barrier(c, c->xfer,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
                       VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
        VkBufferCopy reg = {.srcOffset = up ? 0 : off, .dstOffset = up ? off : 0, .size = chunk};
        c->f.vkCmdCopyBuffer(c->xfer, up ? c->staging.buf : b->buf, up ? b->buf : c->staging.buf, 1,
                             &reg);
        /* the copy happens before later shaders and before the host reads staging */
        global_barrier(c, c->xfer, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_HOST_BIT,
                       VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                           VK_ACCESS_HOST_READ_BIT);
        VkResult r = c->f.vkEndCommandBuffer(c->xfer);
        if (r != VK_SUCCESS)
            return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkEndCommandBuffer: %s",
                                 vk_result_str(r));
        s = submit_wait(c, c->xfer);
        g_count.transfer_submits++;
        if (s == DRT_OK && !up) memcpy(host, c->staging_map, chunk);
        host = (char *)host + chunk;
        off += chunk;
        n -= chunk;
    }
    return s;
}

/* ---- pipelines ------------------------------------------------------------------ */

drt_status vk_pipeline(vk_ctx *c, vk_shader sh, const uint32_t *spec, int nspec, VkPipeline *out) {
    for (int i = 0; i < c->n_pipes; i++) {
        vk_pipe *p = &c->pipes[i];
        if (p->shader == (int)sh && p->nspec == nspec &&
            memcmp(p->spec, spec, sizeof(uint32_t) * (size_t)nspec) == 0) {
            *out = p->pipe;
            return DRT_OK;
        }
    }
    if (!c->modules[sh]) {
        static const char *names[] = {
#define VK_SHADER_NAME(id, name) name,
            VK_SHADER_LIST(VK_SHADER_NAME)
#undef VK_SHADER_NAME
        };
        const struct drt_vk_spirv *m = NULL;
        for (int i = 0; i < drt_vk_spirv_count; i++)
            if (strcmp(drt_vk_spirv_table[i].name, names[sh]) == 0) m = &drt_vk_spirv_table[i];
        if (!m)
            return drt_set_error(DRT_ERR_BACKEND, "vulkan: shader %s is not embedded in this build",
                                 names[sh]);
        VkShaderModuleCreateInfo mi = {.sType = VK_STRUCTURE_TYPE_SHADER_MODULE_CREATE_INFO,
                                       .codeSize = m->size,
                                       .pCode = m->code};
        VkResult r = c->f.vkCreateShaderModule(c->dev, &mi, NULL, &c->modules[sh]);
        if (r != VK_SUCCESS)
            return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkCreateShaderModule(%s) failed: %s",
                                 names[sh], vk_result_str(r));
    }
    if (c->n_pipes == c->cap_pipes) {
        int nc = c->cap_pipes ? 2 * c->cap_pipes : 32;
        vk_pipe *np = realloc(c->pipes, sizeof *np * (size_t)nc);
        if (!np) return drt_set_error(DRT_ERR_OOM, "out of memory");
        c->pipes = np;
        c->cap_pipes = nc;
    }
    VkSpecializationMapEntry me[VK_MAX_SPEC];
    for (int i = 0; i < nspec; i++)
        me[i] = (VkSpecializationMapEntry){(uint32_t)i, (uint32_t)(4 * i), 4};
    VkSpecializationInfo si = {.mapEntryCount = (uint32_t)nspec,
                               .pMapEntries = me,
                               .dataSize = sizeof(uint32_t) * (size_t)nspec,
                               .pData = spec};
    VkComputePipelineCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_COMPUTE_PIPELINE_CREATE_INFO,
        .stage = {.sType = VK_STRUCTURE_TYPE_PIPELINE_SHADER_STAGE_CREATE_INFO,
                  .stage = VK_SHADER_STAGE_COMPUTE_BIT,
                  .module = c->modules[sh],
                  .pName = "main",
                  .pSpecializationInfo = &si},
        .layout = c->layout,
    };
    VkPipeline p;
    VkResult r = c->f.vkCreateComputePipelines(c->dev, c->pcache, 1, &ci, NULL, &p);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND,
                             "vulkan: vkCreateComputePipelines(shader %d) failed: %s", (int)sh,
                             vk_result_str(r));
    vk_pipe *e = &c->pipes[c->n_pipes++];
    e->shader = (int)sh;
    e->nspec = nspec;
    memcpy(e->spec, spec, sizeof(uint32_t) * (size_t)nspec);
    e->pipe = p;
    g_count.pipelines++;
    *out = p;
    return DRT_OK;
}

/* ---- descriptor sets: one per distinct set of buffers, cached ---------------------- */

static uint32_t ds_hash(const vk_range key[5]) {
    uint32_t h = 2166136261u;
    for (int i = 0; i < 5; i++) {
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
            return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkCreateDescriptorPool: %s",
                                 vk_result_str(r));
        c->n_pools++;
        c->pool_left = SETS;
    }
    VkDescriptorSetAllocateInfo ai = {.sType = VK_STRUCTURE_TYPE_DESCRIPTOR_SET_ALLOCATE_INFO,
                                      .descriptorPool = c->pools[c->n_pools - 1],
                                      .descriptorSetCount = 1,
                                      .pSetLayouts = &c->dsl};
    VkResult r = c->f.vkAllocateDescriptorSets(c->dev, &ai, out);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: vkAllocateDescriptorSets: %s",
                             vk_result_str(r));
    c->pool_left--;
    return DRT_OK;
}

static drt_status get_set(vk_ctx *c, const vk_buf *const bufs[5], const vk_range key[5],
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
        if (i < 5)
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
    g_count.descriptor_sets++;
    *out = c->dsets[e].set;
    return DRT_OK;
}

/* A freed buffer's sets go back to the free list (ids are never reused, so
 * this is about memory, not correctness). */
static void forget_sets(vk_ctx *c, uint32_t id) {
    for (int h = 0; h < VK_DS_BUCKETS; h++) {
        int *link = &c->buckets[h];
        while (*link >= 0) {
            vk_dset *d = &c->dsets[*link];
            bool hit = false;
            for (int i = 0; i < 5; i++)
                hit |= d->key[i].id == id;
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

/* ---- recording ------------------------------------------------------------------ */

drt_status vk_scratch(vk_ctx *c, size_t bytes, const drt_tensor **out) {
    *out = &c->scratch_t;
    if (c->scratch.buf && c->scratch.size >= bytes) return DRT_OK;
    size_t want = bytes;
    if (c->scratch.buf) {
        if (2 * (size_t)c->scratch.size > want) want = 2 * (size_t)c->scratch.size;
        if (c->recording) {
            if (c->n_retired == (int)(sizeof c->retired / sizeof c->retired[0]))
                return drt_set_error(DRT_ERR_BACKEND,
                                     "vulkan: scratch buffer regrown too often in one pass");
            c->retired[c->n_retired++] = c->scratch;
            memset(&c->scratch, 0, sizeof c->scratch);
        } else {
            forget_sets(c, c->scratch.id);
            destroy_buffer(c, &c->scratch);
        }
    }
    drt_status s =
        create_buffer(c, want, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, &c->scratch, NULL);
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

uint32_t vk_eoff(const drt_tensor *t) {
    /* block formats (q8_0, q4_0): the offset in bytes */
    return (uint32_t)(t->offs % VK_BIND_ALIGN / drt_dtype_align(t->type));
}

vk_shader vk_sg_variant(const vk_ctx *c, vk_shader sh) {
    return c->use_sg ? sh : (vk_shader)(sh + 1);
}

uint32_t vk_wg(const vk_ctx *c, uint32_t want_gpu, uint32_t want_cpu) {
    const VkPhysicalDeviceLimits *l = &c->props.limits;
    uint32_t w = c->tune_cpu ? want_cpu : want_gpu;
    uint32_t lim = l->maxComputeWorkGroupInvocations < l->maxComputeWorkGroupSize[0]
                       ? l->maxComputeWorkGroupInvocations
                       : l->maxComputeWorkGroupSize[0];
    while (w > lim && w > 1)
        w /= 2;
    return w;
}

uint32_t vk_cpu_lanes(const vk_ctx *c) {
    return c->subgroup_size >= 4 && c->subgroup_size <= 64 ? c->subgroup_size : 8;
}

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
        if (list[i].r.id == r->id && list[i].r.off < r->off + r->size &&
            r->off < list[i].r.off + list[i].r.size)
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
        bm[i] = (VkBufferMemoryBarrier){
            .sType = VK_STRUCTURE_TYPE_BUFFER_MEMORY_BARRIER,
            .srcAccessMask = VK_ACCESS_SHADER_WRITE_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
            .dstAccessMask = VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                             VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT,
            .srcQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
            .dstQueueFamilyIndex = VK_QUEUE_FAMILY_IGNORED,
            .buffer = c->pend_w[i].buf,
            .offset = c->pend_w[i].r.off,
            .size = c->pend_w[i].r.size};
    const VkPipelineStageFlags st =
        VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT;
    c->f.vkCmdPipelineBarrier(c->cmd, st, st, 0, 0, NULL, (uint32_t)c->n_pend_w, bm, 0, NULL);
    c->n_pend_w = c->n_pend_r = 0;
    g_count.barriers++;
}

/* Hazards of a command reading rd[0..nr) and writing wr[0..nw) against the
 * commands recorded since the last barrier (read-after-write,
 * write-after-write, write-after-read): a barrier first when there is one;
 * then the ranges join the pending lists. */
static void track(vk_ctx *c, const vk_range *rd, const VkBuffer *rbuf, int nr, const vk_range *wr,
                  const VkBuffer *wbuf, int nw) {
    bool dep = c->n_pend_w + nw > VK_MAX_PENDING || c->n_pend_r + nr > VK_MAX_PENDING;
    for (int i = 0; i < nw && !dep; i++)
        dep = pending(c->pend_w, c->n_pend_w, &wr[i]) || pending(c->pend_r, c->n_pend_r, &wr[i]);
    for (int i = 0; i < nr && !dep; i++)
        dep = pending(c->pend_w, c->n_pend_w, &rd[i]);
    if (dep) barrier(c);
    for (int i = 0; i < nr; i++)
        add_use(c->pend_r, &c->n_pend_r, &rd[i], rbuf[i]);
    for (int i = 0; i < nw; i++)
        add_use(c->pend_w, &c->n_pend_w, &wr[i], wbuf[i]);
}

drt_status vk_copy(vk_ctx *c, const drt_tensor *src, const drt_tensor *dst, const VkBufferCopy *reg,
                   uint32_t n) {
    if (n == 0) return DRT_OK;
    const vk_buf *sb = buf_of(c, src), *db = buf_of(c, dst);
    const vk_range rr = range_of(c, src), wr = range_of(c, dst);
    track(c, &rr, &sb->buf, 1, &wr, &db->buf, 1);
    c->f.vkCmdCopyBuffer(c->cmd, sb->buf, db->buf, n, reg);
    g_count.copies++;
    return DRT_OK;
}

drt_status vk_dispatch(vk_ctx *c, vk_shader sh, const uint32_t *spec, int nspec, const vk_binds *b,
                       const void *pc, uint32_t pcn, uint32_t gx, uint32_t gy, uint32_t gz) {
    const VkPhysicalDeviceLimits *lim = &c->props.limits;
    if (gx > lim->maxComputeWorkGroupCount[0] || gy > lim->maxComputeWorkGroupCount[1] ||
        gz > lim->maxComputeWorkGroupCount[2])
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "vulkan: grid %ux%ux%u exceeds the device's %ux%ux%u", gx, gy, gz,
                             lim->maxComputeWorkGroupCount[0], lim->maxComputeWorkGroupCount[1],
                             lim->maxComputeWorkGroupCount[2]);
    VkPipeline pipe = VK_NULL_HANDLE;
    drt_status s = vk_pipeline(c, sh, spec, nspec, &pipe);
    if (s != DRT_OK) return s;
    const vk_buf *bufs[5] = {buf_of(c, b->src[0]), buf_of(c, b->src[1]), buf_of(c, b->src[2]),
                             buf_of(c, b->src[3]), buf_of(c, b->dst)};
    const vk_range key[5] = {range_of(c, b->src[0]), range_of(c, b->src[1]), range_of(c, b->src[2]),
                             range_of(c, b->src[3]), range_of(c, b->dst)};
    VkDescriptorSet set;
    s = get_set(c, bufs, key, &set);
    if (s != DRT_OK) return s;

    /* hazards against the commands recorded since the last barrier */
    const vk_range st = {c->status.id, 0, c->status.size};
    const vk_range wr[2] = {key[4], st}; /* written: the output, maybe the status */
    const VkBuffer wbuf[2] = {bufs[4]->buf, c->status.buf};
    vk_range rd[4];
    VkBuffer rbuf[4];
    int nr = 0;
    for (int i = 0; i < 4; i++)
        if (b->src[i]) {
            rd[nr] = key[i];
            rbuf[nr++] = bufs[i]->buf;
        }
    track(c, rd, rbuf, nr, wr, wbuf, b->status ? 2 : 1);

    c->f.vkCmdBindPipeline(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, pipe);
    c->f.vkCmdBindDescriptorSets(c->cmd, VK_PIPELINE_BIND_POINT_COMPUTE, c->layout, 0, 1, &set, 0,
                                 NULL);
    c->f.vkCmdPushConstants(c->cmd, c->layout, VK_SHADER_STAGE_COMPUTE_BIT, 0, pcn, pc);
    c->f.vkCmdDispatch(c->cmd, gx, gy, gz);
    g_count.dispatches++;
    return DRT_OK;
}

/* ---- the backend table ----------------------------------------------------------- */

static void vk_shutdown(drt_backend *be) {
    vk_ctx *c = be->ctx;
    if (!c) return;
    if (c->dev) {
        c->f.vkDeviceWaitIdle(c->dev);
        for (int i = 0; i < c->n_pipes; i++)
            c->f.vkDestroyPipeline(c->dev, c->pipes[i].pipe, NULL);
        for (int i = 0; i < VK_N_SHADERS; i++)
            if (c->modules[i]) c->f.vkDestroyShaderModule(c->dev, c->modules[i], NULL);
        for (int i = 0; i < c->n_pools; i++)
            c->f.vkDestroyDescriptorPool(c->dev, c->pools[i], NULL);
        if (c->pcache) c->f.vkDestroyPipelineCache(c->dev, c->pcache, NULL);
        if (c->layout) c->f.vkDestroyPipelineLayout(c->dev, c->layout, NULL);
        if (c->dsl) c->f.vkDestroyDescriptorSetLayout(c->dev, c->dsl, NULL);
        if (c->fence) c->f.vkDestroyFence(c->dev, c->fence, NULL);
        if (c->cmd_pool) c->f.vkDestroyCommandPool(c->dev, c->cmd_pool, NULL);
        destroy_buffer(c, &c->staging);
        destroy_buffer(c, &c->status);
        destroy_buffer(c, &c->dummy);
        destroy_buffer(c, &c->scratch);
        for (int i = 0; i < c->n_retired; i++)
            destroy_buffer(c, &c->retired[i]);
        c->f.vkDestroyDevice(c->dev, NULL);
    }
    destroy_instance(&c->f, c->inst, c->messenger);
    free(c->pipes);
    free(c->pools);
    free(c->dsets);
    free(c);
    be->ctx = NULL;
}

static drt_status init_device(vk_ctx *c, int device) {
    char why[256];
    if (create_instance(&c->f, &c->inst, &c->messenger, why, sizeof why) != 0)
        return drt_set_error(DRT_ERR_UNAVAILABLE, "vulkan: %s", why);
    uint32_t n = 0;
    VkPhysicalDevice pds[MAX_DEVICES];
    c->f.vkEnumeratePhysicalDevices(c->inst, &n, NULL);
    if (n > MAX_DEVICES) n = MAX_DEVICES;
    VkResult r = c->f.vkEnumeratePhysicalDevices(c->inst, &n, pds);
    if ((r != VK_SUCCESS && r != VK_INCOMPLETE) || n == 0)
        return drt_set_error(DRT_ERR_UNAVAILABLE, "vulkan: no devices");
    if (device >= (int)n)
        return drt_set_error(DRT_ERR_INVALID_ARG, "vulkan: device %d out of range (%u devices)",
                             device, n);
    dev_info d;
    if (device < 0) { /* default: the first discrete GPU, else the first device */
        device = 0;
        for (uint32_t i = 0; i < n; i++) {
            query_device(&c->f, pds[i], &d);
            if (d.p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU &&
                d.p.apiVersion >= VK_API_VERSION_1_1) {
                device = (int)i;
                break;
            }
        }
    }
    c->pd = pds[device];
    c->device_index = device;
    query_device(&c->f, c->pd, &d);
    if (d.p.apiVersion < VK_API_VERSION_1_1)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "vulkan: %s supports Vulkan %u.%u; diffrt needs 1.1", d.p.deviceName,
                             VK_API_VERSION_MAJOR(d.p.apiVersion),
                             VK_API_VERSION_MINOR(d.p.apiVersion));
    if (d.p.limits.minStorageBufferOffsetAlignment > VK_BIND_ALIGN)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "vulkan: %s wants storage buffer offsets aligned to %llu bytes; "
                             "diffrt binds at multiples of %d",
                             d.p.deviceName,
                             (unsigned long long)d.p.limits.minStorageBufferOffsetAlignment,
                             VK_BIND_ALIGN);
    c->props = d.p;
    c->mem = d.mem;
    c->subgroup_size = d.sg.subgroupSize;
    /* the settings (README): 0/1 flags, each feature on by default where the
     * device has it; a value they do not take is an error, not a default */
    int want_sg, want_f16, want_copy, want_i64;
    drt_status es;
    if ((es = drt_env_flag("DIFFRT_VK_SUBGROUP", 1, &want_sg)) != DRT_OK ||
        (es = drt_env_flag("DIFFRT_VK_FP16", 1, &want_f16)) != DRT_OK ||
        (es = drt_env_flag("DIFFRT_VK_COPY", 1, &want_copy)) != DRT_OK ||
        (es = drt_env_flag("DIFFRT_VK_INT64", 1, &want_i64)) != DRT_OK)
        return es;
    c->use_sg = subgroup_ops(&d, VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) && want_sg;
    c->has_shuffle = subgroup_ops(&d, VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    c->use_f16 = d.s16.storageBuffer16BitAccess && want_f16;
    c->use_copy = want_copy;
    c->split_bytes = d.p.limits.maxStorageBufferRange;
    const char *sb = getenv("DIFFRT_VK_SPLIT_BYTES");
    if (sb && *sb) {
        char *end;
        errno = 0;
        unsigned long long v = strtoull(sb, &end, 10);
        if (errno || *end || sb[0] == '-' || v < 1024)
            return drt_set_error(DRT_ERR_INVALID_ARG,
                                 "DIFFRT_VK_SPLIT_BYTES: expected a byte count of at least 1024, "
                                 "got \"%.40s\"",
                                 sb);
        if (v < c->split_bytes) c->split_bytes = v;
    }
    const char *tune = getenv("DIFFRT_VK_TUNE");
    if (tune && *tune && strcmp(tune, "gpu") != 0 && strcmp(tune, "cpu") != 0)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "DIFFRT_VK_TUNE: expected \"gpu\" or \"cpu\", got \"%.40s\"", tune);
    c->tune_cpu = tune && *tune ? strcmp(tune, "cpu") == 0
                                : d.p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;

    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
    c->n_cpus = ncpu > 0 && ncpu < 4096 ? (uint32_t)ncpu : 1;

    uint32_t nq = 0;
    c->f.vkGetPhysicalDeviceQueueFamilyProperties(c->pd, &nq, NULL);
    VkQueueFamilyProperties qp[32];
    if (nq > 32) nq = 32;
    c->f.vkGetPhysicalDeviceQueueFamilyProperties(c->pd, &nq, qp);
    c->qfam = UINT32_MAX;
    for (uint32_t i = 0; i < nq && c->qfam == UINT32_MAX; i++)
        if (qp[i].queueFlags & VK_QUEUE_COMPUTE_BIT) c->qfam = i;
    if (c->qfam == UINT32_MAX)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: %s has no compute queue",
                             d.p.deviceName);
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = c->qfam,
                                  .queueCount = 1,
                                  .pQueuePriorities = &prio};
    VkPhysicalDevice16BitStorageFeatures s16 = {
        .sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
        .storageBuffer16BitAccess = c->use_f16};
    VkPhysicalDeviceFeatures2 feat = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    c->f.vkGetPhysicalDeviceFeatures2(c->pd, &feat);
    c->use_i64 = feat.features.shaderInt64 && c->use_sg && want_i64;
    VkPhysicalDeviceFeatures want = {.shaderInt64 = c->use_i64};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .pNext = &s16,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi,
                             .pEnabledFeatures = &want};
    r = c->f.vkCreateDevice(c->pd, &di, NULL, &c->dev);
    if (r != VK_SUCCESS) {
        c->dev = VK_NULL_HANDLE;
        return drt_set_error(DRT_ERR_UNAVAILABLE, "vulkan: vkCreateDevice(%s) failed: %s",
                             d.p.deviceName, vk_result_str(r));
    }
    if (vk_load_device(&c->f, c->dev, why, sizeof why) != 0)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: %s", why);
    c->f.vkGetDeviceQueue(c->dev, c->qfam, 0, &c->queue);

    VkDescriptorSetLayoutBinding lb[VK_N_BIND];
    for (int i = 0; i < VK_N_BIND; i++)
        lb[i] = (VkDescriptorSetLayoutBinding){(uint32_t)i, VK_DESCRIPTOR_TYPE_STORAGE_BUFFER, 1,
                                               VK_SHADER_STAGE_COMPUTE_BIT, NULL};
    VkDescriptorSetLayoutCreateInfo li = {.sType =
                                              VK_STRUCTURE_TYPE_DESCRIPTOR_SET_LAYOUT_CREATE_INFO,
                                          .bindingCount = VK_N_BIND,
                                          .pBindings = lb};
    r = c->f.vkCreateDescriptorSetLayout(c->dev, &li, NULL, &c->dsl);
    VkPushConstantRange pr = {VK_SHADER_STAGE_COMPUTE_BIT, 0, VK_PUSH_BYTES};
    VkPipelineLayoutCreateInfo pli = {.sType = VK_STRUCTURE_TYPE_PIPELINE_LAYOUT_CREATE_INFO,
                                      .setLayoutCount = 1,
                                      .pSetLayouts = &c->dsl,
                                      .pushConstantRangeCount = 1,
                                      .pPushConstantRanges = &pr};
    if (r == VK_SUCCESS) r = c->f.vkCreatePipelineLayout(c->dev, &pli, NULL, &c->layout);
    VkPipelineCacheCreateInfo pci = {.sType = VK_STRUCTURE_TYPE_PIPELINE_CACHE_CREATE_INFO};
    if (r == VK_SUCCESS) r = c->f.vkCreatePipelineCache(c->dev, &pci, NULL, &c->pcache);
    VkCommandPoolCreateInfo cpi = {.sType = VK_STRUCTURE_TYPE_COMMAND_POOL_CREATE_INFO,
                                   .flags = VK_COMMAND_POOL_CREATE_RESET_COMMAND_BUFFER_BIT,
                                   .queueFamilyIndex = c->qfam};
    if (r == VK_SUCCESS) r = c->f.vkCreateCommandPool(c->dev, &cpi, NULL, &c->cmd_pool);
    VkCommandBufferAllocateInfo cai = {.sType = VK_STRUCTURE_TYPE_COMMAND_BUFFER_ALLOCATE_INFO,
                                       .commandPool = c->cmd_pool,
                                       .level = VK_COMMAND_BUFFER_LEVEL_PRIMARY,
                                       .commandBufferCount = 1};
    if (r == VK_SUCCESS) r = c->f.vkAllocateCommandBuffers(c->dev, &cai, &c->cmd);
    if (r == VK_SUCCESS) r = c->f.vkAllocateCommandBuffers(c->dev, &cai, &c->xfer);
    VkFenceCreateInfo fi = {.sType = VK_STRUCTURE_TYPE_FENCE_CREATE_INFO};
    if (r == VK_SUCCESS) r = c->f.vkCreateFence(c->dev, &fi, NULL, &c->fence);
    if (r != VK_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "vulkan: device setup failed: %s", vk_result_str(r));

    const VkMemoryPropertyFlags hv =
        VK_MEMORY_PROPERTY_HOST_VISIBLE_BIT | VK_MEMORY_PROPERTY_HOST_COHERENT_BIT;
    drt_status s = create_buffer(c, STAGING_BYTES, hv, VK_MEMORY_PROPERTY_HOST_CACHED_BIT,
                                 &c->staging, &c->staging_map);
    void *sm = NULL;
    if (s == DRT_OK) s = create_buffer(c, 64, hv, 0, &c->status, &sm);
    c->status_map = sm;
    if (s == DRT_OK)
        s = create_buffer(c, 256, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, &c->dummy, NULL);
    if (s == DRT_OK) memset(c->status_map, 0, 64);
    return s;
}

/* The pipelines whose specialization does not depend on a node's shape,
 * created with the device so that no forward pass creates them: the
 * row-wise ops (norm, dual softmax), the elementwise ops in both widths,
 * the KV copy shader (when KV_WRITE is not a vkCmdCopyBuffer), ROPE and
 * the split-key merge for one and two maps. Shape classes (attention
 * tiles, MATMUL, EMBED) are created when a plan asks whether the backend
 * supports its nodes (vk_supports -> vk_attention_prepare,
 * vk_matmul_prepare, vk_embed_prepare). A failure here is not fatal:
 * vk_dispatch creates what is missing. */
static void prewarm(vk_ctx *c) {
    VkPipeline p;
    /* elementwise.c and norm.c: one subgroup on CPU devices; attention.c
     * (dual softmax, split-key merge): 64 lanes there */
    const uint32_t wg = vk_wg(c, 256, vk_cpu_lanes(c)), aw = vk_wg(c, 256, 64), sg = c->use_sg;
    for (uint32_t op = 0; op < 3; op++)
        for (uint32_t v4 = 0; v4 < 2; v4++)
            (void)vk_pipeline(c, VK_SH_ELEMENTWISE, (const uint32_t[]){wg, sg, op, v4}, 4, &p);
    for (uint32_t v4 = 0; v4 < 2 && !c->use_copy; v4++) /* else KV_WRITE is a copy */
        (void)vk_pipeline(c, VK_SH_KV_WRITE, (const uint32_t[]){wg, sg, v4}, 3, &p);
    (void)vk_pipeline(c, VK_SH_ROPE, (const uint32_t[]){wg, sg}, 2, &p);
    (void)vk_pipeline(c, vk_sg_variant(c, VK_SH_NORM), (const uint32_t[]){wg, sg}, 2, &p);
    (void)vk_pipeline(c, vk_sg_variant(c, VK_SH_DUAL_SOFTMAX), (const uint32_t[]){aw, sg}, 2, &p);
    for (uint32_t maps = 1; maps <= 2; maps++)
        (void)vk_pipeline(c, VK_SH_ATTENTION_COMBINE, (const uint32_t[]){aw, sg, maps}, 3, &p);
}

static drt_status vk_init(drt_backend *be, int device) {
    vk_ctx *c = calloc(1, sizeof *c);
    if (!c) return drt_set_error(DRT_ERR_OOM, "out of memory");
    c->dset_free = -1;
    for (int i = 0; i < VK_DS_BUCKETS; i++)
        c->buckets[i] = -1;
    be->ctx = c;
    drt_status s = init_device(c, device);
    if (s != DRT_OK) {
        char msg[512];
        snprintf(msg, sizeof msg, "%s", drt_last_error());
        vk_shutdown(be);
        return drt_set_error(s, "%s", msg);
    }
    be->device = c->device_index; /* the device actually chosen */
    prewarm(c);
    return DRT_OK;
}

static drt_status vk_buf_alloc(drt_backend *be, size_t size, drt_buffer *out) {
    vk_ctx *c = be->ctx;
    vk_buf *b = calloc(1, sizeof *b);
    if (!b) return drt_set_error(DRT_ERR_OOM, "out of memory");
    drt_status s = create_buffer(c, size, VK_MEMORY_PROPERTY_DEVICE_LOCAL_BIT, 0, b, NULL);
    if (s != DRT_OK) {
        free(b);
        return s;
    }
    out->handle = b;
    out->host = NULL;
    out->size = size;
    return DRT_OK;
}

static void vk_buf_free(drt_backend *be, drt_buffer *db) {
    vk_ctx *c = be->ctx;
    vk_buf *b = db->handle;
    if (!b) return;
    flush(c); /* a recorded dispatch may still use it */
    forget_sets(c, b->id);
    destroy_buffer(c, b);
    free(b);
    db->handle = NULL;
}

static drt_status vk_upload(drt_backend *be, drt_buffer *b, size_t off, const void *src, size_t n) {
    return transfer(be->ctx, b->handle, off, (void *)src, n, true);
}

static drt_status vk_download(drt_backend *be, const drt_buffer *b, size_t off, void *dst,
                              size_t n) {
    return transfer(be->ctx, b->handle, off, dst, n, false);
}

static bool vk_supports(drt_backend *be, const drt_tensor *t) {
    const vk_ctx *c = be->ctx;
    const VkDeviceSize max_range = c->props.limits.maxStorageBufferRange;
    const drt_tensor *all[1 + DRT_MAX_SRC] = {t, t->src[0], t->src[1], t->src[2], t->src[3]};
    for (int i = 0; i < 1 + DRT_MAX_SRC; i++) {
        const drt_tensor *x = all[i];
        if (!x) continue;
        /* each tensor's bytes are bound from its offset rounded down to
         * VK_BIND_ALIGN; element offsets and indices are 32-bit */
        if (drt_nelem(x) >= (int64_t)UINT32_MAX - VK_BIND_ALIGN) return false;
        if (drt_nbytes(x) + VK_BIND_ALIGN + 16 > max_range &&
            !(x == t->src[1] && vk_matmul_splits(c, t)))
            return false;
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
    case DRT_OP_KV_WRITE:
    case DRT_OP_PERMUTE: return true;
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
    if (!c->recording) {
        drt_status s = begin(c, c->cmd);
        if (s != DRT_OK) return s;
        c->recording = true;
        c->n_pend_w = c->n_pend_r = 0;
        c->status_map[0] = 0;
        /* uploads (transfer writes) before this pass are visible to its
         * shaders and copies */
        global_barrier(c, c->cmd, VK_PIPELINE_STAGE_TRANSFER_BIT, VK_ACCESS_TRANSFER_WRITE_BIT,
                       VK_PIPELINE_STAGE_COMPUTE_SHADER_BIT | VK_PIPELINE_STAGE_TRANSFER_BIT,
                       VK_ACCESS_SHADER_READ_BIT | VK_ACCESS_SHADER_WRITE_BIT |
                           VK_ACCESS_TRANSFER_READ_BIT | VK_ACCESS_TRANSFER_WRITE_BIT);
    }
    for (int i = 0; i < n; i++) {
        drt_status s = record_node(c, nodes[i], ex);
        if (s != DRT_OK) {
            /* drop what was recorded: the pass is abandoned */
            c->f.vkEndCommandBuffer(c->cmd);
            c->f.vkResetCommandBuffer(c->cmd, 0);
            c->recording = false;
            return s;
        }
    }
    return DRT_OK;
}

static drt_status vk_synchronize(drt_backend *be) {
    return flush(be->ctx);
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
