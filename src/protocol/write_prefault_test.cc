// The prefault policy (write_prefault.h): which segments are dense enough to prefault, and that
// `dcr apply` (ApplyDelta) prefaults exactly those, with the same bytes as without.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "base/mapped_file.h"
#include "format/checkpoint.h"
#include "protocol/delta_apply.h"
#include "protocol/delta_diff.h"
#include "protocol/delta_file.h"
#include "protocol/write_prefault.h"
#include "testing/tensor_set.h"
#include "testing/test_files.h"

namespace dcr {
namespace {

namespace fs = std::filesystem;
using test::TempDir;
using test::Tensors;

DecodedSegment Segment(uint32_t tensor, DType dtype, uint64_t start, uint64_t count, std::span<const uint32_t> positions) {
  DecodedSegment s;
  s.spec.tensor_index = tensor;
  s.spec.dtype = dtype;
  s.spec.start = start;
  s.spec.count = count;
  s.changes.width = DTypeWidth(dtype);
  s.changes.positions = positions;
  return s;
}

// One change per kPrefaultBytesPerChange bytes is the bound: at it a segment is taken, one
// change fewer and it is not; ranges are in bytes of the segment's own tensor.
TEST(WritePrefault, DenseWriteRangesTakesSegmentsWithAChangePerPage) {
  const std::vector<uint32_t> positions(64, 0);  // only their number matters here
  const auto first = [&](size_t n) { return std::span<const uint32_t>(positions).first(n); };
  DecodedPayload p;
  // BF16, 16 pages: 16 changes reach the bound, 15 do not.
  p.segments.push_back(Segment(0, DType::kBF16, 100, 16 * 2048, first(16)));
  p.segments.push_back(Segment(1, DType::kBF16, 0, 16 * 2048, first(15)));
  // F32, 8 pages (8 changes), and a segment of less than a page with one change.
  p.segments.push_back(Segment(2, DType::kF32, 1024, 8 * 1024, first(8)));
  p.segments.push_back(Segment(3, DType::kF64, 5, 3, first(1)));
  p.segments.push_back(Segment(4, DType::kBF16, 0, 4096, first(0)));
  const std::vector<WriteRange> r = DenseWriteRanges(p);
  ASSERT_EQ(r.size(), 3u);
  EXPECT_EQ(r[0].tensor, 0u);
  EXPECT_EQ(r[0].offset, 200u);
  EXPECT_EQ(r[0].length, 16u * 4096);
  EXPECT_EQ(r[1].tensor, 2u);
  EXPECT_EQ(r[1].offset, 4096u);
  EXPECT_EQ(r[1].length, 8u * 4096);
  EXPECT_EQ(r[2].tensor, 3u);
  EXPECT_EQ(r[2].offset, 40u);
  EXPECT_EQ(r[2].length, 24u);
}

Slot SlotAt(uint8_t* at, uint32_t rank, uint32_t local_tensor, DType dtype) {
  Slot s{};
  s.at = at;
  s.rank = rank;
  s.local_tensor = local_tensor;
  s.local_dtype = dtype;
  return s;
}

// Copies are grouped by local tensor, whatever their order; a group is prefaulted from its first
// written byte to its last when it holds a copy per kPrefaultBytesPerChange bytes of that span.
TEST(WritePrefault, PrefaultDenseSlotsTakesEachLocalTensorsSpanWhenDense) {
  std::vector<uint8_t> a(1 << 20), b(1 << 20), c(64);
  const std::vector<uint8_t> a0 = a, b0 = b, c0 = c;
  bool kernel_prefaults = PrefaultForWrite(std::span<uint8_t>(c));
  const std::vector<Slot> slots = {
      SlotAt(a.data() + 2 * 2048, 0, 0, DType::kBF16),  // rank 0 tensor 0: 3 copies over 8 KiB
      SlotAt(b.data(), 1, 0, DType::kBF16),             // rank 1 tensor 0: 2 copies over 200 KB
      SlotAt(a.data(), 0, 0, DType::kBF16),
      SlotAt(c.data() + 8, 0, 1, DType::kF32),  // rank 0 tensor 1: one copy, 4 bytes
      SlotAt(b.data() + 2 * 100000, 1, 0, DType::kBF16),
      SlotAt(a.data() + 2 * 4095, 0, 0, DType::kBF16),
  };
  EXPECT_EQ(PrefaultDenseSlots(slots), kernel_prefaults ? 8192u + 4u : 0u);
  EXPECT_EQ(PrefaultDenseSlots({}), 0u);
  EXPECT_TRUE(a == a0 && b == b0 && c == c0) << "prefaulting changed bytes";
}

// A delta whose "dense" tensor changes in ~3 % of its elements and whose "sparse" tensor in
// three: ApplyDelta prefaults the dense tensor's bytes only (the payload plan cuts it into
// segments of whole tensors here), and the target ends with the new bits with or without.
TEST(WritePrefault, ApplyDeltaPrefaultsTheDenseSegmentsAndWritesTheSameBits) {
  TempDir dir{"dcr_prefault_test_"};
  std::mt19937_64 rng(5);
  Tensors base;
  base.Add("dense.weight", DType::kBF16, {512, 1024}, rng);
  base.Add("sparse.weight", DType::kBF16, {256, 1024}, rng);
  Tensors next = base;
  std::vector<uint8_t>& dense = next.Bytes("dense.weight");
  for (size_t i = 0; i < dense.size(); i += 2)
    if (rng() % 100 < 3) dense[i] ^= static_cast<uint8_t>(1 + rng() % 7);
  std::vector<uint8_t>& sparse = next.Bytes("sparse.weight");
  for (size_t i : {size_t{10}, size_t{200000}, size_t{500000}}) sparse[i] ^= 1;
  const std::string base_path = dir / "base.safetensors", next_path = dir / "next.safetensors";
  ASSERT_TRUE(WriteSafetensors(base_path, base.Bind()).ok());
  ASSERT_TRUE(WriteSafetensors(next_path, next.Bind()).ok());
  const std::string delta_path = dir / "d.dcr";
  {
    auto b = Checkpoint::Open(base_path), n = Checkpoint::Open(next_path);
    ASSERT_TRUE(b.ok() && n.ok());
    auto s = DiffCheckpoints(*b, *n, delta_path, DiffOptions{});
    ASSERT_TRUE(s.ok()) << s.status().ToString();
  }
  auto delta = DeltaReader::Open(delta_path);
  ASSERT_TRUE(delta.ok()) << delta.status().ToString();
  const std::vector<uint8_t> want = test::ReadAll(next_path);
  bool kernel_prefaults = false;  // Linux >= 5.14
  {
    fs::copy_file(base_path, dir / "probe.bin");
    auto m = MappedFile::Open(dir / "probe.bin", MappedFile::Mode::kReadWrite);
    ASSERT_TRUE(m.ok());
    kernel_prefaults = PrefaultForWrite(m->mutable_bytes());
  }
  for (bool prefault : {true, false}) {
    const std::string target = dir / (prefault ? "with.safetensors" : "without.safetensors");
    fs::copy_file(base_path, target);
    {
      auto t = Checkpoint::Open(target, MappedFile::Mode::kReadWrite);
      ASSERT_TRUE(t.ok());
      ApplyOptions o;
      o.prefault_writes = prefault;
      auto st = ApplyDelta(*delta, *t, o);
      ASSERT_TRUE(st.ok()) << st.status().ToString();
      EXPECT_EQ(st->prefaulted_bytes, prefault && kernel_prefaults ? dense.size() : 0u);
    }
    EXPECT_EQ(test::ReadAll(target), want) << (prefault ? "with" : "without") << " prefaulting";
  }
}

}  // namespace
}  // namespace dcr
