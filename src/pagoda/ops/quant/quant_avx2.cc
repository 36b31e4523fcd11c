// The quantized kernels for AVX2 (with FMA and F16C, as every AVX2 CPU has): vpmaddubsw + vpmaddwd, panels
// of 8 rows (quant_kernels.inc). Compiled for that target whatever the build flags; quant_matmul.cc calls it
// only where the CPU has it.
#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "pagoda/ops/quant/quant_matmul.h"

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")

namespace pagoda::quant {
namespace {

struct Isa {
  static constexpr bool kVnni = false;
  // u8 x s8 pairs to int16 (no saturation for the codes used here, see quant_kernels.inc), pairs to int32.
  static __m256i dot256(__m256i acc, __m256i u, __m256i s) {
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
  }

  using I = __m256i;
  using F = __m256;
  static constexpr int P = 8;
  // 16 ymm registers: 4 x 1 tiles keep 8 accumulators; the k-quants need three sets, so 2 x 1.
  static constexpr int kC32 = 4, kR32 = 1, kCK = 2, kRK = 1;
  static I zero() { return _mm256_setzero_si256(); }
  static I load(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
  static I bcast32(const void* p) {
    int32_t v;
    std::memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
  }
  static I set1(int32_t v) { return _mm256_set1_epi32(v); }
  static I dotp(I acc, I u, I s) { return dot256(acc, u, s); }
  // Signed w x signed x: |w| x (x with w's sign).
  static I dot_signed(I acc, I w, I x) { return dot256(acc, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w)); }
  static I add(I a, I b) { return _mm256_add_epi32(a, b); }
  static I sub(I a, I b) { return _mm256_sub_epi32(a, b); }
  static I mullo(I a, I b) { return _mm256_mullo_epi32(a, b); }
  static F cvt(I a) { return _mm256_cvtepi32_ps(a); }
  static F fzero() { return _mm256_setzero_ps(); }
  static F fload(const float* p) { return _mm256_loadu_ps(p); }
  static F fbcast(float v) { return _mm256_set1_ps(v); }
  static void fstore(float* p, F v) { _mm256_storeu_ps(p, v); }
  static F fmul(F a, F b) { return _mm256_mul_ps(a, b); }
  static F fadd(F a, F b) { return _mm256_add_ps(a, b); }
  static F fsub(F a, F b) { return _mm256_sub_ps(a, b); }
};

#include "pagoda/ops/quant/quant_kernels.inc"

}  // namespace

void gemv_avx2(const QuantWeights& w, const RowActs& a, int64_t j0, int64_t j1, float* y, int64_t ldy) {
  gemv_any(w, a, j0, j1, y, ldy);
}
void gemm_avx2(const QuantWeights& w, const PanelActs& a, int64_t m, int64_t j0, int64_t j1, float* y, int64_t ldy,
               float* scratch) {
  gemm_any(w, a, m, j0, j1, y, ldy, scratch);
}

}  // namespace pagoda::quant

#pragma GCC pop_options
#else
namespace pagoda::quant {
void gemv_avx2(const QuantWeights&, const RowActs&, int64_t, int64_t, float*, int64_t) {}
void gemm_avx2(const QuantWeights&, const PanelActs&, int64_t, int64_t, int64_t, float*, int64_t, float*) {}
}  // namespace pagoda::quant
#endif
