#!/usr/bin/env bash
# The main job: installs dependencies, builds, and runs `dcr demo` on the embedded default.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh dcr
./build/dcr demo "$@"
