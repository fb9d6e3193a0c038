# tfd_catch_test_cases(TARGET PREFIX TIMEOUT): one CTest test per TEST_CASE of the Catch2 binary
# TARGET, named "PREFIX: <case name>" (so `ctest -N` lists every case and a failure is reported by its
# name), listed after each build of TARGET by cmake/catch_list.cmake.
function(tfd_catch_test_cases target prefix timeout)
  set(tests_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_cases.cmake")
  set(include_file "${CMAKE_CURRENT_BINARY_DIR}/${target}_include.cmake")
  add_custom_command(TARGET ${target} POST_BUILD
                     COMMAND ${CMAKE_COMMAND} -D "EXE=$<TARGET_FILE:${target}>" -D "OUT=${tests_file}" -D "PREFIX=${prefix}"
                             -D "TIMEOUT=${timeout}" -P "${PROJECT_SOURCE_DIR}/cmake/catch_list.cmake"
                     VERBATIM)
  file(WRITE "${include_file}"
       "if(EXISTS \"${tests_file}\")\n  include(\"${tests_file}\")\nelse()\n  add_test(${target}_NOT_BUILT ${target}_NOT_BUILT)\nendif()\n")
  set_property(DIRECTORY APPEND PROPERTY TEST_INCLUDE_FILES "${include_file}")
endfunction()
