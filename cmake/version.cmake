# The version lives in two places that must agree: project(VERSION) here, for the build,
# the shared library's soname, dsv4.pc and dsv4ConfigVersion.cmake; and the DSV4_VERSION_*
# macros of include/dsv4.h, for programs compiled against the headers. A mismatch stops
# the configure step.
file(STRINGS ${CMAKE_SOURCE_DIR}/include/dsv4.h DSV4_VERSION_LINES
     REGEX "^#define DSV4_VERSION_(MAJOR|MINOR|PATCH) +[0-9]+")
foreach(part MAJOR MINOR PATCH)
  set(header_${part} "")
  foreach(line ${DSV4_VERSION_LINES})
    if(line MATCHES "^#define DSV4_VERSION_${part} +([0-9]+)")
      set(header_${part} ${CMAKE_MATCH_1})
    endif()
  endforeach()
endforeach()
set(DSV4_HEADER_VERSION "${header_MAJOR}.${header_MINOR}.${header_PATCH}")
if(NOT DSV4_HEADER_VERSION STREQUAL PROJECT_VERSION)
  message(FATAL_ERROR "include/dsv4.h says version ${DSV4_HEADER_VERSION} "
                      "(DSV4_VERSION_MAJOR/MINOR/PATCH), CMakeLists.txt says ${PROJECT_VERSION}")
endif()
