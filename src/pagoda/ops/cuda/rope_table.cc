#include <cmath>
#include <numbers>

#include "pagoda/core/error.h"
#include "pagoda/ops/cuda/rope_kv.h"

namespace pagoda {

std::vector<float> rope_inv_freq(int head_dim, double theta, const Llama3RopeScaling* llama3, const float* freq_factors) {
  PAGODA_CHECK(head_dim > 0 && head_dim % 2 == 0, "rope: head_dim ", head_dim, " must be even");
  PAGODA_CHECK(theta > 0, "rope: theta ", theta);
  const int half = head_dim / 2;
  std::vector<float> inv(half);
  for (int i = 0; i < half; ++i) inv[i] = float(std::pow(theta, -2.0 * i / head_dim));
  if (llama3) {
    const double factor = llama3->factor, low = llama3->low_freq_factor, high = llama3->high_freq_factor;
    const double original = llama3->original_max_position;
    PAGODA_CHECK(factor > 0 && high > low && original > 0, "rope: bad llama3 scaling");
    const double low_freq_wavelen = original / low, high_freq_wavelen = original / high;
    for (int i = 0; i < half; ++i) {
      const double f = inv[i], wavelen = 2.0 * std::numbers::pi / f;
      double out;
      if (wavelen > low_freq_wavelen) {
        out = f / factor;  // low frequencies: divided by factor
      } else if (wavelen < high_freq_wavelen) {
        out = f;  // high frequencies: kept
      } else {
        const double s = (original / wavelen - low) / (high - low);
        out = (1.0 - s) * f / factor + s * f;
      }
      inv[i] = float(out);
    }
  }
  if (freq_factors) {
    // Divides the scheduled frequency before its one rounding to fp32, as the CPU's rope_inv_freq does.
    PAGODA_CHECK(!llama3, "rope: llama3 scaling and frequency factors together");
    for (int i = 0; i < half; ++i) inv[i] = float(std::pow(theta, -2.0 * i / head_dim) / double(freq_factors[i]));
  }
  return inv;
}

RopeTable build_rope_table(int max_position, int head_dim, double theta, const Llama3RopeScaling* llama3,
                           const float* freq_factors) {
  PAGODA_CHECK(max_position > 0, "rope: max_position ", max_position);
  const std::vector<float> inv = rope_inv_freq(head_dim, theta, llama3, freq_factors);
  const int half = head_dim / 2;
  RopeTable t;
  t.max_position = max_position;
  t.head_dim = head_dim;
  t.cos.resize(size_t(max_position) * half);
  t.sin.resize(size_t(max_position) * half);
  for (int p = 0; p < max_position; ++p) {
    for (int i = 0; i < half; ++i) {
      const double a = double(p) * double(inv[i]);
      t.cos[size_t(p) * half + i] = float(std::cos(a));
      t.sin[size_t(p) * half + i] = float(std::sin(a));
    }
  }
  return t;
}

}  // namespace pagoda
