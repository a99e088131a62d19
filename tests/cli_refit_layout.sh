#!/usr/bin/env bash
# Live refit into receivers that hold a serving layout (`dcr serve --layout`: vLLM-style TP 4 shards
# of a MoE model with tied embeddings): 2 producers, 2 layout receivers and 1 canonical receiver in
# one relay tree. After every commit each layout receiver's shards are byte-identical to
# `dcr shard` of the snapshot, and its scrub (`dcr digest`) matches the committed digest; the
# canonical receiver is bit-identical to the snapshot. The coordinator has every producer encode
# plain payloads because a layout receiver asks for them. A layout receiver killed mid-apply
# restarts into exactly the base shards, and a retry reaches exactly the target shards.
#   $1: the dcr_layout_testdata helper (tests/layout_testdata_main.cc)
source "$(dirname "$0")/lib.sh"
source "$(dirname "$0")/refit_lib.sh"
LAYOUT_TESTDATA=${1:?usage: cli_refit_layout.sh DCR_LAYOUT_TESTDATA}

cat >moe.json <<'JSON'
{"model_type": "qwen3_moe", "hidden_size": 64, "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 16,
 "intermediate_size": 128, "num_hidden_layers": 4, "vocab_size": 300, "num_experts": 8, "moe_intermediate_size": 32,
 "mlp_only_layers": [1], "tie_word_embeddings": true, "torch_dtype": "bfloat16"}
JSON
"$LAYOUT_TESTDATA" moe.json step_0.safetensors step_1.safetensors 3 || fail "test data generation failed"
cp step_0.safetensors step_2.safetensors  # step 2 goes back to the first bits: another real transfer
run_expect 0 "$DCR" layout generate --config moe.json --role serve --tp 4 -o serve
for k in 0 1 2; do run_expect 0 "$DCR" shard --layout serve step_$k.safetensors -o shards_$k; done
INIT=$WORK/step_0.safetensors

start_receiver l0 --init "$INIT" --layout "$WORK/serve"
start_receiver c0 --init "$INIT"
start_receiver l1 --init "$INIT" --layout "$WORK/serve"
same_bytes "$WORK/shards_0" "$WORK/l0/shards"
ALL=$(endpoints l0 c0 l1)

check_at() {
  local k=$1
  for r in l0 l1; do
    same_bytes "$WORK/shards_$k" "$WORK/$r/shards"
    run_expect 0 "$DCR" digest "$WORK/$r"
    grep -q "^matches the committed state digest" "$WORK/out" || fail "$r scrub after step $k"
    assert_eq "$(status_field "$r" version.number)" "$(push_field version.number)" "$r version after step $k"
  done
  run_expect 0 "$DCR" verify "$WORK/c0" "$WORK/step_$k.safetensors"
  assert_eq "$(status_field c0 digest)" "$(status_field l0 digest)" "canonical and layout receivers' digests"
}

for k in 1 2; do
  note "refit step $k into two layout receivers and one canonical receiver"
  push_all 2 p "$WORK/step_$k.safetensors" "$ALL" --chunk-kib 8
  [[ $PUSH_RC == 0 ]] || { cat "$WORK/push.log"; fail "push of step $k exited $PUSH_RC"; }
  check_at "$k"
done
grep -q "payload .* rejected" "$WORK/l0.log" "$WORK/l1.log" && fail "a layout receiver rejected a payload"

note "verify explains that a layout receiver holds shards"
run_expect 8 "$DCR" verify "$WORK/l0" "$WORK/step_2.safetensors"
grep -q "dcr shard --layout" "$WORK/err" || fail "verify did not explain how to compare shards"
run_expect 0 "$DCR" inspect "$WORK/l0"
grep -q "serving layout in" "$WORK/out" || fail "inspect of a layout receiver"

note "a layout receiver killed mid-apply restarts at exactly the base shards; a retry reaches the target"
kill_receiver l1
DCR_CRASH_AT=replica.segment_applied:3 start_receiver l1
push_all 2 p "$WORK/step_1.safetensors" "$ALL" --chunk-kib 8 --timeout 2
[[ $PUSH_RC != 0 ]] || fail "the push committed although receiver l1 was killed during apply"
kill_receiver l1
start_receiver l1
assert_eq "$(status_field l1 pending)" "" "l1 pending after restart"
same_bytes "$WORK/shards_2" "$WORK/l1/shards"
push_all 2 p "$WORK/step_1.safetensors" "$ALL" --chunk-kib 8
[[ $PUSH_RC == 0 ]] || { cat "$WORK/push.log"; fail "retry push exited $PUSH_RC"; }
check_at 1
for r in l0 c0 l1; do stop_receiver "$r"; done
echo "PASS"
