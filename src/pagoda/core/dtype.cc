#include "pagoda/core/dtype.h"

#include <cmath>

#include "pagoda/core/error.h"

namespace pagoda {

size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kBF16: return 2;
    case DType::kF16: return 2;
    case DType::kF8E4M3: return 1;
    case DType::kF8E5M2: return 1;
    case DType::kU8: return 1;
    case DType::kI32: return 4;
    case DType::kI64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "float32";
    case DType::kBF16: return "bfloat16";
    case DType::kF16: return "float16";
    case DType::kF8E4M3: return "float8_e4m3fn";
    case DType::kF8E5M2: return "float8_e5m2";
    case DType::kU8: return "uint8";
    case DType::kI32: return "int32";
    case DType::kI64: return "int64";
  }
  return "?";
}

std::optional<DType> dtype_from_name(std::string_view n) {
  if (n == "float32" || n == "float" || n == "f32" || n == "F32" || n == "fp32") return DType::kF32;
  if (n == "bfloat16" || n == "bf16" || n == "BF16") return DType::kBF16;
  if (n == "float16" || n == "half" || n == "f16" || n == "F16" || n == "fp16") return DType::kF16;
  if (n == "float8_e4m3fn" || n == "fp8_e4m3" || n == "F8_E4M3") return DType::kF8E4M3;
  if (n == "float8_e5m2" || n == "fp8_e5m2" || n == "F8_E5M2") return DType::kF8E5M2;
  if (n == "uint8" || n == "U8") return DType::kU8;
  if (n == "int32" || n == "I32") return DType::kI32;
  if (n == "int64" || n == "I64") return DType::kI64;
  return std::nullopt;
}

bool dtype_is_float(DType t) {
  switch (t) {
    case DType::kF32: case DType::kBF16: case DType::kF16: case DType::kF8E4M3: case DType::kF8E5M2: return true;
    case DType::kU8: case DType::kI32: case DType::kI64: return false;
  }
  return false;
}

float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1f;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_to_f32(sign);
    float f = std::ldexp(float(man), -24);  // subnormal: man * 2^-24
    return sign ? -f : f;
  }
  if (exp == 31) return bits_to_f32(sign | 0x7f800000u | (man << 13));
  return bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
  uint32_t u = f32_to_bits(f);
  uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65520: Inf
  if (a < 0x38800000u) {  // below the smallest normal 2^-14: subnormal or zero
    // value = a as float; the subnormal quantum is 2^-24. rint rounds half to even.
    float v = std::fabs(f) * 16777216.0f;  // exact scaling by 2^24
    return uint16_t(sign | uint16_t(std::nearbyint(v)));
  }
  uint32_t r = a + 0xfffu + ((a >> 13) & 1u);  // round mantissa to 10 bits, ties to even
  return uint16_t(sign | ((r - (112u << 23)) >> 13));
}

namespace {
// Generic decoder of a small float with e exponent bits and m mantissa bits.
float small_float_to_f32(uint32_t v, int e_bits, int m_bits, int bias) {
  uint32_t sign = (v >> (e_bits + m_bits)) & 1u;
  uint32_t exp = (v >> m_bits) & ((1u << e_bits) - 1);
  uint32_t man = v & ((1u << m_bits) - 1);
  float f;
  if (exp == 0) f = std::ldexp(float(man), 1 - bias - m_bits);
  else f = std::ldexp(float(man | (1u << m_bits)), int(exp) - bias - m_bits);
  return sign ? -f : f;
}

// Rounds |f| to the nearest representable value of a format with m mantissa bits, min normal
// exponent emin (unbiased) and largest finite max_finite; returns the code without sign.
uint32_t small_float_encode(float a, int e_bits, int m_bits, int bias, float max_finite) {
  if (a >= max_finite) a = max_finite;
  int emin = 1 - bias;
  int exp;
  std::frexp(a, &exp);  // a = f * 2^exp, f in [0.5, 1)
  int e = exp - 1;      // a in [2^e, 2^(e+1))
  if (e < emin) e = emin;
  float quantum = std::ldexp(1.0f, e - m_bits);
  float q = std::nearbyint(a / quantum);  // ties to even
  float r = q * quantum;
  if (r > max_finite) r = max_finite;
  // Re-derive the code from the rounded value.
  if (r == 0) return 0;
  std::frexp(r, &exp);
  e = exp - 1;
  if (e < emin) {  // subnormal
    return uint32_t(std::nearbyint(r / std::ldexp(1.0f, emin - m_bits)));
  }
  uint32_t man = uint32_t(std::nearbyint(r / std::ldexp(1.0f, e - m_bits))) - (1u << m_bits);
  return (uint32_t(e + bias) << m_bits) | man;
}
}  // namespace

float f8e4m3_to_f32(uint8_t v) {
  if ((v & 0x7f) == 0x7f) return std::nanf("");
  return small_float_to_f32(v, 4, 3, 7);
}

uint8_t f32_to_f8e4m3(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t s = std::signbit(f) ? 0x80 : 0;
  return uint8_t(s | small_float_encode(std::fabs(f), 4, 3, 7, 448.0f));
}

float f8e5m2_to_f32(uint8_t v) {
  uint32_t exp = (v >> 2) & 0x1f;
  if (exp == 31) {
    if (v & 3) return std::nanf("");
    return (v & 0x80) ? -INFINITY : INFINITY;
  }
  return small_float_to_f32(v, 5, 2, 15);
}

uint8_t f32_to_f8e5m2(float f) {
  if (std::isnan(f)) return 0x7f;
  uint8_t s = std::signbit(f) ? 0x80 : 0;
  return uint8_t(s | small_float_encode(std::fabs(f), 5, 2, 15, 57344.0f));
}

float load_as_f32(const void* data, DType t, size_t i) {
  switch (t) {
    case DType::kF32: return static_cast<const float*>(data)[i];
    case DType::kBF16: return bf16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF16: return f16_to_f32(static_cast<const uint16_t*>(data)[i]);
    case DType::kF8E4M3: return f8e4m3_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::kF8E5M2: return f8e5m2_to_f32(static_cast<const uint8_t*>(data)[i]);
    case DType::kU8: return static_cast<const uint8_t*>(data)[i];
    case DType::kI32: return float(static_cast<const int32_t*>(data)[i]);
    case DType::kI64: return float(static_cast<const int64_t*>(data)[i]);
  }
  return 0;
}

void store_from_f32(void* data, DType t, size_t i, float v) {
  switch (t) {
    case DType::kF32: static_cast<float*>(data)[i] = v; return;
    case DType::kBF16: static_cast<uint16_t*>(data)[i] = f32_to_bf16(v); return;
    case DType::kF16: static_cast<uint16_t*>(data)[i] = f32_to_f16(v); return;
    case DType::kF8E4M3: static_cast<uint8_t*>(data)[i] = f32_to_f8e4m3(v); return;
    case DType::kF8E5M2: static_cast<uint8_t*>(data)[i] = f32_to_f8e5m2(v); return;
    case DType::kU8: case DType::kI32: case DType::kI64:
      PAGODA_CHECK(false, "store_from_f32 on integer dtype ", dtype_name(t));
  }
}

}  // namespace pagoda
