# Install rules: cmake --install <build> --prefix P puts
#   P/bin/diffrt
#   P/lib*/libdiffrt.so.<version> (+ .so.<major>, .so) or libdiffrt.a
#   P/lib*/libdiffrt-<backend>.so   the backend modules (cmake/backends.cmake)
#   P/include/diffrt/{diffrt.h,tokenizer.h,backend.h,quantize.h,util.h}
#   P/lib*/cmake/diffrt/            find_package(diffrt) -> diffrt::diffrt
#   P/lib*/pkgconfig/diffrt.pc      pkg-config --cflags --libs diffrt
include(CMakePackageConfigHelpers)

install(TARGETS diffrt EXPORT diffrtTargets
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT dev
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT dev
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS diffrt_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/diffrt DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}
        COMPONENT dev FILES_MATCHING PATTERN "*.h")

set(_cmakedir ${CMAKE_INSTALL_LIBDIR}/cmake/diffrt)
install(EXPORT diffrtTargets NAMESPACE diffrt:: DESTINATION ${_cmakedir} COMPONENT dev)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/diffrtConfig.cmake.in
                              ${PROJECT_BINARY_DIR}/diffrtConfig.cmake INSTALL_DESTINATION ${_cmakedir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/diffrtConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/diffrtConfig.cmake ${PROJECT_BINARY_DIR}/diffrtConfigVersion.cmake
        DESTINATION ${_cmakedir} COMPONENT dev)

# pkg-config: the static library's own dependencies go to Libs.private /
# Requires.private (pkg-config --static)
set(DIFFRT_PC_LIBS_PRIVATE "-lm -pthread")
if(CMAKE_DL_LIBS)
  set(DIFFRT_PC_LIBS_PRIVATE "-lm -l${CMAKE_DL_LIBS} -pthread")
endif()
# relocatable: the prefix is found from the .pc file's own directory
file(RELATIVE_PATH DIFFRT_PC_TO_PREFIX /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/diffrt.pc.in ${PROJECT_BINARY_DIR}/diffrt.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/diffrt.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT dev)
