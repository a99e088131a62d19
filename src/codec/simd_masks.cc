// Highway dynamic dispatch: this file is compiled once per target by foreach_target.h; the
// HWY_ONCE part at the end holds the dispatching entry points.
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "codec/simd_masks.cc"
#include <hwy/foreach_target.h>  // IWYU pragma: keep

#include <hwy/highway.h>

#include <atomic>

#include "base/status.h"
#include "codec/simd_masks-inl.h"
#include "codec/diff_extract-inl.h"  // after simd_masks-inl.h: uses PopCount64
#include "codec/simd_masks.h"

HWY_BEFORE_NAMESPACE();
namespace dcr {
namespace HWY_NAMESPACE {

size_t DifferMasksImpl(const uint8_t* a, const uint8_t* b, uint32_t width, size_t count, uint64_t* masks) {
  return DifferMasksAnyWidth(a, b, width, count, masks);
}
void ClassAtLeastMasksImpl(const uint8_t* e, uint32_t width, size_t count, int shift, uint32_t cm, const uint8_t* t,
                           int k, uint64_t* out) {
  ClassAtLeastMasksAnyWidth(e, width, count, shift, cm, t, k, MaskOut{out, (count + 63) / 64, 1});
}
size_t ExtractChangesImpl(const uint8_t* base, const uint8_t* next, uint32_t width, size_t count,
                          const uint64_t* masks, size_t differ, bool is_xor, uint32_t first, uint32_t* positions,
                          uint8_t* values, uint8_t* old_bits) {
  return ExtractChangesAnyWidth(base, next, width, count, masks, differ, is_xor, first, positions, values, old_bits);
}
size_t DiffExtractTileImpl(const uint8_t* base, const uint8_t* next, uint32_t width, size_t count, bool is_xor,
                           uint32_t first, uint32_t* positions, uint8_t* values, uint8_t* old_bits) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  if (width == 2)
    return old_bits != nullptr ? DiffExtract16<true>(base, next, count, is_xor, first, positions, values, old_bits)
                               : DiffExtract16<false>(base, next, count, is_xor, first, positions, values, old_bits);
#endif
  uint64_t masks[kMaskTileElements / 64];
  const size_t differ = DifferMasksAnyWidth(base, next, width, count, masks);
  return ExtractChangesAnyWidth(base, next, width, count, masks, differ, is_xor, first, positions, values, old_bits);
}
bool FusedDiffExtractImpl(uint32_t width) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  return width == 2;
#else
  return (void)width, false;
#endif
}
int64_t TargetOfThisCode() { return HWY_TARGET; }

}  // namespace HWY_NAMESPACE
}  // namespace dcr
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace dcr {

HWY_EXPORT(DifferMasksImpl);
HWY_EXPORT(ClassAtLeastMasksImpl);
HWY_EXPORT(ExtractChangesImpl);
HWY_EXPORT(DiffExtractTileImpl);
HWY_EXPORT(FusedDiffExtractImpl);
HWY_EXPORT(TargetOfThisCode);

size_t DifferMasks(const uint8_t* a, const uint8_t* b, uint32_t width, size_t count, uint64_t* masks) {
  return HWY_DYNAMIC_DISPATCH(DifferMasksImpl)(a, b, width, count, masks);
}

size_t ExtractChanges(const uint8_t* base, const uint8_t* next, uint32_t width, size_t count, const uint64_t* masks,
                      size_t differ, bool is_xor, uint32_t first, uint32_t* positions, uint8_t* values,
                      uint8_t* old_bits) {
  return HWY_DYNAMIC_DISPATCH(ExtractChangesImpl)(base, next, width, count, masks, differ, is_xor, first, positions,
                                                  values, old_bits);
}

size_t DiffExtractTile(const uint8_t* a, const uint8_t* b, uint32_t width, size_t count, bool is_xor, uint32_t first,
                       uint32_t* positions, uint8_t* values, uint8_t* old_bits) {
  DCR_CHECK(count <= kMaskTileElements);
  return HWY_DYNAMIC_DISPATCH(DiffExtractTileImpl)(a, b, width, count, is_xor, first, positions, values, old_bits);
}

bool FusedDiffExtract(uint32_t width) { return HWY_DYNAMIC_DISPATCH(FusedDiffExtractImpl)(width); }

void ClassAtLeastMasks(const uint8_t* elems, uint32_t width, size_t count, int shift, uint32_t class_mask,
                       const uint8_t* thresholds, int k, uint64_t* out) {
  HWY_DYNAMIC_DISPATCH(ClassAtLeastMasksImpl)(elems, width, count, shift, class_mask, thresholds, k, out);
}

namespace {
std::atomic<bool> g_no_gfni{false};
}  // namespace

void ForceNoGfniForTests(bool no_gfni) { g_no_gfni.store(no_gfni); }

bool CpuHasGfni() {
  if (g_no_gfni.load(std::memory_order_relaxed)) return false;
#if defined(__x86_64__) || defined(__i386__)
  static const bool has = [] {
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    return __get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0 && (ecx & (1u << 8)) != 0;  // CPUID.7.0:ECX.GFNI
  }();
  return has;
#else
  return false;
#endif
}

std::vector<int64_t> CompiledSimdTargets() { return hwy::SupportedAndGeneratedTargets(); }
void ForceSimdTarget(int64_t target) { hwy::SetSupportedTargetsForTest(target); }
const char* SimdTargetName(int64_t target) { return hwy::TargetName(target); }
const char* ActiveSimdTargetName() { return hwy::TargetName(HWY_DYNAMIC_DISPATCH(TargetOfThisCode)()); }

}  // namespace dcr
#endif  // HWY_ONCE
