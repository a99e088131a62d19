#!/usr/bin/env bash
# The live refit (tests/cli_refit.sh: 2 producers, 7 receivers, binary relay tree, every receiver
# bit-exact after every commit) along the 11-step chain of the real BF16 trajectories
# (shared/data/trajectories/README.md): lr1e-06_s0 -> ... -> lr1e-05_s3, including the two links
# where consecutive files are identical (zero-change transfers).
# Usage: cli_refit_trajectories.sh DIR. Skips (77) when DIR does not hold the files.
set -euo pipefail
T=${1:?usage: cli_refit_trajectories.sh DIR}
CHAIN="${WORK:?}_chain"
rm -rf "$CHAIN"
mkdir -p "$CHAIN"
k=0
for r in 1e-06 3e-06 1e-05; do
  for s in 0 1 2 3; do
    f=$T/lr${r}_s$s.safetensors
    if [[ ! -f $f ]]; then
      echo "SKIP: $f not found"
      exit 77
    fi
    ln -s "$(realpath "$f")" "$CHAIN/step_$k.safetensors"
    k=$((k + 1))
  done
done
rc=0
bash "$(dirname "$0")/cli_refit.sh" "$CHAIN" || rc=$?
rm -rf "$CHAIN"
exit $rc
