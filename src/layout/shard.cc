#include "layout/shard.h"

#include <cstdio>
#include <cstring>
#include <algorithm>
#include <filesystem>
#include <regex>

#include "base/thread_pool.h"
#include "layout/dtype_convert.h"
#include "layout/piece_runs.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;

uint64_t LoadBits(const uint8_t* p, uint32_t w) {
  uint64_t v = 0;
  std::memcpy(&v, p, w);
  return v;
}

// Copies `count` contiguous elements, converting when the dtypes differ.
void CopyRun(const uint8_t* src, DType from, uint8_t* dst, DType to, uint64_t count) {
  const uint32_t ws = DTypeWidth(from), wd = DTypeWidth(to);
  if (from == to) {
    std::memcpy(dst, src, count * ws);
    return;
  }
  for (uint64_t i = 0; i < count; ++i) {
    const uint64_t v = ConvertBits(from, to, LoadBits(src + i * ws, ws));
    std::memcpy(dst + i * wd, &v, wd);
  }
}

}  // namespace

std::string ShardFileName(uint32_t rank) {
  char buf[40];
  std::snprintf(buf, sizeof(buf), "rank-%05u.safetensors", rank);
  return buf;
}

void FillLocalTensor(const RankLayout& layout, const LocalTensor& t, const std::vector<std::span<const uint8_t>>& canonical,
                     std::span<uint8_t> out) {
  const uint32_t w = DTypeWidth(t.dtype);
  DCR_CHECK(out.size() == t.num_elements() * w);
  for (const Piece& p : t.pieces) {
    const CatalogEntry& c = layout.canonical[static_cast<size_t>(layout.FindCanonical(p.canonical))];
    const std::span<const uint8_t> src = canonical[static_cast<size_t>(layout.FindCanonical(p.canonical))];
    const uint32_t wc = DTypeWidth(c.dtype);
    const uint64_t run = RunLength(p.extent);
    ForEachPieceRun(t, p, c.shape, [&](uint64_t l, uint64_t ci) { CopyRun(src.data() + ci * wc, c.dtype, out.data() + l * w, t.dtype, run); });
  }
  const auto ls = RowMajorStrides(t.shape);
  for (const PaddingRegion& r : t.padding) {
    const uint64_t run = RunLength(r.extent);
    if (r.fill == PaddingFill::kZero) {
      ForEachBoxRun(t.shape, r.start, t.shape, r.start, r.extent,
                    [&](uint64_t l, uint64_t) { std::memset(out.data() + l * w, 0, run * w); });
      continue;
    }
    const size_t si = static_cast<size_t>(layout.FindCanonical(r.source));
    const CatalogEntry& src = layout.canonical[si];
    const uint64_t row = ls.empty() ? 1 : ls[0];
    const uint8_t* last = canonical[si].data() + (src.shape[0] - 1) * row * DTypeWidth(src.dtype);
    for (uint64_t k = 0; k < r.extent[0]; ++k) CopyRun(last, src.dtype, out.data() + (r.start[0] + k) * row * w, t.dtype, row);
  }
}

Status WriteShards(const LayoutSet& set, const Checkpoint& ckpt, const std::string& out_dir, int threads) {
  DCR_RETURN_IF_ERROR(CompareCatalogs(set.at(0).canonical, "the layout", ckpt.catalog(), ckpt.path()));
  std::vector<std::span<const uint8_t>> canonical;
  for (const TensorRef& t : ckpt.tensors()) canonical.push_back(t.bytes);
  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) return IoError(out_dir + ": cannot create directory: " + ec.message());
  return ParallelFor(set.size(), threads, [&](size_t r) {
    const RankLayout& l = set[r];
    std::vector<std::vector<uint8_t>> storage(l.tensors.size());
    std::vector<TensorToWrite> tensors;
    for (size_t i = 0; i < l.tensors.size(); ++i) {
      const LocalTensor& t = l.tensors[i];
      storage[i].resize(t.num_elements() * DTypeWidth(t.dtype));
      FillLocalTensor(l, t, canonical, storage[i]);
      tensors.push_back({t.name, t.dtype, t.shape, storage[i], false});
    }
    return WriteSafetensors((fs::path(out_dir) / ShardFileName(l.rank)).string(), tensors,
                            {{"dcr.role", LayoutRoleName(l.role)}, {"dcr.rank", std::to_string(l.rank)},
                             {"dcr.world_size", std::to_string(l.world_size)}});
  });
}

Result<ShardSet> ShardSet::Open(const LayoutSet& set, const std::string& dir, MappedFile::Mode mode) {
  ShardSet s;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) return NotFound(dir + ": not a shard directory");
  for (const RankLayout& l : set) {
    const std::string path = (fs::path(dir) / ShardFileName(l.rank)).string();
    if (!fs::exists(path, ec)) return NotFound(dir + ": missing the shard of rank " + std::to_string(l.rank) + " (" + ShardFileName(l.rank) + ")");
    DCR_ASSIGN_OR_RETURN(Checkpoint c, Checkpoint::Open(path, mode));
    auto& bytes = s.bytes_.emplace_back();
    auto& mutable_bytes = s.mutable_bytes_.emplace_back();
    for (const LocalTensor& t : l.tensors) {
      const TensorRef* ref = c.Find(t.name);
      if (!ref) return NotFound(path + ": rank " + std::to_string(l.rank) + "'s layout has tensor '" + t.name + "' but the shard does not");
      if (ref->dtype() != t.dtype || ref->info->shape != t.shape)
        return Mismatch(path + ": tensor '" + t.name + "' is " + std::string(DTypeName(ref->dtype())) + " " +
                        ShapeString(ref->info->shape) + " but the layout says " + std::string(DTypeName(t.dtype)) + " " +
                        ShapeString(t.shape));
      bytes.push_back(ref->bytes);
      mutable_bytes.push_back(ref->mutable_bytes);
    }
    if (c.tensors().size() != l.tensors.size()) {
      std::vector<std::string> names;
      for (const LocalTensor& t : l.tensors) names.push_back(t.name);
      for (const TensorRef& ref : c.tensors())
        if (!std::binary_search(names.begin(), names.end(), ref.name()))
          return Mismatch(path + ": tensor '" + ref.name() + "' is not in rank " + std::to_string(l.rank) + "'s layout");
    }
    s.ranks_.push_back(std::move(c));
  }
  const std::regex pattern("rank-([0-9]{5})\\.safetensors");
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (std::regex_match(name, m, pattern) && std::stoul(m[1].str()) >= set.size())
      return Mismatch(dir + ": holds " + name + " but the layout has only " + std::to_string(set.size()) + " ranks");
  }
  return s;
}

Status ShardSet::Sync() {
  for (Checkpoint& c : ranks_) DCR_RETURN_IF_ERROR(c.Sync());
  return Status::Ok();
}

Status CheckShardBytesShape(const LayoutSet& set, const ShardBytes& bytes) {
  if (bytes.size() != set.size()) return Internal("shard bytes for " + std::to_string(bytes.size()) + " ranks, layout has " + std::to_string(set.size()));
  for (size_t r = 0; r < set.size(); ++r) {
    if (bytes[r].size() != set[r].tensors.size()) return Internal("rank " + std::to_string(r) + ": wrong number of tensors");
    for (size_t i = 0; i < bytes[r].size(); ++i) {
      const LocalTensor& t = set[r].tensors[i];
      if (bytes[r][i].size() != t.num_elements() * DTypeWidth(t.dtype))
        return Internal("rank " + std::to_string(r) + " tensor '" + t.name + "': wrong byte size");
    }
  }
  return Status::Ok();
}

}  // namespace dcr
