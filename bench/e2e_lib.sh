# shellcheck shell=bash
# Shared set-up of the end-to-end benchmarks (bench/refit_bench.sh, bench/store_bench.sh), sourced
# after option parsing with the remaining arguments: CHAIN (the given snapshot files, or the 12
# real trajectory snapshots under ../shared/data/trajectories in chain order), W (a scratch
# directory, removed on exit unless KEEP is set), PIDS (processes killed on exit) and py (Debian's
# python3).
# Usage: e2e_setup NAME "$@"
e2e_setup() {
  local name=$1 r s t
  shift
  if [[ $# -gt 0 ]]; then
    CHAIN=("$@")
  else
    t=$ROOT/../shared/data/trajectories
    CHAIN=()
    for r in 1e-06 3e-06 1e-05; do for s in 0 1 2 3; do CHAIN+=("$t/lr${r}_s$s.safetensors"); done; done
  fi
  W=$(mktemp -d "/tmp/dcr-$name-XXXXXX")
  PIDS=()
  trap _e2e_cleanup EXIT
}
_e2e_cleanup() {
  local p
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  [[ -n ${KEEP:-} ]] || rm -rf "$W"
}
py() { /usr/bin/python3 "$@"; }
