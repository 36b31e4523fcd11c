// FLASHINFER on the CPU: the reference executor of a FiPlan (flashinfer_plan.h) over a paged KV cache of
// any page size in the NHD or HND layout, in float32 (the CPU runner) or float64 (the tests' proof that a
// plan computes attention). PRIVATE to flashinfer/.
//
// Cache of one layer: logical shape (num_blocks, num_kv_heads, block_size, 2 * head_size), K in
// [..., :head_size], V in [..., head_size:] (spec §10); in memory HND is the logical order and NHD is
// (num_blocks, block_size, num_kv_heads, 2 * head_size). Element types float32, bfloat16, float16 and fp8
// e4m3 / e5m2 (stored value = x / scale, per-tensor k_scale and v_scale).
//
// It runs what the kernels run: every (task, KV head) attends its rows (with the query heads of that KV
// head) over its key range with an online softmax, writing the output or a slab partial (o, lse); then the
// merge list combines the slabs of each merged token by log-sum-exp.
#pragma once

#include <cstdint>
#include <functional>

#include "pagoda/attention/flashinfer/flashinfer_plan.h"
#include "pagoda/core/dtype.h"
#include "pagoda/core/kv_layout.h"

namespace pagoda {

// Runs body(begin, end) over disjoint chunks of [0, n), possibly in parallel; null = serial.
using FiParallelFor = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& body)>;

struct FiCacheView {
  const void* data = nullptr;  // see the file comment
  DType dtype = DType::kF32;
  KvLayout layout = KvLayout::kNHD;
  int64_t num_blocks = 0;
  int num_kv_heads = 0, head_size = 0, block_size = 0;
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8 caches only
  // Element offset of (block, kv head, offset in the block, 0): K starts there, V head_size later.
  int64_t row(int64_t block, int head, int off) const {
    return layout == KvLayout::kHND ? ((block * num_kv_heads + head) * block_size + off) * 2 * head_size
                                    : ((block * block_size + off) * num_kv_heads + head) * 2 * head_size;
  }
};

template <typename T>
struct FiCpuParams {
  const T* query = nullptr;  // [num_tokens, num_q_heads, head_size], token stride query_stride
  int64_t query_stride = 0;  // elements; 0 = num_q_heads * head_size
  T* out = nullptr;          // [num_tokens, num_q_heads, head_size], contiguous
  FiCacheView cache;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]: the step the plan was built for
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, block_table_stride]
  int block_table_stride = 0;
  int num_seqs = 0;
  int num_q_heads = 0;
  float scale = 0.0f;    // 0 = 1 / sqrt(head_size)
  float softcap = 0.0f;  // > 0: s = softcap * tanh(s / softcap)
  const FiPlan* plan = nullptr;  // its shape gives the mask (window, causal) and the heads
  T* slab_o = nullptr;           // [plan->max_slabs(), num_q_heads, head_size] scratch
  T* slab_lse = nullptr;         // [plan->max_slabs(), num_q_heads] scratch (natural log)
  FiParallelFor parallel_for;
};

// Writes every token's output row. Throws a runtime pagoda::Error for metadata that does not fit the cache
// (a block id outside it, a table too short, a step other than the plan's).
template <typename T>
void fi_cpu_run(const FiCpuParams<T>& p);

struct FiCpuWriteKvParams {
  const float* key = nullptr;    // [num_tokens, num_kv_heads, head_size], token stride kv_stride
  const float* value = nullptr;  // same shape and stride
  int64_t kv_stride = 0;         // elements; 0 = num_kv_heads * head_size
  const int64_t* slot_mapping = nullptr;  // [num_tokens] block * block_size + offset; negative: skipped
  int64_t num_tokens = 0;
  void* cache = nullptr;  // the layout of `view` (view.data is ignored)
  FiCacheView view;
};

// Stores the step's new keys and values (rounded to the cache dtype, fp8 divided by its scale). Throws a
// runtime pagoda::Error for a slot outside the cache.
void fi_cpu_write_kv(const FiCpuWriteKvParams& p);

}  // namespace pagoda
