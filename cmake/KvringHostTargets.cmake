# kvring_host_targets(<unrunnable>): the Highway targets to leave out of a build on this
# machine, as an HWY_DISABLED_TARGETS value: the x86 targets a build for dynamic dispatch would
# compile but this machine cannot run. Asks Highway by building and running
# cmake/host_targets.cc at configure time (once per build tree). The scalar fallback is never
# among them. Used by the sanitizer presets (KVRING_TEST_HOST_TARGETS_ONLY): code that never
# runs on the host is not built there.
function(kvring_host_targets unrunnable)
  if(NOT DEFINED KVRING_HOST_DISABLED_TARGETS)
    try_run(run_status compile_ok "${CMAKE_BINARY_DIR}/kvring_host_targets"
            "${PROJECT_SOURCE_DIR}/cmake/host_targets.cc"
            CMAKE_FLAGS -DCMAKE_CXX_STANDARD=17
            LINK_LIBRARIES hwy::hwy
            COMPILE_OUTPUT_VARIABLE compile_output
            RUN_OUTPUT_VARIABLE mask)
    if(NOT compile_ok OR NOT run_status EQUAL 0 OR NOT mask MATCHES "^[0-9]+$")
      message(FATAL_ERROR "KVRING_TEST_HOST_TARGETS_ONLY: could not ask Highway which targets "
                          "this machine runs (status '${run_status}', output '${mask}'):\n"
                          "${compile_output}")
    endif()
    set(KVRING_HOST_DISABLED_TARGETS "${mask}" CACHE INTERNAL
        "Highway targets this machine cannot run")
    message(STATUS "kvring: HWY_DISABLED_TARGETS for this machine (the targets it cannot run): "
                   "${mask}")
  endif()
  # The first value: build trees configured before 2026-12-05 cached a second one after it.
  list(GET KVRING_HOST_DISABLED_TARGETS 0 first)
  set(${unrunnable} "${first}" PARENT_SCOPE)
endfunction()
