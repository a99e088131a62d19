#!/usr/bin/env bash
# `dcr demo` runs the whole diff -> apply -> verify cycle and reports every step bit-exact.
source "$(dirname "$0")/lib.sh"

run_expect 0 "$DCR" demo --threads 2
cat "$WORK/out"
grep -q "bit-exact" "$WORK/out" || fail "demo did not print bit-exact"
steps=$(grep -c "bit-exact$" "$WORK/out")
assert_eq "$steps" 6 "demo steps reported bit-exact"
note "with a kept directory"
run_expect 0 "$DCR" demo --dir "$WORK/demo" --steps-per-rate 1 --layers 1 --hidden 64 --vocab 256
grep -q "bit-exact" "$WORK/out" || fail "small demo did not print bit-exact"
cmp "$WORK/demo/replica.safetensors" "$WORK/demo/step_3.safetensors" || fail "demo replica differs from the last step"
echo "PASS"
