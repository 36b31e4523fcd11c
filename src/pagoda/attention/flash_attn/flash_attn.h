// FLASH_ATTN: pagoda's FlashAttention kernels over the paged KV cache (NHD; HND when forced).
//
// Two versions, resolved by the selector (spec §6.1) and passed in FlashAttnOptions::version:
//   FA2 (SM 8.0+): the paged-attention family of paged/ (paged_attention.h), which TRITON_ATTN runs too:
//       the FlashAttention-2 algorithm on mma.sync/ldmatrix/cp.async tiles, varlen causal prefill and
//       decode with split-KV + log-sum-exp merge, GQA packing, sliding window, soft-cap, ALiBi, sinks, head
//       sizes up to 256 (instantiated 32/64/128/256, others run the next one up with masked loads),
//       bf16/fp16 with KV in the model dtype or fp8. FLASH_ATTN plans it with plan_paged_attention.
//   FA3 (SM 9.0, kernels compiled for sm_90a): prefill chunks (query length > 1) run a
//       FlashAttention-3-class kernel (fa3_prefill_kernel.cuh): a producer warpgroup and two consumer
//       warpgroups (warp specialization, ping-pong between the consumers, the next tile's S = Q K^T issued
//       before the current P V so the softmax overlaps the tensor cores), wgmma for both GEMMs, Q by TMA,
//       K/V tiles by TMA bulk tensor loads when every cache block holds whole tiles (block size a multiple
//       of 128; 80 at head 256) or gathered page by page with cp.async otherwise, completing on mbarriers;
//       sinks, sliding window, soft-cap. Head sizes 64, 128 and 256, bf16/fp16. With a KV staging buffer
//       (reserve_kv_stage) a step whose blocks do not hold whole tiles, or whose KV is fp8 (e4m3/e5m2,
//       per-tensor k_scale/v_scale), first copies its prefill context into contiguous blocks in the model
//       dtype and FA3 reads those by TMA (flash_attn/kv_stage.h). Everything else in an FA3 step (decode
//       tokens, other head sizes, ALiBi, fp8 KV that does not fit the buffer) runs the FA2 kernels in the
//       same step.
//
// Host side as the paged family's: plan once per step (may upload a work list), run() only launches, so a
// decode step can be captured in a CUDA graph. What is FLASH_ATTN's alone lives here: the FA3 prefill kernel
// (fa3_prefill.h), KV staging (kv_stage.h) and version resolution (fa_version.h).
#pragma once

#include <cuda_runtime_api.h>

#include "pagoda/attention/paged/paged_attention.h"

namespace pagoda {

struct FlashAttnOptions {
  int version = 2;   // the resolved FlashAttention version: 2 or 3
  int num_sms = 132;
  int max_splits = 64;        // KV splits of the FA2 decode kernel (fixed under CUDA-graph capture)
  bool force_splits = false;  // exactly max_splits (graph capture)
  int in_kernel_merge_min_splits = 0;  // see PagedAttentionOptions (0: the separate merge kernel)
  bool cluster_merge = true;           // see PagedAttentionOptions (SM 9.0 decode splits merge in clusters)
  // Batch invariance: a sequence's output is bitwise the same whatever else the step holds. The FA2 plan
  // gets PagedAttentionOptions::batch_invariant (one KV split, no decode-only kernel), and fp8 KV is never
  // staged, so fp8 prefill chunks run FA2: whether a step's context fits the staging buffer depends on the
  // whole step, and a staged fp8 chunk runs FA3 where an unstaged one runs FA2. Which kernel a sequence
  // runs then depends on its own query length alone (FA3: > 1, 16-bit KV, an FA3 layer shape). 16-bit KV
  // may still stage: the staged copy holds the same values, and the FA3 kernel computes the same tiles
  // (kBlockN keys, last tile first, the same wgmma and softmax code) whether they arrive by TMA or by the
  // cp.async gather; only keys past the context differ (zeros, or what the cache holds), and those are
  // masked to P = 0 -- PRECOND: the cache holds finite values there (0 x NaN would not vanish).
  bool batch_invariant = false;
};

class FlashAttnWorkspace {
 public:
  FlashAttnWorkspace() = default;
  ~FlashAttnWorkspace();
  FlashAttnWorkspace(const FlashAttnWorkspace&) = delete;
  FlashAttnWorkspace& operator=(const FlashAttnWorkspace&) = delete;

  // Sizes the scratch for up to max_tokens tokens and max_seqs sequences of a layer shape.
  void reserve(int max_tokens, int max_seqs, int num_q_heads, int head_size, int max_splits);
  // The FA3 KV staging buffer: room for `tokens` context tokens of the step's prefill sequences (plus a
  // partial last block for up to 32 of them), num_kv_heads x 2 x head_size elements of `dtype` each; steps
  // of up to max_seqs sequences may stage.
  // tokens = 0 frees it (no staging: block-16 steps gather pages, fp8 prefill runs FA2).
  void reserve_kv_stage(int tokens, int max_seqs, int num_kv_heads, int head_size, DType dtype);

  // Blocks of the KV cache allocation that run_flash_attention reads (0: unknown): the bound of the FA3
  // kernel's tensor map over the cache. Set by the caller once the cache is allocated.
  int cache_blocks = 0;

  PagedAttentionWorkspace fa2;  // every sequence, or only the decode sequences when fa3_items > 0
  int fa3_items = 0;            // query tiles of the FA3 prefill kernel this step (0: FA3 kernel not launched)
  int* fa3_work = nullptr;      // device: per tile {seq, m_block, q_start, q_len}
  int* fa3_host = nullptr;      // pinned staging
  int fa3_capacity = 0;
  bool fa3_only = false;        // every sequence of the step runs the FA3 kernel (the FA2 plan is empty)

  // KV staging (reserve_kv_stage); the plan fills the block list when the step's FA3 context fits.
  void* kv_stage = nullptr;          // [kv_stage_blocks * 128 tokens][num_kv_heads][2][head_size]
  int kv_stage_blocks = 0;           // capacity in 128-token blocks
  int* stage_first_block = nullptr;  // device [max_seqs]
  int* stage_blocks = nullptr;       // device int2 [kv_stage_blocks]: {seq, block within the sequence}
  int* stage_host = nullptr;         // pinned: first_block then blocks
  int stage_max_seqs = 0;
  int stage_count = 0;               // staged blocks planned this step (0: the step is not staged)
};

// True when this binary has the FA3 kernels and the current device is SM 9.0.
bool flash_attn_fa3_supported();

// True when the FA3 kernel serves a layer of this shape (head size, dtypes, no ALiBi).
bool flash_attn_fa3_serves(int head_size, DType dtype, DType kv_dtype, bool alibi);

// Builds this step's work lists (FA3 prefill tiles, FA2 tiles/splits) and uploads them async on `stream`.
void plan_flash_attention(const AttentionBatchInfo& batch, int num_q_heads, int num_kv_heads, int head_size,
                          DType dtype, DType kv_dtype, bool alibi, const FlashAttnOptions& options,
                          FlashAttnWorkspace& ws, cudaStream_t stream);

// Launches the kernels of the plan. No allocation, no synchronisation.
void run_flash_attention(const PagedAttentionParams& p, const FlashAttnWorkspace& ws, cudaStream_t stream);

}  // namespace pagoda
