#include "pagoda/attention/flash_attn/flash_attn.h"

#include <algorithm>
#include <vector>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/device_caps.h"
#include "pagoda/attention/flash_attn/fa3_prefill.h"
#include "pagoda/core/error.h"

namespace pagoda {

using flash_attn_detail::kFa3MinBlockM;

FlashAttnWorkspace::~FlashAttnWorkspace() {
  cudaFree(fa3_work);
  cudaFreeHost(fa3_host);
  reserve_kv_stage(0, 0, 0, 0, DType::kBF16);
}

void FlashAttnWorkspace::reserve_kv_stage(int tokens, int max_seqs, int num_kv_heads, int head_size, DType dtype) {
  cudaFree(kv_stage);
  cudaFree(stage_first_block);
  cudaFree(stage_blocks);
  cudaFreeHost(stage_host);
  kv_stage = nullptr;
  stage_first_block = stage_blocks = stage_host = nullptr;
  kv_stage_blocks = stage_max_seqs = stage_count = 0;
  if (tokens <= 0) return;
  constexpr int kBlock = flash_attn_detail::kStageBlock;
  // Each staged sequence may end in a partial block: room for up to 32 of them.
  kv_stage_blocks = (tokens + kBlock - 1) / kBlock + std::min(max_seqs, 32);
  stage_max_seqs = max_seqs;
  const size_t bytes = size_t(kv_stage_blocks) * kBlock * num_kv_heads * 2 * head_size * dtype_size(dtype);
  PAGODA_CUDA_OK(cudaMalloc(&kv_stage, bytes));
  PAGODA_CUDA_OK(cudaMalloc(&stage_first_block, sizeof(int) * size_t(max_seqs)));
  PAGODA_CUDA_OK(cudaMalloc(&stage_blocks, sizeof(int2) * size_t(kv_stage_blocks)));
  // Pinned staging: first_block, then (at an even int offset, for int2) the block list.
  PAGODA_CUDA_OK(cudaMallocHost(&stage_host, sizeof(int) * (size_t(max_seqs + 1) + 2 * size_t(kv_stage_blocks))));
}

void FlashAttnWorkspace::reserve(int max_tokens, int max_seqs, int num_q_heads, int head_size, int max_splits) {
  fa2.reserve(max_tokens, max_seqs, num_q_heads, head_size, max_splits);
  cudaFree(fa3_work);
  cudaFreeHost(fa3_host);
  fa3_work = nullptr;
  fa3_host = nullptr;
  fa3_capacity = max_tokens / kFa3MinBlockM + max_seqs + 1;
  PAGODA_CUDA_OK(cudaMalloc(&fa3_work, sizeof(int4) * size_t(fa3_capacity)));
  PAGODA_CUDA_OK(cudaMallocHost(&fa3_host, sizeof(int4) * size_t(fa3_capacity)));
}

bool flash_attn_fa3_supported() {
  const attention_host::ComputeCapability cc = attention_host::device_compute_capability();
  return cc.major == 9 && cc.minor == 0 && flash_attn_detail::fa3_kernel_built();
}

bool flash_attn_fa3_serves(int head_size, DType dtype, DType kv_dtype, bool alibi) {
  const bool fp8 = dtype_is_fp8(kv_dtype);  // served through KV staging
  return (head_size == 64 || head_size == 128 || head_size == 256) && (dtype == DType::kBF16 || dtype == DType::kF16) &&
         (kv_dtype == dtype || fp8) && !alibi;
}

namespace {

// Lays out the context of the FA3 sequences (query length > 1) in staged blocks and uploads the lists;
// returns false (nothing staged) when they do not fit the buffer.
bool plan_kv_stage(const AttentionBatchInfo& batch, FlashAttnWorkspace& ws, cudaStream_t stream) {
  ws.stage_count = 0;
  const size_t n = batch.query_lens.size();
  if (ws.kv_stage_blocks == 0 || int(n) > ws.stage_max_seqs) return false;
  constexpr int kBlock = flash_attn_detail::kStageBlock;
  int* first = ws.stage_host;
  int2* blocks = reinterpret_cast<int2*>(ws.stage_host + ((ws.stage_max_seqs + 1) & ~1));
  int count = 0;
  for (size_t s = 0; s < n; ++s) {
    first[s] = -1;
    if (batch.query_lens[s] <= 1) continue;
    const int nb = (batch.seq_lens[s] + kBlock - 1) / kBlock;
    if (count + nb > ws.kv_stage_blocks) return false;
    first[s] = count;
    for (int b = 0; b < nb; ++b) blocks[count + b] = make_int2(int(s), b);
    count += nb;
  }
  if (count == 0) return false;
  PAGODA_CUDA_OK(cudaMemcpyAsync(ws.stage_first_block, first, sizeof(int) * n, cudaMemcpyHostToDevice, stream));
  PAGODA_CUDA_OK(cudaMemcpyAsync(ws.stage_blocks, blocks, sizeof(int2) * size_t(count), cudaMemcpyHostToDevice, stream));
  ws.stage_count = count;
  return true;
}

}  // namespace

void plan_flash_attention(const AttentionBatchInfo& batch, int num_q_heads, int num_kv_heads, int head_size,
                          DType dtype, DType kv_dtype, bool alibi, const FlashAttnOptions& options,
                          FlashAttnWorkspace& ws, cudaStream_t stream) {
  PAGODA_CHECK(options.version == 2 || options.version == 3, "FlashAttention version ", options.version,
               " is not built in this binary");
  PAGODA_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "FLASH_ATTN runs float16 and bfloat16, not ",
               dtype_name(dtype));
  PAGODA_CHECK(head_size % 8 == 0 && head_size <= 256, "FLASH_ATTN head size ", head_size,
               " is not a multiple of 8 up to 256");
  PagedAttentionOptions fa2;
  fa2.num_sms = options.num_sms;
  fa2.max_splits = options.max_splits;
  fa2.force_splits = options.force_splits;
  fa2.in_kernel_merge_min_splits = options.in_kernel_merge_min_splits;
  fa2.cluster_merge = options.cluster_merge;
  fa2.fp8_kv = dtype_is_fp8(kv_dtype);
  fa2.batch_invariant = options.batch_invariant;
  ws.fa3_items = 0;
  ws.fa3_only = false;
  ws.stage_count = 0;
  bool fa3 = options.version == 3 && flash_attn_fa3_supported() &&
             flash_attn_fa3_serves(head_size, dtype, kv_dtype, alibi);
  // Staged when a staging buffer exists and the context fits (the run decides whether the step needs it:
  // fp8 KV always, 16-bit KV when the blocks do not hold whole tiles); fp8 KV that is not staged -> FA2.
  // Batch-invariant plans do not stage fp8 KV (FlashAttnOptions::batch_invariant).
  const bool fp8 = kv_dtype != dtype;
  if (fa3 && fp8 && options.batch_invariant) fa3 = false;
  if (fa3 && !plan_kv_stage(batch, ws, stream) && fp8) fa3 = false;
  if (fa3) {
    // Prefill chunks (query length > 1) -> FA3 tiles of 128 query tokens (192 at head 64), the most KV work
    // first so the long causal tiles do not trail; decode tokens -> the FA2 decode plan.
    const int block_m = flash_attn_detail::fa3_tile(head_size).block_m;
    const size_t n = batch.query_lens.size();
    std::vector<int> q_start(n + 1, 0);
    for (size_t s = 0; s < n; ++s) q_start[s + 1] = q_start[s] + batch.query_lens[s];
    std::vector<int4> items;
    bool any_decode = false;
    for (size_t s = 0; s < n; ++s) {
      const int ql = batch.query_lens[s];
      if (ql <= 1) {
        any_decode = any_decode || ql == 1;
        continue;
      }
      for (int m = 0; m * block_m < ql; ++m) items.push_back(make_int4(int(s), m, q_start[s], ql));
    }
    PAGODA_CHECK(int(items.size()) <= ws.fa3_capacity, "FLASH_ATTN work list overflow: reserve() a larger workspace");
    // A tile costs the keys its last query token sees.
    auto cost = [&](const int4& item) {
      return long(batch.seq_lens[size_t(item.x)]) - item.w + std::min(item.w, (item.y + 1) * block_m);
    };
    std::stable_sort(items.begin(), items.end(), [&](const int4& a, const int4& b) { return cost(a) > cost(b); });
    std::copy(items.begin(), items.end(), reinterpret_cast<int4*>(ws.fa3_host));
    ws.fa3_items = int(items.size());
    if (ws.fa3_items > 0) {
      PAGODA_CUDA_OK(cudaMemcpyAsync(ws.fa3_work, ws.fa3_host, sizeof(int4) * size_t(ws.fa3_items),
                                     cudaMemcpyHostToDevice, stream));
      ws.fa3_only = !any_decode;
      fa2.sequences = SeqFilter::kDecode;
    }
  }
  if (ws.fa3_only) {
    ws.fa2.num_work_items = 0;
    return;
  }
  plan_paged_attention(batch, num_q_heads, num_kv_heads, head_size, dtype, fa2, ws.fa2, stream);
}

void run_flash_attention(const PagedAttentionParams& p, const FlashAttnWorkspace& ws, cudaStream_t stream) {
  if (ws.fa3_items > 0) {
    const bool stage = ws.stage_count > 0 && (p.kv_dtype != p.dtype ||
                                              p.block_size % flash_attn_detail::fa3_tile(p.head_size).block_n != 0);
    PAGODA_CHECK(stage || p.kv_dtype == p.dtype, "FLASH_ATTN: an fp8 FA3 step without staged KV");
    flash_attn_detail::KvStage st;
    if (stage) {
      st.base = ws.kv_stage;
      st.num_blocks = ws.kv_stage_blocks;
      st.first_block = ws.stage_first_block;
      st.blocks = reinterpret_cast<const int2*>(ws.stage_blocks);
      st.count = ws.stage_count;
      flash_attn_detail::launch_kv_stage(p, st, stream);
    }
    flash_attn_detail::launch_fa3_prefill(p, ws.cache_blocks, reinterpret_cast<const int4*>(ws.fa3_work),
                                          ws.fa3_items, stage ? &st : nullptr, stream);
  }
  if (ws.fa2.num_work_items > 0) run_paged_attention(p, ws.fa2, stream);
}

}  // namespace pagoda
