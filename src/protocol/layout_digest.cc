#include "protocol/layout_digest.h"

#include <cstring>

#include "base/thread_pool.h"
#include "layout/dtype_convert.h"
#include "layout/piece_runs.h"

namespace dcr {

std::optional<uint64_t> CanonicalBitsAt(const Piece& piece, DType canonical_dtype, DType local_dtype,
                                        std::span<const uint8_t> local_tensor, uint64_t local_index) {
  const uint32_t w = DTypeWidth(local_dtype);
  uint64_t bits = 0;
  std::memcpy(&bits, local_tensor.data() + local_index * w, w);
  if (piece.transform == PieceTransform::kNone) return bits;
  if (!ConversionExact(canonical_dtype, local_dtype)) return std::nullopt;
  return InvertExactConversion(canonical_dtype, local_dtype, bits);
}

Result<CheckpointDigest> DigestThroughLayout(const LayoutSet& set, const ShardBytes& shards, int threads) {
  DCR_RETURN_IF_ERROR(CheckShardBytesShape(set, shards));
  const Catalog& catalog = set.at(0).canonical;
  struct Item {
    uint32_t rank, tensor, piece, canonical;
  };
  std::vector<Item> items;
  for (const RankLayout& l : set)
    for (uint32_t ti = 0; ti < l.tensors.size(); ++ti)
      for (uint32_t pi = 0; pi < l.tensors[ti].pieces.size(); ++pi) {
        const Piece& p = l.tensors[ti].pieces[pi];
        if (!p.owner) continue;
        const uint32_t c = static_cast<uint32_t>(l.FindCanonical(p.canonical));
        if (p.transform == PieceTransform::kConvert && !ConversionExact(catalog[c].dtype, l.tensors[ti].dtype))
          return Unsupported("canonical tensor '" + p.canonical + "' is owned by rank " + std::to_string(l.rank) + " tensor '" +
                             l.tensors[ti].name + "', which holds it converted to " +
                             std::string(DTypeName(l.tensors[ti].dtype)) + " with rounding: its canonical bits, and so the " +
                             "state digest, cannot be recovered from the shards");
        items.push_back({l.rank, ti, pi, c});
      }
  std::vector<Digest128> partial(items.size());
  DCR_RETURN_IF_ERROR(ParallelFor(items.size(), threads, [&](size_t k) {
    const Item& it = items[k];
    const LocalTensor& t = set[it.rank].tensors[it.tensor];
    const Piece& p = t.pieces[it.piece];
    const CatalogEntry& c = catalog[it.canonical];
    const std::span<const uint8_t> bytes = shards[it.rank][it.tensor];
    const uint64_t key = TensorKey(c.name), run = RunLength(p.extent);
    const uint32_t w = DTypeWidth(t.dtype);
    Digest128 d;
    Status status;
    ForEachPieceRun(t, p, c.shape, [&](uint64_t l, uint64_t ci) {
      if (!status.ok()) return;
      if (p.transform == PieceTransform::kNone) {
        d += DigestElements(key, bytes.subspan(l * w, run * w), w, ci);
        return;
      }
      for (uint64_t e = 0; e < run; ++e) {
        auto bits = CanonicalBitsAt(p, c.dtype, t.dtype, bytes, l + e);
        if (!bits) {
          status = WrongBase("rank " + std::to_string(it.rank) + " tensor '" + t.name + "' element " + std::to_string(l + e) +
                             " holds bits that no " + std::string(DTypeName(c.dtype)) + " value converts to");
          return;
        }
        d += ElementHash(key, ci + e, *bits);
      }
    });
    partial[k] = d;
    return status;
  }));
  CheckpointDigest out;
  out.tensors.assign(catalog.size(), Digest128{});
  for (size_t k = 0; k < items.size(); ++k) out.tensors[items[k].canonical] += partial[k];
  out.total = CombineDigests(catalog, out.tensors);
  return out;
}

}  // namespace dcr
