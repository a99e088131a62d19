#!/usr/bin/env bash
# Layouts end to end through the CLI: `dcr layout generate` for training (Megatron-style) and
# serving (vLLM-style) layouts, `dcr shard`, `dcr diff --layout` over training shards, and
# `dcr apply --layout` into serving shards gives files byte-identical to `dcr shard` of the new
# checkpoint; the same delta applies to the canonical checkpoint. Refusals exit with their codes and
# leave the shards unchanged.
#   $1: the dcr_layout_testdata helper (tests/layout_testdata_main.cc)
source "$(dirname "$0")/lib.sh"
LAYOUT_TESTDATA=${1:?usage: cli_layout.sh DCR_LAYOUT_TESTDATA}

cat >moe.json <<'JSON'
{"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
 "intermediate_size": 128, "num_hidden_layers": 4, "vocab_size": 300, "num_experts": 8, "moe_intermediate_size": 32,
 "mlp_only_layers": [1], "tie_word_embeddings": true, "torch_dtype": "bfloat16"}
JSON
cat >dense.json <<'JSON'
{"model_type": "llama", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2,
 "intermediate_size": 128, "num_hidden_layers": 2, "vocab_size": 500}
JSON
"$LAYOUT_TESTDATA" moe.json base.safetensors new.safetensors 3 || fail "test data generation failed"

note "layout generate and check"
run_expect 0 "$DCR" layout generate --config moe.json --role train --tp 2 --pp 2 --ep 2 -o train
grep -q "8 train layout files" out || fail "generate did not report 8 ranks: $(cat out)"
[[ -f train/rank-00007.json && ! -e train/rank-00008.json ]] || fail "expected rank-00000..7.json"
run_expect 0 "$DCR" layout generate --config moe.json --role serve --tp 8 -o serve --json
assert_eq "$(json_field ranks <out)" 8 "serve ranks"
run_expect 0 "$DCR" layout check --json serve
assert_eq "$(json_field valid <out)" True "layout check"

note "shard, diff --layout over training shards, apply --layout into serving shards"
run_expect 0 "$DCR" shard --layout train base.safetensors -o train_base
run_expect 0 "$DCR" shard --layout train new.safetensors -o train_new
[[ $(ls train_base | wc -l) == 8 ]] || fail "expected 8 training shard files"
run_expect 0 "$DCR" diff --layout train train_base train_new -o delta.dcr --json
changed=$(json_field changed_elements <out)
[[ $changed -gt 0 ]] || fail "no canonical changes found"
assert_eq "$(json_field wire_bytes <out)" "$(size_of delta.dcr)" "wire_bytes"
read -r want_changed _ _ < <(st count base.safetensors new.safetensors)
assert_eq "$changed" "$want_changed" "canonical changes vs an independent count"

run_expect 0 "$DCR" shard --layout serve base.safetensors -o serving
run_expect 0 "$DCR" shard --layout serve new.safetensors -o expected
run_expect 0 "$DCR" apply --layout serve delta.dcr serving --json
assert_eq "$(json_field changed_elements <out)" "$changed" "applied changes"
same_bytes serving expected

note "the delta is an ordinary canonical delta"
copy base.safetensors replica.safetensors
run_expect 0 "$DCR" apply delta.dcr replica.safetensors
run_expect 0 "$DCR" verify replica.safetensors new.safetensors

note "refusals leave the serving shards unchanged"
before=$(sha serving)
run_expect 7 "$DCR" apply --layout serve delta.dcr serving  # already at the target
grep -q "does not hold the delta's base bits" err || fail "wrong-base message: $(cat err)"
assert_eq "$(sha serving)" "$before" "shards after a refused apply"
run_expect 0 "$DCR" layout generate --config dense.json --role serve --tp 2 -o other
run_expect 6 "$DCR" apply --layout other delta.dcr serving
mv serve/rank-00005.json rank5.json
run_expect 3 "$DCR" apply --layout serve delta.dcr serving
grep -q "missing rank-00005.json" err || fail "missing-rank message: $(cat err)"
mv rank5.json serve/rank-00005.json
run_expect 2 "$DCR" apply --no-base-check delta.dcr replica.safetensors
assert_eq "$(sha serving)" "$before" "shards after refused applies"

note "invalid layouts and parallel sizes are refused with the constraint"
run_expect 2 "$DCR" layout generate --config moe.json --role train --tp 3 -o bad
grep -q "num_attention_heads 8 is not divisible by --tp 3" err || fail "tp message: $(cat err)"
run_expect 2 "$DCR" layout generate --config dense.json --role train --tp 1 --ep 2 -o bad
grep -q "needs a mixture-of-experts model" err || fail "ep message: $(cat err)"
run_expect 2 "$DCR" layout generate --config moe.json --role serve --tp 4 --ep 2 -o bad
copy serve broken
"$PYTHON" - broken/rank-00003.json <<'PY'
import json, sys
path = sys.argv[1]
j = json.load(open(path))
for t in j["tensors"]:
    for p in t["pieces"]:
        if p["owner"] and t["name"].endswith("o_proj.weight"):
            p["owner"] = False
            break
    else:
        continue
    break
json.dump(j, open(path, "w"))
PY
run_expect 2 "$DCR" layout check broken
grep -q "has no owner piece on any rank" err || fail "ownership message: $(cat err)"

note "converting serving layouts: F32 exact with XOR deltas, F16 with --overwrite and --no-base-check"
run_expect 0 "$DCR" layout generate --config moe.json --role serve --tp 4 --ep 4 --dtype F32 -o serve32
run_expect 0 "$DCR" shard --layout serve32 base.safetensors -o s32
run_expect 0 "$DCR" shard --layout serve32 new.safetensors -o s32_new
run_expect 0 "$DCR" apply --layout serve32 delta.dcr s32
same_bytes s32 s32_new
run_expect 0 "$DCR" layout generate --config moe.json --role serve --tp 2 --dtype F16 -o serve16
run_expect 0 "$DCR" shard --layout serve16 base.safetensors -o s16
run_expect 0 "$DCR" shard --layout serve16 new.safetensors -o s16_new
before=$(sha s16)
run_expect 8 "$DCR" apply --layout serve16 delta.dcr s16
run_expect 8 "$DCR" apply --layout serve16 --no-base-check delta.dcr s16
assert_eq "$(sha s16)" "$before" "F16 shards after refused applies"
run_expect 0 "$DCR" diff --layout train train_base train_new -o overwrite.dcr --overwrite
run_expect 0 "$DCR" apply --layout serve16 --no-base-check overwrite.dcr s16
same_bytes s16 s16_new

note "help names the layout commands and options"
run_expect 0 "$DCR" --help
grep -q "layout" out && grep -q "shard" out || fail "dcr --help lacks layout/shard"
run_expect 0 "$DCR" diff --help
grep -q -- "--layout" out || fail "dcr diff --help lacks --layout"
run_expect 0 "$DCR" layout generate --help
grep -q "Megatron-Core" out || fail "layout generate --help lacks the training convention"
echo "PASS"
