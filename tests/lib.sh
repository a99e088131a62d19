# shellcheck shell=bash
# Shared helpers for the CLI integration tests (sourced by tests/cli_*.sh).
#
# Environment (set by tests/CMakeLists.txt):
#   DCR           the dcr binary
#   DCR_TESTDATA  the dcr_testdata helper (tests/testdata_main.cc)
#   ST_TOOL       tests/st_tool.py (independent safetensors checks)
#   PYTHON        python3
#   WORK          a scratch directory for this test (emptied first, removed on success)
set -euo pipefail

: "${DCR:?}" "${DCR_TESTDATA:?}" "${ST_TOOL:?}" "${PYTHON:?}" "${WORK:?}"
SKIP=77

rm -rf "$WORK"
mkdir -p "$WORK"
cd "$WORK"

_keep_on_failure() {
  local rc=$?
  if [[ $rc == 0 || $rc == "$SKIP" ]]; then rm -rf "$WORK"; else echo "(scratch files kept in $WORK)" >&2; fi
}
trap _keep_on_failure EXIT

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

note() { echo "--- $*"; }

# run_expect CODE CMD...: runs CMD, stdout -> $WORK/out, stderr -> $WORK/err; fails unless it exits CODE.
run_expect() {
  local want=$1
  shift
  local got=0
  "$@" >"$WORK/out" 2>"$WORK/err" || got=$?
  if [[ $got != "$want" ]]; then
    echo "stdout:" >&2
    head -c 4000 "$WORK/out" >&2 || true
    echo "stderr:" >&2
    head -c 4000 "$WORK/err" >&2 || true
    fail "expected exit $want, got $got: $*"
  fi
}

st() { "$PYTHON" "$ST_TOOL" "$@"; }

# json_field KEY < json: one value from a single-object JSON document (fails if it is not one).
json_field() { st json "$@"; }

# sha PATH: sha256 of a file, or of every file of a directory (names included).
sha() {
  if [[ -d $1 ]]; then
    (cd "$1" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sha256sum | cut -d' ' -f1)
  else
    sha256sum "$1" | cut -d' ' -f1
  fi
}

# same_bytes A B: file or directory trees byte-identical.
same_bytes() {
  if [[ -d $1 ]]; then
    diff -r "$1" "$2" >/dev/null || fail "$1 and $2 differ"
  else
    cmp "$1" "$2" || fail "$1 and $2 differ"
  fi
}

copy() { cp -r --sparse=always "$1" "$2"; }

assert_eq() { [[ "$1" == "$2" ]] || fail "${3:-values differ}: '$1' != '$2'"; }

# assert_lt A B MSG: A < B as real numbers.
assert_lt() {
  "$PYTHON" -c 'import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)' "$1" "$2" ||
    fail "${3:-}: expected $1 < $2"
}

size_of() { stat -c %s "$1"; }
