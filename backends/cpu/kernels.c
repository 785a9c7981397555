/* This ISA's kernel table (cpu_fast.h); compiled once per ISA. */
#include "cpu_fast.h"
#include "simd.h"

#define STR2(x) #x
#define STR(x) STR2(x)

void KFN(cpu_matmul)(void *args, int ith, int nth);
int64_t KFN(cpu_mm_scratch_floats)(const cpu_mm_args *a);
int64_t KFN(cpu_mm_xpack_floats)(const cpu_mm_args *a);
int KFN(cpu_mm_phases)(const cpu_mm_args *a);
#if defined(DRT_ISA_avx512)
void KFN(cpu_mm_pack)(void *args, int ith, int nth);
#endif
void KFN(cpu_attn)(void *args, int ith, int nth);
void KFN(cpu_attn_combine)(void *args, int ith, int nth);
int64_t KFN(cpu_attn_scratch_floats)(const cpu_attn_args *a);
void KFN(cpu_rmsnorm)(void *args, int ith, int nth);
void KFN(cpu_groupnorm)(void *args, int ith, int nth);
void KFN(cpu_rope)(void *args, int ith, int nth);
void KFN(cpu_swiglu)(void *args, int ith, int nth);
void KFN(cpu_sigmoid)(void *args, int ith, int nth);
void KFN(cpu_add)(void *args, int ith, int nth);
void KFN(cpu_embed)(void *args, int ith, int nth);
void KFN(cpu_dual_softmax)(void *args, int ith, int nth);
void KFN(cpu_kv_row)(const float *x, void *y, drt_dtype t, int64_t n);

const cpu_kernels KFN(cpu_kernels) = {
    .isa = STR(DRT_ISA),
    .vlen = VL,
    .gemv_max_t = CPU_GEMV_MAX_T,
    .matmul = KFN(cpu_matmul),
    .mm_scratch_floats = KFN(cpu_mm_scratch_floats),
    .mm_xpack_floats = KFN(cpu_mm_xpack_floats),
    .mm_phases = KFN(cpu_mm_phases),
#if defined(DRT_ISA_avx512)
    .mm_pack = KFN(cpu_mm_pack),
#endif
    .attn = KFN(cpu_attn),
    .attn_combine = KFN(cpu_attn_combine),
    .attn_scratch_floats = KFN(cpu_attn_scratch_floats),
    .rmsnorm = KFN(cpu_rmsnorm),
    .groupnorm = KFN(cpu_groupnorm),
    .rope = KFN(cpu_rope),
    .swiglu = KFN(cpu_swiglu),
    .sigmoid = KFN(cpu_sigmoid),
    .add = KFN(cpu_add),
    .embed = KFN(cpu_embed),
    .dual_softmax = KFN(cpu_dual_softmax),
    .kv_row = KFN(cpu_kv_row),
};
