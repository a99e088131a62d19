// Test support: payloads written by hand, byte by byte as docs/format.md §2 lays them out, without
// the encoder, so that tests can craft what the encoder never writes. Test-only header.
#pragma once

#include <xxhash.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <functional>
#include <map>
#include <span>
#include <vector>

#include "codec/bit_stream.h"
#include "codec/payload_codec.h"
#include "codec/value_coding.h"

namespace dcr {
namespace {

// Header field offsets (docs/format.md §2).
enum : size_t {
  kMagic = 0, kVersion = 4, kMode = 6, kBlockLog2 = 7, kTransfer = 8, kProducer = 16, kSequence = 20,
  kSegments = 24, kTableLen = 28, kLocCodec = 32, kValCodec = 33, kValForm = 34, kReserved8 = 35, kReserved32 = 36,
  kLocRaw = 40, kLocStored = 48, kValRaw = 56, kValStored = 64,
};
static_assert(kValStored + 8 == kPayloadHeaderBytes);

// Recomputes the checksum in the last 8 bytes.
[[maybe_unused]] void Resign(std::vector<uint8_t>& p) { StoreLe(p.data() + p.size() - 8, XXH3_64bits(p.data(), p.size() - 8), 8); }

// One segment table entry; `dtype_code_override` (when not 0xff) replaces the dtype's code.
[[maybe_unused]] std::vector<uint8_t> Seg(DType dtype, uint8_t kind, uint64_t tensor, uint64_t start, uint64_t count, uint64_t n,
                                          uint8_t dtype_code_override = 0xff) {
  std::vector<uint8_t> t = {dtype_code_override == 0xff ? DTypeCode(dtype) : dtype_code_override, kind};
  PutVarint(t, tensor);
  PutVarint(t, start);
  PutVarint(t, count);
  PutVarint(t, n);
  return t;
}
[[maybe_unused]] std::vector<uint8_t> Seg(DType dtype, ValueKind kind, uint64_t tensor, uint64_t start, uint64_t count, uint64_t n) {
  return Seg(dtype, static_cast<uint8_t>(kind), tensor, start, count, n);
}

[[maybe_unused]] std::vector<uint8_t> Cat(std::vector<uint8_t> a, const std::vector<uint8_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// A payload of `mode` with the given table and raw sections (values as raw byte planes), transfer
// 5, producer 0, sequence 0, checksum included.
[[maybe_unused]] std::vector<uint8_t> CraftPayload(CodecMode mode, int block_log2, uint32_t segments,
                                                   const std::vector<uint8_t>& table, const std::vector<uint8_t>& loc,
                                                   const std::vector<uint8_t>& val) {
  std::vector<uint8_t> p(kPayloadHeaderBytes, 0);
  StoreLe(p.data() + kMagic, kPayloadMagic, 4);
  StoreLe(p.data() + kVersion, kPayloadFormatVersion, 2);
  p[kMode] = static_cast<uint8_t>(mode);
  p[kBlockLog2] = static_cast<uint8_t>(block_log2);
  StoreLe(p.data() + kTransfer, 5, 8);
  StoreLe(p.data() + kSegments, segments, 4);
  StoreLe(p.data() + kTableLen, table.size(), 4);
  p[kValCodec] = static_cast<uint8_t>(ValueCodec::kPlanesRaw);
  StoreLe(p.data() + kLocRaw, loc.size(), 8);
  StoreLe(p.data() + kLocStored, loc.size(), 8);
  StoreLe(p.data() + kValRaw, val.size(), 8);
  StoreLe(p.data() + kValStored, val.size(), 8);
  p.insert(p.end(), table.begin(), table.end());
  p.insert(p.end(), loc.begin(), loc.end());
  p.insert(p.end(), val.begin(), val.end());
  p.resize(p.size() + 8);
  Resign(p);
  return p;
}

// A copy of `p` with a header field replaced and the checksum recomputed.
[[maybe_unused]] std::vector<uint8_t> Edited(const std::vector<uint8_t>& p, size_t off, uint64_t value, int bytes) {
  std::vector<uint8_t> q = p;
  StoreLe(q.data() + off, value, bytes);
  Resign(q);
  return q;
}

[[maybe_unused]] uint64_t Field(const std::vector<uint8_t>& p, size_t off, int bytes) { return LoadLe(p.data() + off, bytes); }

[[maybe_unused]] StatusCode DecodeCode(std::span<const uint8_t> p) {
  DecodedPayload d;
  return DecodePayload(p, &d).code();
}

// `p` with its value section replaced by `val` under codec `codec`, re-signed.
[[maybe_unused]] std::vector<uint8_t> WithValueSection(const std::vector<uint8_t>& p, ValueCodec codec, const std::vector<uint8_t>& val) {
  const uint64_t table_len = Field(p, kTableLen, 4), loc_stored = Field(p, kLocStored, 8);
  const size_t val_at = kPayloadHeaderBytes + table_len + loc_stored;
  std::vector<uint8_t> q(p.begin(), p.begin() + static_cast<ptrdiff_t>(val_at));
  q.insert(q.end(), val.begin(), val.end());
  q.resize(q.size() + kPayloadTrailerBytes);
  q[kValCodec] = static_cast<uint8_t>(codec);
  StoreLe(q.data() + kValStored, val.size(), 8);
  Resign(q);
  return q;
}

// A Huffman value section written from the format description (docs/format.md §2.3, §2.5),
// independently of the library (codec 2, or codec 3 in streams): table entries varint(gap << 4 | length) with symbols ascending,
// varint escape length, escape bytes, then each symbol's canonical code most significant bit
// first in the LSB-first bit stream. Lengths may be anything (the point is to write bad ones).
struct HuffmanSection {
  std::map<uint32_t, int> lengths;  // symbol -> code length
  std::vector<uint8_t> escapes;
  std::vector<uint32_t> symbols;
  std::vector<uint32_t> escape_width;  // per symbol: its escape's bytes (0 if not escaped)
  int64_t m_override = -1;

  // Symbols and escapes of values (width bytes each), as the encoder forms them.
  void AddValues(std::span<const uint8_t> values, uint32_t width) {
    for (size_t i = 0; i < values.size() / width; ++i) {
      uint64_t v = 0;
      std::memcpy(&v, values.data() + i * width, width);
      escape_width.push_back(v >= 4095 ? width : 0);
      if (v >= 4095) {
        symbols.push_back(4095);
        escapes.insert(escapes.end(), values.begin() + static_cast<ptrdiff_t>(i * width),
                       values.begin() + static_cast<ptrdiff_t>((i + 1) * width));
      } else {
        symbols.push_back(static_cast<uint32_t>(v));
      }
    }
  }
  // Every used symbol gets the same length: the shortest that holds them all.
  void FlatLengths() {
    lengths.clear();
    for (uint32_t s : symbols) lengths[s] = 0;
    int len = 1;
    while ((size_t{1} << len) < lengths.size()) ++len;
    for (auto& [s, l] : lengths) l = len;
  }
  // The table: varint m, then m × varint (symbol gap << 4 | length).
  std::vector<uint8_t> TableBytes() const {
    std::vector<uint8_t> out;
    PutVarint(out, m_override >= 0 ? static_cast<uint64_t>(m_override) : lengths.size());
    int64_t prev = -1;
    for (auto [s, l] : lengths) {
      PutVarint(out, (static_cast<uint64_t>(static_cast<int64_t>(s) - prev - 1)) << 4 | static_cast<uint64_t>(l));
      prev = s;
    }
    return out;
  }
  // Symbols [from, to) as a bit stream, zero-padded to a byte, appended to `out`.
  void PutStream(size_t from, size_t to, std::vector<uint8_t>* out) const {
    // Canonical codes: by (length, symbol), each length's first code following on from the last.
    std::vector<std::pair<int, uint32_t>> order;
    for (auto [s, l] : lengths) order.push_back({l, s});
    std::sort(order.begin(), order.end());
    std::map<uint32_t, uint32_t> code;
    uint32_t c = 0;
    int prev_len = order.empty() ? 0 : order.front().first;
    for (auto [l, s] : order) {
      c <<= (l - prev_len);
      prev_len = l;
      code[s] = c++;
    }
    BitWriter w(*out);
    for (size_t i = from; i < to; ++i) {
      const uint32_t s = symbols[i];
      const int l = lengths.count(s) ? lengths.at(s) : 1;
      const uint32_t k = code.count(s) ? code.at(s) : 0;
      for (int b = l - 1; b >= 0; --b) w.Put((k >> b) & 1, 1);
    }
    w.Flush();
  }
  // Codec 2: table, escape length, escapes, one stream.
  std::vector<uint8_t> Bytes() const {
    std::vector<uint8_t> out = TableBytes();
    PutVarint(out, escapes.size());
    out.insert(out.end(), escapes.begin(), escapes.end());
    PutStream(0, symbols.size(), &out);
    return out;
  }
  // Codec 3's fields, for tests to edit before StreamsBytes writes them.
  struct Streams {
    uint64_t count = 0;                            // the stream count byte
    std::vector<uint64_t> escape_bytes, lengths;  // per stream; lengths of all but the last
    std::vector<std::vector<uint8_t>> escapes, bits;
  };
  // Codec 3 with `s` streams: stream i holds symbols [n i / s, n (i + 1) / s) (floor) and the
  // escapes of its values; `edit` may change any field before it is written.
  std::vector<uint8_t> StreamsBytes(size_t s, const std::function<void(Streams&)>& edit = {}) const {
    Streams st;
    st.count = s;
    const size_t n = symbols.size();
    size_t escape_at = 0;
    for (size_t i = 0; i < s; ++i) {
      const size_t from = n / s * i + n % s * i / s, to = n / s * (i + 1) + n % s * (i + 1) / s;
      std::vector<uint8_t> esc;
      for (size_t k = from; k < to; ++k)
        if (symbols[k] == 4095 && k < escape_width.size()) {
          const size_t wk = std::min<size_t>(escape_width[k], escapes.size() - escape_at);
          esc.insert(esc.end(), escapes.begin() + static_cast<ptrdiff_t>(escape_at),
                     escapes.begin() + static_cast<ptrdiff_t>(escape_at + wk));
          escape_at += wk;
        }
      st.escape_bytes.push_back(esc.size());
      st.escapes.push_back(esc);
      st.bits.emplace_back();
      PutStream(from, to, &st.bits.back());
      if (i + 1 < s) st.lengths.push_back(st.bits.back().size());
    }
    if (edit) edit(st);
    std::vector<uint8_t> out = TableBytes();
    out.push_back(static_cast<uint8_t>(st.count));
    for (uint64_t e : st.escape_bytes) PutVarint(out, e);
    for (uint64_t l : st.lengths) PutVarint(out, l);
    for (const auto& e : st.escapes) out.insert(out.end(), e.begin(), e.end());
    for (const auto& b : st.bits) out.insert(out.end(), b.begin(), b.end());
    return out;
  }
};

}  // namespace
}  // namespace dcr
