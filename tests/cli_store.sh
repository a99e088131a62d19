#!/usr/bin/env bash
# Refit through a file:// object store (docs/store.md): a generated 10-step chain reaches 4
# receivers bit-exactly (two seeded from the store's anchor, two from --init), a fifth started
# from nothing after step 7 catches up and follows; then failures: a damaged payload and a
# missing payload are voted down and nothing is committed (every replica stays bit-exact at the
# base, the retry commits); a receiver SIGKILLed mid-apply is not waited for once its heartbeat
# stops, restarts into the base and catches up; one SIGKILLed right after its durable vote
# restarts voted and commits on the decision; a push killed right after recording its commit
# is settled by the next push; garbage collection keeps the chain of a stopped registered
# receiver; `serve --once` catches a new replica up and exits; another model is refused by push
# and serve.
# Usage: cli_store.sh [CHAIN_DIR] [STORE_URL]  (defaults: a generated chain, a file:// store)
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/refit_lib.sh"
source "$(dirname "$0")/store_lib.sh"

if [[ -n ${1:-} ]]; then
  CHAIN=$1
else
  CHAIN=$WORK/chain
  "$DCR_TESTDATA" chain --steps 18 --layers 2 --hidden 128 --vocab 512 "$CHAIN" >/dev/null
fi
STORE=${2:-file://$WORK/store}
SDIR=${STORE#file://}  # the store's directory (file:// only: used to look at objects directly)

if [[ -n ${1:-} ]]; then  # a given chain: the main scenario only
  run_store_chain "$CHAIN"
  note "OK"
  exit 0
fi
run_store_chain "$CHAIN" 10
ALL=(a b c d late)

note "dcr status --store: head, anchors, chain extent and every registered receiver"
run_expect 0 "$DCR" status --store "$STORE"
"$PYTHON" - "$WORK/out" <<'PY' || fail "store status: $(cat "$WORK/out")"
import json, sys
j = json.load(open(sys.argv[1]))
assert j["head"]["version"]["number"] == 10, j["head"]
assert "open" not in j, j
assert j["anchors"] == [6, 9], j["anchors"]  # --anchor-every 3, 2 kept
assert j["chain"]["last"] == 10, j["chain"]
regs = {r["name"]: r for r in j["receivers"]}
assert sorted(regs) == ["a", "b", "c", "d", "late"], sorted(regs)
assert all(r["version"]["number"] == 10 and "pending" not in r and r["heartbeat_age_s"] < 30 for r in regs.values()), regs
PY
run_expect 2 "$DCR" status
run_expect 3 "$DCR" status --store "file://$WORK/no-store"

# head_field EXPR: a Python expression over head.json's object `j`.
head_field() { "$PYTHON" -c 'import json, sys; j = json.load(open(sys.argv[1])); print(eval(sys.argv[2]))' "$SDIR/head.json" "$1"; }

expect_abort() {  # expect_abort CODE WHAT: the last push aborted with CODE; nothing moved
  assert_eq "$PUSH_RC" "$1" "push exit code ($2)"
  grep -q "aborted; the store and the baseline stay at v10" "$WORK/push.log" || fail "no abort message ($2)"
  assert_eq "$(head_field 'j["version"]["number"], "open" in j')" "(10, False)" "store head after the abort ($2)"
  sleep 0.5  # receivers roll back as soon as they vote no; give the last one time to publish
  for n in "${ALL[@]}"; do assert_eq "$(replica_version "$n")" 10 "receiver $n version ($2)"; done
  verify_replicas "$CHAIN/step_10.safetensors" "${ALL[@]}"
}

note "a damaged payload object is refetched, then voted down (corrupt): abort, nothing committed"
store_push "$CHAIN/step_11.safetensors" --inject-corrupt 0
expect_abort 5 "damaged payload"
grep -q "voted no" "$WORK/push.log" || fail "the abort does not name the no vote"

note "a payload the manifest lists but the store never gets is voted down (not found)"
store_push "$CHAIN/step_11.safetensors" --inject-missing 0
expect_abort 3 "missing payload"

note "the retry commits"
store_push "$CHAIN/step_11.safetensors"
[[ $PUSH_RC == 0 ]] || { cat "$WORK/push.log" >&2; fail "retry failed"; }
wait_version 11 "${ALL[@]}"
verify_replicas "$CHAIN/step_11.safetensors" "${ALL[@]}"

# crash_during_push NAME CRASH_POINT STEP: restarts receiver NAME so that it SIGKILLs itself at
# CRASH_POINT, pushes STEP (which must commit without NAME once its heartbeat stops), checks
# that NAME died and did not vote, restarts it and waits until every receiver holds STEP.
crash_during_push() {
  local name=$1 point=$2 step=$3
  stop_receiver "$name"
  DCR_CRASH_AT=$point:1 start_store_receiver "$name"
  store_push "$CHAIN/step_$step.safetensors"
  [[ $PUSH_RC == 0 ]] || { cat "$WORK/push.log" >&2; fail "push with receiver $name dead at $point failed"; }
  wait "${RECV_PID[$name]}" 2>/dev/null && fail "receiver $name did not crash at $point" || true
  unset "RECV_PID[$name]"
  [[ $(push_json "'$name' in [r['endpoint'] for r in j['receivers']]") == False ]] || fail "the dead receiver $name voted"
  start_store_receiver "$name"
  wait_version "$step" "${ALL[@]}"
  verify_replicas "$CHAIN/step_$step.safetensors" "${ALL[@]}"
}

note "a receiver SIGKILLed after its first undo record: not waited for once its heartbeat stops;"
note "it restarts into the exact base (journal rolled back) and catches up through the chain"
crash_during_push c replica.undo_written 12
grep -q "caught up to v12" "$WORK/c.log" || fail "receiver c did not catch up to v12"

note "a receiver SIGKILLed right after its durable vote, before publishing it: restarts voted, commits on the decision"
crash_during_push c replica.voted 13
grep -q "committed v13" "$WORK/c.log" || fail "receiver c did not commit its voted transfer on the decision"

note "a push SIGKILLed right after recording its commit: the next push publishes the decision"
DCR_CRASH_AT=store.decided:1 store_push "$CHAIN/step_14.safetensors"
assert_eq "$PUSH_RC" 137 "push exit status (SIGKILL at store.decided)"
assert_eq "$(head_field '"open" in j')" True "the transfer is still open in the store"
store_push "$CHAIN/step_15.safetensors"
[[ $PUSH_RC == 0 ]] || { cat "$WORK/push.log" >&2; fail "push after the crash failed"; }
grep -q "was left open: publishing its recorded decision (commit)" "$WORK/push.log" || fail "no settlement message"
assert_eq "$(push_json 'j["version"]["number"]')" 15 "version after the settled commit and the next push"
wait_version 15 "${ALL[@]}"
verify_replicas "$CHAIN/step_15.safetensors" "${ALL[@]}"

note "garbage collection keeps the chain a stopped registered receiver needs, and only that"
stop_receiver d
for k in 16 17 18; do
  store_push "$CHAIN/step_$k.safetensors" --anchor-every 1 --keep-anchors 1
  [[ $PUSH_RC == 0 ]] || { cat "$WORK/push.log" >&2; fail "push of step $k failed"; }
done
RUNNING=(a b c late)
wait_version 18 "${RUNNING[@]}"
assert_eq "$(ls "$SDIR/anchors")" 00000000000000000018 "anchors kept"
assert_eq "$(ls "$SDIR/chain" | tr '\n' ' ')" \
  "00000000000000000016.json 00000000000000000017.json 00000000000000000018.json " "chain links kept (d is at v15)"
assert_eq "$(ls "$SDIR/transfers" | wc -l)" 3 "transfers kept (those of the kept links; aborted ones collected)"
start_store_receiver d
wait_version 18 "${ALL[@]}"
verify_replicas "$CHAIN/step_18.safetensors" "${ALL[@]}"

note "serve --once: a new replica seeds from the anchor, catches up and exits"
run_expect 0 "$DCR" serve --store "$STORE" --state "$WORK/once" --once --poll-ms 50
verify_replicas "$CHAIN/step_18.safetensors" once

note "another model is refused by push (nothing published) and by serve"
"$DCR_TESTDATA" chain --steps 1 --layers 1 --hidden 64 --vocab 256 "$WORK/other" >/dev/null
# Registrations are heartbeats (rewritten every second); every other object must be untouched.
objects_sha() { (cd "$SDIR" && find . -type f ! -path './receivers/*' -print0 | sort -z | xargs -0 sha256sum | sha256sum); }
before=$(objects_sha)
store_push "$WORK/other/step_1.safetensors"
assert_eq "$PUSH_RC" 6 "push exit code for another model"
run_expect 6 "$DCR" serve --store "$STORE" --state "$WORK/other-replica" --init "$WORK/other/step_0.safetensors"
grep -q "holds another model" "$WORK/err" || fail "serve does not say the store holds another model"
assert_eq "$(objects_sha)" "$before" "store objects after the refused push and serve"
for n in "${ALL[@]}"; do stop_receiver "$n"; done
verify_replicas "$CHAIN/step_18.safetensors" "${ALL[@]}"

note "usage errors"
run_expect 2 "$DCR" serve --state "$WORK/x"
grep -q "exactly one of --listen" "$WORK/err" || fail "serve without --listen/--store: $(cat "$WORK/err")"
run_expect 8 "$DCR" push --store "$STORE" --baseline "$WORK/baseline" --new "$CHAIN/step_18.safetensors" --producer 0/2
note "OK"
