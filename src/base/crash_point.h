// Crash-point injection for recovery tests. When the environment variable DCR_CRASH_AT is
// "NAME:N", the process kills itself with SIGKILL (no cleanup, no flush: exactly what a power
// cut or OOM kill leaves) the N-th time (1-based) it reaches CrashPoint("NAME"). Unset, a crash
// point costs one relaxed atomic load. Names are listed in docs/refit.md §Crash points.
#pragma once

namespace dcr {

void CrashPoint(const char* name);

}  // namespace dcr
