// FLEX_ATTENTION on the CPU: attention under a FlexMask and FlexScoreMod over a paged KV cache in CPU_ATTN's
// layout and dtypes (cpu_attn/cpu_attn.h: (num_blocks, num_kv_heads, block_size, 2 * head_size); float32,
// bfloat16, float16, fp8), driven by a FlexBlockPlan of the same step. PRIVATE to flex_attention/.
//
// Work items are (query tile, kv head); each walks its tile's listed key blocks in ascending order with an
// online softmax in float32, evaluates the mask only on partial blocks, and never reads a skipped one. A
// row's reduction order depends only on its own sequence, so the result is batch invariant. A row that the
// mask leaves with no key at all gets zeros (as FlexAttention does).
#pragma once

#include <cstdint>
#include <functional>

#include "pagoda/attention/flex_attention/flex_mask.h"
#include "pagoda/attention/flex_attention/flex_plan.h"
#include "pagoda/core/dtype.h"

namespace pagoda {

struct FlexCpuParams {
  const float* query = nullptr;  // [num_tokens, num_q_heads, head_size], token stride query_stride
  int64_t query_stride = 0;      // elements; 0 = num_q_heads * head_size
  float* out = nullptr;          // [num_tokens, num_q_heads, head_size], contiguous
  const void* kv_cache = nullptr;
  DType cache_dtype = DType::kF32;
  int64_t num_blocks = 0;
  float k_scale = 1.0f, v_scale = 1.0f;      // fp8 caches only
  const int32_t* seq_lens = nullptr;         // [num_seqs], the plan's
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  int num_seqs = 0;
  int num_q_heads = 0, num_kv_heads = 0;     // num_q_heads % num_kv_heads == 0
  int head_size = 0, block_size = 0;         // block_size: the cache's tokens per block
  float scale = 0.0f;                        // 0 = 1 / sqrt(head_size)
  const FlexMask* mask = nullptr;            // the mask the plan was built from
  const FlexScoreMod* score_mod = nullptr;   // null: none
  const FlexBlockPlan* plan = nullptr;
  // Runs body(begin, end) over disjoint chunks of [0, n), possibly in parallel; null = serial.
  std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& body)> parallel_for;
};

// Writes every query row of the plan's tiles. Throws a runtime pagoda::Error for metadata that does not fit
// (a block id outside the cache, a table too short, score modifiers of the wrong size).
void flex_cpu_forward(const FlexCpuParams& p);

}  // namespace pagoda
