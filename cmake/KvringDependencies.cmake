# Dependencies: installed packages first (Debian: libhwy-dev, libgtest-dev, libbenchmark-dev,
# nlohmann-json3-dev), pinned FetchContent otherwise. Set KVRING_ALLOW_FETCH=OFF to make a
# missing package an error instead of a download.
include(GNUInstallDirs)
include(FetchContent)
option(KVRING_ALLOW_FETCH "Download missing dependencies with FetchContent" ON)

function(_kvring_fetch name)
  if(NOT KVRING_ALLOW_FETCH)
    message(FATAL_ERROR "kvring: ${name} is not installed and KVRING_ALLOW_FETCH is OFF")
  endif()
  message(STATUS "kvring: ${name} not found installed; fetching it with FetchContent")
endfunction()

if(NOT TARGET hwy::hwy)
  find_package(hwy 1.0.3 CONFIG QUIET)
  if(NOT hwy_FOUND)
    _kvring_fetch(Highway)
    set(HWY_ENABLE_TESTS OFF CACHE BOOL "" FORCE)
    set(HWY_ENABLE_EXAMPLES OFF CACHE BOOL "" FORCE)
    set(HWY_ENABLE_INSTALL OFF CACHE BOOL "" FORCE)
    FetchContent_Declare(highway
      GIT_REPOSITORY https://github.com/google/highway.git
      GIT_TAG 1.0.3)
    FetchContent_MakeAvailable(highway)
    # An upstream build defines plain `hwy`; kvring links the namespaced name.
    add_library(hwy::hwy ALIAS hwy)
    if(TARGET hwy_contrib AND NOT TARGET hwy::hwy_contrib)
      add_library(hwy::hwy_contrib ALIAS hwy_contrib)
    endif()
  endif()
endif()

macro(kvring_find_gtest)
  if(NOT TARGET GTest::gtest_main)
    find_package(GTest CONFIG QUIET)
    if(NOT GTest_FOUND)
      _kvring_fetch(GoogleTest)
      set(INSTALL_GTEST OFF CACHE BOOL "" FORCE)
      FetchContent_Declare(googletest
        GIT_REPOSITORY https://github.com/google/googletest.git
        GIT_TAG release-1.12.1)
      FetchContent_MakeAvailable(googletest)
    endif()
  endif()
  include(GoogleTest)
endmacro()

macro(kvring_find_benchmark)
  if(NOT TARGET benchmark::benchmark)
    find_package(benchmark CONFIG QUIET)
    if(NOT benchmark_FOUND)
      _kvring_fetch(GoogleBenchmark)
      set(BENCHMARK_ENABLE_TESTING OFF CACHE BOOL "" FORCE)
      set(BENCHMARK_ENABLE_INSTALL OFF CACHE BOOL "" FORCE)
      FetchContent_Declare(googlebenchmark
        GIT_REPOSITORY https://github.com/google/benchmark.git
        GIT_TAG v1.7.1)
      FetchContent_MakeAvailable(googlebenchmark)
    endif()
  endif()
endmacro()

macro(kvring_find_json)
  if(NOT TARGET nlohmann_json::nlohmann_json)
    find_package(nlohmann_json 3.10 CONFIG QUIET)
    if(NOT nlohmann_json_FOUND)
      _kvring_fetch(nlohmann_json)
      FetchContent_Declare(nlohmann_json
        URL https://github.com/nlohmann/json/releases/download/v3.11.2/json.tar.xz)
      FetchContent_MakeAvailable(nlohmann_json)
    endif()
  endif()
endmacro()
