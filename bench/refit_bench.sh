#!/usr/bin/env bash
# End-to-end live refit benchmark: real processes on loopback TCP (N receivers in a binary relay
# tree, M producers), every consecutive pair of a chain of snapshots refit as a delta, and the
# same snapshot refit densely (every element sent through the same path: `dcr push --dense`) as
# the reference measured in the same run. Reports per step: changed %, wire bytes, delta refit
# time, dense refit time and their ratio; every receiver is checked bit-exact after each commit.
#
#   bench/refit_bench.sh [--receivers N] [--producers M] [--chunk-kib K] [CHAIN...]
#
# CHAIN: snapshot files in order (default: the 12 real trajectory snapshots under
# ../shared/data/trajectories). Needs build/dcr. Loopback has no real bandwidth limit, so the
# ratio here is a lower bound of what a WAN link gives (there, wire bytes dominate).
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DCR=${DCR:-$ROOT/build/dcr}
N=4 M=2 CHUNK=32768
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --receivers) N=$2; shift 2 ;;
    --producers) M=$2; shift 2 ;;
    --chunk-kib) CHUNK=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$ROOT/bench/e2e_lib.sh"
e2e_setup refit-bench "$@"
port() { py -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

EPS=""
for ((i = 0; i < N; i++)); do
  ep="tcp://127.0.0.1:$(port)"
  "$DCR" serve --state "$W/r$i" --listen "$ep" --init "${CHAIN[0]}" >>"$W/r$i.log" 2>&1 &
  PIDS+=($!)
  EPS+="${EPS:+,}$ep"
done
until "$DCR" status --timeout 1 ${EPS//,/ } >/dev/null 2>&1; do sleep 0.1; done
COORD="tcp://127.0.0.1:$(port)"

# push NEW [ARGS]: one refit with M producers; prints producer 0's JSON.
push() {
  local new=$1 p pids=()
  shift
  for ((p = M - 1; p >= 1; p--)); do
    "$DCR" push --producer "$p/$M" --baseline "$W/p$p" --init "${CHAIN[0]}" --new "$new" --coordinator "$COORD" \
      --chunk-kib "$CHUNK" "$@" >>"$W/push.log" 2>&1 &
    pids+=($!)
  done
  "$DCR" push --producer "0/$M" --baseline "$W/p0" --init "${CHAIN[0]}" --new "$new" --coordinator "$COORD" \
    --receivers "$EPS" --chunk-kib "$CHUNK" --json "$@" 2>>"$W/push.log"
  for p in "${pids[@]}"; do wait "$p"; done
}
field() { py -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, {"j": j}))' "$1" "$2"; }
check() {
  local i
  for ((i = 0; i < N; i++)); do "$DCR" verify "$W/r$i" "$1" >/dev/null || { echo "receiver $i differs from $1" >&2; exit 1; }; done
}

push "${CHAIN[0]}" --dense >/dev/null  # seeds the baselines; not timed
echo "live refit, $N receivers (binary tree), $M producers, loopback TCP; dense = every element through the same path"
printf '%4s %9s %11s %11s %10s %10s %8s\n' step changed dense_B wire_B delta_s dense_s ratio
sum_d=0 sum_x=0
for ((k = 1; k < ${#CHAIN[@]}; k++)); do
  j=$(push "${CHAIN[$k]}")
  check "${CHAIN[$k]}"
  jd=$(push "${CHAIN[$k]}" --dense)  # same bits again, every element sent: the reference
  check "${CHAIN[$k]}"
  td=$(field "$j" 'j["seconds"]["total"]')
  tx=$(field "$jd" 'j["seconds"]["total"]')
  printf '%4d %8.3f%% %11d %11d %10.3f %10.3f %7.1fx\n' "$k" "$(field "$j" '100*j["changed_elements"]/j["total_elements"]')" \
    "$(field "$j" 'j["dense_bytes"]')" "$(field "$j" 'j["wire_bytes"]')" "$td" "$tx" "$(field "$j" "$tx/max($td,1e-9)")"
  sum_d=$(py -c "print($sum_d+$td)")
  sum_x=$(py -c "print($sum_x+$tx)")
done
echo "total: delta $(printf %.3f "$sum_d") s, dense $(printf %.3f "$sum_x") s, ratio $(py -c "print(f'{$sum_x/$sum_d:.1f}')")x; every receiver bit-exact after every commit"
