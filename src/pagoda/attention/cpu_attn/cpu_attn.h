// CPU_ATTN: paged attention on the CPU over a KV cache in the HND layout.
//
// Cache of one layer, logical shape (num_blocks, num_kv_heads, block_size, 2 * head_size), row-major:
// K of (block, head, offset) in [..., :head_size], V in [..., head_size:]. A token at position `pos` of a
// sequence lives in block block_table[pos / block_size] at offset pos % block_size; its slot is
// block * block_size + offset. Any block size and head size work. Cache dtypes: float32, bfloat16,
// float16, fp8 e4m3 / e5m2 (stored value = x / scale, per-tensor k_scale and v_scale).
//
// A batch is a list of sequences, each contributing a run of consecutive new query tokens (a prefill
// chunk, or one decode token); sequence s has query tokens [query_start_loc[s], query_start_loc[s+1]) and
// seq_lens[s] tokens in the cache after this step's write, so its i-th query token sits at position
// seq_lens[s] - q_len + i and attends, causally, to cache positions <= its own (within the sliding
// window, if any), or with causal = false to every position of its sequence past the window's start. Compute is float32 with an online softmax.
#pragma once

#include <cstdint>
#include <functional>

#include "pagoda/core/dtype.h"

namespace pagoda {

// Runs body(begin, end) over disjoint chunks of [0, n), possibly in parallel; null = serial.
using CpuAttnParallelFor = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& body)>;

struct CpuAttnWriteKvParams {
  const float* key = nullptr;    // [num_tokens, num_kv_heads, head_size], token stride key_stride
  const float* value = nullptr;  // [num_tokens, num_kv_heads, head_size], token stride value_stride
  int64_t key_stride = 0, value_stride = 0;  // elements; 0 = num_kv_heads * head_size
  const int64_t* slot_mapping = nullptr;  // [num_tokens]; a negative slot skips the token (padding)
  int64_t num_tokens = 0;
  void* kv_cache = nullptr;  // (num_blocks, num_kv_heads, block_size, 2 * head_size) of cache_dtype
  DType cache_dtype = DType::kF32;
  int64_t num_blocks = 0;
  int num_kv_heads = 0, head_size = 0, block_size = 0;
  float k_scale = 1.0f, v_scale = 1.0f;  // fp8 caches only
};

// Throws a runtime pagoda::Error for a slot outside the cache.
void cpu_attn_write_kv(const CpuAttnWriteKvParams& p);

struct CpuAttnParams {
  const float* query = nullptr;  // [num_tokens, num_q_heads, head_size], token stride query_stride
  int64_t query_stride = 0;      // elements; 0 = num_q_heads * head_size
  float* out = nullptr;          // [num_tokens, num_q_heads, head_size], token stride out_stride
  int64_t out_stride = 0;        // elements; 0 = num_q_heads * head_size
  const void* kv_cache = nullptr;  // see the file comment
  DType cache_dtype = DType::kF32;
  int64_t num_blocks = 0;
  float k_scale = 1.0f, v_scale = 1.0f;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1], non-decreasing, query_start_loc[0] == 0
  const int32_t* seq_lens = nullptr;         // [num_seqs], >= that sequence's query length
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  int num_seqs = 0;
  int num_q_heads = 0, num_kv_heads = 0;  // num_q_heads % num_kv_heads == 0; q head h uses kv head
                                          // h / (num_q_heads / num_kv_heads)
  int head_size = 0, block_size = 0;
  float scale = 0.0f;      // softmax scale; 0 = 1 / sqrt(head_size)
  int sliding_window = 0;  // > 0: a query at position p sees keys at positions > p - sliding_window
  bool causal = true;      // false: a query also sees the keys after its own position
  CpuAttnParallelFor parallel_for;  // null = serial
};

// Writes every query token's output row. Throws a runtime pagoda::Error for malformed metadata (a
// query length above the context length, a block id outside the cache, a table too short).
void cpu_attn_forward(const CpuAttnParams& p);

}  // namespace pagoda
