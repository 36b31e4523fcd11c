// The FA2-class paged-attention kernel family: FlashAttention-2 over the paged KV cache, the kernels that
// TRITON_ATTN runs and that FLASH_ATTN runs as its version 2 (and, under version 3, for everything its FA3
// prefill kernel does not take). This header is the family's whole interface; the backends' folders hold
// their declarations and runners.
//
// One launch serves a batch that mixes prefill chunks and decode tokens. Kernels: a tensor-core kernel
// (mma.sync m16n8k16, bf16/fp16, head sizes that are multiples of 8 up to 256; paged_attention_kernel.cuh)
// with a decode-only instantiation for steps whose every tile has at most 16 query rows, a CUDA-core kernel
// for fp32 and the other head sizes, and the split-KV merge (split_kv_merge.cuh). Host side:
// plan_paged_attention turns the step's sequence lengths into a work list (query tiles x KV splits) once per
// step; run_paged_attention only launches (no allocation, no sync), so a decode step can be captured in a
// CUDA graph.
//
// Shapes and layouts:
//   q, out      [num_tokens, num_q_heads, head_size]      dtype (bf16, fp16 or fp32)
//   kv_cache    NHD: [num_blocks, block_size, num_kv_heads, 2*head_size]
//               HND: [num_blocks, num_kv_heads, block_size, 2*head_size]; K = [..., :head_size], V = rest
//               kv dtype: the model dtype, or fp8 e4m3/e5m2 (value = stored * k_scale / v_scale)
//   query_start_loc [num_seqs + 1], seq_lens [num_seqs] (context length including this step's tokens),
//   block_tables [num_seqs, max_blocks_per_seq]: all int32, device memory.
// Query token t of sequence s sits at position seq_lens[s] - q_len(s) + t and attends (causally) keys
// 0..pos, or only pos-window+1..pos with a sliding window.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "pagoda/core/kv_layout.h"
#include "pagoda/core/dtype.h"

namespace pagoda {

struct PagedAttentionParams {
  const void* q = nullptr;
  int64_t q_token_stride = 0;  // elements between consecutive tokens of q; 0 = num_q_heads * head_size
  void* out = nullptr;         // contiguous [num_tokens, num_q_heads, head_size]
  const void* kv_cache = nullptr;
  DType dtype = DType::kBF16;     // q/out: bf16, fp16, fp32
  DType kv_dtype = DType::kBF16;  // == dtype, or kF8E4M3 / kF8E5M2
  KvLayout layout = KvLayout::kNHD;
  int num_tokens = 0;
  int num_seqs = 0;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_size = 0;  // >= 32
  int block_size = 16;
  int block_size_log2 = -1;  // log2(block_size) when a power of two (set by run_paged_attention)
  int max_blocks_per_seq = 0;
  const int* query_start_loc = nullptr;
  const int* seq_lens = nullptr;
  const int* block_tables = nullptr;
  float scale = 0.0f;  // softmax scale, usually 1/sqrt(head_size)
  float k_scale = 1.0f;
  float v_scale = 1.0f;
  int sliding_window = 0;               // 0: none
  float softcap = 0.0f;                 // 0: none; else s = softcap * tanh(s / softcap)
  const float* alibi_slopes = nullptr;  // [num_q_heads] or null
  const float* sinks = nullptr;         // [num_q_heads] sink logits or null
  bool causal = true;
};

// Per-step host view of the batch, for planning.
struct AttentionBatchInfo {
  std::vector<int> query_lens;  // per sequence
  std::vector<int> seq_lens;    // per sequence (context incl. new tokens)
};

// Device work list and split-KV scratch, sized once for the largest batch.
class PagedAttentionWorkspace {
 public:
  PagedAttentionWorkspace() = default;
  ~PagedAttentionWorkspace();
  PagedAttentionWorkspace(const PagedAttentionWorkspace&) = delete;
  PagedAttentionWorkspace& operator=(const PagedAttentionWorkspace&) = delete;

  // Sizes the scratch for up to max_tokens tokens, max_seqs sequences and max_splits KV splits.
  void reserve(int max_tokens, int max_seqs, int num_q_heads, int head_size, int max_splits);

  int num_work_items = 0;  // CTAs of the main kernel
  int num_splits = 1;
  int* work = nullptr;     // device: per item {seq, row_start, split, num_splits_of_seq}
  float* partial_out = nullptr;  // device: [max_splits, split_tokens, num_q_heads, head_size]
  float* partial_ml = nullptr;   // device: [max_splits, split_tokens, num_q_heads, 2]
  int* host_work = nullptr;      // pinned staging of `work`
  int* split_counters = nullptr; // device: per (row group, KV head), for the decode kernel's in-place merge
  int capacity_items = 0;
  int max_tokens = 0, max_splits = 0, num_q_heads = 0, head_size = 0;
  // Steps of at most this many tokens may split KV (the partials' leading dimension): splitting pays only
  // when few query tiles exist, so the scratch need not scale with max_tokens.
  int split_tokens = 0;
  static constexpr int kMaxSplitTokens = 512;
  bool split_needs_merge = false;
  bool all_decode = false;  // every planned tile has <= 16 query rows
  bool merge_in_kernel = false;  // the decode kernel merges the splits (see in_kernel_merge_min_splits)
  bool merge_in_cluster = false;  // SM 9.0: the splits merge in thread-block clusters where they fit (cluster_merge)
  bool work_is_seq = false;       // work item i is {i, 0, 0, 1}: the kernels compute it instead of loading it
};

// CTAs of the fp8 decode kernel resident per SM (its registers and shared memory allow three): the unit the
// split planner fills the GPU in for fp8 decode steps and for steps that mix prefill and decode.
constexpr int kDecodeCtasPerSm = 3;

// KV splits of a decode-only step with `row_groups` decode CTAs before splitting (sequences x KV heads)
// and at most `max_kv_tiles` 64-key tiles per sequence, at most max_splits:
// - 16-bit KV: at most one CTA per SM (floor(SMs / groups)): one decode CTA streams most of an SM's share
//   of the bandwidth, a second CTA on a few SMs makes them the tail, and every split costs merge work;
//   each split keeps at least 2 tiles.
// - fp8 KV: the conversion makes CTAs, not bytes in flight, the unit of throughput: while groups < 2 waves
//   of 3 CTAs per SM, the split count with the shortest critical path in waves x (tiles per split + a CTA's
//   fixed cost), the fewest within 2%; at most fp8_cap splits (32 by default: past that, for fp8 KV, the
//   merge costs more than the fill gains) and at least 2 tiles per split.
constexpr int kFp8SplitCap = 32;
int decode_kv_splits(long row_groups, int max_kv_tiles, int num_sms, bool fp8_kv, int max_splits,
                     int fp8_cap = kFp8SplitCap);

// The sequences of a step that one plan covers, by query length: a caller that launches a step's decode
// tokens and its prefill chunks separately plans each with its own workspace.
enum class SeqFilter {
  kAll,
  kDecode,   // query length 1
  kPrefill,  // every other query length
};

struct PagedAttentionOptions {
  int num_sms = 132;
  int max_splits = 64;        // upper bound on KV splits (fixed under CUDA-graph capture)
  bool force_splits = false;  // use exactly max_splits (graph capture); else chosen from the work
  SeqFilter sequences = SeqFilter::kAll;
  bool fp8_kv = false;        // the KV cache holds fp8 (the split planner gives such steps more CTAs)
  int fp8_split_cap = kFp8SplitCap;  // decode_kv_splits's fp8_cap (TURBOQUANT: RunnerOptions::tq_split_cap)
  // SM 9.0: the KV splits of a decode step's row group run as one thread-block cluster and merge through
  // distributed shared memory inside the decode kernel, when all the step's clusters fit the GPU at once
  // (one CTA per SM); otherwise, and before SM 9.0, the separate merge kernel runs. Saves the boundary of
  // that second kernel. false: always the merge kernel (A/B runs).
  bool cluster_merge = true;
  // Decode steps with at least this many KV splits (> 0) merge them inside the decode kernel: in clusters
  // on SM 9.0 (as cluster_merge), in the last CTA of a row group before; otherwise the separate merge kernel
  // runs. 0 (the default): the last-CTA merge is off -- its instantiation carries the merge code in the
  // decode kernel, whose key loop then runs slower than the separate merge kernel costs.
  int in_kernel_merge_min_splits = 0;
  // Batch invariance: a sequence's output is bitwise the same whatever else the step holds. The plan then
  // runs every tile unsplit (one KV split, whatever force_splits and max_splits say: the split count is a
  // function of the whole step) and never the decode-only kernel (whether it runs depends on every tile of
  // the step, and it is a different instantiation): each tile runs the general kernel (tensor-core, or
  // CUDA-core for fp32 and other head sizes), whose arithmetic for a tile depends only on that tile's
  // sequence. The order of the work list still depends on the step; it decides which CTA runs a tile, not
  // what the tile computes. Costs decode steps their KV splits and the decode kernel's occupancy.
  bool batch_invariant = false;
};

// The host half of plan_paged_attention: the step's work list and what the launch needs to know of it,
// computed without a device (so the planner's rules are testable on any machine).
struct PagedWorkLimits {
  int max_splits = 1;    // the workspace's (reserve)
  int split_tokens = 0;  // the workspace's: steps of more tokens run unsplit
  int capacity = 0;      // room in `items`
};
struct PagedWorkPlan {
  int num_items = 0;  // work items, one CTA each per KV head
  int num_splits = 1;
  bool all_decode = false;        // every tile has <= 16 query rows: the decode-only kernel runs
  bool merge_in_kernel = false;   // see PagedAttentionWorkspace
  bool merge_in_cluster = false;
  bool work_is_seq = false;
};
// Writes items[0 .. num_items): {seq, row_start, split, num_splits} per work item.
PagedWorkPlan plan_paged_work(const AttentionBatchInfo& batch, int num_q_heads, int num_kv_heads,
                              const PagedAttentionOptions& options, const PagedWorkLimits& limits, int4* items);

// Builds the work list for this step (plan_paged_work) and uploads it (async on `stream`). Needs
// num_q_heads/num_kv_heads and head_size of the layer.
void plan_paged_attention(const AttentionBatchInfo& batch, int num_q_heads, int num_kv_heads, int head_size,
                          DType dtype, const PagedAttentionOptions& options, PagedAttentionWorkspace& ws,
                          cudaStream_t stream);

// Launches the kernels of the plan. No allocation, no synchronisation.
void run_paged_attention(const PagedAttentionParams& p, const PagedAttentionWorkspace& ws, cudaStream_t stream);

// True when the tensor-core kernel serves this configuration (bf16/fp16, head_size % 8 == 0, <= 256);
// otherwise the CUDA-core kernel runs (fp32, other head sizes).
bool paged_attention_uses_tensor_cores(DType dtype, int head_size);

}  // namespace pagoda
