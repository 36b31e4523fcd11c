// FLASHINFER's attend and merge kernels as per-lane steps, so that the kernels (flashinfer_cuda.cu) and the
// host emulation test (tests/attention_gpu/flashinfer_emulation_test.cc) run the same code. PRIVATE to
// flashinfer/.
//
// One warp attends one packed row (a token of the task with one query head of the task's KV head): lane L
// holds dimensions L, L + 32, ... of the query and of the running output. Per visible key every lane adds
// its part of q.k (key_part), the warp sums the parts (a shuffle reduction on the device), and every lane
// updates its running output (key_update). Compiled by a host compiler, __device__ marks nothing, so the
// steps run on the host too.
#pragma once

#include <cmath>
#include <cstdint>

#include "pagoda/attention/flashinfer/flashinfer_cuda.h"
#include "pagoda/core/cuda_convert.cuh"

namespace pagoda::fi_detail {

constexpr int kMaxPerLane = 16;  // head_size / 32 <= 16: head sizes up to 512

// The cache's elements: the query's dtype, fp8 e4m3 / e5m2 (value = stored x scale), or the other 16-bit dtype
// (a float16 cache under bfloat16 queries or the reverse; the SIMT kernel alone reads it, in float32).
enum class KvKind { kSame, kE4M3, kE5M2, kOther16 };

template <typename T, KvKind kKv>
__device__ __forceinline__ float kv_at(const void* cache, int64_t i, float scale) {
  if constexpr (kKv == KvKind::kSame) {
    return cuda_convert::to_f32(static_cast<const T*>(cache)[i]);
  } else if constexpr (kKv == KvKind::kOther16) {
    using O = std::conditional_t<std::is_same_v<T, __half>, __nv_bfloat16, __half>;
    return cuda_convert::to_f32(static_cast<const O*>(cache)[i]);
  } else if constexpr (kKv == KvKind::kE4M3) {
    return cuda_convert::fp8_to_f32<__NV_E4M3>(static_cast<const uint8_t*>(cache)[i]) * scale;
  } else {
    return cuda_convert::fp8_to_f32<__NV_E5M2>(static_cast<const uint8_t*>(cache)[i]) * scale;
  }
}

struct RowState {
  float q[kMaxPerLane], acc[kMaxPerLane];  // this lane's dimensions: query (pre-scaled), running output
  float m, l;                              // running max and denominator (the same in every lane)
  int r, h, token, pos, kb, ke;            // row in the task, query head, token, position, keys [kb, ke)
};

// Packed row `pr` of (task, KV head kvh), lane `lane`.
template <typename T>
__device__ __forceinline__ void row_begin(const FiCudaParams& p, const FiTask& task, int kvh, int pr, int lane, RowState& st) {
  const int g = p.num_q_heads / p.num_kv_heads, hd = p.head_size, per_lane = hd / 32;
  st.r = pr / g;
  st.h = kvh * g + pr % g;
  st.token = p.plan.row_token[task.row_begin + st.r];
  const int sq = p.plan.row_seq[task.row_begin + st.r];
  const int q_len = p.query_start_loc[sq + 1] - p.query_start_loc[sq];
  st.pos = p.seq_lens[sq] - q_len + (st.token - p.query_start_loc[sq]);
  st.kb = task.kv_begin, st.ke = task.kv_end;
  if (task.num_splits > 0) {
    int lo, hi;
    fi_visible_range(st.pos, p.seq_lens[sq], p.sliding_window, p.causal, &lo, &hi);
    fi_split_range(lo, hi, task.split, task.num_splits, &st.kb, &st.ke);
  }
  const float scale = p.scale > 0 ? p.scale : 1.0f / sqrtf(float(hd));
  const int64_t qstride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_q_heads) * hd;
  const T* qp = static_cast<const T*>(p.q) + int64_t(st.token) * qstride + int64_t(st.h) * hd;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j) {
    st.q[j] = j < per_lane ? cuda_convert::to_f32(qp[lane + 32 * j]) * scale : 0.0f;
    st.acc[j] = 0.0f;
  }
  st.m = -INFINITY;
  st.l = 0.0f;
}

// Element offset of key k's K row for the task's table and KV head (V follows head_size later), or -1 when the
// row does not see k.
__device__ __forceinline__ int64_t key_row(const FiCudaParams& p, const FiTask& task, int kvh, const RowState& st, int k) {
  if (!fi_visible(st.pos, k, p.sliding_window, p.causal)) return -1;
  const int64_t block = p.block_tables[int64_t(task.seq) * p.block_table_stride + k / p.block_size];
  const int off = k % p.block_size, hd = p.head_size;
  return p.layout == KvLayout::kHND ? ((block * p.num_kv_heads + kvh) * p.block_size + off) * 2 * hd
                                    : ((block * p.block_size + off) * p.num_kv_heads + kvh) * 2 * hd;
}

// This lane's part of q.k for the K row at `row`.
template <typename T, KvKind kKv>
__device__ __forceinline__ float key_part(const FiCudaParams& p, const RowState& st, int64_t row, int lane) {
  const int per_lane = p.head_size / 32;
  float s = 0.0f;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j)
    if (j < per_lane) s += st.q[j] * kv_at<T, kKv>(p.kv_cache, row + lane + 32 * j, p.k_scale);
  return s;
}

// The online-softmax step with the warp's score s of the key whose K row is at `row`.
template <typename T, KvKind kKv>
__device__ __forceinline__ void key_update(const FiCudaParams& p, RowState& st, float s, int64_t row, int lane) {
  const int hd = p.head_size, per_lane = hd / 32;
  if (p.softcap > 0) s = p.softcap * tanhf(s / p.softcap);
  const float m_new = fmaxf(st.m, s);
  const float corr = expf(st.m - m_new), e = expf(s - m_new);  // corr = 0 while m is -inf
  st.l = st.l * corr + e;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j)
    if (j < per_lane) st.acc[j] = st.acc[j] * corr + e * kv_at<T, kKv>(p.kv_cache, row + hd + lane + 32 * j, p.v_scale);
  st.m = m_new;
}

// Writes this lane's dimensions of the row: the output, or the task's slab partial (lane 0 also its lse).
template <typename T>
__device__ __forceinline__ void row_end(const FiCudaParams& p, const FiTask& task, const RowState& st, int lane) {
  const int hd = p.head_size, per_lane = hd / 32;
  const float inv = st.l > 0 ? 1.0f / st.l : 0.0f;
  if (task.slab < 0) {
    T* dst = static_cast<T*>(p.out) + (int64_t(st.token) * p.num_q_heads + st.h) * hd;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j)
      if (j < per_lane) dst[lane + 32 * j] = cuda_convert::from_f32<T>(st.acc[j] * inv);
    return;
  }
  const int64_t slab = task.slab + st.r;
  float* dst = p.plan.slab_o + (slab * p.num_q_heads + st.h) * hd;
#pragma unroll
  for (int j = 0; j < kMaxPerLane; ++j)
    if (j < per_lane) dst[lane + 32 * j] = st.acc[j] * inv;
  if (lane == 0) p.plan.slab_lse[slab * p.num_q_heads + st.h] = st.l > 0 ? st.m + logf(st.l) : -INFINITY;
}

// The merge kernel: CTA (i, hb) of kMergeThreads threads combines the slabs of merged token i for query heads
// [hb * heads, + heads), heads = fi_merge_heads(head_size) (128 elements a CTA at head sizes <= 128). Warp w
// finds head w's largest lse; then, kMergeChunk slabs at a time, the CTA stages the slabs' ids and weights
// exp(lse - max) in shared memory, and each thread adds its elements' weighted partials over the chunk (the
// loads of different slabs are independent). out = sum w o / sum w, summed in slab order; 0 where every slab
// is empty (lse -inf). Many CTAs a token, so that a step of few tokens with many splits each (batch 1 at long
// context) merges in a few microseconds.
constexpr int kMergeThreads = 128;
constexpr int kMergeMaxHeads = kMergeThreads / 32;  // head sizes are multiples of 32
constexpr int kMergeChunk = 32;
constexpr int kMergePerThread = 32 * kMaxPerLane / kMergeThreads;  // elements a thread at head size 512
// Shared memory of a merge CTA, in floats (ints alias floats).
constexpr int kMergeSmemFloats = kMergeMaxHeads + kMergeChunk * (kMergeMaxHeads + 1);

__host__ __device__ inline int fi_merge_heads(int head_size) {
  return head_size >= kMergeThreads ? 1 : kMergeThreads / head_size;
}

template <typename Ops, typename T>
__device__ __forceinline__ void fi_merge_cta(const FiCudaParams& p, int i, int hb, int tid, float* smem) {
  const int hd = p.head_size, heads = fi_merge_heads(hd), h0 = hb * heads;
  const int nh = p.num_q_heads - h0 < heads ? p.num_q_heads - h0 : heads;
  const int t = p.plan.merge_token[i], e0 = p.plan.merge_indptr[i], e1 = p.plan.merge_indptr[i + 1];
  float* mx_s = smem;                                      // [kMergeMaxHeads]
  float* w_s = smem + kMergeMaxHeads;                      // [kMergeChunk][kMergeMaxHeads]
  int* slab_s = reinterpret_cast<int*>(w_s + kMergeChunk * kMergeMaxHeads);  // [kMergeChunk]
  const int warp = tid / 32, lane = tid % 32;
  if (warp < nh) {
    float m = -INFINITY;
    for (int e = e0 + lane; e < e1; e += 32)
      m = fmaxf(m, p.plan.slab_lse[int64_t(p.plan.merge_slab[e]) * p.num_q_heads + h0 + warp]);
#pragma unroll
    for (int o = 16; o > 0; o /= 2) m = fmaxf(m, Ops::shfl_xor(m, o));
    if (lane == 0) mx_s[warp] = m;
  }
  float num[kMergePerThread], den[kMergePerThread];
#pragma unroll
  for (int j = 0; j < kMergePerThread; ++j) num[j] = den[j] = 0.0f;
  const int elems = nh * hd;
  for (int c0 = e0; c0 < e1; c0 += kMergeChunk) {
    const int n = e1 - c0 < kMergeChunk ? e1 - c0 : kMergeChunk;
    Ops::sync_cta();  // the maxima are written; the previous chunk is consumed
    for (int x = tid; x < n * nh; x += kMergeThreads) {
      const int e = x / nh, hl = x % nh;
      const int slab = p.plan.merge_slab[c0 + e];
      const float m = mx_s[hl];
      w_s[e * kMergeMaxHeads + hl] = m > -INFINITY ? expf(p.plan.slab_lse[int64_t(slab) * p.num_q_heads + h0 + hl] - m) : 0.0f;
      if (hl == 0) slab_s[e] = slab;
    }
    Ops::sync_cta();
#pragma unroll
    for (int j = 0; j < kMergePerThread; ++j) {
      const int x = tid + j * kMergeThreads;
      if (x >= elems) break;
      const int hl = x / hd, d = x % hd;
      const float* o = p.plan.slab_o + int64_t(h0 + hl) * hd + d;
#pragma unroll 8
      for (int e = 0; e < n; ++e) {
        const float w = w_s[e * kMergeMaxHeads + hl];
        den[j] += w;
        num[j] += w * o[int64_t(slab_s[e]) * p.num_q_heads * hd];
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kMergePerThread; ++j) {
    const int x = tid + j * kMergeThreads;
    if (x >= elems) break;
    const int hl = x / hd, d = x % hd;
    static_cast<T*>(p.out)[(int64_t(t) * p.num_q_heads + h0 + hl) * hd + d] =
        cuda_convert::from_f32<T>(den[j] > 0 ? num[j] / den[j] : 0.0f);
  }
}

}  // namespace pagoda::fi_detail
