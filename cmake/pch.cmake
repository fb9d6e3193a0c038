# One precompiled header (cmake/pch/product.h: Asio, nlohmann/json, spdlog, fmt), compiled once at
# the product's level and reused by the product targets that include Asio: those under the given
# directories that are, or link, one of the USERS libraries. Only they gain: for a unit without Asio,
# loading the header costs about what parsing its own few headers did (measured: docs/architecture.md,
# "Building fast"). GCC accepts a header precompiled at -O3 in an -O1 unit, not at -O0, so the tests
# keep their own (test/catch/pch.h). A target with CUDA sources is left out; SKIP names those that
# cannot reuse it (compiled with a flag that defines a macro: -fopenmp, _OPENMP) or gain nothing
# (a small unit that links a user but includes no Asio itself).
#
#   tfd_product_pch(DIRECTORIES common daemon launcher USERS tfd_transport SKIP tfd_tensor)
include(${CMAKE_CURRENT_LIST_DIR}/link_rules.cmake)  # _tfd_link_closure

function(_tfd_targets_under dir out)
  get_property(targets DIRECTORY ${dir} PROPERTY BUILDSYSTEM_TARGETS)
  get_property(subdirs DIRECTORY ${dir} PROPERTY SUBDIRECTORIES)
  foreach(sub IN LISTS subdirs)
    _tfd_targets_under(${sub} more)
    list(APPEND targets ${more})
  endforeach()
  set(${out} "${targets}" PARENT_SCOPE)
endfunction()

function(tfd_product_pch)
  cmake_parse_arguments(ARG "" "" "DIRECTORIES;USERS;SKIP" ${ARGN})
  add_library(tfd_pch OBJECT ${PROJECT_SOURCE_DIR}/cmake/pch/product.cc)
  # The definitions every unit that reuses it has (spdlog's, fmt's and Boost::headers's; the last is
  # given to every user below), so the header's macros agree: GCC refuses a header precompiled
  # without a definition the unit has, or with one it lacks, where the header tests it. -Winvalid-pch
  # says which, and fails a -Werror build rather than quietly parsing the headers again.
  target_link_libraries(tfd_pch PRIVATE nlohmann_json::nlohmann_json spdlog::spdlog Boost::headers)
  target_precompile_headers(tfd_pch PRIVATE ${PROJECT_SOURCE_DIR}/cmake/pch/product.h)
  foreach(dir IN LISTS ARG_DIRECTORIES)
    _tfd_targets_under(${PROJECT_SOURCE_DIR}/${dir} targets)
    foreach(target IN LISTS targets)
      get_target_property(type ${target} TYPE)
      if(NOT type MATCHES "^(STATIC_LIBRARY|SHARED_LIBRARY|OBJECT_LIBRARY|EXECUTABLE)$" OR target IN_LIST ARG_SKIP)
        continue()
      endif()
      get_target_property(sources ${target} SOURCES)
      list(FILTER sources INCLUDE REGEX "\\.cu$")
      set(closure "")
      _tfd_link_closure(${target} closure)
      list(APPEND closure ${target})
      set(user OFF)
      foreach(lib IN LISTS ARG_USERS)
        if(lib IN_LIST closure)
          set(user ON)
        endif()
      endforeach()
      if(sources OR NOT user)
        continue()
      endif()
      target_precompile_headers(${target} REUSE_FROM tfd_pch)
      target_compile_definitions(${target} PRIVATE BOOST_ALL_NO_LIB)  # what Boost::headers defines; only MSVC reads it
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:-Winvalid-pch>)
    endforeach()
  endforeach()
endfunction()
