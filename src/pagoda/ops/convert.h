// Bulk conversion of stored weights / cache elements to float32 (vectorisable loops).
#pragma once

#include <cstdint>

#include "pagoda/core/dtype.h"

namespace pagoda {

// out[i] = src[offset + i] as float32 for i < count. src dtype: kF32, kBF16, kF16 (others fall back to
// the scalar load_as_f32). Exact: every bf16/f16 value is a float32.
void convert_to_f32(const void* src, DType dtype, int64_t offset, int64_t count, float* out);

}  // namespace pagoda
