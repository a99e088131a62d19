#!/usr/bin/env bash
# Refusals: every error exits with its documented code (src/cli/report.h) and leaves the
# target byte-for-byte unchanged. 2 usage, 3 not found, 5 corrupt, 6 catalog mismatch, 7 wrong base.
source "$(dirname "$0")/lib.sh"

"$DCR_TESTDATA" pair --seed 21 --big 200000 base.safetensors new.safetensors >/dev/null
"$DCR_TESTDATA" pair --seed 22 --big 200000 other.safetensors other_new.safetensors >/dev/null
run_expect 0 "$DCR" diff base.safetensors new.safetensors -o delta.dcr
size=$(size_of delta.dcr)
copy base.safetensors replica
replica_sha=$(sha replica)

# refuse CODE TARGET CMD...: CMD exits CODE, prints an error naming dcr, and TARGET is unchanged.
refuse() {
  local code=$1 target=$2
  shift 2
  local before
  before=$(sha "$target")
  run_expect "$code" "$@"
  assert_eq "$(sha "$target")" "$before" "target $target changed by refused: $*"
}

# flip DELTA OFFSET OUT: OUT = DELTA with the byte at OFFSET inverted.
flip() {
  cp "$1" "$3"
  "$PYTHON" -c '
import sys
p, off = sys.argv[1], int(sys.argv[2])
with open(p, "r+b") as f:
    f.seek(off); b = f.read(1); f.seek(off); f.write(bytes([b[0] ^ 0xFF]))' "$3" "$2"
}

note "wrong base -> 7"
copy new.safetensors at_new
refuse 7 at_new "$DCR" apply delta.dcr at_new
grep -q "base" "$WORK/err" || fail "wrong-base error does not say so: $(cat "$WORK/err")"
refuse 7 other.safetensors "$DCR" apply delta.dcr other.safetensors
copy base.safetensors poked
st poke poked dt.F32.scattered 100
refuse 7 poked "$DCR" apply delta.dcr poked
grep -q "dt.F32.scattered" "$WORK/err" || fail "wrong-base error does not name the tensor: $(cat "$WORK/err")"

note "corrupted delta -> 5"
for off in $((size / 2)) 3 20 $((8 + 96 + 5)) $((size - 200)) $((size - 30)) $((size - 20)) $((size - 10)) $((size - 1)); do
  flip delta.dcr "$off" bad.dcr
  refuse 5 replica "$DCR" apply bad.dcr replica
done
note "truncated delta -> 5"
for len in $((size / 2)) $((size - 1)) $((size - 24)) 100 9 8 3 0; do
  head -c "$len" delta.dcr >short.dcr
  refuse 5 replica "$DCR" apply short.dcr replica
done
note "a delta-looking file of garbage -> 5"
{ printf 'DCRDELTA'; head -c 5000 /dev/urandom; } >garbage.dcr
refuse 5 replica "$DCR" apply garbage.dcr replica

note "catalog mismatch -> 6"
for kind in shape dtype name; do
  "$DCR_TESTDATA" mismatch --kind "$kind" base.safetensors mismatch_$kind.safetensors
  refuse 6 mismatch_$kind.safetensors "$DCR" apply delta.dcr mismatch_$kind.safetensors
  run_expect 6 "$DCR" diff base.safetensors mismatch_$kind.safetensors -o mm.dcr
  [[ ! -e mm.dcr ]] || fail "diff left a delta file behind after refusing"
done

note "missing files -> 3"
refuse 3 replica "$DCR" apply missing.dcr replica
run_expect 3 "$DCR" apply delta.dcr missing.safetensors
[[ ! -e missing.safetensors ]] || fail "apply created its missing target"
run_expect 3 "$DCR" diff missing.safetensors new.safetensors -o x.dcr
run_expect 3 "$DCR" diff base.safetensors missing.safetensors -o x.dcr
[[ ! -e x.dcr ]] || fail "diff left a delta file behind after refusing"
run_expect 3 "$DCR" verify base.safetensors missing.safetensors
run_expect 3 "$DCR" digest missing.safetensors
run_expect 3 "$DCR" inspect missing.safetensors
run_expect 3 "$DCR" inspect missing.dcr

note "bad usage -> 2"
run_expect 2 "$DCR"
run_expect 2 "$DCR" frobnicate
run_expect 2 "$DCR" diff base.safetensors new.safetensors          # no -o
run_expect 2 "$DCR" diff base.safetensors -o x.dcr                  # no NEW
run_expect 2 "$DCR" diff base.safetensors new.safetensors -o x.dcr --threads -1
run_expect 2 "$DCR" diff base.safetensors new.safetensors -o x.dcr --chunk-mib 0
run_expect 2 "$DCR" diff base.safetensors new.safetensors -o x.dcr --no-such-flag
run_expect 2 "$DCR" verify base.safetensors
run_expect 2 "$DCR" digest
refuse 2 replica "$DCR" apply delta.dcr
refuse 2 replica "$DCR" apply delta.dcr replica --threads lots
refuse 2 replica "$DCR" apply delta.dcr replica extra_argument
[[ ! -e x.dcr ]] || fail "a refused diff wrote its output"
assert_eq "$(sha replica)" "$replica_sha" "replica changed by the refusals"

note "the intact delta still applies, and a second apply is refused as wrong base"
run_expect 0 "$DCR" apply delta.dcr replica
same_bytes replica new.safetensors
refuse 7 replica "$DCR" apply delta.dcr replica
same_bytes replica new.safetensors
echo "PASS"
