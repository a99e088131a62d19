// Codec tests, part 2: payload round trips. PayloadBuilder -> DecodePayload -> ApplySegment on a
// copy of the base gives exactly the new bits, for every dtype, density, value kind, special
// bit pattern and segment layout; encoding is deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/diff.h"
#include "codec/location_coding.h"
#include "codec/payload_codec.h"
#include "codec/section_coding.h"
#include "codec/span_test_support.h"

namespace dcr {
namespace {

// ---------------------------------------------------------------------------------------------
// Helpers

uint64_t LoadElem(const std::vector<uint8_t>& v, size_t i, uint32_t w) {
  uint64_t x = 0;
  std::memcpy(&x, v.data() + i * w, w);
  return x;
}
void StoreElem(std::vector<uint8_t>& v, size_t i, uint32_t w, uint64_t x) { std::memcpy(v.data() + i * w, &x, w); }

// Bit patterns whose float values are special; changes between any two of them must be seen.
std::vector<uint64_t> SpecialPatterns(DType t) {
  switch (t) {
    case DType::kBF16:
      return {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7fc1, 0x7f81, 0xffff, 0x0001, 0x807f, 0x3f80};
    case DType::kF16:
      return {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00, 0x7e01, 0x7c01, 0xffff, 0x0001, 0x83ff, 0x3c00};
    case DType::kF32:
      return {0x00000000, 0x80000000, 0x7f800000, 0xff800000, 0x7fc00000, 0x7fc00001,
              0x7f800001, 0xffffffff, 0x00000001, 0x807fffff, 0x3f800000};
    case DType::kF64:
      return {0x0000000000000000ull, 0x8000000000000000ull, 0x7ff0000000000000ull, 0xfff0000000000000ull,
              0x7ff8000000000000ull, 0x7ff8000000000001ull, 0x7ff0000000000001ull, 0xffffffffffffffffull,
              0x0000000000000001ull, 0x800fffffffffffffull, 0x3ff0000000000000ull};
    case DType::kF8E4M3:
      return {0x00, 0x80, 0x7f, 0xff, 0x01, 0x81, 0x38, 0x7e};
    case DType::kF8E5M2:
      return {0x00, 0x80, 0x7c, 0xfc, 0x7e, 0x7d, 0x01, 0x3c};
    case DType::kBool:
      return {0, 1};
    default: {
      uint32_t w = DTypeWidth(t);
      uint64_t all = w == 8 ? ~0ull : ((1ull << (8 * w)) - 1);
      uint64_t top = 1ull << (8 * w - 1);
      return {0, 1, all, top, top - 1, all - 1};
    }
  }
}

const std::vector<DType>& TestedDTypes() {
  static const std::vector<DType> v = {DType::kBF16, DType::kF16, DType::kF32,  DType::kF64,
                                       DType::kF8E4M3, DType::kF8E5M2, DType::kI8, DType::kU8,
                                       DType::kI16, DType::kI32, DType::kI64, DType::kBool};
  return v;
}

// Random element bits for `t`, with some special patterns mixed in (BOOL stays 0/1).
uint64_t RandomBits(DType t, std::mt19937_64& rng) {
  uint32_t w = DTypeWidth(t);
  if (t == DType::kBool) return rng() & 1;
  if (rng() % 10 == 0) {
    auto sp = SpecialPatterns(t);
    return sp[rng() % sp.size()];
  }
  uint64_t mask = w == 8 ? ~0ull : ((1ull << (8 * w)) - 1);
  return rng() & mask;
}

// A new value for an element that differs from `old` in its bits: a low-bit flip (as a one-ulp
// step gives), a special pattern, or random bits.
uint64_t ChangedBits(DType t, uint64_t old, std::mt19937_64& rng) {
  uint32_t w = DTypeWidth(t);
  uint64_t mask = w == 8 ? ~0ull : ((1ull << (8 * w)) - 1);
  if (t == DType::kBool) return old ^ 1;
  for (;;) {
    uint64_t v;
    switch (rng() % 3) {
      case 0: v = old ^ ((1ull << (rng() % 3 + 1)) - 1); break;
      case 1: {
        auto sp = SpecialPatterns(t);
        v = sp[rng() % sp.size()];
        break;
      }
      default: v = rng(); break;
    }
    v &= mask;
    if (v != old) return v;
  }
}

struct CodecCase {
  DType dtype;
  ValueKind kind;
  uint64_t tensor_elems, start, count;
  std::vector<uint8_t> base, next;  // whole tensors
  std::vector<uint32_t> changed;    // positions relative to start, ascending
};

// Builds base/next tensors that differ inside [start, start+count) at a `density` fraction of
// positions (Bernoulli or clustered runs), and also outside it (which must stay untouched).
CodecCase MakeCase(DType t, ValueKind kind, uint64_t count, double density, bool runs, std::mt19937_64& rng) {
  CodecCase c;
  c.dtype = t;
  c.kind = kind;
  const uint32_t w = DTypeWidth(t);
  c.start = rng() % 100;
  c.count = count;
  c.tensor_elems = c.start + count + rng() % 100;
  c.base.resize(c.tensor_elems * w);
  for (uint64_t i = 0; i < c.tensor_elems; ++i) StoreElem(c.base, i, w, RandomBits(t, rng));
  c.next = c.base;
  std::vector<bool> pick(count, false);
  if (density >= 1.0) {
    std::fill(pick.begin(), pick.end(), true);
  } else if (density > 0) {
    std::bernoulli_distribution coin(density);
    if (!runs) {
      for (uint64_t i = 0; i < count; ++i) pick[i] = coin(rng);
    } else {
      // Runs of mean length 40 whose starts are spaced to hit the density.
      std::geometric_distribution<uint64_t> len(1.0 / 40);
      std::bernoulli_distribution start(density / 40);
      for (uint64_t i = 0; i < count; ++i) {
        if (!start(rng)) continue;
        uint64_t l = 1 + len(rng);
        for (uint64_t k = i; k < std::min(count, i + l); ++k) pick[k] = true;
        i += l;
      }
    }
  }
  for (uint64_t i = 0; i < count; ++i) {
    if (!pick[i]) continue;
    uint64_t idx = c.start + i;
    StoreElem(c.next, idx, w, ChangedBits(t, LoadElem(c.base, idx, w), rng));
    c.changed.push_back(static_cast<uint32_t>(i));
  }
  // Changes outside the segment: not encoded, so ApplySegment must leave them at base.
  for (uint64_t i = 0; i < c.start; ++i) StoreElem(c.next, i, w, ChangedBits(t, LoadElem(c.base, i, w), rng));
  return c;
}

// The tensor an exact apply of the segment must give: next inside it, base outside.
std::vector<uint8_t> Expected(const CodecCase& c) {
  const uint32_t w = DTypeWidth(c.dtype);
  std::vector<uint8_t> e = c.base;
  std::memcpy(e.data() + c.start * w, c.next.data() + c.start * w, c.count * w);
  return e;
}

const PayloadIdentity kIdentity{0x1122334455667788ull, 7, 42};

SegmentSpec SpecFor(const CodecCase& c, uint32_t tensor_index = 3) {
  return SegmentSpec{tensor_index, c.dtype, c.kind, c.start, c.count};
}

std::span<const uint8_t> SegmentBytes(const std::vector<uint8_t>& tensor, const CodecCase& c) {
  const uint32_t w = DTypeWidth(c.dtype);
  return std::span<const uint8_t>(tensor).subspan(c.start * w, c.count * w);
}

// Checks one decoded segment against its case: spec, positions, values, and that applying it to
// a copy of the base gives exactly the expected tensor.
void ExpectSegmentMatches(const DecodedSegment& seg, const CodecCase& c, uint32_t tensor_index, const std::string& what) {
  const uint32_t w = DTypeWidth(c.dtype);
  EXPECT_EQ(seg.spec.tensor_index, tensor_index) << what;
  EXPECT_EQ(seg.spec.dtype, c.dtype) << what;
  EXPECT_EQ(seg.spec.kind, c.kind) << what;
  EXPECT_EQ(seg.spec.start, c.start) << what;
  EXPECT_EQ(seg.spec.count, c.count) << what;
  ASSERT_EQ(AsVector(seg.changes.positions), c.changed) << what;
  ASSERT_EQ(seg.changes.width, w) << what;
  ASSERT_EQ(seg.changes.values.size(), c.changed.size() * w) << what;
  // Values are XOR masks or new bits, as the kind says.
  for (size_t k = 0; k < c.changed.size(); k += 1 + k / 4) {
    uint64_t idx = c.start + c.changed[k];
    uint64_t v = 0;
    std::memcpy(&v, seg.changes.values.data() + k * w, w);
    uint64_t want = c.kind == ValueKind::kXor ? (LoadElem(c.base, idx, w) ^ LoadElem(c.next, idx, w))
                                              : LoadElem(c.next, idx, w);
    ASSERT_EQ(v, want) << what << " change " << k;
  }
  std::vector<uint8_t> tensor = c.base;
  ASSERT_TRUE(ApplySegment(seg, tensor).ok()) << what;
  const std::vector<uint8_t> want = Expected(c);
  ASSERT_EQ(tensor.size(), want.size());
  ASSERT_EQ(std::memcmp(tensor.data(), want.data(), want.size()), 0) << what;
}

void ExpectRoundTrip(const CodecCase& c, const EncodeOptions& opt, const std::string& what) {
  PayloadBuilder builder(opt);
  const uint64_t changed = builder.AddDiff(SpecFor(c), SegmentBytes(c.base, c), SegmentBytes(c.next, c));
  ASSERT_EQ(changed, c.changed.size()) << what;
  if (changed == 0) {
    EXPECT_EQ(builder.segments(), 0u) << what;  // an unchanged segment is left out
    return;
  }
  EXPECT_EQ(builder.segments(), 1u);
  EXPECT_EQ(builder.changed(), changed);
  std::vector<uint8_t> payload;
  builder.Finish(kIdentity, &payload);
  EXPECT_EQ(builder.segments(), 0u);  // Finish resets the builder
  EXPECT_EQ(builder.changed(), 0u);
  // Determinism: a reused builder, a fresh one, and appending after other bytes give the same payload.
  {
    std::vector<uint8_t> again;
    builder.AddDiff(SpecFor(c), SegmentBytes(c.base, c), SegmentBytes(c.next, c));
    builder.Finish(kIdentity, &again);
    EXPECT_EQ(again, payload) << what;
    PayloadBuilder fresh(opt);
    std::vector<uint8_t> appended = {1, 2, 3};
    fresh.AddDiff(SpecFor(c), SegmentBytes(c.base, c), SegmentBytes(c.next, c));
    fresh.Finish(kIdentity, &appended);
    EXPECT_TRUE(std::equal(appended.begin() + 3, appended.end(), payload.begin(), payload.end())) << what;
  }
  DecodedPayload d;
  Status s = DecodePayload(payload, &d);
  ASSERT_TRUE(s.ok()) << what << ": " << s.ToString();
  EXPECT_EQ(d.identity, kIdentity);
  EXPECT_EQ(d.mode, CodecMode::kPlain);
  ASSERT_EQ(d.segments.size(), 1u);
  EXPECT_EQ(d.changed(), changed);
  ExpectSegmentMatches(d.segments[0], c, 3, what);
}

TEST(PayloadRoundTrip, EveryDTypeDensityAndKindGivesExactlyTheNewBits) {
  std::mt19937_64 rng(10);
  const int block_logs[] = {3, 6, 9, 12, 16};
  for (DType t : TestedDTypes()) {
    for (double density : {0.0, 0.0001, 0.01, 0.3, 1.0}) {
      for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
        for (int rep = 0; rep < 3; ++rep) {
          // Sparse densities need long segments to see any change at all.
          uint64_t count = density < 0.001 ? 100000 + rng() % 150000 : 1 + rng() % 40000;
          if (rep == 0 && density >= 0.3) count = 1 + rng() % 70;  // tiny segments too
          const bool runs = rep == 2;
          CodecCase c = MakeCase(t, kind, count, density, runs, rng);
          EncodeOptions opt;
          opt.block_log2 = block_logs[rng() % 5];
          const std::string what = std::string(DTypeName(t)) + " density " + std::to_string(density) +
                                   (kind == ValueKind::kXor ? " xor" : " overwrite") + " count " +
                                   std::to_string(count) + " block 2^" + std::to_string(opt.block_log2) +
                                   (runs ? " runs" : "");
          ExpectRoundTrip(c, opt, what);
          if (density == 0.0) {
            EXPECT_TRUE(c.changed.empty());
          }
          if (density == 1.0) {
            EXPECT_EQ(c.changed.size(), count);
          }
        }
      }
    }
  }
}

// Every ordered pair of special bit patterns (NaN payloads, signed zeros, infinities,
// subnormals, extremes): a change is seen exactly when the bits differ.
TEST(PayloadRoundTrip, ChangesBetweenSpecialBitPatternsAreDetectedAndRestoredExactly) {
  for (DType t : TestedDTypes()) {
    const uint32_t w = DTypeWidth(t);
    const auto sp = SpecialPatterns(t);
    const size_t m = sp.size();
    for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
      CodecCase c;
      c.dtype = t;
      c.kind = kind;
      c.start = 0;
      c.count = c.tensor_elems = m * m;
      c.base.resize(m * m * w);
      c.next.resize(m * m * w);
      for (size_t i = 0; i < m; ++i)
        for (size_t j = 0; j < m; ++j) {
          StoreElem(c.base, i * m + j, w, sp[i]);
          StoreElem(c.next, i * m + j, w, sp[j]);
          if (i != j) c.changed.push_back(static_cast<uint32_t>(i * m + j));
        }
      ExpectRoundTrip(c, EncodeOptions{}, std::string(DTypeName(t)) + " specials");
    }
  }
}

TEST(PayloadRoundTrip, OneElementSegmentAtTheEndOfATensorWorks) {
  for (DType t : TestedDTypes()) {
    const uint32_t w = DTypeWidth(t);
    CodecCase c;
    c.dtype = t;
    c.kind = ValueKind::kXor;
    c.start = 5;
    c.count = 1;
    c.tensor_elems = 6;  // the segment is the tensor's last element
    c.base.assign(6 * w, 0);
    c.next = c.base;
    StoreElem(c.next, 5, w, 1);
    c.changed = {0};
    ExpectRoundTrip(c, EncodeOptions{}, std::string(DTypeName(t)) + " single");
  }
}

// Segments of many tensors (every dtype, both kinds, one tensor split in two, unchanged
// segments left out) share one payload, and each decodes and applies exactly.
// Also: one DecodedPayload reused for payloads of different segment counts and sizes (its
// storage grows and is handed out again) decodes each as a fresh one does.
TEST(PayloadRoundTrip, SegmentsOfManyTensorsShareOnePayloadAndEachAppliesExactly) {
  std::mt19937_64 rng(15);
  DecodedPayload reused;
  for (int rep = 0; rep < 6; ++rep) {
    std::vector<CodecCase> cases;
    std::vector<uint32_t> tensors;
    uint32_t index = 0;
    for (DType t : TestedDTypes()) {
      ValueKind kind = (rng() % 2) ? ValueKind::kXor : ValueKind::kOverwrite;
      double density = std::array<double, 5>{0.0, 0.001, 0.02, 0.4, 1.0}[rng() % 5];
      cases.push_back(MakeCase(t, kind, 1 + rng() % 3000, density, rng() % 2, rng));
      tensors.push_back(index);
      index += 1 + static_cast<uint32_t>(rng() % 3);
    }
    // One more tensor cut into two segments of the same payload: [start, mid) and [mid, end).
    CodecCase whole = MakeCase(DType::kBF16, ValueKind::kXor, 4000, 0.05, false, rng);
    CodecCase a = whole, b = whole;
    a.count = 1500;
    b.start = whole.start + 1500;
    b.count = whole.count - 1500;
    a.changed.clear();
    b.changed.clear();
    for (uint32_t p : whole.changed) (p < 1500 ? a.changed : b.changed).push_back(p < 1500 ? p : p - 1500);
    // Each half's expected tensor keeps the other half at base.
    cases.push_back(a);
    tensors.push_back(index);
    cases.push_back(b);
    tensors.push_back(index);

    EncodeOptions opt;
    opt.block_log2 = 3 + static_cast<int>(rng() % 14);
    PayloadBuilder builder(opt);
    std::vector<size_t> added;
    uint64_t total = 0;
    for (size_t i = 0; i < cases.size(); ++i) {
      const CodecCase& c = cases[i];
      uint64_t n = builder.AddDiff(SpecFor(c, tensors[i]), SegmentBytes(c.base, c), SegmentBytes(c.next, c));
      ASSERT_EQ(n, c.changed.size());
      if (n > 0) added.push_back(i);
      total += n;
    }
    ASSERT_EQ(builder.segments(), added.size());
    ASSERT_EQ(builder.changed(), total);
    ASSERT_GT(added.size(), 1u);
    std::vector<uint8_t> payload;
    builder.Finish(kIdentity, &payload);
    DecodedPayload d;
    Status s = DecodePayload(payload, &d);
    ASSERT_TRUE(s.ok()) << s.ToString();
    ASSERT_EQ(d.segments.size(), added.size());
    EXPECT_EQ(d.changed(), total);
    for (size_t k = 0; k < added.size(); ++k)
      ExpectSegmentMatches(d.segments[k], cases[added[k]], tensors[added[k]], "rep " + std::to_string(rep) + " segment " + std::to_string(k));
    ASSERT_TRUE(DecodePayload(payload, &reused).ok());
    ASSERT_EQ(reused.segments.size(), added.size());
    for (size_t k = 0; k < added.size(); ++k)
      ExpectSegmentMatches(reused.segments[k], cases[added[k]], tensors[added[k]],
                           "reused, rep " + std::to_string(rep) + " segment " + std::to_string(k));
    // Both halves applied to one copy give the whole tensor's next bits inside [start, end).
    std::vector<uint8_t> t = whole.base;
    for (size_t k = 0; k < added.size(); ++k)
      if (tensors[added[k]] == index) {
        ASSERT_TRUE(ApplySegment(d.segments[k], t).ok());
      }
    EXPECT_EQ(t, Expected(whole));
  }
}

// Changes kept by the caller until Finish (read where they are) give the bytes of copied ones,
// in plain and context mode, one and two threads, with kept, copied and AddDiff segments mixed
// in one payload; the kept change sets are left as they were. The same with the values' counts
// taken ahead (AddDiff's own, a tally handed over with AddValueTally, both), whether they cover
// every value (the value coder counts nothing) or some (it counts them all).
TEST(PayloadBuilder, KeptChangesGiveTheBytesOfCopiedOnes) {
  std::mt19937_64 rng(31);
  std::vector<CodecCase> cases;
  for (int i = 0; i < 7; ++i)
    cases.push_back(MakeCase(i % 3 == 0 ? DType::kF32 : DType::kBF16, ValueKind::kXor, 500 + rng() % 20000,
                             std::array<double, 3>{0.005, 0.05, 0.3}[i % 3], i % 2 == 1, rng));
  // The changes in each value form: as their kind (plain-only payloads), as steps (context).
  std::vector<ChangeSet> by_form[2];
  for (ValueForm form : {ValueForm::kAsKind, ValueForm::kSteps}) {
    std::vector<ChangeSet>& sets = by_form[static_cast<int>(form)];
    sets.resize(cases.size());
    for (size_t i = 0; i < cases.size(); ++i)
      DiffElements(SegmentBytes(cases[i].base, cases[i]), SegmentBytes(cases[i].next, cases[i]),
                   DTypeWidth(cases[i].dtype), cases[i].kind, &sets[i], {}, form);
  }
  const std::vector<ChangeSet> before[2] = {by_form[0], by_form[1]};
  // how[i]: 0 AddDiff, 1 copied, 2 kept, 3 kept with its values counted into a handed tally.
  auto encode = [&](EncodeOptions::Context context, int threads, const std::vector<int>& how) {
    EncodeOptions opt;
    opt.context = context;
    PayloadBuilder b(opt);
    const std::vector<ChangeSet>& sets = by_form[static_cast<int>(opt.value_form())];
    ValueTally handed;
    if (std::count(how.begin(), how.end(), 3) > 0) b.AddValueTally(&handed);
    for (size_t i = 0; i < cases.size(); ++i) {
      const CodecCase& c = cases[i];
      const SegmentSpec spec = SpecFor(c, static_cast<uint32_t>(i));
      if (how[i] == 3) handed.Add(sets[i].values, sets[i].width);
      if (how[i] == 0)
        b.AddDiff(spec, SegmentBytes(c.base, c), SegmentBytes(c.next, c));
      else
        b.AddChanges(spec, sets[i], SegmentBytes(c.base, c), {},
                     how[i] == 1 ? PayloadBuilder::Changes::kCopied : PayloadBuilder::Changes::kKeptUntilFinish);
    }
    std::vector<uint8_t> out;
    b.Finish(kIdentity, &out, threads);
    return out;
  };
  for (auto context : {EncodeOptions::Context::kNever, EncodeOptions::Context::kAlways})
    for (int threads : {1, 2}) {
      const std::string what = std::string(context == EncodeOptions::Context::kNever ? "plain" : "context") + ", " +
                               std::to_string(threads) + " thread(s)";
      const std::vector<uint8_t> copied = encode(context, threads, std::vector<int>(cases.size(), 1));
      EXPECT_EQ(encode(context, threads, std::vector<int>(cases.size(), 2)), copied) << what << ": all kept";
      EXPECT_EQ(encode(context, threads, {2, 0, 1, 2, 2, 1, 0}), copied) << what << ": mixed";
      EXPECT_EQ(encode(context, threads, {0, 2, 2, 1, 0, 2, 1}), copied) << what << ": mixed";
      EXPECT_EQ(encode(context, threads, std::vector<int>(cases.size(), 0)), copied) << what << ": all diffed";
      EXPECT_EQ(encode(context, threads, std::vector<int>(cases.size(), 3)), copied) << what << ": all tallied";
      EXPECT_EQ(encode(context, threads, {3, 0, 3, 3, 0, 0, 3}), copied) << what << ": tallied and diffed";
      EXPECT_EQ(encode(context, threads, {3, 0, 2, 3, 0, 1, 3}), copied) << what << ": some tallied";
      DecodedPayload d;
      ASSERT_TRUE(DecodePayload(copied, &d, [&](const SegmentSpec& s) -> Result<std::span<const uint8_t>> {
                    return SegmentBytes(cases[s.tensor_index].base, cases[s.tensor_index]);
                  }).ok()) << what;
      for (size_t i = 0; i < cases.size(); ++i) ExpectSegmentMatches(d.segments[i], cases[i], static_cast<uint32_t>(i), what);
    }
  for (int form = 0; form < 2; ++form) {
    for (size_t i = 0; i < cases.size(); ++i) {
      EXPECT_EQ(by_form[form][i].positions, before[form][i].positions) << "segment " << i;
      EXPECT_EQ(by_form[form][i].values, before[form][i].values) << "segment " << i;
    }
  }
}

TEST(PayloadBuilder, AddDiffWithoutChangesAddsNoSegment) {
  std::vector<uint8_t> same(64, 7);
  PayloadBuilder builder;
  EXPECT_EQ(builder.AddDiff({0, DType::kF32, ValueKind::kXor, 0, 16}, same, same), 0u);
  EXPECT_EQ(builder.segments(), 0u);
  EXPECT_EQ(builder.changed(), 0u);
}

TEST(PayloadBuilderDeathTest, SegmentsOutOfOrderAreAnInvariantViolation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint8_t> base(16, 0), next(16, 1);
  auto overlapping = [&] {
    PayloadBuilder b;
    b.AddDiff({2, DType::kU8, ValueKind::kXor, 100, 16}, base, next);
    b.AddDiff({2, DType::kU8, ValueKind::kXor, 110, 16}, base, next);  // overlaps [100, 116)
  };
  auto backwards = [&] {
    PayloadBuilder b;
    b.AddDiff({2, DType::kU8, ValueKind::kXor, 0, 16}, base, next);
    b.AddDiff({1, DType::kU8, ValueKind::kXor, 0, 16}, base, next);  // an earlier tensor
  };
  EXPECT_DEATH(overlapping(), "check failed");
  EXPECT_DEATH(backwards(), "check failed");
}

// CountFitAhead: a segment given to AddChanges must have its counts handed over
// (AddFitCounts); Finish refuses to fit bands to counts that miss one. (A death test: not in
// codec_context_test, which runs under qemu-user, where the death test's re-exec fails.)
TEST(PayloadBuilderDeathTest, ASegmentNotCountedAheadIsAnInvariantViolation) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<uint8_t> base(2000), next;
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<uint8_t>(i * 37 + 11);
  next = base;
  for (size_t i = 0; i < next.size(); i += 14) next[i] ^= 1;
  const SegmentSpec s{1, DType::kBF16, ValueKind::kXor, 0, 1000};
  EncodeOptions opt;
  opt.context = EncodeOptions::Context::kAlways;
  // Returns the payload's size; without the counts, Finish dies.
  auto encode = [&](bool hand_over_counts) {
    PayloadBuilder b(opt);
    b.CountFitAhead(s.count);
    ChangeSet cs;
    DiffElements(base, next, 2, s.kind, &cs, {}, opt.value_form());
    b.AddChanges(s, cs, base);
    if (hand_over_counts) {
      FitCounter counter(b.fit_stride());
      counter.Count({s.dtype, base}, cs.positions);
      FitCounts counts;
      counter.AddTo(&counts);
      b.AddFitCounts(counts);
    }
    std::vector<uint8_t> out;
    b.Finish({1, 0, 0}, &out);
    return out.size();
  };
  EXPECT_GT(encode(true), 0u);
  EXPECT_DEATH(encode(false), "check failed");
}

// The band fit's counts from the changes' old bits, handed over run by run, then the sampled
// elements, equal the counts gathered from the segment at the changed positions; for every
// element width, with runs cut anywhere. The sampled elements counted in ranges that start at
// multiples of the stride equal those of the whole.
TEST(FitCounter, CountingFromOldBitsGivesTheCountsOfCountingAtPositions) {
  std::mt19937_64 rng(23);
  for (DType t : TestedDTypes()) {
    const uint32_t w = DTypeWidth(t);
    for (uint64_t stride : {8u, 64u}) {
      const uint64_t n = 5000 + rng() % 5000;
      std::vector<uint8_t> base(n * w);
      for (uint64_t i = 0; i < n; ++i) StoreElem(base, i, w, RandomBits(t, rng));
      std::vector<uint32_t> positions;
      std::vector<uint8_t> old_bits;
      for (uint64_t i = 0; i < n; ++i)
        if (rng() % 7 == 0) {
          positions.push_back(static_cast<uint32_t>(i));
          old_bits.insert(old_bits.end(), base.begin() + i * w, base.begin() + (i + 1) * w);
        }
      FitCounter at_positions(stride), from_old_bits(stride);
      at_positions.Count({t, base}, positions);
      for (size_t k = 0; k < positions.size();) {  // runs of random lengths, as the diff hands them over
        const size_t run = std::min<size_t>(positions.size() - k, 1 + rng() % 300);
        from_old_bits.CountChangedOldBits(t, std::span<const uint8_t>(old_bits).subspan(k * w, run * w));
        k += run;
      }
      from_old_bits.CountPopulation({t, base});
      const std::string what = std::string(DTypeName(t)) + ", stride " + std::to_string(stride);
      // The sampled elements counted range by range, each range starting at a multiple of the
      // stride (as AddDiff and the two-thread diff count a large segment's).
      FitCounter by_ranges(stride);
      for (uint64_t first = 0; first < n;) {
        const uint64_t len = std::min<uint64_t>(n - first, stride * (1 + rng() % 40));
        by_ranges.CountPopulation({t, std::span<const uint8_t>(base).subspan(first * w, len * w)});
        first += len;
      }
      FitCounts a, b, ranged;
      at_positions.AddTo(&a);
      from_old_bits.AddTo(&b);
      by_ranges.AddTo(&ranged);
      EXPECT_EQ(ranged.population, b.population) << what;
      EXPECT_EQ(ranged.elements, n) << what;
      EXPECT_EQ(a.population, b.population) << what;
      EXPECT_EQ(a.changes, b.changes) << what;
      EXPECT_EQ(a.elements, b.elements) << what;
      EXPECT_EQ(a.elements, n) << what;
      uint64_t changes = 0;
      for (uint64_t c : b.changes) changes += c;
      EXPECT_EQ(changes, positions.size()) << what;
    }
  }
}

TEST(PayloadRoundTrip, IdentityIsReadableWithoutDecoding) {
  std::vector<uint8_t> base(64, 0), next(64, 0);
  next[10] = 1;
  const PayloadIdentity id{0xfedcba9876543210ull, 0xabcdef01u, 0x12345678u};
  PayloadBuilder builder;
  ASSERT_EQ(builder.AddDiff({9, DType::kU8, ValueKind::kXor, 0, 64}, base, next), 1u);
  std::vector<uint8_t> payload;
  builder.Finish(id, &payload);
  auto got = PeekPayloadIdentity(payload);
  ASSERT_TRUE(got.ok());
  EXPECT_EQ(*got, id);
  EXPECT_EQ(PeekPayloadIdentity(std::span<const uint8_t>(payload.data(), 50)).status().code(), StatusCode::kCorrupt);
  auto bad = payload;
  bad[0] ^= 1;
  EXPECT_EQ(PeekPayloadIdentity(bad).status().code(), StatusCode::kCorrupt);
}

TEST(PayloadRoundTrip, ByteLayoutMatchesTheDocumentedHeaderAndSegmentTable) {
  std::vector<uint8_t> base(1000, 0), next(1000, 0);
  for (int i = 0; i < 1000; i += 100) next[i] = 0x80;
  const PayloadIdentity id{0x0102030405060708ull, 0x0a0b0c0du, 0x11121314u};
  PayloadBuilder builder;
  ASSERT_EQ(builder.AddDiff({300, DType::kU16, ValueKind::kOverwrite, 77, 500}, base, next), 10u);
  std::vector<uint8_t> p;
  builder.Finish(id, &p);
  EXPECT_EQ(LoadLe(p.data(), 4), kPayloadMagic);
  EXPECT_EQ(LoadLe(p.data() + 4, 2), 1u);
  EXPECT_EQ(p[6], 0);  // plain mode
  EXPECT_EQ(p[7], kDefaultLocationBlockLog2);
  EXPECT_EQ(LoadLe(p.data() + 8, 8), 0x0102030405060708ull);
  EXPECT_EQ(LoadLe(p.data() + 16, 4), 0x0a0b0c0du);
  EXPECT_EQ(LoadLe(p.data() + 20, 4), 0x11121314u);
  EXPECT_EQ(LoadLe(p.data() + 24, 4), 1u);  // one segment
  const uint64_t table_len = LoadLe(p.data() + 28, 4);
  EXPECT_EQ(LoadLe(p.data() + 34, 2), 0u);
  EXPECT_EQ(LoadLe(p.data() + 36, 4), 0u);
  EXPECT_EQ(LoadLe(p.data() + 56, 8), 20u);  // value section decoded length = n * width
  EXPECT_EQ(kPayloadHeaderBytes + table_len + LoadLe(p.data() + 48, 8) + LoadLe(p.data() + 64, 8) + kPayloadTrailerBytes,
            p.size());
  // Segment table: dtype, kind, varint tensor 300 (0xac 0x02), start 77, count 500 (0xf4 0x03), n 10.
  const std::vector<uint8_t> table(p.begin() + kPayloadHeaderBytes, p.begin() + kPayloadHeaderBytes + static_cast<ptrdiff_t>(table_len));
  EXPECT_EQ(table, (std::vector<uint8_t>{DTypeCode(DType::kU16), 1, 0xac, 0x02, 77, 0xf4, 0x03, 10}));
}

TEST(ApplySegment, RefusesASegmentOutsideTheTensorAndLeavesItUnchanged) {
  std::vector<uint8_t> base(400, 0), next(400, 0);
  next[396] = 9;
  PayloadBuilder builder;
  ASSERT_EQ(builder.AddDiff({0, DType::kF32, ValueKind::kXor, 0, 100}, base, next), 1u);
  std::vector<uint8_t> p;
  builder.Finish(kIdentity, &p);
  DecodedPayload d;
  ASSERT_TRUE(DecodePayload(p, &d).ok());
  const DecodedSegment& seg = d.segments[0];
  EXPECT_TRUE(SegmentFits(seg, 400));
  EXPECT_FALSE(SegmentFits(seg, 396));
  EXPECT_FALSE(SegmentFits(seg, 401));  // not a whole number of elements
  std::vector<uint8_t> small(99 * 4, 0x5a);
  const std::vector<uint8_t> before = small;
  EXPECT_EQ(ApplySegment(seg, small).code(), StatusCode::kCorrupt);
  EXPECT_EQ(small, before);
  std::vector<uint8_t> ragged(401, 0x5a);
  const std::vector<uint8_t> ragged_before = ragged;
  EXPECT_EQ(ApplySegment(seg, ragged).code(), StatusCode::kCorrupt);
  EXPECT_EQ(ragged, ragged_before);
}

// ApplyPayload on one and on two threads (the cut inside a segment and between segments, every
// width, XOR and overwrite, dense changes and sparse ones, which the apply prefetches) writes
// exactly the new bits; a payload with one segment that does not fit its tensor is refused
// before anything is written, on either thread count.
TEST(ApplyPayload, TwoThreadsWriteTheBitsOfOneAndABadSegmentWritesNothing) {
  std::mt19937_64 rng(5);
  struct Tensor {
    DType dtype;
    uint64_t n;
    double density;
    ValueKind kind;
  };
  const std::vector<Tensor> layout = {{DType::kBF16, 30000, 0.3, ValueKind::kXor},
                                      {DType::kU8, 5000, 0.5, ValueKind::kOverwrite},
                                      {DType::kF32, 20000, 0.2, ValueKind::kXor},
                                      {DType::kI64, 3000, 0.4, ValueKind::kXor},
                                      // Fewer than one change per 64 bytes: the prefetching apply.
                                      {DType::kBF16, 200000, 0.004, ValueKind::kOverwrite},
                                      {DType::kU8, 50000, 0.01, ValueKind::kXor},
                                      {DType::kF32, 60000, 0.003, ValueKind::kOverwrite},
                                      {DType::kI64, 30000, 0.01, ValueKind::kOverwrite}};
  std::vector<std::vector<uint8_t>> base, next;
  PayloadBuilder builder;
  for (size_t t = 0; t < layout.size(); ++t) {
    const uint32_t w = DTypeWidth(layout[t].dtype);
    base.emplace_back(layout[t].n * w);
    for (auto& b : base.back()) b = static_cast<uint8_t>(rng());
    next.push_back(base.back());
    for (uint64_t i = 0; i < layout[t].n; ++i)
      if (std::uniform_real_distribution<double>(0, 1)(rng) < layout[t].density) next.back()[i * w] ^= 1 + rng() % 255;
    builder.AddDiff({static_cast<uint32_t>(t), layout[t].dtype, layout[t].kind, 0, layout[t].n}, base[t], next[t]);
  }
  ASSERT_GE(builder.changed(), 2 * kConcurrentApplyMinChanges);
  std::vector<uint8_t> p;
  builder.Finish(kIdentity, &p);
  DecodedPayload d;
  ASSERT_TRUE(DecodePayload(p, &d).ok());
  for (int threads : {1, 2}) {
    std::vector<std::vector<uint8_t>> work = base;
    ASSERT_TRUE(ApplyPayload(d, [&](uint32_t t) { return std::span<uint8_t>(work[t]); }, threads).ok());
    EXPECT_EQ(work, next) << threads << " threads";
    // The last segment's tensor one element short: refused, nothing written.
    work = base;
    work.back().resize(work.back().size() - 8);
    const std::vector<std::vector<uint8_t>> before = work;
    EXPECT_EQ(ApplyPayload(d, [&](uint32_t t) { return std::span<uint8_t>(work[t]); }, threads).code(), StatusCode::kCorrupt);
    EXPECT_EQ(work, before) << threads << " threads";
  }
}

TEST(SegmentFits, HandlesRangesNearTheLimitsWithoutOverflow) {
  DecodedSegment s;
  s.spec = {0, DType::kU64, ValueKind::kXor, 10, 5};
  EXPECT_TRUE(SegmentFits(s, 15 * 8));
  EXPECT_FALSE(SegmentFits(s, 14 * 8));
  s.spec.start = UINT64_MAX / 8;
  s.spec.count = 1;
  EXPECT_FALSE(SegmentFits(s, 15 * 8));
  s.spec.start = 3;
  s.spec.count = UINT64_MAX - 2;
  EXPECT_FALSE(SegmentFits(s, 15 * 8));
}

TEST(ForEachChange, ReportsIndexOldAndNewBitsWithoutModifyingTheTensor) {
  std::vector<uint8_t> base(8 * 10), next;
  for (size_t i = 0; i < base.size(); ++i) base[i] = static_cast<uint8_t>(i * 7);
  next = base;
  StoreElem(next, 3, 8, 0x7ff8000000000001ull);
  StoreElem(next, 9, 8, 0x8000000000000000ull);
  for (ValueKind kind : {ValueKind::kXor, ValueKind::kOverwrite}) {
    PayloadBuilder builder;
    ASSERT_EQ(builder.AddDiff({0, DType::kF64, kind, 10, 10}, base, next), 2u);
    std::vector<uint8_t> p;
    builder.Finish(kIdentity, &p);
    DecodedPayload d;
    ASSERT_TRUE(DecodePayload(p, &d).ok());
    // The segment sits at elements [10, 20) of a 20-element tensor.
    std::vector<uint8_t> tensor(8 * 10, 0);
    tensor.insert(tensor.end(), base.begin(), base.end());
    const std::vector<uint8_t> before = tensor;
    std::vector<std::array<uint64_t, 3>> seen;
    ForEachChange(d.segments[0], tensor, [&](uint64_t idx, uint64_t o, uint64_t n) { seen.push_back({idx, o, n}); });
    EXPECT_EQ(tensor, before);
    ASSERT_EQ(seen.size(), 2u);
    EXPECT_EQ(seen[0], (std::array<uint64_t, 3>{13, LoadElem(base, 3, 8), 0x7ff8000000000001ull}));
    EXPECT_EQ(seen[1], (std::array<uint64_t, 3>{19, LoadElem(base, 9, 8), 0x8000000000000000ull}));
  }
}

}  // namespace
}  // namespace dcr
