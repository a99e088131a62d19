// Layout generators for Llama/Qwen-style models (shared/notes/layout-facts.md is the reference
// for every name, fusion, split and padding rule).
//
// Training, Megatron-Core with the TransformerEngine spec: ranks ordered tp fastest, then ep, then
// pp (rank = tp_rank + tp * (ep_rank + ep * pp_rank)), data-parallel size = ep (expert parallelism
// is carved out of data parallelism, so non-expert tensors are replicated over ep ranks and owned by
// ep_rank 0). Fused QKV in grouped-query order cut in contiguous row chunks, fused gate+up, layers
// renumbered per pipeline stage (even split), experts as SequentialMLP local_experts with expert
// tensor parallelism = tp, vocabulary padded to a multiple of 128 * tp (padding rows repeat the last
// row), tied output layer copied on the last stage when pp > 1.
//
// Serving, vLLM: rank = pp_rank * tp + tp_rank; fused qkv_proj ([q; k; v] rows of the rank, key/value
// heads replicated when tp > n_kv and owned by the first rank holding each), gate_up_proj, global
// layer names, uneven pipeline remainders on the second-to-last stages first, vocabulary padded to a
// multiple of 64 (zero rows), lm_head tied to embed_tokens, fused MoE w13/w2 (expert parallelism: ep =
// tp, experts in contiguous blocks, expert TP 1). Local tensors may use another float dtype than the
// checkpoint (pieces then convert).
#pragma once

#include <cstdint>

#include "base/status.h"
#include "layout/layout.h"
#include "layout/model_config.h"

namespace dcr {

struct ParallelSizes {
  uint32_t tp = 1, pp = 1, ep = 1;
};

inline constexpr uint64_t kMegatronVocabDivisor = 128;  // --make-vocab-size-divisible-by default
inline constexpr uint64_t kVllmVocabPadding = 64;

// Parallel sizes the model cannot be split into are kInvalidArgument naming the constraint.
Result<LayoutSet> GenerateMegatronLayouts(const ModelSpec& model, const ParallelSizes& sizes);
Result<LayoutSet> GenerateVllmLayouts(const ModelSpec& model, const ParallelSizes& sizes, DType local_dtype);

// vLLM's get_pp_indices: [first, end) layers of pipeline stage `stage`.
std::pair<uint64_t, uint64_t> VllmStageLayers(uint64_t layers, uint32_t stage, uint32_t stages);

}  // namespace dcr
