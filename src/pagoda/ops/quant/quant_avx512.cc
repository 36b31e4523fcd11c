// The quantized kernels for AVX-512 (F, BW, VL) with VNNI: vpdpbusd, panels of 16 rows (quant_kernels.inc).
// Compiled for that target whatever the build flags; quant_matmul.cc calls it only where the CPU has it.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "pagoda/ops/quant/quant_matmul.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
// GCC 12 warns about the _mm512_undefined_ps() inside _mm512_cvtepi32_ps (a false positive).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace pagoda::quant {
namespace {

struct Isa {
  static constexpr bool kVnni = true;
  static __m256i dot256(__m256i acc, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(acc, u, s); }

  using I = __m512i;
  using F = __m512;
  static constexpr int P = 16;
  // Tiles: 4 weight rows x 2 panels (8 int32 + 8 float accumulators) for the 32-blocks; the k-quants keep a
  // third set (per-sub-block sums), so 4 x 1.
  static constexpr int kC32 = 4, kR32 = 2, kCK = 4, kRK = 1;
  static I zero() { return _mm512_setzero_si512(); }
  static I load(const void* p) { return _mm512_loadu_si512(p); }
  static I bcast32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
  }
  static I set1(int32_t v) { return _mm512_set1_epi32(v); }
  static I dotp(I acc, I u, I s) { return _mm512_dpbusd_epi32(acc, u, s); }
  static I dot_signed(I acc, I, I) { return acc; }  // unused: VNNI takes Q8_0 as u8 codes + 128
  static I add(I a, I b) { return _mm512_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm512_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm512_mullo_epi32(a, b); }
  static F cvt(I a) { return _mm512_cvtepi32_ps(a); }
  static F fzero() { return _mm512_setzero_ps(); }
  static F fload(const float* p) { return _mm512_loadu_ps(p); }
  static F fbcast(float v) { return _mm512_set1_ps(v); }
  static void fstore(float* p, F v) { _mm512_storeu_ps(p, v); }
  static F fmul(F a, F b) { return _mm512_mul_ps(a, b); }
  static F fadd(F a, F b) { return _mm512_add_ps(a, b); }
  static F fsub(F a, F b) { return _mm512_sub_ps(a, b); }
};

#include "pagoda/ops/quant/quant_kernels.inc"

}  // namespace

void gemv_avx512(const QuantWeights& w, const RowActs& a, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  gemv_any(w, a, j0, j1, y, ldy);
}
void gemm_avx512(const QuantWeights& w, const PanelActs& a, int64_t m, int64_t j0, int64_t j1, float* y, int64_t ldy,
                 float* scratch) {
  gemm_any(w, a, m, j0, j1, y, ldy, scratch);
}

}  // namespace pagoda::quant

#pragma GCC pop_options
#else
namespace pagoda::quant {
void gemv_avx512(const QuantWeights&, const RowActs&, int64_t, int64_t, float*, int64_t) {}
void gemm_avx512(const QuantWeights&, const PanelActs&, int64_t, int64_t, int64_t, float*, int64_t, float*) {}
}  // namespace pagoda::quant
#endif
