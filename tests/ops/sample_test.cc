#include "pagoda/ops/sample.h"

#include <cmath>
#include <map>

#include <gtest/gtest.h>

#include "pagoda/core/error.h"
#include "pagoda/ops/softmax.h"

namespace pagoda::test {
namespace {

SamplingParams params(float temperature, uint64_t seed = 1) {
  SamplingParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

TEST(Sampler, GreedyIsArgmaxWithLowestIdOnTies) {
  Sampler s(params(0.0f));
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  EXPECT_EQ(s.sample(l, {}, {}).token, 1);
  EXPECT_EQ(argmax(l), 1);
}

// Sampled frequencies follow softmax(logits / T): 20000 draws, each within 5 standard deviations.
TEST(Sampler, TemperatureSamplingFollowsTheDistribution) {
  std::vector<float> l = {1.0f, 2.0f, 0.5f, -1.0f, 1.5f};
  for (float temp : {0.7f, 1.0f, 1.5f}) {
    Sampler s(params(temp, 42));
    std::vector<int> counts(l.size(), 0);
    const int n = 20000;
    for (int i = 0; i < n; ++i) counts[size_t(s.sample(l, {}, {}).token)]++;
    std::vector<float> scaled(l), p(l.size());
    for (auto& x : scaled) x /= temp;
    softmax(scaled.data(), p.data(), 1, int64_t(l.size()));
    for (size_t i = 0; i < l.size(); ++i) {
      const double sd = std::sqrt(n * p[i] * (1 - p[i]));
      EXPECT_NEAR(counts[i], n * p[i], 5 * sd + 1) << "temp " << temp << " token " << i;
    }
  }
}

TEST(Sampler, SeedReproducible) {
  std::vector<float> l(50);
  for (size_t i = 0; i < l.size(); ++i) l[i] = float(std::sin(double(i)));
  Sampler a(params(1.0f, 7)), b(params(1.0f, 7)), c(params(1.0f, 8));
  std::vector<int> ta, tb, tc;
  for (int i = 0; i < 50; ++i) {
    ta.push_back(a.sample(l, {}, {}).token);
    tb.push_back(b.sample(l, {}, {}).token);
    tc.push_back(c.sample(l, {}, {}).token);
  }
  EXPECT_EQ(ta, tb);
  EXPECT_NE(ta, tc);
}

TEST(Sampler, TopKTopPMinP) {
  std::vector<float> l = {3.0f, 2.9f, 0.0f, -2.0f, 1.0f};
  auto draws = [&](SamplingParams p) {
    Sampler s(p);
    std::map<int, int> seen;
    for (int i = 0; i < 3000; ++i) seen[s.sample(l, {}, {}).token]++;
    return seen;
  };
  SamplingParams p = params(1.0f, 3);
  p.top_k = 2;
  auto k2 = draws(p);
  EXPECT_EQ(k2.size(), 2u);
  EXPECT_TRUE(k2.count(0) && k2.count(1));
  p.top_k = 1;
  EXPECT_EQ(draws(p).size(), 1u);
  p = params(1.0f, 3);
  p.top_p = 0.5f;  // token 0 alone has p ~ 0.46 < 0.5, tokens 0+1 ~ 0.88
  auto tp = draws(p);
  EXPECT_EQ(tp.size(), 2u);
  p.top_p = 0.3f;
  EXPECT_EQ(draws(p).size(), 1u);
  p = params(1.0f, 3);
  p.min_p = 0.2f;  // keeps p >= 0.2 * p_max: tokens 0, 1 (token 4 has exp(-2) = 0.135 of p_max)
  auto mp = draws(p);
  EXPECT_EQ(mp.size(), 2u);
  p.min_p = 0.1f;
  EXPECT_EQ(draws(p).size(), 3u);
}

TEST(Sampler, Penalties) {
  std::vector<float> l = {2.0f, 1.9f, -0.5f};
  SamplingParams p = params(0.0f);
  p.repetition_penalty = 1.2f;  // 2.0 -> 1.667 for a token already seen in the prompt
  EXPECT_EQ(Sampler(p).sample(l, std::vector<int32_t>{0}, {}).token, 1);
  EXPECT_EQ(Sampler(p).sample(l, {}, {}).token, 0);
  p.repetition_penalty = 1.0f;
  p.presence_penalty = 0.2f;  // only output tokens count
  EXPECT_EQ(Sampler(p).sample(l, std::vector<int32_t>{0}, {}).token, 0);
  EXPECT_EQ(Sampler(p).sample(l, {}, std::vector<int32_t>{0}).token, 1);
  p.presence_penalty = 0.0f;
  p.frequency_penalty = 0.06f;  // one occurrence: 1.94 > 1.9; two: 1.88 < 1.9
  EXPECT_EQ(Sampler(p).sample(l, {}, std::vector<int32_t>{0}).token, 0);
  EXPECT_EQ(Sampler(p).sample(l, {}, std::vector<int32_t>{0, 0}).token, 1);
  // Negative logits are multiplied by the repetition penalty (pushed further down).
  std::vector<float> neg = {-1.0f, -1.1f};
  p = params(0.0f);
  p.repetition_penalty = 1.2f;
  EXPECT_EQ(Sampler(p).sample(neg, std::vector<int32_t>{0}, {}).token, 1);
}

// Logprobs come from the raw logits, whatever the penalties and temperature did.
TEST(Sampler, LogprobsOfRawLogits) {
  std::vector<float> l = {0.1f, 3.0f, 2.0f, -1.0f, 2.0f};
  SamplingParams p = params(0.0f);
  p.num_logprobs = 3;
  p.repetition_penalty = 2.0f;
  auto r = Sampler(p).sample(l, std::vector<int32_t>{1}, {});
  std::vector<float> lp(l.size());
  log_softmax(l.data(), lp.data(), 1, int64_t(l.size()));
  EXPECT_EQ(r.token, 2);  // 3.0 / 2 = 1.5 < 2.0
  EXPECT_EQ(r.logprob, lp[2]);
  ASSERT_EQ(r.top.size(), 3u);
  EXPECT_EQ(r.top[0].id, 1);
  EXPECT_EQ(r.top[0].logprob, lp[1]);
  EXPECT_EQ(r.top[1].id, 2);  // tie with 4: lower id first
  EXPECT_EQ(r.top[2].id, 4);
}

// `logprobs` without top logprobs still gives the sampled token's logprob, greedy or not, and is no
// plain-greedy row (the runner's argmax path computes no logprob).
TEST(Sampler, SampledLogprobWithoutTopLogprobs) {
  std::vector<float> l = {0.1f, 3.0f, 2.0f, -1.0f, 2.0f};
  std::vector<float> lp(l.size());
  log_softmax(l.data(), lp.data(), 1, int64_t(l.size()));
  for (float t : {0.0f, 0.8f}) {
    SamplingParams p = params(t);
    p.logprobs = true;
    EXPECT_FALSE(p.plain_greedy());
    auto r = Sampler(p).sample(l, {}, {});
    EXPECT_EQ(r.logprob, lp[size_t(r.token)]);
    EXPECT_TRUE(r.top.empty());
  }
}

TEST(Sampler, RejectsBadParameters) {
  auto bad = [](auto edit) {
    SamplingParams p;
    edit(p);
    EXPECT_THROW(Sampler{p}, Error);
  };
  bad([](SamplingParams& p) { p.temperature = -1; });
  bad([](SamplingParams& p) { p.top_p = 0; });
  bad([](SamplingParams& p) { p.top_p = 1.5f; });
  bad([](SamplingParams& p) { p.top_k = -2; });
  bad([](SamplingParams& p) { p.min_p = 2; });
  bad([](SamplingParams& p) { p.repetition_penalty = 0; });
  bad([](SamplingParams& p) { p.presence_penalty = 3; });
  bad([](SamplingParams& p) { p.frequency_penalty = -3; });
  bad([](SamplingParams& p) { p.num_logprobs = -1; });
}

}  // namespace
}  // namespace pagoda::test
