#include "pagoda/attention/flashinfer/flashinfer_cuda.h"

#include <algorithm>
#include <cmath>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/device_caps.h"
#include "pagoda/attention/device_common.cuh"
#include "pagoda/attention/flashinfer/flashinfer_cuda_mma.h"
#include "pagoda/attention/flashinfer/flashinfer_cuda_row.cuh"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

using namespace fi_detail;

constexpr int kWarps = 4;  // warps per CTA of the attend kernel

// PRECOND: blockDim.x == 32 * kWarps; grid (num_tasks, num_kv_heads); head_size % 32 == 0, <= 512.
template <typename T, KvKind kKv>
__global__ void __launch_bounds__(32 * kWarps) fi_attend_kernel(FiCudaParams p) {
  const FiTask task = p.plan.tasks[blockIdx.x];
  attention_device::pdl_launch_dependents();  // the merge kernel may place its CTAs early (SM 9.0)
  const int kvh = blockIdx.y, warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int packed = (task.row_end - task.row_begin) * (p.num_q_heads / p.num_kv_heads);
  for (int pr = warp; pr < packed; pr += kWarps) {  // warp-uniform: every lane takes every branch below
    RowState st;
    row_begin<T>(p, task, kvh, pr, lane, st);
    for (int k = st.kb; k < st.ke; ++k) {
      const int64_t row = key_row(p, task, kvh, st, k);
      if (row < 0) continue;
      float s = key_part<T, kKv>(p, st, row, lane);
#pragma unroll
      for (int o = 16; o > 0; o /= 2) s += __shfl_xor_sync(0xffffffffu, s, o);
      key_update<T, kKv>(p, st, s, row, lane);
    }
    row_end<T>(p, task, st, lane);
  }
}

struct MergeOps {
  static __device__ __forceinline__ float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
  static __device__ __forceinline__ void sync_cta() { __syncthreads(); }
};

// Grid (merged tokens, query-head blocks of fi_merge_heads()). Launched programmatically on SM 9.0: its launch
// and CTA placement overlap the attend kernel's tail; it waits for that kernel's completion before reading.
template <typename T>
__global__ void __launch_bounds__(kMergeThreads) fi_merge_kernel(FiCudaParams p) {
  attention_device::pdl_wait_for_prior_grid();
  __shared__ float smem[kMergeSmemFloats];
  fi_merge_cta<MergeOps, T>(p, int(blockIdx.x), int(blockIdx.y), int(threadIdx.x), smem);
}

// The decode kernel for a decode plan, else (or where it does not fit the device) the general one.
template <typename T>
bool mma_attend(const FiCudaParams& p, cudaStream_t s) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>)
    return (p.plan.decode && fi_mma_attend_bf16_decode(p, s)) || fi_mma_attend_bf16(p, s);
  else return (p.plan.decode && fi_mma_attend_f16_decode(p, s)) || fi_mma_attend_f16(p, s);
}

bool other_16bit(const FiCudaParams& p) { return p.kv_dtype != p.dtype && dtype_size(p.kv_dtype) == 2; }

// The tensor-core kernel where it takes the shape and cache, else the SIMT one; then the merge.
template <typename T>
void launch(const FiCudaParams& p, cudaStream_t s) {
  if (p.plan.num_tasks > 0 && (other_16bit(p) || !mma_attend<T>(p, s))) {
    const dim3 grid(unsigned(p.plan.num_tasks), unsigned(p.num_kv_heads));
    switch (p.kv_dtype) {
      case DType::kF8E4M3: fi_attend_kernel<T, KvKind::kE4M3><<<grid, 32 * kWarps, 0, s>>>(p); break;
      case DType::kF8E5M2: fi_attend_kernel<T, KvKind::kE5M2><<<grid, 32 * kWarps, 0, s>>>(p); break;
      case DType::kF16: case DType::kBF16:
        if (other_16bit(p)) {
          fi_attend_kernel<T, KvKind::kOther16><<<grid, 32 * kWarps, 0, s>>>(p);
          break;
        }
        [[fallthrough]];
      default: fi_attend_kernel<T, KvKind::kSame><<<grid, 32 * kWarps, 0, s>>>(p); break;
    }
    PAGODA_CUDA_OK(cudaGetLastError());
  }
  if (p.plan.num_merged > 0) {
    const int heads = fi_merge_heads(p.head_size);
    const dim3 grid(unsigned(p.plan.num_merged), unsigned((p.num_q_heads + heads - 1) / heads));
    PAGODA_CUDA_OK(attention_host::launch_programmatic(fi_merge_kernel<T>, grid, dim3(kMergeThreads), s, p));
    PAGODA_CUDA_OK(cudaGetLastError());
  }
}

template <typename X>
void alloc(X** p, int64_t n) {
  PAGODA_CUDA_OK(cudaMalloc(reinterpret_cast<void**>(p), size_t(std::max<int64_t>(n, 1)) * sizeof(X)));
}

}  // namespace

bool fi_fp8_mma_available() {
  static const bool ok = [] {
    int dev = 0, major = 0, minor = 0;
    cudaFuncAttributes attr{};
    if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaFuncGetAttributes(&attr, fi_merge_kernel<__half>) != cudaSuccess)
      return false;
    return major * 10 + minor >= 89 && attr.binaryVersion >= 89;  // the image this binary runs on the device
  }();
  return ok;
}

int fi_cuda_resident_ctas(DType dtype, DType kv_dtype, int head_size, bool quantize_q) {
  const bool q8 = quantize_q && kv_dtype == DType::kF8E4M3 && fi_fp8_mma_available();
  const bool other16 = kv_dtype != dtype && dtype_size(kv_dtype) == 2;  // the SIMT kernel reads it
  // The fewer of the general and the decode kernel's (the plan is built before the step's kernel is known),
  // of those that fit the device.
  int n = 0;
  if (!other16) {
    const bool bf16 = dtype == DType::kBF16;
    const int general = bf16 ? fi_mma_resident_ctas_bf16(kv_dtype, head_size, q8) : fi_mma_resident_ctas_f16(kv_dtype, head_size, q8);
    const int decode = bf16 ? fi_mma_resident_ctas_bf16_decode(kv_dtype, head_size, q8)
                            : fi_mma_resident_ctas_f16_decode(kv_dtype, head_size, q8);
    n = general > 0 && decode > 0 ? std::min(general, decode) : std::max(general, decode);
  }
  if (n == 0) {  // the SIMT kernel
    const auto kernel = kv_dtype == DType::kF8E4M3 ? fi_attend_kernel<__half, KvKind::kE4M3> : fi_attend_kernel<__half, KvKind::kSame>;
    PAGODA_CUDA_OK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&n, kernel, 32 * kWarps, 0));
  }
  return std::max(n, 1);
}

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
  d->decode = fi_decode_plan(plan);
}

void fi_cuda_run(const FiCudaParams& p, cudaStream_t s) {
  if (p.head_size % 32 != 0 || p.head_size > 32 * kMaxPerLane)
    throw_config_error("FLASHINFER CUDA kernels: head size ", p.head_size, " is not a multiple of 32 up to 512");
  if (p.num_kv_heads <= 0 || p.num_q_heads % p.num_kv_heads != 0)
    throw_config_error("FLASHINFER CUDA kernels: ", p.num_q_heads, " query heads over ", p.num_kv_heads, " KV heads");
  const bool kv_ok = p.kv_dtype == p.dtype || p.kv_dtype == DType::kF8E4M3 || p.kv_dtype == DType::kF8E5M2 ||
                     p.kv_dtype == DType::kF16 || p.kv_dtype == DType::kBF16;
  if (!kv_ok) throw_config_error("FLASHINFER CUDA kernels: KV cache dtype ", dtype_name(p.kv_dtype), " with ", dtype_name(p.dtype));
  switch (p.dtype) {
    case DType::kBF16: launch<__nv_bfloat16>(p, s); return;
    case DType::kF16: launch<__half>(p, s); return;
    case DType::kF32: case DType::kF8E4M3: case DType::kF8E5M2: case DType::kU8: case DType::kI32: case DType::kI64: break;
  }
  throw_config_error("FLASHINFER CUDA kernels: query dtype ", dtype_name(p.dtype), " (bfloat16 or float16)");
}

}  // namespace pagoda
