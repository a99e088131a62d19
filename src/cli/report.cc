#include "cli/report.h"

#include <unistd.h>

#include <chrono>
#include <memory>
#include <cstdio>

namespace dcr::cli {

int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk: return kExitOk;
    case StatusCode::kInvalidArgument: return kExitUsage;
    case StatusCode::kNotFound: return kExitNotFound;
    case StatusCode::kIoError: return kExitIo;
    case StatusCode::kCorrupt: return kExitCorrupt;
    case StatusCode::kMismatch: return kExitMismatch;
    case StatusCode::kWrongBase: return kExitWrongBase;
    case StatusCode::kUnsupported: return kExitUnsupported;
    case StatusCode::kInternal: return kExitInternal;
  }
  return kExitInternal;
}

int ReportError(const std::string& command, const Status& s) {
  std::fprintf(stderr, "dcr %s: error: %s\n", command.c_str(), s.ToString().c_str());
  return ExitCodeFor(s);
}

ProgressFn MakeProgress(const std::string& label, bool force) {
  if (!force && !::isatty(STDERR_FILENO)) return nullptr;
  auto last = std::make_shared<std::chrono::steady_clock::time_point>();
  return [label, last](uint64_t done, uint64_t total) {
    auto now = std::chrono::steady_clock::now();
    if (done < total && now - *last < std::chrono::milliseconds(200)) return;
    *last = now;
    double pct = total ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0;
    std::fprintf(stderr, "\r%s %5.1f%% (%s / %s)%s", label.c_str(), pct, HumanBytes(static_cast<double>(done)).c_str(),
                 HumanBytes(static_cast<double>(total)).c_str(), done >= total ? "\n" : "");
    std::fflush(stderr);
  };
}

void PrintJson(const nlohmann::json& j) { std::printf("%s\n", j.dump().c_str()); }

std::string HumanBytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) b /= 1024, ++u;
  char buf[32];
  std::snprintf(buf, sizeof(buf), u == 0 ? "%.0f %s" : "%.2f %s", b, units[u]);
  return buf;
}

std::string Fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

}  // namespace dcr::cli
