# Install rules of the Python wheel (DIFFRT_PYTHON_WHEEL, set by
# pyproject.toml; scikit-build-core installs into the wheel's root, which
# becomes site-packages). The pure-Python package python/diffrt is copied in
# by scikit-build-core itself (wheel.packages); CMake adds:
#   diffrt/lib/libdiffrt.so            the core (SONAME libdiffrt.so: a wheel
#                                      holds no symbolic links)
#   diffrt/lib/libdiffrt-<backend>.so  the modules this build made
#                                      (cmake/backends.cmake), found by the
#                                      core beside itself
#   diffrt/bin/diffrt                  the CLI (python -m diffrt), RUNPATH
#                                      $ORIGIN/../lib
# No headers, CMake package or pkg-config file: the wheel is for Python.
if(NOT BUILD_SHARED_LIBS)
  message(FATAL_ERROR "DIFFRT_PYTHON_WHEEL=ON needs BUILD_SHARED_LIBS=ON (the package loads libdiffrt.so)")
endif()
install(TARGETS diffrt LIBRARY DESTINATION ${DIFFRT_WHEEL_LIBDIR} COMPONENT python)
set_target_properties(diffrt_cli PROPERTIES INSTALL_RPATH "$ORIGIN/../lib")
install(TARGETS diffrt_cli RUNTIME DESTINATION ${DIFFRT_WHEEL_BINDIR} COMPONENT python)
