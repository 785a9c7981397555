/* Backend modules: opencl, vulkan and cuda are built as shared objects
 * (libdiffrt-<name>.so) that the core opens at run time with dlopen, so that
 * neither the core library nor the CLI links any vendor library
 * (docs/design.md section 5). cpu and ref are built into the core.
 *
 * A module exports one entry point, DRT_MODULE_ENTRY, returning a static
 * descriptor. The core accepts it only when abi, ops_size and version match
 * its own; otherwise the backend is unavailable with that reason.
 *
 * Search order for libdiffrt-<name>.so, first file that exists wins:
 *   1. the directory of the core (libdiffrt.so, or the executable it is
 *      linked into statically);
 *   2. each directory of DIFFRT_BACKEND_PATH (':'-separated), in order;
 *   3. the library directory of the installation the build was made for
 *      (CMAKE_INSTALL_FULL_LIBDIR).
 * A module is opened the first time its backend is asked for (listed, probed
 * or opened) and never closed. */
#ifndef DRT_MODULE_H
#define DRT_MODULE_H

#include <stdint.h>

#include "drt_graph.h"

#define DRT_MODULE_ABI 1u
#define DRT_MODULE_ENTRY "drt_backend_module_v1"

typedef struct {
    uint32_t abi;        /* DRT_MODULE_ABI */
    uint32_t ops_size;   /* sizeof(drt_backend_ops) the module was compiled with */
    const char *version; /* drt_version() of the sources it was built from */
    const drt_backend_ops *ops;
} drt_backend_module;

typedef const drt_backend_module *(*drt_backend_module_fn)(void);

/* Defines the entry point of a module whose backend is `ops`: one line at the
 * end of the module's backend.c. */
#define DRT_DEFINE_BACKEND_MODULE(ops_var)                                                                             \
    __attribute__((visibility("default"))) const drt_backend_module *drt_backend_module_v1(void);                      \
    const drt_backend_module *drt_backend_module_v1(void) {                                                            \
        static const drt_backend_module m = {DRT_MODULE_ABI, (uint32_t)sizeof(drt_backend_ops), DRT_MODULE_VERSION,    \
                                             &(ops_var)};                                                              \
        return &m;                                                                                                     \
    }

/* A symbol of the loaded module of backend `name` (tests reach backend-
 * specific counters this way), or NULL when the backend is not a loaded
 * module or the module lacks it. Loads the module if needed. */
void *drt_backend_module_symbol(const char *name, const char *symbol);

/* Serves backend ops->name from ops linked into the program instead of a
 * module (the CUDA backend on its host emulator, diffrt_cuda_emu). Call it
 * before the backend is first used; DRT_ERR_INVALID_ARG when the name is not
 * a module backend or its module is already loaded. */
drt_status drt_registry_provide(const drt_backend_ops *ops);

#endif
