// Helpers of the GPU op tests: device detection (tests skip visibly without one), seeded random inputs that
// are never zero, host arrays in any dtype, poisoned device outputs, and unit roundoffs for tolerances.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "pagoda/core/dtype.h"
#include "pagoda/ops/cuda/device_buffer.h"

namespace pagoda::test {

inline bool cuda_device_available() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return false;
  }
  return n > 0;
}

#define PAGODA_REQUIRE_CUDA_DEVICE() \
  if (!::pagoda::test::cuda_device_available()) GTEST_SKIP() << "skipped: no CUDA device"

// Unit roundoff of a format with round to nearest: half an ulp relative, 2^-(significand bits).
inline double unit_roundoff(DType t) {
  switch (t) {
    case DType::kF32: return std::ldexp(1.0, -24);
    case DType::kBF16: return std::ldexp(1.0, -8);
    case DType::kF16: return std::ldexp(1.0, -11);
    case DType::kF8E4M3: return std::ldexp(1.0, -4);
    case DType::kF8E5M2: return std::ldexp(1.0, -3);
    case DType::kU8:
    case DType::kI32:
    case DType::kI64: break;
  }
  return 0;
}

// Half the smallest subnormal: the absolute rounding error bound for results below the normal range, where
// the relative bound u * |x| no longer holds.
inline double half_min_subnormal(DType t) {
  switch (t) {
    case DType::kF32: return std::ldexp(1.0, -150);
    case DType::kBF16: return std::ldexp(1.0, -134);
    case DType::kF16: return std::ldexp(1.0, -25);
    case DType::kF8E4M3: return std::ldexp(1.0, -10);
    case DType::kF8E5M2: return std::ldexp(1.0, -17);
    case DType::kU8:
    case DType::kI32:
    case DType::kI64: break;
  }
  return 0;
}

// Fresh inputs each run; the seed is printed, and PAGODA_TEST_SEED=<n> replays a failing run.
inline uint64_t test_seed() {
  static const uint64_t seed = [] {
    if (const char* s = std::getenv("PAGODA_TEST_SEED")) return uint64_t(std::strtoull(s, nullptr, 10));
    return (uint64_t(std::random_device{}()) << 32) ^ std::random_device{}();
  }();
  return seed;
}

class Rng {
 public:
  explicit Rng(uint64_t salt = 0) : gen_(test_seed() ^ (salt * 0x9E3779B97F4A7C15ull)) {}
  // Normal(0, scale), redrawn while |v| < scale / 64: never zero, so unwritten or wrongly indexed outputs show.
  float normal(float scale = 1.f) {
    for (;;) {
      const float v = scale * normal_(gen_);
      if (std::fabs(v) >= scale / 64) return v;
    }
  }
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(gen_); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen_); }
  std::mt19937_64& gen() { return gen_; }

 private:
  std::mt19937_64 gen_;
  std::normal_distribution<float> normal_{0.f, 1.f};
};

// A host array of n elements of a float dtype, stored as the device will hold it.
struct HostArray {
  DType dtype = DType::kF32;
  size_t n = 0;
  std::vector<uint8_t> bytes;

  HostArray() = default;
  HostArray(DType t, size_t count) : dtype(t), n(count), bytes(count * dtype_size(t)) {}
  // Rounds each value to the dtype (nearest even).
  static HostArray from_floats(DType t, const std::vector<float>& v) {
    HostArray a(t, v.size());
    for (size_t i = 0; i < v.size(); ++i) store_from_f32(a.bytes.data(), t, i, v[i]);
    return a;
  }
  float get(size_t i) const { return load_as_f32(bytes.data(), dtype, i); }
  void set(size_t i, float v) { store_from_f32(bytes.data(), dtype, i, v); }
  size_t nbytes() const { return bytes.size(); }
};

inline std::vector<float> random_floats(Rng& rng, size_t n, float scale = 1.f) {
  std::vector<float> v(n);
  for (auto& x : v) x = rng.normal(scale);
  return v;
}

// Random values already rounded to the dtype.
inline HostArray random_array(Rng& rng, DType t, size_t n, float scale = 1.f) {
  return HostArray::from_floats(t, random_floats(rng, n, scale));
}

inline DeviceBuffer to_device(const HostArray& a) {
  DeviceBuffer d(a.nbytes());
  d.upload(a.bytes.data(), a.nbytes());
  return d;
}

template <typename T>
DeviceBuffer to_device(const std::vector<T>& v) {
  DeviceBuffer d(v.size() * sizeof(T));
  d.upload(v.data(), v.size() * sizeof(T));
  return d;
}

inline HostArray from_device(const DeviceBuffer& d, DType t, size_t n, size_t offset_bytes = 0) {
  HostArray a(t, n);
  d.download(a.bytes.data(), a.nbytes(), offset_bytes);
  return a;
}

template <typename T>
std::vector<T> from_device(const DeviceBuffer& d, size_t n) {
  std::vector<T> v(n);
  d.download(v.data(), n * sizeof(T));
  return v;
}

// Every byte 0xFF: NaN in fp32, bf16, fp16, fp8 e4m3 and e5m2; -1 as int32. A kernel that leaves an output
// element unwritten leaves a NaN (or -1) there.
constexpr int kPoisonByte = 0xff;
inline DeviceBuffer poisoned(size_t bytes) {
  DeviceBuffer d(bytes);
  d.fill_bytes(kPoisonByte);
  return d;
}

inline std::vector<DType> model_dtypes() { return {DType::kBF16, DType::kF16, DType::kF32}; }

inline void sync_and_check() {
  PAGODA_CUDA_CHECK(cudaGetLastError());
  PAGODA_CUDA_CHECK(cudaDeviceSynchronize());
}

// Gtest trace naming the replay seed.
inline std::string seed_note() { return "PAGODA_TEST_SEED=" + std::to_string(test_seed()); }

}  // namespace pagoda::test
