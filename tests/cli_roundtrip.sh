#!/usr/bin/env bash
# diff -> apply -> cmp is byte-exact on generated pairs: every dtype, NaNs with payloads, +-0,
# infinities, subnormals, empty and scalar tensors, single files and sharded directories,
# XOR and overwrite values, one and several payloads per tensor. `dcr diff --json` reports
# counts that agree with an independent count (tests/st_tool.py) and the delta's real size.
source "$(dirname "$0")/lib.sh"

# check_diff_json EXPECTED_CHANGED EXPECTED_TOTAL EXPECTED_DENSE DELTA: checks $WORK/out.
check_diff_json() {
  local want_changed=$1 want_total=$2 want_dense=$3 delta=$4
  local fields
  fields=$(json_field changed_elements total_elements dense_bytes wire_bytes encode_seconds <"$WORK/out") ||
    fail "diff --json did not print one JSON object with the expected keys: $(cat "$WORK/out")"
  local changed total dense wire secs
  { read -r changed; read -r total; read -r dense; read -r wire; read -r secs; } <<<"$fields"
  assert_eq "$changed" "$want_changed" "changed_elements vs independent count"
  assert_eq "$total" "$want_total" "total_elements"
  assert_eq "$dense" "$want_dense" "dense_bytes"
  assert_eq "$wire" "$(size_of "$delta")" "wire_bytes vs size of $delta"
  "$PYTHON" -c 'import sys; v = float(sys.argv[1]); sys.exit(0 if v >= 0 and v < 600 else 1)' "$secs" ||
    fail "encode_seconds is not a sane number: $secs"
}

# roundtrip BASE NEW CHANGED TOTAL DENSE [DIFF OPTIONS...]
roundtrip() {
  local base=$1 new=$2 changed=$3 total=$4 dense=$5
  shift 5
  rm -rf replica delta.dcr
  run_expect 0 "$DCR" diff "$base" "$new" -o delta.dcr --json "$@"
  check_diff_json "$changed" "$total" "$dense" delta.dcr
  copy "$base" replica
  run_expect 0 "$DCR" apply delta.dcr replica
  same_bytes replica "$new"
  run_expect 0 "$DCR" verify replica "$new"
}

note "single-file pair with every dtype and special values"
"$DCR_TESTDATA" pair --seed 11 base.safetensors new.safetensors >gen.json
gen_changed=$(json_field changed_elements <gen.json)
read -r changed total dense < <(st count base.safetensors new.safetensors)
assert_eq "$changed" "$gen_changed" "st_tool count vs generator count"
[[ $changed -gt 0 && $changed -lt $total ]] || fail "degenerate test data: $changed of $total changed"
# Sanity of the data itself: every dtype is present, with empty, scalar and transition tensors.
st json tensors <<<"$("$DCR" inspect --json base.safetensors)" >tensors.json
for dt in BF16 F16 F32 F64 F8_E4M3 F8_E5M2 I8 U8 I16 I32 I64 BOOL U16 U32 U64; do
  for kind in transitions scattered dense runs same empty empty2d scalar; do
    grep -q "\"dt.$dt.$kind\"" tensors.json || fail "test data lacks dt.$dt.$kind"
  done
done

note "xor, default chunks"
roundtrip base.safetensors new.safetensors "$changed" "$total" "$dense"
note "xor, 1 MiB chunks (several payloads per tensor), 1 thread"
roundtrip base.safetensors new.safetensors "$changed" "$total" "$dense" --chunk-mib 1 --threads 1
n_payloads=$("$DCR" inspect --json delta.dcr | json_field payloads)
[[ $n_payloads -gt 3 ]] || fail "expected several payloads with --chunk-mib 1, got $n_payloads"
note "overwrite values"
roundtrip base.safetensors new.safetensors "$changed" "$total" "$dense" --overwrite
"$DCR" inspect --json delta.dcr | grep -q '"value_kind":"overwrite"' || fail "--overwrite delta is not marked overwrite"
note "apply with one thread"
copy base.safetensors replica1
run_expect 0 "$DCR" apply delta.dcr replica1 --threads 1 --json
assert_eq "$(json_field changed_elements <"$WORK/out")" "$changed" "apply --json changed_elements"
same_bytes replica1 new.safetensors
note "reverse direction (new -> base)"
roundtrip new.safetensors base.safetensors "$changed" "$total" "$dense"
note "identical checkpoints: an empty delta that applies as a no-op"
roundtrip base.safetensors base.safetensors 0 "$total" "$dense"

note "another seed, no big tensor"
"$DCR_TESTDATA" pair --seed 12 --big 0 b2.safetensors n2.safetensors >gen2.json
read -r c2 t2 d2 < <(st count b2.safetensors n2.safetensors)
assert_eq "$c2" "$(json_field changed_elements <gen2.json)" "st_tool count vs generator count (seed 12)"
roundtrip b2.safetensors n2.safetensors "$c2" "$t2" "$d2"

note "sharded checkpoint directories"
"$DCR_TESTDATA" pair --seed 11 --sharded 65536 base_dir new_dir >gen_sharded.json
[[ -f base_dir/model.safetensors.index.json ]] || fail "no shard index written"
n_shards=$(find base_dir -name '*.safetensors' | wc -l)
[[ $n_shards -gt 2 ]] || fail "expected several shards, got $n_shards"
read -r sc st_ sd < <(st count base_dir new_dir)
assert_eq "$sc" "$changed" "sharded pair holds the same changes as the single-file pair"
roundtrip base_dir new_dir "$sc" "$st_" "$sd"
roundtrip base_dir new_dir "$sc" "$st_" "$sd" --chunk-mib 1 --overwrite
note "a delta made from sharded directories applies to the single-file base (canonical tensors)"
run_expect 0 "$DCR" diff base_dir new_dir -o sharded.dcr
copy base.safetensors replica2
run_expect 0 "$DCR" apply sharded.dcr replica2
same_bytes replica2 new.safetensors
note "and a single-file delta applies to a sharded directory"
run_expect 0 "$DCR" diff base.safetensors new.safetensors -o single.dcr
copy base_dir replica3
run_expect 0 "$DCR" apply single.dcr replica3
same_bytes replica3 new_dir
echo "PASS"
