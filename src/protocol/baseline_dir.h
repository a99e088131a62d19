// The files of a producer's baseline directory (baseline_state.h, docs/state-dirs.md §Producer
// baseline directory): their names, and the manifests baseline.json and staged/<transfer>.json
// as JSON. BaselineState's operations are built on these; nothing here keeps state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "protocol/state_digest.h"
#include "protocol/version.h"

namespace dcr {

inline constexpr int kBaselineFormat = 1;
inline constexpr const char* kBaselineJson = "baseline.json";
inline constexpr const char* kBaselineStagedDir = "staged";

namespace baseline_dir {

// "baseline-<16 hex>.safetensors": the owned tensors of the version `transfer` produced.
std::string TensorsFileName(uint64_t transfer);
bool ParseTensorsFileName(const std::string& name, uint64_t* transfer);
// "<16 hex>.json" in DIR/staged.
bool ParseStagedName(const std::string& name, uint64_t* transfer);
// DurableFileWriter's temporary files: ".<final name>.tmp.<pid>.<n>".
bool IsTempName(const std::string& name);

std::string Join(const std::string& dir, const std::string& name);
std::string StagedDir(const std::string& dir);
std::string StagedJsonPath(const std::string& dir, uint64_t transfer);

// The whole file; kNotFound if it does not exist.
Result<std::string> ReadText(const std::string& path);
// Removes a file if present; a failure is reported but leaves nothing inconsistent.
Status RemoveFile(const std::string& path);
// The entries of a directory (none when it does not exist).
Result<std::vector<std::filesystem::directory_entry>> ListDir(const std::string& dir);

// baseline.json (current) or staged/<transfer>.json (staged).
struct Manifest {
  uint32_t producer = 0, producers = 1;
  Version version;
  uint64_t catalog_digest = 0;
  std::map<std::string, Digest128> tensor_digests;
  uint64_t transfer = 0;  // baseline.json: last_transfer; staged: the staged transfer
  std::string file;       // tensors file, relative to DIR
  Version base;           // staged only: the version the stage applies to
};

// Writes `m` to `path` atomically and durably (WriteFileAtomic).
Status WriteManifest(const std::string& path, const Manifest& m, bool staged);
// Parses and checks every field (kCorrupt naming the file and field; kUnsupported for another
// format number).
Result<Manifest> ParseManifest(const std::string& path, const std::string& text, bool staged);
Result<Manifest> ReadManifest(const std::string& path, bool staged);
// Staged manifests found in DIR/staged, by transfer (parse errors are returned).
Result<std::map<uint64_t, Manifest>> ReadStaged(const std::string& dir);

}  // namespace baseline_dir
}  // namespace dcr
