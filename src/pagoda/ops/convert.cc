#include "pagoda/ops/convert.h"

#include <cstring>

#include "pagoda/ops/simd.h"

namespace pagoda {
namespace {

PAGODA_MULTIVERSION void bf16_to_f32_n(const uint16_t* src, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u = uint32_t(src[i]) << 16;
    std::memcpy(out + i, &u, 4);
  }
}

// Branch-free half -> float: shift exponent+mantissa into place and rescale by 2^112 (exact for normals
// and subnormals); Inf/NaN get the float exponent explicitly.
PAGODA_MULTIVERSION void f16_to_f32_n(const uint16_t* src, int64_t n, float* out) {
  const float magic = 0x1p112f;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t h = src[i];
    uint32_t em = h & 0x7fffu;
    uint32_t sign = (h & 0x8000u) << 16;
    uint32_t shifted = em << 13;
    float f;
    std::memcpy(&f, &shifted, 4);
    f *= magic;
    uint32_t u;
    std::memcpy(&u, &f, 4);
    uint32_t special = 0x7f800000u | shifted;
    u = (em >= 0x7c00u ? special : u) | sign;
    std::memcpy(out + i, &u, 4);
  }
}

}  // namespace

void convert_to_f32(const void* src, DType dtype, int64_t offset, int64_t count, float* out) {
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, static_cast<const float*>(src) + offset, size_t(count) * 4);
      return;
    case DType::kBF16:
      bf16_to_f32_n(static_cast<const uint16_t*>(src) + offset, count, out);
      return;
    case DType::kF16:
      f16_to_f32_n(static_cast<const uint16_t*>(src) + offset, count, out);
      return;
    case DType::kF8E4M3:
    case DType::kF8E5M2:
    case DType::kU8:
    case DType::kI32:
    case DType::kI64:
      for (int64_t i = 0; i < count; ++i) out[i] = load_as_f32(src, dtype, size_t(offset + i));
      return;
  }
}

}  // namespace pagoda
