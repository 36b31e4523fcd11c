// Element types pagoda stores and computes in, with exact host-side conversions.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string>
#include <string_view>

namespace pagoda {

enum class DType : uint8_t { kF32, kBF16, kF16, kF8E4M3, kF8E5M2, kU8, kI32, kI64 };

size_t dtype_size(DType t);
// Canonical name: float32, bfloat16, float16, float8_e4m3fn, float8_e5m2, uint8, int32, int64.
std::string_view dtype_name(DType t);
// Accepts canonical names and the common aliases (f32, bf16, half, float, fp16, F32/BF16/F16 of safetensors...).
std::optional<DType> dtype_from_name(std::string_view name);
bool dtype_is_float(DType t);
inline bool dtype_is_fp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }

// ---- scalar conversions (round to nearest even, IEEE semantics for NaN/Inf where the format has them) ----

inline float bits_to_f32(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }
inline uint32_t f32_to_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }

inline float bf16_to_f32(uint16_t h) { return bits_to_f32(uint32_t(h) << 16); }
inline uint16_t f32_to_bf16(float f) {
  uint32_t u = f32_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

float f16_to_f32(uint16_t h);
uint16_t f32_to_f16(float f);
// FP8 E4M3 (the "fn" variant: no Inf, max 448, NaN = S.1111.111); saturates out-of-range values to ±448.
float f8e4m3_to_f32(uint8_t v);
uint8_t f32_to_f8e4m3(float f);
// FP8 E5M2 (IEEE-like: Inf and NaN exist, max 57344); saturates finite out-of-range values to ±57344.
float f8e5m2_to_f32(uint8_t v);
uint8_t f32_to_f8e5m2(float f);

// Reads element i of a buffer of type t as float (float types only).
float load_as_f32(const void* data, DType t, size_t i);
// Writes float v into element i of a buffer of type t, rounding to nearest even.
void store_from_f32(void* data, DType t, size_t i, float v);

}  // namespace pagoda
