// The dense GEMM tile for AVX-512F: rows x 32 outputs in 2 * rows zmm accumulators, one broadcast of x and
// two FMAs per row and k step. Compiled for that target whatever the build flags; dense_gemm.cc calls it
// only where the CPU has it.
#include <immintrin.h>

#include "pagoda/ops/dense_gemm_tile.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f")

namespace pagoda::dense {
namespace {

static_assert(kDensePanel == 32, "two zmm per tile row");

template <int R>
void tile(const Tile& t) {
  __m512 c0[R], c1[R];
  const __m512 b0 = _mm512_load_ps(t.bias), b1 = _mm512_load_ps(t.bias + 16);
  for (int i = 0; i < R; ++i) {
    c0[i] = b0;
    c1[i] = b1;
  }
  const float* xr[R];
  for (int i = 0; i < R; ++i) xr[i] = t.x + i * t.ldx;
  const float* w = t.w;
  for (int64_t s = 0; s < t.k; ++s, w += kDensePanel) {
    const __m512 w0 = _mm512_load_ps(w), w1 = _mm512_load_ps(w + 16);
    for (int i = 0; i < R; ++i) {
      const __m512 xv = _mm512_set1_ps(xr[i][s]);
      c0[i] = _mm512_fmadd_ps(xv, w0, c0[i]);
      c1[i] = _mm512_fmadd_ps(xv, w1, c1[i]);
    }
  }
  alignas(64) float acc[R * kDensePanel];
  for (int i = 0; i < R; ++i) {
    _mm512_store_ps(acc + i * kDensePanel, c0[i]);
    _mm512_store_ps(acc + i * kDensePanel + 16, c1[i]);
  }
  finish_tile(t, R, acc);
}

}  // namespace

void tile_avx512(int rows, const Tile& t) {
  switch (rows) {
    case 1: tile<1>(t); break;
    case 2: tile<2>(t); break;
    case 3: tile<3>(t); break;
    case 4: tile<4>(t); break;
    case 5: tile<5>(t); break;
    case 6: tile<6>(t); break;
    case 7: tile<7>(t); break;
    case 8: tile<8>(t); break;
    default: break;
  }
  static_assert(kMaxRowsAvx512 == 8);
}

}  // namespace pagoda::dense

#pragma GCC pop_options
#else
namespace pagoda::dense {
void tile_avx512(int, const Tile&) {}
}  // namespace pagoda::dense
#endif
