/* OpenCL: the kernels (name and program of each ocl_kernel_id), how one is
 * launched (arguments set in order, the first failure kept and reported by
 * ocl_run with the argument's index, global sizes rounded up to the work
 * group), and OpenCL's error names. The op families (matmul.c,
 * attention.c, norm.c, elementwise.c) launch through here; backend.c
 * creates the kernels from the table. */
#include <stddef.h>
#include <stdint.h>

#include "drt_error.h"
#include "ocl.h"

const ocl_kernel_def ocl_kernels[OCL_K_COUNT] = {
    [OCL_K_EMBED_F32] = {"embed_f32", OCL_P_ELEMENTWISE},
    [OCL_K_EMBED_F16] = {"embed_f16", OCL_P_ELEMENTWISE},
    [OCL_K_EMBED_BF16] = {"embed_bf16", OCL_P_ELEMENTWISE},
    [OCL_K_ROPE] = {"rope", OCL_P_ELEMENTWISE},
    [OCL_K_SWIGLU] = {"swiglu", OCL_P_ELEMENTWISE},
    [OCL_K_SIGMOID] = {"sigmoid", OCL_P_ELEMENTWISE},
    [OCL_K_ADD] = {"add", OCL_P_ELEMENTWISE},
    [OCL_K_KV_WRITE] = {"kv_write", OCL_P_ELEMENTWISE},
    [OCL_K_PERMUTE] = {"permute", OCL_P_ELEMENTWISE},
    [OCL_K_RMSNORM] = {"rmsnorm", OCL_P_NORM},
    [OCL_K_MATVEC_F32] = {"matvec_f32", OCL_P_MATMUL},
    [OCL_K_MATVEC_F16] = {"matvec_f16", OCL_P_MATMUL},
    [OCL_K_MATVEC_BF16] = {"matvec_bf16", OCL_P_MATMUL},
    [OCL_K_MATMUL_F32] = {"matmul_f32", OCL_P_MATMUL},
    [OCL_K_MATMUL_F16] = {"matmul_f16", OCL_P_MATMUL},
    [OCL_K_MATMUL_BF16] = {"matmul_bf16", OCL_P_MATMUL},
    [OCL_K_DUAL_SOFTMAX] = {"dual_softmax", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q1] = {"diff_attn_q1", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q2] = {"diff_attn_q2", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q4] = {"diff_attn_q4", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q8] = {"diff_attn_q8", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q1] = {"attn_q1", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q2] = {"attn_q2", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q4] = {"attn_q4", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q8] = {"attn_q8", OCL_P_ATTENTION},
    [OCL_K_ATTN_COMBINE] = {"attn_combine", OCL_P_ATTENTION},
    [OCL_K_GEMV_F32] = {"gemv_f32", OCL_P_MATMUL},
    [OCL_K_GEMV_F16] = {"gemv_f16", OCL_P_MATMUL},
    [OCL_K_GEMV_BF16] = {"gemv_bf16", OCL_P_MATMUL},
    [OCL_K_DOT_F32] = {"dot_f32", OCL_P_MATMUL},
    [OCL_K_DOT_F16] = {"dot_f16", OCL_P_MATMUL},
    [OCL_K_DOT_BF16] = {"dot_bf16", OCL_P_MATMUL},
    [OCL_K_ROWS_F32] = {"rows_f32", OCL_P_MATMUL},
    [OCL_K_ROWS_F16] = {"rows_f16", OCL_P_MATMUL},
    [OCL_K_ROWS_BF16] = {"rows_bf16", OCL_P_MATMUL},
    [OCL_K_OUTER_F32] = {"outer_f32", OCL_P_MATMUL},
    [OCL_K_OUTER_F16] = {"outer_f16", OCL_P_MATMUL},
    [OCL_K_OUTER_BF16] = {"outer_bf16", OCL_P_MATMUL},
    [OCL_K_DIFF_ATTN_FLASH] = {"diff_attn_flash", OCL_P_ATTENTION},
    [OCL_K_ATTN_FLASH] = {"attn_flash", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_DECODE] = {"diff_attn_decode", OCL_P_ATTENTION},
    [OCL_K_ATTN_DECODE] = {"attn_decode", OCL_P_ATTENTION},
    [OCL_K_MATMUL_Q8_0] = {"matmul_q8_0", OCL_P_MATMUL_Q},
    [OCL_K_MATMUL_Q4_0] = {"matmul_q4_0", OCL_P_MATMUL_Q},
    [OCL_K_GEMV_Q8_0] = {"gemv_q8_0", OCL_P_MATMUL_Q},
    [OCL_K_GEMV_Q4_0] = {"gemv_q4_0", OCL_P_MATMUL_Q},
    [OCL_K_DOT_Q8_0] = {"dot_q8_0", OCL_P_MATMUL_Q},
    [OCL_K_DOT_Q4_0] = {"dot_q4_0", OCL_P_MATMUL_Q},
    [OCL_K_ROWS_Q8_0] = {"rows_q8_0", OCL_P_MATMUL_Q},
    [OCL_K_ROWS_Q4_0] = {"rows_q4_0", OCL_P_MATMUL_Q},
    [OCL_K_DIFF_ATTN_Q1_F16] = {"diff_attn_q1_f16", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q2_F16] = {"diff_attn_q2_f16", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q4_F16] = {"diff_attn_q4_f16", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q8_F16] = {"diff_attn_q8_f16", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q1_F16] = {"attn_q1_f16", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q2_F16] = {"attn_q2_f16", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q4_F16] = {"attn_q4_f16", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q8_F16] = {"attn_q8_f16", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_FLASH_F16] = {"diff_attn_flash_f16", OCL_P_ATTENTION},
    [OCL_K_ATTN_FLASH_F16] = {"attn_flash_f16", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_DECODE_F16] = {"diff_attn_decode_f16", OCL_P_ATTENTION},
    [OCL_K_ATTN_DECODE_F16] = {"attn_decode_f16", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q1_Q8_0] = {"diff_attn_q1_q8_0", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q2_Q8_0] = {"diff_attn_q2_q8_0", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q4_Q8_0] = {"diff_attn_q4_q8_0", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_Q8_Q8_0] = {"diff_attn_q8_q8_0", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q1_Q8_0] = {"attn_q1_q8_0", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q2_Q8_0] = {"attn_q2_q8_0", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q4_Q8_0] = {"attn_q4_q8_0", OCL_P_ATTENTION},
    [OCL_K_ATTN_Q8_Q8_0] = {"attn_q8_q8_0", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_FLASH_Q8_0] = {"diff_attn_flash_q8_0", OCL_P_ATTENTION},
    [OCL_K_ATTN_FLASH_Q8_0] = {"attn_flash_q8_0", OCL_P_ATTENTION},
    [OCL_K_DIFF_ATTN_DECODE_Q8_0] = {"diff_attn_decode_q8_0", OCL_P_ATTENTION},
    [OCL_K_ATTN_DECODE_Q8_0] = {"attn_decode_q8_0", OCL_P_ATTENTION},
    [OCL_K_KV_WRITE_F16] = {"kv_write_f16", OCL_P_ELEMENTWISE},
    [OCL_K_KV_WRITE_Q8_0] = {"kv_write_q8_0", OCL_P_ELEMENTWISE},
};

const char *ocl_err_str(cl_int e) {
    switch (e) {
    case CL_SUCCESS: return "CL_SUCCESS";
    case CL_DEVICE_NOT_FOUND: return "CL_DEVICE_NOT_FOUND";
    case CL_DEVICE_NOT_AVAILABLE: return "CL_DEVICE_NOT_AVAILABLE";
    case CL_COMPILER_NOT_AVAILABLE: return "CL_COMPILER_NOT_AVAILABLE";
    case CL_MEM_OBJECT_ALLOCATION_FAILURE: return "CL_MEM_OBJECT_ALLOCATION_FAILURE";
    case CL_OUT_OF_RESOURCES: return "CL_OUT_OF_RESOURCES";
    case CL_OUT_OF_HOST_MEMORY: return "CL_OUT_OF_HOST_MEMORY";
    case CL_BUILD_PROGRAM_FAILURE: return "CL_BUILD_PROGRAM_FAILURE";
    case CL_INVALID_VALUE: return "CL_INVALID_VALUE";
    case CL_INVALID_DEVICE: return "CL_INVALID_DEVICE";
    case CL_INVALID_CONTEXT: return "CL_INVALID_CONTEXT";
    case CL_INVALID_COMMAND_QUEUE: return "CL_INVALID_COMMAND_QUEUE";
    case CL_INVALID_MEM_OBJECT: return "CL_INVALID_MEM_OBJECT";
    case CL_INVALID_BUILD_OPTIONS: return "CL_INVALID_BUILD_OPTIONS";
    case CL_INVALID_PROGRAM_EXECUTABLE: return "CL_INVALID_PROGRAM_EXECUTABLE";
    case CL_INVALID_KERNEL_NAME: return "CL_INVALID_KERNEL_NAME";
    case CL_INVALID_KERNEL: return "CL_INVALID_KERNEL";
    case CL_INVALID_ARG_INDEX: return "CL_INVALID_ARG_INDEX";
    case CL_INVALID_ARG_VALUE: return "CL_INVALID_ARG_VALUE";
    case CL_INVALID_ARG_SIZE: return "CL_INVALID_ARG_SIZE";
    case CL_INVALID_KERNEL_ARGS: return "CL_INVALID_KERNEL_ARGS";
    case CL_INVALID_WORK_DIMENSION: return "CL_INVALID_WORK_DIMENSION";
    case CL_INVALID_WORK_GROUP_SIZE: return "CL_INVALID_WORK_GROUP_SIZE";
    case CL_INVALID_WORK_ITEM_SIZE: return "CL_INVALID_WORK_ITEM_SIZE";
    case CL_INVALID_GLOBAL_OFFSET: return "CL_INVALID_GLOBAL_OFFSET";
    case CL_INVALID_BUFFER_SIZE: return "CL_INVALID_BUFFER_SIZE";
    case CL_INVALID_GLOBAL_WORK_SIZE: return "CL_INVALID_GLOBAL_WORK_SIZE";
    case CL_INVALID_PLATFORM: return "CL_INVALID_PLATFORM";
    case -1001: return "CL_PLATFORM_NOT_FOUND_KHR";
    default: return "CL error";
    }
}

/* ---- kernel launches ------------------------------------------------------------ */

void ocl_begin(ocl_call *c, ocl_ctx *x, ocl_kernel_id id) {
    *c = (ocl_call){x, id, 0, 0, 0, NULL};
}

static void set_arg(ocl_call *c, size_t size, const void *val) {
    cl_int e = clSetKernelArg(c->x->k[c->id], c->n, size, val);
    if (e != CL_SUCCESS && c->err == CL_SUCCESS) {
        c->err = e;
        c->bad = c->n;
    }
    c->n++;
}

void ocl_arg_mem(ocl_call *c, cl_mem m) {
    set_arg(c, sizeof m, &m);
}

void ocl_arg_tensor(ocl_call *c, const drt_tensor *t) {
    if (t->offs % drt_dtype_size(t->type) && !c->misaligned) c->misaligned = t;
    ocl_arg_mem(c, ocl_mem(t));
    ocl_arg_ulong(c, ocl_elem_off(t));
}

void ocl_arg_ulong(ocl_call *c, size_t v) {
    cl_ulong u = v;
    set_arg(c, sizeof u, &u);
}

void ocl_arg_int(ocl_call *c, int v) {
    cl_int i = v;
    set_arg(c, sizeof i, &i);
}

void ocl_arg_float(ocl_call *c, float v) {
    cl_float f = v;
    set_arg(c, sizeof f, &f);
}

void ocl_arg_local(ocl_call *c, size_t bytes) {
    set_arg(c, bytes ? bytes : 4, NULL);
}

drt_status ocl_run(ocl_call *c, cl_uint dims, const size_t *global, const size_t *local) {
    const char *name = ocl_kernels[c->id].name;
    if (c->misaligned)
        return drt_set_error(DRT_ERR_BACKEND,
                             "opencl: %s: tensor %s at byte offset %zu is not a whole number of %s elements", name,
                             c->misaligned->name, c->misaligned->offs, drt_dtype_name(c->misaligned->type));
    if (c->err != CL_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "opencl: %s: argument %u: %s (%d)", name, c->bad, ocl_err_str(c->err),
                             c->err);
    size_t g[3];
    for (cl_uint i = 0; i < dims; i++) {
        g[i] = global[i];
        if (g[i] == 0) return DRT_OK; /* nothing to do (OpenCL 1.2 rejects empty ranges) */
        if (local) g[i] = (g[i] + local[i] - 1) / local[i] * local[i];
    }
    cl_int e = clEnqueueNDRangeKernel(c->x->q, c->x->k[c->id], dims, NULL, g, local, 0, NULL, NULL);
    if (e != CL_SUCCESS)
        return drt_set_error(DRT_ERR_BACKEND, "opencl: enqueue %s on %s: %s (%d)", name, c->x->name, ocl_err_str(e), e);
    return DRT_OK;
}

drt_status ocl_run_1d(ocl_call *c, int64_t n) {
    size_t g = (size_t)n, l = 64;
    return ocl_run(c, 1, &g, &l);
}

size_t ocl_row_wg(const ocl_ctx *x, int64_t n) {
    size_t wg = 32;
    while (wg < x->row_wg && (int64_t)wg * 4 < n) wg *= 2;
    return wg < x->row_wg ? wg : x->row_wg;
}
