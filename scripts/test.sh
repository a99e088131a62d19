#!/usr/bin/env bash
# Installs dependencies, builds everything and runs every test (unit, integration, slow).
# Pass ctest arguments to narrow it, e.g. `scripts/test.sh -LE slow` or `-R codec`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
ctest --output-on-failure -j2 "$@"
