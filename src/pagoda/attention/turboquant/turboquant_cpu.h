// TURBOQUANT on the CPU: the encode of a step's keys and values into packed slots, and paged attention that
// reads the packed cache directly (core/turboquant.h is the format). PRIVATE to attention/turboquant/: its
// runner, tests and benchmark use it.
//
// Cache of one layer: bytes of logical shape (num_blocks, num_kv_heads, block_size, slot_bytes), row-major
// (the HND layout of CPU_ATTN with a slot in place of a K/V row). A token at position `pos` of a sequence
// lives in block block_table[pos / block_size] at offset pos % block_size; its slot number is
// block * block_size + offset. Batches, positions and causality as in cpu_attn.h.
//
// Attention rotates each query once (the layer's signs and the chunked Hadamard transform, as the keys were)
// and scores it against the centroids of the key codes times norm / ||c|| (or norm / sqrt(d)), or against the
// FP8 rotated keys; the softmax is online in float32; values are accumulated from their codes as
// sum_j p_j zero_j + sum_j (p_j scale_j) code_j. A key/value block is decoded once into a small per-thread
// float tile that every query row of the work item reuses; nothing else is expanded.
//
// Threads: work items (sequence, KV head, query tile of up to 16 tokens, key range) are pulled from an atomic
// counter by `num_threads` bodies, each with its own scratch in the workspace, so a call allocates nothing.
// When a batch has fewer items than threads can balance, the contexts of single-token (decode) items are split
// into key ranges merged afterwards by their log-sum-exp.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pagoda/core/turboquant.h"

namespace pagoda {

// Runs body(begin, end) over disjoint chunks of [0, n), possibly in parallel; null = serial.
using TurboQuantCpuParallelFor = std::function<void(int64_t n, const std::function<void(int64_t, int64_t)>& body)>;

// What every call of one runner shares: the format, the heads and the codebook.
struct TurboQuantCpuShape {
  TurboQuantLayout layout;
  int num_q_heads = 0, num_kv_heads = 0;  // num_q_heads % num_kv_heads == 0
  int block_size = 0;
  float scale = 0.0f;                  // softmax scale; 0 = 1 / sqrt(head_size)
  std::vector<float> codebook;         // 2^key_bits centroids (turboquant_codebook); empty for FP8 keys
  std::vector<float> boundaries;       // turboquant_boundaries(codebook)
  float centroid_lut[16] = {};         // the codebook padded to 16 entries (the decoder's permute table)
};
// The shape of `preset` (a turboquant_* name) with its codebook; throws a config error for another name.
TurboQuantCpuShape turboquant_cpu_shape(const std::string& preset, int head_size, int num_q_heads, int num_kv_heads,
                                        int block_size, float scale);

struct TurboQuantCpuThreadScratch;  // turboquant_cpu_scratch.h

// Per-thread scratch and split-KV partials for `num_threads` bodies: allocated once, reused by every call.
class TurboQuantCpuWorkspace {
 public:
  TurboQuantCpuWorkspace(const TurboQuantCpuShape& shape, int num_threads);
  ~TurboQuantCpuWorkspace();
  int num_threads() const { return num_threads_; }
  int max_partials() const { return max_partials_; }
  TurboQuantCpuThreadScratch& thread(int i) const { return *threads_[size_t(i)]; }
  float* partial(int i) const { return partials_.get() + size_t(i) * partial_floats_; }
  // [head_size]: the sign bit (0 or 0x80000000) of the current layer's s_i; a call fills it before its threads
  // start, so one workspace serves one call at a time.
  uint32_t* sign_masks() const { return signs_.get(); }

 private:
  int num_threads_, max_partials_;
  size_t partial_floats_;
  std::vector<std::unique_ptr<TurboQuantCpuThreadScratch>> threads_;
  std::unique_ptr<float[]> partials_;
  std::unique_ptr<uint32_t[]> signs_;
};

// One unit of attention work: rows (tokens [t_begin, t_end) x the KV head's query heads) against the keys at
// positions [k_begin, k_end) of the sequence (each token also stops at its own position).
struct TurboQuantCpuItem {
  int32_t seq, kv_head, t_begin, t_end, k_begin, k_end;
  int32_t partial;  // -1: writes the output rows; else the partial slot holding this key range's result
};
// Split items of one (sequence, KV head, token): partials [first, first + count) combine into its rows.
struct TurboQuantCpuMerge {
  int32_t kv_head, token, first, count;
};
// The work of one step (built by turboquant_cpu_plan, once per step; reused by every layer).
struct TurboQuantCpuPlan {
  std::vector<TurboQuantCpuItem> items;  // costliest first
  std::vector<TurboQuantCpuMerge> merges;
  std::vector<int32_t> query_lens, seq_lens;  // the batch it was built for (run() checks its metadata)
  bool serial = true;                          // too little work to hand out
};
// query_lens / seq_lens as in AttentionBatch. Splits decode contexts only when the items are fewer than
// 8 x num_threads, into at most workspace.max_partials() partials.
void turboquant_cpu_plan(const TurboQuantCpuShape& shape, const TurboQuantCpuWorkspace& workspace,
                         const std::vector<int>& query_lens, const std::vector<int>& seq_lens, TurboQuantCpuPlan* plan);

struct TurboQuantCpuWriteKvParams {
  const float* key = nullptr;    // [num_tokens, num_kv_heads, head_size], token stride key_stride
  const float* value = nullptr;  // [num_tokens, num_kv_heads, head_size], token stride value_stride
  int64_t key_stride = 0, value_stride = 0;  // elements; 0 = num_kv_heads * head_size
  const int64_t* slot_mapping = nullptr;     // [num_tokens]; a negative slot skips the token (padding)
  int64_t num_tokens = 0;
  void* kv_cache = nullptr;  // see the file comment
  int64_t num_blocks = 0;
  int layer = 0;             // seeds the rotation
  TurboQuantCpuParallelFor parallel_for;  // null = serial
};
// Encodes every (token, KV head) into its slot. Throws a runtime pagoda::Error for a slot outside the cache.
void turboquant_cpu_write_kv(const TurboQuantCpuShape& shape, const TurboQuantCpuWriteKvParams& p,
                             TurboQuantCpuWorkspace& workspace);

struct TurboQuantCpuParams {
  const float* query = nullptr;  // [num_tokens, num_q_heads, head_size], token stride query_stride
  int64_t query_stride = 0;      // elements; 0 = num_q_heads * head_size
  float* out = nullptr;          // [num_tokens, num_q_heads, head_size], contiguous
  const void* kv_cache = nullptr;
  int64_t num_blocks = 0;
  const int32_t* query_start_loc = nullptr;  // [num_seqs + 1]
  const int32_t* seq_lens = nullptr;         // [num_seqs]
  const int32_t* block_tables = nullptr;     // [num_seqs, max_blocks_per_seq]
  int max_blocks_per_seq = 0;
  int num_seqs = 0;
  int layer = 0;  // seeds the query rotation: the keys' layer
  TurboQuantCpuParallelFor parallel_for;  // null = serial
};
// Writes every query token's output row. Throws a runtime pagoda::Error for metadata that does not match the
// plan or is malformed (a block id outside the cache, a table too short).
void turboquant_cpu_forward(const TurboQuantCpuShape& shape, const TurboQuantCpuPlan& plan, const TurboQuantCpuParams& p,
                            TurboQuantCpuWorkspace& workspace);

}  // namespace pagoda
