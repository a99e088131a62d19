#!/usr/bin/env bash
# Cross-builds the codec, the state digest and their SIMD-heavy tests for aarch64 and runs them under qemu-user, so
# that every Highway target of that platform (NEON, SVE, SVE2, ...) is checked against the scalar
# models on an x86-64 machine. Installs the cross toolchain and arm64 libraries from Debian when
# they are missing (needs root or sudo). Usage: scripts/check-aarch64.sh [--install-only] [BUILD_DIR]
# (--install-only: just the packages, e.g. in the background while something else builds).
set -euo pipefail
cd "$(dirname "$0")/.."
INSTALL_ONLY=0
if [[ ${1:-} == --install-only ]]; then INSTALL_ONLY=1; shift; fi
OUT=${1:-build-aarch64}
SUDO=$([[ $(id -u) -eq 0 ]] && echo "" || echo sudo)

LIBS=/usr/lib/aarch64-linux-gnu
if ! command -v aarch64-linux-gnu-g++ >/dev/null || ! command -v qemu-aarch64 >/dev/null ||
   [[ ! -f $LIBS/libhwy.so || ! -f $LIBS/libzstd.so || ! -f $LIBS/libxxhash.so || ! -f $LIBS/libgtest.a ]]; then
  $SUDO dpkg --add-architecture arm64
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends \
    g++-aarch64-linux-gnu qemu-user libhwy-dev:arm64 libzstd-dev:arm64 libxxhash-dev:arm64 libgtest-dev:arm64
fi
[[ $INSTALL_ONLY == 1 ]] && exit 0

mkdir -p "$OUT"
CXX="aarch64-linux-gnu-g++ -std=c++20 -O2 -Isrc -DHWY_SHARED_DEFINE"
SOURCES=(src/base/status.cc src/format/dtype.cc src/codec/diff.cc src/codec/simd_masks.cc src/codec/band_fit.cc
         src/codec/band_context.cc src/codec/band_parts.cc src/codec/band_decode_apply.cc src/codec/band_encode.cc src/codec/band_walk.cc src/codec/location_coding.cc src/codec/rice_gaps.cc src/codec/split_rice.cc src/codec/split_rice_encode.cc src/codec/second_part_walker.cc src/codec/value_coding.cc src/codec/value_decode.cc
         src/codec/value_symbols.cc src/codec/huffman.cc
         src/codec/context_coding.cc src/codec/section_coding.cc src/codec/apply_changes.cc src/codec/value_steps.cc src/codec/payload_codec.cc
         src/codec/payload_checksum.cc src/codec/payload_checksum_avx2.cc
         src/base/thread_pool.cc src/base/mapped_file.cc src/base/durable_file.cc src/base/crash_point.cc src/base/cache_evict.cc src/base/large_alloc.cc
         src/format/safetensors.cc src/format/checkpoint.cc src/protocol/state_digest.cc src/protocol/state_digest_simd.cc)
TESTS=(codec/simd_masks_test codec/band_walk_test codec/split_rice_test codec/scalar_targets_test codec/value_steps_test codec/codec_band_hostile_test codec/codec_context_test codec/codec_test codec/location_coding_test
       protocol/state_digest_test)
# Parallel jobs; waiting on each by pid makes a failed one fail the script (set -e).
objects=() pids=()
for f in "${SOURCES[@]}"; do
  objects+=("$OUT/$(basename "$f" .cc).o")
  $CXX -c "$f" -o "${objects[-1]}" & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
pids=()
for t in "${TESTS[@]}"; do
  $CXX "src/$t.cc" "${objects[@]}" -o "$OUT/$(basename "$t")" -lhwy -lzstd -lxxhash -lgtest -lgtest_main -lpthread & pids+=($!)
done
for p in "${pids[@]}"; do wait "$p"; done
# QEMU_CPU=max emulates SVE2 as well as NEON, so every aarch64 target this build compiled runs.
# Debian 12's qemu-user (7.2) hangs in pthread_create, so tests that start threads
# (codec_context_threads_test) are left out here; what they test (two threads give one thread's
# result) is not per-target.
for t in "${TESTS[@]}"; do
  echo "aarch64: $t"
  QEMU_CPU=max qemu-aarch64 -L /usr/aarch64-linux-gnu "$OUT/$(basename "$t")" --gtest_brief=1
done
echo "aarch64: all passed"
