// The dense GEMM tile for AVX2 + FMA: the 32-column panel in two halves of 16, each rows x 16 outputs in
// 2 * rows ymm accumulators (6 rows: 12 accumulators, 2 weight vectors, 1 broadcast of the 16 registers).
// The same FMA sequence per output as the AVX-512 tile, so the two agree bitwise. Compiled for that target
// whatever the build flags; dense_gemm.cc calls it only where the CPU has it.
#include <immintrin.h>

#include "pagoda/ops/dense_gemm_tile.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma")

namespace pagoda::dense {
namespace {

template <int R>
void tile(const Tile& t) {
  alignas(64) float acc[R * kDensePanel];
  const float* xr[R];
  for (int i = 0; i < R; ++i) xr[i] = t.x + i * t.ldx;
  for (int h = 0; h < kDensePanel; h += 16) {
    __m256 c0[R], c1[R];
    const __m256 b0 = _mm256_load_ps(t.bias + h), b1 = _mm256_load_ps(t.bias + h + 8);
    for (int i = 0; i < R; ++i) {
      c0[i] = b0;
      c1[i] = b1;
    }
    const float* w = t.w + h;
    for (int64_t s = 0; s < t.k; ++s, w += kDensePanel) {
      const __m256 w0 = _mm256_load_ps(w), w1 = _mm256_load_ps(w + 8);
      for (int i = 0; i < R; ++i) {
        const __m256 xv = _mm256_broadcast_ss(xr[i] + s);
        c0[i] = _mm256_fmadd_ps(xv, w0, c0[i]);
        c1[i] = _mm256_fmadd_ps(xv, w1, c1[i]);
      }
    }
    for (int i = 0; i < R; ++i) {
      _mm256_store_ps(acc + i * kDensePanel + h, c0[i]);
      _mm256_store_ps(acc + i * kDensePanel + h + 8, c1[i]);
    }
  }
  finish_tile(t, R, acc);
}

}  // namespace

void tile_avx2(int rows, const Tile& t) {
  switch (rows) {
    case 1: tile<1>(t); break;
    case 2: tile<2>(t); break;
    case 3: tile<3>(t); break;
    case 4: tile<4>(t); break;
    case 5: tile<5>(t); break;
    case 6: tile<6>(t); break;
    default: break;
  }
  static_assert(kMaxRowsAvx2 == 6);
}

}  // namespace pagoda::dense

#pragma GCC pop_options
#else
namespace pagoda::dense {
void tile_avx2(int, const Tile&) {}
}  // namespace pagoda::dense
#endif
