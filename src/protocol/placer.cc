#include "protocol/placer.h"

namespace dcr {

Placer::Placer(const LayoutSet& set, const MutableShardBytes& shards)
    : set_(set), catalog_(set.at(0).canonical), index_(set), shards_(shards), has_converted_(catalog_.size(), false) {
  for (const RankLayout& l : set)
    for (const LocalTensor& t : l.tensors)
      for (const Piece& p : t.pieces)
        if (p.transform == PieceTransform::kConvert) has_converted_[static_cast<size_t>(l.FindCanonical(p.canonical))] = true;
}

}  // namespace dcr
