#include "pagoda/ops/act.h"

#include <algorithm>
#include <cmath>

namespace pagoda {

void swiglu(const SwigluParams& p, ThreadPool* pool) {
  const int64_t ld_in = p.ld_in ? p.ld_in : p.cols;
  const int64_t ld_out = p.ld_out ? p.ld_out : p.cols;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.cols));
  parallel_for(pool, p.rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = p.gate + r * ld_in;
      const float* u = p.up + r * ld_in;
      float* o = p.out + r * ld_out;
      for (int64_t c = 0; c < p.cols; ++c) o[c] = g[c] / (1.0f + std::exp(-g[c])) * u[c];
    }
  });
}

void add_inplace(float* y, const float* x, int64_t n, ThreadPool* pool) {
  parallel_for(pool, n, 1 << 16, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) y[i] += x[i];
  });
}

}  // namespace pagoda
