# Runs TOOL with ARGS (a ;-list) and checks its exit status and both output streams. EMULATOR:
# the command that runs a cross build's programs (a ;-list), empty otherwise.
execute_process(COMMAND ${EMULATOR} ${TOOL} ${ARGS}
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
set(failed "")
if(NOT status STREQUAL EXPECTED_STATUS)
  string(APPEND failed "exit status ${status}, expected ${EXPECTED_STATUS}\n")
endif()
if(NOT out MATCHES "${STDOUT_REGEX}")
  string(APPEND failed "stdout does not match '${STDOUT_REGEX}'\n")
endif()
if(NOT err MATCHES "${STDERR_REGEX}")
  string(APPEND failed "stderr does not match '${STDERR_REGEX}'\n")
endif()
if(failed)
  message(FATAL_ERROR "${TOOL} ${ARGS}\n${failed}--- stdout:\n${out}--- stderr:\n${err}")
endif()
