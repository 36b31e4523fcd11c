// Private to ops/: portable SIMD through GCC vector extensions, and run-time ISA dispatch.
//
// Binaries must run on any x86-64 (no -march=native), so hot loops are written with 8-wide float
// vectors, which GCC lowers to two SSE2 operations by default; PAGODA_MULTIVERSION additionally
// compiles a function for AVX2 and picks the clone at load time (GNU ifunc).
#pragma once

#include <cstring>

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define PAGODA_MULTIVERSION __attribute__((target_clones("avx2", "default")))
#else
#define PAGODA_MULTIVERSION
#endif
#define PAGODA_ALWAYS_INLINE inline __attribute__((always_inline))

namespace pagoda::simd {

typedef float v8f __attribute__((vector_size(32)));

PAGODA_ALWAYS_INLINE v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
PAGODA_ALWAYS_INLINE void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof v); }
PAGODA_ALWAYS_INLINE v8f splat8(float x) { return v8f{x, x, x, x, x, x, x, x}; }

// Horizontal sum in a fixed order (so every caller rounds alike).
PAGODA_ALWAYS_INLINE float hsum8(v8f v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

// f32 dot product of length n: 8 lanes, fixed-order reduction, scalar tail.
PAGODA_ALWAYS_INLINE float dot(const float* a, const float* b, int64_t n) {
  v8f acc = {};
  int64_t n8 = n & ~int64_t(7);
  for (int64_t i = 0; i < n8; i += 8) acc += load8(a + i) * load8(b + i);
  float s = hsum8(acc);
  for (int64_t i = n8; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace pagoda::simd
