// PayloadChecksum's AVX2 build (payload_checksum.h): xxhash.h inlined (its functions renamed, so
// they do not clash with libxxhash's) and compiled for AVX2. Called only on CPUs with AVX2.
#if defined(__x86_64__)
#pragma GCC target("avx2")
#define XXH_INLINE_ALL
#define XXH_VECTOR XXH_AVX2
#include <immintrin.h>  // xxhash.h includes it only where the compiler's flags enable AVX2
#include <xxhash.h>

#include <cstddef>
#include <cstdint>

namespace dcr {

uint64_t PayloadChecksumAvx2(const uint8_t* p, size_t n) { return XXH3_64bits(p, n); }

}  // namespace dcr
#endif
