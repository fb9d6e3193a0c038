# Link rules checked when the project is configured: a library named here must never reach the
# listed targets through its link closure, so a rule broken by a new target_link_libraries line
# fails the configure step instead of waiting for a review.
#
#   tfd_forbid_links(TARGET tfd_ps FORBID tfd_model tfd_tensor "CUDA::.*" REASON "...")
#
# FORBID entries are regular expressions matched against whole target names.

function(_tfd_link_closure target out)
  set(seen "${${out}}")
  get_target_property(type ${target} TYPE)
  set(props INTERFACE_LINK_LIBRARIES)
  if(NOT type STREQUAL "INTERFACE_LIBRARY")
    list(APPEND props LINK_LIBRARIES)
  endif()
  foreach(prop IN LISTS props)
    get_target_property(libs ${target} ${prop})
    if(NOT libs)
      continue()
    endif()
    foreach(lib IN LISTS libs)
      string(REGEX REPLACE "^\\$<LINK_ONLY:(.*)>$" "\\1" lib "${lib}")
      if(lib IN_LIST seen OR NOT TARGET ${lib})
        continue()
      endif()
      list(APPEND seen ${lib})
      _tfd_link_closure(${lib} seen)
    endforeach()
  endforeach()
  set(${out} "${seen}" PARENT_SCOPE)
endfunction()

function(tfd_forbid_links)
  cmake_parse_arguments(RULE "" "TARGET;REASON" "FORBID" ${ARGN})
  set(closure "")
  _tfd_link_closure(${RULE_TARGET} closure)
  foreach(lib IN LISTS closure)
    foreach(pattern IN LISTS RULE_FORBID)
      if(lib MATCHES "^${pattern}$")
        message(FATAL_ERROR "link rule: ${RULE_TARGET} links ${lib} (through its dependencies): ${RULE_REASON}")
      endif()
    endforeach()
  endforeach()
endfunction()
