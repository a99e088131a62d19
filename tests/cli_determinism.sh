#!/usr/bin/env bash
# Determinism: the same inputs give byte-identical delta files for every thread count,
# chunk layout and run.
source "$(dirname "$0")/lib.sh"

"$DCR_TESTDATA" pair --seed 41 --big 4000000 base.safetensors new.safetensors >/dev/null
"$DCR_TESTDATA" pair --seed 41 --big 4000000 --sharded 1000000 base_dir new_dir >/dev/null

same_deltas() {  # same_deltas BASE NEW [OPTIONS...]
  local base=$1 new=$2
  shift 2
  for t in 1 2 3 8; do
    run_expect 0 "$DCR" diff "$base" "$new" -o "t$t.dcr" --threads "$t" "$@"
  done
  run_expect 0 "$DCR" diff "$base" "$new" -o again.dcr --threads 2 "$@"
  for f in t2.dcr t3.dcr t8.dcr again.dcr; do
    cmp t1.dcr "$f" || fail "delta with ${f%.dcr} differs from --threads 1 ($*)"
  done
}

note "default chunks"
same_deltas base.safetensors new.safetensors
note "1 MiB chunks (many payloads)"
same_deltas base.safetensors new.safetensors --chunk-mib 1
payloads=$("$DCR" inspect --json t1.dcr | json_field payloads)
[[ $payloads -gt 8 ]] || fail "expected more than 8 payloads, got $payloads"
note "overwrite"
same_deltas base.safetensors new.safetensors --chunk-mib 1 --overwrite
note "sharded directories give the same delta as single files"
same_deltas base_dir new_dir --chunk-mib 1 --overwrite
run_expect 0 "$DCR" diff base.safetensors new.safetensors -o single.dcr --chunk-mib 1 --overwrite
cmp single.dcr t1.dcr || fail "sharded and single-file checkpoints of the same tensors give different deltas"
echo "PASS"
