// The loops over value symbols of value_symbols.h, compiled once per Highway target
// (foreach_target.h) for the target's scalar instructions (on x86-64 the AVX2 and AVX-512 targets
// have BMI1/BMI2: one-micro-op register-count shifts) and dispatched at run time.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/value_symbols.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <algorithm>
#include <cstring>

#include "codec/value_symbols.h"

HWY_BEFORE_NAMESPACE();
namespace dcr::value_symbols {
namespace HWY_NAMESPACE {
namespace {

// CountSymbols of value_symbols.h, for values of type U.
template <typename U>
void CountSymbolsT(const uint8_t* p, uint64_t n, uint64_t* small4, uint64_t* large, std::vector<uint8_t>* escaped) {
  auto count = [&](uint64_t i, uint64_t* small) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    if (v >= kEscape) [[unlikely]]
      escaped->insert(escaped->end(), p + i * sizeof(U), p + (i + 1) * sizeof(U));
    const uint64_t symbol = std::min<uint64_t>(v, kEscape);
    ++*(symbol < kSmallSymbols ? small + symbol : large + symbol);
  };
  uint64_t i = 0;
  for (; i + 4 <= n; i += 4)
    count(i, small4), count(i + 1, small4 + kSmallSymbols), count(i + 2, small4 + 2 * kSmallSymbols),
        count(i + 3, small4 + 3 * kSmallSymbols);
  for (; i < n; ++i) count(i, small4 + (i & 3) * kSmallSymbols);
}

// PutSymbols of value_symbols.h, for values of type U: three symbols per write.
template <typename U>
void PutSymbolsT(const uint8_t* p, uint64_t n, const HuffmanEncoder& code, BitWriter::Local& w) {
  auto symbol = [&](uint64_t i) {
    U v;
    std::memcpy(&v, p + i * sizeof(U), sizeof(U));
    return static_cast<uint32_t>(std::min<uint64_t>(v, kEscape));
  };
  uint64_t i = 0;
  for (; i + 3 <= n; i += 3) code.Put3(w, symbol(i), symbol(i + 1), symbol(i + 2));
  for (; i < n; ++i) code.Put(w, symbol(i));
}

// DecodeSymbols of value_symbols.h, for values of type U.
template <typename U>
Status DecodeSymbolsT(const HuffmanDecoder& code, BitReader& bits, std::span<const uint8_t> escapes, size_t* e, uint64_t n,
                      uint8_t* dst) {
  for (uint64_t i = 0; i < n; ++i, dst += sizeof(U)) {
    // Common codes, several per lookup (values of at least two bytes, where every symbol below
    // the escape is a valid value): four lookups of at most kFastBits bits each fit in one
    // refilled window, and each writes kMultiSymbols slots, of which the next step overwrites
    // the unused ones.
    // The loop reads a local copy of the reader's window (BitReader::Window), put back after it.
    if constexpr (sizeof(U) >= 2) {
      static_assert(4 * 10 <= 56, "four lookups per refill");
      const uint64_t* multi = code.multi_table();
      BitReader::Window window = bits.TakeWindow();
      while (n - i >= 4 * HuffmanDecoder::kMultiSymbols && window.Has()) {
        window.Refill();
        int k = 0;
        for (; k < 4; ++k) {
          const uint64_t m = HuffmanDecoder::PeekMulti(multi, window.acc);
          const int c = HuffmanDecoder::MultiCount(m);
          if (c == 0) break;
          for (int j = 0; j < HuffmanDecoder::kMultiSymbols; ++j) {
            const U v = static_cast<U>(HuffmanDecoder::MultiSymbol(m, j));
            std::memcpy(dst + j * sizeof(U), &v, sizeof(U));
          }
          window.Skip(HuffmanDecoder::MultiBits(m));
          dst += c * sizeof(U);
          i += static_cast<uint64_t>(c);
        }
        if (k < 4) break;  // a long code or an escape: one symbol the general way
      }
      bits.PutWindow(window);
      if (i == n) break;
    }
    uint32_t sym;
    if (bits.HasWindow()) {  // the common case: no refill branch, no per-symbol length check
      bits.RefillWindow();
      sym = code.GetInWindow(bits);
    } else {
      sym = code.Get(bits);
      if (bits.overrun()) return Corrupt("value symbols truncated or invalid");
    }
    if (sym < kEscape) [[likely]] {
      if (sizeof(U) == 1 && sym > 0xff) return Corrupt("value symbol wider than its 1-byte dtype");
      const U v = static_cast<U>(sym);
      std::memcpy(dst, &v, sizeof(U));
      continue;
    }
    if (bits.overrun()) return Corrupt("value symbols truncated or invalid");  // GetLong failed
    if (escapes.size() - *e < sizeof(U)) return Corrupt("value escapes exhausted");
    std::memcpy(dst, escapes.data() + *e, sizeof(U));
    *e += sizeof(U);
    if (LoadValue(dst, sizeof(U)) < kEscape) return Corrupt("escaped value below the escape threshold");
  }
  // GetLong signals an invalid code only through the overrun flag, with symbol 0.
  if (bits.overrun()) return Corrupt("value symbols truncated or invalid");
  return Status::Ok();
}

}  // namespace

void CountSymbolsImpl(const uint8_t* p, uint64_t n, uint32_t width, uint64_t* small4, uint64_t* large,
                      std::vector<uint8_t>* escaped) {
  switch (width) {
    case 1: return CountSymbolsT<uint8_t>(p, n, small4, large, escaped);
    case 2: return CountSymbolsT<uint16_t>(p, n, small4, large, escaped);
    case 4: return CountSymbolsT<uint32_t>(p, n, small4, large, escaped);
    default: return CountSymbolsT<uint64_t>(p, n, small4, large, escaped);
  }
}

void PutSymbolsImpl(const uint8_t* p, uint64_t n, uint32_t width, const HuffmanEncoder& code, BitWriter::Local& w) {
  switch (width) {
    case 1: return PutSymbolsT<uint8_t>(p, n, code, w);
    case 2: return PutSymbolsT<uint16_t>(p, n, code, w);
    case 4: return PutSymbolsT<uint32_t>(p, n, code, w);
    default: return PutSymbolsT<uint64_t>(p, n, code, w);
  }
}

Status DecodeSymbolsImpl(const HuffmanDecoder& code, BitReader& bits, std::span<const uint8_t> escapes, size_t* e,
                         uint64_t n, uint32_t width, uint8_t* dst) {
  switch (width) {
    case 1: return DecodeSymbolsT<uint8_t>(code, bits, escapes, e, n, dst);
    case 2: return DecodeSymbolsT<uint16_t>(code, bits, escapes, e, n, dst);
    case 4: return DecodeSymbolsT<uint32_t>(code, bits, escapes, e, n, dst);
    default: return DecodeSymbolsT<uint64_t>(code, bits, escapes, e, n, dst);
  }
}

}  // namespace HWY_NAMESPACE
}  // namespace dcr::value_symbols
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace dcr::value_symbols {

HWY_EXPORT(CountSymbolsImpl);
HWY_EXPORT(PutSymbolsImpl);
HWY_EXPORT(DecodeSymbolsImpl);

void CountSymbols(const uint8_t* p, uint64_t n, uint32_t width, uint64_t* small4, uint64_t* large,
                  std::vector<uint8_t>* escaped) {
  HWY_DYNAMIC_DISPATCH(CountSymbolsImpl)(p, n, width, small4, large, escaped);
}

void PutSymbols(const uint8_t* p, uint64_t n, uint32_t width, const HuffmanEncoder& code, BitWriter::Local& w) {
  HWY_DYNAMIC_DISPATCH(PutSymbolsImpl)(p, n, width, code, w);
}

Status DecodeSymbols(const HuffmanDecoder& code, BitReader& bits, std::span<const uint8_t> escapes, size_t* e, uint64_t n,
                     uint32_t width, uint8_t* dst) {
  return HWY_DYNAMIC_DISPATCH(DecodeSymbolsImpl)(code, bits, escapes, e, n, width, dst);
}

}  // namespace dcr::value_symbols
#endif  // HWY_ONCE
