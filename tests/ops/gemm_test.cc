#include "pagoda/ops/gemm.h"

#include <gtest/gtest.h>

#include "ops_test_util.h"

namespace pagoda::test {
namespace {

// Weights stored as `dt` (values rounded to it first, so the reference sees exactly what matmul sees).
std::vector<uint8_t> store(const std::vector<float>& w, DType dt) {
  std::vector<uint8_t> out(w.size() * dtype_size(dt));
  for (size_t i = 0; i < w.size(); ++i) store_from_f32(out.data(), dt, i, w[i]);
  return out;
}

struct Case {
  int64_t m, n, k;
};

// Error bound of any float32 summation order of K products (weights exact after conversion): the classic
// |fl(sum) - sum| <= gamma_{K+1} * sum |x_i w_i| with gamma_n = n*u/(1-n*u); +1 for the bias add.
TEST(Matmul, MatchesFloat64ReferenceAllDtypes) {
  ThreadPool pool(2);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16})
    for (Case c : {Case{1, 1, 1}, Case{1, 7, 8}, Case{2, 16, 9}, Case{3, 33, 513}, Case{5, 17, 1030}, Case{17, 64, 256}, Case{64, 40, 100}})
      for (bool bias : {false, true}) {
        auto x = random_nonzero(size_t(c.m * c.k), 1);
        auto wf = random_nonzero(size_t(c.n * c.k), 2);
        auto b = random_nonzero(size_t(c.n), 3);
        auto w = store(wf, dt);
        std::vector<float> y(size_t(c.m * c.n), NAN);
        MatmulParams p{.x = x.data(), .w = w.data(), .w_dtype = dt, .bias = bias ? b.data() : nullptr, .y = y.data(),
                       .m = c.m, .n = c.n, .k = c.k};
        matmul(p, &pool);
        std::vector<double> ref(y.size());
        matmul_reference(p, ref.data());
        for (int64_t i = 0; i < c.m; ++i)
          for (int64_t j = 0; j < c.n; ++j) {
            double abs_sum = bias ? std::abs(b[size_t(j)]) : 0.0;
            for (int64_t t = 0; t < c.k; ++t)
              abs_sum += std::abs(double(x[size_t(i * c.k + t)]) * load_as_f32(w.data(), dt, size_t(j * c.k + t)));
            const double n_ops = double(c.k + 2);
            const double tol = n_ops * kU / (1 - n_ops * kU) * abs_sum;
            ASSERT_LE(std::abs(y[size_t(i * c.n + j)] - ref[size_t(i * c.n + j)]), tol)
                << dtype_name(dt) << " m" << c.m << " n" << c.n << " k" << c.k << " at " << i << "," << j;
          }
      }
}

// Strided x and y (a view into a wider buffer) leave the rest untouched.
TEST(Matmul, Strides) {
  const int64_t m = 3, n = 5, k = 12, ldx = 20, ldy = 9;
  auto x = random_nonzero(size_t(m * ldx), 4);
  auto w = random_nonzero(size_t(n * k), 5);
  std::vector<float> y(size_t(m * ldy), 7.0f);
  MatmulParams p{.x = x.data(), .w = w.data(), .y = y.data(), .m = m, .n = n, .k = k, .ldx = ldx, .ldy = ldy};
  matmul(p, nullptr);
  std::vector<double> ref(size_t(m * n));
  matmul_reference(p, ref.data());
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) EXPECT_NEAR(y[size_t(i * ldy + j)], ref[size_t(i * n + j)], 1e-5);
    for (int64_t j = n; j < ldy; ++j) EXPECT_EQ(y[size_t(i * ldy + j)], 7.0f);
  }
}

// A row's result does not depend on the other rows of the batch or on the thread count (bitwise), which is
// what lets batched and single-sequence runs agree exactly.
TEST(Matmul, BatchAndThreadInvariant) {
  const int64_t m = 37, n = 70, k = 1100;
  auto x = random_nonzero(size_t(m * k), 6);
  auto w = store(random_nonzero(size_t(n * k), 7), DType::kBF16);
  std::vector<float> all(static_cast<size_t>(m * n)), one(static_cast<size_t>(n));
  ThreadPool pool(2);
  matmul({.x = x.data(), .w = w.data(), .w_dtype = DType::kBF16, .y = all.data(), .m = m, .n = n, .k = k}, &pool);
  for (int64_t i = 0; i < m; ++i) {
    matmul({.x = x.data() + i * k, .w = w.data(), .w_dtype = DType::kBF16, .y = one.data(), .m = 1, .n = n, .k = k}, nullptr);
    for (int64_t j = 0; j < n; ++j) ASSERT_EQ(one[size_t(j)], all[size_t(i * n + j)]) << i << "," << j;
  }
}

}  // namespace
}  // namespace pagoda::test
