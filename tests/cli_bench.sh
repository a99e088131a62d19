#!/usr/bin/env bash
# dcr bench codec: on a generated checkpoint pair it reports, per codec, the
# change count the files hold, the wire bytes `dcr diff` writes for that codec, positive
# throughputs and its SIMD target (decode+apply is checked bit-exact inside the bench, which fails
# otherwise); --cold gives the same bytes and says so; without FILES it benchmarks a generated
# trajectory; bad arguments are usage errors;
# its scratch directory (under $TMPDIR) is gone after every run, failed ones included.
source "$(dirname "$0")/lib.sh"
export TMPDIR="$WORK/tmp"
mkdir -p "$TMPDIR"

"$DCR_TESTDATA" pair --seed 41 --big 200000 a.safetensors b.safetensors >/dev/null
run_expect 0 "$DCR" bench codec --repeat 1 --threads 2 --json a.safetensors b.safetensors
cp "$WORK/out" bench.json
read -r want_changed _ < <(st count a.safetensors b.safetensors)
for codec in plain ctx; do
  run_expect 0 "$DCR" diff --codec "$codec" a.safetensors b.safetensors -o "$codec.dcr"
  "$PYTHON" - bench.json "$codec" "$want_changed" "$(size_of "$codec.dcr")" <<'PY' || fail "bench row for $codec disagrees"
import json, sys
path, codec, changed, wire = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
rows = [r for r in json.load(open(path)) if r["codec"] == codec]
assert len(rows) == 1, rows
r = rows[0]
assert r["changed_elements"] == changed, (r["changed_elements"], changed)
assert r["wire_bytes"] == wire, (r["wire_bytes"], wire)
for k in ("scan_GBps", "encode_GBps", "decode_apply_GBps"):
    assert r[k] > 0, (k, r[k])
assert r["simd_target"], r
assert abs(r["wire_bytes_per_changed_element"] - wire / changed) < 1e-9
# One repetition: the median of the per-repetition ratios is that repetition's, the best-time ratio.
for k in ("encode_vs_scan", "decode_apply_vs_scan"):
    assert r[k] > 0 and abs(r[k + "_median"] - r[k]) <= 1e-12 * r[k], (k, r[k], r[k + "_median"])
PY
done

note "--cold: the same bytes and change counts, marked cold"
run_expect 0 "$DCR" bench codec --cold --repeat 2 --threads 2 --json a.safetensors b.safetensors
"$PYTHON" - bench.json "$WORK/out" <<'PY' || fail "cold rows disagree with warm ones"
import json, sys
warm, cold = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
assert [r["codec"] for r in cold] == [r["codec"] for r in warm], cold
for w, c in zip(warm, cold):
    assert c["cold"] is True and w["cold"] is False, (w, c)
    for k in ("changed_elements", "wire_bytes", "payloads", "context_payloads"):
        assert c[k] == w[k], (k, c[k], w[k])
    for k in ("scan_GBps", "encode_GBps", "decode_apply_GBps", "encode_vs_scan_median", "decode_apply_vs_scan_median"):
        assert c[k] > 0, (k, c[k])
PY
run_expect 0 "$DCR" bench codec --cold --repeat 1 a.safetensors b.safetensors
grep -q "evicted from the caches" "$WORK/out" || fail "no cold note in the footer"

note "generated trajectory"
run_expect 0 "$DCR" bench codec --repeat 1 --synth-layers 1 --synth-hidden 128
grep -q "generating 3 snapshots" "$WORK/out" || fail "no generation line"
[[ $(grep -c "step_[01].safetensors -> step_[12].safetensors" "$WORK/out") -eq 4 ]] || fail "expected 2 pairs x 2 codecs: $(cat "$WORK/out")"
grep -q "SIMD target" "$WORK/out" || fail "no SIMD target in the footer"

note "usage errors"
run_expect 2 "$DCR" bench codec a.safetensors
run_expect 2 "$DCR" bench codec --codec zip a.safetensors b.safetensors
run_expect 2 "$DCR" bench codec --synth-hidden 1
run_expect 3 "$DCR" bench codec a.safetensors missing.safetensors

note "no scratch left behind"
[[ -z $(ls -A "$TMPDIR") ]] || fail "bench left scratch files: $(ls -A "$TMPDIR")"
echo "PASS"
