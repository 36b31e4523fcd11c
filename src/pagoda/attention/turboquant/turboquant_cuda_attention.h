// The TurboQuant attention kernels (CUDA; PRIVATE to turboquant/): attention of bf16/fp16 queries over a packed
// `turboquant_*` cache (core/turboquant.h) that the RoPE + cache-write kernel filled (ops/cuda/rope_kv.h). No
// key or value is ever written back in another format: the kernels decode codes in registers.
//
// One launch serves a step that mixes prefill chunks and decode tokens, over the paged planner's work list
// (plan_paged_attention of paged/paged_attention.h: query tiles of 64 rows x KV splits, split counts, the
// split scratch), so planning and graph capture work as for the paged kernels; split KV is merged by the
// paged family's merge (split_kv_merge.cuh). Head sizes 64, 128 and 256 run the tensor-core kernel
// (turboquant_cuda_kernel.cuh); every other head size up to kTurboQuantMaxHeadSize runs a CUDA-core kernel over
// the same work list. Causal attention only (the backend declares no other).
//
// Shapes:
//   q     [num_tokens, num_q_heads, head_size], token stride q_stride elements; out contiguous, same dtype
//   cache [num_blocks, num_kv_heads, block_size, slot_bytes] bytes, 16-byte aligned (spec §10)
//   query_start_loc [num_seqs + 1], seq_lens [num_seqs], block_tables [num_seqs, max_blocks_per_seq]: int32
// Query token t of sequence s sits at position seq_lens[s] - q_len(s) + t and attends keys 0..pos.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagoda/attention/paged/paged_attention.h"
#include "pagoda/core/dtype.h"

namespace pagoda {

// The largest head size the kernels serve (the CUDA-core kernel's per-lane registers).
constexpr int kTurboQuantMaxHeadSize = 512;

struct TurboQuantAttentionParams {
  const void* q = nullptr;
  int64_t q_stride = 0;  // elements between consecutive tokens of q; 0 = num_q_heads * head_size
  void* out = nullptr;
  const void* kv_cache = nullptr;
  DType dtype = DType::kBF16;  // q and out: kBF16 or kF16
  int key_bits = 4, value_bits = 4;  // the preset (core/turboquant.h): keys 3, 4 or 8 (FP8), values 3 or 4
  bool norm_correction = true;
  int num_tokens = 0, num_seqs = 0, num_q_heads = 0, num_kv_heads = 0, head_size = 0;
  int block_size = 16;  // a multiple of 16
  int max_blocks_per_seq = 0;
  const int* query_start_loc = nullptr;
  const int* seq_lens = nullptr;
  const int* block_tables = nullptr;
  float scale = 0.f;  // softmax scale
  int layer = 0;      // the model layer: the seed of the key rotation
  float centroids[16] = {};  // turboquant_codebook(key_bits, head_size) (3/4-bit keys)
  // The longest query of the planned step (0: not known). A decode-only step with max_query_len x GQA <= 8 runs
  // the decode body (turboquant_cuda_decode.cuh); every other step the general one.
  int max_query_len = 0;
};

// True when the tensor-core kernel serves this head size (64, 128, 256); other sizes up to
// kTurboQuantMaxHeadSize run the CUDA-core kernel.
bool turboquant_attention_uses_tensor_cores(int head_size);

// CTAs of the kernel that serves the preset and head size resident per SM of the current device (its
// registers and shared memory): the unit the split planner fills the GPU in. decode8: the decode body's.
int turboquant_attention_ctas_per_sm(int key_bits, int value_bits, bool norm_correction, int head_size, bool decode8);

// Launches the kernels of the work list planned in `ws` (plan_paged_attention with the layer's heads and
// head size). No allocation, no synchronisation: graph-safe.
void turboquant_attention(const TurboQuantAttentionParams& p, const PagedAttentionWorkspace& ws, cudaStream_t stream);

}  // namespace pagoda
