/* The backend registry, backend instances, tensor allocation and I/O. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_graph.h"

extern const drt_backend_ops drt_cpu_backend_ops;
extern const drt_backend_ops drt_ref_backend_ops;
#ifdef DIFFRT_HAVE_OPENCL
extern const drt_backend_ops drt_opencl_backend_ops;
#endif
#ifdef DIFFRT_HAVE_VULKAN
extern const drt_backend_ops drt_vulkan_backend_ops;
#endif
#ifdef DIFFRT_HAVE_CUDA
extern const drt_backend_ops drt_cuda_backend_ops;
#endif

/* Every backend diffrt knows, compiled in or not, in a fixed order. */
typedef struct {
    const char *name;
    const drt_backend_ops *ops; /* NULL: not compiled into this build */
    const char *option;         /* the CMake option that builds it */
} registry_entry;

static const registry_entry g_registry[] = {
    {"cpu", &drt_cpu_backend_ops, NULL},
    {"ref", &drt_ref_backend_ops, NULL},
#ifdef DIFFRT_HAVE_OPENCL
    {"opencl", &drt_opencl_backend_ops, "OPENCL"},
#else
    {"opencl", NULL, "OPENCL"},
#endif
#ifdef DIFFRT_HAVE_VULKAN
    {"vulkan", &drt_vulkan_backend_ops, "VULKAN"},
#else
    {"vulkan", NULL, "VULKAN"},
#endif
#ifdef DIFFRT_HAVE_CUDA
    {"cuda", &drt_cuda_backend_ops, "CUDA"},
#else
    {"cuda", NULL, "CUDA"},
#endif
};
#define N_REGISTRY ((int)(sizeof g_registry / sizeof g_registry[0]))


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

/* built-in entries first (NULL when not compiled in), then the registered ones */
int drt_registry_count(void) { return N_REGISTRY + g_n_extra; }

const drt_backend_ops *drt_registry_get(int i) {
    if (i >= 0 && i < N_REGISTRY) return g_registry[i].ops;
    if (i >= N_REGISTRY && i < N_REGISTRY + g_n_extra) return g_extra[i - N_REGISTRY];
    return NULL;
}

const drt_backend_ops *drt_registry_find(const char *name) {
    for (int i = 0; i < N_REGISTRY; i++)
        if (g_registry[i].ops && strcmp(g_registry[i].name, name) == 0) return g_registry[i].ops;
    for (int i = 0; i < g_n_extra; i++)
        if (strcmp(g_extra[i]->name, name) == 0) return g_extra[i];
    return NULL;
}

/* ---- public listing --------------------------------------------------- */

int drt_backend_count(void) { return N_REGISTRY; }

drt_status drt_backend_get_info(int index, drt_backend_info *out) {
    static _Thread_local char why[N_REGISTRY][256];
    if (index < 0 || index >= N_REGISTRY)
        return drt_set_error(DRT_ERR_INVALID_ARG, "backend index %d out of range [0, %d)", index,
                             N_REGISTRY);
    if (!out) return drt_set_error(DRT_ERR_INVALID_ARG, "drt_backend_get_info: out is NULL");
    const registry_entry *e = &g_registry[index];
    memset(out, 0, sizeof *out);
    out->name = e->name;
    out->compiled_in = e->ops != NULL;
    if (!e->ops) {
        snprintf(why[index], sizeof why[index],
                 "not compiled into this build (configure with -DDIFFRT_%s=ON to require it)",
                 e->option);
        out->reason = why[index];
        return DRT_OK;
    }
    int ndev = 0;
    why[index][0] = 0;
    drt_status s = e->ops->probe(&ndev, why[index], sizeof why[index]);
    out->available = s == DRT_OK && ndev > 0;
    out->device_count = out->available ? ndev : 0;
    if (!out->available && !why[index][0]) snprintf(why[index], sizeof why[index], "no devices found");
    out->reason = out->available ? NULL : why[index];
    return DRT_OK;
}

drt_status drt_backend_device_name(int index, int dev, char *buf, size_t n) {
    if (index < 0 || index >= N_REGISTRY || !g_registry[index].ops)
        return drt_set_error(DRT_ERR_INVALID_ARG, "backend index %d not compiled in", index);
    if (!buf || n == 0)
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "drt_backend_device_name: no buffer (buf %s, n %zu)",
                             buf ? "set" : "NULL", n);
    buf[0] = 0;
    const drt_backend_ops *ops = g_registry[index].ops;
    int ndev = 0;
    char why[256] = "";
    if (ops->probe(&ndev, why, sizeof why) != DRT_OK) ndev = 0;
    if (dev < 0 || dev >= ndev)
        return drt_set_error(DRT_ERR_INVALID_ARG, "%s: device %d out of range (%d devices)",
                             ops->name, dev, ndev);
    return ops->device_name(dev, buf, n);
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
            return drt_set_error(DRT_ERR_INVALID_ARG, "%s: device index %ld out of range (%d devices)",
                                 ops->name, idx, ndev);
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
    return drt_set_error(DRT_ERR_INVALID_ARG, "%s: no device whose name contains \"%s\"", ops->name,
                         device);
}

drt_status drt_backend_open(const char *name, const char *device, drt_backend **out) {
    return drt_backend_open_threads(name, device, 0, out);
}

drt_status drt_backend_open_threads(const char *name, const char *device, int threads,
                                    drt_backend **out) {
    *out = NULL;
    if (threads < 0)
        return drt_set_error(DRT_ERR_INVALID_ARG, "threads %d must be >= 0 (0: the default)", threads);
    if (!name || !*name) name = "cpu";
    const drt_backend_ops *ops = drt_registry_find(name);
    if (!ops) {
        for (int i = 0; i < N_REGISTRY; i++)
            if (strcmp(g_registry[i].name, name) == 0)
                return drt_set_error(DRT_ERR_UNAVAILABLE, "backend %s: not compiled into this build",
                                     name);
        return drt_set_error(DRT_ERR_INVALID_ARG,
                             "unknown backend \"%s\" (known: cpu, ref, opencl, vulkan, cuda)", name);
    }
    int ndev = 0;
    char why[256] = "";
    if (ops->probe(&ndev, why, sizeof why) != DRT_OK || ndev <= 0)
        return drt_set_error(DRT_ERR_UNAVAILABLE, "backend %s unavailable: %s", name,
                             why[0] ? why : "no devices found");
    if (!device) device = getenv("DIFFRT_DEVICE");
    int dev = -1;
    drt_status s = pick_device(ops, device, ndev, &dev);
    if (s != DRT_OK) return s;
    drt_backend *be = calloc(1, sizeof *be);
    if (!be) return drt_set_error(DRT_ERR_OOM, "out of memory");
    be->ops = ops;
    be->device = dev;
    be->threads = threads;
    s = ops->init(be, dev);
    if (s != DRT_OK) {
        free(be);
        return s;
    }
    *out = be;
    return DRT_OK;
}

void drt_backend_close(drt_backend *be) {
    if (!be) return;
    if (be->ops->shutdown) be->ops->shutdown(be);
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
                if (!b) return drt_set_error(DRT_ERR_OOM, "out of memory");
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
                    return drt_set_error(DRT_ERR_INVALID_ARG, "view %s: its base %s is not allocated",
                                         t->name, t->view_src->name);
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
        return drt_set_error(DRT_ERR_INVALID_ARG, "tensor %s: %zu bytes written into %zu", t->name, n,
                             drt_nbytes(t));
    return t->buf->be->ops->upload(t->buf->be, t->buf, t->offs, data, n);
}

drt_status drt_tensor_get(const drt_tensor *t, void *data, size_t n) {
    if (!t->buf) return drt_set_error(DRT_ERR_INVALID_ARG, "tensor %s is not allocated", t->name);
    if (n > drt_nbytes(t))
        return drt_set_error(DRT_ERR_INVALID_ARG, "tensor %s: %zu bytes read from %zu", t->name, n,
                             drt_nbytes(t));
    return t->buf->be->ops->download(t->buf->be, t->buf, t->offs, data, n);
}
