#!/usr/bin/env bash
# Installs dependencies, builds everything and runs every test (unit, integration, slow).
# Pass ctest arguments to narrow it, e.g. `scripts/test.sh -LE slow` or `-R codec`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
cd build
# One job more than cores: the multi-process tests spend much of their time waiting on sockets,
# timeouts and fsync, so a third job fills the idle CPU.
ctest --output-on-failure -j"$(( $(nproc) + 1 ))" "$@"
