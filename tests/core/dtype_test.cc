#include "pagoda/core/dtype.h"

#include <cmath>
#include <random>

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(DType, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kBF16), 2u);
  EXPECT_EQ(dtype_size(DType::kF8E4M3), 1u);
  EXPECT_EQ(dtype_name(DType::kF16), "float16");
  EXPECT_EQ(dtype_from_name("BF16"), DType::kBF16);
  EXPECT_EQ(dtype_from_name("half"), DType::kF16);
  EXPECT_FALSE(dtype_from_name("float64").has_value());
}

// Every 16-bit code round-trips through float32 (bf16 and fp16 are subsets of float32).
TEST(DType, Bf16AndF16RoundTripAllCodes) {
  for (uint32_t c = 0; c < 65536; ++c) {
    float b = bf16_to_f32(uint16_t(c));
    if (!std::isnan(b)) {
      EXPECT_EQ(f32_to_bf16(b), c) << c;
    }
    float h = f16_to_f32(uint16_t(c));
    if (!std::isnan(h)) {
      EXPECT_EQ(f32_to_f16(h), c) << c;
    }
  }
}

TEST(DType, Fp8RoundTripAllCodes) {
  for (uint32_t c = 0; c < 256; ++c) {
    float a = f8e4m3_to_f32(uint8_t(c));
    if (!std::isnan(a)) {
      EXPECT_EQ(f32_to_f8e4m3(a), c) << c;
    }
    float b = f8e5m2_to_f32(uint8_t(c));
    if (!std::isnan(b) && !std::isinf(b)) {
      EXPECT_EQ(f32_to_f8e5m2(b), c) << c;
    }
  }
  EXPECT_EQ(f8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(f8e5m2_to_f32(0x7b), 57344.0f);
  EXPECT_EQ(f8e4m3_to_f32(f32_to_f8e4m3(1e6f)), 448.0f);  // saturates
}

// Rounding is to the nearest representable value: the error never exceeds half a unit in the last place.
TEST(DType, RoundingIsNearest) {
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.0f, 3.0f);
  for (int i = 0; i < 20000; ++i) {
    float x = dist(rng);
    float b = bf16_to_f32(f32_to_bf16(x));
    EXPECT_LE(std::fabs(b - x), std::ldexp(std::fabs(x), -8) + 1e-30f);
    float h = f16_to_f32(f32_to_f16(x));
    EXPECT_LE(std::fabs(h - x), std::max(std::ldexp(std::fabs(x), -11), std::ldexp(1.0f, -25)));
    float e4 = f8e4m3_to_f32(f32_to_f8e4m3(x));
    EXPECT_LE(std::fabs(e4 - x), std::max(std::ldexp(std::fabs(x), -4), std::ldexp(1.0f, -10)));
  }
}

}  // namespace
}  // namespace pagoda
