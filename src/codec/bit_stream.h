// Little-endian byte helpers, LEB128 varints and an LSB-first bit stream.
// Readers never read past their span: every accessor reports failure instead.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace dcr {

inline void PutLe(std::vector<uint8_t>& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
inline void StoreLe(uint8_t* p, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline uint64_t LoadLe(const uint8_t* p, int bytes) {
  uint64_t v = 0;
  for (int i = bytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

inline void PutVarint(std::vector<uint8_t>& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<uint8_t>(v | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<uint8_t>(v));
}
inline int VarintSize(uint64_t v) {
  int n = 1;
  while (v >= 0x80) v >>= 7, ++n;
  return n;
}

// Sequential reader over a byte span.
class ByteReader {
 public:
  explicit ByteReader(std::span<const uint8_t> b) : b_(b) {}
  size_t pos() const { return pos_; }
  size_t remaining() const { return b_.size() - pos_; }
  bool ReadVarint(uint64_t* v) {
    uint64_t r = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= b_.size()) return false;
      uint8_t byte = b_[pos_++];
      if (shift == 63 && byte > 1) return false;  // would overflow 64 bits
      r |= static_cast<uint64_t>(byte & 0x7f) << shift;
      if (!(byte & 0x80)) {
        *v = r;
        return true;
      }
    }
    return false;
  }
  bool ReadByte(uint8_t* v) {
    if (pos_ >= b_.size()) return false;
    *v = b_[pos_++];
    return true;
  }
  // The unread bytes; Skip(n) then consumes n of them (n <= remaining()).
  std::span<const uint8_t> Rest() const { return b_.subspan(pos_); }
  void Skip(size_t n) { pos_ += n < remaining() ? n : remaining(); }
  bool ReadBytes(size_t n, std::span<const uint8_t>* out) {
    if (n > remaining()) return false;
    *out = b_.subspan(pos_, n);
    pos_ += n;
    return true;
  }

 private:
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
};

// Appends bits LSB-first to a byte vector. Every Put stores the whole 8-byte accumulator at the
// write position and advances by the bytes completed, without a branch on the fill level; the
// bytes past those completed are rewritten by later stores. So the vector keeps at least 8 bytes
// of slack at its end, `out` must not be touched between construction and Flush, and Flush trims
// the slack.
class BitWriter {
 public:
  explicit BitWriter(std::vector<uint8_t>& out) : out_(out), buf_(out.data()), cap_(out.size()), at_(out.size()) {}
  // With room made at once for the `expected` bytes the caller will write (and the slack): no
  // growth on the way if the estimate holds.
  BitWriter(std::vector<uint8_t>& out, size_t expected) : BitWriter(out) {
    out_.resize(at_ + expected + 8);
    buf_ = out_.data();
    cap_ = out_.size();
  }

  // The writer's state copied into a local object for a loop of writes, and copied back when it
  // goes out of scope; the writer must not be used meanwhile. In the local the state stays in
  // registers, where the writer's own members are stored and reloaded around every byte store
  // (the stores may alias them, and the writer's address escapes to Grow).
  class Local {
   public:
    explicit Local(BitWriter& w) : w_(w), buf_(w.buf_), cap_(w.cap_), at_(w.at_), acc_(w.acc_), fill_(w.fill_) {}
    ~Local() { w_.at_ = at_, w_.acc_ = acc_, w_.fill_ = fill_; }
    Local(const Local&) = delete;
    Local& operator=(const Local&) = delete;

    // nbits <= 56; `bits` has no bits set at or above nbits.
    [[gnu::always_inline]] void Put(uint64_t bits, int nbits) {
      acc_ |= bits << fill_;  // fill_ <= 7, so at most 63 bits are held
      fill_ += nbits;
      if (at_ + 8 > cap_) [[unlikely]] {
        w_.Grow();
        buf_ = w_.buf_, cap_ = w_.cap_;
      }
      std::memcpy(buf_ + at_, &acc_, 8);
      const int bytes = fill_ >> 3;
      at_ += static_cast<size_t>(bytes);
      acc_ >>= 8 * bytes;  // at most 56
      fill_ &= 7;
    }
    // q one-bits then a zero bit.
    void PutUnary(uint64_t q) {
      while (q >= 31) Put(0x7fffffffu, 31), q -= 31;
      Put((1ull << q) - 1, static_cast<int>(q) + 1);
    }
    // A Rice code with parameter r (<= 30): value >> r in unary, then its r low bits; one Put when
    // the whole code fits one (quotient below 32). BitReader::GetRice reads it.
    void PutRice(uint64_t value, int r) {
      const uint64_t q = value >> r;
      if (q < 32 && r <= 24) [[likely]]
        return Put(RiceBits(value, q, (uint64_t{2} << r) - 1), static_cast<int>(q) + 1 + r);
      PutUnary(q);
      if (r > 0) Put(value & ((uint64_t{1} << r) - 1), r);
    }
    // PutRice(a, r) then PutRice(b, r), in one Put where both codes are short (quotients below
    // 16, r <= 11: at most 54 bits together), which halves the chain of dependent Put steps.
    void PutRice2(uint64_t a, uint64_t b, int r) {
      const uint64_t qa = a >> r, qb = b >> r;
      if ((qa | qb) < 16 && r <= 11) [[likely]] {
        const uint64_t low_mask2 = (uint64_t{2} << r) - 1;
        const int la = static_cast<int>(qa) + 1 + r;
        return Put(RiceBits(a, qa, low_mask2) | RiceBits(b, qb, low_mask2) << la, la + static_cast<int>(qb) + 1 + r);
      }
      PutRice(a, r);
      PutRice(b, r);
    }
    // PutRice2(a, b, r) then PutRice2(c, d, r), in one Put where all four codes are short
    // (quotients below 8, r <= 5: at most 52 bits together), which halves the chain of dependent
    // Put steps again: gaps at a few percent of change take such parameters.
    void PutRice4(uint64_t a, uint64_t b, uint64_t c, uint64_t d, int r) {
      if (((a | b | c | d) >> r) < 8 && r <= 5) [[likely]] {
        const uint64_t low_mask2 = (uint64_t{2} << r) - 1;
        auto code = [&](uint64_t v) { return RiceBits(v, v >> r, low_mask2); };
        const int la = static_cast<int>(a >> r) + 1 + r, lb = static_cast<int>(b >> r) + 1 + r;
        const int lc = static_cast<int>(c >> r) + 1 + r, ld = static_cast<int>(d >> r) + 1 + r;
        const uint64_t ab = code(a) | code(b) << la, cd = code(c) | code(d) << lc;
        return Put(ab | cd << (la + lb), la + lb + lc + ld);
      }
      PutRice2(a, b, r);
      PutRice2(c, d, r);
    }

    // Four r-bit fields (r <= 30, each value below 2^r), `a` in the lowest bits: one Put where
    // they fit (r <= 14), else two or four. The remainders of split Rice codes (split_rice.h).
    [[gnu::always_inline]] void PutFields4(uint64_t a, uint64_t b, uint64_t c, uint64_t d, int r) {
      if (r <= 14) [[likely]]
        return Put(a | b << r | c << (2 * r) | d << (3 * r), 4 * r);
      if (r <= 28) return Put(a | b << r, 2 * r), Put(c | d << r, 2 * r);
      Put(a, r), Put(b, r), Put(c, r), Put(d, r);
    }
    // q zero bits, then a one bit: a split Rice code's quotient (split_rice.h).
    void PutTerminated(uint64_t q) {
      for (; q >= 56; q -= 56) Put(0, 56);
      Put(uint64_t{1} << q, static_cast<int>(q) + 1);
    }
    // PutTerminated of four quotients, in one Put where they fit (all below 14: at most 56 bits).
    [[gnu::always_inline]] void PutTerminated4(uint64_t qa, uint64_t qb, uint64_t qc, uint64_t qd) {
      if ((qa | qb | qc | qd) < 14) [[likely]] {
        const uint64_t b = qa + 1 + qb, c = b + 1 + qc, d = c + 1 + qd;
        return Put(uint64_t{1} << qa | uint64_t{1} << b | uint64_t{1} << c | uint64_t{1} << d, static_cast<int>(d) + 1);
      }
      PutTerminated(qa), PutTerminated(qb), PutTerminated(qc), PutTerminated(qd);
    }
    // The first `nbits` bits of `bits` (LSB-first, as a BitWriter wrote them), bit for bit.
    void AppendBits(std::span<const uint8_t> bits, uint64_t nbits) {
      const uint8_t* p = bits.data();
      for (; nbits >= 32; nbits -= 32, p += 4) {
        uint32_t word;
        std::memcpy(&word, p, 4);
        Put(word, 32);
      }
      uint64_t last = 0;
      std::memcpy(&last, p, static_cast<size_t>((nbits + 7) / 8));
      if (nbits > 0) Put(last & ((uint64_t{1} << nbits) - 1), static_cast<int>(nbits));
    }

   private:
    // The bits of a Rice code whose quotient q = v >> r fits one Put, as PutRice writes them: q
    // ones, a zero, then v's r low bits, i.e. (2 * low + 1) << q, minus 1; low_mask2 = (2 << r)
    // - 1 keeps 2 * low + 1. One variable shift (without BMI2 every variable shift goes through
    // CL, and two per code spilled the writer's state to the stack).
    static uint64_t RiceBits(uint64_t v, uint64_t q, uint64_t low_mask2) { return ((((v << 1) | 1) & low_mask2) << q) - 1; }

    BitWriter& w_;
    uint8_t* buf_;
    size_t cap_;
    size_t at_;
    uint64_t acc_;
    int fill_;
  };

  void Put(uint64_t bits, int nbits) { Local(*this).Put(bits, nbits); }
  void PutUnary(uint64_t q) { Local(*this).PutUnary(q); }
  void PutRice(uint64_t value, int r) { Local(*this).PutRice(value, r); }
  // Bits written to the vector, counted from its start (its first 8 × size() bits when made).
  uint64_t BitCount() const { return 8 * uint64_t{at_} + static_cast<uint64_t>(fill_); }
  // Completes the partial byte (its unused high bits zero) and keeps the room: the next Put
  // starts a new byte. Between the areas of one code, where Flush would trim the room that the
  // next area then grows again (each growth zero-fills as much as the vector already holds).
  void AlignToByte() {
    // The last Put stored the accumulator at buf_ + at_ (it advanced by completed bytes only),
    // so the partial byte is in place.
    if (fill_ > 0) ++at_, acc_ = 0, fill_ = 0;
  }

  void Flush() {
    out_.resize(at_);
    if (fill_ > 0) out_.push_back(static_cast<uint8_t>(acc_));
    acc_ = 0;
    fill_ = 0;
    at_ = out_.size();
    buf_ = out_.data();
    cap_ = out_.size();
  }

 private:
  // The buffer is held as a raw pointer and size, not read through the vector on every Put: the
  // byte stores may alias anything, which would make the compiler reload the vector's fields.
  void Grow() {
    out_.resize(2 * out_.size() + 64);
    buf_ = out_.data();
    cap_ = out_.size();
  }
  std::vector<uint8_t>& out_;
  uint8_t* buf_;
  size_t cap_;
  size_t at_;  // bytes of out_ completed; out_.size() - at_ is slack
  uint64_t acc_ = 0;
  int fill_ = 0;  // bits in acc_ not yet completed into a byte: 0..7 between calls
};

// Reads bits LSB-first from a byte span; running off the end sets an error flag and yields 0s.
class BitReader {
 public:
  explicit BitReader(std::span<const uint8_t> b) : b_(b) {}
  // nbits <= 56
  uint64_t Get(int nbits) {
    Refill();
    if (fill_ < nbits) {
      overrun_ = true;
      return 0;
    }
    uint64_t v = acc_ & ((nbits == 64) ? ~0ull : ((1ull << nbits) - 1));
    acc_ >>= nbits;
    fill_ -= nbits;
    return v;
  }
  // Counts one-bits up to the next zero bit (consumed). Fails (overrun) past `limit` ones.
  uint64_t GetUnary(uint64_t limit) {
    uint64_t q = 0;
    for (;;) {
      Refill();
      if (fill_ == 0) {
        overrun_ = true;
        return 0;
      }
      uint64_t inv = ~acc_ & ((fill_ == 64) ? ~0ull : ((1ull << fill_) - 1));
      if (inv != 0) {
        int ones = __builtin_ctzll(inv);
        q += static_cast<uint64_t>(ones);
        // ones + 1 is 64 when the run ends at the last bit of a full window; shifting a 64-bit
        // value by 64 is undefined (x86 leaves it unchanged), so clear it explicitly.
        acc_ = ones + 1 >= 64 ? 0 : acc_ >> (ones + 1);
        fill_ -= ones + 1;
        if (q > limit) overrun_ = true;
        return q;
      }
      q += static_cast<uint64_t>(fill_);
      acc_ = 0;
      fill_ = 0;
      if (q > limit) {
        overrun_ = true;
        return 0;
      }
    }
  }
  // A Rice code with parameter r (<= 30): GetUnary(limit) << r | Get(r), in one step when the
  // whole code is in the window (as it is for all but very long quotients).
  uint64_t GetRice(int r, uint64_t limit) {
    Refill();
    return GetRiceAfterRefill(r, limit);
  }
  // The next nbits (<= 56) without consuming them; missing bits past the end read as 0.
  uint64_t Peek(int nbits) {
    Refill();
    return acc_ & ((1ull << nbits) - 1);
  }
  // Drops the next nbits (<= 56) after a Peek that returned them.
  void Skip(int nbits) {
    if (fill_ < nbits) {
      overrun_ = true;
      return;
    }
    acc_ >>= nbits;
    fill_ -= nbits;
  }
  void Fail() { overrun_ = true; }

  // Fast path for hot decode loops: while HasWindow() holds, RefillWindow() tops the window up
  // to 56..63 bits without a branch, and SkipInWindow consumes from it unchecked; the caller
  // must take at most 56 bits per refill. Near the end of the input, use the checked calls above
  // instead.
  bool HasWindow() const { return b_.size() - pos_ >= 8; }
  void RefillWindow() { Refill(b_.data(), &pos_, &acc_, &fill_); }
  uint64_t window() const { return acc_; }
  void SkipInWindow(int nbits) {
    acc_ >>= nbits;
    fill_ -= nbits;
  }

  // The same fast path on a copy of the reader's state, for a loop that stores through byte
  // pointers: those may alias the reader's members, which would then be stored and loaded again
  // around every store; a local copy whose address is never taken stays in registers.
  // TakeWindow() copies the state out, PutWindow() puts it back; in between, use only the copy.
  struct Window {
    const uint8_t* data;
    size_t size, pos;
    uint64_t acc;
    int fill;
    bool Has() const { return size - pos >= 8; }
    void Refill() { BitReader::Refill(data, &pos, &acc, &fill); }
    void Skip(int nbits) {
      acc >>= nbits;
      fill -= nbits;
    }
    // The bits consumed from the input's start.
    uint64_t Consumed() const { return uint64_t{pos} * 8 - static_cast<uint64_t>(fill); }
    // Makes the window start at input bit `bit` (at most 8 x size, and below it unless a
    // multiple of 8): the rest of that bit's byte in acc, as a refill expects.
    void SeekTo(uint64_t bit) {
      pos = static_cast<size_t>(bit >> 3), acc = 0, fill = 0;
      if (bit % 8 == 0) return;
      acc = data[pos++] >> (bit % 8);
      fill = 8 - static_cast<int>(bit % 8);
    }
  };
  Window TakeWindow() const { return {b_.data(), b_.size(), pos_, acc_, fill_}; }
  void PutWindow(const Window& w) { pos_ = w.pos, acc_ = w.acc, fill_ = w.fill; }
  // n Rice codes with parameter r (<= 30) and quotients <= limit, each passed to take(code),
  // which returns false to stop early. Reads what n GetRice calls would, faster: the window
  // lives in locals across the loop (as members it would be stored and reloaded for every code,
  // since the out-of-line slow case takes `this`), and inverted, so that a code's unary length is
  // one trailing-zero count (the dependent chain per code: count, add, shift); one refill serves
  // as many codes as usually fit (PerRefill), so the refill's load, which waits for the codes
  // before it, comes once per several codes. Returns false if take stopped or the input ran out
  // (overrun() then tells which). Always inlined, so that what `take` captures stays in
  // registers too.
  template <class Take>
  [[gnu::always_inline]] inline bool GetRiceRun(uint64_t n, int r, uint64_t limit, Take&& take) {
    // inv holds the complement of the window's fill bits; above them, zeros or complemented
    // input bits (a logical shift brings in zeros), so that OR-ing a refill's complemented
    // word is exact as for acc_.
    int fill = fill_;
    uint64_t inv = ~acc_ & LowMask(fill);
    size_t pos = pos_;
    const uint8_t* const data = b_.data();
    const size_t size = b_.size();
    const uint64_t low_mask = (uint64_t{1} << r) - 1;
    const int per_refill = PerRefill(r);
    auto sync = [&] { acc_ = ~inv & LowMask(fill), fill_ = fill, pos_ = pos; };
    uint64_t j = 0;
    while (j < n) {
      int taken = 0;
      if (size - pos >= 8) {
        inv |= ~LoadWord(data + pos) << fill;  // as RefillWindow: fill now 56..63
        pos += static_cast<size_t>((63 - fill) >> 3);
        fill |= 56;
        for (; taken < per_refill && j < n; ++taken, ++j) {
          const int ones = std::countr_zero(inv);
          const int total = ones + 1 + r;  // <= fill <= 63 when taken, so inv >> total is defined
          if (total > fill || static_cast<uint64_t>(ones) > limit) break;
          const uint64_t code = static_cast<uint64_t>(ones) << r | (~((inv >> ones) >> 1) & low_mask);
          inv >>= total;
          fill -= total;
          if (!take(code)) return sync(), false;
        }
      }
      if (taken > 0) continue;
      // Near the end of the input, or a code longer than the window: the checked read.
      sync();
      const uint64_t code = GetRice(r, limit);
      if (overrun_) return false;
      fill = fill_, inv = ~acc_ & LowMask(fill), pos = pos_;
      ++j;
      if (!take(code)) return sync(), false;
    }
    sync();
    return true;
  }
  bool overrun() const { return overrun_; }
  // Bytes consumed so far, counting a partially read byte as whole.
  size_t bytes_consumed() const { return pos_ - static_cast<size_t>(fill_ / 8); }

 private:
  // A Rice code read from the window in one step when it lies wholly within the fill_ bits and
  // its quotient is within `limit` (a run of ones reaching past fill_ fails the first test;
  // bits above fill_ are input bits or zero), else unary then low bits, with their checks.
  uint64_t GetRiceAfterRefill(int r, uint64_t limit) {
    const int ones = std::countr_one(acc_);
    const int total = ones + 1 + r;
    if (total <= fill_ && static_cast<uint64_t>(ones) <= limit) {
      const uint64_t low = ((acc_ >> ones) >> 1) & ((1ull << r) - 1);
      acc_ = total == 64 ? 0 : acc_ >> total;
      fill_ -= total;
      return static_cast<uint64_t>(ones) << r | low;
    }
    return GetRiceInParts(r, limit);
  }
  // RefillWindow's step: at least 8 bytes from data + *pos on must exist.
  static void Refill(const uint8_t* data, size_t* pos, uint64_t* acc, int* fill) {
    uint64_t next;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
    std::memcpy(&next, data + *pos, 8);
#pragma GCC diagnostic pop
    *acc |= next << *fill;  // bits already in acc above fill are the same input bits, or zero
    *pos += static_cast<size_t>((63 - *fill) >> 3);
    *fill |= 56;  // fill + 8 * (whole bytes taken): same low three bits, now in 56..63
  }
  // The low `bits` (0..64) bits set.
  static uint64_t LowMask(int bits) { return bits >= 64 ? ~uint64_t{0} : (uint64_t{1} << bits) - 1; }
  // Codes GetRiceRun reads per refill of 56+ bits: as many as fit when quotients average under
  // two (Rice parameters are fitted so that they average about one), at most 8.
  static int PerRefill(int r) { return std::clamp(56 / (r + 3), 1, 8); }
  // 8 input bytes from p as one word, as RefillWindow reads them.
  static uint64_t LoadWord(const uint8_t* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  // Out of line, so that the one-step read above inlines into hot loops.
  [[gnu::noinline]] uint64_t GetRiceInParts(int r, uint64_t limit) {
    const uint64_t q = GetUnary(limit);
    return q << r | (r > 0 ? Get(r) : 0);
  }
  // Tops the window up to at least 57 bits while input lasts: 8 bytes at once away from the end.
  void Refill() {
    if (fill_ <= 56 && b_.size() - pos_ >= 8) {
      uint64_t next;
      // GCC warns when it inlines this for a span it knows to be shorter than 8 bytes, where the
      // size test above makes the branch dead.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
      std::memcpy(&next, b_.data() + pos_, 8);
#pragma GCC diagnostic pop
      acc_ |= next << fill_;
      const int take = (63 - fill_) >> 3;  // whole bytes that fit
      pos_ += static_cast<size_t>(take);
      fill_ += 8 * take;
      return;
    }
    while (fill_ <= 56 && pos_ < b_.size()) {
      acc_ |= static_cast<uint64_t>(b_[pos_++]) << fill_;
      fill_ += 8;
    }
  }
  std::span<const uint8_t> b_;
  size_t pos_ = 0;
  uint64_t acc_ = 0;
  int fill_ = 0;
  bool overrun_ = false;
};

}  // namespace dcr
