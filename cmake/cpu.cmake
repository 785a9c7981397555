# The fast CPU backend (backends/cpu). backend.c and pool.c are compiled once
# for the baseline ISA; the kernel families (matmul, attention, norm,
# elementwise, kv) and their table (kernels.c) are compiled once per ISA with that
# ISA's -m flags and -DDRT_ISA=<name>, so one binary carries every path and
# picks one at run time from the CPU's features (no -march=native).
set(DIFFRT_CPU_SRC ${PROJECT_SOURCE_DIR}/backends/cpu/backend.c ${PROJECT_SOURCE_DIR}/backends/cpu/pool.c)
set(_cpu_kernel_src
    ${PROJECT_SOURCE_DIR}/backends/cpu/matmul.c ${PROJECT_SOURCE_DIR}/backends/cpu/attention.c
    ${PROJECT_SOURCE_DIR}/backends/cpu/norm.c ${PROJECT_SOURCE_DIR}/backends/cpu/elementwise.c
    ${PROJECT_SOURCE_DIR}/backends/cpu/kv.c ${PROJECT_SOURCE_DIR}/backends/cpu/kernels.c)

set(_cpu_isas generic)
set(_cpu_flags_generic "")
if(CMAKE_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
  list(APPEND _cpu_isas avx2 avx512)
  set(_cpu_flags_avx2 -mavx2 -mfma -mf16c)
  set(_cpu_flags_avx512 -mavx512f -mavx512bw -mavx512vl -mavx512dq -mavx2 -mfma -mf16c)
elseif(CMAKE_SYSTEM_PROCESSOR MATCHES "^(aarch64|arm64|ARM64)$")
  list(APPEND _cpu_isas neon)
  set(_cpu_flags_neon "")
endif()

set(DIFFRT_CPU_ISA_OBJECTS "")
foreach(isa ${_cpu_isas})
  add_library(diffrt_cpu_${isa} OBJECT ${_cpu_kernel_src})
  target_include_directories(diffrt_cpu_${isa} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/runtime ${PROJECT_SOURCE_DIR}/backends/cpu)
  target_compile_definitions(diffrt_cpu_${isa} PRIVATE DRT_ISA=${isa} DRT_ISA_${isa}=1)
  # -O3 for the kernels in every build type but Debug (unrolled micro-kernels)
  target_compile_options(diffrt_cpu_${isa} PRIVATE ${_cpu_flags_${isa}} ${DIFFRT_WARN}
                         $<$<NOT:$<CONFIG:Debug>>:-O3>)
  set_target_properties(diffrt_cpu_${isa} PROPERTIES POSITION_INDEPENDENT_CODE ON)
  list(APPEND DIFFRT_CPU_ISA_OBJECTS $<TARGET_OBJECTS:diffrt_cpu_${isa}>)
endforeach()
