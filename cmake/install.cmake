# cmake --install [--prefix P]: the public headers, libdsv4.a and libdsv4.so, the dsv4
# program, lib/pkgconfig/dsv4.pc and lib/cmake/dsv4/ for find_package(dsv4), which gives
# the targets dsv4::dsv4 (shared) and dsv4::dsv4_static.
include(CMakePackageConfigHelpers)

file(GLOB DSV4_PUBLIC_HEADERS ${CMAKE_SOURCE_DIR}/include/*.h)
# dsv4_server.h belongs to the server library (dsv4_serve, linked into the CLI), not to libdsv4
list(FILTER DSV4_PUBLIC_HEADERS EXCLUDE REGEX "/dsv4_server\\.h$")
install(FILES ${DSV4_PUBLIC_HEADERS} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

set_target_properties(dsv4 PROPERTIES EXPORT_NAME dsv4_static)
set_target_properties(dsv4_shared PROPERTIES EXPORT_NAME dsv4)
install(TARGETS dsv4 dsv4_shared EXPORT dsv4Targets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS dsv4-cli RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

set(DSV4_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/dsv4)
install(EXPORT dsv4Targets NAMESPACE dsv4:: DESTINATION ${DSV4_CMAKE_DIR})
configure_package_config_file(${CMAKE_SOURCE_DIR}/cmake/dsv4Config.cmake.in
  ${CMAKE_BINARY_DIR}/dsv4Config.cmake INSTALL_DESTINATION ${DSV4_CMAKE_DIR})
# 0.x: a different minor version is not compatible
write_basic_package_version_file(${CMAKE_BINARY_DIR}/dsv4ConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/dsv4Config.cmake ${CMAKE_BINARY_DIR}/dsv4ConfigVersion.cmake
        DESTINATION ${DSV4_CMAKE_DIR})

# pkg-config: the shared library links its dependencies itself; a static link
# (pkg-config --static) adds them from Requires.private / Libs.private.
set(DSV4_PC_REQUIRES_PRIVATE "libcjson libpcre2-8 libcrypto")
if(DSV4_MPI)
  string(APPEND DSV4_PC_REQUIRES_PRIVATE " ompi-c")
endif()
if(NUMA_FOUND)
  string(APPEND DSV4_PC_REQUIRES_PRIVATE " numa")
endif()
# relocatable: the prefix is found from the .pc file's own place (pkg-config's pcfiledir)
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(DSV4_PC_PREFIX "${CMAKE_INSTALL_PREFIX}")
else()
  file(RELATIVE_PATH DSV4_PC_UP "/prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/prefix")
  string(REGEX REPLACE "/$" "" DSV4_PC_UP "${DSV4_PC_UP}")
  set(DSV4_PC_PREFIX "\${pcfiledir}/${DSV4_PC_UP}")
endif()
configure_file(${CMAKE_SOURCE_DIR}/cmake/dsv4.pc.in ${CMAKE_BINARY_DIR}/dsv4.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/dsv4.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
