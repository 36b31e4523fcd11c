// PRIVATE to flex_attention/: FLEX_ATTENTION's tensor-core kernel (float16 / bfloat16, head sizes 64, 128,
// 256; sm_80 and sm_90a): FlashAttention-2's algorithm over the plan's key list. mma.sync m16n8k16 with
// float32 accumulators, ldmatrix from swizzled shared memory, cp.async double buffering of 64-key chunks,
// online softmax in float32 in the exp2 domain. Instantiated per element type in flex_cuda_mma_{f16,bf16}.cu.
//
// A CTA (4 warps) holds 64 rows of Q, a warp 16 of them. The key list is walked in chunks of at most 64 keys
// (32 at head size 256) inside one key block (a 128-key block is two or four chunks; a 16-key block one, whose
// unused key columns are skipped 16 at a time). Chunk i + 1 is in flight while chunk i is computed. Per element, the score is
// scaled, modified (soft-cap, ALiBi, relative bias), and on partial blocks masked by the mask program.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "pagoda/attention/cuda_ok.h"
#include "pagoda/attention/device_common.cuh"
#include "pagoda/attention/mma_sm80.cuh"
#include "pagoda/attention/flex_attention/flex_cuda_kernel.cuh"
#include "pagoda/core/cuda_convert.cuh"

namespace pagoda::flex_detail {
namespace mma {

using attention_device::cp_async_16;
using attention_device::cp_async_commit;
using attention_device::cp_async_wait;
using attention_device::ldmatrix_x4;
using attention_device::ldmatrix_x4_trans;
using attention_device::mma16816;
using attention_device::smem_u32;
using attention_device::swz;
using cuda_convert::pack2;

// Keys per chunk: 64, or 32 at head size 256, where S of 64 keys beside O's 128 accumulators spills.
template <int D>
constexpr int chunk_keys() { return D >= 256 ? 32 : 64; }
constexpr int kStages = 2;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr size_t smem_bytes() {
  return size_t(kRows) * D * 2 + size_t(kStages) * 2 * chunk_keys<D>() * D * 2;  // Q, then K and V per stage
}

template <typename T, int D>
__global__ void __launch_bounds__(kThreads) flex_mma_kernel(const KernelArgs a) {
  constexpr int CH = D / 8;  // 16-byte chunks of a row
  constexpr int kChunk = chunk_keys<D>();
  constexpr int kNT = kChunk / 8;
  constexpr int kDT = D / 8;
  extern __shared__ uint4 smem[];
  __shared__ FlexInstr code[kFlexMaxProgram];
  uint4* sQ = smem;
  uint4* sK = sQ + kRows * CH;
  uint4* sV = sK + kStages * kChunk * CH;
  const FlexProgramView mask = stage_mask(a, code);
  __syncthreads();
  Cta c;
  if (!flex_cta(a, c)) return;
  const FlexCudaParams& p = a.p;
  const int G = p.num_q_heads / p.num_kv_heads, kvh = int(blockIdx.y);
  const int tid = int(threadIdx.x), warp = tid / 32, lane = tid % 32;
  const int32_t* btab = p.block_tables + size_t(c.seq) * p.max_blocks_per_seq;
  const int nchunks = c.count * chunks_per_block<kChunk>(a.block_n);
  const bool has_mod = !a.d.mod.empty();
  const T* kv = static_cast<const T*>(p.kv_cache);

  // The chunk's keys [k0, k1) land in rows 0 .. k1 - k0 of the stage; the other rows are zeros.
  auto load_chunk = [&](int ci, int stage) {
    const Chunk ch = flex_chunk<kChunk>(a, c, ci);
    uint4* k_dst = sK + stage * kChunk * CH;
    uint4* v_dst = sV + stage * kChunk * CH;
    for (int i = tid; i < kChunk * CH; i += kThreads) {
      const int r = i / CH, cc = i % CH, key = ch.k0 + r;
      const int pos = swz<CH>(r, cc);
      if (key < ch.k1) {
        const T* src = kv + kv_slot(p, btab, key, kvh) + cc * 8;
        cp_async_16(&k_dst[pos], src);
        cp_async_16(&v_dst[pos], src + D);
      } else {
        k_dst[pos] = make_uint4(0, 0, 0, 0);
        v_dst[pos] = make_uint4(0, 0, 0, 0);
      }
    }
  };

  // Q rows (zeros past the CTA's rows).
  const size_t q_stride = p.q_stride > 0 ? size_t(p.q_stride) : size_t(p.num_q_heads) * D;
  for (int i = tid; i < kRows * CH; i += kThreads) {
    const int r = i / CH, cc = i % CH;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < c.rows) {
      const int R = c.row_start + r;
      const int tok = c.tok0 + R / G, h = kvh * G + R % G;
      v = *reinterpret_cast<const uint4*>(static_cast<const T*>(p.q) + size_t(tok) * q_stride + size_t(h) * D + cc * 8);
    }
    sQ[swz<CH>(r, cc)] = v;
  }
  if (nchunks > 0) load_chunk(0, 0);
  cp_async_commit();

  // This thread's rows: r0 = warp * 16 + lane / 4 and r0 + 8.
  const int row_base = warp * 16;
  int32_t q_pos[2];
  int head[2];
  bool row_ok[2];
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const int r = row_base + lane / 4 + 8 * i, R = c.row_start + r;
    row_ok[i] = r < c.rows;
    q_pos[i] = c.pos0 + (row_ok[i] ? R / G : 0);
    head[i] = kvh * G + R % G;
  }
  float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.f, 0.f};
  float acc[kDT][4];
#pragma unroll
  for (int j = 0; j < kDT; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.f;
  const float scale_log2 = a.scale * kLog2e;

  for (int ci = 0; ci < nchunks; ++ci) {
    const int stage = ci % kStages;
    if (ci + 1 < nchunks) load_chunk(ci + 1, (ci + 1) % kStages);
    cp_async_commit();
    cp_async_wait<1>();
    __syncthreads();  // chunk ci (and, at ci = 0, Q) visible to every warp
    const Chunk ch = flex_chunk<kChunk>(a, c, ci);
    const int n = ch.k1 - ch.k0;
    if (n > 0) {
      const uint4* k_s = sK + stage * kChunk * CH;
      const uint4* v_s = sV + stage * kChunk * CH;
      // S = Q K^T for the warp's 16 rows x the chunk's keys, 16 keys at a time.
      float s[kNT][4];
#pragma unroll
      for (int j = 0; j < kNT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t af[4];
        ldmatrix_x4(af, &sQ[swz<CH>(row_base + (lane % 16), kk * 2 + lane / 16)]);
#pragma unroll
        for (int nn = 0; nn < kNT / 2; ++nn) {
          if (nn * 16 >= n) break;
          uint32_t bf[4];
          ldmatrix_x4(bf, &k_s[swz<CH>(nn * 16 + (lane / 16) * 8 + (lane % 8), kk * 2 + (lane / 8) % 2)]);
          mma16816<T>(s[2 * nn], af, bf);
          mma16816<T>(s[2 * nn + 1], af, bf + 2);
        }
      }
      // The mask of the thread's 4 kNT elements (bit 4 j + e: n-tile j, element e), evaluated in a loop that
      // is not unrolled, so that the program's interpreter is inlined once.
      static_assert(kNT * 4 <= 32, "one bit per element");
      uint32_t allow = 0xffffffffu;
      if (ch.partial) {
        allow = 0;
#pragma unroll 1
        for (int b = 0; b < 4 * kNT; ++b) {
          const int key = ch.k0 + (b / 4) * 8 + (lane % 4) * 2 + (b % 2);
          const bool second = (b % 4) >= 2;  // selects, not a run-time index into the row arrays
          const bool ok = second ? row_ok[1] : row_ok[0];
          if (ok && key < ch.k1 && flex_eval(mask, c.seq, second ? q_pos[1] : q_pos[0], key)) allow |= 1u << b;
        }
      }
      // Scale, modify, mask (log2 domain).
      float row_max[2] = {-INFINITY, -INFINITY};
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int i = e / 2;
          const int key = ch.k0 + j * 8 + (lane % 4) * 2 + (e % 2);
          const bool ok = row_ok[i] && key < ch.k1 && ((allow >> (4 * j + e)) & 1u);
          float x;
          if (has_mod) x = flex_modify(a.d.mod, head[i], s[j][e] * a.scale, key - q_pos[i]) * kLog2e;
          else x = s[j][e] * scale_log2;
          x = ok ? x : -INFINITY;
          s[j][e] = x;
          row_max[i] = fmaxf(row_max[i], x);
        }
      }
      float alpha[2];
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 1));
        row_max[i] = fmaxf(row_max[i], __shfl_xor_sync(0xffffffffu, row_max[i], 2));
        const float m_new = fmaxf(m[i], row_max[i]);
        const float m_use = m_new == -INFINITY ? 0.f : m_new;  // a row with no key yet stays at zero
        alpha[i] = exp2f(m[i] - m_use);
        m[i] = m_new;
        row_max[i] = m_use;
      }
      float row_sum[2] = {0.f, 0.f};
#pragma unroll
      for (int j = 0; j < kNT; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float pe = exp2f(s[j][e] - row_max[e / 2]);
          s[j][e] = pe;
          row_sum[e / 2] += pe;
        }
      }
#pragma unroll
      for (int i = 0; i < 2; ++i) l[i] = l[i] * alpha[i] + row_sum[i];  // quad-partial; reduced at the end
#pragma unroll
      for (int j = 0; j < kDT; ++j) {
        acc[j][0] *= alpha[0];
        acc[j][1] *= alpha[0];
        acc[j][2] *= alpha[1];
        acc[j][3] *= alpha[1];
      }
      // O += P V, 16 keys at a time.
#pragma unroll
      for (int kk = 0; kk < kNT / 2; ++kk) {
        if (kk * 16 >= n) break;
        uint32_t af[4];
        af[0] = pack2<T>(s[2 * kk][0], s[2 * kk][1]);
        af[1] = pack2<T>(s[2 * kk][2], s[2 * kk][3]);
        af[2] = pack2<T>(s[2 * kk + 1][0], s[2 * kk + 1][1]);
        af[3] = pack2<T>(s[2 * kk + 1][2], s[2 * kk + 1][3]);
#pragma unroll
        for (int dd = 0; dd < D / 16; ++dd) {
          uint32_t bf[4];
          ldmatrix_x4_trans(bf, &v_s[swz<CH>(kk * 16 + ((lane / 8) % 2) * 8 + (lane % 8), dd * 2 + lane / 16)]);
          mma16816<T>(acc[2 * dd], af, bf);
          mma16816<T>(acc[2 * dd + 1], af, bf + 2);
        }
      }
    }
    __syncthreads();  // the stage is overwritten by the load of chunk ci + 2
  }
  cp_async_wait<0>();

#pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
  }
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    if (!row_ok[i]) continue;
    const int R = c.row_start + row_base + lane / 4 + 8 * i;
    const int tok = c.tok0 + R / G;
    const float inv = l[i] > 0.f ? 1.f / l[i] : 0.f;  // no allowed key: zeros
    T* out = static_cast<T*>(p.out) + (size_t(tok) * p.num_q_heads + head[i]) * D;
#pragma unroll
    for (int j = 0; j < kDT; ++j) {
      const int d = j * 8 + (lane % 4) * 2;
      *reinterpret_cast<uint32_t*>(out + d) = pack2<T>(acc[j][2 * i] * inv, acc[j][2 * i + 1] * inv);
    }
  }
}

template <typename T, int D>
void launch_d(const KernelArgs& a, dim3 grid, cudaStream_t stream) {
  constexpr size_t bytes = smem_bytes<D>();
  static bool configured = false;  // raising the dynamic shared-memory limit once per kernel
  if (!configured) {
    PAGODA_CUDA_OK(cudaFuncSetAttribute(flex_mma_kernel<T, D>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(bytes)));
    configured = true;
  }
  flex_mma_kernel<T, D><<<grid, kThreads, bytes, stream>>>(a);
  PAGODA_CUDA_OK(cudaGetLastError());
}

template <typename T>
void launch_mma_impl(const KernelArgs& a, dim3 grid, cudaStream_t stream) {
  switch (a.p.head_size) {
    case 64: return launch_d<T, 64>(a, grid, stream);
    case 128: return launch_d<T, 128>(a, grid, stream);
    case 256: return launch_d<T, 256>(a, grid, stream);
    default: PAGODA_CHECK(false, "flex_cuda: no tensor-core kernel for head size ", a.p.head_size);
  }
}

}  // namespace mma
}  // namespace pagoda::flex_detail
