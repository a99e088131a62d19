#!/usr/bin/env bash
# verify, digest and inspect: verify exits 0 on identical checkpoints and 1 on different ones,
# naming the first differing tensor and element; digests are equal exactly for equal tensors
# (whatever the file layout); inspect --json prints one parseable JSON object.
source "$(dirname "$0")/lib.sh"

"$DCR_TESTDATA" pair --seed 31 --big 300000 base.safetensors new.safetensors >gen.json
"$DCR_TESTDATA" pair --seed 31 --big 300000 --sharded 65536 base_dir new_dir >/dev/null
read -r changed total _ < <(st count base.safetensors new.safetensors)

note "verify"
cp base.safetensors copy.safetensors
run_expect 0 "$DCR" verify base.safetensors copy.safetensors
grep -q IDENTICAL "$WORK/out" || fail "verify did not say IDENTICAL"
run_expect 0 "$DCR" verify base.safetensors base_dir
run_expect 0 "$DCR" verify new_dir new.safetensors
run_expect 1 "$DCR" verify base.safetensors new.safetensors
read -r t e < <(st first-diff base.safetensors new.safetensors)
grep -q "tensor '$t' element $e " "$WORK/out" || fail "verify output does not name tensor $t element $e: $(cat "$WORK/out")"
for spot in "dt.F64.same 200" "dt.BOOL.dense 4098" "big.bf16 299999" "dt.I64.scalar 0"; do
  read -r t e <<<"$spot"
  cp base.safetensors poked.safetensors
  st poke poked.safetensors "$t" "$e"
  run_expect 1 "$DCR" verify base.safetensors poked.safetensors
  grep -q "tensor '$t' element $e " "$WORK/out" || fail "verify output does not name tensor $t element $e: $(cat "$WORK/out")"
  run_expect 1 "$DCR" verify poked.safetensors base.safetensors
done
"$DCR_TESTDATA" mismatch --kind shape base.safetensors reshaped.safetensors
run_expect 1 "$DCR" verify base.safetensors reshaped.safetensors
grep -q DIFFERENT "$WORK/out" || fail "verify of different catalogs did not say DIFFERENT"

note "digest"
digest() { "$DCR" digest "$@" | head -1 | cut -d' ' -f1; }
d_base=$(digest base.safetensors)
[[ $d_base =~ ^[0-9a-f]{32}$ ]] || fail "digest is not 32 hex digits: $d_base"
assert_eq "$(digest copy.safetensors)" "$d_base" "digest of a byte-identical copy"
assert_eq "$(digest base_dir)" "$d_base" "digest of the sharded version"
assert_eq "$(digest base.safetensors --threads 1)" "$d_base" "digest with 1 thread"
assert_eq "$(digest new_dir)" "$(digest new.safetensors)" "digest of the sharded new checkpoint"
[[ $(digest new.safetensors) != "$d_base" ]] || fail "different checkpoints have equal digests"
[[ $(digest poked.safetensors) != "$d_base" ]] || fail "a one-bit change left the digest equal"
[[ $(digest reshaped.safetensors) != "$d_base" ]] || fail "a reshape left the digest equal"
run_expect 0 "$DCR" digest --json base_dir
assert_eq "$(json_field digest <"$WORK/out")" "$d_base" "digest --json"
run_expect 0 "$DCR" digest --json base.safetensors
cp "$WORK/out" digest_single.json
run_expect 0 "$DCR" digest --json base_dir
"$PYTHON" -c '
import json, sys
a, b = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert a["tensors"] == b["tensors"], "per-tensor digests differ between single-file and sharded"
assert len(a["tensors"]) > 100' digest_single.json "$WORK/out" || fail "per-tensor digests"
run_expect 0 "$DCR" digest --tensors base.safetensors
[[ $(wc -l <"$WORK/out") -gt 100 ]] || fail "digest --tensors printed too few lines"
note "the delta records both digests"
run_expect 0 "$DCR" diff base.safetensors new.safetensors -o delta.dcr --json
assert_eq "$(json_field base_digest <"$WORK/out")" "$d_base" "diff's base_digest"
assert_eq "$(json_field target_digest <"$WORK/out")" "$(digest new.safetensors)" "diff's target_digest"

note "inspect"
run_expect 0 "$DCR" inspect --json base.safetensors
read -r kind tot sharded < <(json_field kind total_elements sharded <"$WORK/out" | paste -sd' ')
assert_eq "$kind" checkpoint "inspect kind"
assert_eq "$tot" "$total" "inspect total_elements"
assert_eq "$sharded" False "inspect sharded (single file)"
run_expect 0 "$DCR" inspect --json base_dir
read -r sharded files < <(json_field sharded files <"$WORK/out" | paste -sd' ')
assert_eq "$sharded" True "inspect sharded (directory)"
[[ $files -gt 2 ]] || fail "inspect files: $files"
run_expect 0 "$DCR" inspect --json delta.dcr
read -r kind ch tot wire < <(json_field kind changed_elements total_elements wire_bytes <"$WORK/out" | paste -sd' ')
assert_eq "$kind" delta "inspect kind (delta)"
assert_eq "$ch" "$changed" "inspect changed_elements (delta)"
assert_eq "$tot" "$total" "inspect total_elements (delta)"
assert_eq "$wire" "$(size_of delta.dcr)" "inspect wire_bytes (delta)"
run_expect 0 "$DCR" inspect base.safetensors
grep -q "big.bf16" "$WORK/out" || fail "inspect text lists no tensors"
run_expect 0 "$DCR" inspect delta.dcr
grep -q "changed" "$WORK/out" || fail "inspect text of a delta"

note "inspect counts payloads per codec mode, value codec and value form"
# A generated training step (BF16, Adam-like): context mode wins on it, unlike on the pair above.
"$DCR_TESTDATA" chain --steps 1 --layers 2 --hidden 256 chain >/dev/null
for codec in plain ctx; do
  run_expect 0 "$DCR" diff --codec $codec --chunk-mib 1 chain/step_0.safetensors chain/step_1.safetensors -o modes_$codec.dcr
  run_expect 0 "$DCR" inspect --json modes_$codec.dcr
  "$PYTHON" -c '
import json, sys
j, codec = json.load(open(sys.argv[1])), sys.argv[2]
modes, codecs, forms, n = j["payload_modes"], j["value_codecs"], j["value_forms"], j["payloads"]
assert n >= 2, "expected several payloads with 1 MiB chunks: %d" % n
assert sum(modes.values()) == n and sum(codecs.values()) == n, (modes, codecs, n)
assert j["context_payloads"] == n - modes.get("plain", 0), (j["context_payloads"], modes)
# Values are steps wherever context mode is allowed, in plain-mode payloads too.
if codec == "plain":
    assert modes == {"plain": n}, modes
    assert forms == {"as_kind": n}, forms
else:
    assert j["context_payloads"] > 0, modes
    assert forms == {"steps": n}, forms
assert set(modes) <= {"plain", "context", "context_bands", "context_parts", "context_split_rice"}, modes
assert set(codecs) <= {"planes_raw", "planes_zstd", "huffman", "huffman_streams"}, codecs' "$WORK/out" $codec ||
    fail "inspect --json payload_modes/value_codecs/value_forms of the $codec delta: $(cat "$WORK/out")"
  run_expect 0 "$DCR" inspect modes_$codec.dcr
  grep -q "payload modes: .*; value codecs: .*; value forms: " "$WORK/out" || fail "inspect text lists no payload modes ($codec)"
done
echo "PASS"
