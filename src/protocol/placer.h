// Placement of canonical changes into shards (DESIGN.md §5, receiver side): a canonical element
// (tensor, index) resolves through the layout's placement index to every local element that
// holds it (its slots); the Placer reads the element's canonical bits back from those slots and
// writes a change into all of them. Shared by the offline layout apply (layout_apply.h) and a
// receiver replica held in a serving layout (replica_state.h).
//
// Contract:
//  - `set` must be valid (ValidateLayoutSet) and `shards` must hold every rank's local tensors of
//    it, writable (CheckShardBytesShape); both must outlive the Placer, which keeps references.
//  - Resolve is read-only and O(1) per element (a few divisions and a band lookup); every
//    canonical element of a valid set has at least one slot and exactly one owner slot.
//  - OldBits prefers the owner's copy (the one the canonical state digest counts), so what it
//    returns is the bit pattern DigestThroughLayout hashes for that element.
//  - Place writes only the given slots. Concurrent calls are safe when their slots are disjoint:
//    distinct canonical elements never share a local element.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "base/status.h"
#include "codec/payload_codec.h"
#include "layout/dtype_convert.h"
#include "layout/layout.h"
#include "layout/projection.h"
#include "layout/shard.h"

namespace dcr {

// One local copy of a canonical element.
struct Slot {
  uint8_t* at;                  // the local element's bytes in the shards
  uint64_t element;             // flat row-major index within the local tensor
  uint32_t rank, local_tensor;  // the local tensor: index within the rank's layout
  DType local_dtype;
  bool convert, owner;  // its piece converts dtypes; its piece is the element's owner
};

class Placer {
 public:
  Placer(const LayoutSet& set, const MutableShardBytes& shards);

  const Catalog& catalog() const { return catalog_; }
  // True when some piece of canonical tensor `t` converts its dtype.
  bool has_converted(uint32_t t) const { return has_converted_[t]; }

  // Appends every local copy of element `index` of canonical tensor `t` to `out`.
  void Resolve(uint32_t t, uint64_t index, std::vector<Slot>* out) const {
    index_.ForEach(t, index, [&](const PlacementIndex::Placement& p, uint64_t local) {
      const DType dt = set_[p.rank].tensors[p.local_tensor].dtype;
      out->push_back({shards_[p.rank][p.local_tensor].data() + local * DTypeWidth(dt), local, p.rank, p.local_tensor, dt,
                      p.piece->transform == PieceTransform::kConvert, p.piece->owner});
    });
  }

  // The canonical bits held by `slots` (the copies of one element of tensor `t`): from the owner
  // when its copy is exact, else from any exact copy; nullopt when every copy rounds.
  std::optional<uint64_t> OldBits(uint32_t t, std::span<const Slot> slots) const {
    std::optional<uint64_t> owner, other;
    for (const Slot& s : slots) {
      uint64_t bits = 0;
      std::memcpy(&bits, s.at, DTypeWidth(s.local_dtype));
      std::optional<uint64_t> canonical = bits;
      if (s.convert)
        canonical = ConversionExact(catalog_[t].dtype, s.local_dtype)
                        ? InvertExactConversion(catalog_[t].dtype, s.local_dtype, bits)
                        : std::nullopt;
      if (!canonical) continue;
      if (s.owner) owner = canonical;
      else if (!other) other = canonical;
    }
    return owner ? owner : other;
  }

  // Writes one change into every copy: XOR `value` into plain copies for kXor, else store
  // `value`; converting copies get ConvertBits(new_bits). `new_bits` (the element's new canonical
  // bits) is needed (valid) only for an overwrite or when some copy converts.
  void Place(uint32_t t, std::span<const Slot> slots, ValueKind kind, uint64_t value, uint64_t new_bits) const {
    for (const Slot& s : slots) {
      const uint32_t w = DTypeWidth(s.local_dtype);
      uint64_t bits = 0;
      if (s.convert) {
        bits = ConvertBits(catalog_[t].dtype, s.local_dtype, new_bits);
      } else if (kind == ValueKind::kXor) {
        std::memcpy(&bits, s.at, w);
        bits ^= value;
      } else {
        bits = value;
      }
      std::memcpy(s.at, &bits, w);
    }
  }

 private:
  const LayoutSet& set_;
  const Catalog& catalog_;
  PlacementIndex index_;
  const MutableShardBytes& shards_;
  std::vector<bool> has_converted_;
};

// Changes are resolved per batch, with every copy prefetched before any is touched: resolution is
// cheap arithmetic on the (cached) index, the copies are scattered over the shards, so issuing
// their loads together overlaps the cache misses instead of paying them one after another.
inline constexpr size_t kPlacerBatch = 64;

// Calls fn(k, canonical element index, value, copies) for every change k of `seg`, in order;
// stops at (and returns) the first error fn returns.
template <typename Fn>
Status ForEachResolvedChange(const Placer& placer, const DecodedSegment& seg, Fn&& fn) {
  std::vector<Slot> slots;
  std::vector<size_t> ends;
  const uint32_t t = seg.spec.tensor_index;
  for (size_t k0 = 0; k0 < seg.changes.size(); k0 += kPlacerBatch) {
    const size_t k1 = std::min(seg.changes.size(), k0 + kPlacerBatch);
    slots.clear();
    ends.clear();
    for (size_t k = k0; k < k1; ++k) {
      placer.Resolve(t, seg.spec.start + seg.changes.positions[k], &slots);
      ends.push_back(slots.size());
    }
    for (const Slot& s : slots) __builtin_prefetch(s.at, 1);
    size_t begin = 0;
    for (size_t k = k0; k < k1; ++k) {
      const size_t end = ends[k - k0];
      uint64_t value = 0;
      std::memcpy(&value, seg.changes.values.data() + k * seg.changes.width, seg.changes.width);
      DCR_RETURN_IF_ERROR(fn(k, seg.spec.start + seg.changes.positions[k], value,
                             std::span<const Slot>(slots.data() + begin, end - begin)));
      begin = end;
    }
  }
  return Status::Ok();
}

}  // namespace dcr
