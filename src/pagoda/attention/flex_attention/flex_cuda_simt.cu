// FLEX_ATTENTION's CUDA-core kernel: any head size, float32 / float16 / bfloat16 queries over a float32 /
// float16 / bfloat16 cache, all arithmetic in float32.
//
// Each warp takes the CTA's rows one at a time (lane l owns dimensions l, l + 32, ...; past head size 512 the
// query row sits in shared memory and CTAs along blockIdx.z split the output dimensions) and walks the row's
// tile's key list in groups of at most 32 keys inside one key block: lane j evaluates the mask for key j of
// the group (partial blocks only), a ballot gives the allowed keys, whose scores are dot products reduced
// across the warp (a fixed butterfly), and one online-softmax update (natural exponent, as the CPU kernel)
// takes the whole group. The order of every sum is fixed by the row's own key list: batch invariant.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/flex_attention/flex_cuda_kernel.cuh"
#include "pagoda/core/cuda_convert.cuh"

namespace pagoda::flex_detail {
namespace {

using cuda_convert::from_f32;
using cuda_convert::to_f32;

constexpr int kGroup = 32;  // keys per online-softmax update

__device__ __forceinline__ float load_kv(const void* base, size_t i, DType kv) {
  switch (kv) {
    case DType::kBF16: return to_f32(static_cast<const __nv_bfloat16*>(base)[i]);
    case DType::kF16: return to_f32(static_cast<const __half*>(base)[i]);
    case DType::kF32: return static_cast<const float*>(base)[i];
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kU8: case DType::kI32: case DType::kI64: break;
  }
  return 0.f;
}

// kJ: output dimensions per lane. kWide = false: head_size <= 32 kJ, the query row in registers. kWide = true
// (head sizes past kFlexCudaRegisterHeadSize): each warp's query row in shared memory (dynamic, 4 x head_size
// floats), and blockIdx.z takes output dimensions [512 z, 512 z + 512); each z recomputes the row's scores.
template <typename T, int kJ, bool kWide>
__global__ void __launch_bounds__(kThreads) flex_simt_kernel(const KernelArgs a) {
  extern __shared__ float q_rows[];  // kWide: [4][head_size]
  __shared__ FlexInstr code[kFlexMaxProgram];
  const FlexProgramView mask = stage_mask(a, code);
  __syncthreads();
  Cta c;
  if (!flex_cta(a, c)) return;
  const FlexCudaParams& p = a.p;
  const int G = p.num_q_heads / p.num_kv_heads, kvh = int(blockIdx.y);
  const int warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const int hs = p.head_size;
  const int32_t* btab = p.block_tables + size_t(c.seq) * p.max_blocks_per_seq;
  const int nchunks = c.count * chunks_per_block<kGroup>(a.block_n);
  const bool has_mod = !a.d.mod.empty();
  const size_t q_stride = p.q_stride > 0 ? size_t(p.q_stride) : size_t(p.num_q_heads) * hs;

  const int d0 = kWide ? int(blockIdx.z) * 32 * kJ : 0;  // the CTA's first output dimension
  float* qs = q_rows + size_t(warp) * hs;

  for (int r = warp; r < c.rows; r += kThreads / 32) {
    const int R = c.row_start + r, ti = R / G, h = kvh * G + R % G;
    const int tok = c.tok0 + ti;
    const int32_t qpos = c.pos0 + ti;
    const T* qrow = static_cast<const T*>(p.q) + size_t(tok) * q_stride + size_t(h) * hs;
    float q[kWide ? 1 : kJ], acc[kJ];
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int d = lane + 32 * j;
      if constexpr (!kWide) q[j] = d < hs ? to_f32(qrow[d]) : 0.f;
      acc[j] = 0.f;
    }
    if constexpr (kWide) {
      __syncwarp();  // the previous row's reads of qs are done
      for (int d = lane; d < hs; d += 32) qs[d] = to_f32(qrow[d]);
      __syncwarp();
    }
    float m = -INFINITY, l = 0.f;
    for (int ci = 0; ci < nchunks; ++ci) {
      const Chunk ch = flex_chunk<kGroup>(a, c, ci);
      const int n = ch.k1 - ch.k0;
      if (n <= 0) continue;
      const bool ok = lane < n && (!ch.partial || flex_eval(mask, c.seq, qpos, ch.k0 + lane));
      const unsigned bits = __ballot_sync(0xffffffffu, ok);
      if (!bits) continue;
      float mine = -INFINITY;  // lane j: the score of key j of the group
      for (unsigned b = bits; b; b &= b - 1) {
        const int j = __ffs(int(b)) - 1;
        const size_t base = kv_slot(p, btab, ch.k0 + j, kvh);
        float dot = 0.f;
        if constexpr (kWide) {
          for (int d = lane; d < hs; d += 32) dot += qs[d] * load_kv(p.kv_cache, base + d, p.kv_dtype);
        } else {
#pragma unroll
          for (int jj = 0; jj < kJ; ++jj) {
            const int d = lane + 32 * jj;
            if (d < hs) dot += q[jj] * load_kv(p.kv_cache, base + d, p.kv_dtype);
          }
        }
#pragma unroll
        for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        float s = dot * a.scale;
        if (has_mod) s = flex_modify(a.d.mod, h, s, ch.k0 + j - qpos);
        if (lane == j) mine = s;
      }
      float mx = mine;
#pragma unroll
      for (int o = 16; o > 0; o /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float m_new = fmaxf(m, mx);
      const float alpha = expf(m - m_new);  // 0 on the row's first keys (m = -inf)
      const float pj = ok ? expf(mine - m_new) : 0.f;
      float ps = pj;
#pragma unroll
      for (int o = 16; o > 0; o /= 2) ps += __shfl_xor_sync(0xffffffffu, ps, o);
      l = l * alpha + ps;
#pragma unroll
      for (int jj = 0; jj < kJ; ++jj) acc[jj] *= alpha;
      for (unsigned b = bits; b; b &= b - 1) {
        const int j = __ffs(int(b)) - 1;
        const float w = __shfl_sync(0xffffffffu, pj, j);
        const size_t base = kv_slot(p, btab, ch.k0 + j, kvh) + hs;
#pragma unroll
        for (int jj = 0; jj < kJ; ++jj) {
          const int d = d0 + lane + 32 * jj;
          if (d < hs) acc[jj] += w * load_kv(p.kv_cache, base + d, p.kv_dtype);
        }
      }
      m = m_new;
    }
    const float inv = l > 0.f ? 1.f / l : 0.f;  // no allowed key: zeros
    T* out = static_cast<T*>(p.out) + (size_t(tok) * p.num_q_heads + h) * hs;
#pragma unroll
    for (int j = 0; j < kJ; ++j) {
      const int d = d0 + lane + 32 * j;
      if (d < hs) out[d] = from_f32<T>(acc[j] * inv);
    }
  }
}

template <typename T>
void launch_typed(const KernelArgs& a, dim3 grid, cudaStream_t stream) {
  constexpr int kWideJ = kFlexCudaRegisterHeadSize / 32;
  const int hs = a.p.head_size;
  if (hs <= 128) {
    flex_simt_kernel<T, 4, false><<<grid, kThreads, 0, stream>>>(a);
  } else if (hs <= kFlexCudaRegisterHeadSize) {
    flex_simt_kernel<T, kWideJ, false><<<grid, kThreads, 0, stream>>>(a);
  } else {
    const size_t bytes = size_t(kThreads / 32) * hs * sizeof(float);
    static int configured = 0;  // the dynamic shared-memory limit raised so far (48 KB without asking)
    if (bytes > 48 * 1024 && int(bytes) > configured) {
      PAGODA_CUDA_OK(cudaFuncSetAttribute(flex_simt_kernel<T, kWideJ, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                          int(bytes)));
      configured = int(bytes);
    }
    grid.z = unsigned((hs + kFlexCudaRegisterHeadSize - 1) / kFlexCudaRegisterHeadSize);
    flex_simt_kernel<T, kWideJ, true><<<grid, kThreads, bytes, stream>>>(a);
  }
  PAGODA_CUDA_OK(cudaGetLastError());
}

}  // namespace

void launch_simt(const KernelArgs& a, dim3 grid, cudaStream_t stream) {
  switch (a.p.dtype) {
    case DType::kF32: return launch_typed<float>(a, grid, stream);
    case DType::kF16: return launch_typed<__half>(a, grid, stream);
    case DType::kBF16: return launch_typed<__nv_bfloat16>(a, grid, stream);
    case DType::kF8E4M3: case DType::kF8E5M2: case DType::kU8: case DType::kI32: case DType::kI64: break;
  }
  PAGODA_CHECK(false, "flex_cuda: no kernel for dtype ", dtype_name(a.p.dtype));
}

}  // namespace pagoda::flex_detail
