// For tests: who takes which share of a payload's two-thread coding work (band parts, the
// value section's second half). kClaimed: whichever thread claims it first (the default).
// kHelperPath: the helper always comes (it is waited for) and takes every part but the first.
// kCallerWalksOn: the calling thread does everything. So each path runs whatever the timing. Process-wide; tests set it, the codec reads it.
#pragma once

namespace dcr {

enum class SecondPartWalker { kClaimed, kHelperPath, kCallerWalksOn };
void SetSecondPartWalkerForTests(SecondPartWalker walker);
SecondPartWalker GetSecondPartWalkerForTests();

}  // namespace dcr
