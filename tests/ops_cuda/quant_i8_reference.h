// The reference of the int8-activation GEMV (ops/cuda/quant_gemv_i8.cuh), shared by its emulation test and
// the GPU test: the CPU's quantized matmul (ops/quant, which quantizes x and forms each block's float term
// the same way) and a bound on the difference, from the one thing the kernel does differently: the order in
// which it adds the block terms.
//
// With the terms t_b identical, each sum is within gamma_{L} sum_b |t_b| of the exact one, L its longest
// chain of additions (the CPU's nb - 1; the kernel's at most nb per lane plus 5 butterfly levels), and each
// adds the bias with one more rounding: |kernel - cpu| <= 2 gamma_{nb+5} S + 2u (S + |bias|), u = 2^-24,
// S >= sum_b |t_b|. A term is sum_{i in b} x^_i w^_i (x^ = dx q_x, the dequantized activation; w^ the
// weight as the formats define it), so |t_b| <= sum_i |x^_i| m_i with m_i = |d sc q_i| + |dmin mn| (Q4_K, Q5_K)
// or |d sc q_i| (Q6_K; q signed) or |d q_i| + |m| (the 32-weight formats; m = 0 without a min), and |x^_i| <= |x_i| + dx / 2 (round to nearest), times 1 + 2^-20 for the terms' own
// float roundings.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu_test_util.h"
#include "pagoda/ops/gemm.h"
#include "pagoda/ops/quant/quant_blocks.h"

namespace pagoda::test {

struct I8Reference {
  std::vector<float> y;     // the CPU's outputs (float, bias included)
  std::vector<double> tol;  // the bound on |kernel's float - y| per output
};

inline I8Reference i8_reference(QuantType q, const uint8_t* w, size_t row_bytes, const HostArray& x,
                                const HostArray* bias, int n, int k) {
  I8Reference r;
  std::vector<float> xf(static_cast<size_t>(k)), bf(static_cast<size_t>(n), 0.f);
  for (int i = 0; i < k; ++i) xf[size_t(i)] = x.get(size_t(i));
  if (bias)
    for (int j = 0; j < n; ++j) bf[size_t(j)] = bias->get(size_t(j));
  r.y.assign(size_t(n), 0.f);
  MatmulParams p;
  p.x = xf.data();
  p.w = w;
  p.w_quant = q;
  p.bias = bias ? bf.data() : nullptr;
  p.y = r.y.data();
  p.m = 1, p.n = n, p.k = k;
  matmul(p, nullptr);

  // |x^_i| bounds: the activation block's scale dx = max |x| / 127.
  const int ab = quant_traits(q).block_elems == 32 ? 32 : 256;
  std::vector<double> xa(static_cast<size_t>(k));
  for (int b0 = 0; b0 < k; b0 += ab) {
    double amax = 0;
    for (int i = 0; i < ab; ++i) amax = std::max(amax, std::fabs(double(xf[size_t(b0 + i)])));
    for (int i = 0; i < ab; ++i) xa[size_t(b0 + i)] = std::fabs(double(xf[size_t(b0 + i)])) + 0.5 * amax / 127.0;
  }
  const QuantTraits tr = quant_traits(q);
  const int nb = k / tr.block_elems;
  const double u = std::ldexp(1.0, -24), L = double(nb + 5), gamma = L * u / (1 - L * u);
  r.tol.resize(size_t(n));
  for (int j = 0; j < n; ++j) {
    double s = 0;
    for (int b = 0; b < nb; ++b) {
      const uint8_t* blk = w + size_t(j) * row_bytes + size_t(b) * tr.block_bytes;
      if (q == QuantType::kQ4_K || q == QuantType::kQ5_K) {
        quant::BlockK d;
        if (q == QuantType::kQ4_K) quant::decode_q4_k(blk, &d);
        else quant::decode_q5_k(blk, &d);
        for (int i = 0; i < 256; ++i)
          s += xa[size_t(b * 256 + i)] *
               (std::fabs(double(d.d) * d.sc[i / 32] * d.q[i]) + std::fabs(double(d.dmin) * d.mn[i / 32]));
      } else if (q == QuantType::kQ6_K) {
        quant::BlockQ6K d;
        quant::decode_q6_k(blk, &d);
        for (int i = 0; i < 256; ++i) s += xa[size_t(b * 256 + i)] * std::fabs(double(d.d) * d.sc[i / 16] * d.q[i]);
      } else {
        quant::Block32 d;
        quant::decode_block32(q, blk, &d);
        for (int i = 0; i < 32; ++i) s += xa[size_t(b * 32 + i)] * (std::fabs(double(d.d) * d.q[i]) + std::fabs(double(d.m)));
      }
    }
    s *= 1 + std::ldexp(1.0, -20);
    r.tol[size_t(j)] = 2 * gamma * s + 2 * u * (s + std::fabs(double(bf[size_t(j)])));
  }
  return r;
}

}  // namespace pagoda::test
