#!/usr/bin/env bash
# The real BF16 trajectories (shared/data/trajectories/README.md): diff -> apply -> cmp along the
# whole chain lr1e-06_s0 -> ... -> lr1e-05_s3 on one replica, with changed elements checked
# independently and wire bytes per changed element below the reference codec's figures.
# Usage: cli_trajectories.sh DIR. Skips (77) when DIR does not hold the files.
source "$(dirname "$0")/lib.sh"

T=${1:?usage: cli_trajectories.sh DIR}
rates=(1e-06 3e-06 1e-05)
declare -A reference=([1e-06]=2.22 [3e-06]=1.84 [1e-05]=1.55)  # README: reference codec, best case
for r in "${rates[@]}"; do
  for s in 0 1 2 3; do
    if [[ ! -f $T/lr${r}_s$s.safetensors ]]; then
      echo "SKIP: $T/lr${r}_s$s.safetensors not found"
      exit $SKIP
    fi
  done
done
if [[ -f $T/SHA256SUMS ]]; then
  (cd "$T" && sha256sum --quiet -c SHA256SUMS) || fail "trajectory files do not match SHA256SUMS"
fi
cmp "$T/lr1e-06_s3.safetensors" "$T/lr3e-06_s0.safetensors" || fail "chain link 1e-6 -> 3e-6 broken"
cmp "$T/lr3e-06_s3.safetensors" "$T/lr1e-05_s0.safetensors" || fail "chain link 3e-6 -> 1e-5 broken"

cp "$T/lr1e-06_s0.safetensors" replica.safetensors
chmod u+w replica.safetensors
printf '%-28s %-28s %9s %9s %8s %8s %7s\n' base new changed density wire B/chg ref
for r in "${rates[@]}"; do
  for s in 0 1 2; do
    base=$T/lr${r}_s$s.safetensors
    new=$T/lr${r}_s$((s + 1)).safetensors
    run_expect 0 "$DCR" diff "$base" "$new" -o delta.dcr --json
    read -r changed total wire < <(json_field changed_elements total_elements wire_bytes <"$WORK/out" | paste -sd' ')
    read -r want_changed want_total _ < <(st count "$base" "$new")
    assert_eq "$changed" "$want_changed" "changed_elements for $base -> $new"
    assert_eq "$total" "$want_total" "total_elements"
    assert_eq "$wire" "$(size_of delta.dcr)" "wire_bytes"
    [[ $changed -gt 0 ]] || fail "no changes between $base and $new"
    per=$("$PYTHON" -c 'import sys; print("%.3f" % (int(sys.argv[1]) / int(sys.argv[2])))' "$wire" "$changed")
    density=$("$PYTHON" -c 'import sys; print("%.3f%%" % (100 * int(sys.argv[1]) / int(sys.argv[2])))' "$changed" "$total")
    printf '%-28s %-28s %9s %9s %8s %8s %7s\n' "lr${r}_s$s" "lr${r}_s$((s + 1))" "$changed" "$density" "$wire" "$per" "${reference[$r]}"
    assert_lt "$per" "${reference[$r]}" "wire bytes per changed element for lr${r}_s$s -> s$((s + 1))"
    run_expect 0 "$DCR" apply delta.dcr replica.safetensors
    cmp replica.safetensors "$new" || fail "replica differs from $new after applying its delta"
  done
done
echo "PASS"
