# The ctests of examples/ (tests/CMakeLists.txt), so that the README's C
# example cannot rot:
#   cmake -DMODE=run -DEXE=generate -DMODEL=models/diff-v1-tiny -P check.cmake
#     runs the example on the model's prompt.txt: exit 0, and it answers " 6019."
#   cmake -DMODE=readme -DREADME=README.md -DEXAMPLE=examples/generate.c -P check.cmake
#     the README holds the example file byte for byte as one ```c block, and the
#     two newcomer commands as they are run by readme_main_job and scripts/test.sh
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
  file(READ "${EXAMPLE}" code)
  string(FIND "${readme}" "\n```c\n${code}```\n" at)
  if(at LESS 0)
    message(FATAL_ERROR "${README} has no ```c block equal to ${EXAMPLE} byte for byte: copy the file into it")
  endif()
  # the main job's command (readme_main_job runs its `diffrt run` part) and the test command
  foreach(cmd "bash scripts/setup.sh && cmake -B build && cmake --build build -j && ./build/diffrt run --model models/diff-v1-tiny --prompt-file models/diff-v1-tiny/prompt.txt"
              "bash scripts/test.sh")
    string(FIND "${readme}" "\n```sh\n${cmd}\n```\n" at)
    if(at LESS 0)
      message(FATAL_ERROR "${README} has no ```sh block that is exactly: ${cmd}")
    endif()
  endforeach()
  message(STATUS "${README}: the example is ${EXAMPLE}, and the newcomer commands are there")
else()
  message(FATAL_ERROR "check.cmake: MODE is run or readme, not \"${MODE}\"")
endif()
