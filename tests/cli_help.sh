#!/usr/bin/env bash
# `--help` exits 0 and prints usage for the tool and for every command.
source "$(dirname "$0")/lib.sh"

run_expect 0 "$DCR" --help
for c in diff apply verify digest inspect demo; do
  grep -q "$c" "$WORK/out" || fail "dcr --help does not list $c"
done
grep -q "Exit codes" "$WORK/out" || fail "dcr --help does not document the exit codes"
for c in diff apply verify digest inspect demo; do
  run_expect 0 "$DCR" "$c" --help
  grep -qi "usage" "$WORK/out" || fail "dcr $c --help printed no usage"
  run_expect 0 "$DCR" "$c" -h
done
echo "PASS"
