#!/usr/bin/env bash
# A tensor of more than 2^32 elements: U8 [2^32 + 64] in sparse files (~0 disk), changed in a few
# bytes on both sides of 2^32, plus a small tensor stored above 4 GiB in the file.
# diff -> apply -> cmp, with default chunks and with 4 GiB chunks (a chunk of 2^32 - 1 elements).
source "$(dirname "$0")/lib.sh"

avail=$(df --output=avail -B1 . | tail -1)
if [[ $avail -lt $((2 << 30)) ]]; then
  echo "SKIP: only $avail bytes free under $WORK"
  exit $SKIP
fi
trap 'rm -rf "$WORK"' EXIT  # 4 GiB apparent size each: never leave them behind

"$DCR_TESTDATA" huge base.safetensors new.safetensors >gen.json
used=$(du -B1 -c base.safetensors new.safetensors | tail -1 | cut -f1)
if [[ $used -gt $((256 << 20)) ]]; then
  echo "SKIP: this filesystem does not keep sparse files sparse ($used bytes used)"
  exit $SKIP
fi
want_changed=$(json_field changed_elements <gen.json)
want_total=$(json_field total_elements <gen.json)
assert_eq "$want_total" $(((1 << 32) + 64 + 16)) "generator total"

for chunk in 64 4096; do
  note "--chunk-mib $chunk"
  run_expect 0 "$DCR" diff base.safetensors new.safetensors -o delta.dcr --json --chunk-mib "$chunk"
  cat "$WORK/out"
  assert_eq "$(json_field changed_elements <"$WORK/out")" "$want_changed" "changed_elements"
  assert_eq "$(json_field total_elements <"$WORK/out")" "$want_total" "total_elements"
  assert_eq "$(json_field wire_bytes <"$WORK/out")" "$(size_of delta.dcr)" "wire_bytes"
  cp --sparse=always base.safetensors replica.safetensors
  run_expect 0 "$DCR" apply delta.dcr replica.safetensors
  cmp replica.safetensors new.safetensors || fail "replica differs from NEW"
  rm -f replica.safetensors delta.dcr
done
echo "PASS"
