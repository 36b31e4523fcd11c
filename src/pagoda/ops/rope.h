// Rotary position embedding in the rotate_half layout (element i pairs with i + rotary_dim/2), with the
// default, linear and Llama-3 frequency schedules.
#pragma once

#include <cstdint>
#include <vector>

#include "pagoda/ops/thread_pool.h"

namespace pagoda {

enum class RopeKind { kDefault, kLinear, kLlama3 };

struct RopeFrequencyParams {
  int rotary_dim = 0;  // usually head_dim; even
  double theta = 10000.0;
  RopeKind kind = RopeKind::kDefault;
  double factor = 1.0;  // kLinear, kLlama3
  double low_freq_factor = 1.0;   // kLlama3
  double high_freq_factor = 4.0;  // kLlama3
  double original_max_position_embeddings = 8192;  // kLlama3
  const float* freq_factors = nullptr;  // [rotary_dim / 2] divisors applied after the schedule, or null
};

// inv_freq[i] = theta^(-2i/rotary_dim), i < rotary_dim/2, then rescaled:
//  kLinear: / factor.  kLlama3: with wavelength w = 2*pi/inv, w > orig/low: inv/factor; w < orig/high: inv;
//  else (1-s)*inv/factor + s*inv with s = (orig/w - low)/(high - low).
// Then divided by freq_factors[i] when given (llama.cpp's rope_freqs). Computed in double, rounded to
// float32 once.
std::vector<float> rope_inv_freq(const RopeFrequencyParams& p);

struct RopeParams {
  float* x = nullptr;             // [num_tokens, num_heads, head_dim] rotated in place; token stride below
  int64_t num_tokens = 0;
  int num_heads = 0;
  int head_dim = 0;
  int64_t token_stride = 0;       // elements between tokens; 0 = num_heads * head_dim
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* inv_freq = nullptr;     // [head_dim / 2]
};

// angle = float(pos) * inv_freq[i] in float32 (as transformers does), cos/sin of it;
// x1' = x1*cos - x2*sin, x2' = x2*cos + x1*sin.
void rope_apply(const RopeParams& p, ThreadPool* pool);

}  // namespace pagoda
