# shellcheck shell=bash
# Helpers for the object-store refit tests (sourced after lib.sh and refit_lib.sh, whose EXIT
# trap kills every process in RECV_PID and BG_PIDS). Receivers are real `dcr serve --store`
# processes; producers are `dcr push --store` runs. The store is $STORE (file://… or s3://…);
# STORE_ARGS holds extra flags both need (e.g. --s3-endpoint).

STORE_ARGS=(${STORE_ARGS[@]+"${STORE_ARGS[@]}"})

# start_store_receiver NAME [ARGS...]: `dcr serve --store $STORE --state $WORK/NAME --name NAME`
# in the background (log: $WORK/NAME.log).
start_store_receiver() {
  local name=$1
  shift
  "$DCR" serve --store "$STORE" "${STORE_ARGS[@]}" --state "$WORK/$name" --name "$name" --poll-ms 50 "$@" \
    >>"$WORK/$name.log" 2>&1 &
  RECV_PID[$name]=$!
}

# replica_version NAME: the committed version number in $WORK/NAME/state.json (-1 if none yet).
replica_version() {
  "$PYTHON" -c '
import json, sys
try:
    print(json.load(open(sys.argv[1]))["number"])
except (OSError, ValueError, KeyError, TypeError):
    print(-1)' "$WORK/$1/state.json"
}

# wait_version N NAME...: waits (60 s at most) until every NAME has committed version N; fails
# naming the laggards and showing their logs otherwise. A receiver that exits fails at once.
wait_version() {
  local want=$1 i n ok
  shift
  for i in $(seq 1 600); do
    ok=1
    for n in "$@"; do
      kill -0 "${RECV_PID[$n]}" 2>/dev/null || { tail -20 "$WORK/$n.log" >&2; fail "receiver $n exited"; }
      [[ $(replica_version "$n") == "$want" ]] || ok=0
    done
    ((ok)) && return 0
    sleep 0.1
  done
  for n in "$@"; do
    echo "receiver $n at $(replica_version "$n"); log:" >&2
    tail -20 "$WORK/$n.log" >&2
  done
  fail "receivers did not all reach version $want within 60 s"
}

# store_push NEW [ARGS...]: one `dcr push --store` from baseline $WORK/baseline (seeded from
# $INIT when empty). JSON in $WORK/push.json (and appended to $WORK/pushes.jsonl), exit code in
# PUSH_RC, log in $WORK/push.log.
store_push() {
  local new=$1
  shift
  PUSH_RC=0
  "$DCR" push --store "$STORE" "${STORE_ARGS[@]}" --baseline "$WORK/baseline" --init "$INIT" --new "$new" --json \
    --live-seconds 5 --vote-timeout 30 "$@" >"$WORK/push.json" 2>>"$WORK/push.log" || PUSH_RC=$?
  cat "$WORK/push.json" >>"$WORK/pushes.jsonl"
}

# push_json EXPR: a Python expression over the push's JSON object `j`.
push_json() { "$PYTHON" -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$WORK/push.json" "$1"; }

# verify_replicas CKPT NAME...: every NAME's state dir holds exactly CKPT's bits.
verify_replicas() {
  local ckpt=$1 n
  shift
  for n in "$@"; do
    run_expect 0 "$DCR" verify "$WORK/$n" "$ckpt"
    grep -q IDENTICAL "$WORK/out" || fail "receiver $n does not hold $ckpt: $(cat "$WORK/out")"
  done
}

# run_store_chain CHAIN_DIR [LAST]: the chain step_0 … step_LAST (default: every step) through $STORE to 4 receivers (two seeded
# from the store's first anchor, two from --init), every receiver bit-exact after every commit,
# each push waiting for all their votes; after step 7 a fifth receiver starts from nothing,
# seeds from the newest anchor, catches up through the chain and follows.
run_store_chain() {
  local chain=$1 steps k
  steps=$(find "$chain" -maxdepth 1 -name 'step_*.safetensors' | wc -l)
  [[ -z ${2:-} ]] || steps=$(($2 + 1))
  INIT=$chain/step_0.safetensors
  note "first push to the empty store $STORE publishes the version-0 anchor"
  store_push "$chain/step_1.safetensors" --anchor-every 3
  [[ $PUSH_RC == 0 ]] || { cat "$WORK/push.log" >&2; fail "first push failed"; }
  assert_eq "$(push_json 'j["version"]["number"]')" 1 "first push's version"
  start_store_receiver a
  start_store_receiver b
  start_store_receiver c --init "$INIT"
  start_store_receiver d --init "$INIT"
  NAMES=(a b c d)
  wait_version 1 "${NAMES[@]}"
  verify_replicas "$chain/step_1.safetensors" "${NAMES[@]}"
  grep -q "seeding $WORK/a from anchor v0" "$WORK/a.log" || fail "receiver a did not seed from the v0 anchor"
  for ((k = 2; k < steps; k++)); do
    if ((k == 8)); then
      note "a receiver started from nothing after step 7 catches up (anchor v6 + chain) and follows"
      start_store_receiver late
      wait_version 7 late
      grep -q "from anchor v6" "$WORK/late.log" || fail "the late receiver did not seed from anchor v6: $(cat "$WORK/late.log")"
      NAMES+=(late)
    fi
    store_push "$chain/step_$k.safetensors" --anchor-every 3
    [[ $PUSH_RC == 0 ]] || { cat "$WORK/push.log" >&2; fail "push of step $k failed"; }
    assert_eq "$(push_json 'j["version"]["number"]')" "$k" "version after step $k"
    # Every receiver was live at the base, so the push waited for each one's yes vote.
    assert_eq "$(push_json 'sorted(r["endpoint"] for r in j["receivers"] if r["vote"])')" \
      "$("$PYTHON" -c 'import sys; print(sorted(sys.argv[1:]))' "${NAMES[@]}")" "yes votes for step $k"
    wait_version "$k" "${NAMES[@]}"
    verify_replicas "$chain/step_$k.safetensors" "${NAMES[@]}"
  done
}
