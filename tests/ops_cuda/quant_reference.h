// Test helpers for the quantized-weight kernels: a float64 transcription of the GGML block formats written
// from the format descriptions (ggml-common.h), independent of src/; random blocks that use every code; and
// the error bound of quant_gemv's arithmetic.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/core/quant_type.h"

namespace pagoda::test {

inline constexpr QuantType kAllQuantTypes[] = {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1,
                                               QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K};

inline double ref_f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return double(f16_to_f32(h));
}

// Each weight of one block as w = alpha * (code + 128) + beta, the form quant_gemv computes it in (code the
// unsigned field the kernel turns into the 16-bit float 128 + code), and the bound
// mag = |alpha| (128 + code) + |beta| on the magnitudes its arithmetic handles for the weight. Q8_0's two
// nibble halves (uh, ul of q + 128, each with its own 128 offset): mag = |d| (16 (128 + uh) + 128 + ul + 2304).
struct RefBlock {
  double w[256];
  double mag[256];
};

inline void ref_decode_block(QuantType t, const uint8_t* b, RefBlock* o) {
  auto set = [&](int i, double alpha, int code, double beta) {
    o->w[i] = alpha * (code + 128) + beta;
    o->mag[i] = std::fabs(alpha) * (128 + code) + std::fabs(beta);
  };
  switch (t) {
    case QuantType::kQ4_0:
    case QuantType::kQ4_1:
    case QuantType::kQ5_0:
    case QuantType::kQ5_1: {
      const bool has_min = t == QuantType::kQ4_1 || t == QuantType::kQ5_1;
      const bool q5 = t == QuantType::kQ5_0 || t == QuantType::kQ5_1;
      const double d = ref_f16(b), m = has_min ? ref_f16(b + 2) : 0.0;
      const uint8_t* qh = b + (has_min ? 4 : 2);
      const uint8_t* qs = q5 ? qh + 4 : qh;
      uint32_t h = 0;
      if (q5) h = uint32_t(qh[0]) | uint32_t(qh[1]) << 8 | uint32_t(qh[2]) << 16 | uint32_t(qh[3]) << 24;
      // w = d (q - off) + m: alpha = d, beta = m - (128 + off) d
      const int off = has_min ? 0 : (q5 ? 16 : 8);
      for (int l = 0; l < 16; ++l) {
        const int lo = (qs[l] & 15) | (q5 ? int((h >> l) & 1) << 4 : 0);
        const int hi = (qs[l] >> 4) | (q5 ? int((h >> (l + 16)) & 1) << 4 : 0);
        set(l, d, lo, m - (128 + off) * d);
        set(l + 16, d, hi, m - (128 + off) * d);
      }
      return;
    }
    case QuantType::kQ8_0: {
      const double d = ref_f16(b);
      for (int l = 0; l < 32; ++l) {
        const int q = int(int8_t(b[2 + l]));
        const int u = q + 128;
        o->w[l] = d * q;
        o->mag[l] = std::fabs(d) * (16.0 * (128 + (u >> 4)) + 128 + (u & 15) + 2304);
      }
      return;
    }
    case QuantType::kQ4_K:
    case QuantType::kQ5_K: {
      const bool q5 = t == QuantType::kQ5_K;
      const double d = ref_f16(b), dmin = ref_f16(b + 2);
      const uint8_t* sc = b + 4;
      const uint8_t* qh = b + 16;
      const uint8_t* qs = b + (q5 ? 48 : 16);
      for (int s = 0; s < 8; ++s) {
        int scale, mn;
        if (s < 4) {
          scale = sc[s] & 63;
          mn = sc[s + 4] & 63;
        } else {
          scale = (sc[s + 4] & 15) | ((sc[s - 4] >> 6) << 4);
          mn = (sc[s + 4] >> 4) | ((sc[s] >> 6) << 4);
        }
        const double alpha = d * scale, beta = -128 * alpha - dmin * mn;
        const int chunk = s / 2;
        for (int l = 0; l < 32; ++l) {
          const uint8_t byte = qs[32 * chunk + l];
          int q = s % 2 == 0 ? (byte & 15) : (byte >> 4);
          if (q5) q |= ((qh[l] >> s) & 1) << 4;
          set(32 * s + l, alpha, q, beta);
        }
      }
      return;
    }
    case QuantType::kQ6_K: {
      const uint8_t* ql = b;
      const uint8_t* qh = b + 128;
      const int8_t* sc = reinterpret_cast<const int8_t*>(b + 192);
      const double d = ref_f16(b + 208);
      for (int h = 0; h < 2; ++h)
        for (int r = 0; r < 4; ++r)
          for (int l = 0; l < 32; ++l) {
            const uint8_t byte = ql[64 * h + 32 * (r % 2) + l];
            const int q = (r < 2 ? (byte & 15) : (byte >> 4)) | (((qh[32 * h + l] >> (2 * r)) & 3) << 4);
            const double alpha = d * sc[8 * h + 2 * r + l / 16];
            set(128 * h + 32 * r + l, alpha, q, -160 * alpha);
          }
      return;
    }
    case QuantType::kNone: break;
  }
}

// A row of k weights: w[k] and mag[k].
inline void ref_decode_row(QuantType t, const uint8_t* row, int64_t k, double* w, double* mag) {
  const QuantTraits tr = quant_traits(t);
  RefBlock blk;
  for (int64_t i = 0; i < k / tr.block_elems; ++i) {
    ref_decode_block(t, row + i * tr.block_bytes, &blk);
    std::memcpy(w + i * tr.block_elems, blk.w, sizeof(double) * size_t(tr.block_elems));
    std::memcpy(mag + i * tr.block_elems, blk.mag, sizeof(double) * size_t(tr.block_elems));
  }
}

// Random blocks: every byte uniform (so every code, high bit and 6-bit scale occurs), the fp16 scales and
// mins replaced by values of either sign with magnitudes in [2^-12, 2^-5] (finite, and products with
// activations of size 1 stay far from fp16's range; Q6_K's int8 scales stay uniform).
inline std::vector<uint8_t> random_blocks(QuantType t, std::mt19937_64& gen, int64_t rows, int64_t k) {
  const QuantTraits tr = quant_traits(t);
  const int64_t nb = k / tr.block_elems;
  std::vector<uint8_t> bytes(size_t(rows * nb * tr.block_bytes));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& v : bytes) v = uint8_t(byte(gen));
  std::uniform_real_distribution<float> expo(-12.f, -5.f);
  auto put_f16 = [&](uint8_t* p) {
    const float v = std::exp2(expo(gen)) * (byte(gen) & 1 ? -1.f : 1.f);
    const uint16_t h = f32_to_f16(v);
    std::memcpy(p, &h, 2);
  };
  for (int64_t i = 0; i < rows * nb; ++i) {
    uint8_t* b = bytes.data() + i * tr.block_bytes;
    switch (t) {
      case QuantType::kQ4_0:
      case QuantType::kQ5_0:
      case QuantType::kQ8_0: put_f16(b); break;
      case QuantType::kQ4_1:
      case QuantType::kQ5_1:
      case QuantType::kQ4_K:
      case QuantType::kQ5_K:
        put_f16(b);
        put_f16(b + 2);
        break;
      case QuantType::kQ6_K: put_f16(b + 208); break;
      case QuantType::kNone: break;
    }
  }
  return bytes;
}

// Bound on |quant_gemv's output - sum_k w_k x_k| before the output's own rounding, with `u` the unit of the
// fp32 additions (2^-24 rounding to nearest; 2^-23 for the tensor cores, which truncate) and
// sum_mag = sum_k mag_k |x_k|. Every intermediate of the kernel is bounded by sum_mag (the products are
// exact; partial sums of terms bounded by mag_k |x_k|), and each output sees at most: 32 additions inside
// a scale group's mma sums (a group's rounding scaled by its alpha stays within its share of sum_mag),
// 3 roundings applying alpha and beta, one accumulator FMA per group (k / 16 groups at most), and 8 for
// the sum over the CTA's warps. Worst-case linear growth, no random-walk factor: rigorous, and still
// between 4e-6 (k = 256, rounding) and 1.1e-4 (k = 14336, truncating) of sum_mag, far under the O(1)
// relative errors a wrong code, scale or index makes.
inline double gemv_error_bound(double sum_mag, int64_t k, double u) {
  return (32.0 + 3.0 + double(k) / 16.0 + 8.0) * u * sum_mag;
}

}  // namespace pagoda::test
