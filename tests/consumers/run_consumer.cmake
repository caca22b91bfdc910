# Builds and runs one downstream project of kvring, as a user would.
#   KIND=install           configure kvring alone and install it into INSTALL_DIR
#   KIND=find_package      a project using find_package(kvring) from INSTALL_DIR
#   KIND=add_subdirectory  a project adding kvring's source tree
#   KIND=fetch_content     a project declaring kvring with FetchContent
#   KIND=headers           every public header alone, -fno-exceptions -Werror, with CXX
cmake_minimum_required(VERSION 3.16)
get_filename_component(here "${CMAKE_CURRENT_LIST_FILE}" DIRECTORY)
file(REMOVE_RECURSE "${BINARY_DIR}")

function(run)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE out)
  if(NOT status EQUAL 0)
    message(FATAL_ERROR "failed (${status}): ${ARGN}\n${out}")
  endif()
endfunction()

set(common -DCMAKE_CXX_COMPILER=${CXX} -DKVRING_ALLOW_FETCH=OFF)
# add_subdirectory and FetchContent users often set no build type: their projects set none, and
# check that kvring::kernels compiles optimised all the same.
if(KIND STREQUAL "add_subdirectory" OR KIND STREQUAL "fetch_content")
  set(no_build_type ON)
  list(APPEND common -DCMAKE_BUILD_TYPE= -DCMAKE_EXPORT_COMPILE_COMMANDS=ON)
else()
  set(no_build_type OFF)
  list(APPEND common -DCMAKE_BUILD_TYPE=Release)
endif()

# Fails unless the compile command of kvring::kernels in BINARY_DIR optimises.
function(check_kernels_optimised)
  file(READ "${BINARY_DIR}/compile_commands.json" commands)
  string(JSON count LENGTH "${commands}")
  math(EXPR last "${count} - 1")
  set(kernels_command "")
  foreach(index RANGE ${last})
    string(JSON file GET "${commands}" ${index} file)
    if(file MATCHES "kvring_kernels\\.cc$")
      string(JSON kernels_command GET "${commands}" ${index} command)
    endif()
  endforeach()
  if(kernels_command STREQUAL "")
    message(FATAL_ERROR "no compile command of kvring_kernels.cc in ${BINARY_DIR}")
  endif()
  if(NOT kernels_command MATCHES " -O[23] ")
    message(FATAL_ERROR "with no build type, kvring::kernels compiles unoptimised: "
                        "${kernels_command}")
  endif()
endfunction()
if(KIND STREQUAL "install")
  # The top-level project as a user installs it: configure (tools on by default), build,
  # install; only the tests, benchmarks and examples are left out, to save the time.
  file(REMOVE_RECURSE "${INSTALL_DIR}")
  run(${CMAKE_COMMAND} -S "${SOURCE_DIR}" -B "${BINARY_DIR}" ${common}
      -DKVRING_BUILD_TESTS=OFF -DKVRING_BUILD_BENCHMARKS=OFF -DKVRING_BUILD_EXAMPLES=OFF
      "-DCMAKE_INSTALL_PREFIX=${INSTALL_DIR}")
  run(${CMAKE_COMMAND} --build "${BINARY_DIR}" --parallel 2)
  run(${CMAKE_COMMAND} --install "${BINARY_DIR}")
  if(NOT EXISTS "${INSTALL_DIR}/include/kvring/layer_plan.h")
    message(FATAL_ERROR "the install tree lacks include/kvring/layer_plan.h")
  endif()
  if(NOT EXISTS "${INSTALL_DIR}/bin/kvring-plan")
    message(FATAL_ERROR "a plain configure, build and install did not install bin/kvring-plan")
  endif()
  run("${INSTALL_DIR}/bin/kvring-plan" --list-presets)
  return()
endif()

set(project_args "-DKVRING_SOURCE_DIR=${SOURCE_DIR}")
if(KIND STREQUAL "find_package")
  list(APPEND project_args "-DCMAKE_PREFIX_PATH=${INSTALL_DIR}")
endif()
run(${CMAKE_COMMAND} -S "${here}/${KIND}" -B "${BINARY_DIR}" ${common} ${project_args})
run(${CMAKE_COMMAND} --build "${BINARY_DIR}" --parallel 2)
if(no_build_type)
  check_kernels_optimised()
endif()
if(NOT KIND STREQUAL "headers")
  run("${BINARY_DIR}/consumer")
endif()
