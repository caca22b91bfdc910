#!/usr/bin/env bash
# Installs, from Debian's packages, what building and testing kvring needs and is missing.
#   bash scripts/install-deps.sh           the native build and its tests
#   bash scripts/install-deps.sh aarch64   also the 64-bit ARM cross build and its emulator:
#                                          g++-aarch64-linux-gnu, qemu-user, and Highway and
#                                          GoogleTest for arm64 (multiarch, which this adds)
set -euo pipefail
packages=(cmake make ccache g++ clang libclang-rt-14-dev libhwy-dev libgtest-dev libgmock-dev
          libbenchmark-dev nlohmann-json3-dev)
sudo=""
[ "$(id -u)" -eq 0 ] || sudo="sudo"
for extra in "$@"; do
  case "$extra" in
    aarch64)
      if ! dpkg --print-foreign-architectures | grep -qx arm64; then
        echo "kvring: adding the arm64 architecture to dpkg (multiarch)"
        $sudo dpkg --add-architecture arm64
      fi
      packages+=(g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libgtest-dev:arm64
                 libgmock-dev:arm64)
      ;;
    *) echo "scripts/install-deps.sh: unknown extra '$extra' (aarch64)" >&2; exit 2 ;;
  esac
done
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kvring: installing ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
