# Shared by the verify-decode CLI scripts (cmake -P): a fresh ${WORK} and run(expected_exit cmd...),
# which fails the script with the command, its exit code and its output when the exit differs.
file(REMOVE_RECURSE ${WORK})
file(MAKE_DIRECTORY ${WORK})
function(run expected)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
  if(NOT rc EQUAL ${expected})
    message(FATAL_ERROR "expected exit ${expected}, got ${rc}: ${ARGN}\n${out}\n${err}")
  endif()
  message(STATUS "${out}${err}")
endfunction()
