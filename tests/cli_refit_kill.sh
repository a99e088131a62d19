#!/usr/bin/env bash
# SIGKILL during apply: a real receiver process is killed at random points of a live refit, by
# its own crash points (DCR_CRASH_AT: after the undo record, between segments, after the
# in-place writes, after the done record, after the vote, after the new state is written) and by
# external `kill -9` at random delays. After each kill the receiver restarts from its state dir:
#   - not voted: exactly the base bits at the base version (the journal rolled the partial
#     transfer back), and the push was not committed;
#   - voted: exactly the target bits, awaiting the decision (the push may have committed);
#   - committed: exactly the target bits at the new version.
# The other receiver ends at the base (abort) or the target (commit) accordingly. Then a retried
# push brings both to exactly the target, so no payload was ever XORed twice.
# Usage: cli_refit_kill.sh [ITERATIONS]   (default 52; DCR_KILL_SEED fixes the random choices)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/refit_lib.sh"

ITER=${1:-52}
SEED=${DCR_KILL_SEED:-$(( $(date +%s) ^ ($$ << 8) ))}  # the PID: two runs started together differ
RANDOM=$SEED
echo "seed $SEED (rerun with DCR_KILL_SEED=$SEED)"

"$DCR_TESTDATA" chain --steps 1 --layers 1 --hidden 128 --vocab 512 "$WORK/chain"
INIT=$WORK/chain/step_0.safetensors
TARGET=$WORK/chain/step_1.safetensors
PUSH_ARGS=(--chunk-kib 16 --timeout 1 --threads 2)

# Pristine state: both receivers and the producer's baseline at version 0.
for r in ra rb; do
  start_receiver "$r" --init "$INIT"
  stop_receiver "$r"
  mv "$WORK/$r" "$WORK/pristine_$r"
done

points=(replica.undo_written replica.segment_applied replica.applied replica.done_written replica.voted replica.state_written)
payloads=0
outcomes=""

# version_of NAME: "N pending voted" from one status line.
state_of() {
  "$DCR" status "${RECV_EP[$1]}" | "$PYTHON" -c '
import json, sys
s = json.load(sys.stdin)
p = s.get("pending")
print(s["version"]["number"], "pending" if p else "clean", "voted" if p and p["voted"] else "-")'
}

for ((i = 1; i <= ITER; i++)); do
  rm -rf "$WORK/ra" "$WORK/rb" "$WORK/p0" "$WORK/push.log"
  cp -r "$WORK/pristine_ra" "$WORK/ra"
  cp -r "$WORK/pristine_rb" "$WORK/rb"
  victim=$([[ $((RANDOM % 2)) == 0 ]] && echo ra || echo rb)
  other=$([[ $victim == ra ]] && echo rb || echo ra)
  start_receiver "$other"
  if ((i % 3 != 0)); then
    point=${points[$((RANDOM % ${#points[@]}))]}
    n=1
    case $point in
      replica.voted | replica.state_written) ;;
      replica.segment_applied) n=$((1 + RANDOM % (payloads > 0 ? 2 * payloads : 20))) ;;
      *) n=$((1 + RANDOM % (payloads > 0 ? payloads : 10))) ;;
    esac
    how="DCR_CRASH_AT=$point:$n"
    DCR_CRASH_AT=$point:$n start_receiver "$victim"
    push_all 1 p "$TARGET" "$(endpoints ra rb)" "${PUSH_ARGS[@]}"
  else
    delay=$(printf '0.%03d' $((RANDOM % 250)))
    how="kill -9 after ${delay}s"
    start_receiver "$victim"
    (sleep "$delay" && kill -KILL "${RECV_PID[$victim]}" 2>/dev/null) &
    BG_PIDS+=($!)
    push_all 1 p "$TARGET" "$(endpoints ra rb)" "${PUSH_ARGS[@]}"
    wait "${BG_PIDS[-1]}" 2>/dev/null || true
  fi
  rc1=$PUSH_RC
  [[ $payloads -gt 0 || $rc1 != 0 ]] || payloads=$(push_field payloads)
  kill_receiver "$victim"   # if the crash point was not reached, this is a kill while idle
  start_receiver "$victim"
  read -r vn vpending vvoted <<<"$(state_of "$victim")"
  read -r on opending ovoted <<<"$(state_of "$other")"
  echo "[$i] victim $victim ($how): push rc $rc1; after restart: v$vn $vpending $vvoted; other: v$on $opending"
  if [[ $vpending == pending ]]; then
    assert_eq "$vvoted" voted "a restarted receiver keeps only voted transfers"
    run_expect 0 "$DCR" verify "$WORK/$victim" "$TARGET"
    outcome=voted
  elif [[ $vn == 1 ]]; then
    assert_eq "$rc1" 0 "victim committed, so the push must have committed"
    run_expect 0 "$DCR" verify "$WORK/$victim" "$TARGET"
    outcome=committed
  else
    assert_eq "$vn" 0 "victim version"
    [[ $rc1 != 0 ]] || fail "the push committed but the victim restarted at the base without a vote"
    run_expect 0 "$DCR" verify "$WORK/$victim" "$INIT"
    outcome=rolled-back
  fi
  assert_eq "$opending" clean "the surviving receiver has no pending transfer"
  if [[ $rc1 == 0 ]]; then
    assert_eq "$on" 1 "survivor version after a committed push"
    run_expect 0 "$DCR" verify "$WORK/$other" "$TARGET"
  else
    assert_eq "$on" 0 "survivor version after an aborted push"
    run_expect 0 "$DCR" verify "$WORK/$other" "$INIT"
  fi
  # Retry: the coordinator settles any pending decision, then refits whatever is left.
  push_all 1 p "$TARGET" "$(endpoints ra rb)" --chunk-kib 16 --timeout 10
  [[ $PUSH_RC == 0 ]] || { cat "$WORK/push.log"; fail "retry push exited $PUSH_RC"; }
  for r in ra rb; do
    run_expect 0 "$DCR" verify "$WORK/$r" "$TARGET"
    read -r n p v <<<"$(state_of "$r")"
    assert_eq "$n $p" "$(push_field version.number) clean" "$r after the retry"
  done
  stop_receiver ra
  stop_receiver rb
  outcomes+="$outcome "
done
echo "outcomes: $(tr ' ' '\n' <<<"$outcomes" | sort | uniq -c | tr '\n' ' ')"
echo "PASS"
