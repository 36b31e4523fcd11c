// The packed-weight GEMM of the encoders (ops/dense_gemm.h) on every path this CPU has: against a float64
// reference on odd shapes (tails in m, n and k), strides and the in-place residual, batch invariance, and
// the vectorised GELU.
#include "pagoda/ops/dense_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "ops_test_util.h"

namespace pagoda::test {
namespace {

struct Shape {
  int64_t m, n, k;
};

// float32 bitwise equality (NaNs included).
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

std::vector<float> run(const DenseWeights& w, const std::vector<float>& x, int64_t m, DenseIsa isa, ThreadPool* pool,
                       const float* residual = nullptr, DenseEpilogue e = DenseEpilogue::kNone) {
  std::vector<float> y(size_t(m * w.n), std::numeric_limits<float>::quiet_NaN());
  DenseMatmulParams p{.x = x.data(), .w = &w, .residual = residual, .epilogue = e, .y = y.data(), .m = m};
  dense_matmul(p, pool, isa);
  return y;
}

// Each output is bias + k products (+ the residual), each step rounded once (an FMA) or twice (multiply,
// add): the classic bound |fl(sum) - sum| <= gamma_n * sum |terms| with n = 2k + 2 covers both.
TEST(DenseMatmul, MatchesFloat64ReferenceOnEveryPath) {
  ThreadPool pool(2);
  const Shape shapes[] = {{1, 1, 1},    {1, 5, 3},     {2, 31, 17},   {3, 32, 384}, {7, 33, 100},
                          {9, 65, 1030}, {17, 100, 64}, {64, 40, 9},   {97, 70, 33}, {130, 96, 48}};
  for (DenseIsa isa : dense_isas_available())
    for (const Shape& s : shapes)
      for (bool bias : {false, true})
        for (bool residual : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dense_isa_name(isa) << " m" << s.m << " n" << s.n << " k" << s.k
                                            << " bias " << bias << " residual " << residual);
          const auto x = random_nonzero(size_t(s.m * s.k), 1);
          const auto wf = random_nonzero(size_t(s.n * s.k), 2);
          const auto b = random_nonzero(size_t(s.n), 3);
          const auto r = random_nonzero(size_t(s.m * s.n), 4);
          const DenseWeights w = dense_pack(wf.data(), bias ? b.data() : nullptr, s.n, s.k);
          const std::vector<float> y = run(w, x, s.m, isa, &pool, residual ? r.data() : nullptr);
          std::vector<double> ref(y.size());
          DenseMatmulParams p{.x = x.data(), .w = &w, .residual = residual ? r.data() : nullptr, .m = s.m};
          dense_matmul_reference(p, ref.data());
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              double abs_sum = (bias ? std::abs(b[size_t(j)]) : 0.0) + (residual ? std::abs(r[size_t(i * s.n + j)]) : 0.0);
              for (int64_t t = 0; t < s.k; ++t) abs_sum += std::abs(double(x[size_t(i * s.k + t)]) * wf[size_t(j * s.k + t)]);
              const double n_ops = double(2 * s.k + 2);
              const double tol = n_ops * kU / (1 - n_ops * kU) * abs_sum;
              ASSERT_LE(std::abs(y[size_t(i * s.n + j)] - ref[size_t(i * s.n + j)]), tol) << "at " << i << "," << j;
            }
        }
}

// Strided x, y and residual (views into wider buffers) leave the rest of y untouched; y may be the residual.
TEST(DenseMatmul, StridesAndInPlaceResidual) {
  const int64_t m = 11, n = 45, k = 20, ldx = 27, ldy = 50;
  const auto x = random_nonzero(size_t(m * ldx), 5);
  const auto wf = random_nonzero(size_t(n * k), 6);
  const auto b = random_nonzero(size_t(n), 7);
  const DenseWeights w = dense_pack(wf.data(), b.data(), n, k);
  for (DenseIsa isa : dense_isas_available()) {
    SCOPED_TRACE(dense_isa_name(isa));
    std::vector<float> y = random_nonzero(size_t(m * ldy), 8);
    const std::vector<float> before = y;
    DenseMatmulParams p{.x = x.data(), .ldx = ldx, .w = &w, .residual = y.data(), .ldr = ldy, .y = y.data(),
                        .ldy = ldy, .m = m};
    std::vector<double> ref(size_t(m * n));
    dense_matmul_reference(p, ref.data());  // before y is overwritten
    dense_matmul(p, nullptr, isa);
    // The same product without the residual: y = before + it, bitwise (the residual is one rounded add).
    std::vector<float> plain(size_t(m * ldy), std::numeric_limits<float>::quiet_NaN());
    DenseMatmulParams q{.x = x.data(), .ldx = ldx, .w = &w, .y = plain.data(), .ldy = ldy, .m = m};
    dense_matmul(q, nullptr, isa);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < ldy; ++j) {
        const size_t at = size_t(i * ldy + j);
        if (j >= n) {
          ASSERT_TRUE(same_bits(y[at], before[at])) << i << "," << j << " outside the view was written";
          continue;
        }
        ASSERT_TRUE(same_bits(y[at], before[at] + plain[at])) << i << "," << j;
        ASSERT_NEAR(y[at], ref[size_t(i * n + j)], 1e-4) << i << "," << j;  // |terms| < 22: gamma_42 * 22 ~ 6e-5
      }
  }
}

// A row's outputs do not depend on the other rows, the thread count or the row's place: bitwise equal alone
// and in batches of every size around the tile heights. The FMA paths agree with each other bitwise.
TEST(DenseMatmul, BatchInvariantAndEqualAcrossFmaPaths) {
  const int64_t n = 70, k = 385, m_max = 67;
  const auto x = random_nonzero(size_t(m_max * k), 9);
  const auto wf = random_nonzero(size_t(n * k), 10);
  const auto b = random_nonzero(size_t(n), 11);
  const DenseWeights w = dense_pack(wf.data(), b.data(), n, k);
  ThreadPool pool(2);
  std::vector<float> fma_result;
  for (DenseIsa isa : dense_isas_available()) {
    SCOPED_TRACE(dense_isa_name(isa));
    std::vector<float> alone(size_t(m_max * n));
    for (int64_t i = 0; i < m_max; ++i) {
      const std::vector<float> xi(x.begin() + i * k, x.begin() + (i + 1) * k);
      const std::vector<float> yi = run(w, xi, 1, isa, nullptr);
      std::copy(yi.begin(), yi.end(), alone.begin() + i * n);
    }
    for (int64_t m : {2, 3, 5, 6, 7, 8, 9, 13, 17, 64, 65, 67}) {
      const std::vector<float> y = run(w, x, m, isa, &pool);
      for (int64_t e = 0; e < m * n; ++e) ASSERT_TRUE(same_bits(y[size_t(e)], alone[size_t(e)])) << "m " << m << " at " << e;
    }
    if (isa == DenseIsa::kGeneric) continue;
    if (fma_result.empty()) fma_result = alone;
    else
      for (size_t e = 0; e < alone.size(); ++e) ASSERT_TRUE(same_bits(alone[e], fma_result[e])) << "at " << e;
  }
}

// The GELU epilogue is gelu_erf applied to the plain product, bitwise, on every path.
TEST(DenseMatmul, GeluEpilogueIsGeluOfTheProduct) {
  const int64_t m = 13, n = 77, k = 50;
  const auto x = random_nonzero(size_t(m * k), 12);
  const auto wf = random_nonzero(size_t(n * k), 13);
  const auto b = random_nonzero(size_t(n), 14);
  const DenseWeights w = dense_pack(wf.data(), b.data(), n, k);
  for (DenseIsa isa : dense_isas_available()) {
    std::vector<float> want = run(w, x, m, isa, nullptr);
    gelu_erf(want.data(), int64_t(want.size()));
    const std::vector<float> got = run(w, x, m, isa, nullptr, nullptr, DenseEpilogue::kGeluErf);
    for (size_t e = 0; e < got.size(); ++e) ASSERT_TRUE(same_bits(got[e], want[e])) << dense_isa_name(isa) << " at " << e;
  }
}

// gelu(x) = 0.5 x (1 + erf(x / sqrt 2)) against float64. Error: the erf approximation's kGeluErfAbsError and
// the rounding of x / sqrt 2 (erf' <= 2/sqrt(pi), times |x / sqrt 2| u e^(-x^2/2) <= 0.5 u) and of 1 + erf (2u,
// as |1 + erf| <= 2), all scaled by 0.5 |x|; then the two products round (2u relative to the result).
TEST(GeluErf, MatchesFloat64) {
  std::vector<float> x;
  for (double v = -12; v <= 12; v += 1.0 / 4096) x.push_back(float(v));
  for (float v : {1e-30f, -1e-30f, 1e-7f, -3e-5f, 0.0f, -0.0f, 30.0f, -30.0f, 1e30f, -1e30f}) x.push_back(v);
  std::vector<float> y = x;
  gelu_erf(y.data(), int64_t(y.size()) - 3);  // the tail past a multiple of 16 as well
  gelu_erf(y.data() + y.size() - 3, 3);
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double v = x[i];
    const double want = 0.5 * v * (1.0 + std::erf(v * M_SQRT1_2));
    const double tol = 0.5 * std::abs(v) * (kGeluErfAbsError + 2.5 * kU) + 2 * kU * std::abs(want);
    ASSERT_LE(std::abs(y[i] - want), tol) << "x = " << v;
    if (tol > 0) worst = std::max(worst, std::abs(y[i] - want) / tol);
  }
  std::printf("gelu_erf: worst error / bound %.3f\n", worst);
  float nan = std::numeric_limits<float>::quiet_NaN();
  gelu_erf(&nan, 1);
  EXPECT_TRUE(std::isnan(nan));
}

}  // namespace
}  // namespace pagoda::test
