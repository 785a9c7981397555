# Decides which GPU backends are built. AUTO builds a backend when its
# toolchain is found; ON fails here, at configure time, when it is missing.
#
# Each GPU backend is a module, libdiffrt-<name>.so (runtime/drt_module.h):
# the core library and the CLI link no vendor library; the core opens the
# module at run time, and a module or vendor library that is missing makes
# that backend unavailable, nothing more. A backend's cmake file records
#   diffrt_add_backend_module(<name> SOURCES <files...> [LIBS <libs...>]
#                             [INCLUDES <dirs...>] [DEFS <defs...>])
# and diffrt_backend_modules(), called from the top-level CMakeLists.txt
# once the library target exists, creates the module targets.
set(DIFFRT_BACKEND_DEFS "")  # for diffrt's tests: DIFFRT_HAVE_<NAME>=1 per module built
set(DIFFRT_MODULE_DEFS "")   # for the core: DIFFRT_MODULE_<NAME>=1 per module built
set(DIFFRT_MODULES "")
# conform requires cpu plus every backend this build enables
set(DIFFRT_CONFORM_REQUIRE_DEFAULT "cpu")

function(diffrt_backend_missing opt what)
  if(${opt} STREQUAL "ON")
    message(FATAL_ERROR "${opt}=ON but ${what}")
  endif()
  message(STATUS "diffrt: ${opt}=AUTO: ${what}; backend not built")
endfunction()

macro(diffrt_add_backend_module name)
  cmake_parse_arguments(_m "" "" "SOURCES;LIBS;INCLUDES;DEFS;OPTIONS" ${ARGN})
  string(TOUPPER ${name} _up)
  list(APPEND DIFFRT_MODULES ${name})
  set(DIFFRT_MODULE_${name}_SOURCES ${_m_SOURCES})
  set(DIFFRT_MODULE_${name}_LIBS ${_m_LIBS})
  set(DIFFRT_MODULE_${name}_INCLUDES ${_m_INCLUDES})
  set(DIFFRT_MODULE_${name}_DEFS ${_m_DEFS})
  list(APPEND DIFFRT_BACKEND_DEFS DIFFRT_HAVE_${_up}=1 ${_m_DEFS})
  list(APPEND DIFFRT_MODULE_DEFS DIFFRT_MODULE_${_up}=1)
endmacro()

function(diffrt_backend_modules)
  foreach(name ${DIFFRT_MODULES})
    set(t diffrt-${name})
    add_library(${t} MODULE ${DIFFRT_MODULE_${name}_SOURCES})
    # next to libdiffrt.so (and the CLI) in the build tree, where the core
    # looks first
    set_target_properties(${t} PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${PROJECT_BINARY_DIR}
                          C_VISIBILITY_PRESET hidden CXX_VISIBILITY_PRESET hidden
                          CUDA_VISIBILITY_PRESET hidden
                          INSTALL_RPATH "$ORIGIN" INSTALL_RPATH_USE_LINK_PATH ON)
    target_include_directories(${t} PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR}/runtime
                               ${PROJECT_SOURCE_DIR}/backends/ref ${DIFFRT_MODULE_${name}_INCLUDES})
    target_compile_definitions(${t} PRIVATE ${DIFFRT_MODULE_${name}_DEFS}
                               DRT_MODULE_VERSION="${PROJECT_VERSION}")
    target_compile_options(${t} PRIVATE "$<$<COMPILE_LANGUAGE:C>:${DIFFRT_WARN}>")
    # the core's symbols: from libdiffrt.so, or (static library) from the
    # program, which exports them (diffrt_program)
    if(BUILD_SHARED_LIBS)
      target_link_libraries(${t} PRIVATE diffrt)
    endif()
    target_link_libraries(${t} PRIVATE ${DIFFRT_MODULE_${name}_LIBS} ${M_LIBRARY})
    add_dependencies(diffrt_cli ${t})
    if(DIFFRT_INSTALL)
      install(TARGETS ${t} LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime)
    endif()
    if(DIFFRT_PYTHON_WHEEL)
      install(TARGETS ${t} LIBRARY DESTINATION ${DIFFRT_WHEEL_LIBDIR} COMPONENT python)
    endif()
  endforeach()
endfunction()

# OpenCL: headers + ICD loader. The kernels (backends/opencl/*.cl) are
# embedded into the library at build time (cmake/embed.cmake). CLBlast, when
# found, adds an alternative f32 GEMM path (DIFFRT_OPENCL_GEMM=clblast).
if(NOT DIFFRT_OPENCL STREQUAL "OFF")
  find_package(OpenCL QUIET)
  file(GLOB _ocl_src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/opencl/*.c)
  file(GLOB _ocl_cl CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/opencl/*.cl)
  if(NOT OpenCL_FOUND)
    diffrt_backend_missing(DIFFRT_OPENCL "OpenCL headers/loader not found (Debian: ocl-icd-opencl-dev opencl-headers)")
  elseif(NOT _ocl_src)
    diffrt_backend_missing(DIFFRT_OPENCL "backends/opencl has no sources yet")
  else()
    include(${PROJECT_SOURCE_DIR}/cmake/embed.cmake)
    set(_ocl_gen ${PROJECT_BINARY_DIR}/generated/opencl_kernels.c)
    diffrt_embed(${_ocl_gen} drt_ocl_src ${_ocl_cl})
    string(APPEND DIFFRT_CONFORM_REQUIRE_DEFAULT ",opencl")
    find_path(CLBLAST_INCLUDE_DIR clblast_c.h)
    find_library(CLBLAST_LIBRARY clblast)
    if(CLBLAST_INCLUDE_DIR AND CLBLAST_LIBRARY)
      diffrt_add_backend_module(opencl SOURCES ${_ocl_src} ${_ocl_gen}
                                LIBS OpenCL::OpenCL ${CLBLAST_LIBRARY}
                                INCLUDES ${CLBLAST_INCLUDE_DIR} DEFS DIFFRT_HAVE_CLBLAST=1)
      message(STATUS "diffrt: OpenCL backend enabled (with CLBlast: ${CLBLAST_LIBRARY})")
    else()
      diffrt_add_backend_module(opencl SOURCES ${_ocl_src} ${_ocl_gen} LIBS OpenCL::OpenCL)
      message(STATUS "diffrt: OpenCL backend enabled (CLBlast not found: tiled GEMM only)")
    endif()
  endif()
endif()

include(${PROJECT_SOURCE_DIR}/cmake/vulkan.cmake)
include(${PROJECT_SOURCE_DIR}/cmake/cuda.cmake)
