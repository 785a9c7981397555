/* diffrt_cuda_emu: the CUDA backend is linked into the program (its kernels
 * on the host emulator) instead of loaded as libdiffrt-cuda.so; this hands
 * it to the registry before main() runs. */
#include "drt_module.h"

extern const drt_backend_ops drt_cuda_backend_ops;

__attribute__((constructor)) static void provide_cuda(void) {
    drt_registry_provide(&drt_cuda_backend_ops);
}
