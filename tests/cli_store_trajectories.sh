#!/usr/bin/env bash
# The object-store refit (tests/store_lib.sh run_store_chain: 4 receivers bit-exact after every
# commit, a fifth started from nothing after step 7) along the 11-step chain of the real BF16
# trajectories (shared/data/trajectories/README.md: lr1e-06_s0 -> ... -> lr1e-05_s3, including
# the two zero-change links), once through a file:// store and once through a real s3rver.
# Usage: cli_store_trajectories.sh DIR. Skips (77) when DIR does not hold the files.
set -euo pipefail
T=${1:?usage: cli_store_trajectories.sh DIR}
for r in 1e-06 3e-06 1e-05; do
  for s in 0 1 2 3; do
    [[ -f $T/lr${r}_s$s.safetensors ]] || { echo "SKIP: $T/lr${r}_s$s.safetensors not found"; exit 77; }
  done
done
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/refit_lib.sh"
source "$(dirname "$0")/s3rver_lib.sh"
source "$(dirname "$0")/store_lib.sh"

CHAIN=$WORK/chain
mkdir -p "$CHAIN"
k=0
for r in 1e-06 3e-06 1e-05; do
  for s in 0 1 2 3; do
    ln -s "$(realpath "$T/lr${r}_s$s.safetensors")" "$CHAIN/step_$k.safetensors"
    k=$((k + 1))
  done
done

# reset_run: stops every receiver and forgets the replicas and the baseline of the last run.
reset_run() {
  local n
  for n in "${!RECV_PID[@]}"; do stop_receiver "$n"; done
  rm -rf "$WORK"/{a,b,c,d,late,baseline} "$WORK"/*.log
}

note "through file://"
STORE=file://$WORK/store
run_store_chain "$CHAIN"
reset_run

note "through S3 (s3rver)"
start_s3rver "$WORK/s3rver"
STORE=s3://$S3_BUCKET/trajectories
STORE_ARGS=(--s3-endpoint "$S3_ENDPOINT")
run_store_chain "$CHAIN"
reset_run
note "OK"
