// Private to ops/dense_gemm*.cc: the tile interface each ISA's file implements, and the epilogue and GELU
// they share. Everything here has internal linkage: each file compiles it for its own target, and the
// copies must not be merged by the linker (an AVX-512 copy would then run on a CPU without it).
//
// The element-wise code is written with GCC vector extensions and compiled with -ffp-contract=off, so every
// target performs the same IEEE operations in the same order and rounds identically.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "pagoda/ops/dense_gemm.h"

namespace pagoda::dense {

// One tile: `rows` rows of x against one packed panel; y's first `cols` columns of those rows are written.
struct Tile {
  const float* x;        // [rows, k], row stride ldx
  int64_t ldx;
  const float* w;        // the panel: [k][kDensePanel], 64-byte aligned
  const float* bias;     // [kDensePanel], 64-byte aligned
  int64_t k;
  const float* residual;  // [rows, cols] row stride ldr, or nullptr
  int64_t ldr;
  float* y;  // [rows, cols], row stride ldy
  int64_t ldy;
  int cols;  // 1 .. kDensePanel
  bool gelu;
};

// rows <= the path's kMaxRows.
constexpr int kMaxRowsAvx512 = 8;
constexpr int kMaxRowsAvx2 = 6;
constexpr int kMaxRowsGeneric = 4;
void tile_avx512(int rows, const Tile& t);
void tile_avx2(int rows, const Tile& t);

namespace {

typedef float v16f __attribute__((vector_size(64)));

inline __attribute__((always_inline)) v16f splat16(float v) {
  return v16f{v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v};
}
inline __attribute__((always_inline)) v16f load16(const float* p) {
  v16f v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
inline __attribute__((always_inline)) void store16(float* p, v16f v) { std::memcpy(p, &v, sizeof v); }

// erf(x) as x P(x^2) / Q(x^2) on x clamped to [-4, 4] (erf(4) rounds to 1 in float32): the rational
// approximation of Eigen / XLA (generic_fast_erf_float); absolute error below 5e-7 (kGeluErfAbsError; the
// test measures it on a dense grid). NaN passes through.
inline __attribute__((always_inline)) v16f erf16(v16f x) {
  const v16f hi = splat16(4.0f), lo = splat16(-4.0f);
  x = x > hi ? hi : x;
  x = x < lo ? lo : x;
  const v16f x2 = x * x;
  v16f p = splat16(-2.72614225801306e-10f);
  p = p * x2 + splat16(2.77068142495902e-08f);
  p = p * x2 + splat16(-2.10102402082508e-06f);
  p = p * x2 + splat16(-5.69250639462346e-05f);
  p = p * x2 + splat16(-7.34990630326855e-04f);
  p = p * x2 + splat16(-2.95459980854025e-03f);
  p = p * x2 + splat16(-1.60960333262415e-02f);
  p = p * x;
  v16f q = splat16(-1.45660718464996e-05f);
  q = q * x2 + splat16(-2.13374055278905e-04f);
  q = q * x2 + splat16(-1.68282697438203e-03f);
  q = q * x2 + splat16(-7.37332916720468e-03f);
  q = q * x2 + splat16(-1.42647390514189e-02f);
  return p / q;
}

inline __attribute__((always_inline)) v16f gelu16(v16f v) {
  return splat16(0.5f) * v * (splat16(1.0f) + erf16(v * splat16(float(M_SQRT1_2))));
}

// y[c] = gelu?(residual[c] + acc[c]) for c < cols. acc holds kDensePanel floats whatever cols is.
inline __attribute__((always_inline)) void epilogue_row(const float* acc, const float* residual, bool gelu, float* y,
                                                        int cols) {
  for (int c = 0; c < cols; c += 16) {
    const int w = cols - c < 16 ? cols - c : 16;
    v16f v = load16(acc + c);
    if (residual) {
      float r[16] = {};
      std::memcpy(r, residual + c, size_t(w) * sizeof(float));
      v = load16(r) + v;
    }
    if (gelu) v = gelu16(v);
    if (w == 16) {
      store16(y + c, v);
    } else {
      float o[16];
      store16(o, v);
      std::memcpy(y + c, o, size_t(w) * sizeof(float));
    }
  }
}

// The tile's rows after the kernel left bias + x @ W^T in acc ([rows][kDensePanel]).
inline __attribute__((always_inline)) void finish_tile(const Tile& t, int rows, const float* acc) {
  for (int i = 0; i < rows; ++i)
    epilogue_row(acc + i * kDensePanel, t.residual ? t.residual + i * t.ldr : nullptr, t.gelu, t.y + i * t.ldy,
                 t.cols);
}

}  // namespace
}  // namespace pagoda::dense
