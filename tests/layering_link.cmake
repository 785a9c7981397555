# ctest layering_link: the arrows of tests/layering.cmake between the built
# objects, which an include check cannot see (a function declared in a lower
# layer's header but defined above it): every undefined symbol of an object of
# layer L must be defined in a layer L may use (tests/layers.cmake), or in no
# checked object at all (libc, cJSON, generated sources). A layer above the
# library (cli) reaches the library through the functions its public headers
# declare only. A reference to a symbol defined only in a layer above, or to
# one of the library's internal functions from above it, fails, naming
# object, symbol and where it is defined. The layer of an object is its
# source folder.
# cmake -DNM=<nm> -DOBJS=<file listing the objects, one a line> -P tests/layering_link.cmake
cmake_minimum_required(VERSION 3.21)
include(${CMAKE_CURRENT_LIST_DIR}/layers.cmake)
# The registry (runtime/backend.c) names the built-in backends' ops tables:
# the one arrow up that is the registration itself.
set(exempt_runtime_backend.c drt_cpu_backend_ops drt_ref_backend_ops)

# The functions the public headers declare: a line that starts with a type
# and declares drt_<name>( (comment lines start with "/*" or " *").
set(public_syms "")
file(GLOB public_headers ${CMAKE_CURRENT_LIST_DIR}/../include/diffrt/*.h)
foreach(h ${public_headers})
  file(STRINGS ${h} decls REGEX "^[A-Za-z_][A-Za-z0-9_ ]*[ *](drt_[A-Za-z0-9_]+)\\(")
  foreach(line ${decls})
    string(REGEX MATCH "[ *](drt_[A-Za-z0-9_]+)\\(" m "${line}")
    list(APPEND public_syms ${CMAKE_MATCH_1})
  endforeach()
endforeach()
if(NOT public_syms)
  message(FATAL_ERROR "layering_link: no function declarations read from ${CMAKE_CURRENT_LIST_DIR}/../include/diffrt")
endif()

file(STRINGS ${OBJS} objs)
list(REMOVE_DUPLICATES objs)
set(checked "")
foreach(o ${objs})
  if(NOT EXISTS ${o})
    message(FATAL_ERROR "layering_link: ${o} is not built (build the targets first)")
  endif()
  # <target>.dir/[<config>/]<source path>.o: the source folder names the
  # layer; objects of generated sources have none
  if(NOT o MATCHES "\\.dir/([^/]+/)?(runtime|text|model|session|conform|eval|cli|backends/[^/]+)/([^/]+)\\.o(bj)?$")
    continue()
  endif()
  set(folder_${o} ${CMAKE_MATCH_2})
  set(src_${o} ${CMAKE_MATCH_3})
  list(APPEND checked ${o})
endforeach()
if(NOT checked)
  message(FATAL_ERROR "layering_link: no layer objects in ${OBJS}")
endif()

execute_process(COMMAND ${NM} -A -g ${checked} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "layering_link: ${NM} failed: ${err}")
endif()
string(REPLACE "\n" ";" lines "${out}")
# the folders defining each symbol, then each object's undefined ones
set(refs "")
foreach(line ${lines})
  if(NOT line MATCHES "^(.+\\.o(bj)?):[0-9a-fA-F]* +([A-Za-z]) (.+)$")
    continue()
  endif()
  set(o ${CMAKE_MATCH_1})
  set(type ${CMAKE_MATCH_3})
  set(sym ${CMAKE_MATCH_4})
  if(type STREQUAL "U")
    list(APPEND refs "${o}|${sym}")
  elseif(type MATCHES "^[A-TV-Z]$")
    list(APPEND def_${sym} ${folder_${o}})
    set(defsrc_${sym} ${folder_${o}}/${src_${o}})
  endif()
endforeach()

if(NOT refs)
  message(FATAL_ERROR "layering_link: no undefined symbols read from ${NM}'s output (its format?)")
endif()
set(bad "")
list(LENGTH refs n)
foreach(r ${refs})
  string(REPLACE "|" ";" r "${r}")
  list(GET r 0 o)
  list(GET r 1 sym)
  if(NOT DEFINED def_${sym})
    continue() # outside the checked objects
  endif()
  set(folder ${folder_${o}})
  string(REGEX REPLACE "/.*" "" layer ${folder})
  if(sym IN_LIST exempt_${folder}_${src_${o}})
    continue()
  endif()
  set(ok FALSE)
  foreach(d ${def_${sym}})
    if(d STREQUAL folder OR d IN_LIST allowed_${layer})
      set(ok TRUE)
    endif()
  endforeach()
  # above the library (include/diffrt/ but not runtime/ in its list): the
  # public API, wherever the library defines it
  if(NOT ok AND "include/diffrt" IN_LIST allowed_${layer} AND NOT "runtime" IN_LIST allowed_${layer}
     AND sym IN_LIST public_syms)
    set(ok TRUE)
  endif()
  if(NOT ok)
    string(REPLACE ";" ", " al "${allowed_${layer}}")
    list(APPEND bad "${folder}/${src_${o}} references ${sym}, defined in ${defsrc_${sym}}: not in ${layer}'s allowed layers (${al})")
  endif()
endforeach()
if(bad)
  list(REMOVE_DUPLICATES bad)
  list(JOIN bad "\n  " msg)
  message(FATAL_ERROR "layering_link: ${msg}")
endif()
list(LENGTH checked nobj)
message(STATUS "layering_link: ${n} undefined symbols of ${nobj} objects checked, each defined in its layer or below")
