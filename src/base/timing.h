// Wall-clock timing of pipeline stages (reported in stats, never asserted on).
#pragma once

#include <chrono>

namespace dcr {

using Clock = std::chrono::steady_clock;

inline double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace dcr
