# ctest layering: each layer includes only its own headers and those of the
# layers below it (docs/design.md section 1):
#   runtime/     runtime/, the public include/diffrt/
#   backends/*/  + backends/ref/ (the reference kernels), its own folder
#   model/       + runtime/
#   conform/     + model/, backends/ref/
#   eval/        + model/, backends/ref/ (its analysis hooks): NIAH, analysis
#   cli/         anything
# A quoted #include that resolves elsewhere fails, naming file and header.
# cmake -DSRC=<checkout> -P tests/layering.cmake
set(allowed_runtime runtime include/diffrt)
set(allowed_backends runtime include/diffrt backends/ref)
set(allowed_model runtime include/diffrt model)
set(allowed_conform runtime include/diffrt model backends/ref conform)
set(allowed_eval runtime include/diffrt model backends/ref eval)
set(bad "")
set(n 0)
foreach(layer runtime backends model conform eval)
  file(GLOB_RECURSE files ${SRC}/${layer}/*.c ${SRC}/${layer}/*.h ${SRC}/${layer}/*.cu ${SRC}/${layer}/*.cuh)
  foreach(f ${files})
    if(f MATCHES "/emu/") # the CUDA emulator is a test harness, not a layer
      continue()
    endif()
    get_filename_component(dir ${f} DIRECTORY)
    file(STRINGS ${f} incs REGEX "^[ \t]*#[ \t]*include[ \t]+\"")
    foreach(line ${incs})
      string(REGEX REPLACE "^[ \t]*#[ \t]*include[ \t]+\"([^\"]+)\".*" "\\1" h "${line}")
      math(EXPR n "${n} + 1")
      # the including file's own folder, then the layers it may use
      if(EXISTS ${dir}/${h})
        continue()
      endif()
      set(ok FALSE)
      foreach(a ${allowed_${layer}})
        if(EXISTS ${SRC}/${a}/${h} OR EXISTS ${SRC}/include/${h})
          set(ok TRUE)
        endif()
      endforeach()
      if(NOT ok)
        file(RELATIVE_PATH rel ${SRC} ${f})
        list(APPEND bad "${rel} includes \"${h}\", which is not in ${layer}'s allowed layers (${allowed_${layer}})")
      endif()
    endforeach()
  endforeach()
endforeach()
if(bad)
  list(JOIN bad "\n  " msg)
  message(FATAL_ERROR "layering: ${msg}")
endif()
message(STATUS "layering: ${n} quoted includes checked, each within its layer or below")
