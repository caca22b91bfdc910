# Cross build for 64-bit ARM Linux with Debian's g++-aarch64-linux-gnu, against the arm64
# packages of Highway and GoogleTest installed through multiarch (dpkg --add-architecture arm64;
# libhwy-dev:arm64, libgtest-dev:arm64), which live beside the host's in /usr/lib/aarch64-linux-gnu.
# Programs run under qemu-aarch64 (Debian's qemu-user): CTest and gtest_discover_tests prefix
# each test program with CMAKE_CROSSCOMPILING_EMULATOR, and QEMU_CPU in a test's environment
# picks the emulated CPU (its SVE vector length, whether it has SVE at all). The `aarch64`
# preset uses this file.
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR aarch64)
set(CMAKE_C_COMPILER aarch64-linux-gnu-gcc)
set(CMAKE_CXX_COMPILER aarch64-linux-gnu-g++)
# Multiarch: the arm64 packages' libraries and package configs are under /usr/lib/<triplet>,
# which CMake searches for this library architecture; headers are shared in /usr/include
# (Highway's and GoogleTest's are the same for every architecture).
set(CMAKE_LIBRARY_ARCHITECTURE aarch64-linux-gnu)
find_program(KVRING_QEMU_AARCH64 qemu-aarch64 REQUIRED)
# The loader and C library of multiarch (libc6:arm64, under /), not the cross compiler's copy
# in /usr/aarch64-linux-gnu: that loader, given multiarch's libc by /etc/ld.so.cache as
# happens there, hangs in the first pthread_create or fork.
set(CMAKE_CROSSCOMPILING_EMULATOR "${KVRING_QEMU_AARCH64};-L;/")
