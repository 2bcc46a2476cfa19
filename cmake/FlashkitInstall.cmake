# `cmake --install` gives a package that find_package(flashkit) consumes.
include(CMakePackageConfigHelpers)
include(GNUInstallDirs)

install(TARGETS flashkit EXPORT flashkitTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/flashkit DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
if(TARGET flashkit_cli)
  install(TARGETS flashkit_cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
install(EXPORT flashkitTargets NAMESPACE flashkit::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashkit)

configure_package_config_file(cmake/flashkitConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/flashkitConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashkit)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/flashkitConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/flashkitConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/flashkitConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/flashkit)
