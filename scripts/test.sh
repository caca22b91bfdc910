#!/usr/bin/env bash
# Configures, builds and runs kvring's whole test suite: the debug build (unit tests, tool
# tests, header checks with g++ and clang++, consumer projects), then the same tests under
# AddressSanitizer + UndefinedBehaviorSanitizer, and the attention threading tests under
# ThreadSanitizer.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
cmake --workflow --preset dev
cmake --workflow --preset asan
cmake --workflow --preset tsan
