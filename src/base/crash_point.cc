#include "base/crash_point.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace dcr {
namespace {

struct CrashConfig {
  std::string name;
  long target = 0;  // 0: disabled
  std::atomic<long> hits{0};
};

CrashConfig& Config() {
  static CrashConfig* config = [] {
    auto* c = new CrashConfig;
    if (const char* env = std::getenv("DCR_CRASH_AT")) {
      std::string s(env);
      const size_t colon = s.rfind(':');
      if (colon != std::string::npos) {
        c->name = s.substr(0, colon);
        c->target = std::strtol(s.c_str() + colon + 1, nullptr, 10);
      }
    }
    return c;
  }();
  return *config;
}

}  // namespace

void CrashPoint(const char* name) {
  CrashConfig& c = Config();
  if (c.target <= 0 || c.name != name) return;
  if (c.hits.fetch_add(1) + 1 == c.target) {
    static const char msg[] = "dcr: DCR_CRASH_AT reached, SIGKILL\n";
    (void)!write(2, msg, sizeof(msg) - 1);
    kill(getpid(), SIGKILL);
  }
}

}  // namespace dcr
