# Run at build time (cmake -P) by tfd_catch_test_cases (cmake/catch_tests.cmake): lists the test
# cases of the Catch2 binary EXE and writes OUT, a CTest file with one test per case, named
# "PREFIX: <case>" and running EXE with the case's name as its test spec, with TIMEOUT seconds.
#
# Unlike Catch2's own CatchAddTests.cmake, a name may hold ';', '[' or ']' (CMake's list syntax is
# kept out of the way with placeholders until each name is written), and a binary that lists no
# case, or cannot run, fails the build instead of leaving its cases out.
execute_process(COMMAND "${EXE}" --list-test-names-only OUTPUT_VARIABLE listing RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc MATCHES "^[0-9]+$" OR rc EQUAL 0)
  message(FATAL_ERROR "${EXE} --list-test-names-only: listed no test case (exit ${rc}): ${err}")
endif()
string(REPLACE ";" "@tfd_semicolon@" listing "${listing}")
string(REPLACE "[" "@tfd_open@" listing "${listing}")
string(REPLACE "]" "@tfd_close@" listing "${listing}")
string(REPLACE "\n" ";" lines "${listing}")
set(script "")
set(count 0)
foreach(line IN LISTS lines)
  if(line STREQUAL "")
    continue()
  endif()
  # The name as Catch2 reads a test spec: ',' separates specs and '[' starts a tag, so they and the
  # escape character itself are escaped.
  set(spec "${line}")
  foreach(c "\\" "," "@tfd_open@" "@tfd_close@")
    string(REPLACE "${c}" "\\${c}" spec "${spec}")
  endforeach()
  foreach(var line spec)
    string(REPLACE "@tfd_semicolon@" ";" ${var} "${${var}}")
    string(REPLACE "@tfd_open@" "[" ${var} "${${var}}")
    string(REPLACE "@tfd_close@" "]" ${var} "${${var}}")
  endforeach()
  string(APPEND script "add_test([==[${PREFIX}: ${line}]==] [==[${EXE}]==] [==[${spec}]==])\n")
  string(APPEND script "set_tests_properties([==[${PREFIX}: ${line}]==] PROPERTIES TIMEOUT ${TIMEOUT})\n")
  math(EXPR count "${count} + 1")
endforeach()
file(WRITE "${OUT}" "# ${count} test cases of ${EXE}, listed after its last build.\n${script}")
