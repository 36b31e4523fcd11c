#include "pagoda/ops/softmax.h"

#include <cmath>
#include <limits>

namespace pagoda {

void softmax(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(xr[c]) - double(mx));
    for (int64_t c = 0; c < cols; ++c) yr[c] = float(std::exp(double(xr[c]) - double(mx)) / sum);
  }
}

void log_softmax(const float* x, float* y, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, xr[c]);
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(xr[c]) - double(mx));
    const double lse = double(mx) + std::log(sum);
    for (int64_t c = 0; c < cols; ++c) yr[c] = float(double(xr[c]) - lse);
  }
}

}  // namespace pagoda
