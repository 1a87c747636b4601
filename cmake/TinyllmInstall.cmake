# `cmake --install` gives find_package(tinyllm) and the target tinyllm::tinyllm.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(_config_dir ${CMAKE_INSTALL_LIBDIR}/cmake/tinyllm)
install(TARGETS tinyllm EXPORT tinyllmTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
# mpi_comm.h includes <mpi.h>: it ships only with the MPI backend.
if(TINYLLM_WITH_MPI)
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
else()
  install(DIRECTORY include/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} PATTERN mpi_comm.h EXCLUDE)
endif()
install(EXPORT tinyllmTargets NAMESPACE tinyllm:: DESTINATION ${_config_dir})
if(TARGET tinyllm_app)
  install(TARGETS tinyllm_app RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()

configure_package_config_file(cmake/tinyllmConfig.cmake.in
  ${PROJECT_BINARY_DIR}/tinyllmConfig.cmake INSTALL_DESTINATION ${_config_dir})
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tinyllmConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tinyllmConfig.cmake ${PROJECT_BINARY_DIR}/tinyllmConfigVersion.cmake
  DESTINATION ${_config_dir})
