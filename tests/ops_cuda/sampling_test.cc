// Greedy, seeded sampling and top logprobs against CPU references.
//
// The sampler is replicated on the CPU: the same x = logit * (1/T) in fp32, the kept set from the rules in
// sampling.h evaluated in float64, and the same Philox noise (philox.h). GPU and CPU must pick the same
// token on every row where no decision is within rounding of its boundary (those rows are counted and
// skipped; they are rare and the test fails if they are not).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/philox.h"
#include "pagoda/ops/cuda/sampling.h"

namespace pagoda {
namespace {

using test::Rng;

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// torch.argmax: first NaN, else the first maximum.
int cpu_argmax(const float* l, int vocab) {
  int best = 0;
  for (int i = 0; i < vocab; ++i) {
    if (std::isnan(l[i])) return i;
    if (l[i] > l[best]) best = i;
  }
  return best;
}

struct RowParams {
  float temperature = 1.f;
  int top_k = 0;
  float top_p = 1.f;
  float min_p = 0.f;
  uint64_t seed = 0, step = 0;
};

struct CpuSample {
  int token = -1;
  bool ambiguous = false;   // a boundary decision within rounding: GPU may legitimately differ
  std::vector<int> kept;    // the kept set (for distribution tests)
  std::vector<double> prob; // renormalised probabilities over `kept`
};

// The rules of sampling.h in float64, on the GPU's fp32 x values.
CpuSample cpu_sample(const float* l, int vocab, const RowParams& rp) {
  CpuSample out;
  if (!(rp.temperature >= kGreedyTemperature) || rp.top_k == 1) {
    out.token = cpu_argmax(l, vocab);
    return out;
  }
  const float inv_t = 1.0f / rp.temperature;
  float lmax = kNegInf;
  for (int i = 0; i < vocab; ++i) lmax = std::fmax(lmax, l[i]);
  const float m = lmax * inv_t, lo0 = m - 104.0f;
  const float min_p = std::fmin(rp.min_p, 1.f);
  std::vector<int> cand;
  std::vector<float> x(vocab);
  std::vector<double> e(vocab);
  for (int i = 0; i < vocab; ++i) {
    x[i] = l[i] * inv_t;
    e[i] = std::exp(double(x[i] - m));  // x - m in fp32 as the GPU does, exp exact here (GPU: 2 ulp)
    if (!(x[i] >= lo0)) continue;
    if (min_p > 0) {
      if (std::fabs(e[i] - min_p) <= 1e-5 * min_p) out.ambiguous = true;
      if (!(e[i] >= min_p)) continue;
    }
    cand.push_back(i);
  }
  std::sort(cand.begin(), cand.end(), [&](int a, int b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  float t = lo0;
  if (rp.top_k > 0 && rp.top_k < vocab && int(cand.size()) > rp.top_k) t = x[cand[rp.top_k - 1]];
  size_t n2 = 0;
  while (n2 < cand.size() && x[cand[n2]] >= t) ++n2;
  if (rp.top_p < 1.f) {
    double z = 0;
    for (size_t j = 0; j < n2; ++j) z += e[cand[j]];
    const double target = double(rp.top_p) * z, margin = 1e-4 * z;  // fixed-point and expf errors << 1e-4
    double cum = 0;
    for (size_t j = 0; j < n2;) {
      size_t g = j;
      double mass = 0;
      while (g < n2 && x[cand[g]] == x[cand[j]]) mass += e[cand[g++]];
      if (cum + mass >= target) {
        if (target - cum < margin || cum + mass - target < margin) out.ambiguous = true;
        t = x[cand[j]];
        break;
      }
      cum += mass;
      j = g;
    }
  }
  double z3 = 0, best = -INFINITY, second = -INFINITY;
  for (size_t j = 0; j < n2 && x[cand[j]] >= t; ++j) {
    const int i = cand[j];
    out.kept.push_back(i);
    z3 += e[i];
    const Philox4 w = sampler_random_words(rp.seed, rp.step, uint64_t(i) / 4);
    const double score = double(x[i]) - std::log(-std::log(double(uniform_from_word(w.v[i % 4]))));
    if (score > best) {
      second = best;
      best = score;
      out.token = i;
    } else {
      second = std::max(second, score);
    }
  }
  if (best - second < 1e-3) out.ambiguous = true;  // fp32 scores on the GPU: errors ~1e-5 at most
  for (int i : out.kept) out.prob.push_back(e[i] / z3);
  return out;
}

struct Batch {
  int rows = 0, vocab = 0;
  int64_t ld = 0;
  std::vector<float> logits;
  std::vector<RowParams> params;
};

// Runs sample() (or argmax() when greedy_kernel) on the batch and returns the tokens.
std::vector<int32_t> gpu_sample(const Batch& b, bool greedy_kernel = false) {
  DeviceBuffer dl = test::to_device(b.logits);
  DeviceBuffer dout = test::poisoned(size_t(b.rows) * 4);
  if (greedy_kernel) {
    ArgmaxParams p;
    p.logits = dl.as<float>(), p.ld = b.ld, p.rows = b.rows, p.vocab = b.vocab, p.out_tokens = dout.as<int32_t>();
    argmax(p, nullptr);
  } else {
    std::vector<float> temp, top_p, min_p;
    std::vector<int32_t> top_k;
    std::vector<uint64_t> seeds, steps;
    for (const auto& r : b.params) {
      temp.push_back(r.temperature), top_k.push_back(r.top_k), top_p.push_back(r.top_p), min_p.push_back(r.min_p);
      seeds.push_back(r.seed), steps.push_back(r.step);
    }
    DeviceBuffer dt = test::to_device(temp), dk = test::to_device(top_k), dp = test::to_device(top_p),
                 dm = test::to_device(min_p), ds = test::to_device(seeds), dst = test::to_device(steps);
    SampleParams p;
    p.logits = dl.as<float>(), p.ld = b.ld, p.rows = b.rows, p.vocab = b.vocab;
    p.temperature = dt.as<float>(), p.top_k = dk.as<int32_t>(), p.top_p = dp.as<float>(), p.min_p = dm.as<float>();
    p.seeds = ds.as<uint64_t>(), p.steps = dst.as<uint64_t>(), p.out_tokens = dout.as<int32_t>();
    sample(p, nullptr);
  }
  test::sync_and_check();
  return test::from_device<int32_t>(dout, b.rows);
}

Batch random_batch(Rng& rng, int rows, int vocab, int64_t ld) {
  Batch b;
  b.rows = rows, b.vocab = vocab, b.ld = ld;
  b.logits.assign(size_t(rows) * ld, std::nanf(""));  // the gap between rows is NaN: never read
  b.params.resize(rows);
  for (int r = 0; r < rows; ++r) {
    const float sigma = r % 3 == 0 ? 1.f : r % 3 == 1 ? 3.f : 6.f;
    for (int i = 0; i < vocab; ++i) b.logits[size_t(r) * ld + i] = rng.normal(sigma);
  }
  return b;
}

TEST(SamplingCuda, ArgmaxMatchesTorchSemantics) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(1);
  for (int vocab : {7, 1000, 1003, 32000, 128256, 151936, 152064}) {
    for (int64_t pad : {0, 3}) {
      const int rows = 9;
      Batch b = random_batch(rng, rows, vocab, vocab + pad);
      float* l = b.logits.data();
      // Row 1: the maximum twice (lowest index wins); row 2: a NaN (wins); row 3: all -inf but one -inf tie
      // (index 0); row 4: maximum at the last index; row 5: -0.0 and +0.0 tie above negatives.
      const int64_t ld = b.ld;
      const int a = int(rng.integer(0, vocab - 1)), c = int(rng.integer(0, vocab - 1));
      l[ld + a] = l[ld + c] = 1000.f;
      l[2 * ld + c] = std::nanf("");
      for (int i = 0; i < vocab; ++i) l[3 * ld + i] = kNegInf;
      l[4 * ld + vocab - 1] = 1000.f;
      for (int i = 0; i < vocab; ++i) l[5 * ld + i] = -1.f - float(i % 5);
      l[5 * ld + vocab / 2] = 0.0f;
      l[5 * ld + vocab / 3] = -0.0f;
      const auto got = gpu_sample(b, /*greedy_kernel=*/true);
      for (int r = 0; r < rows; ++r)
        EXPECT_EQ(got[r], cpu_argmax(l + r * ld, vocab)) << "vocab " << vocab << " ld " << ld << " row " << r;
    }
  }
}

TEST(SamplingCuda, GreedyCasesOfSampleEqualArgmax) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(2);
  Batch b = random_batch(rng, 24, 151936, 151936);
  for (int r = 0; r < b.rows; ++r) {
    b.params[r].seed = uint64_t(r);
    if (r % 3 == 0) b.params[r].temperature = 0.f;                       // greedy
    else if (r % 3 == 1) b.params[r].top_k = 1;                          // top-k 1
    else b.params[r].temperature = 1e-6f, b.params[r].top_p = 0.5f;      // below the greedy threshold
  }
  const auto got = gpu_sample(b);
  for (int r = 0; r < b.rows; ++r) EXPECT_EQ(got[r], cpu_argmax(b.logits.data() + r * b.ld, b.vocab)) << r;
}

// The whole sampler against its CPU replica, over mixed filters and vocabularies.
TEST(SamplingCuda, MatchesCpuReplica) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(3);
  const float temps[] = {0.f, 0.5f, 1.f, 1.5f};
  const float top_ps[] = {1.f, 0.95f, 0.8f, 0.5f, 0.1f};
  const float min_ps[] = {0.f, 0.01f, 0.1f, 0.5f};
  int compared = 0, ambiguous = 0;
  for (int vocab : {1000, 1003, 32000, 151936}) {
    const int rows = 96;
    Batch b = random_batch(rng, rows, vocab, vocab % 4 ? vocab : vocab + 4);
    for (int r = 0; r < rows; ++r) {
      RowParams& p = b.params[r];
      p.temperature = temps[rng.integer(0, 3)];
      const int ks[] = {0, 1, 2, 20, 50, 1000, vocab};
      p.top_k = ks[rng.integer(0, 6)];
      p.top_p = top_ps[rng.integer(0, 4)];
      p.min_p = min_ps[rng.integer(0, 3)];
      p.seed = rng.gen()();
      p.step = rng.integer(0, 1 << 20);
      if (r % 8 == 7)  // masked vocabulary: most entries -inf (structured-output masks)
        for (int i = 0; i < vocab; ++i)
          if (i % 17) b.logits[size_t(r) * b.ld + i] = kNegInf;
    }
    const auto got = gpu_sample(b);
    for (int r = 0; r < rows; ++r) {
      const CpuSample want = cpu_sample(b.logits.data() + r * b.ld, vocab, b.params[r]);
      ASSERT_GE(got[r], 0) << "row " << r << " not written";
      ASSERT_LT(got[r], vocab);
      if (want.ambiguous) {
        ++ambiguous;
        continue;
      }
      ++compared;
      const RowParams& p = b.params[r];
      EXPECT_EQ(got[r], want.token) << "vocab " << vocab << " row " << r << " T " << p.temperature << " top_k "
                                    << p.top_k << " top_p " << p.top_p << " min_p " << p.min_p << " kept "
                                    << want.kept.size();
    }
  }
  std::printf("sampler replica: %d rows compared, %d skipped as within rounding of a boundary\n", compared, ambiguous);
  EXPECT_LE(ambiguous * 10, compared + ambiguous) << "too many ambiguous rows for the test to mean much";
}

// Same (seed, step, logits) => same token, whatever the batch around it; a new step changes the draws.
TEST(SamplingCuda, ReproducibleAndBatchIndependent) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(4);
  Batch b = random_batch(rng, 32, 32000, 32000);
  for (int r = 0; r < b.rows; ++r) {
    b.params[r].seed = 1234 + r;
    b.params[r].step = 7;
    b.params[r].top_p = r % 2 ? 0.9f : 1.f;
    b.params[r].top_k = r % 4 < 2 ? 50 : 0;
  }
  const auto first = gpu_sample(b), second = gpu_sample(b);
  EXPECT_EQ(first, second);
  // The same rows reversed, in a batch of 16.
  Batch rev;
  rev.rows = 16, rev.vocab = b.vocab, rev.ld = b.ld;
  for (int r = 31; r >= 16; --r) {
    rev.logits.insert(rev.logits.end(), b.logits.begin() + r * b.ld, b.logits.begin() + (r + 1) * b.ld);
    rev.params.push_back(b.params[r]);
  }
  const auto third = gpu_sample(rev);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(third[j], first[31 - j]) << j;
  // Flat logits (uniform over 32000 tokens): another step gives other tokens.
  Batch flat = b;
  std::fill(flat.logits.begin(), flat.logits.end(), 0.f);
  for (auto& p : flat.params) p.top_k = 0, p.top_p = 1.f;
  const auto s7 = gpu_sample(flat);
  for (auto& p : flat.params) p.step = 8;
  const auto s8 = gpu_sample(flat);
  int same = 0;
  for (int r = 0; r < flat.rows; ++r) same += s7[r] == s8[r];
  EXPECT_LE(same, 2) << "the step does not reach the noise";  // by chance: 32 * (1/32000) expected
}

// Empirical distribution over many rows against the CPU's renormalised probabilities (chi-square).
// The noise is a fixed function of (seed, step), so this test is deterministic: no flakiness, it passes or
// fails the same way every run. The bound: mean dof + 10 standard deviations sqrt(2 dof), + 10 for the skew
// of small dof; a correct sampler exceeds it with probability < 1e-6 per configuration, while a biased one
// (an index off by one, the temperature or a filter ignored) gives values in the hundreds to thousands at
// 32768 draws.
void check_distribution(const std::vector<float>& logits, RowParams params, bool vary_step) {
  const int vocab = int(logits.size()), rows = 32768;
  Batch b;
  b.rows = rows, b.vocab = vocab, b.ld = vocab;
  for (int r = 0; r < rows; ++r) b.logits.insert(b.logits.end(), logits.begin(), logits.end());
  for (int r = 0; r < rows; ++r) {
    RowParams p = params;
    p.seed = vary_step ? 99 : uint64_t(r) * 7919;
    p.step = vary_step ? uint64_t(r) : 0;
    b.params.push_back(p);
  }
  const CpuSample want = cpu_sample(logits.data(), vocab, params);
  ASSERT_FALSE(want.kept.empty());
  const auto got = gpu_sample(b);
  std::vector<int> counts(vocab, 0);
  for (int t : got) {
    ASSERT_TRUE(t >= 0 && t < vocab);
    ++counts[t];
  }
  std::vector<double> expected(vocab, 0.0);
  for (size_t j = 0; j < want.kept.size(); ++j) expected[want.kept[j]] = want.prob[j] * rows;
  double chi2 = 0;
  for (int i = 0; i < vocab; ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(counts[i], 0) << "token " << i << " is filtered out but was sampled";
      continue;
    }
    chi2 += (counts[i] - expected[i]) * (counts[i] - expected[i]) / expected[i];
  }
  const double dof = double(want.kept.size()) - 1;
  const double bound = dof + 10 * std::sqrt(2 * std::max(dof, 1.0)) + 10;
  std::printf("chi-square %.1f over %d kept tokens (bound %.1f), T %.2f top_k %d top_p %.2f min_p %.2f%s\n", chi2,
              int(want.kept.size()), bound, params.temperature, params.top_k, params.top_p, params.min_p,
              vary_step ? ", one seed, varying step" : "");
  EXPECT_LT(chi2, bound);
}

TEST(SamplingCuda, DrawsFollowTheFilteredSoftmax) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(5);
  std::vector<float> logits(16);
  // Distinct logits spaced >= 0.05 apart, so no filter decision is near a boundary.
  for (int i = 0; i < 16; ++i) logits[i] = 0.15f * float(i) - 1.f + rng.uniform(0.f, 0.05f);
  std::shuffle(logits.begin(), logits.end(), rng.gen());
  RowParams p;
  check_distribution(logits, p, false);  // plain softmax, T = 1
  check_distribution(logits, p, true);
  p.temperature = 0.7f;
  check_distribution(logits, p, false);
  p.temperature = 1.f, p.top_k = 5;
  check_distribution(logits, p, false);
  p.top_k = 10, p.top_p = 0.6f;
  check_distribution(logits, p, false);
  p.top_k = 0, p.top_p = 1.f, p.min_p = 0.3f;
  check_distribution(logits, p, false);
}

// log-softmax within 1e-5 of the float64 value relative to the magnitudes involved: the GPU's error is a few
// ulps of max(|logit|, |lse|) (fp32: 2^-23 relative each) plus the relative error of the sum of exps
// (Kahan-compensated per thread, 9 merge levels with an expf each: < 2e-6), so 1e-5 * max(1, |l|, |lse|)
// holds with a margin of 3 or more. Ids must match exactly (ties: lower index first).
TEST(SamplingCuda, TopLogprobsMatchLogSoftmax) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(6);
  for (int vocab : {7, 1000, 1001, 151936}) {
    for (int k : {1, 5, 20}) {
      if (k > vocab) continue;
      const int rows = 33;
      Batch b = random_batch(rng, rows, vocab, vocab + (vocab % 2));
      // Row 0: tied top values; row 1: some -inf entries.
      b.logits[2] = b.logits[vocab - 1] = b.logits[vocab / 2] = 50.f;
      for (int i = 0; i < vocab; i += 3) b.logits[b.ld + i] = kNegInf;
      std::vector<int32_t> tokens(rows);
      for (auto& t : tokens) t = int32_t(rng.integer(0, vocab - 1));
      DeviceBuffer dl = test::to_device(b.logits), dtok = test::to_device(tokens);
      DeviceBuffer dlp = test::poisoned(size_t(rows) * k * 4), dids = test::poisoned(size_t(rows) * k * 4);
      DeviceBuffer dtlp = test::poisoned(size_t(rows) * 4);
      TopLogprobsParams p;
      p.logits = dl.as<float>(), p.ld = b.ld, p.rows = rows, p.vocab = vocab, p.k = k;
      p.out_logprobs = dlp.as<float>(), p.out_ids = dids.as<int32_t>();
      p.tokens = dtok.as<int32_t>(), p.out_token_logprobs = dtlp.as<float>();
      top_logprobs(p, nullptr);
      test::sync_and_check();
      const auto lp = test::from_device<float>(dlp, size_t(rows) * k);
      const auto ids = test::from_device<int32_t>(dids, size_t(rows) * k);
      const auto tlp = test::from_device<float>(dtlp, rows);
      for (int r = 0; r < rows; ++r) {
        const float* l = b.logits.data() + r * b.ld;
        double m = -INFINITY;
        for (int i = 0; i < vocab; ++i) m = std::max(m, double(l[i]));
        double s = 0;
        for (int i = 0; i < vocab; ++i) s += std::exp(double(l[i]) - m);
        const double lse = m + std::log(s);
        std::vector<int> order(vocab);
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return l[a] > l[c]; });
        auto tol = [&](double li) { return 1e-5 * std::max({1.0, std::fabs(li), std::fabs(lse)}); };
        auto expect_logprob = [&](float got, int token, const std::string& what) {
          const double want = double(l[token]) - lse;
          if (std::isinf(want)) EXPECT_EQ(got, float(want)) << what;  // a -inf logit: log-probability -inf
          else EXPECT_NEAR(got, want, tol(l[token])) << what;
        };
        for (int j = 0; j < k; ++j) {
          const std::string what = "vocab " + std::to_string(vocab) + " row " + std::to_string(r) + " rank " +
                                   std::to_string(j);
          ASSERT_EQ(ids[r * k + j], order[j]) << what;
          expect_logprob(lp[r * k + j], order[j], what);
        }
        expect_logprob(tlp[r], tokens[r], "vocab " + std::to_string(vocab) + " row " + std::to_string(r) + " token");
      }
    }
  }
}

TEST(SamplingCuda, RejectsBadArguments) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer d(4096);
  TopLogprobsParams p;
  p.logits = d.as<float>(), p.rows = 1, p.vocab = 100, p.k = 21, p.out_logprobs = d.as<float>(), p.out_ids = d.as<int32_t>();
  EXPECT_THROW(top_logprobs(p, nullptr), Error);
  SampleParams s;
  s.logits = d.as<float>(), s.rows = 1, s.vocab = 100, s.out_tokens = d.as<int32_t>();
  EXPECT_THROW(sample(s, nullptr), Error);  // no temperature / seeds / steps
}

}  // namespace
}  // namespace pagoda
