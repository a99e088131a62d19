#!/usr/bin/env bash
# `dcr demo` runs the live system (4 receivers, 2 producers, separate processes on loopback
# TCP), commits every step jointly and reports every receiver bit-exact after each commit.
source "$(dirname "$0")/lib.sh"

run_expect 0 "$DCR" demo
cat "$WORK/out"
steps=$(grep -c "4 bit-exact$" "$WORK/out")
assert_eq "$steps" 6 "demo steps reported bit-exact on 4 receivers"
grep -q "dense refit through the same path" "$WORK/out" || fail "demo did not measure the dense reference"
pgrep -f "dcr serve --state /tmp/dcr-demo" && fail "demo left receiver processes running"

note "with a kept directory: every receiver's weights equal the last snapshot"
run_expect 0 "$DCR" demo --dir "$WORK/demo" --steps-per-rate 1 --layers 1 --hidden 64 --vocab 256 --receivers 3 --producers 3
steps=$(grep -c "3 bit-exact$" "$WORK/out")
assert_eq "$steps" 3 "small demo steps reported bit-exact on 3 receivers"
for r in 0 1 2; do
  run_expect 0 "$DCR" verify "$WORK/demo/r$r" "$WORK/demo/step_3.safetensors"
done
pgrep -f "dcr serve --state $WORK/demo" && fail "demo left receiver processes running"
# The "exited at start" error comes only from seeing the process gone, not from the 60 s deadline.
note "a receiver that cannot start (its state path is a file) fails the demo at once, naming its log"
mkdir -p "$WORK/broken" && : >"$WORK/broken/r1"
run_expect 4 "$DCR" demo --dir "$WORK/broken" --steps-per-rate 1 --layers 1 --hidden 64 --vocab 256 --receivers 2 --producers 1
grep -q "exited at start (code 2); see $WORK/broken/r1.log" "$WORK/err" || fail "no error naming the receiver's log: $(cat "$WORK/err")"
pgrep -f "dcr serve --state $WORK/broken" && fail "demo left receiver processes running"
echo "PASS"
