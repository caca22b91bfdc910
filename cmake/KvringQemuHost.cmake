# kvring_qemu_host_emulator(): where the tests of a cross build run under qemu on an x86-64
# Linux host, puts cmake/qemu_host_cpuid.cc in front of the emulator: compiled at configure time
# by the host's C++ compiler and preloaded into qemu (not into the emulated program: qemu's -U
# takes it out of the program's environment). On Intel hosts qemu then generates 128-bit AVX
# code, whose floating-point helpers do not pay the 256-bit code's state transitions (about six
# times faster under 256- and 512-bit SVE on an Intel Xeon VM); elsewhere the library does
# nothing. KVRING_QEMU_HOST_CPUID=OFF runs the emulator as the toolchain file gives it.
function(kvring_qemu_host_emulator)
  list(LENGTH CMAKE_CROSSCOMPILING_EMULATOR length)
  if(length EQUAL 0 OR NOT CMAKE_HOST_SYSTEM_NAME STREQUAL "Linux" OR
     NOT CMAKE_HOST_SYSTEM_PROCESSOR MATCHES "^(x86_64|AMD64|amd64)$")
    return()
  endif()
  list(GET CMAKE_CROSSCOMPILING_EMULATOR 0 emulator)
  get_filename_component(emulator_name "${emulator}" NAME)
  if(NOT emulator_name MATCHES "^qemu-")
    return()
  endif()
  set(source "${PROJECT_SOURCE_DIR}/cmake/qemu_host_cpuid.cc")
  set(library "${CMAKE_BINARY_DIR}/kvring_qemu_host_cpuid.so")
  set_property(DIRECTORY "${PROJECT_SOURCE_DIR}" APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
               "${source}")
  find_program(KVRING_HOST_CXX NAMES g++ c++ clang++)
  find_program(KVRING_ENV env)
  if(NOT KVRING_HOST_CXX OR NOT KVRING_ENV)
    message(STATUS "kvring: no host C++ compiler or env: ${emulator_name} runs as given")
    return()
  endif()
  execute_process(COMMAND "${KVRING_HOST_CXX}" -std=c++17 -O2 -Wall -Wextra -Werror -shared
                          -fPIC -o "${library}" "${source}" -ldl
                  RESULT_VARIABLE status OUTPUT_VARIABLE output ERROR_VARIABLE output)
  if(status EQUAL 0)
    # The emulator must start and stop with it preloaded.
    execute_process(COMMAND "${KVRING_ENV}" "LD_PRELOAD=${library}" "${emulator}" --version
                    RESULT_VARIABLE status OUTPUT_VARIABLE version ERROR_VARIABLE output)
  endif()
  if(NOT status EQUAL 0)
    message(WARNING "kvring: ${emulator_name} runs without ${source} (status '${status}'):\n"
                    "${output}")
    return()
  endif()
  list(SUBLIST CMAKE_CROSSCOMPILING_EMULATOR 1 -1 arguments)
  set(CMAKE_CROSSCOMPILING_EMULATOR
      "${KVRING_ENV};LD_PRELOAD=${library};${emulator};-U;LD_PRELOAD;${arguments}" PARENT_SCOPE)
  message(STATUS "kvring: ${emulator_name} runs with ${library} preloaded")
endfunction()
