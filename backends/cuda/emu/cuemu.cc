/* cuemu: fibers for CUDA threads, and the slice of the CUDA runtime and of
 * cuBLAS that backends/cuda uses, on the host. See cuemu.h. Test-only code:
 * it favours checks over speed (launch configurations, shared-memory
 * attributes, capture rules, cuBLAS leading dimensions and copy ranges are
 * validated as strictly as the real libraries do, or more). */
#include "cuemu.h"

#if !defined(__x86_64__)
#include <ucontext.h>
#endif

#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/common_interface_defs.h>
#define CUEMU_ASAN 1
#endif

/* ======================================================================= */
/* fibers, barriers, warp collectives                                        */
/* ======================================================================= */

namespace cuemu {

struct barrier {
    int count = 0, arrived = 0;
    uint64_t gen = 0;
};

struct warp_slot {
    uint32_t a[4];
    uint32_t b[2];
    float v;
};

struct warp_state {
    barrier bar;
    warp_slot slot[2][32]; /* double-buffered: collective k uses slot[k & 1] */
};

/* Context switching. On x86-64 a minimal switch (callee-saved registers,
 * MXCSR and the x87 control word on the old stack, then the stack pointer):
 * no system call per switch, unlike swapcontext, which saves the signal
 * mask; elsewhere ucontext. */
#if defined(__x86_64__)
extern "C" void cuemu_switch(void **save_sp, void *load_sp);
__asm__(".text\n"
        ".globl cuemu_switch\n"
        ".type cuemu_switch,@function\n"
        "cuemu_switch:\n"
        "  pushq %rbp\n  pushq %rbx\n  pushq %r12\n  pushq %r13\n  pushq %r14\n  pushq %r15\n"
        "  subq $8, %rsp\n  stmxcsr (%rsp)\n  fnstcw 4(%rsp)\n"
        "  movq %rsp, (%rdi)\n  movq %rsi, %rsp\n"
        "  ldmxcsr (%rsp)\n  fldcw 4(%rsp)\n  addq $8, %rsp\n"
        "  popq %r15\n  popq %r14\n  popq %r13\n  popq %r12\n  popq %rbx\n  popq %rbp\n"
        "  ret\n"
        ".size cuemu_switch,.-cuemu_switch\n");
struct context {
    void *sp = nullptr;
};
#define CTX_SWITCH(from, to) cuemu_switch(&(from)->sp, (to)->sp)
#else
struct context {
    ucontext_t uc;
};
#define CTX_SWITCH(from, to) swapcontext(&(from)->uc, &(to)->uc)
#endif

struct fiber {
    context ctx;
    std::unique_ptr<char[]> stack;
    dim3 tid;
    int index = 0;
    bool done = false;
    barrier *waiting = nullptr;
    uint64_t wait_gen = 0;
    uint64_t wsync = 0; /* warp collectives this thread has entered */
#ifdef CUEMU_ASAN
    void *fake_stack = nullptr;
#endif
};

static const size_t STACK_BYTES = 256 * 1024;

fiber *cur = nullptr;
dim3 grid_dim, block_dim, block_idx;
static context sched_ctx;
static std::vector<std::unique_ptr<fiber>> fibers;
static std::vector<warp_state> warps;
static barrier block_bar;
static std::vector<unsigned char> smem;
static const std::function<void()> *cur_body;
static int n_done;
#ifdef CUEMU_ASAN
static const void *sched_bottom;
static size_t sched_size;
#endif

const dim3 &thread_idx() {
    return cur->tid;
}
void *dyn_smem() {
    return smem.data();
}

/* fiber -> scheduler */
static void yield() {
    fiber *me = cur;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(&me->fake_stack, sched_bottom, sched_size);
#endif
    CTX_SWITCH(&me->ctx, &sched_ctx);
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(me->fake_stack, &sched_bottom, &sched_size);
#endif
}

/* scheduler -> fiber f */
static void resume(fiber *f) {
    cur = f;
#ifdef CUEMU_ASAN
    void *fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack.get(), STACK_BYTES);
#endif
    CTX_SWITCH(&sched_ctx, &f->ctx);
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

static void fiber_main() {
#ifdef CUEMU_ASAN
    __sanitizer_finish_switch_fiber(nullptr, &sched_bottom, &sched_size);
#endif
    (*cur_body)();
    cur->done = true;
    n_done++;
#ifdef CUEMU_ASAN
    __sanitizer_start_switch_fiber(nullptr, sched_bottom, sched_size);
#endif
    CTX_SWITCH(&cur->ctx, &sched_ctx); /* never resumed */
}

static void wait(barrier &b) {
    const uint64_t g = b.gen;
    if (++b.arrived == b.count) {
        b.arrived = 0;
        b.gen++;
        return;
    }
    cur->waiting = &b;
    cur->wait_gen = g;
    yield();
    cur->waiting = nullptr;
}

void syncthreads() {
    wait(block_bar);
}

float shfl_xor(float v, int lanemask) {
    warp_state &w = warps[cur->index / 32];
    const int lane = cur->index % 32, buf = (int)(cur->wsync++ & 1);
    w.slot[buf][lane].v = v;
    wait(w.bar);
    const int src = lane ^ lanemask;
    return src < w.bar.count ? w.slot[buf][src].v : v;
}

static float half_of(uint32_t word, int hi) {
    __half_raw r;
    r.x = (unsigned short)(hi ? word >> 16 : word & 0xffffu);
    return __half2float(__half(r));
}

/* D = A B + C for the warp; fragment layout of PTX mma.m16n8k16 (.f16):
 * A[r][k] is half (k&1) of register (r>=8) + 2(k>=8) of lane 4(r&7) + (k&7)/2;
 * B[k][n] is half (k&1) of register (k>=8) of lane 4n + (k&7)/2;
 * D[r][n] is element 2(r>=8) + (n&1) of lane 4(r&7) + n/2. */
void mma_m16n8k16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    warp_state &w = warps[cur->index / 32];
    const int lane = cur->index % 32, buf = (int)(cur->wsync++ & 1);
    if (w.bar.count != 32) {
        fprintf(stderr, "cuemu: mma in a partial warp\n");
        abort();
    }
    warp_slot *s = w.slot[buf];
    memcpy(s[lane].a, a, sizeof s[lane].a);
    s[lane].b[0] = b0;
    s[lane].b[1] = b1;
    wait(w.bar);
    const int grp = lane >> 2, tig = lane & 3;
    for (int i = 0; i < 4; i++) {
        const int r = grp + (i >> 1) * 8, n = 2 * tig + (i & 1);
        float acc = d[i];
        for (int k = 0; k < 16; k++) {
            const float av = half_of(s[4 * (r & 7) + (k & 7) / 2].a[(r >= 8) + 2 * (k >= 8)], k & 1);
            const float bv = half_of(s[4 * n + (k & 7) / 2].b[k >= 8], k & 1);
            acc += av * bv;
        }
        d[i] = acc;
    }
}

/* out of line: getcontext returns twice, keep it away from run_block's locals */
static __attribute__((noinline)) void init_fiber(fiber &f, int i) {
    f.tid = dim3(i % block_dim.x, (i / block_dim.x) % block_dim.y, i / (block_dim.x * block_dim.y));
    f.index = i;
    f.done = false;
    f.waiting = nullptr;
    f.wsync = 0;
#if defined(__x86_64__)
    /* a stack cuemu_switch can "return" into fiber_main from, as if called:
     * [mxcsr, x87 cw][r15 r14 r13 r12 rbx rbp][return address][0], the
     * return address 16-byte aligned so fiber_main starts with rsp = 8 mod 16 */
    uintptr_t top = ((uintptr_t)f.stack.get() + STACK_BYTES) & ~(uintptr_t)15;
    uint64_t *sp = (uint64_t *)(top - 16);
    sp[0] = (uint64_t)(uintptr_t)&fiber_main;
    sp[1] = 0;
    sp -= 6;
    memset(sp, 0, 6 * sizeof *sp);
    sp -= 1;
    const uint32_t mxcsr = 0x1f80, fpucw = 0x037f;
    memcpy(sp, &mxcsr, 4);
    memcpy((char *)sp + 4, &fpucw, 2);
    f.ctx.sp = sp;
#else
    getcontext(&f.ctx.uc);
    f.ctx.uc.uc_stack.ss_sp = f.stack.get();
    f.ctx.uc.uc_stack.ss_size = STACK_BYTES;
    f.ctx.uc.uc_link = nullptr;
    makecontext(&f.ctx.uc, fiber_main, 0);
#endif
}

static void run_block(int n) {
    n_done = 0;
    block_bar = barrier{n, 0, 0};
    for (int w = 0; w * 32 < n; w++) warps[w].bar = barrier{std::min(32, n - 32 * w), 0, 0};
    for (int i = 0; i < n; i++) init_fiber(*fibers[i], i);
    while (n_done < n) {
        bool ran = false;
        for (int i = 0; i < n; i++) {
            fiber &f = *fibers[i];
            if (f.done || (f.waiting && f.waiting->gen == f.wait_gen)) continue;
            resume(&f);
            ran = true;
        }
        if (!ran) {
            fprintf(stderr,
                    "cuemu: deadlock in block (%u,%u,%u): %d of %d threads finished, the others wait at a "
                    "barrier not every thread reaches\n",
                    block_idx.x, block_idx.y, block_idx.z, n_done, n);
            abort();
        }
    }
}

struct launch_rec {
    std::function<void()> body;
    dim3 grid, block;
    size_t smem;
};

static void run_launch(const launch_rec &L) {
    const int n = (int)(L.block.x * L.block.y * L.block.z);
    while ((int)fibers.size() < n) {
        fibers.emplace_back(new fiber);
        fibers.back()->stack.reset(new char[STACK_BYTES]);
    }
    if ((int)warps.size() * 32 < n) warps.resize((size_t)(n + 31) / 32);
    smem.assign(L.smem > 16 ? L.smem : 16, 0);
    grid_dim = L.grid;
    block_dim = L.block;
    cur_body = &L.body;
    for (unsigned z = 0; z < L.grid.z; z++)
        for (unsigned y = 0; y < L.grid.y; y++)
            for (unsigned x = 0; x < L.grid.x; x++) {
                block_idx = dim3(x, y, z);
                memset(smem.data(), 0xff, smem.size()); /* NaN in f32 and f16 */
                run_block(n);
            }
    cur = nullptr;
}

} // namespace cuemu

/* ======================================================================= */
/* the CUDA runtime                                                          */
/* ======================================================================= */

struct CUstream_st {
    bool capturing = false, invalid = false;
    std::vector<std::function<void()>> rec;
};
struct CUgraph_st {
    std::vector<std::function<void()>> ops;
};
struct CUgraphExec_st {
    std::vector<std::function<void()>> ops;
};

static cudaError_t g_last = cudaSuccess;
static int g_capturing = 0;
static std::map<const void *, int> g_smem_attr; /* kernel -> max dynamic shared bytes */
static std::map<uintptr_t, size_t> g_allocs;    /* device allocations */
static const int OPTIN_SMEM = 227 * 1024;

static cudaError_t fail(cudaError_t e) {
    g_last = e;
    return e;
}

static int env_int(const char *name, int dflt) {
    const char *s = getenv(name);
    return s && *s ? atoi(s) : dflt;
}

/* A call that is illegal while any stream captures invalidates the capture. */
static bool capture_violation() {
    if (!g_capturing) return false;
    g_last = cudaErrorStreamCaptureUnsupported;
    return true;
}

static void enqueue(cudaStream_t s, std::function<void()> op) {
    if (s && s->capturing)
        s->rec.push_back(std::move(op));
    else
        op();
}

/* [p, p+n) inside one live device allocation */
static bool device_range(const void *p, size_t n) {
    auto it = g_allocs.upper_bound((uintptr_t)p);
    if (it == g_allocs.begin()) return false;
    --it;
    return (uintptr_t)p + n <= it->first + it->second;
}

void cuemu::launch_body(std::function<void()> body, dim3 grid, dim3 block, size_t smem_bytes, cudaStream_t st,
                        const void *kernel) {
    const unsigned long long nt = (unsigned long long)block.x * block.y * block.z;
    if (nt == 0 || nt > 1024 || grid.x == 0 || grid.y == 0 || grid.z == 0 || grid.y > 65535 || grid.z > 65535) {
        fail(cudaErrorInvalidConfiguration);
        return;
    }
    auto it = g_smem_attr.find(kernel);
    const size_t limit = it != g_smem_attr.end() ? (size_t)it->second : 48 * 1024;
    if (smem_bytes > limit) {
        fail(cudaErrorInvalidValue);
        return;
    }
    auto rec = std::make_shared<launch_rec>(launch_rec{std::move(body), grid, block, smem_bytes});
    enqueue(st, [rec]() { run_launch(*rec); });
}

extern "C" {

cudaError_t cudaGetLastError(void) {
    cudaError_t e = g_last;
    g_last = cudaSuccess;
    return e;
}

const char *cudaGetErrorString(cudaError_t e) {
    switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorStreamCaptureUnsupported: return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated: return "operation failed due to a previous error during capture";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    default: return "cuemu: unknown error";
    }
}

cudaError_t cudaGetDeviceCount(int *count) {
    const int n = env_int("CUEMU_DEVICES", 1);
    *count = 0;
    if (n <= 0) return fail(cudaErrorNoDevice);
    *count = n;
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= env_int("CUEMU_DEVICES", 1)) return fail(cudaErrorInvalidDevice);
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attr, int device) {
    if (device < 0 || device >= env_int("CUEMU_DEVICES", 1)) return fail(cudaErrorInvalidDevice);
    switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = env_int("CUEMU_CC_MAJOR", 9); break;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; break;
    case cudaDevAttrMultiProcessorCount: *value = env_int("CUEMU_SMS", 16); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = OPTIN_SMEM; break;
    default: return fail(cudaErrorInvalidValue);
    }
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *p, int device) {
    if (device < 0 || device >= env_int("CUEMU_DEVICES", 1)) return fail(cudaErrorInvalidDevice);
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "cuemu (CUDA emulated on the host CPU)");
    p->major = env_int("CUEMU_CC_MAJOR", 9);
    p->minor = 0;
    p->multiProcessorCount = env_int("CUEMU_SMS", 16);
    p->totalGlobalMem = (size_t)4 << 30;
    p->warpSize = 32;
    return cudaSuccess;
}

/* the emulation stands in for both, at the version of the headers it is built with */
cudaError_t cudaDriverGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int *v) {
    *v = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **p, size_t n) {
    *p = nullptr;
    if (capture_violation()) return g_last;
    void *q = aligned_alloc(256, (n + 255) & ~(size_t)255);
    if (!q) return fail(cudaErrorMemoryAllocation);
    g_allocs[(uintptr_t)q] = n;
    *p = q;
    return cudaSuccess;
}

cudaError_t cudaFree(void *p) {
    if (capture_violation()) return g_last;
    if (!p) return cudaSuccess;
    if (!g_allocs.erase((uintptr_t)p)) return fail(cudaErrorInvalidValue);
    free(p);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **p, size_t n, unsigned int flags) {
    (void)flags;
    *p = calloc(1, n ? n : 1);
    return *p ? cudaSuccess : fail(cudaErrorMemoryAllocation);
}

cudaError_t cudaHostGetDevicePointer(void **d, void *h, unsigned int flags) {
    (void)flags;
    *d = h; /* unified addressing */
    return cudaSuccess;
}

cudaError_t cudaFreeHost(void *p) {
    free(p);
    return cudaSuccess;
}

cudaError_t cudaMemset(void *p, int v, size_t n) {
    if (capture_violation()) return g_last;
    if (!device_range(p, n)) return fail(cudaErrorInvalidValue);
    memset(p, v, n);
    return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) {
    if (!device_range(p, n)) return fail(cudaErrorInvalidValue);
    enqueue(s, [p, v, n]() { memset(p, v, n); });
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t n, enum cudaMemcpyKind kind, cudaStream_t s) {
    bool ok = true;
    if (kind == cudaMemcpyHostToDevice)
        ok = device_range(dst, n);
    else if (kind == cudaMemcpyDeviceToHost)
        ok = device_range(src, n);
    else if (kind == cudaMemcpyDeviceToDevice)
        ok = device_range(dst, n) && device_range(src, n);
    if (!ok) return fail(cudaErrorInvalidValue);
    if (kind == cudaMemcpyHostToDevice && !(s && s->capturing)) {
        memcpy(dst, src, n); /* pageable source: staged at once */
        return cudaSuccess;
    }
    enqueue(s, [dst, src, n]() { memcpy(dst, src, n); });
    return cudaSuccess;
}

/* Events: work runs when it is enqueued (outside a capture), so an event
 * is complete as soon as it is recorded. Recording one into a capture is
 * not something the backend does. */
struct CUevent_st {
    int recorded;
};

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *e, unsigned int flags) {
    (void)flags;
    *e = new CUevent_st{0};
    return cudaSuccess;
}

cudaError_t cudaEventDestroy(cudaEvent_t e) {
    delete e;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
    if (!e || (s && s->capturing)) return fail(cudaErrorInvalidValue);
    e->recorded = 1;
    return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
    if (!e) return fail(cudaErrorInvalidValue);
    if (capture_violation()) return g_last;
    return cudaSuccess;
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *s, unsigned int flags) {
    (void)flags;
    *s = new CUstream_st;
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t s) {
    if (s && s->capturing) return fail(cudaErrorIllegalState);
    delete s;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t s) {
    if (s && s->capturing) {
        s->invalid = true;
        return fail(cudaErrorStreamCaptureUnsupported);
    }
    if (capture_violation()) return g_last;
    return cudaSuccess; /* work ran when it was enqueued */
}

cudaError_t cudaStreamBeginCapture(cudaStream_t s, enum cudaStreamCaptureMode mode) {
    (void)mode;
    if (!s || s->capturing) return fail(cudaErrorIllegalState);
    s->capturing = true;
    s->invalid = false;
    s->rec.clear();
    g_capturing++;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t s, cudaGraph_t *g) {
    *g = nullptr;
    if (!s || !s->capturing) return fail(cudaErrorIllegalState);
    s->capturing = false;
    g_capturing--;
    if (s->invalid || g_last != cudaSuccess) {
        s->rec.clear();
        return fail(cudaErrorStreamCaptureInvalidated);
    }
    *g = new CUgraph_st{std::move(s->rec)};
    s->rec.clear();
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *e, cudaGraph_t g, unsigned long long flags) {
    (void)flags;
    if (!g) return fail(cudaErrorInvalidValue);
    *e = new CUgraphExec_st{g->ops};
    return cudaSuccess;
}

cudaError_t cudaGraphLaunch(cudaGraphExec_t e, cudaStream_t s) {
    if (!e) return fail(cudaErrorInvalidValue);
    for (const auto &op : e->ops) enqueue(s, op);
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t g) {
    delete g;
    return cudaSuccess;
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t e) {
    delete e;
    return cudaSuccess;
}

cudaError_t cudaFuncSetAttribute(const void *func, enum cudaFuncAttribute attr, int value) {
    if (attr != cudaFuncAttributeMaxDynamicSharedMemorySize || value < 0 || value > OPTIN_SMEM)
        return fail(cudaErrorInvalidValue);
    g_smem_attr[func] = value;
    return cudaSuccess;
}

} /* extern "C" (runtime) */

/* ======================================================================= */
/* cuBLAS: reference GEMMs (column-major, as cuBLAS), enqueued on the        */
/* handle's stream; host pointer mode                                        */
/* ======================================================================= */

struct cublasContext {
    cudaStream_t st = nullptr;
    cublasMath_t math = CUBLAS_DEFAULT_MATH;
};

/* x rounded to TF32 (10 mantissa bits), nearest even: what tensor cores see */
static float tf32(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) u = (u + 0xfffu + ((u >> 13) & 1u)) & ~0x1fffu;
    memcpy(&x, &u, 4);
    return x;
}

static float load_elem(const void *p, cudaDataType t, long long i) {
    switch (t) {
    case CUDA_R_16F: return __half2float(((const __half *)p)[i]);
    case CUDA_R_16BF: return __bfloat162float(((const __nv_bfloat16 *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static bool known_type(cudaDataType t) {
    return t == CUDA_R_32F || t == CUDA_R_16F || t == CUDA_R_16BF;
}

/* C (m x n, ldc) = alpha op(A) op(B) + beta C, batch times with strides;
 * A is (m x k) after op, stored (lda x ...) column-major. */
static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                           float alpha, const void *A, cudaDataType at, int lda, long long sA, const void *B,
                           cudaDataType bt, int ldb, long long sB, float beta, float *C, int ldc, long long sC,
                           int batch, bool round_tf32) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    const bool okop = (ta == CUBLAS_OP_N || ta == CUBLAS_OP_T) && (tb == CUBLAS_OP_N || tb == CUBLAS_OP_T);
    if (!okop || m < 0 || n < 0 || k < 0 || batch < 0 || lda < std::max(1, ta == CUBLAS_OP_N ? m : k) ||
        ldb < std::max(1, tb == CUBLAS_OP_N ? k : n) || ldc < std::max(1, m) || !known_type(at) || !known_type(bt))
        return CUBLAS_STATUS_INVALID_VALUE;
    enqueue(h->st, [=]() {
        for (int b = 0; b < batch; b++)
            for (int j = 0; j < n; j++)
                for (int i = 0; i < m; i++) {
                    double acc = 0.0;
                    for (int l = 0; l < k; l++) {
                        const long long ia = b * sA +
                                             (ta == CUBLAS_OP_N ? i + (long long)l * lda : l + (long long)i * lda);
                        const long long ib = b * sB +
                                             (tb == CUBLAS_OP_N ? l + (long long)j * ldb : j + (long long)l * ldb);
                        float x = load_elem(A, at, ia), y = load_elem(B, bt, ib);
                        if (round_tf32) {
                            x = tf32(x);
                            y = tf32(y);
                        }
                        acc += (double)x * (double)y;
                    }
                    float *c = C + b * sC + i + (long long)j * ldc;
                    *c = (float)((double)alpha * acc + (beta != 0.0f ? (double)beta * *c : 0.0));
                }
    });
    return CUBLAS_STATUS_SUCCESS;
}

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    *h = new cublasContext;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t s) {
    h->st = s;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t n) {
    (void)h;
    return !ws && n ? CUBLAS_STATUS_INVALID_VALUE : CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetMathMode(cublasHandle_t h, cublasMath_t mode) {
    h->math = mode;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "the operation completed successfully";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "the library was not initialized";
    case CUBLAS_STATUS_INVALID_VALUE: return "an invalid numeric value was used as an argument";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the functionality requested is not supported";
    default: return "cuemu: cuBLAS error";
    }
}

cublasStatus_t cublasSgemm_v2(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                              const float *alpha, const float *A, int lda, const float *B, int ldb, const float *beta,
                              float *C, int ldc) {
    return gemm(h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, 0, B, CUDA_R_32F, ldb, 0, *beta, C, ldc, 0, 1,
                h && h->math == CUBLAS_TF32_TENSOR_OP_MATH);
}

cublasStatus_t cublasSgemmStridedBatched(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                         int k, const float *alpha, const float *A, int lda, long long int sA,
                                         const float *B, int ldb, long long int sB, const float *beta, float *C,
                                         int ldc, long long int sC, int batch) {
    return gemm(h, ta, tb, m, n, k, *alpha, A, CUDA_R_32F, lda, sA, B, CUDA_R_32F, ldb, sB, *beta, C, ldc, sC, batch,
                h && h->math == CUBLAS_TF32_TENSOR_OP_MATH);
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n,
                                          int k, const void *alpha, const void *A, cudaDataType at, int lda,
                                          long long int sA, const void *B, cudaDataType bt, int ldb, long long int sB,
                                          const void *beta, void *C, cudaDataType ct, int ldc, long long int sC,
                                          int batch, cublasComputeType_t comp, cublasGemmAlgo_t algo) {
    (void)algo;
    /* the combinations the backend uses: f32 C, f32 scalars, A/B of one type */
    if (ct != CUDA_R_32F || at != bt) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (comp != CUBLAS_COMPUTE_32F && comp != CUBLAS_COMPUTE_32F_FAST_TF32) return CUBLAS_STATUS_NOT_SUPPORTED;
    if (comp == CUBLAS_COMPUTE_32F_FAST_TF32 && at != CUDA_R_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    return gemm(h, ta, tb, m, n, k, *(const float *)alpha, A, at, lda, sA, B, bt, ldb, sB, *(const float *)beta,
                (float *)C, ldc, sC, batch, comp == CUBLAS_COMPUTE_32F_FAST_TF32);
}

} /* extern "C" (cuBLAS) */
