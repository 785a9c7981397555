/* Device helpers shared by the CUDA kernel files (not a public header). */
#ifndef DRT_CUDA_COMMON_CUH
#define DRT_CUDA_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math_constants.h>

#include "cuda_ops.h"

extern "C" {
#include "drt_error.h"
}

/* Kernel launches and dynamic shared memory go through these two macros so
 * that the same sources also build for the host emulator (backends/cuda/emu,
 * CU_EMU defined), which runs every kernel on the CPU for the tests of a
 * machine without a GPU. On nvcc they are exactly <<<...>>> and extern
 * __shared__. Use: CU_LAUNCH(kernel, grid, block, smem, stream)(args...). */
#ifdef CU_EMU
#define CU_LAUNCH(k, grid, block, smem, stream) cuemu::launch((k), (grid), (block), (smem), (stream))
#define CU_DYN_SMEM(type, name) type *name = reinterpret_cast<type *>(cuemu::dyn_smem())
#else
#define CU_LAUNCH(k, grid, block, smem, stream) k<<<(grid), (block), (smem), (stream)>>>
#define CU_DYN_SMEM(type, name) extern __shared__ __align__(16) type name[]
#endif

/* After a launch: the launch error, as a drt_status naming the kernel. */
static inline drt_status cu_launched(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return drt_set_error(DRT_ERR_BACKEND, "cuda: %s: %s", what, cudaGetErrorString(e));
    return DRT_OK;
}

/* grid size for a grid-stride loop over n items with `block` threads:
 * enough blocks to fill the device a few times over, never more than needed */
static inline unsigned cu_grid_for(const cu_ctx *c, int64_t n, int block) {
    int64_t want = (n + block - 1) / block;
    int64_t cap = (int64_t)c->n_sm * 16;
    if (want > cap) want = cap;
    return (unsigned)(want > 0 ? want : 1);
}

/* element i of a weight array of dtype t (DRT_F32/F16/BF16), as float: exact */
__device__ __forceinline__ float cu_load_weight(const void *w, int t, int64_t i) {
    if (t == DRT_F16) return __half2float(((const __half *)w)[i]);
    if (t == DRT_BF16) return __bfloat162float(((const __nv_bfloat16 *)w)[i]);
    return ((const float *)w)[i];
}

__device__ __forceinline__ float cu_warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float cu_warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* Sum over the block (blockDim.x a multiple of 32, at most 1024). red is
 * 32 floats of shared memory. Every thread gets the total. Contains
 * __syncthreads: call from all threads. */
__device__ __forceinline__ float cu_block_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_sum(v);
    __syncthreads(); /* red may still be read from a previous call */
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : 0.0f;
    return cu_warp_sum(t);
}

__device__ __forceinline__ float cu_block_max(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    v = cu_warp_max(v);
    __syncthreads();
    if (lane == 0) red[warp] = v;
    __syncthreads();
    float t = lane < nw ? red[lane] : -CUDART_INF_F;
    return cu_warp_max(t);
}

#endif
