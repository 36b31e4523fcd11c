#include "pagoda/ops/rmsnorm.h"

#include <algorithm>
#include <cmath>

namespace pagoda {

void rmsnorm(const RmsNormParams& p, ThreadPool* pool) {
  const int64_t ldx = p.ldx ? p.ldx : p.cols;
  const int64_t ldy = p.ldy ? p.ldy : p.cols;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, p.cols));
  parallel_for(pool, p.rows, grain, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* x = p.x + r * ldx;
      float* y = p.y + r * ldy;
      // Sum of squares in double: the mean is then correctly rounded, within 1 ulp of any float32 order.
      double ss = 0;
      for (int64_t c = 0; c < p.cols; ++c) ss += double(x[c]) * double(x[c]);
      const float inv = 1.0f / std::sqrt(float(ss / double(p.cols)) + p.eps);
      for (int64_t c = 0; c < p.cols; ++c) y[c] = p.w[c] * (x[c] * inv);
    }
  });
}

}  // namespace pagoda
