# Installs the headers and a package config, so that find_package(kvring) works from the
# install tree and finds Highway the same way.
include(CMakePackageConfigHelpers)
install(TARGETS kvring EXPORT kvringTargets)
install(DIRECTORY "${PROJECT_SOURCE_DIR}/include/kvring" DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}")
install(EXPORT kvringTargets NAMESPACE kvring::
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/kvring")
configure_package_config_file("${PROJECT_SOURCE_DIR}/cmake/kvringConfig.cmake.in"
  "${PROJECT_BINARY_DIR}/kvringConfig.cmake"
  INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/kvring")
# Header-only (kvring::kernels is compiled in the user's build): any architecture may use the
# installed package.
write_basic_package_version_file("${PROJECT_BINARY_DIR}/kvringConfigVersion.cmake"
  COMPATIBILITY SameMinorVersion ARCH_INDEPENDENT)
install(FILES "${PROJECT_BINARY_DIR}/kvringConfig.cmake"
              "${PROJECT_BINARY_DIR}/kvringConfigVersion.cmake"
              "${PROJECT_SOURCE_DIR}/cmake/KvringKernels.cmake"
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/kvring")
install(FILES "${PROJECT_SOURCE_DIR}/LICENSE" DESTINATION "${CMAKE_INSTALL_DATADIR}/doc/kvring")
