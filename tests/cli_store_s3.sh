#!/usr/bin/env bash
# Refit through S3 (docs/store.md): a real s3rver, reached through tests/s3_fault_proxy.py, which
# answers some requests with 503 SlowDown, truncates some bodies and delays others. The chain
# (generated, or CHAIN_DIR) must still reach 4 receivers bit-exactly, plus a fifth that starts
# from nothing after step 7 (tests/store_lib.sh run_store_chain), and faults must have been
# injected (so the retries were exercised).
# Usage: cli_store_s3.sh [CHAIN_DIR]
set -euo pipefail
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/refit_lib.sh"
source "$(dirname "$0")/s3rver_lib.sh"
source "$(dirname "$0")/store_lib.sh"

if [[ -n ${1:-} ]]; then
  CHAIN=$1
else
  CHAIN=$WORK/chain
  "$DCR_TESTDATA" chain --steps 10 --layers 2 --hidden 128 --vocab 512 "$CHAIN" >/dev/null
fi
start_s3rver "$WORK/s3rver"
# Transient: an object faulted in the last 10 s (transient_s) is not faulted again (S3's SlowDowns
# pass); otherwise the polls of five processes can line one request up with the fault count on
# every one of its retries.
echo '{"fail_every": 7, "truncate_every": 11, "delay_every": 13, "delay_ms": 300, "transient": true}' >"$WORK/faults.json"
start_fault_proxy "$S3_ENDPOINT" "$WORK/faults.json"
STORE=s3://$S3_BUCKET/refit
STORE_ARGS=(--s3-endpoint "$S3_PROXY_ENDPOINT")

run_store_chain "$CHAIN"
for f in "fault: 503" "fault: truncated" "fault: delay"; do
  grep -q "$f" "$WORK/faults.json.log" || fail "the proxy injected no '$f' fault: $(tail -5 "$WORK/faults.json.log")"
done
retries=$("$PYTHON" -c 'import json, sys; print(sum(json.loads(l)["store"]["retries"] for l in open(sys.argv[1]) if l.strip()))' "$WORK/pushes.jsonl")
assert_lt 0 "$retries" "S3 retries counted by the pushes"
note "injected faults: $(grep -c "^fault:" "$WORK/faults.json.log"); the pushes retried $retries requests"
note "OK"
