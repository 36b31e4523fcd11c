#include "pagoda/ops/rope.h"

#include <cmath>

#include "pagoda/core/error.h"

namespace pagoda {

std::vector<float> rope_inv_freq(const RopeFrequencyParams& p) {
  PAGODA_CHECK(p.rotary_dim > 0 && p.rotary_dim % 2 == 0, "rotary_dim must be even, got ", p.rotary_dim);
  const int half = p.rotary_dim / 2;
  std::vector<float> out(size_t(half), 0.0f);
  for (int i = 0; i < half; ++i) {
    double inv = std::pow(p.theta, -double(2 * i) / double(p.rotary_dim));
    switch (p.kind) {
      case RopeKind::kDefault:
        break;
      case RopeKind::kLinear:
        inv /= p.factor;
        break;
      case RopeKind::kLlama3: {
        const double low_wavelen = p.original_max_position_embeddings / p.low_freq_factor;
        const double high_wavelen = p.original_max_position_embeddings / p.high_freq_factor;
        const double wavelen = 2.0 * M_PI / inv;
        if (wavelen > low_wavelen) {
          inv = inv / p.factor;
        } else if (wavelen >= high_wavelen) {
          const double s = (p.original_max_position_embeddings / wavelen - p.low_freq_factor) /
                           (p.high_freq_factor - p.low_freq_factor);
          inv = (1.0 - s) * inv / p.factor + s * inv;
        }
        break;
      }
    }
    if (p.freq_factors) inv /= double(p.freq_factors[i]);
    out[size_t(i)] = float(inv);
  }
  return out;
}

void rope_apply(const RopeParams& p, ThreadPool* pool) {
  const int half = p.head_dim / 2;
  const int64_t stride = p.token_stride ? p.token_stride : int64_t(p.num_heads) * p.head_dim;
  const int64_t grain = std::max<int64_t>(1, 4096 / std::max<int64_t>(1, int64_t(p.num_heads) * p.head_dim));
  parallel_for(pool, p.num_tokens, grain, [&](int64_t b, int64_t e) {
    std::vector<float> cs(size_t(2 * half));
    for (int64_t t = b; t < e; ++t) {
      const float pos = float(p.positions[t]);
      for (int i = 0; i < half; ++i) {
        const float angle = pos * p.inv_freq[i];
        cs[size_t(i)] = float(std::cos(double(angle)));
        cs[size_t(half + i)] = float(std::sin(double(angle)));
      }
      float* xt = p.x + t * stride;
      for (int h = 0; h < p.num_heads; ++h) {
        float* x = xt + int64_t(h) * p.head_dim;
        for (int i = 0; i < half; ++i) {
          const float c = cs[size_t(i)], s = cs[size_t(half + i)];
          const float x1 = x[i], x2 = x[i + half];
          x[i] = x1 * c - x2 * s;
          x[i + half] = x2 * c + x1 * s;
        }
      }
    }
  });
}

}  // namespace pagoda
