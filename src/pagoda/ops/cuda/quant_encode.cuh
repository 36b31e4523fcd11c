// PRIVATE to ops/cuda: pagoda's quantizer (ops/quant/quant.cc, quantize_row) transcribed to host and device
// code, one block at a time: the same float32 operations in the same order (IEEE division, round to
// nearest even, comparisons written as std::min/std::max/std::clamp evaluate them), so the device makes
// the CPU's bytes exactly. tests/ops_cuda/quant_encode_test.cc holds the two together on the host, and
// the GPU test on the device. quant_quantize.cu compiles with --fmad=false so no multiply-add is fused.
#pragma once

#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "pagoda/core/quant_type.h"

namespace pagoda {
namespace quant_encode {

#define PAGODA_QE_HD __host__ __device__ __forceinline__

PAGODA_QE_HD float h2f(uint16_t h) {
  __half_raw r;
  r.x = h;
  return __half2float(__half(r));
}
PAGODA_QE_HD uint16_t f2h(float v) { return __half_raw(__float2half_rn(v)).x; }
PAGODA_QE_HD void put_h(uint8_t* p, uint16_t h) {
  p[0] = uint8_t(h);
  p[1] = uint8_t(h >> 8);
}

PAGODA_QE_HD float fmin_std(float a, float b) { return b < a ? b : a; }  // std::min(a, b)
PAGODA_QE_HD float fmax_std(float a, float b) { return a < b ? b : a; }  // std::max(a, b)
PAGODA_QE_HD int clamp_std(int v, int lo, int hi) { return v < lo ? lo : (hi < v ? hi : v); }

PAGODA_QE_HD uint16_t next_up(uint16_t h) {
  if (h == 0x8000 || h == 0x0000) return 0x0001;
  return (h & 0x8000) ? uint16_t(h - 1) : uint16_t(h + 1);
}
PAGODA_QE_HD uint16_t next_down(uint16_t h) {
  if (h == 0x8000 || h == 0x0000) return 0x8001;
  return (h & 0x8000) ? uint16_t(h + 1) : uint16_t(h - 1);
}
// The fp16 nearest v that is >= v (up) or <= v (down).
PAGODA_QE_HD uint16_t f16_up(float v) {
  const uint16_t h = f2h(v);
  return h2f(h) < v ? next_up(h) : h;
}
PAGODA_QE_HD uint16_t f16_down(float v) {
  const uint16_t h = f2h(v);
  return h2f(h) > v ? next_down(h) : h;
}
PAGODA_QE_HD uint16_t f16_away(float v) { return v >= 0 ? f16_up(v) : f16_down(v); }
PAGODA_QE_HD int round_clamp(float v, int lo, int hi) { return clamp_std(int(rintf(v)), lo, hi); }

// Q4_0 (nmax 8) / Q5_0 (16): the code of weight l given d.
PAGODA_QE_HD int sym_code(float x, float d, int nmax) { return d != 0 ? round_clamp(x / d, -nmax, nmax - 1) + nmax : nmax; }

// One block of type Q from x[0 .. block_elems).
template <QuantType Q>
PAGODA_QE_HD void quantize_block(const float* x, uint8_t* b) {
  if constexpr (Q == QuantType::kQ4_0 || Q == QuantType::kQ5_0) {
    constexpr int nmax = Q == QuantType::kQ4_0 ? 8 : 16;
    float amax = 0, vmax = 0;
    for (int l = 0; l < 32; ++l)
      if (fabsf(x[l]) > amax) {
        amax = fabsf(x[l]);
        vmax = x[l];
      }
    const uint16_t dh = f16_away(vmax / float(-nmax));
    put_h(b, dh);
    const float d = h2f(dh);
    uint8_t* qs = b + (Q == QuantType::kQ5_0 ? 6 : 2);
    uint32_t qh = 0;
    for (int l = 0; l < 16; ++l) {
      const int lo = sym_code(x[l], d, nmax), hi = sym_code(x[l + 16], d, nmax);
      qs[l] = uint8_t((lo & 0x0F) | ((hi & 0x0F) << 4));
      qh |= uint32_t((lo >> 4) & 1) << l | uint32_t((hi >> 4) & 1) << (l + 16);
    }
    if constexpr (Q == QuantType::kQ5_0)
      for (int i = 0; i < 4; ++i) b[2 + i] = uint8_t(qh >> (8 * i));
  } else if constexpr (Q == QuantType::kQ4_1 || Q == QuantType::kQ5_1) {
    constexpr int qmax = Q == QuantType::kQ4_1 ? 15 : 31;
    float lo = x[0], hi = x[0];
    for (int l = 1; l < 32; ++l) {
      lo = fmin_std(lo, x[l]);
      hi = fmax_std(hi, x[l]);
    }
    const uint16_t mh = f16_down(lo);
    const float m = h2f(mh);
    const uint16_t dh = f16_up((hi - m) / float(qmax));
    put_h(b, dh);
    put_h(b + 2, mh);
    const float d = h2f(dh);
    uint8_t* qs = b + (Q == QuantType::kQ5_1 ? 8 : 4);
    uint32_t qh = 0;
    for (int l = 0; l < 16; ++l) {
      const int c0 = d != 0 ? round_clamp((x[l] - m) / d, 0, qmax) : 0;
      const int c1 = d != 0 ? round_clamp((x[l + 16] - m) / d, 0, qmax) : 0;
      qs[l] = uint8_t((c0 & 0x0F) | ((c1 & 0x0F) << 4));
      qh |= uint32_t((c0 >> 4) & 1) << l | uint32_t((c1 >> 4) & 1) << (l + 16);
    }
    if constexpr (Q == QuantType::kQ5_1)
      for (int i = 0; i < 4; ++i) b[4 + i] = uint8_t(qh >> (8 * i));
  } else if constexpr (Q == QuantType::kQ8_0) {
    float amax = 0;
    for (int l = 0; l < 32; ++l) amax = fmax_std(amax, fabsf(x[l]));
    const uint16_t dh = f16_up(amax / 127.0f);
    put_h(b, dh);
    const float d = h2f(dh);
    for (int l = 0; l < 32; ++l) b[2 + l] = uint8_t(int8_t(d > 0 ? round_clamp(x[l] / d, -127, 127) : 0));
  } else if constexpr (Q == QuantType::kQ4_K || Q == QuantType::kQ5_K) {
    constexpr bool kQ5 = Q == QuantType::kQ5_K;
    constexpr int qmax = kQ5 ? 31 : 15;
    float lo[8], hi[8], need_m[8];
    float max_m = 0;
    for (int s = 0; s < 8; ++s) {
      lo[s] = hi[s] = x[32 * s];
      for (int l = 1; l < 32; ++l) {
        lo[s] = fmin_std(lo[s], x[32 * s + l]);
        hi[s] = fmax_std(hi[s], x[32 * s + l]);
      }
      need_m[s] = fmax_std(0.0f, -lo[s]);
      max_m = fmax_std(max_m, need_m[s]);
    }
    const uint16_t dminh = f16_up(max_m / 63.0f);
    const float dmin = h2f(dminh);
    int mn[8], sc[8];
    float m_eff[8], range[8], max_range = 0;
    for (int s = 0; s < 8; ++s) {
      mn[s] = dmin > 0 ? clamp_std(int(ceilf(need_m[s] / dmin)), 0, 63) : 0;
      m_eff[s] = dmin * float(mn[s]);
      range[s] = fmax_std(0.0f, hi[s] + m_eff[s]);
      max_range = fmax_std(max_range, range[s]);
    }
    const uint16_t dh = f16_up(max_range / float(qmax * 63));
    const float d = h2f(dh);
    float step[8];
    for (int s = 0; s < 8; ++s) {
      sc[s] = d > 0 ? clamp_std(int(ceilf(range[s] / (float(qmax) * d))), 0, 63) : 0;
      step[s] = d * float(sc[s]);
    }
    put_h(b, dh);
    put_h(b + 2, dminh);
    uint8_t* sp = b + 4;
    for (int j = 0; j < 4; ++j) {
      sp[j] = uint8_t(sc[j] | ((sc[j + 4] >> 4) << 6));
      sp[j + 4] = uint8_t(mn[j] | ((mn[j + 4] >> 4) << 6));
      sp[j + 8] = uint8_t((sc[j + 4] & 0x0F) | ((mn[j + 4] & 0x0F) << 4));
    }
    uint8_t* qs = b + (kQ5 ? 48 : 16);
    if constexpr (kQ5)
      for (int l = 0; l < 32; ++l) b[16 + l] = 0;
    for (int c = 0; c < 4; ++c)
      for (int l = 0; l < 32; ++l) {
        const int s0 = 2 * c, s1 = 2 * c + 1;
        const int q0 = step[s0] > 0 ? round_clamp((x[32 * s0 + l] + m_eff[s0]) / step[s0], 0, qmax) : 0;
        const int q1 = step[s1] > 0 ? round_clamp((x[32 * s1 + l] + m_eff[s1]) / step[s1], 0, qmax) : 0;
        qs[32 * c + l] = uint8_t((q0 & 0x0F) | ((q1 & 0x0F) << 4));
        if constexpr (kQ5) b[16 + l] |= uint8_t(((q0 >> 4) << (2 * c)) | ((q1 >> 4) << (2 * c + 1)));
      }
  } else if constexpr (Q == QuantType::kQ6_K) {
    float need[16], max_need = 0;
    for (int g = 0; g < 16; ++g) {
      float amax = 0;
      for (int l = 0; l < 16; ++l) amax = fmax_std(amax, fabsf(x[16 * g + l]));
      need[g] = amax / 31.0f;
      max_need = fmax_std(max_need, need[g]);
    }
    const uint16_t dh = f16_up(max_need / 127.0f);
    const float d = h2f(dh);
    float step[16];
    for (int g = 0; g < 16; ++g) {
      const int sc = d > 0 ? clamp_std(int(ceilf(need[g] / d)), 0, 127) : 0;
      b[192 + g] = uint8_t(int8_t(sc));
      step[g] = d * float(sc);
    }
    put_h(b + 208, dh);
    // u = code + 32 of weight i (group i / 16)
    auto u = [&](int i) { return (step[i / 16] > 0 ? round_clamp(x[i] / step[i / 16], -32, 31) : 0) + 32; };
    for (int h = 0; h < 2; ++h)
      for (int l = 0; l < 32; ++l) {
        const int base = 128 * h + l;
        const int v0 = u(base), v1 = u(base + 32), v2 = u(base + 64), v3 = u(base + 96);
        b[64 * h + l] = uint8_t((v0 & 0x0F) | ((v2 & 0x0F) << 4));
        b[64 * h + l + 32] = uint8_t((v1 & 0x0F) | ((v3 & 0x0F) << 4));
        b[128 + 32 * h + l] = uint8_t((v0 >> 4) | ((v1 >> 4) << 2) | ((v2 >> 4) << 4) | ((v3 >> 4) << 6));
      }
  }
}

#undef PAGODA_QE_HD

}  // namespace quant_encode
}  // namespace pagoda
