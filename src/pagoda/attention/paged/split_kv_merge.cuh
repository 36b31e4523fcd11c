// PRIVATE to paged/: the split-KV merge. Split CTAs write unnormalised partials (out, and the row's
// log2-domain max m and sum l); merge_split_rows combines a row group's splits. Before SM 9.0 the decode
// kernel runs it in its last CTA per row group (last_split_merges); on SM 9.0 the decode kernel's split CTAs
// form a cluster and merge through distributed shared memory (cluster_merge_splits); other steps run
// merge_partials_kernel (paged_attention.cu).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "pagoda/attention/device_common.cuh"
#include "pagoda/attention/paged/paged_attention_args.cuh"
#include "pagoda/core/cuda_convert.cuh"

namespace pagoda::paged_detail {

using cuda_convert::from_f32;

// Combines the KV splits of the rows of one row group (sequence `seq`, rows row_start.., KV head kvh): one
// warp per row. The lanes read the splits' (m, l) pairs in parallel (lane j holds split s0 + j's weight),
// then each lane accumulates its own output columns over the splits. Partials are read through L2
// (__ldcg): other CTAs wrote them during this kernel when the decode kernel merges in place.
// kMaxD bounds head_size: it sizes the per-lane accumulators, so the decode kernel (D <= 128) that inlines this
// keeps its register count.
template <typename T, int kMaxD>
__device__ __forceinline__ void merge_split_rows(const KernelArgs& args, int seq, int row_start, int kvh,
                                                 int num_splits) {
  constexpr int kVec = (kMaxD + 127) / 128;  // float4 column groups per lane
  constexpr int kScalar = (kMaxD + 31) / 32;  // scalar columns per lane
  constexpr unsigned kAll = 0xffffffffu;
  const PagedAttentionParams& p = args.p;
  const int G = p.num_q_heads / p.num_kv_heads;
  const int q_begin = p.query_start_loc[seq];
  const int rows_total = (p.query_start_loc[seq + 1] - q_begin) * G;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int hs = p.head_size;
  const size_t split_stride = size_t(args.partial_tokens) * p.num_q_heads;
  const bool vec4 = hs % 4 == 0;
  for (int r = warp; r < kBlockM; r += kThreads / 32) {
    const int R = row_start + r;
    if (R >= rows_total) break;
    const int tok = q_begin + R / G, h = kvh * G + R % G;
    const size_t row = size_t(tok) * p.num_q_heads + h;
    const float* ml = args.partial_ml + row * 2;
    const float* po = args.partial_out + row * hs;
    float m = -INFINITY;
    for (int s = lane; s < num_splits; s += 32) m = fmaxf(m, __ldcg(ml + s * split_stride * 2));
#pragma unroll
    for (int x = 16; x > 0; x /= 2) m = fmaxf(m, __shfl_xor_sync(kAll, m, x));
    if (p.sinks) m = fmaxf(m, p.sinks[h] * kLog2e);
    const float m_use = m == -INFINITY ? 0.f : m;
    float l = 0.f;
    for (int s = lane; s < num_splits; s += 32) {
      const float ms = __ldcg(ml + s * split_stride * 2);
      if (ms != -INFINITY) l += __ldcg(ml + s * split_stride * 2 + 1) * exp2f(ms - m_use);
    }
#pragma unroll
    for (int x = 16; x > 0; x /= 2) l += __shfl_xor_sync(kAll, l, x);
    if (p.sinks) l += exp2f(p.sinks[h] * kLog2e - m_use);
    const float inv = l > 0.f ? p.v_scale / l : 0.f;
    // Columns of this lane: float4 path d = 4 * lane + 128 * k (k < kVec); scalar path d = lane + 32 * k
    // (k < kScalar). Loads go out in batches of 8 splits before any is used, so a
    // row costs a few memory latencies, not one per split. A split without keys has weight 0; its partial is
    // loaded (the scratch is allocated) but selected away, so whatever it holds cannot reach the output.
    float o[kScalar > 4 * kVec ? kScalar : 4 * kVec] = {};
    constexpr int kBatch = 8;
    for (int s0 = 0; s0 < num_splits; s0 += 32) {
      float wl = 0.f;  // split s0 + lane's weight
      if (s0 + lane < num_splits) {
        const float ms = __ldcg(ml + (s0 + lane) * split_stride * 2);
        if (ms != -INFINITY) wl = exp2f(ms - m_use);
      }
      const int n = min(32, num_splits - s0);
      for (int j0 = 0; j0 < n; j0 += kBatch) {
        const float* src = po + (s0 + j0) * split_stride * hs;
        const size_t step = split_stride * hs;
        float wj[kBatch];
#pragma unroll
        for (int j = 0; j < kBatch; ++j) wj[j] = __shfl_sync(kAll, wl, (j0 + j) & 31);
        if (vec4) {
#pragma unroll
          for (int k = 0; k < kVec; ++k) {
            const int d = 4 * lane + 128 * k;
            if (d >= hs) break;
            float4 v[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; ++j)
              v[j] = j0 + j < n ? __ldcg(reinterpret_cast<const float4*>(src + j * step + d)) : make_float4(0, 0, 0, 0);
#pragma unroll
            for (int j = 0; j < kBatch; ++j) {
              const bool use = j0 + j < n && wj[j] != 0.f;
              o[4 * k] += use ? wj[j] * v[j].x : 0.f;
              o[4 * k + 1] += use ? wj[j] * v[j].y : 0.f;
              o[4 * k + 2] += use ? wj[j] * v[j].z : 0.f;
              o[4 * k + 3] += use ? wj[j] * v[j].w : 0.f;
            }
          }
        } else {
#pragma unroll
          for (int k = 0; k < kScalar; ++k) {
            const int d = lane + 32 * k;
            if (d >= hs) break;
            float v[kBatch];
#pragma unroll
            for (int j = 0; j < kBatch; ++j) v[j] = j0 + j < n ? __ldcg(src + j * step + d) : 0.f;
#pragma unroll
            for (int j = 0; j < kBatch; ++j) o[k] += (j0 + j < n && wj[j] != 0.f) ? wj[j] * v[j] : 0.f;
          }
        }
      }
    }
    T* out = static_cast<T*>(p.out) + row * hs;
    if (vec4) {
#pragma unroll
      for (int k = 0; k < kVec; ++k)
#pragma unroll
        for (int e = 0; e < 4; ++e)
          if (4 * lane + 128 * k < hs) out[4 * lane + 128 * k + e] = from_f32<T>(o[4 * k + e] * inv);
    } else {
#pragma unroll
      for (int k = 0; k < kScalar; ++k)
        if (lane + 32 * k < hs) out[lane + 32 * k] = from_f32<T>(o[k] * inv);
    }
  }
}

// Split-KV decode: every CTA of a row group bumps the group's counter once its partials are written; the
// last one merges them (threadFenceReduction pattern) and re-arms the counter for the next launch, so no
// separate merge kernel runs. Requires every CTA of the kernel to reach it.
template <typename T, int D>
__device__ __forceinline__ void last_split_merges(const KernelArgs& args) {
  __shared__ int s_last;
  const int4 w = cta_work(args);
  const int nsplit = w.w;
  if (nsplit <= 1) return;
  __threadfence();  // this CTA's partials are visible device-wide before the counter moves
  __syncthreads();
  const int group = (blockIdx.x / nsplit) * gridDim.y + blockIdx.y;  // items are laid out [group][split]
  if (threadIdx.x == 0) s_last = atomicAdd(&args.split_counters[group], 1) == nsplit - 1;
  __syncthreads();
  if (!s_last) return;
  __threadfence();
  merge_split_rows<T, D>(args, w.x, w.y, blockIdx.y, nsplit);
  if (threadIdx.x == 0) args.split_counters[group] = 0;
}

// The most KV splits a cluster merge takes: the largest cluster SM 9.0 launches (a non-portable size).
constexpr int kMaxClusterSplits = 16;

// Split-KV decode on SM 9.0: the CTAs of one row group's splits are one thread-block cluster (cluster rank =
// split). Each has left its merged rows in its own shared memory at partial_offset (m[16], l[16] in the log2
// domain, unnormalised o[16][D]); after a cluster barrier every CTA takes a share of the (row, column pair)
// outputs and reads the splits' values straight from their shared memory. No global partials, no counter,
// no second kernel. A second barrier keeps every CTA's shared memory alive until the last read.
template <typename T, int D>
__device__ __forceinline__ void cluster_merge_splits(const KernelArgs& args, const void* smem, size_t partial_offset) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const WorkItem wi = work_item(args);  // issued before the barrier: its loads overlap the wait
  const PagedAttentionParams& p = args.p;
  const uint32_t local = attention_device::smem_u32(static_cast<const uint8_t*>(smem) + partial_offset);
  uint32_t rank, nranks;
  asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
  asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nranks));
  auto cluster_sync = [] {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
  };
  auto remote_f32 = [](uint32_t addr, uint32_t cta) {
    uint32_t a;
    float v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(addr), "r"(cta));
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(v) : "r"(a) : "memory");
    return v;
  };
  auto remote_f32x2 = [](uint32_t addr, uint32_t cta) {
    uint32_t a;
    float2 v;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(a) : "r"(addr), "r"(cta));
    asm volatile("ld.shared::cluster.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(a) : "memory");
    return v;
  };
  cluster_sync();
  const int hs = p.head_size, pairs = hs / 2;
  const int valid_rows = min(16, wi.rows_total - wi.row_start);
  for (int i = int(rank) * kThreads + threadIdx.x; i < valid_rows * pairs; i += int(nranks) * kThreads) {
    const int r = i / pairs, d = 2 * (i % pairs);
    // Every split's (m, l) and columns d, d + 1 of row r, all in flight together.
    float ms[kMaxClusterSplits], ls[kMaxClusterSplits];
    float2 os[kMaxClusterSplits];
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {
      if (s < int(nranks)) {
        ms[s] = remote_f32(local + 4 * r, s);
        ls[s] = remote_f32(local + 4 * (16 + r), s);
        os[s] = remote_f32x2(local + 4 * (32 + r * D + d), s);
      }
    }
    const int R = wi.row_start + r, h = wi.kvh * wi.G + R % wi.G;
    float m = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s)
      if (s < int(nranks)) m = fmaxf(m, ms[s]);
    if (p.sinks) m = fmaxf(m, p.sinks[h] * kLog2e);
    const float m_use = m == -INFINITY ? 0.f : m;
    float l = 0.f;
    float2 o = make_float2(0.f, 0.f);
#pragma unroll
    for (int s = 0; s < kMaxClusterSplits; ++s) {
      if (s < int(nranks) && ms[s] != -INFINITY) {  // a split without keys has weight 0
        const float w = exp2f(ms[s] - m_use);
        l += ls[s] * w;
        o.x += os[s].x * w;
        o.y += os[s].y * w;
      }
    }
    if (p.sinks) l += exp2f(p.sinks[h] * kLog2e - m_use);
    const float inv = l > 0.f ? p.v_scale / l : 0.f;
    const size_t row = size_t(wi.q_begin + R / wi.G) * p.num_q_heads + h;
    T* out = static_cast<T*>(p.out) + row * hs + d;
    out[0] = from_f32<T>(o.x * inv);
    out[1] = from_f32<T>(o.y * inv);
  }
  cluster_sync();
#endif
}

}  // namespace pagoda::paged_detail
