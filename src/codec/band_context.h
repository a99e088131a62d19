// Banded context-mode location coding (payload codec mode 2, docs/format.md §2.7). Both sides hold
// the old bits, and the exponent of an element's old value predicts whether it changes (one BF16
// ulp is smaller for small magnitudes). The encoder cuts the class axis (the exponent field,
// ContextClassFor) into at most 8 contiguous bands fitted to the payload; each band's elements,
// taken in payload order across all segments, form a sequence in which the changed ones are
// Rice-coded by gap with a parameter fitted to that band.
//
// On the real trajectories deltas with fitted bands are within 0.2 % of their size with one class
// per exponent value (mode 1, context_coding.h), and both directions are several times faster:
// band membership of 64 elements is a few SIMD compares and popcounts (simd_masks.h), so neither
// side visits unchanged elements one by one. The O(dense) walk over the old bits still bounds
// decoding (docs/format.md §2.7).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "codec/band_fit.h"
#include "codec/context_coding.h"

namespace dcr {

// Appends the banded code of the changed positions (positions[i] ascending, relative to segment
// i, at least one in all) to `out`. Deterministic: a function of the segments' bytes only, the
// same with any thread count. With threads >= 2 and at least kSplitWalkMinElements elements, a
// helper thread may walk the second half of the old bits. With threads >= 2 the helper also runs
// `filler` (while the calling thread fits the bands) and `also` (while it writes the code), each
// unless a thread has claimed it: other work of the same payload. Either may still be unclaimed
// on return; the caller runs it then (RunIfUnclaimed). (band_encode.cc)
void EncodeBandedLocations(std::span<const ContextSegment> segs, std::span<const std::span<const uint32_t>> positions,
                           std::vector<uint8_t>* out, int threads = 1, ClaimableTask* also = nullptr,
                           ClaimableTask* filler = nullptr);

// Whether EncodeBandedLocations splits its walk over these segments between two threads.
bool EncodeSplitsWalk(std::span<const ContextSegment> segs, int threads);

// Inverse: fills *positions[i] with exactly expected[i] ascending positions of segment i, or fails
// with kCorrupt. Never reads outside `in` or the segments' base bytes; memory is bounded by the
// sum of `expected`. With threads >= 2, at least kSplitWalkMinElements elements and
// kSplitWalkMinChanges changes, a helper thread may walk part of the old bits (when it comes in
// time); positions and errors are the same as with one thread. With threads >= 2, the helper also
// runs `also` (another section's decode) if no thread has claimed it; the caller runs it
// afterwards if it is still unclaimed.
Status DecodeBandedLocations(std::span<const uint8_t> in, std::span<const ContextSegment> segs,
                             std::span<const uint64_t> expected, std::span<std::vector<uint32_t>* const> positions,
                             int threads = 1, ClaimableTask* also = nullptr);

// Decodes whose second part of the walk a helper thread walked since the process started, and of
// those the ones whose parts disagreed (damaged input) and were walked again on one thread.
struct BandWalkSplitCounts {
  uint64_t splits = 0, fallbacks = 0;
};
BandWalkSplitCounts GetBandWalkSplitCounts();

// Payloads with fewer elements, or fewer changes, decode on one thread: a second thread would
// cost more than it saves. Waking a sleeping helper takes 0.1-0.15 ms on the VMs measured, and
// below about 16 Ki changes in 1.45 M elements the whole one-thread walk is 0.25-0.3 ms there,
// so two threads were slower than one (`dcr bench codec` on the real pairs).
inline constexpr uint64_t kSplitWalkMinElements = 256 * 1024;
inline constexpr uint64_t kSplitWalkMinChanges = 16 * 1024;

// For tests: who walks the second part of a split walk. kClaimed: whichever thread claims it
// first (the default). kHelperPath: always as a helper does, counting populations first (on the
// helper, or after the first part on the calling thread when the helper is late). kCallerWalksOn:
// always the calling thread, walking on from the first part. So each path and its checks run
// whatever the timing. Either of the last two also splits payloads with fewer than
// kSplitWalkMinChanges changes.
// The encoder's split walks (EncodeBandedLocations) follow the same setting; its second part
// needs no population count, so kHelperPath there only means that the helper walks it. So does
// the value section's two-thread encode (EncodeValues): kHelperPath, the helper counts and writes
// the second half's symbols; kCallerWalksOn, the calling thread does all.
enum class SecondPartWalker { kClaimed, kHelperPath, kCallerWalksOn };
void SetSecondPartWalkerForTests(SecondPartWalker walker);
SecondPartWalker GetSecondPartWalkerForTests();


}  // namespace dcr
