#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) into build-fuzz/ and runs each for
# DCR_FUZZ_SECONDS seconds (default 20). A crash fails the script and leaves its input in
# build-fuzz/crashes/. Corpora persist in build-fuzz/corpus/ between runs.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${DCR_FUZZ_SECONDS:-20}"
bash scripts/install-deps.sh --fuzz
CC=clang CXX=clang++ cmake -S . -B build-fuzz -G Ninja -DDCR_FUZZ=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
ninja -C build-fuzz payload_fuzz safetensors_fuzz location_fuzz
mkdir -p build-fuzz/crashes
for t in payload_fuzz safetensors_fuzz location_fuzz; do
  mkdir -p "build-fuzz/corpus/$t"
  # Seed the payload corpus with the golden deltas' first payloads (the file minus its 8-byte
  # magic; the fuzz target re-signs odd-sized inputs) so mutations start near valid input.
  if [ "$t" = payload_fuzz ]; then
    for f in testdata/golden/v*/*.dcr; do
      tail -c +9 "$f" > "build-fuzz/corpus/$t/seed-$(basename "$(dirname "$f")")-$(basename "$f")"
    done
  fi
  echo "fuzz: $t for ${seconds}s"
  if ! "build-fuzz/fuzz/$t" -max_total_time="$seconds" -max_len=65536 -artifact_prefix=build-fuzz/crashes/ \
      -print_final_stats=1 "build-fuzz/corpus/$t" > "build-fuzz/$t.log" 2>&1; then
    tail -40 "build-fuzz/$t.log"
    echo "fuzz: $t found a failure; input in build-fuzz/crashes/"
    exit 1
  fi
  grep -E "stat::number_of_executed_units" "build-fuzz/$t.log" || true
done
echo "fuzz: no failures"
