/* The backend registry, backend instances, tensor allocation and I/O. */
#define _GNU_SOURCE /* dladdr */
#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "drt_error.h"
#include "drt_graph.h"
#include "drt_module.h"
#include "drt_settings.h"

extern const drt_backend_ops drt_cpu_backend_ops;
extern const drt_backend_ops drt_ref_backend_ops;

/* Every backend diffrt knows, in a fixed order: cpu and ref are built into
 * the core; the others are modules opened on first use (drt_module.h). */
typedef struct {
    const char *name;
    const drt_backend_ops *builtin; /* NULL: a module */
    const char *option;             /* the CMake option that builds its module */
    int module_built;               /* this build made the module */
    /* module state, under g_lock */
    int tried;                  /* the search ran (it runs once) */
    const drt_backend_ops *ops; /* the loaded module's (or the provided) ops */
    void *handle;               /* dlopen handle; NULL when provided */
    char path[1024];            /* the module file loaded, or the first that failed */
    char why[768];              /* why ops is NULL */
} registry_entry;

#ifndef DIFFRT_MODULE_OPENCL
#define DIFFRT_MODULE_OPENCL 0
#endif
#ifndef DIFFRT_MODULE_VULKAN
#define DIFFRT_MODULE_VULKAN 0
#endif
#ifndef DIFFRT_MODULE_CUDA
#define DIFFRT_MODULE_CUDA 0
#endif
#ifndef DIFFRT_INSTALL_LIBDIR
#define DIFFRT_INSTALL_LIBDIR ""
#endif

static registry_entry g_registry[] = {
    {.name = "cpu", .builtin = &drt_cpu_backend_ops},
    {.name = "ref", .builtin = &drt_ref_backend_ops},
    {.name = "opencl", .option = "OPENCL", .module_built = DIFFRT_MODULE_OPENCL},
    {.name = "vulkan", .option = "VULKAN", .module_built = DIFFRT_MODULE_VULKAN},
    {.name = "cuda", .option = "CUDA", .module_built = DIFFRT_MODULE_CUDA},
};
#define N_REGISTRY ((int)(sizeof g_registry / sizeof g_registry[0]))
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;

/* The directory of the object the core is in: libdiffrt.so, or the
 * executable it is linked into. "" when the OS does not say. */
static void core_dir(char *dir, size_t n) {
    dir[0] = 0;
    Dl_info di;
    char path[PATH_MAX] = "";
    if (dladdr((void *)&core_dir, &di) && di.dli_fname && strchr(di.dli_fname, '/')) {
        snprintf(path, sizeof path, "%s", di.dli_fname);
    } else {
        ssize_t k = readlink("/proc/self/exe", path, sizeof path - 1);
        path[k > 0 ? k : 0] = 0;
    }
    char *slash = strrchr(path, '/');
    if (!slash) return;
    *slash = 0;
    char real[PATH_MAX];
    snprintf(dir, n, "%s", realpath(path[0] ? path : "/", real) ? real : path[0] ? path : "/");
}

/* Opens dir/libdiffrt-<name>.so when it exists. 1: loaded into e; 0: no such
 * file; -1: it exists but could not be used (e->why says why, e->path names
 * it; kept for the first such file only). */
static int try_module(registry_entry *e, const char *dir, int *failed) {
    char path[1024];
    int k = snprintf(path, sizeof path, "%s/libdiffrt-%s.so", dir, e->name);
    if (k < 0 || (size_t)k >= sizeof path || access(path, F_OK) != 0) return 0;
    char why[768] = "";
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        const char *err = dlerror();
        snprintf(why, sizeof why, "%s", err ? err : "dlopen failed");
    } else {
        drt_backend_module_fn fn;
        *(void **)&fn = dlsym(h, DRT_MODULE_ENTRY);
        const drt_backend_module *m = fn ? fn() : NULL;
        if (!m)
            snprintf(why, sizeof why, "%.400s: no %s entry point (not a diffrt backend module)", path,
                     DRT_MODULE_ENTRY);
        else if (m->abi != DRT_MODULE_ABI || m->ops_size != sizeof(drt_backend_ops))
            snprintf(why, sizeof why, "%.400s: module ABI %u (ops %u bytes), this core has ABI %u (%zu bytes)", path,
                     m->abi, m->ops_size, DRT_MODULE_ABI, sizeof(drt_backend_ops));
        else if (!m->version || strcmp(m->version, drt_version()) != 0)
            snprintf(why, sizeof why, "%.400s: module built from diffrt %.32s, this core is %.32s", path,
                     m->version ? m->version : "(none)", drt_version());
        else if (!m->ops || !m->ops->name || strcmp(m->ops->name, e->name) != 0)
            snprintf(why, sizeof why, "%.400s: module serves backend \"%.32s\", not \"%s\"", path,
                     m->ops && m->ops->name ? m->ops->name : "(none)", e->name);
        else {
            e->ops = m->ops;
            e->handle = h;
            snprintf(e->path, sizeof e->path, "%s", path);
            return 1;
        }
        dlclose(h);
    }
    if (!*failed) {
        snprintf(e->why, sizeof e->why, "%s", why);
        snprintf(e->path, sizeof e->path, "%s", path);
        *failed = 1;
    }
    return -1;
}

/* Runs the search of drt_module.h once for a module entry (under g_lock). */
static void load_module(registry_entry *e) {
    if (e->tried || e->builtin) return;
    e->tried = 1;
    int failed = 0;
    char searched[600] = "";
    size_t used = 0;
    char dir[PATH_MAX];
    core_dir(dir, sizeof dir);
    if (dir[0]) {
        if (try_module(e, dir, &failed) == 1) return;
        used += (size_t)snprintf(searched + used, sizeof searched - used, "%.200s", dir);
    }
    const char *env = NULL;
    if (drt_setting_str(NULL, "backend_path", &env) != DRT_OK) env = NULL; /* a string: never invalid */
    for (const char *p = env; p && *p;) {
        const char *colon = strchr(p, ':');
        size_t n = colon ? (size_t)(colon - p) : strlen(p);
        if (n > 0 && n < sizeof dir) {
            memcpy(dir, p, n);
            dir[n] = 0;
            if (try_module(e, dir, &failed) == 1) return;
            if (used < sizeof searched)
                used += (size_t)snprintf(searched + used, sizeof searched - used, "%s%.200s", used ? ", " : "", dir);
        }
        p = colon ? colon + 1 : p + n;
    }
    if (DIFFRT_INSTALL_LIBDIR[0]) {
        if (try_module(e, DIFFRT_INSTALL_LIBDIR, &failed) == 1) return;
        if (used < sizeof searched)
            snprintf(searched + used, sizeof searched - used, "%s%.200s", used ? ", " : "", DIFFRT_INSTALL_LIBDIR);
    }
    if (failed) return; /* e->why: the first module file that failed */
    e->path[0] = 0;
    if (!e->module_built)
        snprintf(e->why, sizeof e->why, "not compiled into this build (configure with -DDIFFRT_%s=ON to require it)",
                 e->option);
    else
        snprintf(e->why, sizeof e->why, "module libdiffrt-%s.so not found (searched %s; set DIFFRT_BACKEND_PATH)",
                 e->name, searched[0] ? searched : "nothing");
}

static const drt_backend_ops *entry_ops(registry_entry *e) {
    if (e->builtin) return e->builtin;
    pthread_mutex_lock(&g_lock);
    load_module(e);
    const drt_backend_ops *ops = e->ops;
    pthread_mutex_unlock(&g_lock);
    return ops;
}

static registry_entry *entry_named(const char *name) {
    for (int i = 0; i < N_REGISTRY; i++)
        if (strcmp(g_registry[i].name, name) == 0) return &g_registry[i];
    return NULL;
}

drt_status drt_registry_provide(const drt_backend_ops *ops) {
    if (!ops || !ops->name) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_registry_provide: no ops");
    registry_entry *e = entry_named(ops->name);
    if (!e || e->builtin)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_registry_provide: \"%s\" is not a module backend", ops->name);
    drt_status s = DRT_OK;
    pthread_mutex_lock(&g_lock);
    if (e->tried && e->ops)
        s = drt_set_error(DRT_ERR_INVALID_ARG, "drt_registry_provide: backend %s is already loaded", ops->name);
    else {
        e->tried = 1;
        e->ops = ops;
        e->handle = NULL;
        snprintf(e->path, sizeof e->path, "(linked into the program)");
    }
    pthread_mutex_unlock(&g_lock);
    return s;
}

void *drt_backend_module_symbol(const char *name, const char *symbol) {
    registry_entry *e = name ? entry_named(name) : NULL;
    if (!e || e->builtin || !symbol || !entry_ops(e) || !e->handle) return NULL;
    return dlsym(e->handle, symbol);
}

/* Backends registered at run time (tests register deliberately partial or
 * wrong backends here); searched after the built-in ones. */
#define MAX_EXTRA 8
static const drt_backend_ops *g_extra[MAX_EXTRA];
static int g_n_extra;

drt_status drt_registry_add(const drt_backend_ops *ops) {
    if (drt_registry_find(ops->name))
        return drt_set_error(DRT_ERR_INVALID_ARG, "backend %s is already registered", ops->name);
    if (g_n_extra == MAX_EXTRA) return drt_set_error(DRT_ERR_OOM, "too many registered backends");
    g_extra[g_n_extra++] = ops;
    return DRT_OK;
}

/* known entries first (NULL when not available as code), then the registered ones */
int drt_registry_count(void) {
    return N_REGISTRY + g_n_extra;
}

const drt_backend_ops *drt_registry_get(int i) {
    if (i >= 0 && i < N_REGISTRY) return entry_ops(&g_registry[i]);
    if (i >= N_REGISTRY && i < N_REGISTRY + g_n_extra) return g_extra[i - N_REGISTRY];
    return NULL;
}

const drt_backend_ops *drt_registry_find(const char *name) {
    registry_entry *e = entry_named(name);
    if (e) return entry_ops(e);
    for (int i = 0; i < g_n_extra; i++)
        if (strcmp(g_extra[i]->name, name) == 0) return g_extra[i];
    return NULL;
}

const drt_backend_ops *drt_registry_fallback(void) {
    /* the ref entry is built in: never a module to load, never NULL */
    return entry_named("ref")->builtin;
}

/* ---- public listing --------------------------------------------------- */

int drt_backend_count(void) {
    return N_REGISTRY;
}

drt_status drt_backend_get_info(int index, drt_backend_info *out) {
    static _Thread_local char why[N_REGISTRY][768];
    if (index < 0 || index >= N_REGISTRY)
        return drt_set_error(DRT_ERR_INVALID_ARG, "backend index %d out of range [0, %d)", index, N_REGISTRY);
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_backend_get_info: out is NULL");
    registry_entry *e = &g_registry[index];
    const drt_backend_ops *ops = entry_ops(e);
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->builtin = e->builtin != NULL;
    out->compiled_in = e->builtin || e->module_built || ops;
    out->module = !e->builtin && ops ? e->path : NULL;
    if (!ops) {
        snprintf(why[index], sizeof why[index], "%s", e->why);
        out->reason = why[index];
        return DRT_OK;
    }
    int ndev = 0;
    why[index][0] = 0;
    drt_status s = ops->probe(&ndev, why[index], sizeof why[index]);
    out->available = s == DRT_OK && ndev > 0;
    out->device_count = out->available ? ndev : 0;
    if (!out->available && !why[index][0]) snprintf(why[index], sizeof why[index], "no devices found");
    out->reason = out->available ? NULL : why[index];
    return DRT_OK;
}

/* The ops of backend `index` when device `dev` exists on it, else the error. */
static drt_status device_ops(int index, int dev, const drt_backend_ops **out) {
    const drt_backend_ops *ops = index >= 0 && index < N_REGISTRY ? entry_ops(&g_registry[index]) : NULL;
    if (!ops) return drt_set_error(DRT_ERR_INVALID_ARG, "backend index %d is not available code", index);
    int ndev = 0;
    char why[256] = "";
    if (ops->probe(&ndev, why, sizeof why) != DRT_OK) ndev = 0;
    if (dev < 0 || dev >= ndev)
        return drt_set_error(DRT_ERR_INVALID_ARG, "%s: device %d out of range (%d devices)", ops->name, dev, ndev);
    *out = ops;
    return DRT_OK;
}

drt_status drt_backend_device_name(int index, int dev, char *buf, size_t n) {
    if (!buf || n == 0)
        return drt_set_error(DRT_ERR_INVALID_ARG, "drt_backend_device_name: no buffer (buf %s, n %zu)",
                             buf ? "set" : "NULL", n);
    buf[0] = 0;
    const drt_backend_ops *ops;
    drt_status s = device_ops(index, dev, &ops);
    return s != DRT_OK ? s : ops->device_name(dev, buf, n);
}

drt_status drt_backend_device_props(int index, int dev, drt_device_props *out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_backend_device_props: out is NULL");
    memset(out, 0, sizeof *out);
    out->fp16 = out->bf16 = -1;
    const drt_backend_ops *ops;
    drt_status s = device_ops(index, dev, &ops);
    if (s == DRT_OK && ops->device_props) s = ops->device_props(dev, out);
    if (s == DRT_OK && !out->name[0]) s = ops->device_name(dev, out->name, sizeof out->name);
    return s;
}

/* ---- instances -------------------------------------------------------- */

/* device: NULL/"" = default; digits = index; otherwise a name substring */
static drt_status pick_device(const drt_backend_ops *ops, const char *device, int ndev, int *out) {
    if (!device || !*device) {
        *out = -1;
        return DRT_OK;
    }
    char *end;
    long idx = strtol(device, &end, 10);
    if (*end == 0) {
        if (idx < 0 || idx >= ndev)
            return drt_set_error(DRT_ERR_INVALID_ARG, "%s: device index %ld out of range (%d devices)", ops->name, idx,
                                 ndev);
        *out = (int)idx;
        return DRT_OK;
    }
    for (int i = 0; i < ndev; i++) {
        char name[256];
        if (ops->device_name(i, name, sizeof name) == DRT_OK && strstr(name, device)) {
            *out = i;
            return DRT_OK;
        }
    }
    return drt_set_error(DRT_ERR_INVALID_ARG, "%s: no device whose name contains \"%s\"", ops->name, device);
}

drt_status drt_backend_open(const char *name, const char *device, drt_backend **out) {
    return drt_backend_open_threads(name, device, 0, out);
}

drt_status drt_backend_open_threads(const char *name, const char *device, int threads, drt_backend **out) {
    return drt_backend_open_settings(name, device, threads, NULL, out);
}

drt_status drt_backend_open_settings(const char *name, const char *device, int threads, const drt_settings *settings,
                                     drt_backend **out) {
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_backend_open_settings: out is NULL");
    *out = NULL;
    if (threads < 0) return drt_set_error(DRT_ERR_INVALID_ARG, "threads %d must be >= 0 (0: the default)", threads);
    if (!name || !*name) name = "cpu";
    const drt_backend_ops *ops = drt_registry_find(name);
    if (!ops) {
        registry_entry *e = entry_named(name);
        if (e) return drt_set_error(DRT_ERR_UNAVAILABLE, "backend %s unavailable: %s", name, e->why);
        return drt_set_error(DRT_ERR_INVALID_ARG, "unknown backend \"%s\" (known: cpu, ref, opencl, vulkan, cuda)",
                             name);
    }
    int ndev = 0;
    char why[256] = "";
    if (ops->probe(&ndev, why, sizeof why) != DRT_OK || ndev <= 0)
        return drt_set_error(DRT_ERR_UNAVAILABLE, "backend %s unavailable: %s", name,
                             why[0] ? why : "no devices found");
    drt_status s = DRT_OK;
    if (!device) s = drt_setting_str(settings, "device", &device);
    int dev = -1;
    if (s == DRT_OK) s = pick_device(ops, device && *device ? device : NULL, ndev, &dev);
    if (s != DRT_OK) return s;
    drt_backend *be = calloc(1, sizeof *be);
    if (!be) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", ops->name);
    be->ops = ops;
    be->device = dev;
    be->threads = threads;
    s = drt_settings_copy(settings, &be->settings);
    if (s == DRT_OK) s = ops->init(be, dev);
    if (s != DRT_OK) {
        drt_settings_free(be->settings);
        free(be);
        return s;
    }
    *out = be;
    return DRT_OK;
}

int drt_backend_device(const drt_backend *be) {
    return be ? be->device : -1;
}

drt_status drt_backend_instance_name(const drt_backend *be, char *buf, size_t n) {
    if (!be) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_backend_instance_name: no backend");
    if (!buf || n == 0) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_backend_instance_name: no buffer");
    buf[0] = '\0';
    if (be->ops->instance_name) return be->ops->instance_name((drt_backend *)be, buf, n);
    return be->ops->device_name(be->device < 0 ? 0 : be->device, buf, n);
}

void drt_backend_close(drt_backend *be) {
    if (!be) return;
    if (be->ops->shutdown) be->ops->shutdown(be);
    drt_settings_free(be->settings);
    free(be);
}

/* ---- allocation and I/O ------------------------------------------------ */

drt_status drt_alloc_tensors(drt_backend *be, drt_tensor **ts, int n) {
    /* bases first, then views (a view's base may appear after it) */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < n; i++) {
            drt_tensor *t = ts[i];
            if (t->buf) continue;
            if (pass == 0 && !t->view_src) {
                drt_buffer *b = calloc(1, sizeof *b);
                if (!b) return drt_set_error(DRT_ERR_OOM, "%s: out of memory", be->ops->name);
                size_t sz = drt_nbytes(t);
                drt_status s = be->ops->buf_alloc(be, sz ? sz : 16, b);
                if (s != DRT_OK) {
                    free(b);
                    return s;
                }
                b->be = be;
                t->buf = b;
                t->offs = 0;
            } else if (pass == 1 && t->view_src) {
                if (!t->view_src->buf)
                    return drt_set_error(DRT_ERR_INVALID_ARG, "view %s: its base %s is not allocated", t->name,
                                         t->view_src->name);
                t->buf = t->view_src->buf;
                t->offs = t->view_src->offs + t->view_offs;
            }
        }
    }
    return DRT_OK;
}

drt_status drt_tensor_set(drt_tensor *t, const void *data, size_t n) {
    if (!t->buf) return drt_set_error(DRT_ERR_INVALID_ARG, "tensor %s is not allocated", t->name);
    if (n > drt_nbytes(t))
        return drt_set_error(DRT_ERR_INVALID_ARG, "tensor %s: %zu bytes written into %zu", t->name, n, drt_nbytes(t));
    return t->buf->be->ops->upload(t->buf->be, t->buf, t->offs, data, n);
}

drt_status drt_tensor_get(const drt_tensor *t, void *data, size_t n) {
    if (!t->buf) return drt_set_error(DRT_ERR_INVALID_ARG, "tensor %s is not allocated", t->name);
    if (n > drt_nbytes(t))
        return drt_set_error(DRT_ERR_INVALID_ARG, "tensor %s: %zu bytes read from %zu", t->name, n, drt_nbytes(t));
    return t->buf->be->ops->download(t->buf->be, t->buf, t->offs, data, n);
}
