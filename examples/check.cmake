# The ctests of examples/ (tests/CMakeLists.txt), so that the README's C
# example cannot rot:
#   cmake -DMODE=run -DEXE=generate -DMODEL=models/diff-v1-tiny -P check.cmake
#     runs the example on the model's prompt.txt: exit 0, and it answers " 6019."
#   cmake -DMODE=readme -DREADME=README.md -DEXAMPLE=examples/generate.c -P check.cmake
#     the README holds the example's core, the lines between its "/* README: begin */"
#     and "/* README: end */" lines, byte for byte as one ```c block (so the code the
#     README shows is the code the run above compiles and checks), and the two
#     newcomer commands as they are run by readme_main_job and scripts/test.sh
cmake_minimum_required(VERSION 3.20)
if(MODE STREQUAL "run")
  file(READ "${MODEL}/prompt.txt" prompt)
  execute_process(COMMAND ${EXE} ${MODEL} "${prompt}" OUTPUT_VARIABLE out ERROR_VARIABLE err RESULT_VARIABLE rc)
  if(NOT rc STREQUAL "0")
    message(FATAL_ERROR "${EXE}: exit ${rc}, expected 0\n${out}${err}")
  endif()
  if(NOT out STREQUAL " 6019.\n")
    message(FATAL_ERROR "${EXE}: printed \"${out}\", expected \" 6019.\\n\"\n${err}")
  endif()
  message(STATUS "${EXE}: says \" 6019.\"")
elseif(MODE STREQUAL "readme")
  file(READ "${README}" readme)
  file(READ "${EXAMPLE}" file)
  set(begin "    /* README: begin */\n")
  set(end "    /* README: end */\n")
  string(FIND "${file}" "${begin}" b)
  string(FIND "${file}" "${end}" e)
  string(FIND "${file}" "${begin}" b_last REVERSE)
  string(FIND "${file}" "${end}" e_last REVERSE)
  if(b LESS 0 OR e LESS b OR NOT b EQUAL b_last OR NOT e EQUAL e_last)
    message(FATAL_ERROR "${EXAMPLE}: want one \"/* README: begin */\" line, then one \"/* README: end */\" line")
  endif()
  string(LENGTH "${begin}" n)
  math(EXPR b "${b} + ${n}")
  math(EXPR n "${e} - ${b}")
  string(SUBSTRING "${file}" ${b} ${n} code)
  string(FIND "${readme}" "\n```c\n${code}```\n" at)
  if(at LESS 0)
    message(FATAL_ERROR "${README} has no ```c block equal to the lines between ${EXAMPLE}'s README markers, "
                        "byte for byte: copy them into it")
  endif()
  # the main job's command (readme_main_job runs its `diffrt run` part) and the test command
  foreach(cmd "bash scripts/setup.sh && cmake -B build && cmake --build build -j && ./build/diffrt run --model models/diff-v1-tiny --prompt-file models/diff-v1-tiny/prompt.txt"
              "bash scripts/test.sh")
    string(FIND "${readme}" "\n```sh\n${cmd}\n```\n" at)
    if(at LESS 0)
      message(FATAL_ERROR "${README} has no ```sh block that is exactly: ${cmd}")
    endif()
  endforeach()
  message(STATUS "${README}: the example is ${EXAMPLE}'s core, and the newcomer commands are there")
else()
  message(FATAL_ERROR "check.cmake: MODE is run or readme, not \"${MODE}\"")
endif()
