#include "protocol/replica_journal.h"

#include <fcntl.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace dcr {
namespace {

namespace fs = std::filesystem;

constexpr size_t kUndoBufferBytes = 1 << 20;

void PutLe(std::vector<uint8_t>& out, uint64_t v, int n) {
  for (int i = 0; i < n; ++i) out.push_back(static_cast<uint8_t>(v >> (8 * i)));
}

uint64_t GetLe(const uint8_t* p, int n) {
  uint64_t v = 0;
  for (int i = 0; i < n; ++i) v |= uint64_t{p[i]} << (8 * i);
  return v;
}

bool ParseDecimal32(const std::string& s, uint32_t* out) {
  if (s.empty() || s.size() > 10 || (s.size() > 1 && s[0] == '0')) return false;
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
    v = v * 10 + static_cast<uint64_t>(c - '0');
  }
  if (v > UINT32_MAX) return false;
  *out = static_cast<uint32_t>(v);
  return true;
}

}  // namespace

std::string RecordStem(uint32_t producer, uint32_t sequence) {
  return std::to_string(producer) + "-" + std::to_string(sequence);
}

bool ParseRecordName(const std::string& name, uint32_t* producer, uint32_t* sequence, std::string* ext) {
  const size_t dash = name.find('-'), dot = name.find('.');
  if (dash == std::string::npos || dot == std::string::npos || dot < dash) return false;
  *ext = name.substr(dot + 1);
  return ParseDecimal32(name.substr(0, dash), producer) && ParseDecimal32(name.substr(dash + 1, dot - dash - 1), sequence);
}

bool IsDurableTempName(const std::string& name) {
  return name.size() > 1 && name[0] == '.' && name.find(".tmp.") != std::string::npos;
}

std::string EncodeStateFile(const StateFile& s) {
  nlohmann::ordered_json j;
  j["format"] = kReplicaStateFormat;
  j["version"] = s.version.id.ToHex();
  j["number"] = s.version.number;
  j["digest"] = s.digest.ToHex();
  auto& arr = j["tensor_digests"] = nlohmann::ordered_json::array();
  for (const Digest128& d : s.tensors) arr.push_back(d.ToHex());
  j["last_transfer"] = Hex64(s.last_transfer);
  if (s.layout) j["layout"] = true;
  return j.dump() + "\n";
}

Result<StateFile> ParseStateFile(std::span<const uint8_t> bytes, const std::string& path) {
  auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  auto bad = [&](const std::string& what) { return Corrupt(path + ": " + what); };
  if (j.is_discarded() || !j.is_object()) return bad("not a JSON object");
  if (!j.contains("format") || !j["format"].is_number_unsigned() || j["format"].get<uint64_t>() != kReplicaStateFormat)
    return bad("missing or unsupported \"format\" (this build reads " + std::to_string(kReplicaStateFormat) + ")");
  auto str = [&](const char* key) { return j.contains(key) && j[key].is_string() ? j[key].get<std::string>() : ""; };
  StateFile s;
  if (!Digest128::FromHex(str("version"), &s.version.id)) return bad("bad \"version\"");
  if (!j.contains("number") || !j["number"].is_number_unsigned()) return bad("bad \"number\"");
  s.version.number = j["number"].get<uint64_t>();
  if (!Digest128::FromHex(str("digest"), &s.digest)) return bad("bad \"digest\"");
  if (!ParseHex64(str("last_transfer"), &s.last_transfer)) return bad("bad \"last_transfer\"");
  if (!j.contains("tensor_digests") || !j["tensor_digests"].is_array()) return bad("bad \"tensor_digests\"");
  for (const auto& d : j["tensor_digests"]) {
    s.tensors.emplace_back();
    if (!d.is_string() || !Digest128::FromHex(d.get<std::string>(), &s.tensors.back())) return bad("bad tensor digest");
  }
  if (j.contains("layout")) {
    if (!j["layout"].is_boolean()) return bad("bad \"layout\" (true or absent)");
    s.layout = j["layout"].get<bool>();
  }
  return s;
}

std::string EncodeTransferFile(const TransferFile& t) {
  nlohmann::ordered_json j;
  j["transfer"] = Hex64(t.transfer_id);
  j["base_version"] = t.base.id.ToHex();
  j["base_number"] = t.base.number;
  return j.dump() + "\n";
}

Result<TransferFile> ParseTransferFile(std::span<const uint8_t> bytes, const std::string& path) {
  auto j = nlohmann::json::parse(bytes.begin(), bytes.end(), nullptr, false);
  TransferFile t;
  if (j.is_discarded() || !j.is_object() || !j.contains("transfer") || !j["transfer"].is_string() ||
      !j.contains("base_version") || !j["base_version"].is_string() || !j.contains("base_number") ||
      !j["base_number"].is_number_unsigned() || !ParseHex64(j["transfer"].get<std::string>(), &t.transfer_id) ||
      !Digest128::FromHex(j["base_version"].get<std::string>(), &t.base.id))
    return Corrupt(path + ": not a valid transfer file");
  t.base.number = j["base_number"].get<uint64_t>();
  return t;
}

// ---------------------------------------------------------------------------------------------
// Undo records.

UndoWriter::UndoWriter(DurableFileWriter w, uint64_t entries) : writer_(std::move(w)), expected_(entries) {
  hash_ = XXH3_createState();
  DCR_CHECK(hash_ != nullptr);
  XXH3_64bits_reset(static_cast<XXH3_state_t*>(hash_));
  buf_.reserve(kUndoBufferBytes + 64);
}

UndoWriter::UndoWriter(UndoWriter&& o) noexcept
    : writer_(std::move(o.writer_)), hash_(std::exchange(o.hash_, nullptr)), buf_(std::move(o.buf_)),
      expected_(o.expected_), added_(o.added_) {}

UndoWriter::~UndoWriter() {
  if (hash_ != nullptr) XXH3_freeState(static_cast<XXH3_state_t*>(hash_));
}

Result<UndoWriter> UndoWriter::Create(const std::string& path, uint32_t producer, uint32_t sequence,
                                      uint64_t transfer, uint64_t ordinal, uint64_t entries) {
  DCR_ASSIGN_OR_RETURN(DurableFileWriter w, DurableFileWriter::Create(path));
  UndoWriter u(std::move(w), entries);
  u.buf_.insert(u.buf_.end(), kUndoMagic, kUndoMagic + 8);
  PutLe(u.buf_, producer, 4);
  PutLe(u.buf_, sequence, 4);
  PutLe(u.buf_, transfer, 8);
  PutLe(u.buf_, ordinal, 8);
  PutLe(u.buf_, entries, 8);
  return u;
}

Status UndoWriter::Flush() {
  XXH3_64bits_update(static_cast<XXH3_state_t*>(hash_), buf_.data(), buf_.size());
  DCR_RETURN_IF_ERROR(writer_.Append(buf_));
  buf_.clear();
  return Status::Ok();
}

Status UndoWriter::Add(uint32_t tensor, uint64_t element, uint64_t old_bits, uint32_t width) {
  PutLe(buf_, tensor, 4);
  PutLe(buf_, element, 8);
  PutLe(buf_, old_bits, static_cast<int>(width));
  ++added_;
  return buf_.size() >= kUndoBufferBytes ? Flush() : Status::Ok();
}

Status UndoWriter::Commit() {
  DCR_CHECK(added_ == expected_);
  DCR_RETURN_IF_ERROR(Flush());
  std::vector<uint8_t> trailer;
  PutLe(trailer, XXH3_64bits_digest(static_cast<XXH3_state_t*>(hash_)), 8);
  DCR_RETURN_IF_ERROR(writer_.Append(trailer));
  return writer_.Commit();
}

Result<UndoRecord> ReadUndoRecord(const std::string& path, const std::vector<UndoTensor>& tensors) {
  UndoRecord r;
  r.path = path;
  DCR_ASSIGN_OR_RETURN(r.file, MappedFile::Open(path));
  const std::span<const uint8_t> b = r.file.bytes();
  if (b.size() < kUndoHeaderBytes + kRecordTrailerBytes || std::memcmp(b.data(), kUndoMagic, 8) != 0)
    return Corrupt(path + ": not an undo record (magic or size)");
  if (XXH3_64bits(b.data(), b.size() - 8) != GetLe(b.data() + b.size() - 8, 8))
    return Corrupt(path + ": undo record checksum mismatch");
  r.producer = static_cast<uint32_t>(GetLe(b.data() + 8, 4));
  r.sequence = static_cast<uint32_t>(GetLe(b.data() + 12, 4));
  r.transfer = GetLe(b.data() + 16, 8);
  r.ordinal = GetLe(b.data() + 24, 8);
  r.entries = GetLe(b.data() + 32, 8);
  const uint8_t* p = b.data() + kUndoHeaderBytes;
  const uint8_t* end = b.data() + b.size() - kRecordTrailerBytes;
  for (uint64_t k = 0; k < r.entries; ++k) {
    if (end - p < 12) return Corrupt(path + ": undo record truncated at entry " + std::to_string(k));
    const uint64_t t = GetLe(p, 4), e = GetLe(p + 4, 8);
    if (t >= tensors.size() || e >= tensors[t].elements())
      return Corrupt(path + ": undo entry " + std::to_string(k) + " names tensor " + std::to_string(t) + " element " +
                     std::to_string(e) + ", out of range");
    const uint32_t w = tensors[t].width;
    if (static_cast<size_t>(end - p - 12) < w) return Corrupt(path + ": undo record truncated at entry " + std::to_string(k));
    p += 12 + w;
  }
  if (p != end) return Corrupt(path + ": undo record has trailing bytes after " + std::to_string(r.entries) + " entries");
  return r;
}

void RestoreUndoRecord(const UndoRecord& r, const std::vector<UndoTensor>& tensors) {
  const uint8_t* p = r.file.bytes().data() + kUndoHeaderBytes;
  for (uint64_t k = 0; k < r.entries; ++k) {
    const UndoTensor& t = tensors[GetLe(p, 4)];
    const uint64_t e = GetLe(p + 4, 8);
    const uint32_t w = t.width;
    std::memcpy(t.bytes.data() + e * w, p + 12, w);
    p += 12 + w;
  }
}

// ---------------------------------------------------------------------------------------------
// Done records.

std::vector<uint8_t> EncodeDoneRecord(const DoneRecord& d) {
  std::vector<uint8_t> out(kDoneMagic, kDoneMagic + 8);
  PutLe(out, d.producer, 4);
  PutLe(out, d.sequence, 4);
  PutLe(out, d.transfer, 8);
  PutLe(out, d.payload_hash, 8);
  PutLe(out, d.changed, 8);
  PutLe(out, d.deltas.size(), 4);
  for (const auto& [t, delta] : d.deltas) {
    PutLe(out, t, 4);
    PutLe(out, delta.lo, 8);
    PutLe(out, delta.hi, 8);
  }
  PutLe(out, XXH3_64bits(out.data(), out.size()), 8);
  return out;
}

Result<DoneRecord> ParseDoneRecord(std::span<const uint8_t> b, const std::string& path, size_t num_tensors) {
  if (b.size() < kDoneHeaderBytes + kRecordTrailerBytes || std::memcmp(b.data(), kDoneMagic, 8) != 0)
    return Corrupt(path + ": not a done record (magic or size)");
  if (XXH3_64bits(b.data(), b.size() - 8) != GetLe(b.data() + b.size() - 8, 8))
    return Corrupt(path + ": done record checksum mismatch");
  DoneRecord d;
  d.producer = static_cast<uint32_t>(GetLe(b.data() + 8, 4));
  d.sequence = static_cast<uint32_t>(GetLe(b.data() + 12, 4));
  d.transfer = GetLe(b.data() + 16, 8);
  d.payload_hash = GetLe(b.data() + 24, 8);
  d.changed = GetLe(b.data() + 32, 8);
  const uint64_t n = GetLe(b.data() + 40, 4);
  if (b.size() != kDoneHeaderBytes + n * 20 + kRecordTrailerBytes)
    return Corrupt(path + ": done record size disagrees with its " + std::to_string(n) + " digest deltas");
  const uint8_t* p = b.data() + kDoneHeaderBytes;
  for (uint64_t k = 0; k < n; ++k, p += 20) {
    const uint64_t t = GetLe(p, 4);
    if (t >= num_tensors || (k > 0 && t <= d.deltas.back().first))
      return Corrupt(path + ": done record names tensor " + std::to_string(t) + " out of range or order");
    d.deltas.push_back({static_cast<uint32_t>(t), Digest128{GetLe(p + 4, 8), GetLe(p + 12, 8)}});
  }
  return d;
}

// ---------------------------------------------------------------------------------------------
// Files.

Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno == ENOENT ? NotFound(path + ": no such file") : ErrnoError("open " + path);
  std::vector<uint8_t> out;
  uint8_t buf[65536];
  for (;;) {
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      Status s = ErrnoError("read " + path);
      ::close(fd);
      return s;
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  ::close(fd);
  return out;
}

namespace {

Status Unlink(const std::string& path) {
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return ErrnoError("remove " + path);
  return Status::Ok();
}

}  // namespace

Status RemoveTempFiles(const std::string& dir) {
  std::error_code ec;
  std::vector<std::string> temps;
  for (const auto& e : fs::directory_iterator(dir, ec))
    if (IsDurableTempName(e.path().filename().string())) temps.push_back(e.path().string());
  if (ec) return IoError("list " + dir + ": " + ec.message());
  for (const std::string& t : temps) DCR_RETURN_IF_ERROR(Unlink(t));
  return temps.empty() ? Status::Ok() : SyncDirectory(dir);
}

Status RemoveDurably(const std::string& path) {
  DCR_RETURN_IF_ERROR(Unlink(path));
  return SyncDirectory(fs::path(path).parent_path().string());
}

Status RemoveJournal(const std::string& dir, const std::string& journal,
                     const std::vector<std::string>& undo_newest_first) {
  std::error_code ec;
  if (!fs::exists(journal, ec)) return Status::Ok();
  DCR_RETURN_IF_ERROR(RemoveDurably(journal + "/voted"));
  for (const std::string& u : undo_newest_first) DCR_RETURN_IF_ERROR(RemoveDurably(u));
  std::vector<std::string> rest;
  for (const auto& e : fs::directory_iterator(journal, ec))
    if (e.path().filename() != "transfer.json") rest.push_back(e.path().string());
  if (ec) return IoError("list " + journal + ": " + ec.message());
  for (const std::string& f : rest) DCR_RETURN_IF_ERROR(Unlink(f));
  DCR_RETURN_IF_ERROR(SyncDirectory(journal));
  DCR_RETURN_IF_ERROR(RemoveDurably(journal + "/transfer.json"));
  if (::rmdir(journal.c_str()) != 0 && errno != ENOENT) return ErrnoError("remove directory " + journal);
  return SyncDirectory(dir);
}

}  // namespace dcr
