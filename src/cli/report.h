// Shared pieces of the command-line tool: exit codes, error printing, progress, formatting.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "base/status.h"
#include "protocol/delta_diff.h"

namespace dcr::cli {

// Exit codes (documented in `dcr --help` and docs/cli.md).
enum ExitCode : int {
  kExitOk = 0,
  kExitDifferent = 1,  // verify: the checkpoints differ
  kExitUsage = 2,      // bad command line or invalid argument
  kExitNotFound = 3,
  kExitIo = 4,
  kExitCorrupt = 5,    // delta or checkpoint fails checksum/structure checks
  kExitMismatch = 6,   // catalogs (names, dtypes, shapes) differ
  kExitWrongBase = 7,  // target does not hold the delta's base
  kExitUnsupported = 8,
  kExitInternal = 9,
};

int ExitCodeFor(const Status& s);
// Prints "dcr <command>: error: <status>" to stderr and returns the exit code.
int ReportError(const std::string& command, const Status& s);

// A progress reporter writing "\r<label> 42% (1.2 GiB / 2.9 GiB)" to stderr; silent unless
// stderr is a terminal or `force` is set.
ProgressFn MakeProgress(const std::string& label, bool force);

// Prints one JSON object on one line of stdout (the --json output of a command).
void PrintJson(const nlohmann::json& j);

std::string HumanBytes(double bytes);
std::string Fixed(double v, int digits);

}  // namespace dcr::cli
