// Element type conversion between float32, bfloat16 and float16 (round to nearest even), e.g. bf16 logits
// to the fp32 the sampler reads. The same dtype on both sides is a plain copy.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagoda/core/dtype.h"

namespace pagoda {

struct ConvertParams {
  const void* in = nullptr;  // [n]
  DType in_dtype = DType::kBF16;
  void* out = nullptr;       // [n]; must not overlap `in` unless it is `in` with the same dtype
  DType out_dtype = DType::kF32;
  int64_t n = 0;
};
void convert(const ConvertParams& p, cudaStream_t stream);

}  // namespace pagoda
