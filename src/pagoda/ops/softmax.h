// Row-wise softmax and log-softmax over logits.
#pragma once

#include <cstdint>

namespace pagoda {

// y = softmax(x) per row of `cols`; y may equal x. Sums in double.
void softmax(const float* x, float* y, int64_t rows, int64_t cols);
// y = x - logsumexp(x) per row; y may equal x.
void log_softmax(const float* x, float* y, int64_t rows, int64_t cols);

}  // namespace pagoda
