// A checkpoint: the named tensors of a model, in one safetensors file or in a sharded directory
// (model.safetensors.index.json mapping tensor names to shard files). Tensors are exposed
// sorted by name; that order is the canonical tensor order of dcr's formats.
#pragma once

#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "base/status.h"
#include "format/safetensors.h"

namespace dcr {

inline constexpr const char* kShardIndexFile = "model.safetensors.index.json";

struct TensorRef {
  const TensorInfo* info = nullptr;  // owned by the checkpoint's file
  int file_index = 0;                // which shard holds it
  std::span<const uint8_t> bytes;
  std::span<uint8_t> mutable_bytes;  // empty unless opened read-write

  const std::string& name() const { return info->name; }
  DType dtype() const { return info->dtype; }
  uint64_t num_elements() const { return info->num_elements; }
};

// Names, dtypes and shapes: what must agree for two checkpoints to be diffable.
struct CatalogEntry {
  std::string name;
  DType dtype = DType::kU8;
  std::vector<uint64_t> shape;
  bool operator==(const CatalogEntry&) const = default;
};
using Catalog = std::vector<CatalogEntry>;  // sorted by name

// Ok iff the catalogs are equal; otherwise a kMismatch naming the first difference.
Status CompareCatalogs(const Catalog& a, const std::string& a_label, const Catalog& b,
                       const std::string& b_label);

class Checkpoint {
 public:
  // `path` is a .safetensors file, a directory holding model.safetensors.index.json, or a
  // directory holding exactly one .safetensors file.
  static Result<Checkpoint> Open(const std::string& path,
                                 MappedFile::Mode mode = MappedFile::Mode::kReadOnly);

  Checkpoint(Checkpoint&&) = default;
  Checkpoint& operator=(Checkpoint&&) = default;

  const std::string& path() const { return path_; }
  bool sharded() const { return sharded_; }
  const std::vector<TensorRef>& tensors() const { return tensors_; }
  const TensorRef* Find(const std::string& name) const;
  Catalog catalog() const;
  uint64_t total_elements() const;
  uint64_t total_bytes() const;
  const SafetensorsFile& file(int i) const { return *files_[static_cast<size_t>(i)]; }
  size_t num_files() const { return files_.size(); }

  // Makes all writes durable (msync + fsync of every shard).
  Status Sync();

 private:
  Checkpoint() = default;
  Status AddFile(const std::string& file_path, MappedFile::Mode mode);

  std::string path_;
  bool sharded_ = false;
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::vector<TensorRef> tensors_;
};

// CompareCatalogs(a.catalog(), a.path(), b.catalog(), b.path()), the same errors, without
// copying either catalog: every encode starts with it (the 41 names and shapes of the real
// trajectories' checkpoints, copied twice, took ~6 us of a ~180 us two-thread encode).
Status CompareCheckpointCatalogs(const Checkpoint& a, const Checkpoint& b);

// Writes a sharded checkpoint: shard files of at most ~max_shard_bytes each (a tensor never
// spans two shards) named model-0000i-of-0000n.safetensors, plus the index JSON.
Status WriteShardedCheckpoint(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                              uint64_t max_shard_bytes);

}  // namespace dcr

namespace dcr {

// Where two checkpoints with equal catalogs first differ, in catalog order.
struct TensorDifference {
  std::string tensor;
  std::vector<uint64_t> shape;
  uint64_t element = 0;  // flat row-major index
  uint64_t a_bits = 0, b_bits = 0;
  uint32_t width = 0;
};

// Where two tensors of equal dtype and size (checked: a bug otherwise) first differ; nullopt
// when they are bit-identical.
std::optional<TensorDifference> FirstTensorDifference(const TensorRef& a, const TensorRef& b);

// nullopt when every tensor is bit-identical; kMismatch when the catalogs differ.
Result<std::optional<TensorDifference>> FirstDifference(const Checkpoint& a, const Checkpoint& b);

// "[i, j, k]" coordinates of a flat row-major index.
std::string ElementCoordinates(const std::vector<uint64_t>& shape, uint64_t element);

}  // namespace dcr
