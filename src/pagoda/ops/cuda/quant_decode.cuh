// PRIVATE to ops/cuda: the float32 value of every weight of a GGML block, as ggml's dequantize_row_*
// computes it (the same operations in the same order: a code times the block scale, or (d * sc) * q -
// dmin * mn for the k-quants, ((d * sc) * q) for Q6_K). Every product but Q6_K's last is exact in float32
// and each weight rounds once, so a fused multiply-add gives the same bits. Host and device code, so tests
// check it on machines without a GPU.
#pragma once

#include <cuda_fp16.h>

#include <cstdint>
#include <cstring>

#include "pagoda/core/quant_type.h"

namespace pagoda {
namespace quant_decode {

#define PAGODA_QD_HD __host__ __device__ __forceinline__

PAGODA_QD_HD uint32_t rd8(const uint8_t* p) { return *p; }
// A little-endian fp16 at p (2-byte aligned) as float.
PAGODA_QD_HD float rd_half(const uint8_t* p) {
  __half_raw r;
  r.x = uint16_t(p[0] | (p[1] << 8));
  return __half2float(__half(r));
}

// The 6-bit scale and min of sub-block j of a Q4_K/Q5_K block's 12 scale bytes s.
PAGODA_QD_HD void k_scale_min(const uint8_t* s, int j, int& sc, int& mn) {
  if (j < 4) {
    sc = s[j] & 63;
    mn = s[j + 4] & 63;
  } else {
    sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
    mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
  }
}

// The 32 weights of unit u (weights 32 u .. 32 u + 31) of a row of type Q.
template <QuantType Q>
PAGODA_QD_HD void dequant_unit(const uint8_t* row, int u, float (&v)[32]) {
  constexpr int kBytes = quant_traits(Q).block_bytes;
  if constexpr (Q == QuantType::kQ4_0 || Q == QuantType::kQ4_1 || Q == QuantType::kQ5_0 || Q == QuantType::kQ5_1) {
    constexpr bool kMin = Q == QuantType::kQ4_1 || Q == QuantType::kQ5_1;
    constexpr bool kQ5 = Q == QuantType::kQ5_0 || Q == QuantType::kQ5_1;
    const uint8_t* b = row + size_t(u) * kBytes;
    const float d = rd_half(b);
    const float m = kMin ? rd_half(b + 2) : 0.0f;
    const uint8_t* qh = b + (kMin ? 4 : 2);
    const uint8_t* qs = kQ5 ? qh + 4 : qh;
    uint32_t h = 0;
    if constexpr (kQ5) h = rd8(qh) | rd8(qh + 1) << 8 | rd8(qh + 2) << 16 | rd8(qh + 3) << 24;
    constexpr int kOff = kMin ? 0 : (kQ5 ? 16 : 8);
    for (int l = 0; l < 16; ++l) {
      const int lo = int((qs[l] & 15) | (kQ5 ? ((h >> l) & 1) << 4 : 0));
      const int hi = int((qs[l] >> 4) | (kQ5 ? ((h >> (l + 16)) & 1) << 4 : 0));
      if constexpr (kMin) {
        v[l] = float(lo) * d + m;
        v[l + 16] = float(hi) * d + m;
      } else {
        v[l] = float(lo - kOff) * d;
        v[l + 16] = float(hi - kOff) * d;
      }
    }
  } else if constexpr (Q == QuantType::kQ8_0) {
    const uint8_t* b = row + size_t(u) * kBytes;
    const float d = rd_half(b);
    for (int l = 0; l < 32; ++l) v[l] = float(int8_t(b[2 + l])) * d;
  } else if constexpr (Q == QuantType::kQ4_K || Q == QuantType::kQ5_K) {
    constexpr bool kQ5 = Q == QuantType::kQ5_K;
    const uint8_t* b = row + size_t(u / 8) * kBytes;
    const int s = u % 8;
    int sc, mn;
    k_scale_min(b + 4, s, sc, mn);
    const float d1 = rd_half(b) * float(sc);
    const float m1 = rd_half(b + 2) * float(mn);
    const uint8_t* qs = b + (kQ5 ? 48 : 16) + 32 * (s / 2);
    for (int l = 0; l < 32; ++l) {
      int q = s % 2 == 0 ? (qs[l] & 15) : (qs[l] >> 4);
      if constexpr (kQ5) q |= ((b[16 + l] >> s) & 1) << 4;
      v[l] = d1 * float(q) - m1;
    }
  } else if constexpr (Q == QuantType::kQ6_K) {
    const uint8_t* b = row + size_t(u / 8) * kBytes;
    const int h = (u % 8) / 4, r = u % 4;
    const float d = rd_half(b + 208);
    const uint8_t* ql = b + 64 * h + 32 * (r & 1);
    const uint8_t* qh = b + 128 + 32 * h;
    const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192 + 8 * h + 2 * r);
    for (int l = 0; l < 32; ++l) {
      const int q = ((r < 2 ? (ql[l] & 15) : (ql[l] >> 4)) | (((qh[l] >> (2 * r)) & 3) << 4)) - 32;
      v[l] = d * float(sc[l / 16]) * float(q);
    }
  }
}

#undef PAGODA_QD_HD

}  // namespace quant_decode
}  // namespace pagoda
