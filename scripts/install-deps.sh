#!/usr/bin/env bash
# Installs, from Debian's packages, what building and testing kvring needs and is missing.
set -euo pipefail
packages=(cmake make ccache g++ clang libclang-rt-14-dev libhwy-dev libgtest-dev libgmock-dev
          libbenchmark-dev nlohmann-json3-dev)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" ||
    missing+=("$package")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "kvring: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi
