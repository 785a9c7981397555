/* cuemu: runs the CUDA backend's kernels on the host CPU, for testing on a
 * machine without a GPU. Not part of the library.
 *
 * The kernel sources (backends/cuda/ *.cu) are compiled as C++ with this
 * header included first (CU_EMU defined). Every CUDA thread becomes a fiber
 * (its own stack, cooperative switching, one OS thread): a block's fibers run
 * until they reach __syncthreads, a warp shuffle or an mma, which are real
 * barriers over the block's / warp's fibers, so a kernel runs exactly its
 * per-thread code with the synchronisation it declares. A barrier that not
 * every thread reaches is reported as a deadlock. mma.m16n8k16 is computed
 * from the 32 lanes' fragments using the PTX ISA's fragment layout. Dynamic
 * shared memory is poisoned (NaN bytes) before every block.
 *
 * cuemu.cc also implements the part of the CUDA runtime and cuBLAS the
 * backend calls (device memory = host memory, a stream runs its work at
 * once unless it is being captured, stream capture records launches into a
 * graph that cudaGraphLaunch replays; cuBLAS GEMMs are reference loops with
 * cuBLAS's argument checks). So backend.c runs unmodified on top of it. */
#ifndef CUEMU_H
#define CUEMU_H

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <tuple>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math_constants.h>
#include <vector_functions.h>
#include <vector_types.h>

#define CU_EMU 1

#undef __global__
#undef __device__
#undef __host__
#undef __forceinline__
#undef __shared__
#undef __launch_bounds__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
/* one block runs at a time: a function-static array is the block's shared memory */
#define __shared__ static
#define __launch_bounds__(...)

namespace cuemu {

struct fiber;
extern fiber *cur;
extern dim3 grid_dim, block_dim, block_idx;
const dim3 &thread_idx();

void syncthreads();
float shfl_xor(float v, int lanemask);
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);
void *dyn_smem();

/* Runs (or, while st is being captured, records) body over grid x block. */
void launch_body(std::function<void()> body, dim3 grid, dim3 block, size_t smem, cudaStream_t st, const void *kernel);

template <typename... P> struct launcher {
    void (*k)(P...);
    dim3 grid, block;
    size_t smem;
    cudaStream_t st;
    template <typename... A> void operator()(A... a) const {
        std::tuple<P...> args(static_cast<P>(a)...); /* by value, as a launch copies them */
        void (*fn)(P...) = k;
        launch_body([fn, args]() { std::apply(fn, args); }, grid, block, smem, st, reinterpret_cast<const void *>(fn));
    }
};

template <typename... P> launcher<P...> launch(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t st) {
    return launcher<P...>{k, grid, block, smem, st};
}

} // namespace cuemu

#define threadIdx (cuemu::thread_idx())
#define blockIdx (cuemu::block_idx)
#define blockDim (cuemu::block_dim)
#define gridDim (cuemu::grid_dim)

inline void __syncthreads() {
    cuemu::syncthreads();
}
inline float __shfl_xor_sync(unsigned, float v, int lanemask) {
    return cuemu::shfl_xor(v, lanemask);
}
template <typename T> inline T __ldg(const T *p) {
    return *p;
}
inline int atomicExch(int *p, int v) { /* one OS thread runs every fiber */
    int o = *p;
    *p = v;
    return o;
}
inline void __trap() {
    abort();
}
inline float __int_as_float(unsigned int i) {
    float f;
    memcpy(&f, &i, 4);
    return f;
}
using std::max;
using std::min;

#endif
