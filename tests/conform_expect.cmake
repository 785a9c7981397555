# Runs the diffrt command and checks its exit status and output (ctest alone
# tells only zero from non-zero; conform's usage errors must exit 2).
#   cmake -DEXE=diffrt "-DARGS=conform;--op;FOO" -DRC=2 "-DSAYS=unknown op" -P conform_expect.cmake
cmake_minimum_required(VERSION 3.20)
execute_process(COMMAND ${EXE} ${ARGS} OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
string(REPLACE ";" " " shown "${ARGS}")
if(NOT rc STREQUAL "${RC}")
  message(FATAL_ERROR "diffrt ${shown}: exit ${rc}, expected ${RC}\n${out}${err}")
endif()
string(FIND "${out}${err}" "${SAYS}" at)
if(at LESS 0)
  message(FATAL_ERROR "diffrt ${shown}: the output does not say \"${SAYS}\"\n${out}${err}")
endif()
message(STATUS "diffrt ${shown}: exit ${rc}, says \"${SAYS}\"")
