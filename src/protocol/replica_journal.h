// The undo journal of a receiver state directory (docs/state-dirs.md §Receiver state directory):
// record names, the binary undo and done records, transfer.json, and journal removal. Every
// reader validates completely (magic, sizes, xxh3-64 trailer, every tensor and element index in
// range of the replica's tensors) before it returns anything; failures are kCorrupt naming the
// file. ReplicaState (replica_state.h) owns the ordering rules; this file owns the bytes.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/durable_file.h"
#include "base/mapped_file.h"
#include "base/status.h"
#include "format/checkpoint.h"
#include "protocol/state_digest.h"
#include "protocol/version.h"

namespace dcr {

inline constexpr int kReplicaStateFormat = 1;  // state.json's "format"
inline constexpr char kUndoMagic[8] = {'D', 'C', 'R', 'U', 'N', 'D', 'O', '1'};
inline constexpr char kDoneMagic[8] = {'D', 'C', 'R', 'D', 'O', 'N', 'E', '1'};
inline constexpr size_t kUndoHeaderBytes = 40;  // magic, producer, sequence, transfer, ordinal, count
inline constexpr size_t kDoneHeaderBytes = 44;  // magic, producer, sequence, transfer, hash, changed, n
inline constexpr size_t kRecordTrailerBytes = 8;

// "<producer>-<sequence>" in decimal: the stem of a payload's .undo and .done records.
std::string RecordStem(uint32_t producer, uint32_t sequence);
// Parses "<producer>-<sequence>.<ext>" (canonical decimal, no leading zeros); false otherwise.
bool ParseRecordName(const std::string& name, uint32_t* producer, uint32_t* sequence, std::string* ext);
// True for a temporary file left by DurableFileWriter: ".<name>.tmp.<pid>.<n>".
bool IsDurableTempName(const std::string& name);

// DIR/state.json: the committed state. `layout` is true for a replica held in a serving layout
// (the key is written only then; absent means false).
struct StateFile {
  Version version;
  Digest128 digest;
  std::vector<Digest128> tensors;
  uint64_t last_transfer = 0;
  bool layout = false;
};
// `digest` is written as given (the caller computes CombineDigests of the tensor digests).
std::string EncodeStateFile(const StateFile& s);
Result<StateFile> ParseStateFile(std::span<const uint8_t> bytes, const std::string& path);

// journal/transfer.json.
struct TransferFile {
  uint64_t transfer_id = 0;
  Version base;
};
std::string EncodeTransferFile(const TransferFile& t);
Result<TransferFile> ParseTransferFile(std::span<const uint8_t> bytes, const std::string& path);

// Streams an undo record to its final path through DurableFileWriter; Commit publishes it
// (fsync, rename, directory fsync). `entries` must equal the number of Add calls.
class UndoWriter {
 public:
  static Result<UndoWriter> Create(const std::string& path, uint32_t producer, uint32_t sequence,
                                   uint64_t transfer, uint64_t ordinal, uint64_t entries);
  UndoWriter(UndoWriter&&) noexcept;
  ~UndoWriter();
  // Adds one entry: the tensor (UndoTensor index), the element and its old bits (low `width`
  // bytes are stored; `width` must be the tensor's).
  Status Add(uint32_t tensor, uint64_t element, uint64_t old_bits, uint32_t width);
  Status Commit();

 private:
  UndoWriter(DurableFileWriter w, uint64_t entries);
  Status Put(const void* p, size_t n);
  Status Flush();

  DurableFileWriter writer_;
  void* hash_ = nullptr;  // XXH3_state_t
  std::vector<uint8_t> buf_;
  uint64_t expected_ = 0, added_ = 0;
};

// A tensor an undo entry can name: its whole bytes (writable, for restoring) and element width.
// An entry's tensor index is an index into the replica's list of these: the catalog in canonical
// mode, the global local-tensor ordinal in layout mode (docs/state-dirs.md).
struct UndoTensor {
  std::span<uint8_t> bytes;
  uint32_t width = 1;
  uint64_t elements() const { return bytes.size() / width; }
};

// A validated undo record, mapped read-only.
struct UndoRecord {
  std::string path;
  uint32_t producer = 0, sequence = 0;
  uint64_t transfer = 0, ordinal = 0, entries = 0;
  MappedFile file;
};
// Every entry must name a tensor of `tensors` and an element inside it, and carry exactly that
// tensor's width of old bits.
Result<UndoRecord> ReadUndoRecord(const std::string& path, const std::vector<UndoTensor>& tensors);
// Stores every entry's old bits into `tensors` (absolute bits: idempotent). Does not sync.
void RestoreUndoRecord(const UndoRecord& record, const std::vector<UndoTensor>& tensors);

struct DoneRecord {
  uint32_t producer = 0, sequence = 0;
  uint64_t transfer = 0;
  uint64_t payload_hash = 0;  // the payload's xxh3-64 checksum (its trailer)
  uint64_t changed = 0;
  std::vector<std::pair<uint32_t, Digest128>> deltas;  // per touched tensor, ascending
};
std::vector<uint8_t> EncodeDoneRecord(const DoneRecord& d);
Result<DoneRecord> ParseDoneRecord(std::span<const uint8_t> bytes, const std::string& path, size_t num_tensors);

// Deletes DurableFileWriter temp files left in `dir` by a killed process (fsyncs `dir` if any).
Status RemoveTempFiles(const std::string& dir);

// Whole-file read; kNotFound when absent.
Result<std::vector<uint8_t>> ReadWholeFile(const std::string& path);
// Removes a file if present and fsyncs its directory.
Status RemoveDurably(const std::string& path);

// Removes journal directory `journal` (inside `dir`) in crash-safe order, fsyncing the journal
// directory after each step: "voted"; then the undo records `undo_newest_first` one by one
// (newest first, so the ones left are always the oldest: restoring them still yields the base);
// then every other file but transfer.json; then transfer.json; then the directory (fsync `dir`).
Status RemoveJournal(const std::string& dir, const std::string& journal,
                     const std::vector<std::string>& undo_newest_first);

}  // namespace dcr
