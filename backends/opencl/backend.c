/* The OpenCL backend: device enumeration over every platform, buffers (plain
 * cl_mem, never host-visible), program build at init, and the dispatch switch
 * that hands each node to its op family (matmul.c, attention.c, norm.c,
 * elementwise.c). compute() only sets arguments and enqueues on one in-order
 * queue; synchronize() waits for it. One instance serves one thread at a time
 * (its kernels carry their arguments).
 *
 * Settings, read at init:
 *   DIFFRT_OPENCL_GEMM=tiled|local|regs|clblast  MATMUL through the own
 *       kernels (default "tiled": the variant table of matmul.c, register
 *       blocks on CPU-class devices, local-memory tiles elsewhere), forced to
 *       local-memory tiles ("local", which also keeps attention on its
 *       local-memory kernels) or register blocks ("regs"), or, for f32
 *       weights, CLBlast's SGEMM (builds that found CLBlast)
 *   DIFFRT_OPENCL_ATTN_SPLIT=N        attention keys per split-S work-group
 *       (0 or unset: automatic, split only when compute units would idle)
 *   DIFFRT_OPENCL_BUILD_OPTIONS=...   appended to every program's build options
 *       (vendor flags; never use it to relax f32 math: see ocl_init) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "drt_error.h"
#include "drt_module.h"
#include "drt_settings.h"
#include "ocl.h"

/* ---- devices: a flat index over every platform's devices ------------------ */

#define OCL_MAX_PLATFORMS 16
#define OCL_MAX_DEVICES 64

typedef struct {
    cl_platform_id platform;
    cl_device_id dev;
} ocl_dev_ref;

/* Lists up to max devices of every platform, in platform order. Returns the
 * count, or -1 with a reason in why. Never crashes without an ICD: the
 * loader then reports CL_PLATFORM_NOT_FOUND_KHR or zero platforms. */
static int list_devices(ocl_dev_ref *out, int max, char *why, size_t wn) {
    cl_platform_id plats[OCL_MAX_PLATFORMS];
    cl_uint np = 0;
    cl_int e = clGetPlatformIDs(OCL_MAX_PLATFORMS, plats, &np);
    if (e != CL_SUCCESS || np == 0) {
        snprintf(why, wn, "no OpenCL platform found (is an ICD such as pocl-opencl-icd installed?)%s%s",
                 e != CL_SUCCESS ? ": " : "", e != CL_SUCCESS ? ocl_err_str(e) : "");
        return -1;
    }
    if (np > OCL_MAX_PLATFORMS) np = OCL_MAX_PLATFORMS;
    int n = 0;
    for (cl_uint p = 0; p < np && n < max; p++) {
        cl_device_id devs[OCL_MAX_DEVICES];
        cl_uint nd = 0;
        if (clGetDeviceIDs(plats[p], CL_DEVICE_TYPE_ALL, OCL_MAX_DEVICES, devs, &nd) != CL_SUCCESS) continue;
        for (cl_uint d = 0; d < nd && d < OCL_MAX_DEVICES && n < max; d++) out[n++] = (ocl_dev_ref){plats[p], devs[d]};
    }
    if (n == 0) {
        snprintf(why, wn, "%u OpenCL platform(s) found, but none has a device", np);
        return -1;
    }
    return n;
}

static drt_status ocl_probe(int *n_devices, char *why, size_t n) {
    ocl_dev_ref devs[OCL_MAX_DEVICES];
    *n_devices = 0;
    int nd = list_devices(devs, OCL_MAX_DEVICES, why, n);
    if (nd < 0) return DRT_ERR_UNAVAILABLE;
    *n_devices = nd;
    return DRT_OK;
}

static void dev_str(cl_device_id d, cl_device_info what, char *buf, size_t n) {
    buf[0] = 0;
    if (clGetDeviceInfo(d, what, n, buf, NULL) != CL_SUCCESS) snprintf(buf, n, "?");
    buf[n - 1] = 0;
}

/* "name (platform, OpenCL x.y, type)" */
static void describe(const ocl_dev_ref *r, char *buf, size_t n) {
    char name[128], plat[128] = "?", ver[128];
    dev_str(r->dev, CL_DEVICE_NAME, name, sizeof name);
    if (clGetPlatformInfo(r->platform, CL_PLATFORM_NAME, sizeof plat, plat, NULL) != CL_SUCCESS)
        snprintf(plat, sizeof plat, "?");
    plat[sizeof plat - 1] = 0;
    dev_str(r->dev, CL_DEVICE_VERSION, ver, sizeof ver);
    /* "OpenCL 3.0 <vendor specific>": keep the first two words */
    char *sp = strchr(ver, ' ');
    if (sp && (sp = strchr(sp + 1, ' '))) *sp = 0;
    cl_device_type ty = 0;
    clGetDeviceInfo(r->dev, CL_DEVICE_TYPE, sizeof ty, &ty, NULL);
    const char *tn = ty & CL_DEVICE_TYPE_GPU           ? "GPU"
                     : ty & CL_DEVICE_TYPE_CPU         ? "CPU"
                     : ty & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator"
                                                       : "other";
    snprintf(buf, n, "%s (%s, %s, %s)", name, plat, ver, tn);
}

static drt_status ocl_device_name(int dev, char *buf, size_t n) {
    ocl_dev_ref devs[OCL_MAX_DEVICES];
    char why[256];
    int nd = list_devices(devs, OCL_MAX_DEVICES, why, sizeof why);
    if (nd < 0) return drt_set_error(DRT_ERR_UNAVAILABLE, "opencl: %s", why);
    if (dev < 0 || dev >= nd)
        return drt_set_error(DRT_ERR_INVALID_ARG, "opencl: device %d out of range (%d devices)", dev, nd);
    describe(&devs[dev], buf, n);
    return DRT_OK;
}

static drt_status ocl_device_props(int dev, drt_device_props *out) {
    memset(out, 0, sizeof *out);
    ocl_dev_ref devs[OCL_MAX_DEVICES];
    char why[256];
    int nd = list_devices(devs, OCL_MAX_DEVICES, why, sizeof why);
    if (nd < 0) return drt_set_error(DRT_ERR_UNAVAILABLE, "opencl: %s", why);
    if (dev < 0 || dev >= nd)
        return drt_set_error(DRT_ERR_INVALID_ARG, "opencl: device %d out of range (%d devices)", dev, nd);
    cl_device_id d = devs[dev].dev;
    dev_str(d, CL_DEVICE_NAME, out->name, sizeof out->name);
    dev_str(d, CL_DEVICE_VENDOR, out->vendor, sizeof out->vendor);
    char plat[64] = "", drv[64];
    if (clGetPlatformInfo(devs[dev].platform, CL_PLATFORM_NAME, sizeof plat, plat, NULL) != CL_SUCCESS) plat[0] = 0;
    plat[sizeof plat - 1] = 0;
    dev_str(d, CL_DRIVER_VERSION, drv, sizeof drv);
    snprintf(out->driver, sizeof out->driver, "%s%s%s", plat, plat[0] ? " " : "", drv);
    char ver[256];
    dev_str(d, CL_DEVICE_VERSION, ver, sizeof ver);
    /* "OpenCL 3.0 <vendor specific>": keep the first two words */
    char *sp = strchr(ver, ' ');
    if (sp && (sp = strchr(sp + 1, ' '))) *sp = 0;
    snprintf(out->api_version, sizeof out->api_version, "%.63s", ver);
    /* dev_str's "?" (the query failed) is unknown here */
    char *fields[] = {out->name, out->vendor, out->api_version};
    for (int i = 0; i < 3; i++)
        if (strcmp(fields[i], "?") == 0) fields[i][0] = 0;
    cl_device_type ty = 0;
    clGetDeviceInfo(d, CL_DEVICE_TYPE, sizeof ty, &ty, NULL);
    snprintf(out->type, sizeof out->type, "%s",
             ty & CL_DEVICE_TYPE_GPU           ? "GPU"
             : ty & CL_DEVICE_TYPE_CPU         ? "CPU"
             : ty & CL_DEVICE_TYPE_ACCELERATOR ? "accelerator"
                                               : "other");
    cl_ulong mem = 0;
    if (clGetDeviceInfo(d, CL_DEVICE_GLOBAL_MEM_SIZE, sizeof mem, &mem, NULL) == CL_SUCCESS) out->memory_bytes = mem;
    /* OpenCL 1.2 has no device-wide subgroup size: the vendors' queries
     * (NVIDIA warp, AMD wavefront, Intel's list of sizes: the largest) */
    cl_uint w = 0;
    size_t sizes[8], nb = 0;
    if (clGetDeviceInfo(d, 0x4003 /* CL_DEVICE_WARP_SIZE_NV */, sizeof w, &w, NULL) == CL_SUCCESS && w)
        out->subgroup_size = (int)w;
    else if (clGetDeviceInfo(d, 0x4043 /* CL_DEVICE_WAVEFRONT_WIDTH_AMD */, sizeof w, &w, NULL) == CL_SUCCESS && w)
        out->subgroup_size = (int)w;
    else if (clGetDeviceInfo(d, 0x4108 /* CL_DEVICE_SUB_GROUP_SIZES_INTEL */, sizeof sizes, sizes, &nb) == CL_SUCCESS)
        for (size_t i = 0; i < nb / sizeof sizes[0] && i < 8; i++)
            if ((int)sizes[i] > out->subgroup_size) out->subgroup_size = (int)sizes[i];
    size_t ne = 0;
    out->fp16 = -1;
    if (clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, 0, NULL, &ne) == CL_SUCCESS && ne > 0) {
        char *ext = malloc(ne + 1);
        if (ext && clGetDeviceInfo(d, CL_DEVICE_EXTENSIONS, ne, ext, NULL) == CL_SUCCESS) {
            ext[ne] = 0;
            out->fp16 = strstr(ext, "cl_khr_fp16") != NULL;
        }
        free(ext);
    }
    out->bf16 = 0; /* OpenCL C has no bf16 arithmetic */
    return DRT_OK;
}

/* ---- init: context, queue, programs, kernels -------------------------------- */

static const char *const ocl_prog_files[OCL_P_COUNT] = {"elementwise.cl", "norm.cl", "matmul.cl", "attention.cl",
                                                        "matmul_q.cl"};

static void ocl_shutdown(drt_backend *be) {
    ocl_ctx *x = ocl_of(be);
    if (!x) return;
    if (x->q) clFinish(x->q);
    ocl_matmul_shutdown(x);
    for (int i = 0; i < OCL_K_COUNT; i++)
        if (x->k[i]) clReleaseKernel(x->k[i]);
    for (int i = 0; i < OCL_P_COUNT; i++)
        if (x->prog[i]) clReleaseProgram(x->prog[i]);
    if (x->err) clReleaseMemObject(x->err);
    if (x->part) clReleaseMemObject(x->part);
    if (x->q) clReleaseCommandQueue(x->q);
    if (x->ctx) clReleaseContext(x->ctx);
    free(x);
    be->ctx = NULL;
}

static drt_status fail(drt_backend *be, drt_status s) {
    ocl_shutdown(be);
    return s;
}

/* Builds program p; on failure the message carries the compiler's log. */
static drt_status build_program(ocl_ctx *x, ocl_prog p, const char *opts) {
    const char *src[OCL_P_COUNT] = {drt_ocl_src_elementwise, drt_ocl_src_norm, drt_ocl_src_matmul,
                                    drt_ocl_src_attention, drt_ocl_src_matmul_q};
    const size_t len[OCL_P_COUNT] = {drt_ocl_src_elementwise_len, drt_ocl_src_norm_len, drt_ocl_src_matmul_len,
                                     drt_ocl_src_attention_len, drt_ocl_src_matmul_q_len};
    cl_int e;
    x->prog[p] = clCreateProgramWithSource(x->ctx, 1, &src[p], &len[p], &e);
    if (e != CL_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "opencl: clCreateProgramWithSource(%s): %s (%d)", ocl_prog_files[p],
                             ocl_err_str(e), e);
    e = clBuildProgram(x->prog[p], 1, &x->dev, opts, NULL, NULL);
    if (e == CL_SUCCESS) return DRT_OK;
    char log[4096] = "";
    size_t got = 0;
    clGetProgramBuildInfo(x->prog[p], x->dev, CL_PROGRAM_BUILD_LOG, sizeof log - 1, log, &got);
    log[sizeof log - 1] = 0;
    return drt_set_error(DRT_ERR_BACKEND, "opencl: building %s for %s failed: %s (%d), options \"%s\": %s",
                         ocl_prog_files[p], x->name, ocl_err_str(e), e, opts, log);
}

/* Attention tiles: up to OCL_ATT_BQ_MAX rows x ATT_NT items; ATT_BK, the keys
 * per tile, is the largest that lets DIFF_ATTN with dk = 128, dv = 256 (the
 * largest head the contract asks for) fit into the device's local memory. */
static void pick_attention_tiles(ocl_ctx *x) {
    x->att_nt = 32;
    x->att_dv_max = 256;
    static const int bks[] = {64, 32, 16, 8};
    x->att_bk = 8;
    for (size_t i = 0; i < sizeof bks / sizeof bks[0]; i++) {
        size_t floats = (size_t)OCL_ATT_BQ_MAX * 2 * 128 + (size_t)(bks[i] + 1) * 2 * 128 + (size_t)bks[i] * 256 +
                        2 * (size_t)OCL_ATT_BQ_MAX * bks[i];
        /* keep 1 KiB for whatever the compiler places in local memory itself */
        if (floats * sizeof(float) + 1024 <= x->local_mem) {
            x->att_bk = bks[i];
            break;
        }
    }
}

static drt_status ocl_init(drt_backend *be, int device) {
    ocl_dev_ref devs[OCL_MAX_DEVICES];
    char why[256];
    int nd = list_devices(devs, OCL_MAX_DEVICES, why, sizeof why);
    if (nd < 0) return drt_set_error(DRT_ERR_UNAVAILABLE, "opencl: %s", why);
    if (device >= nd)
        return drt_set_error(DRT_ERR_INVALID_ARG, "opencl: device %d out of range (%d devices)", device, nd);
    if (device < 0) { /* the first GPU, else the first device */
        device = 0;
        for (int i = 0; i < nd; i++) {
            cl_device_type ty = 0;
            clGetDeviceInfo(devs[i].dev, CL_DEVICE_TYPE, sizeof ty, &ty, NULL);
            if (ty & CL_DEVICE_TYPE_GPU) {
                device = i;
                break;
            }
        }
    }
    ocl_ctx *x = calloc(1, sizeof *x);
    if (!x) return drt_set_error(DRT_ERR_OOM, "out of memory");
    be->ctx = x;
    be->device = device;
    x->platform = devs[device].platform;
    x->dev = devs[device].dev;
    describe(&devs[device], x->name, sizeof x->name);

    const char *gemm;
    drt_status gs = drt_setting_str(be->settings, "opencl.gemm", &gemm); /* one of the four, checked */
    if (gs != DRT_OK) return fail(be, gs);
    if (strcmp(gemm, "tiled") == 0) {
        x->gemm = OCL_GEMM_TILED;
    } else if (strcmp(gemm, "local") == 0) {
        x->gemm = OCL_GEMM_LOCAL;
    } else if (strcmp(gemm, "regs") == 0) {
        x->gemm = OCL_GEMM_REGS;
    } else if (strcmp(gemm, "clblast") == 0) {
#ifdef DIFFRT_HAVE_CLBLAST
        x->gemm = OCL_GEMM_CLBLAST;
#else
        return fail(be, drt_set_error(DRT_ERR_UNAVAILABLE, "opencl: DIFFRT_OPENCL_GEMM=clblast, but this build has no "
                                                           "CLBlast (install libclblast-dev and reconfigure)"));
#endif
    } else {
        return fail(be, drt_set_error(DRT_ERR_INVALID_ARG,
                                      "opencl: DIFFRT_OPENCL_GEMM=%s: expected tiled, local, regs "
                                      "or clblast",
                                      gemm));
    }

    cl_int e;
    cl_context_properties props[] = {CL_CONTEXT_PLATFORM, (cl_context_properties)x->platform, 0};
    x->ctx = clCreateContext(props, 1, &x->dev, NULL, NULL, &e);
    if (e != CL_SUCCESS)
        return fail(be,
                    drt_set_error(DRT_ERR_BACKEND, "opencl: clCreateContext(%s): %s (%d)", x->name, ocl_err_str(e), e));
    x->q = clCreateCommandQueue(x->ctx, x->dev, 0, &e);
    if (e != CL_SUCCESS)
        return fail(be, drt_set_error(DRT_ERR_BACKEND, "opencl: clCreateCommandQueue(%s): %s (%d)", x->name,
                                      ocl_err_str(e), e));
    clGetDeviceInfo(x->dev, CL_DEVICE_LOCAL_MEM_SIZE, sizeof x->local_mem, &x->local_mem, NULL);
    clGetDeviceInfo(x->dev, CL_DEVICE_MAX_MEM_ALLOC_SIZE, sizeof x->max_alloc, &x->max_alloc, NULL);
    clGetDeviceInfo(x->dev, CL_DEVICE_MAX_COMPUTE_UNITS, sizeof x->cu, &x->cu, NULL);
    long long split;
    drt_status ss = drt_setting_int(be->settings, "opencl.attn_split", &split); /* [0, 2^30], checked */
    if (ss != DRT_OK) return fail(be, ss);
    x->split_keys = (int)split;
    pick_attention_tiles(x);
    /* MATMUL: register blocks on CPU-class devices (PoCL, Intel CPU), whose
     * caches stage operands better than local memory and barriers do */
    cl_device_type dty = 0;
    clGetDeviceInfo(x->dev, CL_DEVICE_TYPE, sizeof dty, &dty, NULL);
    const int cpu_dev = !(dty & CL_DEVICE_TYPE_GPU) && (dty & CL_DEVICE_TYPE_CPU);
    x->mm_regs = x->gemm == OCL_GEMM_REGS || (x->gemm != OCL_GEMM_LOCAL && cpu_dev);
    cl_uint nvw = 0;
    clGetDeviceInfo(x->dev, CL_DEVICE_NATIVE_VECTOR_WIDTH_FLOAT, sizeof nvw, &nvw, NULL);
    x->rb_v = (int)nvw;
    /* attention with queries in vector lanes: CPU-class devices with 8 or 16
     * float lanes (the same choice as MATMUL's: DIFFRT_OPENCL_GEMM=local
     * keeps the local-memory kernels for both) */
    x->att_vl = x->mm_regs && nvw >= 8 ? (nvw >= 16 ? 16 : 8) : 0;

    /* f32 kernels are checked at NMSE <= 1e-8: no -cl-fast-relaxed-math, no
     * -cl-mad-enable, no native_* functions */
    const char *extra;
    drt_status es = drt_setting_str(be->settings, "opencl.build_options", &extra);
    if (es != DRT_OK) return fail(be, es);
    char opts[512];
    for (int p = 0; p < OCL_P_COUNT; p++) {
        int o = snprintf(opts, sizeof opts, "-cl-std=CL1.2");
        if (p == OCL_P_ATTENTION)
            o += snprintf(opts + o, sizeof opts - (size_t)o, " -DATT_BK=%d -DATT_NT=%d -DATT_DV_MAX=%d -DATT_VL=%d",
                          x->att_bk, x->att_nt, x->att_dv_max, x->att_vl ? x->att_vl : 16);
        if (p == OCL_P_MATMUL) o += ocl_matmul_options(x, opts + o, sizeof opts - (size_t)o);
        /* CPU devices: the GEMVs prefetch weight rows ahead (matmul.cl) */
        if ((p == OCL_P_MATMUL || p == OCL_P_MATMUL_Q) && cpu_dev)
            o += snprintf(opts + o, sizeof opts - (size_t)o, " -DPF_ROWS=%d", OCL_PF_ROWS);
        if (extra && *extra) snprintf(opts + o, sizeof opts - (size_t)o, " %s", extra);
        drt_status s = build_program(x, (ocl_prog)p, opts);
        if (s != DRT_OK) return fail(be, s);
    }
    for (int i = 0; i < OCL_K_COUNT; i++) {
        x->k[i] = clCreateKernel(x->prog[ocl_kernels[i].prog], ocl_kernels[i].name, &e);
        if (e != CL_SUCCESS)
            return fail(be, drt_set_error(DRT_ERR_BACKEND, "opencl: clCreateKernel(%s): %s (%d)", ocl_kernels[i].name,
                                          ocl_err_str(e), e));
        clGetKernelWorkGroupInfo(x->k[i], x->dev, CL_KERNEL_WORK_GROUP_SIZE, sizeof x->kwg[i], &x->kwg[i], NULL);
    }
    /* fixed work-group shapes: a device that cannot run them routes the op to
     * the CPU reference (counted by the dispatcher), it does not fail */
    x->mm_vec_ok = x->mm_tiled_ok = 1;
    for (int i = OCL_K_MATVEC_F32; i <= OCL_K_MATVEC_BF16; i++) x->mm_vec_ok &= x->kwg[i] >= OCL_MV_WG;
    for (int i = OCL_K_MATMUL_F32; i <= OCL_K_MATMUL_BF16; i++) x->mm_tiled_ok &= x->kwg[i] >= OCL_MM_TW * OCL_MM_TW;
    /* register blocks: any work-group size; the kernel's preferred multiple
     * (8 on PoCL's CPU device: one task of its thread pool runs 8 tiles),
     * at most 64, within what every variant can run */
    size_t pm = 0;
    clGetKernelWorkGroupInfo(x->k[OCL_K_DOT_F32], x->dev, CL_KERNEL_PREFERRED_WORK_GROUP_SIZE_MULTIPLE, sizeof pm, &pm,
                             NULL);
    x->rb_wg = 1;
    while (x->rb_wg * 2 <= pm && x->rb_wg < 64) x->rb_wg *= 2;
    for (int i = OCL_K_GEMV_F32; i <= OCL_K_OUTER_BF16; i++)
        while (x->rb_wg > 1 && x->kwg[i] < x->rb_wg) x->rb_wg /= 2;
    for (int i = OCL_K_GEMV_Q8_0; i <= OCL_K_ROWS_Q4_0; i++)
        while (x->rb_wg > 1 && x->kwg[i] < x->rb_wg) x->rb_wg /= 2;
    /* attention: the most rows per work-group that the kernels of every KV
     * type (local q1 .. q8 at 0, OCL_K_DIFF_ATTN_Q1_F16 and _Q8_0 on) can run */
    static const int att_first[3] = {OCL_K_DIFF_ATTN_Q1, OCL_K_DIFF_ATTN_Q1_F16, OCL_K_DIFF_ATTN_Q1_Q8_0};
    x->att_bq_max = 0;
    for (int i = 0, bq = 1, ok = 1; bq <= OCL_ATT_BQ_MAX && ok; i++, bq *= 2) {
        size_t wg = (size_t)bq * x->att_nt;
        for (int ty = 0; ty < 3; ty++) ok &= x->kwg[att_first[ty] + i] >= wg && x->kwg[att_first[ty] + 4 + i] >= wg;
        if (ok) x->att_bq_max = bq;
    }
    for (int ty = 0; ty < 3; ty++)
        for (int i = att_first[ty]; i < att_first[ty] + 8; i++) {
            cl_ulong sl = 0;
            clGetKernelWorkGroupInfo(x->k[i], x->dev, CL_KERNEL_LOCAL_MEM_SIZE, sizeof sl, &sl, NULL);
            if (sl > x->att_static_local) x->att_static_local = sl;
        }
    size_t rw = OCL_ROW_WG_MAX;
    size_t kmax = x->kwg[OCL_K_RMSNORM] < x->kwg[OCL_K_DUAL_SOFTMAX] ? x->kwg[OCL_K_RMSNORM]
                                                                     : x->kwg[OCL_K_DUAL_SOFTMAX];
    while (rw > 1 && rw > kmax) rw >>= 1;
    x->row_wg = rw;

    x->err = clCreateBuffer(x->ctx, CL_MEM_READ_WRITE, 2 * sizeof(cl_int), NULL, &e);
    if (e == CL_SUCCESS) {
        cl_int zero[2] = {0, 0};
        e = clEnqueueWriteBuffer(x->q, x->err, CL_TRUE, 0, sizeof zero, zero, 0, NULL, NULL);
    }
    if (e != CL_SUCCESS)
        return fail(be, drt_set_error(DRT_ERR_BACKEND, "opencl: error flag buffer: %s (%d)", ocl_err_str(e), e));
    return DRT_OK;
}

/* ---- buffers ------------------------------------------------------------------ */

static drt_status ocl_buf_alloc(drt_backend *be, size_t size, drt_buffer *out) {
    ocl_ctx *x = ocl_of(be);
    if (x->max_alloc && size > x->max_alloc)
        return drt_set_error(DRT_ERR_OOM, "opencl: %zu bytes exceed the device's largest allocation (%llu) on %s", size,
                             (unsigned long long)x->max_alloc, x->name);
    cl_int e;
    cl_mem m = clCreateBuffer(x->ctx, CL_MEM_READ_WRITE, size ? size : 4, NULL, &e);
    if (e != CL_SUCCESS)
        return drt_set_error(e == CL_MEM_OBJECT_ALLOCATION_FAILURE || e == CL_OUT_OF_HOST_MEMORY ||
                                     e == CL_OUT_OF_RESOURCES
                                 ? DRT_ERR_OOM
                                 : DRT_ERR_BACKEND,
                             "opencl: cannot allocate %zu bytes on %s: %s (%d)", size, x->name, ocl_err_str(e), e);
    out->handle = m;
    out->host = NULL; /* not host-visible: the dispatcher mirrors for fallbacks */
    out->size = size;
    return DRT_OK;
}

static void ocl_buf_free(drt_backend *be, drt_buffer *b) {
    if (b->handle) clReleaseMemObject((cl_mem)b->handle);
    b->handle = NULL;
}

static drt_status ocl_upload(drt_backend *be, drt_buffer *b, size_t off, const void *src, size_t n) {
    if (n == 0) return DRT_OK;
    ocl_ctx *x = ocl_of(be);
    cl_int e = clEnqueueWriteBuffer(x->q, (cl_mem)b->handle, CL_TRUE, off, n, src, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "opencl: upload of %zu bytes at %zu: %s (%d)", n, off, ocl_err_str(e), e);
    return DRT_OK;
}

static drt_status ocl_download(drt_backend *be, const drt_buffer *b, size_t off, void *dst, size_t n) {
    if (n == 0) return DRT_OK;
    ocl_ctx *x = ocl_of(be);
    cl_int e = clEnqueueReadBuffer(x->q, (cl_mem)b->handle, CL_TRUE, off, n, dst, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "opencl: download of %zu bytes at %zu: %s (%d)", n, off, ocl_err_str(e),
                             e);
    return DRT_OK;
}

/* ---- routing ------------------------------------------------------------------ */

/* A node is judged by its shapes alone (the conformance harness asks before
 * anything is allocated): element offsets of views must be whole elements,
 * element counts must fit the kernels' int indices. Storage that belongs to
 * another backend, once allocated, is refused too. */
static bool tensor_ok(drt_backend *be, const drt_tensor *t) {
    if (!t) return true;
    /* elements aligned to their size (block formats are read bytewise) */
    size_t es = drt_dtype_align(t->type);
    if (!es) return false;
    if (t->buf ? (t->buf->be != be || t->offs % es) : (t->view_src && t->view_offs % es)) return false;
    return drt_nelem(t) <= 0x7fffffff;
}

/* A q8_0 cache's blocks start with their f16 scale, read and written as 2
 * bytes: 34-byte blocks from an even byte offset (f16 caches are aligned by
 * tensor_ok) */
static bool cache_even(const drt_tensor *t) {
    return (t->buf ? t->offs : t->view_src ? t->view_offs : 0) % 2 == 0;
}

static bool ocl_supports(drt_backend *be, const drt_tensor *t) {
    /* KV caches of every type (f32, f16, q8_0: ops.c checks them) */
    if ((t->op == DRT_OP_KV_WRITE || t->op == DRT_OP_ATTN || t->op == DRT_OP_DIFF_ATTN) &&
        (!cache_even(t->src[1]) || (t->op != DRT_OP_KV_WRITE && !cache_even(t->src[2]))))
        return false;
    ocl_ctx *x = ocl_of(be);
    for (int i = 0; i < DRT_MAX_SRC; i++)
        if (!tensor_ok(be, t->src[i])) return false;
    if (!tensor_ok(be, t)) return false;
    switch (t->op) {
    case DRT_OP_MATMUL: {
        const drt_matmul_shape m = drt_matmul_dims(t);
        if (drt_dtype_block(m.wtype) > 1) return true; /* matmul_q.cl */
#ifdef DIFFRT_HAVE_CLBLAST
        if (x->gemm == OCL_GEMM_CLBLAST && m.wtype == DRT_F32) return true;
#endif
        if (x->mm_regs) return true;
        return ocl_matmul_uses_matvec(m.T, m.trans_w) ? x->mm_vec_ok : x->mm_tiled_ok;
    }
    case DRT_OP_DIFF_ATTN:
    case DRT_OP_ATTN: {
        int dv = (int)t->src[2]->ne[2];
        return x->att_bq_max > 0 && dv <= x->att_dv_max &&
               ocl_attn_local_bytes(x, t) + x->att_static_local <= x->local_mem;
    }
    case DRT_OP_EMBED:
    case DRT_OP_RMSNORM:
    case DRT_OP_ROPE:
    case DRT_OP_DUAL_SOFTMAX:
    case DRT_OP_GROUPNORM:
    case DRT_OP_SWIGLU:
    case DRT_OP_SIGMOID:
    case DRT_OP_ADD:
    case DRT_OP_KV_WRITE:
    case DRT_OP_PERMUTE: return true;
    case DRT_OP_NONE:
    case DRT_OP_COUNT: break;
    }
    return false;
}

static drt_status run_node(ocl_ctx *x, const drt_tensor *t, const drt_exec *ex) {
    switch (t->op) {
    case DRT_OP_EMBED: x->embed_pending = 1; return ocl_embed(x, t);
    case DRT_OP_RMSNORM: return ocl_rmsnorm(x, t);
    case DRT_OP_MATMUL: return ocl_matmul(x, t);
    case DRT_OP_ROPE: return ocl_rope(x, t);
    case DRT_OP_DUAL_SOFTMAX: return ocl_dual_softmax(x, t);
    case DRT_OP_DIFF_ATTN: return ocl_diff_attn(x, t, ex);
    case DRT_OP_ATTN: return ocl_attn(x, t, ex);
    case DRT_OP_GROUPNORM: return ocl_groupnorm(x, t);
    case DRT_OP_SWIGLU: return ocl_swiglu(x, t);
    case DRT_OP_SIGMOID: return ocl_sigmoid(x, t);
    case DRT_OP_ADD: return ocl_add(x, t);
    case DRT_OP_KV_WRITE: return ocl_kv_write(x, t);
    case DRT_OP_PERMUTE: return ocl_permute(x, t);
    case DRT_OP_NONE:
    case DRT_OP_COUNT: break;
    }
    return drt_set_error(DRT_ERR_UNSUPPORTED, "opencl: op %s has no kernel", drt_op_name(t->op));
}

static drt_status ocl_compute(drt_backend *be, drt_tensor *const *nodes, int n, const drt_exec *ex) {
    ocl_ctx *x = ocl_of(be);
    for (int i = 0; i < n; i++) {
        drt_status s = run_node(x, nodes[i], ex);
        if (s != DRT_OK) return s;
    }
    return DRT_OK;
}

/* Waits for the queue; then turns an out-of-range token id that an EMBED
 * kernel met (it never reads one) into the same error the reference gives. */
static drt_status ocl_synchronize(drt_backend *be) {
    ocl_ctx *x = ocl_of(be);
    cl_int e = clFinish(x->q);
    if (e != CL_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "opencl: clFinish on %s: %s (%d)", x->name, ocl_err_str(e), e);
    if (!x->embed_pending) return DRT_OK;
    x->embed_pending = 0;
    cl_int flag[2] = {0, 0};
    e = clEnqueueReadBuffer(x->q, x->err, CL_TRUE, 0, sizeof flag, flag, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "opencl: reading the EMBED flag: %s (%d)", ocl_err_str(e), e);
    if (flag[0] == 0) return DRT_OK;
    cl_int zero[2] = {0, 0};
    clEnqueueWriteBuffer(x->q, x->err, CL_TRUE, 0, sizeof zero, zero, 0, NULL, NULL);
    return drt_set_error(DRT_ERR_INVALID_ARG, "EMBED: token id %d at position %d is outside [0, %d)", flag[1],
                         flag[0] - 1, x->embed_vocab);
}

static const char *ocl_kernel_variant(drt_backend *be, const drt_tensor *t) {
    ocl_ctx *x = ocl_of(be);
    switch (t->op) {
    case DRT_OP_MATMUL:
        if (drt_dtype_block(t->src[1]->type) > 1) return ocl_matmul_q_variant(x, t);
        return x->mm_name[ocl_matmul_variant(x, t)];
    case DRT_OP_DIFF_ATTN:
    case DRT_OP_ATTN: return ocl_attn_variant(x, t);
    default: return NULL;
    }
}

const drt_backend_ops drt_opencl_backend_ops = {
    .name = "opencl",
    .probe = ocl_probe,
    .device_name = ocl_device_name,
    .device_props = ocl_device_props,
    .init = ocl_init,
    .shutdown = ocl_shutdown,
    .buf_alloc = ocl_buf_alloc,
    .buf_free = ocl_buf_free,
    .upload = ocl_upload,
    .download = ocl_download,
    .supports = ocl_supports,
    .compute = ocl_compute,
    .synchronize = ocl_synchronize,
    .kernel_variant = ocl_kernel_variant,
};

/* the module entry point: libdiffrt-opencl.so (runtime/drt_module.h) */
DRT_DEFINE_BACKEND_MODULE(drt_opencl_backend_ops)
