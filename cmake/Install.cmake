# cmake --install: library, headers, a bagua-config.cmake package for find_package(bagua), and bagua.pc.
include(CMakePackageConfigHelpers)
install(TARGETS bagua bagua_static EXPORT bagua-targets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/bagua DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_BINARY_DIR}/include/bagua/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/bagua)
# bagua.pc, relocatable: the prefix is found from the file's own place.
file(RELATIVE_PATH BAGUA_PC_RELATIVE_PREFIX "/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/")
string(REGEX REPLACE "/$" "" BAGUA_PC_RELATIVE_PREFIX "${BAGUA_PC_RELATIVE_PREFIX}")
configure_file(cmake/bagua.pc.in ${PROJECT_BINARY_DIR}/bagua.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/bagua.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
install(TARGETS bagua-run bagua-trace RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(EXPORT bagua-targets NAMESPACE bagua:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bagua)
configure_package_config_file(cmake/bagua-config.cmake.in ${PROJECT_BINARY_DIR}/bagua-config.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bagua)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/bagua-config-version.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/bagua-config.cmake ${PROJECT_BINARY_DIR}/bagua-config-version.cmake
              ${PROJECT_SOURCE_DIR}/cmake/cuda-toolkit-compat.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/bagua)
