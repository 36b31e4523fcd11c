// FLEX_ATTENTION's CUDA kernels: attention under a FlexMask and FlexScoreMod over the paged KV cache, driven by
// the step's FlexBlockPlan. PRIVATE to flex_attention/.
//
// Shapes and layouts:
//   q, out     [num_tokens, num_q_heads, head_size] of dtype (float32, float16, bfloat16); q token stride q_stride
//   kv_cache   NHD [num_blocks, block_size, num_kv_heads, 2 * head_size] of kv_dtype (K, then V); the layout
//              FLEX_ATTENTION's kv_cache_shape gives
//   query_start_loc [num_seqs + 1], seq_lens [num_seqs], block_tables [num_seqs, max_blocks_per_seq]: int32,
//   device memory. Token i of a sequence's q_len new ones sits at position seq_len - q_len + i.
//
// A CTA takes 64 rows (query token x query head of one KV head's GQA group) of one tile of the plan and one KV
// head, walks the tile's listed key blocks in ascending order (in chunks of at most 64 keys), evaluates the
// mask program only on partial blocks and keeps an online softmax in float32. A row's arithmetic depends on
// its own sequence, its position and block_n only: the result is batch invariant. Rows the mask leaves with no
// key are zeros. Kernels: tensor cores (mma.sync m16n8k16, sm_80 and sm_90a) for float16 / bfloat16 at head
// sizes 64, 128 and 256 with kv_dtype == dtype; otherwise a CUDA-core kernel (any head size, float32 computed
// in float32).
//
// Plan, then run: reserve() allocates every buffer (device, pinned staging) for the limits; plan() builds the
// block plan on the host and uploads it with the mask program and the score modifiers in one asynchronous copy;
// flex_cuda_forward() only launches, so it can be captured in a CUDA graph. A workspace reserved for a
// captured decode batch (graph_batch > 0) plans no blocks: its CTAs read each sequence's context from the
// device and walk every key block of it with the mask evaluated on all of them, valid for any context, so a
// graph replay needs no plan; the result is bitwise the eager one (a block the mask leaves empty changes
// nothing: weight 0, rescale by exactly 1).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagoda/attention/flex_attention/flex_mask.h"
#include "pagoda/attention/flex_attention/flex_plan.h"
#include "pagoda/core/dtype.h"

namespace pagoda {

// The largest head size whose query row the CUDA-core kernel keeps in registers; past it, the row sits in
// shared memory (4 x head_size floats a CTA) and the output dimensions are split across CTAs.
constexpr int kFlexCudaRegisterHeadSize = 512;

struct FlexCudaParams {
  const void* q = nullptr;
  int64_t q_stride = 0;  // elements; 0 = num_q_heads * head_size
  void* out = nullptr;   // contiguous
  const void* kv_cache = nullptr;
  DType dtype = DType::kBF16;     // q / out
  DType kv_dtype = DType::kBF16;  // float32, float16 or bfloat16
  int num_q_heads = 0, num_kv_heads = 0, head_size = 0;
  int block_size = 16;  // the cache's tokens per block
  int max_blocks_per_seq = 0;
  int num_seqs = 0;
  const int32_t* query_start_loc = nullptr;
  const int32_t* seq_lens = nullptr;
  const int32_t* block_tables = nullptr;
  float scale = 0.0f;  // 0: 1 / sqrt(head_size)
};

struct FlexCudaLimits {
  int max_tokens = 0, max_seqs = 0, max_model_len = 0;
  int block_m = 64, block_n = 64;  // the plan's tiles; block_n one of 16, 32, 64, 128
  int num_q_heads = 0, num_kv_heads = 0;
  int graph_batch = 0;              // > 0: a captured decode step of this many sequences (see above)
  int max_mask_words = 1 << 14;     // the mask program, span tables and score modifiers, in 32-bit words
};

class FlexCudaWorkspace {
 public:
  FlexCudaWorkspace() = default;
  ~FlexCudaWorkspace();
  FlexCudaWorkspace(const FlexCudaWorkspace&) = delete;
  FlexCudaWorkspace& operator=(const FlexCudaWorkspace&) = delete;

  void reserve(const FlexCudaLimits& limits);
  // The step's plan (ignored in a graph workspace: query_lens / seq_lens may be null) with the mask and the
  // score modifiers, uploaded on `stream`. Waits for the previous plan's upload before reusing the staging.
  // Throws a runtime pagoda::Error for a step past the reserve, a config one for modifiers of the wrong size.
  void plan(const FlexMask& mask, const FlexScoreMod& mod, const int32_t* query_lens, const int32_t* seq_lens,
            int num_seqs, cudaStream_t stream);

  const FlexCudaLimits& limits() const { return limits_; }
  const FlexBlockPlan& host_plan() const { return plan_; }

  // What flex_cuda_forward reads (device pointers into one buffer, set by plan()).
  struct Device {
    const int2* items = nullptr;  // [num_items] {tile, first row}
    const FlexPlanTile* tiles = nullptr;
    const int32_t* entries = nullptr;
    FlexProgramView mask;
    FlexScoreModView mod;
    int num_items = 0;             // CTAs per KV head
    int graph_ctas_per_seq = 0;    // > 0: graph workspace
  };
  const Device& device() const { return dev_; }

 private:
  FlexCudaLimits limits_;
  FlexBlockPlan plan_;
  int32_t* buf_ = nullptr;      // device
  int32_t* staging_ = nullptr;  // pinned host
  size_t capacity_words_ = 0;
  size_t items_capacity_ = 0;
  cudaEvent_t uploaded_ = nullptr;
  bool upload_pending_ = false;
  Device dev_;
};

// True when the tensor-core kernel serves this configuration.
bool flex_cuda_uses_tensor_cores(DType dtype, DType kv_dtype, int head_size);

// Launches the kernels of the planned step. No allocation, no synchronisation. PRECOND: p's sequences are
// the planned ones (a graph workspace: at most graph_batch of one new token each, or none).
void flex_cuda_forward(const FlexCudaParams& p, const FlexCudaWorkspace& ws, cudaStream_t stream);

}  // namespace pagoda
