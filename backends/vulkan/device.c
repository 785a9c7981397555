/* Vulkan: the instance, the physical devices and the logical device.
 *
 *   instance   Vulkan 1.1 with the function table loaded; with
 *              DIFFRT_VK_VALIDATION=1 the Khronos validation layer and a
 *              messenger that prints and counts (drt_vk_counters).
 *   probe      a throwaway instance lists the physical devices once per
 *              process (cached): `diffrt info` lines and drt_device_props;
 *              a missing loader or driver is a reason string, never a crash.
 *   device     the chosen physical device (default: the first discrete GPU),
 *              the settings read from the environment (drt_vulkan.h), one
 *              logical device with one compute queue. */
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

#include "drt_error.h"
#include "drt_util.h"
#include "vk_internal.h"

/* ---- the validation messenger ------------------------------------------------ */

static VKAPI_ATTR VkBool32 VKAPI_CALL debug_cb(VkDebugUtilsMessageSeverityFlagBitsEXT sev,
                                               VkDebugUtilsMessageTypeFlagsEXT type,
                                               const VkDebugUtilsMessengerCallbackDataEXT *d, void *user) {
    (void)type;
    (void)user;
    __atomic_add_fetch(&vk_counters.validation_messages, 1, __ATOMIC_RELAXED);
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

static void pin_driver_libraries(void) {
    dl_iterate_phdr(pin_one, NULL);
}
#else
static void pin_driver_libraries(void) {}
#endif

/* What instance creation enables: layers, extensions, flags, and the
 * messenger chained into VkInstanceCreateInfo (next) so that instance
 * creation itself is validated. */
typedef struct {
    const char *layers[1];
    uint32_t n_layers;
    const char *exts[4];
    uint32_t n_exts;
    VkInstanceCreateFlags flags;
    VkValidationFeatureEnableEXT enables[1];
    VkValidationFeaturesEXT vfeat;
    VkDebugUtilsMessengerCreateInfoEXT mci;
    const void *next;
} inst_setup;

/* VK_KHR_portability_enumeration where the loader has it: lists devices
 * that are not fully conformant (e.g. MoltenVK) too */
static int add_portability(vk_fns *f, inst_setup *st, char *why, size_t n) {
    uint32_t ne = 0;
    f->vkEnumerateInstanceExtensionProperties(NULL, &ne, NULL);
    VkExtensionProperties *ep = calloc(ne + 1, sizeof *ep);
    if (!ep) {
        snprintf(why, n, "out of memory");
        return -1;
    }
    f->vkEnumerateInstanceExtensionProperties(NULL, &ne, ep);
    if (has_ext(ep, ne, "VK_KHR_portability_enumeration")) {
        st->exts[st->n_exts++] = "VK_KHR_portability_enumeration";
        st->flags |= VK_INSTANCE_CREATE_ENUMERATE_PORTABILITY_BIT_KHR;
    }
    free(ep);
    return 0;
}

/* DIFFRT_VK_VALIDATION=1: the Khronos validation layer (an error when it is
 * not installed), debug utils, synchronization validation where the layer
 * offers validation features, and the messenger chained in */
static int add_validation(vk_fns *f, inst_setup *st, char *why, size_t n) {
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
    st->layers[st->n_layers++] = lname;
    st->exts[st->n_exts++] = VK_EXT_DEBUG_UTILS_EXTENSION_NAME;
    uint32_t nle = 0;
    f->vkEnumerateInstanceExtensionProperties(lname, &nle, NULL);
    VkExtensionProperties *le = calloc(nle + 1, sizeof *le);
    if (!le) {
        snprintf(why, n, "out of memory");
        return -1;
    }
    f->vkEnumerateInstanceExtensionProperties(lname, &nle, le);
    if (has_ext(le, nle, VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME)) {
        st->exts[st->n_exts++] = VK_EXT_VALIDATION_FEATURES_EXTENSION_NAME;
        st->mci.pNext = &st->vfeat;
    }
    free(le);
    st->next = &st->mci;
    return 0;
}

/* Creates an instance (Vulkan 1.1) with the function table loaded. With
 * DIFFRT_VK_VALIDATION=1: the Khronos validation layer, synchronization
 * validation and a messenger (also covering instance creation itself). */
static int create_instance(vk_fns *f, VkInstance *inst, VkDebugUtilsMessengerEXT *msg, char *why, size_t n) {
    *inst = VK_NULL_HANDLE;
    *msg = VK_NULL_HANDLE;
    if (vk_load_global(f, why, n) != 0) return -1;
    uint32_t ver = VK_API_VERSION_1_0;
    if (f->vkEnumerateInstanceVersion) f->vkEnumerateInstanceVersion(&ver);
    if (ver < VK_API_VERSION_1_1) {
        snprintf(why, n, "the Vulkan loader is version 1.0; diffrt needs 1.1");
        return -1;
    }
    int validate; /* process-wide: the instance is shared (environment only) */
    if (drt_setting_bool(NULL, "vulkan.validation", &validate) != DRT_OK) {
        snprintf(why, n, "%s", drt_last_error());
        return -1;
    }
    inst_setup st = {
        .enables = {VK_VALIDATION_FEATURE_ENABLE_SYNCHRONIZATION_VALIDATION_EXT},
        .vfeat = {.sType = VK_STRUCTURE_TYPE_VALIDATION_FEATURES_EXT, .enabledValidationFeatureCount = 1},
        .mci = {.sType = VK_STRUCTURE_TYPE_DEBUG_UTILS_MESSENGER_CREATE_INFO_EXT,
                .messageSeverity = VK_DEBUG_UTILS_MESSAGE_SEVERITY_WARNING_BIT_EXT |
                                   VK_DEBUG_UTILS_MESSAGE_SEVERITY_ERROR_BIT_EXT,
                .messageType = VK_DEBUG_UTILS_MESSAGE_TYPE_GENERAL_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_VALIDATION_BIT_EXT |
                               VK_DEBUG_UTILS_MESSAGE_TYPE_PERFORMANCE_BIT_EXT,
                .pfnUserCallback = debug_cb},
    };
    st.vfeat.pEnabledValidationFeatures = st.enables;
    if (add_portability(f, &st, why, n) != 0) return -1;
    if (validate && add_validation(f, &st, why, n) != 0) return -1;
    VkApplicationInfo app = {
        .sType = VK_STRUCTURE_TYPE_APPLICATION_INFO,
        .pApplicationName = "diffrt",
        .pEngineName = "diffrt",
        .apiVersion = VK_API_VERSION_1_1,
    };
    VkInstanceCreateInfo ci = {
        .sType = VK_STRUCTURE_TYPE_INSTANCE_CREATE_INFO,
        .pNext = st.next,
        .flags = st.flags,
        .pApplicationInfo = &app,
        .enabledLayerCount = st.n_layers,
        .ppEnabledLayerNames = st.layers,
        .enabledExtensionCount = st.n_exts,
        .ppEnabledExtensionNames = st.exts,
    };
    VkResult r = f->vkCreateInstance(&ci, NULL, inst);
    if (r != VK_SUCCESS) {
        snprintf(why, n, "vkCreateInstance failed: %s%s", vk_result_str(r),
                 r == VK_ERROR_INCOMPATIBLE_DRIVER ? " (no Vulkan driver installed? Debian: mesa-vulkan-drivers)" : "");
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
        st.mci.pNext = NULL;
        r = f->vkCreateDebugUtilsMessengerEXT(*inst, &st.mci, NULL, msg);
        if (r != VK_SUCCESS) {
            snprintf(why, n, "vkCreateDebugUtilsMessengerEXT failed: %s", vk_result_str(r));
            f->vkDestroyInstance(*inst, NULL);
            *inst = VK_NULL_HANDLE;
            return -1;
        }
        vk_counters.validation_enabled = 1;
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
    VkPhysicalDeviceFloatControlsProperties fc; /* valid when have_fc */
    bool have_drv;
    bool have_fc; /* VK_KHR_shader_float_controls */
} dev_info;

/* whether the device offers the device extension name */
static bool device_has_ext(vk_fns *f, VkPhysicalDevice pd, const char *name) {
    uint32_t n = 0;
    if (f->vkEnumerateDeviceExtensionProperties(pd, NULL, &n, NULL) != VK_SUCCESS || n == 0) return false;
    VkExtensionProperties *e = calloc(n, sizeof *e);
    if (!e) return false;
    bool has = f->vkEnumerateDeviceExtensionProperties(pd, NULL, &n, e) == VK_SUCCESS && has_ext(e, n, name);
    free(e);
    return has;
}

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
    d->have_fc = device_has_ext(f, pd, VK_KHR_SHADER_FLOAT_CONTROLS_EXTENSION_NAME);
    d->fc.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FLOAT_CONTROLS_PROPERTIES;
    d->drv.pNext = d->have_fc ? &d->fc : NULL;
    d->sg.pNext = d->have_drv ? (void *)&d->drv : d->have_fc ? (void *)&d->fc : NULL;
    VkPhysicalDeviceProperties2 p2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_PROPERTIES_2, .pNext = &d->sg};
    f->vkGetPhysicalDeviceProperties2(pd, &p2);
    d->s16.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES;
    d->f16i8.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_SHADER_FLOAT16_INT8_FEATURES;
    d->s16.pNext = d->have_drv ? &d->f16i8 : NULL;
    VkPhysicalDeviceFeatures2 f2 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2, .pNext = &d->s16};
    f->vkGetPhysicalDeviceFeatures2(pd, &f2);
}

/* whether compute shaders have the subgroup operations in need */
static bool subgroup_ops(const dev_info *d, VkSubgroupFeatureFlags need) {
    need |= VK_SUBGROUP_FEATURE_BASIC_BIT;
    return (d->sg.supportedStages & VK_SHADER_STAGE_COMPUTE_BIT) && (d->sg.supportedOperations & need) == need;
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
        snprintf(drv, sizeof drv, "version %u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
                 VK_API_VERSION_PATCH(v));
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
                       "int8 %s; f32 denormals %s; heaps %s",
                       d->p.deviceName, type_name(d->p.deviceType), d->p.vendorID, drv, VK_API_VERSION_MAJOR(a),
                       VK_API_VERSION_MINOR(a), VK_API_VERSION_PATCH(a), d->sg.subgroupSize,
                       subgroup_ops(d, VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) ? "" : " (no arithmetic)",
                       d->have_drv && d->f16i8.shaderFloat16 ? "yes" : "no",
                       d->s16.storageBuffer16BitAccess ? "yes" : "no",
                       d->have_drv && d->f16i8.shaderInt8 ? "yes" : "no",
                       d->have_fc && d->fc.shaderDenormPreserveFloat32 ? "kept" : "may flush", heaps);
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
    } T[] = {{0x1002, "AMD"},      {0x1010, "Imagination"}, {0x10de, "NVIDIA"},      {0x13b5, "ARM"},
             {0x5143, "Qualcomm"}, {0x8086, "Intel"},       {0x106b, "Apple"},       {0x10005, "Mesa"},
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
        snprintf(o->driver, sizeof o->driver, "version %u.%u.%u", VK_API_VERSION_MAJOR(v), VK_API_VERSION_MINOR(v),
                 VK_API_VERSION_PATCH(v));
    uint32_t a = d->p.apiVersion;
    snprintf(o->api_version, sizeof o->api_version, "Vulkan %u.%u.%u", VK_API_VERSION_MAJOR(a), VK_API_VERSION_MINOR(a),
             VK_API_VERSION_PATCH(a));
    snprintf(o->type, sizeof o->type, "%s",
             d->p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU     ? "CPU"
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
        snprintf(g_probe_why, sizeof g_probe_why, "vkEnumeratePhysicalDevices failed: %s", vk_result_str(r));
    } else if (n == 0) {
        snprintf(g_probe_why, sizeof g_probe_why, "no Vulkan devices (no driver for this hardware?)");
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

drt_status vk_probe(int *n, char *why, size_t wn) {
    pthread_once(&g_probe_once, probe_once);
    *n = g_ndev;
    if (g_ndev == 0) {
        snprintf(why, wn, "%s", g_probe_why[0] ? g_probe_why : "no Vulkan devices");
        return DRT_ERR_UNAVAILABLE;
    }
    return DRT_OK;
}

drt_status vk_device_name(int dev, char *buf, size_t n) {
    pthread_once(&g_probe_once, probe_once);
    if (dev < 0 || dev >= g_ndev)
        return drt_set_error(DRT_ERR_INVALID_ARG, "vulkan: device %d out of range (%d devices)", dev, g_ndev);
    snprintf(buf, n, "%s", g_dev_desc[dev]);
    return DRT_OK;
}

drt_status vk_device_props(int dev, drt_device_props *out) {
    pthread_once(&g_probe_once, probe_once);
    if (dev < 0 || dev >= g_ndev)
        return drt_set_error(DRT_ERR_INVALID_ARG, "vulkan: device %d out of range (%d devices)", dev, g_ndev);
    *out = g_dev_props[dev];
    return DRT_OK;
}

/* ---- the device ------------------------------------------------------------- */

/* The physical device to run on (device < 0: the first discrete GPU, else
 * the first device), checked against what diffrt needs; *d its properties. */
static drt_status select_device(vk_ctx *c, int device, dev_info *d) {
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
        return drt_set_error(DRT_ERR_INVALID_ARG, "vulkan: device %d out of range (%u devices)", device, n);
    if (device < 0) { /* default: the first discrete GPU, else the first device */
        device = 0;
        for (uint32_t i = 0; i < n; i++) {
            query_device(&c->f, pds[i], d);
            if (d->p.deviceType == VK_PHYSICAL_DEVICE_TYPE_DISCRETE_GPU && d->p.apiVersion >= VK_API_VERSION_1_1) {
                device = (int)i;
                break;
            }
        }
    }
    c->pd = pds[device];
    c->device_index = device;
    query_device(&c->f, c->pd, d);
    if (d->p.apiVersion < VK_API_VERSION_1_1)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: %s supports Vulkan %u.%u; diffrt needs 1.1", d->p.deviceName,
                             VK_API_VERSION_MAJOR(d->p.apiVersion), VK_API_VERSION_MINOR(d->p.apiVersion));
    if (d->p.limits.minStorageBufferOffsetAlignment > VK_BIND_ALIGN)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "vulkan: %s wants storage buffer offsets aligned to %llu bytes; "
                             "diffrt binds at multiples of %d",
                             d->p.deviceName, (unsigned long long)d->p.limits.minStorageBufferOffsetAlignment,
                             VK_BIND_ALIGN);
    if (d->p.limits.maxPerStageDescriptorStorageBuffers < VK_N_BIND)
        return drt_set_error(DRT_ERR_UNSUPPORTED,
                             "vulkan: %s allows %u storage buffers per shader stage; diffrt's "
                             "shaders bind %d",
                             d->p.deviceName, d->p.limits.maxPerStageDescriptorStorageBuffers, VK_N_BIND);
    c->props = d->p;
    c->mem = d->mem;
    c->subgroup_size = d->sg.subgroupSize;
    return DRT_OK;
}

/* The settings (docs/environment.md, drt_vulkan.h): 0/1 flags, each feature on by
 * default where the device has it; a value they do not take is an error,
 * not a default. c->use_i64 is the wish here: create_device adds whether
 * the device has shaderInt64. */
static drt_status read_settings(vk_ctx *c, const dev_info *d) {
    int want_sg, want_f16, want_copy, want_i64;
    long long tm, tn, wg, sb;
    const char *tune, *denorm;
    const drt_settings *set = c->settings;
    drt_status es;
    if ((es = drt_setting_bool(set, "vulkan.subgroup", &want_sg)) != DRT_OK ||
        (es = drt_setting_bool(set, "vulkan.fp16", &want_f16)) != DRT_OK ||
        (es = drt_setting_bool(set, "vulkan.copy", &want_copy)) != DRT_OK ||
        (es = drt_setting_bool(set, "vulkan.int64", &want_i64)) != DRT_OK ||
        (es = drt_setting_int(set, "vulkan.mm_tm", &tm)) != DRT_OK ||
        (es = drt_setting_int(set, "vulkan.mm_tn", &tn)) != DRT_OK ||
        (es = drt_setting_int(set, "vulkan.mm_wg", &wg)) != DRT_OK ||
        (es = drt_setting_int(set, "vulkan.split_bytes", &sb)) != DRT_OK ||
        (es = drt_setting_str(set, "vulkan.tune", &tune)) != DRT_OK ||
        (es = drt_setting_str(set, "vulkan.denorm", &denorm)) != DRT_OK)
        return es;
    if (tm * tn > 64) /* the compiler unrolls every FMA of the tile */
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "vulkan.mm_tm x vulkan.mm_tn (DIFFRT_VULKAN_MM_TM x DIFFRT_VULKAN_MM_TN): "
                             "expected at most 64, got %lld x %lld",
                             tm, tn);
    c->mm_tm = (uint32_t)tm;
    c->mm_tn = (uint32_t)tn;
    c->mm_wg = (uint32_t)wg;
    c->use_sg = subgroup_ops(d, VK_SUBGROUP_FEATURE_ARITHMETIC_BIT) && want_sg;
    c->has_shuffle = subgroup_ops(d, VK_SUBGROUP_FEATURE_SHUFFLE_BIT);
    c->use_f16 = d->s16.storageBuffer16BitAccess && want_f16;
    c->use_copy = want_copy;
    c->use_i64 = want_i64;
    c->denorm_preserve = strcmp(denorm, "force") == 0 ||
                         (strcmp(denorm, "off") != 0 && d->have_fc && d->fc.shaderDenormPreserveFloat32);
    c->denorm_ext = c->denorm_preserve && d->have_fc;
    c->split_bytes = d->p.limits.maxStorageBufferRange;
    if (sb > 0 && (unsigned long long)sb < c->split_bytes) c->split_bytes = (uint64_t)sb; /* >= 1024, checked */
    c->tune_cpu = *tune ? strcmp(tune, "cpu") == 0 : d->p.deviceType == VK_PHYSICAL_DEVICE_TYPE_CPU;

    int ncpu = drt_cpu_online(); /* lavapipe runs workgroups on every online CPU */
    c->n_cpus = ncpu < 4096 ? (uint32_t)ncpu : 1;
    return DRT_OK;
}

/* The logical device: one compute queue, 16-bit storage and shaderInt64
 * enabled where they are used, the device-level functions loaded. */
static drt_status create_device(vk_ctx *c, const dev_info *d) {
    char why[256];
    uint32_t nq = 0;
    c->f.vkGetPhysicalDeviceQueueFamilyProperties(c->pd, &nq, NULL);
    VkQueueFamilyProperties qp[32];
    if (nq > 32) nq = 32;
    c->f.vkGetPhysicalDeviceQueueFamilyProperties(c->pd, &nq, qp);
    c->qfam = UINT32_MAX;
    for (uint32_t i = 0; i < nq && c->qfam == UINT32_MAX; i++)
        if (qp[i].queueFlags & VK_QUEUE_COMPUTE_BIT) c->qfam = i;
    if (c->qfam == UINT32_MAX)
        return drt_set_error(DRT_ERR_UNSUPPORTED, "vulkan: %s has no compute queue", d->p.deviceName);
    float prio = 1.0f;
    VkDeviceQueueCreateInfo qi = {.sType = VK_STRUCTURE_TYPE_DEVICE_QUEUE_CREATE_INFO,
                                  .queueFamilyIndex = c->qfam,
                                  .queueCount = 1,
                                  .pQueuePriorities = &prio};
    VkPhysicalDevice16BitStorageFeatures s16 = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_16BIT_STORAGE_FEATURES,
                                                .storageBuffer16BitAccess = c->use_f16};
    VkPhysicalDeviceFeatures2 feat = {.sType = VK_STRUCTURE_TYPE_PHYSICAL_DEVICE_FEATURES_2};
    c->f.vkGetPhysicalDeviceFeatures2(c->pd, &feat);
    c->use_i64 = feat.features.shaderInt64 && c->use_sg && c->use_i64;
    VkPhysicalDeviceFeatures want = {.shaderInt64 = c->use_i64};
    const char *exts[] = {VK_KHR_SHADER_FLOAT_CONTROLS_EXTENSION_NAME};
    VkDeviceCreateInfo di = {.sType = VK_STRUCTURE_TYPE_DEVICE_CREATE_INFO,
                             .pNext = &s16,
                             .queueCreateInfoCount = 1,
                             .pQueueCreateInfos = &qi,
                             .enabledExtensionCount = c->denorm_ext ? 1 : 0,
                             .ppEnabledExtensionNames = exts,
                             .pEnabledFeatures = &want};
    VkResult r = c->f.vkCreateDevice(c->pd, &di, NULL, &c->dev);
    if (r != VK_SUCCESS) {
        c->dev = VK_NULL_HANDLE;
        return drt_set_error(DRT_ERR_UNAVAILABLE, "vulkan: vkCreateDevice(%s) failed: %s", d->p.deviceName,
                             vk_result_str(r));
    }
    if (vk_load_device(&c->f, c->dev, why, sizeof why) != 0) return drt_set_error(DRT_ERR_BACKEND, "vulkan: %s", why);
    c->f.vkGetDeviceQueue(c->dev, c->qfam, 0, &c->queue);
    return DRT_OK;
}

drt_status vk_device_init(vk_ctx *c, int device) {
    dev_info d;
    drt_status s = select_device(c, device, &d);
    if (s == DRT_OK) s = read_settings(c, &d);
    if (s == DRT_OK) s = create_device(c, &d);
    return s;
}

void vk_device_release(vk_ctx *c) {
    if (c->dev) c->f.vkDestroyDevice(c->dev, NULL);
    c->dev = VK_NULL_HANDLE;
    destroy_instance(&c->f, c->inst, c->messenger);
}
