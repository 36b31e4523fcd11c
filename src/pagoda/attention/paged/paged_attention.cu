// The paged-attention family's host side (paged_attention.h): planning, the split-KV merge kernel, the
// CUDA-core kernel for fp32 and head sizes the tensor-core kernel does not take, and dispatch.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <cmath>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/device_caps.h"
#include "pagoda/attention/paged/paged_attention.h"
#include "pagoda/attention/paged/paged_attention_kernel.cuh"
#include "pagoda/core/cuda_convert.cuh"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

using paged_detail::KernelArgs;
using paged_detail::kBlockM;
using paged_detail::kLog2e;
using paged_detail::kThreads;
using cuda_convert::fp8_to_f32;
using cuda_convert::from_f32;
using cuda_convert::to_f32;

// Element i of a KV cache of dtype kv, as float (fp8: the stored code, before k_scale/v_scale).
__device__ __forceinline__ float load_kv(const void* base, size_t i, DType kv) {
  switch (kv) {
    case DType::kF8E4M3: return fp8_to_f32<__NV_E4M3>(static_cast<const uint8_t*>(base)[i]);
    case DType::kF8E5M2: return fp8_to_f32<__NV_E5M2>(static_cast<const uint8_t*>(base)[i]);
    case DType::kBF16: return to_f32(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF16: return to_f32(static_cast<const __half*>(base)[i]);
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kU8: case DType::kI32: case DType::kI64: break;
  }
  return 0.f;
}

constexpr int kMaxFallbackHead = 512;

// CUDA-core kernel: one warp per row at a time; lane owns dims lane, lane+32, ... Same work list and
// outputs as the tensor-core kernel.
template <typename T>
__global__ void __launch_bounds__(kThreads) fallback_attention_kernel(const KernelArgs args) {
  const PagedAttentionParams& p = args.p;
  const paged_detail::WorkItem wi = paged_detail::work_item(args);
  const int seq = wi.seq, row_start = wi.row_start, split = wi.split, nsplit = wi.nsplit;
  const int kvh = wi.kvh, G = wi.G, q_begin = wi.q_begin, ctx = wi.ctx, first_pos = wi.first_pos;
  const int rows_total = wi.rows_total;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hs = p.head_size;
  constexpr int kJ = kMaxFallbackHead / 32;
  const int* btab = p.block_tables + size_t(seq) * p.max_blocks_per_seq;
  constexpr int BN = 64;  // the tile size the work split is expressed in

  const paged_detail::TileRange range =
      paged_detail::cta_tile_range(p, row_start, rows_total, first_pos, ctx, G, split, nsplit, BN);
  const int key_begin = range.begin * BN;
  const int key_end = min(range.kv_end, range.end * BN);

  for (int r = warp; r < kBlockM; r += kThreads / 32) {
    int R = row_start + r;
    if (R >= rows_total) break;
    int tok = q_begin + R / G, h = kvh * G + R % G;
    int q_pos = first_pos + R / G;
    size_t row = size_t(tok) * p.num_q_heads + h;
    float q[kJ], acc[kJ];
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      int d = lane + 32 * j;
      const size_t q_stride = p.q_token_stride > 0 ? size_t(p.q_token_stride) : size_t(p.num_q_heads) * hs;
      q[j] = d < hs ? to_f32(static_cast<const T*>(p.q)[size_t(tok) * q_stride + size_t(h) * hs + d]) : 0.f;
      acc[j] = 0.f;
    }
    float slope = p.alibi_slopes ? p.alibi_slopes[h] : 0.f;
    float m = -INFINITY, l = 0.f;
    for (int key = key_begin; key < key_end; ++key) {
      if (p.causal && key > q_pos) break;
      if (p.sliding_window > 0 && key <= q_pos - p.sliding_window) continue;
      int blk = btab[key / p.block_size], off = key % p.block_size;
      size_t slot = p.layout == KvLayout::kNHD ? (size_t(blk) * p.block_size + off) * p.num_kv_heads + kvh
                                               : (size_t(blk) * p.num_kv_heads + kvh) * p.block_size + off;
      size_t base = slot * 2 * hs;
      float dot = 0.f;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        int d = lane + 32 * j;
        if (d < hs) dot += q[j] * load_kv(p.kv_cache, base + d, p.kv_dtype);
      }
#pragma unroll
      for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffff, dot, o);
      float x = dot * p.scale * p.k_scale;
      if (p.softcap > 0.f) x = p.softcap * tanhf(x / p.softcap);
      x = (x + slope * float(key - q_pos)) * kLog2e;
      float m_new = fmaxf(m, x);
      float alpha = exp2f(m - m_new), pe = exp2f(x - m_new);
      l = l * alpha + pe;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        int d = lane + 32 * j;
        float v = d < hs ? load_kv(p.kv_cache, base + hs + d, p.kv_dtype) : 0.f;
        acc[j] = acc[j] * alpha + pe * v;
      }
      m = m_new;
    }
    if (args.write_partial) {
      size_t prow = size_t(split) * args.partial_tokens * p.num_q_heads + row;
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        int d = lane + 32 * j;
        if (d < hs) args.partial_out[prow * hs + d] = acc[j];
      }
      if (lane == 0) {
        args.partial_ml[prow * 2] = m;
        args.partial_ml[prow * 2 + 1] = l;
      }
    } else {
      const float inv = paged_detail::output_scale(m, l, p.sinks, h, p.v_scale);
#pragma unroll
      for (int j = 0; j < kJ; ++j) {
        int d = lane + 32 * j;
        if (d < hs) static_cast<T*>(p.out)[row * hs + d] = from_f32<T>(acc[j] * inv);
      }
    }
  }
}

// Combines the KV splits of every row of the split-0 work items (steps the tensor-core decode kernel did not
// serve: it merges its own splits).
template <typename T>
__global__ void __launch_bounds__(kThreads) merge_partials_kernel(const KernelArgs args, int num_splits) {
  attention_device::pdl_launch_dependents();  // the next step's attention kernel may place its CTAs early
  attention_device::pdl_wait_for_prior_grid();  // launched programmatically behind the attention kernel
  const int4 w = paged_detail::cta_work(args);
  if (w.z != 0) return;
  paged_detail::merge_split_rows<T, kMaxFallbackHead>(args, w.x, w.y, blockIdx.y, num_splits);
}

template <typename T>
void launch_typed(const KernelArgs& args, const PagedAttentionWorkspace& ws, bool tensor_cores, cudaStream_t stream) {
  dim3 grid(ws.num_work_items, args.p.num_kv_heads);
  bool merged = false;  // the kernel merged its KV splits itself (the last CTA of each row group)
  if (tensor_cores) {
    if constexpr (std::is_same_v<T, float>) {
      PAGODA_CHECK(false, "tensor-core attention has no fp32 variant");
    } else {
      merged = paged_detail::launch_paged<T>(args, ws.num_work_items, ws.num_splits, stream);
    }
  } else {
    fallback_attention_kernel<T><<<grid, kThreads, 0, stream>>>(args);
  }
  PAGODA_CUDA_OK(cudaGetLastError());
  if (args.write_partial && !merged) {
    // Launched programmatically on SM 9.0: its launch and CTA placement overlap the attention kernel's
    // tail (which triggers it); it waits for that kernel's completion before reading the partials.
    PAGODA_CUDA_OK(attention_host::launch_programmatic(merge_partials_kernel<T>, grid, dim3(kThreads), stream, args,
                                                       ws.num_splits));
  }
}

}  // namespace

PagedAttentionWorkspace::~PagedAttentionWorkspace() {
  cudaFree(split_counters);
  cudaFree(work);
  cudaFree(partial_out);
  cudaFree(partial_ml);
  cudaFreeHost(host_work);
}

void PagedAttentionWorkspace::reserve(int max_tokens_, int max_seqs, int num_q_heads_, int head_size_, int max_splits_) {
  cudaFree(work);
  cudaFree(partial_out);
  cudaFree(partial_ml);
  cudaFreeHost(host_work);
  cudaFree(split_counters);
  split_counters = nullptr;
  max_tokens = max_tokens_;
  max_splits = std::max(1, max_splits_);
  num_q_heads = num_q_heads_;
  head_size = head_size_;
  // Work items: at most (rows / 64 + 1 per sequence) x splits; rows <= tokens * GQA group <= tokens * heads.
  capacity_items = ((max_tokens * num_q_heads) / kBlockM + max_seqs + 1) * max_splits;
  PAGODA_CUDA_OK(cudaMalloc(&work, sizeof(int4) * capacity_items));
  PAGODA_CUDA_OK(cudaMallocHost(&host_work, sizeof(int4) * capacity_items));
  split_tokens = std::min(max_tokens, kMaxSplitTokens);
  size_t rows = size_t(max_splits) * split_tokens * num_q_heads;
  PAGODA_CUDA_OK(cudaMalloc(&partial_out, sizeof(float) * rows * head_size));
  PAGODA_CUDA_OK(cudaMalloc(&partial_ml, sizeof(float) * rows * 2));
  // One counter per row group (query tile of a sequence) and KV head (<= query heads); zero between launches.
  const size_t groups = size_t(capacity_items / max_splits) * num_q_heads;
  PAGODA_CUDA_OK(cudaMalloc(&split_counters, sizeof(int) * groups));
  PAGODA_CUDA_OK(cudaMemset(split_counters, 0, sizeof(int) * groups));
}

bool paged_attention_uses_tensor_cores(DType dtype, int head_size) {
  return (dtype == DType::kBF16 || dtype == DType::kF16) && head_size % 8 == 0 && head_size <= 256;
}

namespace {
// The KV split count in [1, cap] with the shortest critical path when `groups` row groups of `kv_tiles` KV
// tiles each run as CTAs, `slots` at a time: (waves of CTAs) x (a CTA's time), a CTA costing its
// ceil(kv_tiles / splits) tiles plus a fixed cost of about two tiles (work item, metadata and block-table
// loads before the first KV byte, the final write). The ceiling matters: 31 splits of 128 tiles cost 5
// tiles each like 26 do, 32 cost 4. Among counts within 2% of the shortest, the fewest splits (less merging).
int shortest_split_path(long groups, double slots, int kv_tiles, int cap) {
  constexpr double kCtaFixedTiles = 2;
  auto path = [&](int s) {
    const double waves = std::ceil(double(groups) * s / slots);
    return waves * (double((kv_tiles + s - 1) / s) + kCtaFixedTiles);
  };
  double best = path(1);
  for (int s = 2; s <= cap; ++s) best = std::min(best, path(s));
  for (int s = 1; s <= cap; ++s)
    if (path(s) <= 1.02 * best) return s;
  return 1;
}

// True when a plan for `filter` covers a sequence of `q_len` query tokens.
bool covers(SeqFilter filter, int q_len) {
  switch (filter) {
    case SeqFilter::kAll: return true;
    case SeqFilter::kDecode: return q_len == 1;
    case SeqFilter::kPrefill: return q_len != 1;
  }
  return true;
}
}  // namespace

int decode_kv_splits(long row_groups, int max_kv_tiles, int num_sms, bool fp8_kv, int max_splits, int fp8_cap) {
  if (row_groups <= 0) return 1;
  if (!fp8_kv) {
    const long cap = std::max(1, std::min(max_splits, max_kv_tiles / 2));
    return int(std::max(1L, std::min(long(num_sms) / row_groups, cap)));
  }
  const double slots = double(kDecodeCtasPerSm) * num_sms;
  if (double(row_groups) >= 2 * slots) return 1;
  const int cap = std::max(1, std::min({max_splits, fp8_cap, max_kv_tiles / 2}));
  return shortest_split_path(row_groups, slots, max_kv_tiles, cap);
}

PagedWorkPlan plan_paged_work(const AttentionBatchInfo& batch, int num_q_heads, int num_kv_heads,
                              const PagedAttentionOptions& opt, const PagedWorkLimits& limits, int4* items) {
  PAGODA_CHECK(batch.query_lens.size() == batch.seq_lens.size(), "query_lens and seq_lens differ in length");
  PAGODA_CHECK(num_q_heads % num_kv_heads == 0, "num_q_heads ", num_q_heads, " not a multiple of num_kv_heads ", num_kv_heads);
  const int G = num_q_heads / num_kv_heads;
  // Split KV when the query tiles alone would leave most SMs idle (decode, small batches, long context).
  long tiles = 0;
  int max_ctx = 0;
  bool all_decode = true;  // every tile has <= 16 query rows: the decode-only kernel runs
  for (size_t s = 0; s < batch.query_lens.size(); ++s) {
    if (!covers(opt.sequences, batch.query_lens[s])) continue;
    tiles += (long(batch.query_lens[s]) * G + kBlockM - 1) / kBlockM;
    max_ctx = std::max(max_ctx, batch.seq_lens[s]);
    all_decode = all_decode && batch.query_lens[s] * G <= 16;
  }
  tiles *= num_kv_heads;
  // Batch invariance (PagedAttentionOptions::batch_invariant): the general kernel, one split.
  all_decode = all_decode && tiles > 0 && !opt.batch_invariant;
  int splits = 1;
  if (opt.batch_invariant) {
    splits = 1;
  } else if (opt.force_splits) {
    splits = opt.max_splits;
  } else if (all_decode) {
    splits = decode_kv_splits(tiles, (max_ctx + 63) / 64, opt.num_sms, opt.fp8_kv, opt.max_splits, opt.fp8_split_cap);
  } else if (tiles > 0) {
    // Wave quantisation: with `slots` CTAs resident at once (three per SM for decode-shaped tiles), the KV
    // split count with the shortest critical path; each split keeps at least 4 KV tiles of work.
    const double slots = double(kDecodeCtasPerSm) * opt.num_sms;
    const int kv_tiles = (max_ctx + 63) / 64;
    const int cap = std::max(1, std::min(opt.max_splits, kv_tiles / 4));
    if (double(tiles) < 4 * slots) splits = shortest_split_path(tiles, slots, kv_tiles, cap);
  }
  splits = std::max(1, std::min(splits, limits.max_splits));
  long step_tokens = 0;  // token ids index the split partials: a step may split only within split_tokens
  for (int q : batch.query_lens) step_tokens += q;
  if (step_tokens > limits.split_tokens) splits = 1;
  int n = 0;
  for (size_t s = 0; s < batch.query_lens.size(); ++s) {
    if (!covers(opt.sequences, batch.query_lens[s])) continue;
    int rows = batch.query_lens[s] * G;
    for (int r = 0; r < rows; r += kBlockM) {
      for (int sp = 0; sp < splits; ++sp) {
        PAGODA_CHECK(n < limits.capacity, "attention work list overflow: reserve() a larger workspace");
        items[n++] = make_int4(int(s), r, sp, splits);
      }
    }
  }
  // Steps with prefill tiles: the costliest tiles first (longest-processing-time order), so that the long
  // causal tiles at the end of a sequence do not start last and trail the grid. A tile costs the keys its
  // last query token sees (causal; every tile of a sequence costs its context otherwise, and any order is
  // as good). Decode-only steps keep their layout (uniform tiles; the split CTAs of a row group adjacent).
  if (!all_decode && n > 1) {
    auto cost = [&](const int4& item) {
      const int q = batch.query_lens[size_t(item.x)];
      const int last_token = std::min(q * G, item.y + kBlockM) / G;  // tokens (within the chunk) seen
      return long(batch.seq_lens[size_t(item.x)]) - q + last_token;
    };
    std::stable_sort(items, items + n, [&](const int4& a, const int4& b) { return cost(a) > cost(b); });
  }
  PagedWorkPlan plan;
  plan.num_items = n;
  plan.num_splits = splits;
  plan.all_decode = all_decode && n > 0;
  plan.merge_in_kernel =
      plan.all_decode && opt.in_kernel_merge_min_splits > 0 && splits >= opt.in_kernel_merge_min_splits;
  plan.merge_in_cluster = plan.all_decode && splits > 1 && opt.cluster_merge;
  // Every sequence one unsplit row group: item i is {i, 0, 0, 1}, which the kernels compute (cta_work).
  plan.work_is_seq = plan.all_decode && splits == 1 && n == int(batch.query_lens.size());
  return plan;
}

void plan_paged_attention(const AttentionBatchInfo& batch, int num_q_heads, int num_kv_heads, int head_size, DType dtype,
                          const PagedAttentionOptions& opt, PagedAttentionWorkspace& ws, cudaStream_t stream) {
  PAGODA_CHECK(head_size <= kMaxFallbackHead, "head_size ", head_size, " > ", kMaxFallbackHead);
  const PagedWorkLimits limits{ws.max_splits, ws.split_tokens, ws.capacity_items};
  const PagedWorkPlan plan =
      plan_paged_work(batch, num_q_heads, num_kv_heads, opt, limits, reinterpret_cast<int4*>(ws.host_work));
  ws.num_work_items = plan.num_items;
  ws.num_splits = plan.num_splits;
  ws.all_decode = plan.all_decode;
  ws.split_needs_merge = plan.num_splits > 1;
  ws.merge_in_kernel = plan.merge_in_kernel;
  ws.merge_in_cluster = plan.merge_in_cluster;
  ws.work_is_seq = plan.work_is_seq;
  const int n = plan.num_items;
  if (n > 0) PAGODA_CUDA_OK(cudaMemcpyAsync(ws.work, ws.host_work, sizeof(int4) * n, cudaMemcpyHostToDevice, stream));
}

void run_paged_attention(const PagedAttentionParams& p, const PagedAttentionWorkspace& ws, cudaStream_t stream) {
  if (ws.num_work_items == 0) return;
  PAGODA_CHECK(p.head_size >= 1 && p.head_size <= kMaxFallbackHead, "unsupported head_size ", p.head_size);
  PAGODA_CHECK(p.num_tokens <= ws.max_tokens, "num_tokens ", p.num_tokens, " > workspace max_tokens ", ws.max_tokens);
  PagedAttentionParams pp = p;
  pp.block_size_log2 = (p.block_size & (p.block_size - 1)) == 0 ? __builtin_ctz(unsigned(p.block_size)) : -1;
  PAGODA_CHECK(ws.num_splits == 1 || p.num_tokens <= ws.split_tokens, "split KV over ", p.num_tokens,
               " tokens > the workspace's split_tokens ", ws.split_tokens);
  KernelArgs args{pp, reinterpret_cast<const int4*>(ws.work), ws.partial_out, ws.partial_ml, ws.split_tokens,
                  ws.split_needs_merge, ws.all_decode, ws.split_counters,
                  ws.merge_in_kernel && ws.split_needs_merge, ws.merge_in_cluster && ws.split_needs_merge,
                  ws.work_is_seq};
  // The tensor-core kernels read KV in the model dtype or fp8; another cache dtype (a float16 cache under a
  // bfloat16 model) runs the CUDA-core kernel, which converts any element type, over the same work list.
  const bool tc = paged_attention_uses_tensor_cores(p.dtype, p.head_size) &&
                  (p.kv_dtype == p.dtype || dtype_is_fp8(p.kv_dtype));
  PAGODA_CHECK(p.block_size > 0, "block_size must be positive");
  switch (p.dtype) {
    case DType::kBF16: launch_typed<__nv_bfloat16>(args, ws, tc, stream); return;
    case DType::kF16: launch_typed<__half>(args, ws, tc, stream); return;
    case DType::kF32: launch_typed<float>(args, ws, false, stream); return;
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kU8: case DType::kI32: case DType::kI64: break;
  }
  PAGODA_CHECK(false, "paged attention: unsupported dtype ", dtype_name(p.dtype));
}

}  // namespace pagoda
