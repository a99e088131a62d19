// PayloadChecksum's AVX2 build (payload_checksum.h): xxhash.h inlined (its functions renamed, so
// they do not clash with libxxhash's) and compiled with -mavx2 (src/CMakeLists.txt, on x86-64).
// Called only on CPUs with AVX2. Nothing else may be included here: an inline function of a
// shared header compiled for AVX2 here could be the copy the linker keeps for every caller.
#if defined(__x86_64__)
#ifndef __AVX2__
#error "payload_checksum_avx2.cc must be compiled with -mavx2"
#endif
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <xxhash.h>

namespace dcr {

uint64_t PayloadChecksumAvx2(const uint8_t* p, size_t n) { return XXH3_64bits(p, n); }

}  // namespace dcr
#endif
