#include "codec/second_part_walker.h"

#include <atomic>

namespace dcr {
namespace {

std::atomic<SecondPartWalker> g_second_part_walker{SecondPartWalker::kClaimed};

}  // namespace

void SetSecondPartWalkerForTests(SecondPartWalker walker) { g_second_part_walker.store(walker); }
SecondPartWalker GetSecondPartWalkerForTests() { return g_second_part_walker.load(std::memory_order_relaxed); }

}  // namespace dcr
