// FLASHINFER's CUDA kernels over a FiPlan (flashinfer_plan.h): the attend kernels run every (task, KV head)
// of the plan, the merge kernel combines the slabs of the merged tokens by log-sum-exp. PRIVATE to
// flashinfer/.
//
// Two attend kernels execute the same plan. The tensor-core one (flashinfer_cuda_mma.cuh) serves head sizes
// 64/128/256: packed GQA rows in m16 tiles, K/V pages staged through shared memory, FP8 queries over e4m3
// caches on SM 8.9+. The SIMT one (flashinfer_cuda_row.cuh: one warp per packed row, lanes across the head
// dimension, K/V read from the cache) serves every other head size that is a multiple of 32 up to 512, and a
// cache of the other 16-bit dtype.
// Both take bf16/fp16 queries, bf16 / fp16 / fp8 e4m3 / e5m2 caches in NHD or HND with pages of any size,
// every plan (split, cascade, captured grid).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagoda/attention/flashinfer/flashinfer_plan.h"
#include "pagoda/core/dtype.h"
#include "pagoda/core/kv_layout.h"

namespace pagoda {

// A plan's arrays in device memory, sized for its capacities (FiPlan::max_*); fi_cuda_plan_upload() fills them.
struct FiDevicePlan {
  FiTask* tasks = nullptr;
  int32_t* row_token = nullptr;
  int32_t* row_seq = nullptr;
  int32_t* merge_token = nullptr;
  int32_t* merge_indptr = nullptr;
  int32_t* merge_slab = nullptr;
  float* slab_o = nullptr;    // [max_slabs, num_q_heads, head_size]
  float* slab_lse = nullptr;  // [max_slabs, num_q_heads]
  int num_tasks = 0, num_merged = 0;
  bool decode = false;  // fi_decode_plan(): the tensor-core decode kernel serves the plan
};

// Whether every task of `plan` packs at most 16 rows (its rows x the GQA group): decode steps at GQA <= 16,
// which the tensor-core decode kernel serves (one m-tile, a deeper pipeline).
inline bool fi_decode_plan(const FiPlan& plan) { return plan.max_task_rows() * plan.group_size() <= 16; }

// Allocates the device arrays for `plan`'s capacities (once, at reserve()); throws on a CUDA error.
void fi_cuda_plan_alloc(const FiPlan& plan, int num_q_heads, int head_size, FiDevicePlan* d);
void fi_cuda_plan_free(FiDevicePlan* d);
// Copies the step's plan into the reserved arrays on `stream` (asynchronous; the host arrays must stay
// unchanged until the copy is done).
void fi_cuda_plan_upload(const FiPlan& plan, FiDevicePlan* d, cudaStream_t stream);

struct FiCudaParams {
  const void* q = nullptr;  // [num_tokens, num_q_heads, head_size] of dtype, token stride q_stride
  int64_t q_stride = 0;     // elements; 0 = num_q_heads * head_size
  void* out = nullptr;      // [num_tokens, num_q_heads, head_size] of dtype, contiguous
  DType dtype = DType::kBF16;  // bf16 or fp16
  const void* kv_cache = nullptr;
  DType kv_dtype = DType::kBF16;  // dtype, or fp8 e4m3 / e5m2 (value = stored * scale)
  KvLayout layout = KvLayout::kNHD;
  int num_q_heads = 0, num_kv_heads = 0, head_size = 0, block_size = 0;
  int sliding_window = 0;
  bool causal = true;
  float scale = 0.0f;    // 0 = 1 / sqrt(head_size)
  float softcap = 0.0f;  // > 0: s = softcap * tanh(s / softcap)
  float k_scale = 1.0f, v_scale = 1.0f;
  // e4m3 caches on SM 8.9+: each packed query row is quantized to e4m3 (its own scale) and q.k runs FP8 MMA
  // (spec §6.5, unless disable_flashinfer_q_quantization). Ignored for other caches and devices.
  bool quantize_q = false;
  const int32_t* query_start_loc = nullptr;  // device, [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // device, [num_seqs]
  const int32_t* block_tables = nullptr;     // device, [num_seqs, block_table_stride]
  int block_table_stride = 0;
  FiDevicePlan plan;
};

// Whether this binary runs FP8 (e4m3) tensor-core products on the current device: an SM 8.9+ device and a
// kernel image built for it (an SM 8.0 image runs on SM 8.9 devices without them).
bool fi_fp8_mma_available();

// Attend CTAs of a layer of this configuration resident per SM on the current device: the planner's
// concurrency target is SMs times this. `quantize_q` as in FiCudaParams.
int fi_cuda_resident_ctas(DType dtype, DType kv_dtype, int head_size, bool quantize_q);

// Launches the attend and merge kernels of the uploaded plan (no allocation, no synchronisation). Throws a
// pagoda::Error for a configuration the kernels do not take (checked on the host).
void fi_cuda_run(const FiCudaParams& p, cudaStream_t stream);

}  // namespace pagoda
