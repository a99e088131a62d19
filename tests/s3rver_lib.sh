# shellcheck shell=bash
# Helpers for tests against a real S3-compatible server (sourced after lib.sh, before or after
# refit_lib.sh): s3rver from npm (tests/npm, installed by scripts/install-deps.sh) and the
# fault-injecting proxy tests/s3_fault_proxy.py. No test skips for want of them: a server that
# cannot start fails the test.
#
# Every process started here is killed when the test exits, whatever the outcome: an EXIT trap
# (chained in front of the one already set), the BG_PIDS list that refit_lib.sh's trap kills
# too, and a watchdog per process that kills it if this shell dies without running its trap
# (SIGKILL from a test timeout).
#
# Environment: S3RVER (s3rver's bin/s3rver.js; default: the tests/npm copy), NODE (default node).

S3RVER=${S3RVER:-"$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/npm/node_modules/s3rver/bin/s3rver.js"}
S3_FAULT_PROXY=${S3_FAULT_PROXY:-"$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/s3_fault_proxy.py"}
NODE=${NODE:-node}
S3_BUCKET=${S3_BUCKET:-dcr-test}
S3_PIDS=()
[[ -n ${BG_PIDS+set} ]] || BG_PIDS=()

# No proxy from the environment between the client and 127.0.0.1.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY all_proxy ALL_PROXY

_s3_cleanup() {
  local pid
  for pid in ${S3_PIDS[@]+"${S3_PIDS[@]}"}; do kill -KILL "$pid" 2>/dev/null || true; done
  for pid in ${S3_PIDS[@]+"${S3_PIDS[@]}"}; do wait "$pid" 2>/dev/null || true; done
  S3_PIDS=()
}
# The EXIT trap set so far (lib.sh's, or refit_lib.sh's), run after ours with the same $?. set +e:
# under errexit the `(exit $_rc)` that hands on a failing status would end the trap early.
# shellcheck disable=SC2120  # its own positional parameters hold the parsed `trap -p` words
_s3_exit_trap_command() {
  eval "set -- $(trap -p EXIT)"
  printf '%s' "${3:-}"
}
# shellcheck disable=SC2119
_s3_prev_exit_trap=$(_s3_exit_trap_command)
# shellcheck disable=SC2154  # _rc is set by the trap itself
trap '_rc=$?; set +e; _s3_cleanup; (exit $_rc); eval "$_s3_prev_exit_trap"' EXIT

# _s3_track PID: kill PID when the test exits, or when this shell dies.
_s3_track() {
  local pid=$1 shell=$$
  S3_PIDS+=("$pid")
  BG_PIDS+=("$pid")
  (
    trap - EXIT
    exec >/dev/null 2>&1
    while kill -0 "$shell" 2>/dev/null && kill -0 "$pid" 2>/dev/null; do sleep 1; done
    kill -KILL "$pid" 2>/dev/null
  ) &
  S3_PIDS+=($!)
  BG_PIDS+=($!)
}

# _s3_wait_listening PID LOG WHAT: waits (20 s) for "listening on HOST:PORT" in LOG; prints PORT.
_s3_wait_listening() {
  local pid=$1 log=$2 what=$3 port
  for _ in $(seq 1 200); do
    port=$(sed -nE 's/.*[Ll]istening on [0-9.]+:([0-9]+).*/\1/p' "$log" | head -1)
    if [[ -n $port ]]; then
      echo "$port"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || { cat "$log" >&2; fail "$what exited at start"; }
    sleep 0.1
  done
  cat "$log" >&2
  fail "$what did not start listening within 20 s"
}

# _s3_wait_answers URL WHAT: waits (20 s) until an HTTP GET of URL gets any HTTP answer.
_s3_wait_answers() {
  "$PYTHON" - "$1" "$2" <<'EOF' || fail "$2 does not answer HTTP at $1"
import sys, time, urllib.request, urllib.error
for _ in range(200):
    try:
        urllib.request.urlopen(sys.argv[1], timeout=2).read()
        sys.exit(0)
    except urllib.error.HTTPError:
        sys.exit(0)
    except OSError:
        time.sleep(0.1)
sys.exit(1)
EOF
}

# start_s3rver DIR [ARGS...]: s3rver on a free port of 127.0.0.1 storing into DIR, with bucket
# $S3_BUCKET; waits until it answers. Exports S3_ENDPOINT (path style), S3_VHOST_ENDPOINT
# (http://s3.localhost:PORT, for BUCKET.s3.localhost virtual-host style), S3RVER_PORT,
# S3RVER_PID and s3rver's credentials (AWS_ACCESS_KEY_ID=AWS_SECRET_ACCESS_KEY=S3RVER).
start_s3rver() {
  local dir=$1
  shift
  [[ -f $S3RVER ]] || fail "s3rver is not installed ($S3RVER): run scripts/install-deps.sh"
  command -v "$NODE" >/dev/null 2>&1 || fail "node is not on PATH: run scripts/install-deps.sh"
  mkdir -p "$dir"
  # s3rver's continuation tokens use DES, which OpenSSL 3 (node >= 17) only has in its legacy provider.
  local legacy=()
  if "$NODE" --openssl-legacy-provider -e 0 >/dev/null 2>&1; then legacy=(--openssl-legacy-provider); fi
  "$NODE" ${legacy[@]+"${legacy[@]}"} "$S3RVER" --directory "$dir" --address 127.0.0.1 --port 0 --silent --service-endpoint localhost \
    --configure-bucket "$S3_BUCKET" "$@" >"$dir.log" 2>&1 &
  S3RVER_PID=$!
  _s3_track "$S3RVER_PID"
  S3RVER_PORT=$(_s3_wait_listening "$S3RVER_PID" "$dir.log" s3rver)
  export S3RVER_PID S3RVER_PORT S3_BUCKET
  export S3_ENDPOINT="http://127.0.0.1:$S3RVER_PORT" S3_VHOST_ENDPOINT="http://s3.localhost:$S3RVER_PORT"
  export AWS_ACCESS_KEY_ID=S3RVER AWS_SECRET_ACCESS_KEY=S3RVER AWS_REGION=us-east-1
  unset AWS_SESSION_TOKEN AWS_DEFAULT_REGION
  _s3_wait_answers "$S3_ENDPOINT/" s3rver
}

# stop_s3rver: SIGTERM and reap.
stop_s3rver() {
  kill -TERM "$S3RVER_PID" 2>/dev/null || true
  wait "$S3RVER_PID" 2>/dev/null || true
}

# start_fault_proxy UPSTREAM CONTROL [ARGS...]: tests/s3_fault_proxy.py in front of UPSTREAM,
# faults set by the JSON file CONTROL (re-read when it changes) and ARGS. Exports
# S3_PROXY_ENDPOINT, S3_PROXY_CONTROL, S3_PROXY_PID; its log is CONTROL.log.
start_fault_proxy() {
  local upstream=$1 control=$2
  shift 2
  "$PYTHON" "$S3_FAULT_PROXY" --upstream "$upstream" --control "$control" "$@" >"$control.log" 2>&1 &
  S3_PROXY_PID=$!
  _s3_track "$S3_PROXY_PID"
  local port
  port=$(_s3_wait_listening "$S3_PROXY_PID" "$control.log" "fault proxy")
  export S3_PROXY_PID S3_PROXY_CONTROL=$control S3_PROXY_ENDPOINT="http://127.0.0.1:$port"
  _s3_wait_answers "$S3_PROXY_ENDPOINT/" "fault proxy"
}

stop_fault_proxy() {
  kill -TERM "$S3_PROXY_PID" 2>/dev/null || true
  wait "$S3_PROXY_PID" 2>/dev/null || true
}
