#!/usr/bin/env bash
# The s3:// object store against a real S3-compatible server: starts s3rver and the fault proxy
# (tests/s3rver_lib.sh), runs the store's GoogleTest binary (src/store/s3_store_test.cc,
# s3_store_fault_test.cc) against them, and checks that no server or proxy outlives the test.
# Usage (via ctest store_s3): store_s3.sh S3_STORE_TEST
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/s3rver_lib.sh"

S3_STORE_TEST=${1:?usage: store_s3.sh S3_STORE_TEST}

note "s3rver"
start_s3rver "$WORK/s3"
note "fault proxy -> $S3_ENDPOINT"
start_fault_proxy "$S3_ENDPOINT" "$WORK/faults.json"

note "s3_store_test"
"$S3_STORE_TEST" --gtest_brief=1 || {
  echo "--- s3rver log" >&2
  tail -50 "$WORK/s3.log" >&2 || true
  echo "--- fault proxy log" >&2
  tail -50 "$WORK/faults.json.log" >&2 || true
  fail "s3_store_test failed"
}
grep -q "fault: 503" "$WORK/faults.json.log" || fail "the proxy injected no 503"
grep -q "fault: truncated" "$WORK/faults.json.log" || fail "the proxy truncated no body"
grep -q "fault: delay" "$WORK/faults.json.log" || fail "the proxy delayed no answer"

note "servers stop"
server=$S3RVER_PID proxy=$S3_PROXY_PID
stop_fault_proxy
stop_s3rver
for pid in "$server" "$proxy"; do
  ! kill -0 "$pid" 2>/dev/null || fail "process $pid is still running after stop"
done
note "ok"
