// PRIVATE to ops/cuda: the one-token quantized GEMV with int8 activations (quant_gemv.h, m = 1 without batch
// invariance), the CPU's arithmetic (ops/quant/quant_matmul.h) on the GPU. Included by quant_gemv_i8.cu
// (the kernels) and by tests/ops_cuda/quant_gemv_i8_emulation_test.cc (the CTA body on the host).
//
// A decode step reads every weight once and does two operations per weight, so the kernel's whole job is to
// keep the weight stream at the memory's speed with as few instructions per byte as it can. The 16-bit
// kernel (quant_gemv_kernel.cuh) turns each code into a 16-bit float for the tensor cores; this one
// multiplies the codes as they are stored with int8 activations, four products per dp4a:
//
// - Prologue: each CTA quantizes x into its shared memory exactly as the CPU does (quantize_act_row in
//   quant_matmul.cc): per block of 32 (the 32-weight formats) or 256 (the k-quants) a scale dx = max|x| / 127
//   and codes round-to-nearest-even(x / dx), with the codes' sums per 32 for the k-quants' mins.
// - The CTA starts its warps' first rows on their way into L2 (prefetch) before it waits for the previous
//   kernel (programmatic dependent launch on SM 9.0: the CTAs may be placed while that kernel still runs; the
//   RMSNorm and SiLU-and-mul kernels before a GEMV let them).
// - Each warp owns a weight row at a time (rows warp, warp + all warps, ...) and reads it straight from
//   global memory in 16-byte loads, a group of loads in flight before any is used:
//   Q4_K (and Q5_K, which adds a load of the high bits): lane (group, c) = (lane / 8, lane % 8) reads the
//   header (d, dmin, scales) and quarter c of the 128 code bytes of super-block 4 step + group; the eight lanes of a super-block add their integer sums
//   (sub-block scale x dot product, mins x code sums) exactly, in a reduce-scatter of 7 shuffles for four
//   steps at once.
//   Q6_K (210-byte blocks): the warp stages 8 blocks at a time, then lane (group, c) multiplies 32 codes of
//   block 4 step + group (low or high nibbles with two high bits each), the 8 lanes add their sums.
//   The 32-weight formats (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0: blocks of 18-34 bytes, 2-byte aligned): the warp
//   copies 32 consecutive blocks into its own shared staging in coalesced 16-byte loads, then lane l
//   multiplies block l (codes as stored; Q4_0's and Q5_0's offsets come off with x's code sums).
// - Each block's float term is the CPU's, operation for operation (no contraction into FMA):
//   Q4_0 Q5_0 Q8_0 Q6_K  (d_w * dx) * float(isum)      Q4_1 Q5_1  (d_w * dx) * float(isum) + m_w * (dx * float(sum))
//   Q4_K Q5_K            (d * dx) * float(isum) - (dmin * dx) * float(msum)
//   A lane adds its terms in block order, the warp's lanes in a fixed butterfly: the result differs from the
//   CPU's only by the order of the float additions (the CPU adds the terms in block order), and an output
//   depends on its row of W and on x alone (never on the launch).
//
// The body is written against an `Ops` policy (loads, shuffles, dp4a, barriers); everything but DeviceOps and
// the kernel also compiles as plain C++ for the emulation test.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <vector_types.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>

#include "pagoda/core/quant_type.h"
#include "pagoda/ops/cuda/quant_gemv_bits.cuh"

#define PAGODA_I8_HD __host__ __device__ __forceinline__
#ifdef __CUDA_ARCH__
#define PAGODA_I8_UNROLL _Pragma("unroll")
#else
#define PAGODA_I8_UNROLL
#endif

namespace pagoda::quant_gemv_i8_detail {

using quant_gemv_detail::from_float;
using quant_gemv_detail::funnel_right;
using quant_gemv_detail::to_float;

constexpr int kWarps = 8;
constexpr int kThreads = 32 * kWarps;
// The largest k: the CTA's quantized x (k bytes, 5 k / 32 more of scales and sums) stays in shared memory.
constexpr int kMaxK = 32768;

// ---- per-format constants ----
template <QuantType Q>
struct Fmt;
template <>
struct Fmt<QuantType::kQ4_K> {
  static constexpr int kBlockBytes = 144, kBlockElems = 256;
  static constexpr int kActBlock = 256;  // activations share a scale per k-quant block (the CPU's Q8_K)
  static constexpr int kSteps = 4;       // super-blocks 4 step + group: 16 per group of loads
  static constexpr int kStageBytes = 0;  // no staging: loads go straight to registers
  static constexpr int kQhOffset = -1, kQsOffset = 16;  // [d dmin scales 12][qs 128]
};
template <>
struct Fmt<QuantType::kQ5_K> : Fmt<QuantType::kQ4_K> {
  static constexpr int kBlockBytes = 176;
  static constexpr int kSteps = 2;  // the high bits' loads too in 64 registers
  static constexpr int kQhOffset = 16, kQsOffset = 48;  // [d dmin scales 12][qh 32][qs 128]
};
template <>
struct Fmt<QuantType::kQ6_K> {
  static constexpr int kBlockBytes = 210, kBlockElems = 256;
  static constexpr int kActBlock = 256;
  // 8 blocks (1680 bytes, 105 chunks: a whole number when the row starts 16-byte aligned, which k % 2048 == 0
  // gives) are staged at a time and taken in two steps of 4, a block per 8 lanes.
  static constexpr int kRoundBlocks = 8;
  static constexpr int kRoundBytes = kRoundBlocks * 210;
  static constexpr int kStageBytes = kRoundBytes + 16;  // + slack for the word reads of the last block
};
// The 32-weight formats: blocks of 18 (Q4_0), 20 (Q4_1), 22 (Q5_0), 24 (Q5_1) or 34 (Q8_0) bytes.
template <int B>
struct Fmt32 {
  static constexpr int kBlockBytes = B, kBlockElems = 32;
  static constexpr int kActBlock = 32;
  static constexpr int kSteps = 2;  // 32 blocks a step: 64 per group of loads
  // One step's 32 blocks and 16 bytes of slack for the last lane's word reads.
  static constexpr int kStepBytes = 32 * B + 16;
  static constexpr int kStageBytes = kSteps * kStepBytes;
};
template <>
struct Fmt<QuantType::kQ4_0> : Fmt32<18> {};
template <>
struct Fmt<QuantType::kQ4_1> : Fmt32<20> {};
template <>
struct Fmt<QuantType::kQ5_0> : Fmt32<22> {};
template <>
struct Fmt<QuantType::kQ5_1> : Fmt32<24> {};
template <>
struct Fmt<QuantType::kQ8_0> : Fmt32<34> {};

// Shared memory: [xq: k int8][dx: k / kActBlock floats][s32: k / 32 int32][s16: k / 16 int32, Q6_K]
// [staging: kWarps x kStageBytes].
template <QuantType Q>
struct Smem {
  static constexpr bool kS16 = Q == QuantType::kQ6_K;
  static constexpr size_t dx_offset(int k) { return size_t(k); }
  static constexpr size_t s32_offset(int k) { return dx_offset(k) + size_t(k / Fmt<Q>::kActBlock) * 4; }
  static constexpr size_t s16_offset(int k) { return s32_offset(k) + size_t(k / 32) * 4; }
  static constexpr size_t stage_offset(int k) { return (s16_offset(k) + (kS16 ? size_t(k / 16) * 4 : 0) + 15) / 16 * 16; }
  static constexpr size_t bytes(int k) { return stage_offset(k) + size_t(kWarps) * Fmt<Q>::kStageBytes; }
};

// ---- float operations as the CPU rounds them (no FMA contraction) ----
PAGODA_I8_HD float mul_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
PAGODA_I8_HD float add_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
PAGODA_I8_HD float sub_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
PAGODA_I8_HD float div_rn(float a, float b) {
#ifdef __CUDA_ARCH__
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
PAGODA_I8_HD int round_even(float v) {
#ifdef __CUDA_ARCH__
  return __float2int_rn(v);
#else
  return int(std::nearbyint(v));
#endif
}
PAGODA_I8_HD float f16_at(uint32_t word, int half) {
  __half_raw r;
  r.x = uint16_t(half ? word >> 16 : word & 0xffff);
  return __half2float(__half(r));
}
template <typename T>
PAGODA_I8_HD float half_bits_to_float(uint16_t bits) {
  if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    __nv_bfloat16_raw r;
    r.x = bits;
    return __bfloat162float(__nv_bfloat16(r));
  } else {
    __half_raw r;
    r.x = bits;
    return __half2float(__half(r));
  }
}

// ---- the prologue: x (one row of k) quantized into shared memory as the CPU quantizes it ----
// Thread i of the CTA takes elements 8 i .. 8 i + 7 per pass; a block of kActBlock elements is kActBlock / 8
// consecutive lanes of one warp (4 or 32), which reduce its maximum and code sums by shuffles.
template <QuantType Q, typename T, class Ops>
PAGODA_I8_HD void quantize_x(const T* x, int k, uint8_t* smem, int tid) {
  constexpr int AB = Fmt<Q>::kActBlock, kLanes = AB / 8;
  int8_t* xq = reinterpret_cast<int8_t*>(smem);
  float* dx = reinterpret_cast<float*>(smem + Smem<Q>::dx_offset(k));
  int32_t* s32 = reinterpret_cast<int32_t*>(smem + Smem<Q>::s32_offset(k));
  int32_t* s16 = reinterpret_cast<int32_t*>(smem + Smem<Q>::s16_offset(k));
  const int lane = tid & 31;
  for (int base = 0; base < k; base += 8 * kThreads) {  // uniform trip count: every lane reaches the shuffles
    const int e0 = base + 8 * tid;
    const bool here = e0 < k;  // k is a multiple of AB, so a block's lanes agree
    float v[8];
    if (here) {
      const uint4 raw = Ops::ldg16(x + e0);
      const uint32_t wd[4] = {raw.x, raw.y, raw.z, raw.w};
PAGODA_I8_UNROLL
      for (int i = 0; i < 8; ++i) {
        v[i] = half_bits_to_float<T>(uint16_t(i & 1 ? wd[i / 2] >> 16 : wd[i / 2] & 0xffff));
      }
    } else {
PAGODA_I8_UNROLL
      for (int i = 0; i < 8; ++i) v[i] = 0.f;
    }
    float amax = 0.f;
    int finite = 1;
PAGODA_I8_UNROLL
    for (int i = 0; i < 8; ++i) {
      const float a = std::fabs(v[i]);
      finite &= a <= std::numeric_limits<float>::max();  // false for inf and NaN
      amax = a > amax ? a : amax;
    }
PAGODA_I8_UNROLL
    for (int m = 1; m < kLanes; m *= 2) {
      const float o = Ops::shfl_xor(amax, m);
      amax = o > amax ? o : amax;
      finite &= Ops::shfl_xor_i(finite, m);
    }
    const float d = finite ? div_rn(amax, 127.0f) : std::numeric_limits<float>::quiet_NaN();
    const float id = finite && d > 0.f ? div_rn(1.0f, d) : 0.f;
    int sum = 0;
    uint32_t packed[2] = {0, 0};
PAGODA_I8_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int q = finite ? round_even(mul_rn(v[i], id)) : 0;
      sum += q;
      packed[i / 4] |= uint32_t(uint8_t(int8_t(q))) << (8 * (i % 4));
    }
    // The code sums of each 16 and 32 elements: 2 and 4 lanes.
    sum += Ops::shfl_xor_i(sum, 1);
    if (Smem<Q>::kS16 && here && (lane & 1) == 0) s16[e0 / 16] = sum;
    sum += Ops::shfl_xor_i(sum, 2);
    if (here) {
      std::memcpy(xq + e0, packed, 8);
      if ((lane & 3) == 0) s32[e0 / 32] = sum;
      if ((lane & (kLanes - 1)) == 0) dx[e0 / AB] = d;
    }
  }
}

// ---- Q4_K, Q5_K ----
// 6-bit scale and min of sub-block j from the block's 12 scale bytes, held as words s[0..2] (k_scale_min).
PAGODA_I8_HD void k_scale_min(const uint32_t (&s)[3], int j, int& sc, int& mn) {
  auto byte = [&](int i) { return int((s[i >> 2] >> (8 * (i & 3))) & 0xff); };
  if (j < 4) {
    sc = byte(j) & 63;
    mn = byte(j + 4) & 63;
  } else {
    sc = (byte(j + 4) & 0x0F) | ((byte(j - 4) >> 6) << 4);
    mn = (byte(j + 4) >> 4) | ((byte(j) >> 6) << 4);
  }
}

// Eight int sums per lane, one per value index; afterwards lane c (of each 8-lane group) holds the group's
// total of index c. Integer sums: the order does not matter.
template <class Ops>
PAGODA_I8_HD int reduce_scatter8(int (&v)[8], int c) {
PAGODA_I8_UNROLL
  for (int m = 4; m >= 1; m >>= 1) {
PAGODA_I8_UNROLL
    for (int i = 0; i < m; ++i) {
      const bool upper = (c & m) != 0;
      const int send = upper ? v[i] : v[i + m];
      const int keep = upper ? v[i + m] : v[i];
      v[i] = keep + Ops::shfl_xor_i(send, m);
    }
  }
  return v[0];
}

// Q4_K and Q5_K (Q5_K: bit s of qh[l] is bit 4 of element l of sub-block s; lane c reads the 16 bytes of qh
// of its elements, which hold the bits of every sub-block).
template <QuantType Q, typename T, class Ops>
PAGODA_I8_HD float row_k_quant(const uint8_t* row, int nb, const uint8_t* smem, int k, int lane) {
  using F = Fmt<Q>;
  constexpr int kSteps = F::kSteps, kB = F::kBlockBytes;
  constexpr bool kQ5 = F::kQhOffset >= 0;
  const int8_t* xq = reinterpret_cast<const int8_t*>(smem);
  const float* dx = reinterpret_cast<const float*>(smem + Smem<Q>::dx_offset(k));
  const int32_t* s32 = reinterpret_cast<const int32_t*>(smem + Smem<Q>::s32_offset(k));
  const int grp = lane >> 3, c = lane & 7, pair = c >> 1, half = c & 1;
  float acc = 0.f;
  for (int s0 = 0; s0 < nb; s0 += 4 * kSteps) {
    uint4 hd[kSteps], qs[kSteps], qh[kSteps];
PAGODA_I8_UNROLL
    for (int u = 0; u < kSteps; ++u) {
      const int sb = s0 + 4 * u + grp;
      hd[u] = qs[u] = qh[u] = make_uint4(0, 0, 0, 0);
      if (sb < nb) {
        hd[u] = Ops::ldg16(row + size_t(sb) * kB);
        qs[u] = Ops::ldg16(row + size_t(sb) * kB + F::kQsOffset + 16 * c);
        if constexpr (kQ5) qh[u] = Ops::ldg16(row + size_t(sb) * kB + F::kQhOffset + 16 * half);
      }
    }
    static_assert(kSteps <= 4, "two sums a step, eight in the reduce-scatter");
    int v[8] = {0, 0, 0, 0, 0, 0, 0, 0};
PAGODA_I8_UNROLL
    for (int u = 0; u < kSteps; ++u) {
      const int sb = s0 + 4 * u + grp;
      int isum = 0, msum = 0;
      if (sb < nb) {
        const uint32_t sw[3] = {hd[u].y, hd[u].z, hd[u].w};
        int sc_lo, mn_lo, sc_hi, mn_hi;
        k_scale_min(sw, 2 * pair, sc_lo, mn_lo);
        k_scale_min(sw, 2 * pair + 1, sc_hi, mn_hi);
        const int e = sb * 256 + 64 * pair + 16 * half;  // element of the low sub-block's first code
        const uint4 xl = Ops::lds16(xq + e), xh = Ops::lds16(xq + e + 32);
        const uint32_t w[4] = {qs[u].x, qs[u].y, qs[u].z, qs[u].w}, h[4] = {qh[u].x, qh[u].y, qh[u].z, qh[u].w};
        const uint32_t al[4] = {xl.x, xl.y, xl.z, xl.w}, ah[4] = {xh.x, xh.y, xh.z, xh.w};
        int dot_lo = 0, dot_hi = 0;
PAGODA_I8_UNROLL
        for (int i = 0; i < 4; ++i) {
          uint32_t lo = w[i] & 0x0f0f0f0fu, hi = (w[i] >> 4) & 0x0f0f0f0fu;
          if constexpr (kQ5) {
            lo |= ((h[i] >> (2 * pair)) & 0x01010101u) << 4;
            hi |= ((h[i] >> (2 * pair + 1)) & 0x01010101u) << 4;
          }
          dot_lo = Ops::dp4a(lo, al[i], dot_lo);
          dot_hi = Ops::dp4a(hi, ah[i], dot_hi);
        }
        isum = sc_lo * dot_lo + sc_hi * dot_hi;
        if (half == 0) msum = mn_lo * s32[sb * 8 + 2 * pair] + mn_hi * s32[sb * 8 + 2 * pair + 1];
      }
      v[2 * u] = isum;
      v[2 * u + 1] = msum;
    }
    const int mine = reduce_scatter8<Ops>(v, c);             // lane c: isum (c even) or msum of step c / 2
    const int msum = Ops::shfl_xor_i(mine, 1);               // lane c even: its step's msum
PAGODA_I8_UNROLL
    for (int u = 0; u < kSteps; ++u) {
      const int sb = s0 + 4 * u + grp;
      if (c == 2 * u && sb < nb) {
        const float d = f16_at(hd[u].x, 0), dmin = f16_at(hd[u].x, 1), x_d = dx[sb];
        const float term = sub_rn(mul_rn(mul_rn(d, x_d), float(mine)), mul_rn(mul_rn(dmin, x_d), float(msum)));
        acc = add_rn(acc, term);
      }
    }
  }
  return acc;
}

// The NB bytes at p (shared memory, 2-byte aligned) as NB / 4 words: aligned word reads, shifted by 0 or 16.
template <int NW, class Ops>
PAGODA_I8_HD void words_at(const uint8_t* p, uint32_t (&out)[NW]) {
  const uint32_t* aw = reinterpret_cast<const uint32_t*>(reinterpret_cast<uintptr_t>(p) & ~uintptr_t(3));
  const uint32_t sh = uint32_t(reinterpret_cast<uintptr_t>(p) & 3) * 8;
  uint32_t w[NW + 1];
PAGODA_I8_UNROLL
  for (int i = 0; i <= NW; ++i) w[i] = Ops::lds4(aw + i);
PAGODA_I8_UNROLL
  for (int i = 0; i < NW; ++i) out[i] = funnel_right(w[i], w[i + 1], sh);
}

// ---- the 32-weight formats ----
// Block layouts (quant_blocks.h): Q4_0 [d][qs 16], Q4_1 [d][m][qs 16], Q5_0 [d][qh 4][qs 16],
// Q5_1 [d][m][qh 4][qs 16], Q8_0 [d][qs 32]; 4-bit codes: element t < 16 the low nibble of qs[t], t >= 16
// the high nibble of qs[t - 16]; Q5 adds bit t of qh (little-endian) as bit 4.
template <QuantType Q>
struct Block32Fmt {
  static constexpr int kBytes = Fmt<Q>::kBlockBytes;
  static constexpr bool kMin = Q == QuantType::kQ4_1 || Q == QuantType::kQ5_1;
  static constexpr bool kQ5 = Q == QuantType::kQ5_0 || Q == QuantType::kQ5_1;
  static constexpr int kQh = kMin ? 4 : 2;                  // the qh offset (Q5)
  static constexpr int kQs = 2 + (kMin ? 2 : 0) + (kQ5 ? 4 : 0);
  static constexpr int kOffset = kMin ? 0 : (kQ5 ? 16 : 8);  // w = d (q - offset) (+ m)
};

// Four bits of x (bit j) as bit 4 of byte j.
PAGODA_I8_HD uint32_t spread4(uint32_t x) { return ((x & 0xfu) * 0x00204081u & 0x01010101u) << 4; }

// A warp's step is 32 consecutive blocks (32 x block bytes: a whole number of 16-byte chunks, and every
// step starts 16-byte aligned, since nb is a multiple of 8), copied into the warp's staging in coalesced
// 16-byte loads, then lane l multiplies block l of the step.
template <QuantType Q, typename T, class Ops>
PAGODA_I8_HD float row_block32(const uint8_t* row, int nb, const uint8_t* smem, uint8_t* stage, int k, int lane) {
  using F = Fmt<Q>;
  using BF = Block32Fmt<Q>;
  constexpr int kB = BF::kBytes, kSteps = F::kSteps, kChunks = 2 * kB, kChunkLoads = (kChunks + 31) / 32;
  const int8_t* xq = reinterpret_cast<const int8_t*>(smem);
  const float* dx = reinterpret_cast<const float*>(smem + Smem<Q>::dx_offset(k));
  const int32_t* s32 = reinterpret_cast<const int32_t*>(smem + Smem<Q>::s32_offset(k));
  float acc = 0.f;
  for (int b0 = 0; b0 < nb; b0 += 32 * kSteps) {
    uint4 ch[kSteps][kChunkLoads];
PAGODA_I8_UNROLL
    for (int u = 0; u < kSteps; ++u) {
      const int blocks = nb - (b0 + 32 * u), chunks = blocks >= 32 ? kChunks : (blocks > 0 ? blocks * kB / 16 : 0);
PAGODA_I8_UNROLL
      for (int j = 0; j < kChunkLoads; ++j) {
        const int i = lane + 32 * j;
        ch[u][j] = i < chunks ? Ops::ldg16(row + size_t(b0 + 32 * u) * kB + 16 * i) : make_uint4(0, 0, 0, 0);
      }
    }
    Ops::sync_warp();  // every lane is done reading the last group's staging
PAGODA_I8_UNROLL
    for (int u = 0; u < kSteps; ++u)
PAGODA_I8_UNROLL
      for (int j = 0; j < kChunkLoads; ++j) {
        const int i = lane + 32 * j;
        if (i < kChunks) Ops::sts16(stage + u * F::kStepBytes + 16 * i, ch[u][j]);
      }
    Ops::sync_warp();
PAGODA_I8_UNROLL
    for (int u = 0; u < kSteps; ++u) {
      const int b = b0 + 32 * u + lane;
      if (b >= nb) continue;
      const uint8_t* blk = stage + u * F::kStepBytes + kB * lane;
      const float d = Ops::lds_f16(blk);
      const uint4 x0 = Ops::lds16(xq + size_t(b) * 32), x1 = Ops::lds16(xq + size_t(b) * 32 + 16);
      const uint32_t xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      int isum = 0;
      if constexpr (Q == QuantType::kQ8_0) {
        uint32_t qw[8];
        words_at<8, Ops>(blk + BF::kQs, qw);
PAGODA_I8_UNROLL
        for (int i = 0; i < 8; ++i) isum = Ops::dp4a(qw[i], xa[i], isum);
      } else {
        uint32_t qw[4];
        words_at<4, Ops>(blk + BF::kQs, qw);
        uint32_t qh = 0;
        if constexpr (BF::kQ5) qh = Ops::lds_u16(blk + BF::kQh) | Ops::lds_u16(blk + BF::kQh + 2) << 16;
PAGODA_I8_UNROLL
        for (int i = 0; i < 4; ++i) {
          uint32_t lo = qw[i] & 0x0f0f0f0fu, hi = (qw[i] >> 4) & 0x0f0f0f0fu;
          if constexpr (BF::kQ5) {
            lo |= spread4(qh >> (4 * i));
            hi |= spread4(qh >> (16 + 4 * i));
          }
          isum = Ops::dp4a(lo, xa[i], isum);
          isum = Ops::dp4a(hi, xa[4 + i], isum);
        }
        isum -= BF::kOffset * s32[b];  // the codes as stored, the offset taken off with x's code sum
      }
      const float x_d = dx[b];
      if constexpr (BF::kMin) {
        const float m = Ops::lds_f16(blk + 2), sx = mul_rn(x_d, float(s32[b]));
        acc = add_rn(acc, add_rn(mul_rn(mul_rn(d, x_d), float(isum)), mul_rn(m, sx)));
      } else {
        acc = add_rn(acc, mul_rn(mul_rn(d, x_d), float(isum)));
      }
    }
  }
  return acc;
}

// ---- Q6_K ----
// Lane (group, c) takes elements 32 c .. 32 c + 31 of block 4 step + group: half h = c / 4, quarter r = c % 4,
// low or high nibbles of ql[64 h + 32 (r & 1) ..] and bits 2r, 2r + 1 of qh[32 h ..]; scale groups 2c, 2c + 1.
// The codes q (0..63) go into dp4a as stored; the offset 32 comes off with the activations' 16-sums.
template <typename T, class Ops>
PAGODA_I8_HD float row_q6_k(const uint8_t* row, int nb, const uint8_t* smem, uint8_t* stage, int k, int lane) {
  using F = Fmt<QuantType::kQ6_K>;
  constexpr int kLoads = (F::kRoundBytes / 16 + 31) / 32;  // 105 chunks: 4 loads a lane
  const int8_t* xq = reinterpret_cast<const int8_t*>(smem);
  const float* dx = reinterpret_cast<const float*>(smem + Smem<QuantType::kQ6_K>::dx_offset(k));
  const int32_t* s16 = reinterpret_cast<const int32_t*>(smem + Smem<QuantType::kQ6_K>::s16_offset(k));
  const int grp = lane >> 3, c = lane & 7, h = c >> 2, r = c & 3;
  float acc = 0.f;
  for (int b0 = 0; b0 < nb; b0 += F::kRoundBlocks) {
    const int chunks = (nb - b0 >= F::kRoundBlocks ? F::kRoundBytes : (nb - b0) * 210) / 16;  // nb % 8 == 0
    uint4 ch[kLoads];
PAGODA_I8_UNROLL
    for (int j = 0; j < kLoads; ++j) {
      const int i = lane + 32 * j;
      ch[j] = i < chunks ? Ops::ldg16(row + size_t(b0) * 210 + 16 * i) : make_uint4(0, 0, 0, 0);
    }
    Ops::sync_warp();  // every lane is done reading the last round's staging
PAGODA_I8_UNROLL
    for (int j = 0; j < kLoads; ++j) {
      const int i = lane + 32 * j;
      if (i < F::kRoundBytes / 16) Ops::sts16(stage + 16 * i, ch[j]);
    }
    Ops::sync_warp();
PAGODA_I8_UNROLL
    for (int u = 0; u < F::kRoundBlocks / 4; ++u) {
      const int bl = 4 * u + grp, b = b0 + bl;  // the warp's lanes agree on b < nb per group of 8
      int isum = 0;
      if (b < nb) {
        const uint8_t* blk = stage + bl * 210;
        uint32_t ql[8], qh[8];
        words_at<8, Ops>(blk + 64 * h + 32 * (r & 1), ql);
        words_at<8, Ops>(blk + 128 + 32 * h, qh);
        const int e = b * 256 + 32 * c;
        const uint4 x0 = Ops::lds16(xq + e), x1 = Ops::lds16(xq + e + 16);
        const uint32_t xa[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
        int dot[2] = {0, 0};
PAGODA_I8_UNROLL
        for (int i = 0; i < 8; ++i) {
          const uint32_t nib = (r < 2 ? ql[i] : ql[i] >> 4) & 0x0f0f0f0fu;
          const uint32_t q = nib | ((qh[i] >> (2 * r)) & 0x03030303u) << 4;
          dot[i / 4] = Ops::dp4a(q, xa[i], dot[i / 4]);
        }
        const uint32_t scw = Ops::lds_u16(blk + 192 + 2 * c);  // int8 scales of groups 2c, 2c + 1
        const int sc0 = int(int8_t(uint8_t(scw & 0xff))), sc1 = int(int8_t(uint8_t(scw >> 8)));
        const int g = b * 16 + 2 * c;
        isum = sc0 * (dot[0] - 32 * s16[g]) + sc1 * (dot[1] - 32 * s16[g + 1]);
      }
      isum += Ops::shfl_xor_i(isum, 1);
      isum += Ops::shfl_xor_i(isum, 2);
      isum += Ops::shfl_xor_i(isum, 4);
      if (c == 0 && b < nb) {
        const float d = Ops::lds_f16(stage + bl * 210 + 208);
        acc = add_rn(acc, mul_rn(mul_rn(d, dx[b]), float(isum)));
      }
    }
  }
  return acc;
}

// The CTA body: quantize x, then warp w of CTA `cta` (of `ctas`) takes rows w + kWarps (cta + ctas i).
// Rows past n are never read: a prefetch, too, stays inside W.
template <QuantType Q, typename T, class Ops>
PAGODA_I8_HD void gemv_i8_cta(const T* x, const uint8_t* w, const T* bias, T* y, int n, int k, int cta, int ctas,
                              int tid, uint8_t* smem) {
  const int warp = tid >> 5, lane = tid & 31;
  const int nb = k / Fmt<Q>::kBlockElems;
  const size_t row_bytes = size_t(nb) * Fmt<Q>::kBlockBytes;
  // The warp's first row starts on its way to L2 while the CTA quantizes x.
  if (const int r0 = cta * kWarps + warp; r0 < n)
    for (size_t off = size_t(lane) * 128; off < row_bytes; off += 32 * 128) Ops::prefetch_l2(w + size_t(r0) * row_bytes + off);
  Ops::wait_for_prior_grid();  // x is the previous kernel's output
  quantize_x<Q, T, Ops>(x, k, smem, tid);
  Ops::sync_cta();
  uint8_t* stage = smem + Smem<Q>::stage_offset(k) + size_t(warp) * Fmt<Q>::kStageBytes;
  (void)stage;
  for (int r = cta * kWarps + warp; r < n; r += ctas * kWarps) {
    const uint8_t* row = w + size_t(r) * row_bytes;
    float acc;
    if constexpr (Fmt<Q>::kBlockElems == 32) acc = row_block32<Q, T, Ops>(row, nb, smem, stage, k, lane);
    else if constexpr (Q == QuantType::kQ6_K) acc = row_q6_k<T, Ops>(row, nb, smem, stage, k, lane);
    else acc = row_k_quant<Q, T, Ops>(row, nb, smem, k, lane);
PAGODA_I8_UNROLL
    for (int m = 16; m >= 1; m >>= 1) acc = add_rn(acc, Ops::shfl_xor(acc, m));  // commutative: every lane agrees
    if (lane == 0) {
      if (bias) acc = add_rn(acc, to_float(bias[r]));
      Ops::store_out(y + r, from_float<T>(acc), acc);
    }
  }
}

#ifdef __CUDACC__
struct DeviceOps {
  static __device__ __forceinline__ uint4 ldg16(const void* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
  }
  // Programmatic dependent launch (SM 9.0, no-op elsewhere): returns once the stream's previous grid has
  // completed and its writes are visible. Nothing before it reads anything but W, or writes.
  static __device__ __forceinline__ void wait_for_prior_grid() {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
  }
  static __device__ __forceinline__ void prefetch_l2(const void* p) {
    asm volatile("prefetch.global.L2 [%0];" ::"l"(p));
  }
  static __device__ __forceinline__ uint4 lds16(const void* p) { return *static_cast<const uint4*>(p); }
  static __device__ __forceinline__ uint32_t lds4(const uint32_t* p) { return *p; }
  static __device__ __forceinline__ uint32_t lds_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
  static __device__ __forceinline__ float lds_f16(const uint8_t* p) {
    return __half2float(*reinterpret_cast<const __half*>(p));
  }
  static __device__ __forceinline__ void sts16(void* p, uint4 v) { *static_cast<uint4*>(p) = v; }
  static __device__ __forceinline__ int dp4a(uint32_t a, uint32_t b, int c) { return __dp4a(int(a), int(b), c); }
  static __device__ __forceinline__ float shfl_xor(float v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
  static __device__ __forceinline__ int shfl_xor_i(int v, int m) { return __shfl_xor_sync(0xffffffffu, v, m); }
  static __device__ __forceinline__ void sync_warp() { __syncwarp(); }
  static __device__ __forceinline__ void sync_cta() { __syncthreads(); }
  template <typename T>
  static __device__ __forceinline__ void store_out(T* p, T v, float) { *p = v; }
};
#endif  // __CUDACC__

}  // namespace pagoda::quant_gemv_i8_detail
