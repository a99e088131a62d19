#!/usr/bin/env bash
# Installs dcr's build and test dependencies from Debian's packages. Idempotent: packages that
# are already installed are left alone, and apt is not touched when nothing is missing.
# `--fuzz` adds clang and its sanitizer runtimes for scripts/fuzz.sh.
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config
  libzstd-dev libxxhash-dev libzmq3-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
)
[ "${1:-}" = "--fuzz" ] && packages+=(clang libclang-rt-14-dev)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
