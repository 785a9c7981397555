# CUDA: nvcc + the CUDA toolkit libraries (cudart, cuBLAS).
#
# Builds backends/cuda/*.cu (kernels, compiled by nvcc) and backends/cuda/*.c
# (host code, compiled by the C compiler with the project's warnings) into the
# diffrt library. GPU code is generated for CMAKE_CUDA_ARCHITECTURES, default
# "80;90a" (sm_80 SASS + compute_80 PTX, which the driver JIT-compiles for
# newer GPUs; sm_90a SASS for H100/H200); override it on the command line
# (-DCMAKE_CUDA_ARCHITECTURES=...) or with the CUDAARCHS environment variable.
#
# No GPU is needed to build: a machine with nvcc but no device builds and
# tests everything, and the backend reports itself unavailable at run time.
# "cuda" is therefore not added to DIFFRT_CONFORM_REQUIRE_DEFAULT: CI on a
# machine without a GPU would fail. The GPU script (bench/gpu/run.sh) runs
# conform with --require cpu,cuda explicitly.
if(NOT DIFFRT_CUDA STREQUAL "OFF")
  include(CheckLanguage)
  check_language(CUDA)
  file(GLOB _cu_src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/cuda/*.cu ${PROJECT_SOURCE_DIR}/backends/cuda/*.c)
  if(NOT CMAKE_CUDA_COMPILER)
    diffrt_backend_missing(DIFFRT_CUDA "no CUDA compiler (nvcc) found")
  elseif(NOT _cu_src)
    diffrt_backend_missing(DIFFRT_CUDA "backends/cuda has no sources yet")
  else()
    if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES AND NOT DEFINED ENV{CUDAARCHS})
      set(CMAKE_CUDA_ARCHITECTURES "80;90a" CACHE STRING "GPU architectures for the CUDA backend")
    endif()
    set(CMAKE_CUDA_STANDARD 17)
    set(CMAKE_CUDA_STANDARD_REQUIRED ON)
    # the shared cudart: the one libcublas itself links against
    set(CMAKE_CUDA_RUNTIME_LIBRARY Shared)
    enable_language(CUDA)
    find_package(CUDAToolkit REQUIRED)
    file(GLOB _cu_kernels CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/cuda/*.cu)
    # nvcc's own warnings, plus the host compiler's on the host half of each
    # .cu file; errors when DIFFRT_WERROR is on. -lineinfo keeps SASS-to-
    # source mapping for profilers at no run-time cost.
    set(_cu_flags -lineinfo -Xptxas=-warn-spills -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter)
    if(DIFFRT_WERROR)
      list(APPEND _cu_flags -Werror=all-warnings)
    endif()
    set_source_files_properties(${_cu_kernels} PROPERTIES COMPILE_OPTIONS "${_cu_flags}")
    diffrt_add_backend_module(cuda SOURCES ${_cu_src} LIBS CUDA::cudart CUDA::cublas)
    message(STATUS "diffrt: CUDA backend enabled (architectures ${CMAKE_CUDA_ARCHITECTURES})")

    # The emulator (backends/cuda/emu) is C++.
    enable_language(CXX)

    # Defined once the diffrt and diffrt_cli targets exist:
    #  - bench/gpu/*.c: GPU benchmarks (bench_gpu_<name>), run by bench/gpu/run.sh;
    #  - diffrt_cuda_emu: the diffrt command with the CUDA backend running on
    #    cuemu (every kernel executed on the host, the CUDA runtime and cuBLAS
    #    emulated), so that conformance of the CUDA backend's code is tested
    #    on machines without a GPU: ctest cuda_emu_conform (f32 mode, every op
    #    and fixture model, CUDA-graph replay of decode steps),
    #    cuda_emu_conform_kv_* (f16 and q8_0 KV caches) and cuda_emu_fast
    #    (fast mode against the reduced-precision bound).
    function(diffrt_cuda_deferred_targets)
      file(GLOB _gpu_bench CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/bench/gpu/*.c)
      foreach(src ${_gpu_bench})
        get_filename_component(name ${src} NAME_WE)
        add_executable(bench_gpu_${name} ${src})
        target_compile_options(bench_gpu_${name} PRIVATE ${DIFFRT_WARN})
        target_link_libraries(bench_gpu_${name} PRIVATE diffrt_internal CUDA::cudart CUDA::cublas)
        diffrt_program(bench_gpu_${name})
      endforeach()

      set(_emu ${PROJECT_SOURCE_DIR}/backends/cuda/emu)
      set(_emu_src "")
      file(GLOB _kernels CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/cuda/*.cu)
      foreach(k ${_kernels})
        get_filename_component(n ${k} NAME_WE)
        set(w ${PROJECT_BINARY_DIR}/cuda_emu/${n}.cc)
        file(CONFIGURE OUTPUT ${w} CONTENT "#include \"cuemu.h\"\n#include \"${k}\"\n")
        list(APPEND _emu_src ${w})
      endforeach()
      file(GLOB _cli_src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/cli/*.c)
      # the CUDA backend linked into the program (emu/provide.c hands it to
      # the registry), not the module
      add_executable(diffrt_cuda_emu ${_cli_src} ${PROJECT_SOURCE_DIR}/backends/cuda/backend.c ${_emu}/cuemu.cc
                     ${_emu}/provide.c ${_emu_src})
      diffrt_program(diffrt_cuda_emu)
      target_include_directories(diffrt_cuda_emu PRIVATE ${_emu} ${PROJECT_SOURCE_DIR}/backends/cuda
                                 $<TARGET_PROPERTY:diffrt_cli,INCLUDE_DIRECTORIES>)
      target_include_directories(diffrt_cuda_emu SYSTEM PRIVATE ${CUDAToolkit_INCLUDE_DIRS})
      target_compile_definitions(diffrt_cuda_emu PRIVATE $<TARGET_PROPERTY:diffrt_cli,COMPILE_DEFINITIONS>
                                 DRT_MODULE_VERSION="${PROJECT_VERSION}")
      # type punning through reinterpret_cast is the CUDA idiom for fragments
      set(_emu_cxx -O2 -fno-strict-aliasing -Wall -Wextra -Wno-unused-parameter -Wno-unknown-pragmas)
      if(DIFFRT_WERROR)
        list(APPEND _emu_cxx -Werror)
      endif()
      if(DIFFRT_SANITIZE)
        list(APPEND _emu_cxx -fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
      endif()
      target_compile_options(diffrt_cuda_emu PRIVATE "$<$<COMPILE_LANGUAGE:C>:${DIFFRT_WARN}>"
                                                     "$<$<COMPILE_LANGUAGE:CXX>:${_emu_cxx}>")
      target_link_libraries(diffrt_cuda_emu PRIVATE $<TARGET_PROPERTY:diffrt_cli,LINK_LIBRARIES>)
      add_test(NAME cuda_emu_conform_full
               COMMAND diffrt_cuda_emu conform --backend cpu,cuda --require cpu,cuda
                       --models ${PROJECT_SOURCE_DIR}/tests/fixtures --json ${PROJECT_BINARY_DIR}/cuda_emu/conform.json)
      # the README's test command: every fixture's batch cases are most of the
      # time there (label slow above); --quick runs them on the first of each
      # architecture
      add_test(NAME cuda_emu_conform
               COMMAND diffrt_cuda_emu conform --backend cpu,cuda --require cpu,cuda --quick
                       --models ${PROJECT_SOURCE_DIR}/tests/fixtures)
      # the KV cache types f16 and q8_0 (KV_WRITE, ATTN, DIFF_ATTN cases
      # and a model session of the type), as tests/CMakeLists.txt's
      # conform_kv_* on the other backends; one model each, as the
      # emulator runs a bundled model's session at q8_0 for minutes
      add_test(NAME cuda_emu_conform_kv_f16
               COMMAND diffrt_cuda_emu conform --backend cpu,cuda --require cpu,cuda --kv-type f16
                       --op KV_WRITE,ATTN,DIFF_ATTN --models ${PROJECT_SOURCE_DIR}/tests/fixtures/hf_diffllama_gqa)
      add_test(NAME cuda_emu_conform_kv_q8_0_full
               COMMAND diffrt_cuda_emu conform --backend cpu,cuda --require cpu,cuda --kv-type q8_0
                       --op KV_WRITE,ATTN,DIFF_ATTN --models ${PROJECT_SOURCE_DIR}/models/diff-v2-tiny)
      # the README's test command: the op cases at q8_0 (the model's session
      # takes the emulator two minutes)
      add_test(NAME cuda_emu_conform_kv_q8_0
               COMMAND diffrt_cuda_emu conform --backend cpu,cuda --require cpu,cuda --kv-type q8_0
                       --op KV_WRITE,ATTN,DIFF_ATTN)
      set_tests_properties(cuda_emu_conform_full cuda_emu_conform_kv_q8_0_full PROPERTIES LABELS slow)
      add_test(NAME cuda_emu_fast
               COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:diffrt_cuda_emu>
                       -DFIXTURES=${PROJECT_SOURCE_DIR}/tests/fixtures -DOUT=${PROJECT_BINARY_DIR}/cuda_emu/fast.json
                       -P ${_emu}/check_fast.cmake)
      # a switch's bad value is an error naming it, not the default
      add_test(NAME cuda_emu_bad_env
               COMMAND ${CMAKE_COMMAND} -DEXE=$<TARGET_FILE:diffrt_cuda_emu>
                       "-DARGS=run;--backend;cuda;--model;${PROJECT_SOURCE_DIR}/models/diff-v1-tiny;--tokens;1,2"
                       -DRC=1 "-DSAYS=DIFFRT_CUDA_GRAPH: expected 0 or 1"
                       -P ${PROJECT_SOURCE_DIR}/tests/conform_expect.cmake)
      set_tests_properties(cuda_emu_bad_env PROPERTIES ENVIRONMENT "DIFFRT_CUDA_GRAPH=off")
    endfunction()
    cmake_language(DEFER DIRECTORY ${PROJECT_SOURCE_DIR} CALL diffrt_cuda_deferred_targets)
  endif()
endif()
