#include "pagoda/attention/flashinfer/flashinfer_cuda.h"

#include <cmath>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/core/cuda_convert.cuh"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

using cuda_convert::fp8_to_f32;
using cuda_convert::from_f32;
using cuda_convert::to_f32;

constexpr int kWarps = 4;           // warps per CTA of the attend kernel
constexpr int kMaxPerLane = 16;     // head_size / 32 <= 16: head sizes up to 512
constexpr int kMergeThreads = 128;

enum class KvKind { kSame, kE4M3, kE5M2 };

template <typename T, KvKind kKv>
__device__ __forceinline__ float kv_at(const void* cache, int64_t i, float scale) {
  if constexpr (kKv == KvKind::kSame) {
    return to_f32(static_cast<const T*>(cache)[i]);
  } else if constexpr (kKv == KvKind::kE4M3) {
    return fp8_to_f32<__NV_E4M3>(static_cast<const uint8_t*>(cache)[i]) * scale;
  } else {
    return fp8_to_f32<__NV_E5M2>(static_cast<const uint8_t*>(cache)[i]) * scale;
  }
}

// PRECOND: blockDim.x == 32 * kWarps; grid (num_tasks, num_kv_heads); head_size % 32 == 0, <= 512.
template <typename T, KvKind kKv>
__global__ void __launch_bounds__(32 * kWarps) fi_attend_kernel(FiCudaParams p) {
  const FiTask task = p.plan.tasks[blockIdx.x];
  const int kvh = blockIdx.y;
  const int g = p.num_q_heads / p.num_kv_heads, hd = p.head_size, per_lane = hd / 32;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int rows = task.row_end - task.row_begin;
  const int64_t qstride = p.q_stride > 0 ? p.q_stride : int64_t(p.num_q_heads) * hd;
  const float scale = p.scale > 0 ? p.scale : rsqrtf(float(hd));
  const int32_t* table = p.block_tables + int64_t(task.seq) * p.block_table_stride;
  for (int pr = warp; pr < rows * g; pr += kWarps) {
    const int r = pr / g, h = kvh * g + pr % g;
    const int token = p.plan.row_token[task.row_begin + r], sq = p.plan.row_seq[task.row_begin + r];
    const int q_len = p.query_start_loc[sq + 1] - p.query_start_loc[sq];
    const int pos = p.seq_lens[sq] - q_len + (token - p.query_start_loc[sq]);
    int kb = task.kv_begin, ke = task.kv_end;
    if (task.num_splits > 0) {
      int lo, hi;
      fi_visible_range(pos, p.seq_lens[sq], p.sliding_window, p.causal, &lo, &hi);
      fi_split_range(lo, hi, task.split, task.num_splits, &kb, &ke);
    }
    float q[kMaxPerLane], acc[kMaxPerLane];
    const T* qp = static_cast<const T*>(p.q) + int64_t(token) * qstride + int64_t(h) * hd;
#pragma unroll
    for (int j = 0; j < kMaxPerLane; ++j) {
      q[j] = j < per_lane ? to_f32(qp[lane + 32 * j]) * scale : 0.0f;
      acc[j] = 0.0f;
    }
    float m = -INFINITY, l = 0.0f;
    for (int k = kb; k < ke; ++k) {
      if (!fi_visible(pos, k, p.sliding_window, p.causal)) continue;
      const int64_t block = table[k / p.block_size];
      const int off = k % p.block_size;
      const int64_t row = p.layout == KvLayout::kHND
                              ? ((block * p.num_kv_heads + kvh) * p.block_size + off) * 2 * hd
                              : ((block * p.block_size + off) * p.num_kv_heads + kvh) * 2 * hd;
      float s = 0.0f;
#pragma unroll
      for (int j = 0; j < kMaxPerLane; ++j)
        if (j < per_lane) s += q[j] * kv_at<T, kKv>(p.kv_cache, row + lane + 32 * j, p.k_scale);
#pragma unroll
      for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
      if (p.softcap > 0) s = p.softcap * tanhf(s / p.softcap);
      const float m_new = fmaxf(m, s);
      const float corr = __expf(m - m_new), e = __expf(s - m_new);
      l = l * corr + e;
#pragma unroll
      for (int j = 0; j < kMaxPerLane; ++j)
        if (j < per_lane) acc[j] = acc[j] * corr + e * kv_at<T, kKv>(p.kv_cache, row + hd + lane + 32 * j, p.v_scale);
      m = m_new;
    }
    const float inv = l > 0 ? 1.0f / l : 0.0f;
    if (task.slab < 0) {
      T* dst = static_cast<T*>(p.out) + (int64_t(token) * p.num_q_heads + h) * hd;
#pragma unroll
      for (int j = 0; j < kMaxPerLane; ++j)
        if (j < per_lane) dst[lane + 32 * j] = from_f32<T>(acc[j] * inv);
    } else {
      const int64_t slab = task.slab + r;
      float* dst = p.plan.slab_o + (slab * p.num_q_heads + h) * hd;
#pragma unroll
      for (int j = 0; j < kMaxPerLane; ++j)
        if (j < per_lane) dst[lane + 32 * j] = acc[j] * inv;
      if (lane == 0) p.plan.slab_lse[slab * p.num_q_heads + h] = l > 0 ? m + logf(l) : -INFINITY;
    }
  }
}

// One CTA per merged token; threads across (query head, dimension).
template <typename T>
__global__ void __launch_bounds__(kMergeThreads) fi_merge_kernel(FiCudaParams p) {
  const int i = blockIdx.x;
  const int t = p.plan.merge_token[i];
  const int e0 = p.plan.merge_indptr[i], e1 = p.plan.merge_indptr[i + 1];
  const int hd = p.head_size;
  for (int x = threadIdx.x; x < p.num_q_heads * hd; x += blockDim.x) {
    const int h = x / hd, d = x % hd;
    float mx = -INFINITY;
    for (int e = e0; e < e1; ++e) mx = fmaxf(mx, p.plan.slab_lse[int64_t(p.plan.merge_slab[e]) * p.num_q_heads + h]);
    float num = 0.0f, den = 0.0f;
    if (mx > -INFINITY) {
      for (int e = e0; e < e1; ++e) {
        const int64_t slab = p.plan.merge_slab[e];
        const float w = __expf(p.plan.slab_lse[slab * p.num_q_heads + h] - mx);
        den += w;
        num += w * p.plan.slab_o[(slab * p.num_q_heads + h) * hd + d];
      }
    }
    static_cast<T*>(p.out)[(int64_t(t) * p.num_q_heads + h) * hd + d] = from_f32<T>(den > 0 ? num / den : 0.0f);
  }
}

template <typename T>
void launch(const FiCudaParams& p, cudaStream_t s) {
  if (p.plan.num_tasks > 0) {
    const dim3 grid(unsigned(p.plan.num_tasks), unsigned(p.num_kv_heads));
    switch (p.kv_dtype) {
      case DType::kF8E4M3: fi_attend_kernel<T, KvKind::kE4M3><<<grid, 32 * kWarps, 0, s>>>(p); break;
      case DType::kF8E5M2: fi_attend_kernel<T, KvKind::kE5M2><<<grid, 32 * kWarps, 0, s>>>(p); break;
      default: fi_attend_kernel<T, KvKind::kSame><<<grid, 32 * kWarps, 0, s>>>(p); break;
    }
    PAGODA_CUDA_OK(cudaGetLastError());
  }
  if (p.plan.num_merged > 0) {
    fi_merge_kernel<T><<<unsigned(p.plan.num_merged), kMergeThreads, 0, s>>>(p);
    PAGODA_CUDA_OK(cudaGetLastError());
  }
}

template <typename X>
void alloc(X** p, int64_t n) {
  PAGODA_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(p), size_t(std::max<int64_t>(n, 1)) * sizeof(X)));
}

}  // namespace

void fi_cuda_plan_alloc(const FiPlan& plan, int num_q_heads, int head_size, FiDevicePlan* d) {
  alloc(&d->tasks, plan.max_tasks());
  alloc(&d->row_token, plan.max_rows());
  alloc(&d->row_seq, plan.max_rows());
  alloc(&d->merge_token, plan.max_merged());
  alloc(&d->merge_indptr, int64_t(plan.max_merged()) + 1);
  alloc(&d->merge_slab, plan.max_slabs());
  alloc(&d->slab_o, int64_t(plan.max_slabs()) * num_q_heads * head_size);
  alloc(&d->slab_lse, int64_t(plan.max_slabs()) * num_q_heads);
}

void fi_cuda_plan_free(FiDevicePlan* d) {
  for (void* x : {static_cast<void*>(d->tasks), static_cast<void*>(d->row_token), static_cast<void*>(d->row_seq),
                  static_cast<void*>(d->merge_token), static_cast<void*>(d->merge_indptr), static_cast<void*>(d->merge_slab),
                  static_cast<void*>(d->slab_o), static_cast<void*>(d->slab_lse)})
    if (x) cudaFree(x);
  *d = FiDevicePlan{};
}

void fi_cuda_plan_upload(const FiPlan& plan, FiDevicePlan* d, cudaStream_t s) {
  auto up = [s](void* dst, const void* src, size_t bytes) {
    if (bytes > 0) PAGODA_CUDA_OK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s));
  };
  up(d->tasks, plan.tasks(), size_t(plan.num_tasks()) * sizeof(FiTask));
  up(d->row_token, plan.row_token(), size_t(plan.num_rows()) * 4);
  up(d->row_seq, plan.row_seq(), size_t(plan.num_rows()) * 4);
  up(d->merge_token, plan.merge_token(), size_t(plan.num_merged()) * 4);
  up(d->merge_indptr, plan.merge_indptr(), size_t(plan.num_merged() + 1) * 4);
  up(d->merge_slab, plan.merge_slab(), size_t(plan.num_slabs()) * 4);
  d->num_tasks = plan.num_tasks();
  d->num_merged = plan.num_merged();
}

void fi_cuda_run(const FiCudaParams& p, cudaStream_t s) {
  if (p.head_size % 32 != 0 || p.head_size > 32 * kMaxPerLane)
    throw_config_error("FLASHINFER CUDA kernels: head size ", p.head_size, " is not a multiple of 32 up to 512");
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0)
    throw_config_error("FLASHINFER CUDA kernels: ", p.num_q_heads, " query heads over ", p.num_kv_heads, " KV heads");
  const bool kv_ok = p.kv_dtype == p.dtype || p.kv_dtype == DType::kF8E4M3 || p.kv_dtype == DType::kF8E5M2;
  if (!kv_ok) throw_config_error("FLASHINFER CUDA kernels: KV cache dtype ", dtype_name(p.kv_dtype), " with ", dtype_name(p.dtype));
  switch (p.dtype) {
    case DType::kBF16: launch<__nv_bfloat16>(p, s); return;
    case DType::kF16: launch<__half>(p, s); return;
    case DType::kF32: case DType::kF8E4M3: case DType::kF8E5M2: case DType::kU8: case DType::kI32: case DType::kI64: break;
  }
  throw_config_error("FLASHINFER CUDA kernels: query dtype ", dtype_name(p.dtype), " (bfloat16 or float16)");
}

}  // namespace pagoda
