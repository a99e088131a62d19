// Banded context coding of locations (docs/format.md §2.7-2.9), the decoder of positions: the
// parts' distribution over threads. The header and each part's ordinals and checks are
// band_parts.h's, the O(dense) walks over the old bits band_walk.h's, the decoder that applies
// as it places band_decode_apply.cc, the encoder band_encode.cc.
#include "codec/band_context.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <string>
#include <vector>

#include "base/int_math.h"
#include "base/thread_pool.h"
#include "codec/band_parts.h"

namespace dcr {
namespace {

std::atomic<uint64_t> g_helper_parts{0};
std::atomic<uint64_t> g_max_part_for_tests{0};  // 0: kMaxEncodedPartElements

}  // namespace

uint64_t MaxEncodedPartElements() {
  const uint64_t set = g_max_part_for_tests.load(std::memory_order_relaxed);
  return set != 0 ? set : kMaxEncodedPartElements;
}

void SetMaxEncodedPartElementsForTests(uint64_t elements) { g_max_part_for_tests.store(elements); }

bool BandedCodeFits(uint64_t total_elements) {
  return MaxPartElements(total_elements, kMaxBandParts) <= MaxEncodedPartElements();
}

size_t ChooseBandParts(uint64_t total_elements, uint64_t part_elements) {
  const uint64_t by_size = total_elements / std::max<uint64_t>(part_elements, 1);
  const uint64_t most = std::min<uint64_t>({by_size, total_elements / kBandPartAlign, kMaxBandParts});
  size_t parts = most == 0 ? 1 : static_cast<size_t>(std::bit_floor(most));
  const uint64_t bound = MaxEncodedPartElements();
  while (parts < kMaxBandParts && MaxPartElements(total_elements, parts) > bound) parts *= 2;
  return parts;
}

BandPartStarts FindBandPartStarts(std::span<const ContextSegment> segs, uint64_t total_elements, size_t parts) {
  DCR_CHECK(parts >= 1 && parts <= kMaxBandParts && (parts == 1 || total_elements / parts >= kBandPartAlign));
  BandPartStarts starts{};
  size_t s = 0;
  uint64_t before = 0;  // elements of the segments before s
  for (size_t p = 1; p < parts; ++p) {
    const uint64_t at = FloorShare(total_elements, p, parts);
    while (before + segs[s].elements() <= at) before += segs[s++].elements();
    const uint64_t elem = (at - before) / kBandPartAlign * kBandPartAlign;
    starts[p] = {s, elem, before + elem};
  }
  starts[parts] = {segs.size(), 0, total_elements};
  return starts;
}

uint64_t GetBandPartsDecodedByHelper() { return g_helper_parts.load(); }
void CountBandPartDecodedByHelper() { g_helper_parts.fetch_add(1, std::memory_order_relaxed); }

Status DecodeBandedLocations(std::span<const uint8_t> in, BandedForm form, std::span<const ContextSegment> segs,
                             std::span<const std::span<uint32_t>> positions,
                             int threads, ClaimableTask* also) {
  const uint64_t total_elements = TotalElements(segs);
  uint64_t total_expected = 0;
  for (const auto& p : positions) total_expected += p.size();
  BandedHeader h;
  DCR_RETURN_IF_ERROR(ReadBandedHeader(in, form, total_elements, total_expected, &h));
  const PartDecoder decoder(h, segs, total_elements, positions);
  // Each part's ordinals (4 bytes per change) go to the buffer of the thread that decodes it,
  // which it reuses part after part (OrdinalRoom).
  const size_t parts = h.parts;
  std::array<Status, kMaxBandParts> status;
  auto decode = [&](size_t p) { status[p] = decoder.Decode(p, decoder.OrdinalRoom(p)); };
  // The first failing part's error, as one thread decoding the parts in order would report it.
  auto first_error = [&] {
    for (size_t p = 0; p < parts; ++p)
      if (!status[p].ok()) return status[p];
    return Status::Ok();
  };
  if (threads < 2 || (parts == 1 && also == nullptr)) {
    for (size_t p = 0; p < parts; ++p)
      if (decode(p), !status[p].ok()) return status[p];
    return Status::Ok();
  }
  if (parts == 1)
    return OfferClaimable(*also, [&] {
      decode(0);
      return status[0];
    });

  // Parts go to whichever thread claims them first, in order; a helper that comes late takes
  // what is left, or nothing. Then the value section (`also`), if still unclaimed.
  const SecondPartWalker walker = GetSecondPartWalkerForTests();
  std::atomic<size_t> next{walker == SecondPartWalker::kHelperPath ? size_t{1} : size_t{0}};
  std::atomic<size_t> done{0};
  auto take_parts = [&](bool helper) {
    for (size_t p; (p = next.fetch_add(1, std::memory_order_relaxed)) < parts;) {
      decode(p);
      if (helper) g_helper_parts.fetch_add(1, std::memory_order_relaxed);
      done.fetch_add(1, std::memory_order_release);
    }
  };
  auto side = [&] {
    if (walker != SecondPartWalker::kCallerWalksOn) take_parts(true);
    if (also != nullptr) (void)also->RunIfUnclaimed();
    return Status::Ok();
  };
  auto main = [&] {
    if (walker == SecondPartWalker::kHelperPath) {
      decode(0);
      done.fetch_add(1, std::memory_order_release);
    } else {
      take_parts(false);
    }
    if (also != nullptr) (void)also->RunIfUnclaimed();
    YieldUntil([&] { return done.load(std::memory_order_acquire) == parts; }); 
    return Status::Ok();
  };
  if (walker == SecondPartWalker::kHelperPath)
    (void)RunConcurrently(side, main);
  else
    (void)OfferToHelper(side, main);
  
  return first_error();
}

}  // namespace dcr
