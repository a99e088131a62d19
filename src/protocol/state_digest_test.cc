// State digest tests: the additive element hash (incremental updates, order independence, what
// it depends on), its per-SIMD-target kernels against the scalar definition, and Digest128's hex
// form. Checkpoint-level digests are in protocol_test.cc. Built for aarch64 too
// (scripts/check-aarch64.sh).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "codec/simd_masks.h"
#include "protocol/state_digest.h"

namespace dcr {
namespace {

void Put(std::vector<uint8_t>& b, size_t i, uint32_t w, uint64_t v) { std::memcpy(b.data() + i * w, &v, w); }
uint64_t Get(const std::vector<uint8_t>& b, size_t i, uint32_t w) {
  uint64_t v = 0;
  std::memcpy(&v, b.data() + i * w, w);
  return v;
}

// What DigestChanges takes for the listed elements (element `first` + p of base and next): each
// one's old bits, its XOR mask and its new bits, w bytes each, back to back.
struct ChangeBytes {
  std::vector<uint8_t> old_bits, masks, new_bits;
};
ChangeBytes BytesOfChanges(const std::vector<uint8_t>& base, const std::vector<uint8_t>& next, uint32_t w,
                           size_t first, const std::vector<uint32_t>& positions) {
  ChangeBytes c;
  for (uint32_t p : positions)
    for (size_t j = 0; j < w; ++j) {
      const uint8_t o = base[(first + p) * w + j], x = next[(first + p) * w + j];
      c.old_bits.push_back(o), c.masks.push_back(o ^ x), c.new_bits.push_back(x);
    }
  return c;
}

TEST(StateDigest, IncrementalUpdateEqualsFullRecomputation) {
  std::mt19937_64 rng(3);
  for (uint32_t w : {1u, 2u, 4u, 8u}) {
    const size_t n = 5000;
    std::vector<uint8_t> bytes(n * w);
    for (auto& b : bytes) b = static_cast<uint8_t>(rng());
    const uint64_t key = TensorKey("layer.0.w");
    const Digest128 start = DigestElements(key, bytes, w, 0);
    Digest128 d = start;
    std::vector<uint8_t> next = bytes;
    for (int k = 0; k < 300; ++k) {
      size_t i = rng() % n;
      uint64_t old_bits = Get(next, i, w), new_bits = rng() & (w == 8 ? ~0ull : (1ull << (8 * w)) - 1);
      DigestUpdate(&d, key, i, old_bits, new_bits);
      Put(next, i, w, new_bits);
    }
    EXPECT_EQ(d, DigestElements(key, next, w, 0)) << "width " << w;
    // Updating every element back restores the start digest.
    for (size_t i = 0; i < n; ++i) DigestUpdate(&d, key, i, Get(next, i, w), Get(bytes, i, w));
    EXPECT_EQ(d, start);
  }
}

TEST(StateDigest, DigestChangesOfASubrangeEqualsTheDifferenceOfFullDigests) {
  std::mt19937_64 rng(5);
  for (uint32_t w : {1u, 2u, 4u, 8u}) {
    for (size_t changes : {size_t{0}, size_t{1}, size_t{2}, size_t{7}, size_t{300}}) {
      const size_t n = 4000, first = 1000;  // the changes lie in elements [first, n)
      std::vector<uint8_t> base(n * w), next;
      for (auto& b : base) b = static_cast<uint8_t>(rng());
      next = base;
      std::vector<uint32_t> positions;  // relative to `first`, ascending, unique
      for (size_t i = 0; i < n - first && positions.size() < changes; ++i)
        if (rng() % 8 == 0) positions.push_back(static_cast<uint32_t>(i));
      for (uint32_t p : positions) next[(first + p) * w] ^= static_cast<uint8_t>(1 + rng() % 255);
      const uint64_t key = TensorKey("t");
      Digest128 want = DigestElements(key, next, w, 0);
      want -= DigestElements(key, base, w, 0);
      const ChangeBytes c = BytesOfChanges(base, next, w, first, positions);
      EXPECT_EQ(DigestChanges(key, first, positions, c.old_bits.data(), c.masks.data(), true, w), want)
          << "width " << w << ", " << positions.size() << " changes";
      EXPECT_EQ(DigestChanges(key, first, positions, c.old_bits.data(), c.new_bits.data(), false, w), want)
          << "width " << w << ", " << positions.size() << " changes, new bits";
    }
  }
}

TEST(StateDigest, EverySimdTargetGivesTheScalarDefinition) {
  // DigestElements and DigestChanges run per SIMD target (eight hashes per step with AVX-512):
  // each must equal the element-by-element sums of ElementHash, tails and odd offsets included.
  std::mt19937_64 rng(6);
  ForEachSimdTarget([&](const std::string& target) {
    for (uint32_t w : {1u, 2u, 4u, 8u})
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{8}, size_t{9}, size_t{1003}}) {
        std::vector<uint8_t> base(n * w), next;
        for (auto& b : base) b = static_cast<uint8_t>(rng());
        next = base;
        std::vector<uint32_t> positions;
        for (size_t i = 0; i < n; ++i)
          if (rng() % 3 == 0) positions.push_back(static_cast<uint32_t>(i)), next[i * w + rng() % w] ^= 0x5a;
        const uint64_t key = TensorKey("t" + std::to_string(n)), first = 1 + rng() % 100000;
        Digest128 elements, changes;
        for (size_t i = 0; i < n; ++i) elements += ElementHash(key, first + i, Get(base, i, w));
        for (uint32_t p : positions) DigestUpdate(&changes, key, first + p, Get(base, p, w), Get(next, p, w));
        const std::string what = target + " width " + std::to_string(w) + " n " + std::to_string(n);
        EXPECT_EQ(DigestElements(key, base, w, first), elements) << what;
        const ChangeBytes c = BytesOfChanges(base, next, w, 0, positions);
        EXPECT_EQ(DigestChanges(key, first, positions, c.old_bits.data(), c.masks.data(), true, w), changes) << what;
        EXPECT_EQ(DigestChanges(key, first, positions, c.old_bits.data(), c.new_bits.data(), false, w), changes) << what;
      }
  });
}

TEST(StateDigest, SumDoesNotDependOnOrderOrGrouping) {
  std::mt19937_64 rng(4);
  const uint32_t w = 2;
  std::vector<uint8_t> bytes(2 * 10007);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  const uint64_t key = TensorKey("t");
  const Digest128 full = DigestElements(key, bytes, w, 0);
  // Random slices, summed in shuffled order.
  std::vector<std::pair<size_t, size_t>> slices;
  for (size_t s = 0; s < 10007;) {
    size_t len = std::min<size_t>(1 + rng() % 900, 10007 - s);
    slices.push_back({s, len});
    s += len;
  }
  std::shuffle(slices.begin(), slices.end(), rng);
  Digest128 sum;
  for (auto [s, len] : slices) sum += DigestElements(key, std::span<const uint8_t>(bytes).subspan(s * w, len * w), w, s);
  EXPECT_EQ(sum, full);
  // Element by element, backwards.
  Digest128 back;
  for (size_t i = 10007; i-- > 0;) back += ElementHash(key, i, Get(bytes, i, w));
  EXPECT_EQ(back, full);
}

TEST(StateDigest, EveryBitTheIndexAndTheTensorNameMatter) {
  std::vector<uint8_t> bytes(4 * 16, 0);
  Put(bytes, 3, 4, 0x7fc00001);
  const uint64_t key = TensorKey("w");
  const Digest128 d = DigestElements(key, bytes, 4, 0);
  for (size_t byte = 0; byte < bytes.size(); ++byte)
    for (int bit = 0; bit < 8; ++bit) {
      auto b = bytes;
      b[byte] ^= static_cast<uint8_t>(1u << bit);
      ASSERT_NE(DigestElements(key, b, 4, 0), d) << "byte " << byte << " bit " << bit;
    }
  // -0.0 vs +0.0.
  EXPECT_NE(ElementHash(key, 0, 0x80000000), ElementHash(key, 0, 0));
  // Swapping two different elements, shifting the first index, or renaming the tensor.
  auto swapped = bytes;
  Put(swapped, 3, 4, 0);
  Put(swapped, 4, 4, 0x7fc00001);
  EXPECT_NE(DigestElements(key, swapped, 4, 0), d);
  EXPECT_NE(DigestElements(key, bytes, 4, 1), d);
  EXPECT_NE(DigestElements(TensorKey("w2"), bytes, 4, 0), d);
  EXPECT_EQ(DigestElements(key, {}, 4, 0), Digest128{});
}

TEST(Digest128, HexIsHighThenLowAndRoundTrips) {
  Digest128 d{0x0123456789abcdefull, 0xfedcba9876543210ull};
  EXPECT_EQ(d.ToHex(), "fedcba98765432100123456789abcdef");
  Digest128 back;
  ASSERT_TRUE(Digest128::FromHex(d.ToHex(), &back));
  EXPECT_EQ(back, d);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 1000; ++i) {
    Digest128 r{rng(), rng()};
    ASSERT_EQ(r.ToHex().size(), 32u);
    ASSERT_TRUE(Digest128::FromHex(r.ToHex(), &back));
    ASSERT_EQ(back, r);
  }
  EXPECT_EQ(Digest128{}.ToHex(), std::string(32, '0'));
}

TEST(Digest128, FromHexRejectsWrongLengthsAndNonHexDigits) {
  Digest128 out{5, 6};
  const std::string good = "fedcba98765432100123456789abcdef";
  EXPECT_FALSE(Digest128::FromHex(good.substr(1), &out));
  EXPECT_FALSE(Digest128::FromHex(good + "0", &out));
  EXPECT_FALSE(Digest128::FromHex("", &out));
  EXPECT_FALSE(Digest128::FromHex("0x" + good.substr(2), &out));
  EXPECT_FALSE(Digest128::FromHex("g" + good.substr(1), &out));
  EXPECT_FALSE(Digest128::FromHex(" " + good.substr(1), &out));
  EXPECT_FALSE(Digest128::FromHex("FEDCBA98765432100123456789ABCDEF", &out));  // lowercase only
  EXPECT_EQ(out, (Digest128{5, 6}));                                          // untouched on failure
}

}  // namespace
}  // namespace dcr
