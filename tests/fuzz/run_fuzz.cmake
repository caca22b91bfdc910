# Builds the fuzz target TARGET with CXX (clang++) in BINARY_DIR and runs it for RUNS inputs
# of at most MAX_LEN bytes (2048 unless given), from the files of SEED_DIR when given.
if(NOT MAX_LEN)
  set(MAX_LEN 2048)
endif()
file(MAKE_DIRECTORY "${BINARY_DIR}")
get_filename_component(here "${CMAKE_CURRENT_LIST_FILE}" DIRECTORY)
foreach(step configure build)
  if(step STREQUAL "configure")
    set(command ${CMAKE_COMMAND} -S "${here}" -B "${BINARY_DIR}" -DCMAKE_CXX_COMPILER=${CXX}
                "-DKVRING_SOURCE_DIR=${SOURCE_DIR}" -DCMAKE_BUILD_TYPE=RelWithDebInfo)
  else()
    set(command ${CMAKE_COMMAND} --build "${BINARY_DIR}" --target ${TARGET})
  endif()
  execute_process(COMMAND ${command} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "fuzz ${step} failed:\n${out}")
  endif()
endforeach()
file(MAKE_DIRECTORY "${BINARY_DIR}/corpus")
# SEED_DIR: files whose copies start the corpus (the config files, for the config reader).
if(SEED_DIR)
  file(GLOB_RECURSE seeds "${SEED_DIR}/*.json")
  file(COPY ${seeds} DESTINATION "${BINARY_DIR}/corpus")
endif()
# ASan zeroes a large block's shadow with memset instead of mapping it afresh, as the asan
# preset has it (docs/testing.md: where mappings and page faults are dear, state_io_fuzz took
# 0.71x the time).
set(ENV{ASAN_OPTIONS} "$ENV{ASAN_OPTIONS}:clear_shadow_mmap_threshold=1099511627776")
execute_process(COMMAND "${BINARY_DIR}/${TARGET}" -runs=${RUNS} -max_len=${MAX_LEN} -seed=1
                        "${BINARY_DIR}/corpus"
  RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
if(NOT status EQUAL 0)
  # The crash report (the input, its base64 and the artifact's path) ends the output; the
  # progress lines before it can run to thousands.
  string(LENGTH "${out}" length)
  if(length GREATER 8000)
    math(EXPR from "${length} - 8000")
    string(SUBSTRING "${out}" ${from} -1 out)
    set(out "[... the fuzzer's progress lines before this ...]\n${out}")
  endif()
  message(FATAL_ERROR "${TARGET} failed (seed 1, corpus ${BINARY_DIR}/corpus):\n${out}")
endif()
string(REGEX MATCH "Done [0-9]+ runs[^\n]*" done "${out}")
message(STATUS "${TARGET}: ${done}")
