# Runs PROGRAM with ARGS (a list) and passes if it exits with 2 and its stderr matches the
# regular expression EXPECTED: a refused command line, named. EMULATOR: the command that runs a
# cross build's programs (a ;-list), empty otherwise.
execute_process(COMMAND ${EMULATOR} ${PROGRAM} ${ARGS} RESULT_VARIABLE code OUTPUT_VARIABLE out
                ERROR_VARIABLE err)
if(NOT code EQUAL 2)
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: exit ${code}, expected 2\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT err MATCHES "${EXPECTED}")
  message(FATAL_ERROR "${PROGRAM} ${ARGS}: stderr does not match '${EXPECTED}':\n${err}")
endif()
