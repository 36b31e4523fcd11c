// RMSNorm, RoPE, SwiGLU, embedding, residual add, softmax/log-softmax and the thread pool against float64.
#include <atomic>
#include <numeric>

#include <gtest/gtest.h>

#include "ops_test_util.h"
#include "pagoda/core/error.h"
#include "pagoda/ops/act.h"
#include "pagoda/ops/embedding.h"
#include "pagoda/ops/rmsnorm.h"
#include "pagoda/ops/rope.h"
#include "pagoda/ops/softmax.h"

namespace pagoda::test {
namespace {

TEST(ThreadPool, CoversEveryIndexOnceAndNestsInline) {
  ThreadPool pool(2);
  for (int64_t n : {1, 2, 7, 100, 10007}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
    pool.parallel_for(n, 3, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) hits[size_t(i)]++;
      pool.parallel_for(4, 1, [](int64_t, int64_t) {});  // nested: runs inline, no deadlock
    });
    for (auto& h : hits) ASSERT_EQ(h.load(), 1);
  }
  ThreadPool one(1);
  int64_t total = 0;
  one.parallel_for(50, 1, [&](int64_t b, int64_t e) { total += e - b; });
  EXPECT_EQ(total, 50);
}

// Sum of squares in double, then: mean (1 rounding), + eps (1), sqrt (1), 1/x (1), x*inv (1), w*(.) (1):
// six float32 roundings, each relative u, so |err| <= 7u |y| (one spare for the double->float mean).
TEST(RmsNorm, MatchesFloat64) {
  for (int64_t cols : {1, 8, 64, 100, 4096}) {
    const int64_t rows = 5;
    auto x = random_nonzero(size_t(rows * cols), 10);
    auto w = random_nonzero(size_t(cols), 11);
    std::vector<float> y(x.size(), NAN);
    ThreadPool pool(2);
    rmsnorm({.x = x.data(), .w = w.data(), .y = y.data(), .rows = rows, .cols = cols, .eps = 1e-6f}, &pool);
    for (int64_t r = 0; r < rows; ++r) {
      double ss = 0;
      for (int64_t c = 0; c < cols; ++c) ss += double(x[size_t(r * cols + c)]) * x[size_t(r * cols + c)];
      const double inv = 1.0 / std::sqrt(ss / double(cols) + 1e-6);
      for (int64_t c = 0; c < cols; ++c) {
        const double ref = double(w[size_t(c)]) * x[size_t(r * cols + c)] * inv;
        ASSERT_NEAR(y[size_t(r * cols + c)], ref, 7 * kU * std::abs(ref)) << cols << " " << r << " " << c;
      }
    }
    // In place gives the same values.
    std::vector<float> z = x;
    rmsnorm({.x = z.data(), .w = w.data(), .y = z.data(), .rows = rows, .cols = cols, .eps = 1e-6f}, nullptr);
    EXPECT_EQ(z, y);
  }
}

// Llama-3 frequency schedule, written out as in transformers' _compute_llama3_parameters, in double.
TEST(Rope, Llama3InvFreq) {
  RopeFrequencyParams p{.rotary_dim = 32, .theta = 500000.0, .kind = RopeKind::kLlama3, .factor = 8.0,
                        .low_freq_factor = 1.0, .high_freq_factor = 4.0, .original_max_position_embeddings = 256};
  auto inv = rope_inv_freq(p);
  ASSERT_EQ(inv.size(), 16u);
  int low = 0, mid = 0, high = 0;
  for (int i = 0; i < 16; ++i) {
    const double base = std::pow(500000.0, -2.0 * i / 32.0);
    const double wl = 2 * M_PI / base;
    double want;
    if (wl < 256.0 / 4.0) want = base, ++high;
    else if (wl > 256.0 / 1.0) want = base / 8.0, ++low;
    else {
      const double s = (256.0 / wl - 1.0) / (4.0 - 1.0);
      want = (1 - s) * base / 8.0 + s * base;
      ++mid;
    }
    EXPECT_EQ(inv[size_t(i)], float(want)) << i;  // rounded once from double
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(mid, 0);
  EXPECT_GT(high, 0);
  auto lin = rope_inv_freq({.rotary_dim = 8, .theta = 10000.0, .kind = RopeKind::kLinear, .factor = 2.0});
  EXPECT_EQ(lin[1], float(std::pow(10000.0, -2.0 / 8.0) / 2.0));
}

// GGUF's rope_freqs: each frequency of the schedule divided by its factor, in double, rounded once.
TEST(Rope, FreqFactorsDivideEachFrequency) {
  const std::vector<float> ff = {1.0f, 1.5f, 3.25f, 8.0f};
  const auto inv = rope_inv_freq({.rotary_dim = 8, .theta = 500000.0, .freq_factors = ff.data()});
  const auto plain = rope_inv_freq({.rotary_dim = 8, .theta = 500000.0});
  for (int i = 0; i < 4; ++i) EXPECT_EQ(inv[size_t(i)], float(std::pow(500000.0, -2.0 * i / 8.0) / double(ff[size_t(i)]))) << i;
  EXPECT_EQ(inv[0], plain[0]);
  EXPECT_NE(inv[3], plain[3]);
}

// The op defines the angle as float32(float(pos) * inv_freq) (transformers computes it in float32); from
// there the reference is float64. cos/sin rounded to float (u each), two products and a sum (3u): |err| <=
// 4u (|x1| + |x2|) per output.
TEST(Rope, RotateHalfMatchesFloat64) {
  for (int hd : {8, 64, 128}) {
    const int heads = 3;
    const int64_t T = 6;
    auto x = random_nonzero(size_t(T * heads * hd), 12);
    auto inv = rope_inv_freq({.rotary_dim = hd, .theta = 1e6});
    std::vector<int32_t> pos = {0, 1, 7, 100, 4095, 131071};
    std::vector<float> y = x;
    rope_apply({.x = y.data(), .num_tokens = T, .num_heads = heads, .head_dim = hd, .positions = pos.data(), .inv_freq = inv.data()}, nullptr);
    const int half = hd / 2;
    for (int64_t t = 0; t < T; ++t)
      for (int h = 0; h < heads; ++h)
        for (int i = 0; i < half; ++i) {
          const size_t o = size_t((t * heads + h) * hd);
          const double angle = double(float(float(pos[size_t(t)]) * inv[size_t(i)]));
          const double x1 = x[o + size_t(i)], x2 = x[o + size_t(i + half)];
          const double tol = 4 * kU * (std::abs(x1) + std::abs(x2));
          ASSERT_NEAR(y[o + size_t(i)], x1 * std::cos(angle) - x2 * std::sin(angle), tol) << hd << " t" << t << " i" << i;
          ASSERT_NEAR(y[o + size_t(i + half)], x2 * std::cos(angle) + x1 * std::sin(angle), tol);
        }
    // Position 0 is the identity.
    for (int i = 0; i < heads * hd; ++i) EXPECT_EQ(y[size_t(i)], x[size_t(i)]);
  }
}

// silu(g)*u = g*u / (1 + exp(-g)): exp (glibc expf, < 1 ulp), add, divide, multiply: 4 roundings plus the
// exp error amplified by |g| exp(-g)/(1+exp(-g)) <= 1 for |g| <= 1: |err| <= 6u |ref|.
TEST(Act, SwigluAndAdd) {
  const int64_t rows = 4, cols = 37;
  auto g = random_nonzero(size_t(rows * 2 * cols), 13);
  std::vector<float> out(size_t(rows * cols), NAN);
  swiglu({.gate = g.data(), .up = g.data() + cols, .out = out.data(), .rows = rows, .cols = cols, .ld_in = 2 * cols}, nullptr);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) {
      const double gv = g[size_t(r * 2 * cols + c)], uv = g[size_t(r * 2 * cols + cols + c)];
      const double ref = gv / (1 + std::exp(-gv)) * uv;
      ASSERT_NEAR(out[size_t(r * cols + c)], ref, 6 * kU * std::abs(ref));
    }
  auto a = random_nonzero(1000, 14), b = random_nonzero(1000, 15);
  auto s = a;
  ThreadPool pool(2);
  add_inplace(s.data(), b.data(), 1000, &pool);
  for (size_t i = 0; i < 1000; ++i) ASSERT_EQ(s[i], a[i] + b[i]);  // one correctly rounded add
}

TEST(Embedding, LooksUpRowsExactlyAndRejectsBadIds) {
  const int64_t vocab = 10, hidden = 12;
  auto table = random_nonzero(size_t(vocab * hidden), 16);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF16}) {
    std::vector<uint8_t> stored(table.size() * dtype_size(dt));
    for (size_t i = 0; i < table.size(); ++i) store_from_f32(stored.data(), dt, i, table[i]);
    std::vector<int32_t> ids = {3, 0, 9, 3};
    std::vector<float> out(ids.size() * size_t(hidden), NAN);
    EmbeddingParams p{.table = stored.data(), .dtype = dt, .vocab = vocab, .hidden = hidden, .ids = ids.data(), .num_tokens = 4, .out = out.data()};
    embedding_lookup(p, nullptr);
    for (size_t t = 0; t < ids.size(); ++t)
      for (int64_t c = 0; c < hidden; ++c)
        ASSERT_EQ(out[t * size_t(hidden) + size_t(c)], load_as_f32(stored.data(), dt, size_t(ids[t] * hidden + c)));
    ids[1] = 10;
    EXPECT_THROW(embedding_lookup(p, nullptr), Error);
  }
}

// Computed in double and rounded once: |err| <= u |ref| (+ the double error, ~1e-16 |ref|).
TEST(Softmax, SoftmaxAndLogSoftmax) {
  const int64_t rows = 3, cols = 1000;
  auto x = random_nonzero(size_t(rows * cols), 17);
  for (auto& v : x) v *= 20;
  std::vector<float> p(x.size()), lp(x.size());
  softmax(x.data(), p.data(), rows, cols);
  log_softmax(x.data(), lp.data(), rows, cols);
  for (int64_t r = 0; r < rows; ++r) {
    double mx = -1e30, sum = 0;
    for (int64_t c = 0; c < cols; ++c) mx = std::max(mx, double(x[size_t(r * cols + c)]));
    for (int64_t c = 0; c < cols; ++c) sum += std::exp(double(x[size_t(r * cols + c)]) - mx);
    double total = 0;
    for (int64_t c = 0; c < cols; ++c) {
      const double lref = double(x[size_t(r * cols + c)]) - mx - std::log(sum);
      ASSERT_NEAR(p[size_t(r * cols + c)], std::exp(lref), 1.01 * kU * std::exp(lref));
      ASSERT_NEAR(lp[size_t(r * cols + c)], lref, 1.01 * kU * std::abs(lref) + 1e-12);
      total += p[size_t(r * cols + c)];
    }
    EXPECT_NEAR(total, 1.0, cols * kU);
  }
}

}  // namespace
}  // namespace pagoda::test
