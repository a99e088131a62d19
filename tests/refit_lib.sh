# shellcheck shell=bash
# Helpers for the live-refit tests (sourced after lib.sh): receivers and producers are real
# `dcr serve` / `dcr push` processes on loopback TCP. Every process started here is killed when
# the test exits, whatever the outcome, so no test leaks processes.

declare -A RECV_PID=() RECV_EP=()
BG_PIDS=()

_refit_cleanup() {
  local pid
  for pid in "${RECV_PID[@]}" "${BG_PIDS[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap '_rc=$?; set +e; _refit_cleanup; (exit $_rc); _keep_on_failure' EXIT

# free_port: a loopback port free now, from below the kernel's ephemeral range (as `dcr demo`
# picks them): a port bind(0) hands out can be taken by any process's next outgoing connection
# before the receiver binds it, or while a killed receiver restarts on it.
free_port() {
  "$PYTHON" -c '
import random, socket
low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
for _ in range(64):
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", random.randrange(10000, low) if low - 10000 >= 1000 else 0))
        print(s.getsockname()[1])
        break
    except OSError:
        pass
    finally:
        s.close()
else:
    raise SystemExit("no free loopback port")
'
}

# start_receiver NAME [ARGS...]: `dcr serve --state $WORK/NAME` on a fresh port (the port is kept
# across restarts of NAME); extra ARGS (e.g. --init CKPT) are passed on. Waits until it answers.
start_receiver() {
  local name=$1
  shift
  [[ -n ${RECV_EP[$name]:-} ]] || RECV_EP[$name]="tcp://127.0.0.1:$(free_port)"
  "$DCR" serve --state "$WORK/$name" --listen "${RECV_EP[$name]}" "$@" >>"$WORK/$name.log" 2>&1 &
  RECV_PID[$name]=$!
  local i
  for i in $(seq 1 200); do
    if "$DCR" status --timeout 0.2 "${RECV_EP[$name]}" >/dev/null 2>&1; then return 0; fi
    kill -0 "${RECV_PID[$name]}" 2>/dev/null || { cat "$WORK/$name.log" >&2; fail "receiver $name exited at start"; }
  done
  fail "receiver $name did not answer within 40 s"
}

# stop_receiver NAME: SIGTERM and wait; the daemon must exit 0 (clean shutdown).
stop_receiver() {
  local name=$1 rc=0
  kill -TERM "${RECV_PID[$name]}"
  wait "${RECV_PID[$name]}" || rc=$?
  unset "RECV_PID[$name]"
  assert_eq "$rc" 0 "receiver $name exit code after SIGTERM"
}

# kill_receiver NAME: SIGKILL (no cleanup at all) and reap.
kill_receiver() {
  kill -KILL "${RECV_PID[$1]}" 2>/dev/null || true
  wait "${RECV_PID[$1]}" 2>/dev/null || true
  unset "RECV_PID[$1]"
}

endpoints() {
  local out="" n
  for n in "$@"; do out+="${out:+,}${RECV_EP[$n]}"; done
  echo "$out"
}

# push_all M PREFIX NEW RECEIVERS [ARGS...]: one refit with M producer processes whose baseline
# dirs are $WORK/PREFIX0 .. PREFIX(M-1) (seeded from $INIT when empty). Producer 0's JSON goes
# to $WORK/push.json; exit code in PUSH_RC; logs in $WORK/push.log.
push_all() {
  local m=$1 prefix=$2 new=$3 recv=$4
  shift 4
  local coord p pids=()
  coord="tcp://127.0.0.1:$(free_port)"
  : >"$WORK/push.json"
  for ((p = m - 1; p >= 1; p--)); do
    "$DCR" push --producer "$p/$m" --baseline "$WORK/$prefix$p" --init "$INIT" --new "$new" \
      --coordinator "$coord" "$@" >>"$WORK/push.log" 2>&1 &
    pids+=($!)
    BG_PIDS+=($!)
  done
  PUSH_RC=0
  "$DCR" push --producer "0/$m" --baseline "$WORK/${prefix}0" --init "$INIT" --new "$new" --coordinator "$coord" \
    --receivers "$recv" --json "$@" >"$WORK/push.json" 2>>"$WORK/push.log" || PUSH_RC=$?
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
}

# status_field NAME KEY: one field of `dcr status` for receiver NAME (KEY may be a.b).
status_field() {
  "$DCR" status "${RECV_EP[$1]}" | "$PYTHON" -c '
import json, sys
v = json.load(sys.stdin)
for k in sys.argv[1].split("."):
    v = v.get(k) if isinstance(v, dict) else None
print("" if v is None else (json.dumps(v) if isinstance(v, (dict, list)) else v))' "$2"
}

push_field() {
  "$PYTHON" -c '
import json, sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
print(v)' "$WORK/push.json" "$1"
}
