# The version and the git commit the build is made from, for `diffrt conform
# --json/--junit` (and anything else that reports what was tested). The
# commit is read at configure time; configure re-runs when HEAD or the
# branch it points to moves, so a rebuild after a commit reports the new one.
# Outside a git checkout (a release tarball) it is "unknown".
set(DIFFRT_GIT_COMMIT "unknown")
find_package(Git QUIET)
if(GIT_FOUND)
  execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --short HEAD
                  WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                  OUTPUT_VARIABLE _commit OUTPUT_STRIP_TRAILING_WHITESPACE
                  RESULT_VARIABLE _rc ERROR_QUIET)
  if(_rc EQUAL 0 AND _commit)
    set(DIFFRT_GIT_COMMIT "${_commit}")
    # HEAD, and the ref file of the branch it names when that is a loose ref
    foreach(_what HEAD _branch)
      set(_path "")
      if(_what STREQUAL "HEAD")
        execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --git-path HEAD
                        WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                        OUTPUT_VARIABLE _path OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
      else()
        execute_process(COMMAND ${GIT_EXECUTABLE} symbolic-ref -q HEAD
                        WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                        OUTPUT_VARIABLE _ref OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        if(_ref)
          execute_process(COMMAND ${GIT_EXECUTABLE} rev-parse --git-path ${_ref}
                          WORKING_DIRECTORY ${PROJECT_SOURCE_DIR}
                          OUTPUT_VARIABLE _path OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
        endif()
      endif()
      if(_path AND NOT IS_ABSOLUTE "${_path}")
        set(_path "${PROJECT_SOURCE_DIR}/${_path}")
      endif()
      if(_path AND EXISTS "${_path}")
        set_property(DIRECTORY ${PROJECT_SOURCE_DIR} APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS "${_path}")
      endif()
    endforeach()
  endif()
endif()
set(DIFFRT_VERSION_SRC ${PROJECT_BINARY_DIR}/generated/drt_version.c)
configure_file(${CMAKE_CURRENT_LIST_DIR}/version.c.in ${DIFFRT_VERSION_SRC} @ONLY)
message(STATUS "diffrt: version ${PROJECT_VERSION}, commit ${DIFFRT_GIT_COMMIT}")
