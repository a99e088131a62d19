#!/usr/bin/env bash
# End-to-end object-store refit benchmark: N `dcr serve --store` receivers follow a store that
# one `dcr push --store` fills with every consecutive pair of a chain of snapshots, refit as a
# delta, and the same snapshot again refit densely (every element as an overwrite through the
# same store: `dcr push --dense`) as the reference measured in the same run. A refit's time runs
# from the push's start until every receiver has committed the new version. Reports per step:
# changed %, wire bytes (payload objects), store requests, delta and dense refit time and their
# ratio; every receiver is checked bit-exact after each commit.
#
#   bench/store_bench.sh [--receivers N] [--s3] [CHAIN...]
#
# --s3 runs against a local s3rver (tests/npm, scripts/install-deps.sh) instead of file://. s3rver
# rewrites objects in place, so a GET or LIST that meets an object being rewritten (heartbeats,
# head.json) fails with 500 and the client's backoff adds up to seconds to some refits: its
# timings are not representative of S3. VERBOSE=1 prints each push's stage timings and store
# counters; KEEP=1 keeps the scratch directory (logs, s3rver.log).
# CHAIN: snapshot files in order (default: the 12 real trajectory snapshots under
# ../shared/data/trajectories). Needs build/dcr.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
DCR=${DCR:-$ROOT/build/dcr}
N=4 S3=0
while [[ $# -gt 0 && $1 == --* ]]; do
  case $1 in
    --receivers) N=$2; shift 2 ;;
    --s3) S3=1; shift ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
source "$ROOT/bench/e2e_lib.sh"
e2e_setup store-bench "$@"

ARGS=()
if ((S3)); then
  node --openssl-legacy-provider "$ROOT/tests/npm/node_modules/s3rver/bin/s3rver.js" --directory "$W/s3" --address 127.0.0.1 --port 0 \
    --configure-bucket bench >"$W/s3rver.log" 2>&1 &
  PIDS+=($!)
  until grep -q "listening on" "$W/s3rver.log" 2>/dev/null; do sleep 0.1; done
  port=$(sed -nE 's/.*listening on [0-9.]+:([0-9]+).*/\1/p' "$W/s3rver.log" | head -1)
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER
  STORE=s3://bench/refit
  ARGS=(--s3-endpoint "http://127.0.0.1:$port")
else
  STORE=file://$W/store
fi

version() { py -c 'import json,sys; print(json.load(open(sys.argv[1]))["number"])' "$1/state.json" 2>/dev/null || echo -1; }
field() { py -c 'import json,sys; j=json.loads(sys.argv[1]); print(eval(sys.argv[2], {}, {"j": j}))' "$1" "$2"; }
now() { date +%s.%N; }  # the same clock as Python's time.time()

# refit NEW [ARGS]: one push; waits until every receiver holds the new version and checks its
# bits. Prints the push's JSON with "refit_seconds" (push start to the last receiver's commit).
refit() {
  local new=$1 t0 j want i
  shift
  t0=$(now)
  j=$("$DCR" push --store "$STORE" "${ARGS[@]}" --baseline "$W/p" --init "${CHAIN[0]}" --new "$new" --json \
    --anchor-every 0 "$@" 2>>"$W/push.log")
  want=$(field "$j" 'j["version"]["number"]')
  # One waiter process polls every replica's state.json (a process per poll would cost more
  # than the refit).
  local t
  t=$(py - "$t0" "$want" "$W" "$N" <<'PY'
import json, sys, time
t0, want, w, n = float(sys.argv[1]), int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
def number(i):
    try:
        return json.load(open(f"{w}/r{i}/state.json"))["number"]
    except (OSError, ValueError, KeyError):
        return -1
while any(number(i) != want for i in range(n)):
    time.sleep(0.002)
print(time.time() - t0)
PY
)
  for ((i = 0; i < N; i++)); do "$DCR" verify "$W/r$i" "$new" >/dev/null || { echo "receiver $i differs from $new" >&2; exit 1; }; done
  [[ -z ${VERBOSE:-} ]] || echo "push: $(field "$j" 'j["seconds"], j["store"]') refit $t s" >&2
  field "$j" "{**j, 'refit_seconds': $t}" | tr "'" '"' | sed 's/True/true/g; s/False/false/g'
}

# Publishes the first anchor; no receivers yet.
"$DCR" push --store "$STORE" "${ARGS[@]}" --baseline "$W/p" --init "${CHAIN[0]}" --new "${CHAIN[0]}" --anchor-every 0 \
  >/dev/null 2>>"$W/push.log"
for ((i = 0; i < N; i++)); do
  "$DCR" serve --store "$STORE" "${ARGS[@]}" --state "$W/r$i" --name "r$i" --poll-ms 20 >>"$W/r$i.log" 2>&1 &
  PIDS+=($!)
done
for ((i = 0; i < N; i++)); do until [[ $(version "$W/r$i") -ge 0 ]]; do sleep 0.05; done; done
sleep 1.5  # every receiver registered (heartbeat), so every push waits for all votes

echo "object-store refit ($STORE), $N receivers polling every 20 ms; dense = every element through the same store"
printf '%4s %9s %11s %11s %9s %10s %10s %8s\n' step changed dense_B wire_B requests delta_s dense_s ratio
sum_d=0 sum_x=0
for ((k = 1; k < ${#CHAIN[@]}; k++)); do
  j=$(refit "${CHAIN[$k]}")
  jd=$(refit "${CHAIN[$k]}" --dense)  # same bits again, every element published: the reference
  td=$(field "$j" 'j["refit_seconds"]')
  tx=$(field "$jd" 'j["refit_seconds"]')
  printf '%4d %8.3f%% %11d %11d %9d %10.3f %10.3f %7.1fx\n' "$k" "$(field "$j" '100*j["changed_elements"]/j["total_elements"]')" \
    "$(field "$j" 'j["dense_bytes"]')" "$(field "$j" 'j["wire_bytes"]')" "$(field "$j" 'j["store"]["requests"]')" "$td" "$tx" \
    "$(field "$j" "$tx/max($td,1e-9)")"
  sum_d=$(py -c "print($sum_d+$td)")
  sum_x=$(py -c "print($sum_x+$tx)")
done
echo "total: delta $(printf %.3f "$sum_d") s, dense $(printf %.3f "$sum_x") s, ratio $(py -c "print(f'{$sum_x/$sum_d:.1f}')")x; every receiver bit-exact after every commit"
