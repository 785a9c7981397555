# Vulkan: headers (the loader itself is opened at run time, so the library
# does not link libvulkan) + glslc, which compiles backends/vulkan/shaders/*.comp
# to SPIR-V at build time; the SPIR-V is embedded into the library as one
# generated .c (cmake/vulkan_shaders.cmake).
if(NOT DIFFRT_VULKAN STREQUAL "OFF")
  find_path(VULKAN_HEADER_DIR vulkan/vulkan.h)
  find_program(GLSLC_EXECUTABLE glslc)
  file(GLOB _vk_src CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/backends/vulkan/*.c)
  if(NOT VULKAN_HEADER_DIR)
    diffrt_backend_missing(DIFFRT_VULKAN "Vulkan headers not found (Debian: libvulkan-dev)")
  elseif(NOT GLSLC_EXECUTABLE)
    diffrt_backend_missing(DIFFRT_VULKAN "glslc not found: it compiles backends/vulkan/shaders/*.comp to SPIR-V at build time (Debian: apt-get install glslc, or the LunarG Vulkan SDK, or pass -DGLSLC_EXECUTABLE=/path/to/glslc)")
  elseif(NOT _vk_src)
    diffrt_backend_missing(DIFFRT_VULKAN "backends/vulkan has no sources yet")
  else()
    find_package(Threads REQUIRED)
    include(${PROJECT_SOURCE_DIR}/cmake/vulkan_shaders.cmake)
    # One SPIR-V module per (source, defines). Only what cannot be a
    # specialization constant is a define: the weight dtype of a binding
    # (f16 storage needs a capability the device may lack) and whether the
    # module uses subgroup operations at all (*_nosg, for devices without
    # subgroup arithmetic in compute shaders). Workgroup size, tiles, dk/dv,
    # the op of elementwise.comp and subgroup-vs-shared reductions are
    # specialization constants chosen when the pipeline is created.
    #   name | source | defines (comma separated)
    set(_vk_variants
      "matmul_f32|matmul.comp|W_F32"
      "matmul_f16|matmul.comp|W_F16"
      "matmul_u16|matmul.comp|W_U16"
      "matvec_f32|matvec.comp|W_F32"
      "matvec_f16|matvec.comp|W_F16"
      "matvec_u16|matvec.comp|W_U16"
      "matvec_f32_nosg|matvec.comp|W_F32,NO_SUBGROUP"
      "matvec_f16_nosg|matvec.comp|W_F16,NO_SUBGROUP"
      "matvec_u16_nosg|matvec.comp|W_U16,NO_SUBGROUP"
      "matvec_u16_i64|matvec.comp|W_U16,LOAD_I64"
      "embed_f32|embed.comp|W_F32"
      "embed_f16|embed.comp|W_F16"
      "embed_u16|embed.comp|W_U16"
      "norm|norm.comp|"
      "norm_nosg|norm.comp|NO_SUBGROUP"
      "dual_softmax|dual_softmax.comp|"
      "dual_softmax_nosg|dual_softmax.comp|NO_SUBGROUP"
      "attention|attention.comp|"
      "attention_combine|attention_combine.comp|"
      "rope|rope.comp|"
      "elementwise|elementwise.comp|"
      "kv_write|kv_write.comp|"
      "permute|permute.comp|"
      "matmul_q8|matmul_q.comp|Q8,NO_SUBGROUP"
      "matmul_q4|matmul_q.comp|Q4,NO_SUBGROUP"
      "matvec_q8|matvec_q.comp|Q8,NO_SUBGROUP"
      "matvec_q4|matvec_q.comp|Q4,NO_SUBGROUP"
      "attention_rows|attention_rows.comp|"
      "attention_lanes|attention_lanes.comp|")
    set(_vk_gen ${PROJECT_BINARY_DIR}/generated/vulkan_shaders.c)
    diffrt_vk_shaders(${_vk_gen} ${PROJECT_SOURCE_DIR}/backends/vulkan/shaders ${_vk_variants})
    diffrt_add_backend_module(vulkan SOURCES ${_vk_src} ${_vk_gen} LIBS Threads::Threads ${CMAKE_DL_LIBS}
                              INCLUDES ${VULKAN_HEADER_DIR})
    string(APPEND DIFFRT_CONFORM_REQUIRE_DEFAULT ",vulkan")
    message(STATUS "diffrt: Vulkan backend enabled (glslc: ${GLSLC_EXECUTABLE})")
  endif()
endif()
