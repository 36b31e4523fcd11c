// The quantized matmul on every path this CPU has (scalar, AVX2, AVX-512 VNNI): against float64 products,
// path against path, and batch / thread invariance.
#include "pagoda/ops/quant/quant_matmul.h"

#include <gtest/gtest.h>

#include <bit>

#include "pagoda/ops/quant/quant.h"
#include "quant_test_util.h"

namespace pagoda::test {
namespace {

using quant::QuantIsa;

constexpr double kU = 0x1p-24;  // float32 unit roundoff
double gamma(double n) { return n * kU / (1 - n * kU); }

struct Problem {
  QuantType t;
  int64_t m, n, k;
  std::vector<uint8_t> w;
  std::vector<float> x, bias;
  // Per weight element: the scaled-code part a and the min part c (w = a + c), from the test's transcription.
  std::vector<double> wa, wc;
};

// Random blocks (random codes, random fp16 scales), activations of mixed magnitudes with a zero row and an
// outlier, a bias.
Problem make_problem(QuantType t, int64_t m, int64_t n, int64_t k, uint64_t seed) {
  Problem p{t, m, n, k, random_blocks(t, n * k / quant_traits(t).block_elems, seed), {}, {}, {}, {}};
  std::mt19937_64 rng(seed + 1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  p.x.resize(size_t(m * k));
  for (int64_t i = 0; i < m; ++i) {
    const float scale = std::ldexp(1.0f, int(i % 7) - 3);
    for (int64_t e = 0; e < k; ++e) p.x[size_t(i * k + e)] = i == 2 ? 0.0f : normal(rng) * scale;
  }
  if (m > 5) p.x[size_t(5 * k + k / 3)] = 300.0f;
  p.bias.resize(size_t(n));
  for (auto& b : p.bias) b = normal(rng);
  const QuantTraits tr = quant_traits(t);
  p.wa.resize(size_t(n * k));
  p.wc.resize(size_t(n * k));
  for (int64_t blk = 0; blk < n * k / tr.block_elems; ++blk)
    ref_decode_block(t, p.w.data() + blk * tr.block_bytes, p.wa.data() + blk * tr.block_elems,
                     p.wc.data() + blk * tr.block_elems);
  return p;
}

MatmulParams params(const Problem& p, float* y, bool bias) {
  return MatmulParams{.x = p.x.data(), .w = p.w.data(), .w_quant = p.t, .bias = bias ? p.bias.data() : nullptr,
                      .y = y, .m = p.m, .n = p.n, .k = p.k};
}

std::vector<float> run(const Problem& p, QuantIsa isa, ThreadPool* pool, bool bias) {
  std::vector<float> y(static_cast<size_t>(p.m * p.n), NAN);
  quant::quant_matmul(params(p, y.data(), bias), pool, isa);
  return y;
}

int activation_block(QuantType t) { return quant_traits(t).block_elems == 32 ? 32 : 256; }

// The activations as the kernels quantize them (quant_matmul.h): per block dx = max|x| / 127 and
// qx = round-half-even(x * (1 / dx)), in float32. Returns x̂ = dx * qx in float64.
std::vector<double> quantized_activations(const Problem& p) {
  const int B = activation_block(p.t);
  std::vector<double> xh(p.x.size());
  for (int64_t i = 0; i < p.m; ++i)
    for (int64_t b0 = 0; b0 < p.k; b0 += B) {
      float amax = 0;
      for (int e = 0; e < B; ++e) amax = std::max(amax, std::fabs(p.x[size_t(i * p.k + b0 + e)]));
      const float dx = amax / 127.0f;
      const float id = dx > 0 ? 1.0f / dx : 0.0f;
      for (int e = 0; e < B; ++e) {
        const size_t at = size_t(i * p.k + b0 + e);
        xh[at] = double(dx) * std::nearbyint(p.x[at] * id);
      }
    }
  return xh;
}

const std::vector<std::array<int64_t, 3>>& shapes(QuantType t) {
  // m = 1 and 3 take the GEMV kernels, 8 / 17 / 64 the panels (partial ones included); n = 37 leaves a
  // partial tile of weight rows; k with a tail of blocks that is not a multiple of 8.
  static const std::vector<std::array<int64_t, 3>> s32 = {{1, 37, 576}, {3, 37, 96}, {8, 37, 576}, {17, 37, 32},
                                                          {64, 37, 288}};
  static const std::vector<std::array<int64_t, 3>> sk = {{1, 37, 768}, {3, 37, 256}, {8, 37, 512}, {17, 37, 768},
                                                         {64, 37, 256}};
  return quant_traits(t).block_elems == 32 ? s32 : sk;
}

// Against Σ w·x̂ with x̂ the quantized activations, only float32 evaluation error remains. Per block the
// kernels form at most two parts (scaled codes, min) with <= 4 roundings each (dw*dx, the int->float
// conversion above 2^24, the product; dx*sum and m*sx; their sum), then nb sequential additions and the bias:
// |y - ref| <= gamma(nb + 5) * (Σ_t (|a_t| + |c_t|) |x̂_t| + |bias|).
TEST(QuantMatmul, EveryPathMatchesQuantizedActivationProductTightly) {
  ThreadPool pool(2);
  for (QuantType t : kAllQuantTypes)
    for (const auto& [m, n, k] : shapes(t)) {
      const Problem p = make_problem(t, m, n, k, 100 + uint64_t(m));
      const auto xh = quantized_activations(p);
      const double nb = double(k / activation_block(t));
      for (QuantIsa isa : quant::quant_isas_available()) {
        const auto y = run(p, isa, &pool, true);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double ref = p.bias[size_t(j)], mag = std::fabs(p.bias[size_t(j)]);
            for (int64_t e = 0; e < k; ++e) {
              const size_t we = size_t(j * k + e), xe = size_t(i * k + e);
              ref += (p.wa[we] + p.wc[we]) * xh[xe];
              mag += (std::fabs(p.wa[we]) + std::fabs(p.wc[we])) * std::fabs(xh[xe]);
            }
            const double tol = gamma(nb + 5) * mag + 1e-300;
            ASSERT_LE(std::fabs(double(y[size_t(i * n + j)]) - ref), tol)
                << quant_traits(t).name << " " << quant::quant_isa_name(isa) << " m" << m << " k" << k << " at " << i
                << "," << j;
          }
      }
    }
}

// The acceptance bound against the unquantized activations: matmul_reference's float64 product of x with
// the dequantized weights. With x̂ = dx * qx and |x - x̂| <= e_b = dx_b (1/2 + 2^-15) per element of block b
// (quant_matmul.h), the exact quantized product differs from Σ w x by at most Σ_t |w_t| e_b; its float32
// evaluation adds gamma(nb + 5) Σ_t (|a_t| + |c_t|) (|x_t| + e_b) (the bound of the test above, with
// |x̂| <= |x| + e); the reference rounds each w_t to float32 once (u |w_t x_t|) and sums in float64 (k 2^-53
// relative, taken as u); dx_b itself is float(max|x| / 127), at most (1 + u) max|x| / 127.
TEST(QuantMatmul, MatchesDequantizedFloat64ProductWithinActivationQuantizationBound) {
  ThreadPool pool(2);
  for (QuantType t : kAllQuantTypes)
    for (const auto& [m, n, k] : shapes(t)) {
      const Problem p = make_problem(t, m, n, k, 200 + uint64_t(m));
      const int B = activation_block(t);
      const double nb = double(k / B);
      std::vector<double> ref(static_cast<size_t>(m * n));
      std::vector<float> unused(static_cast<size_t>(m * n));
      matmul_reference(params(p, unused.data(), true), ref.data());
      for (QuantIsa isa : quant::quant_isas_available()) {
        const auto y = run(p, isa, &pool, true);
        for (int64_t i = 0; i < m; ++i)
          for (int64_t j = 0; j < n; ++j) {
            double tol = gamma(nb + 5) * std::fabs(p.bias[size_t(j)]);
            for (int64_t b0 = 0; b0 < k; b0 += B) {
              double amax = 0;
              for (int e = 0; e < B; ++e) amax = std::max(amax, double(std::fabs(p.x[size_t(i * k + b0 + e)])));
              const double eb = amax / 127 * (1 + kU) * (0.5 + 0x1p-15);
              for (int e = 0; e < B; ++e) {
                const size_t we = size_t(j * k + b0 + e);
                const double ax = std::fabs(p.x[size_t(i * k + b0 + e)]);
                const double aw = std::fabs(p.wa[we]) + std::fabs(p.wc[we]);
                tol += aw * eb + gamma(nb + 5) * aw * (ax + eb) + 2 * kU * aw * ax;
              }
            }
            ASSERT_LE(std::fabs(double(y[size_t(i * n + j)]) - ref[size_t(i * n + j)]), tol + 1e-300)
                << quant_traits(t).name << " " << quant::quant_isa_name(isa) << " m" << m << " k" << k << " at " << i
                << "," << j;
          }
      }
    }
}

// Every path evaluates the canonical order of quant_matmul.h with exact integer sums, so all agree bit for bit.
TEST(QuantMatmul, SimdPathsEqualScalarBitForBit) {
  const auto isas = quant::quant_isas_available();
  if (isas.size() == 1) GTEST_SKIP() << "skipped: this CPU has no AVX2";
  ThreadPool pool(2);
  for (QuantType t : kAllQuantTypes)
    for (const auto& [m, n, k] : shapes(t)) {
      const Problem p = make_problem(t, m, n, k, 300 + uint64_t(m));
      const auto want = run(p, QuantIsa::kScalar, &pool, m % 2 == 0);
      for (QuantIsa isa : isas) {
        const auto y = run(p, isa, &pool, m % 2 == 0);
        for (size_t e = 0; e < y.size(); ++e)
          ASSERT_EQ(std::bit_cast<uint32_t>(y[e]), std::bit_cast<uint32_t>(want[e]))
              << quant_traits(t).name << " " << quant::quant_isa_name(isa) << " m" << m << " element " << e;
      }
    }
}

// A row alone (GEMV kernels) and in batches of 3 (GEMV) and 17 (panels), on 1 or 2 threads or none: same bits.
TEST(QuantMatmul, RowAloneEqualsRowInBatchAnyThreads) {
  ThreadPool one(1), two(2);
  for (QuantType t : kAllQuantTypes) {
    const int64_t k = quant_traits(t).block_elems == 32 ? 576 : 512, n = 40;
    const Problem batch = make_problem(t, 17, n, k, 400);
    for (QuantIsa isa : quant::quant_isas_available()) {
      const auto y17 = run(batch, isa, &two, true);
      EXPECT_EQ(0, std::memcmp(y17.data(), run(batch, isa, &one, true).data(), y17.size() * 4));
      EXPECT_EQ(0, std::memcmp(y17.data(), run(batch, isa, nullptr, true).data(), y17.size() * 4));
      for (int64_t i0 : {0, 6, 14}) {
        for (int64_t rows : {1, 3}) {
          Problem part = batch;
          part.m = rows;
          part.x.assign(batch.x.begin() + i0 * k, batch.x.begin() + (i0 + rows) * k);
          const auto y = run(part, isa, &two, true);
          for (int64_t r = 0; r < rows; ++r)
            ASSERT_EQ(0, std::memcmp(y.data() + r * n, y17.data() + (i0 + r) * n, size_t(n) * 4))
                << quant_traits(t).name << " " << quant::quant_isa_name(isa) << " row " << i0 + r << " of " << rows;
        }
      }
    }
  }
}

// matmul() takes the quantized path, honours strides and leaves the rest of y alone; a non-finite
// activation gives NaN in its row only.
TEST(QuantMatmul, MatmulDispatchStridesAndNonFinite) {
  for (QuantType t : {QuantType::kQ4_1, QuantType::kQ8_0, QuantType::kQ4_K}) {
    const int64_t m = 9, n = 21, k = 512, ldx = k + 32, ldy = n + 3;
    Problem p = make_problem(t, m, n, k, 500);
    std::vector<float> xs(static_cast<size_t>(m * ldx), 1e30f), ys(static_cast<size_t>(m * ldy), 7.0f);
    for (int64_t i = 0; i < m; ++i) std::copy_n(p.x.begin() + i * k, k, xs.begin() + i * ldx);
    xs[size_t(4 * ldx + 100)] = INFINITY;
    ThreadPool pool(2);
    MatmulParams mp = params(p, ys.data(), false);
    mp.x = xs.data();
    mp.ldx = ldx;
    mp.ldy = ldy;
    matmul(mp, &pool);
    p.x[size_t(4 * k + 100)] = INFINITY;
    const auto want = run(p, quant::quant_isas_available().back(), &pool, false);
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        const float got = ys[size_t(i * ldy + j)];
        if (i == 4) ASSERT_TRUE(std::isnan(got)) << quant_traits(t).name << " " << j;
        else ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want[size_t(i * n + j)]));
      }
      for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(ys[size_t(i * ldy + j)], 7.0f);
    }
  }
}

}  // namespace
}  // namespace pagoda::test
