#include "pagoda/ops/sample.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

#include "pagoda/core/error.h"
#include "pagoda/ops/softmax.h"

namespace pagoda {

int32_t argmax(std::span<const float> x) {
  int32_t best = 0;
  for (size_t i = 1; i < x.size(); ++i)
    if (x[i] > x[size_t(best)]) best = int32_t(i);
  return best;
}

Sampler::Sampler(const SamplingParams& p) : params_(p), rng_(p.seed) {
  if (!(p.temperature >= 0.0f) || !std::isfinite(p.temperature))
    throw_config_error("temperature must be >= 0, got ", p.temperature);
  if (p.top_k < -1) throw_config_error("top_k must be -1 (disabled) or >= 0, got ", p.top_k);
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) throw_config_error("top_p must be in (0, 1], got ", p.top_p);
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) throw_config_error("min_p must be in [0, 1], got ", p.min_p);
  if (!(p.repetition_penalty > 0.0f) || !std::isfinite(p.repetition_penalty))
    throw_config_error("repetition_penalty must be > 0, got ", p.repetition_penalty);
  if (!(p.presence_penalty >= -2.0f && p.presence_penalty <= 2.0f))
    throw_config_error("presence_penalty must be in [-2, 2], got ", p.presence_penalty);
  if (!(p.frequency_penalty >= -2.0f && p.frequency_penalty <= 2.0f))
    throw_config_error("frequency_penalty must be in [-2, 2], got ", p.frequency_penalty);
  if (p.num_logprobs < 0) throw_config_error("logprobs must be >= 0, got ", p.num_logprobs);
}

SampleResult Sampler::sample(std::span<const float> logits, std::span<const int32_t> prompt_ids,
                             std::span<const int32_t> output_ids) {
  const int64_t vocab = int64_t(logits.size());
  PAGODA_CHECK(vocab > 0, "sample: empty logits");
  SampleResult res;

  // Raw logprobs (for the result only).
  std::vector<float> raw_logprobs;
  if (params_.wants_logprobs()) {
    raw_logprobs.resize(size_t(vocab));
    log_softmax(logits.data(), raw_logprobs.data(), 1, vocab);
  }

  // Penalties.
  work_.assign(logits.begin(), logits.end());
  const SamplingParams& p = params_;
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int> out_count;
    for (int32_t t : output_ids) ++out_count[t];
    if (p.repetition_penalty != 1.0f) {
      std::vector<uint8_t> seen(size_t(vocab), 0);
      for (int32_t t : prompt_ids) if (t >= 0 && t < vocab) seen[size_t(t)] = 1;
      for (int32_t t : output_ids) if (t >= 0 && t < vocab) seen[size_t(t)] = 1;
      for (int64_t i = 0; i < vocab; ++i)
        if (seen[size_t(i)]) work_[size_t(i)] = work_[size_t(i)] > 0 ? work_[size_t(i)] / p.repetition_penalty
                                                                     : work_[size_t(i)] * p.repetition_penalty;
    }
    for (const auto& [t, c] : out_count) {
      if (t < 0 || t >= vocab) continue;
      work_[size_t(t)] -= p.frequency_penalty * float(c) + p.presence_penalty;
    }
  }

  if (p.temperature == 0.0f) {
    res.token = argmax(work_);
  } else {
    for (float& x : work_) x /= p.temperature;
    std::vector<float> probs(static_cast<size_t>(vocab));
    softmax(work_.data(), probs.data(), 1, vocab);
    // Candidates sorted by probability (descending, ties by id) for min-p / top-k / top-p.
    order_.resize(size_t(vocab));
    std::iota(order_.begin(), order_.end(), 0);
    std::stable_sort(order_.begin(), order_.end(), [&](int32_t a, int32_t b) { return probs[size_t(a)] > probs[size_t(b)]; });
    size_t keep = size_t(vocab);
    if (p.min_p > 0.0f) {
      const float threshold = p.min_p * probs[size_t(order_[0])];
      size_t n = 0;
      while (n < keep && probs[size_t(order_[n])] >= threshold) ++n;
      keep = std::max<size_t>(1, n);
    }
    if (p.top_k > 0) keep = std::min(keep, size_t(p.top_k));
    if (p.top_p < 1.0f) {
      double total = 0;
      for (size_t i = 0; i < keep; ++i) total += probs[size_t(order_[i])];
      double cum = 0;
      size_t n = 0;
      while (n < keep) {
        cum += probs[size_t(order_[n])] / total;
        ++n;
        if (cum >= p.top_p) break;
      }
      keep = std::max<size_t>(1, n);
    }
    double total = 0;
    for (size_t i = 0; i < keep; ++i) total += probs[size_t(order_[i])];
    const double u = std::uniform_real_distribution<double>(0.0, 1.0)(rng_) * total;
    double cum = 0;
    res.token = order_[keep - 1];
    for (size_t i = 0; i < keep; ++i) {
      cum += probs[size_t(order_[i])];
      if (u < cum) {
        res.token = order_[i];
        break;
      }
    }
  }

  if (p.wants_logprobs()) res.logprob = raw_logprobs[size_t(res.token)];
  if (p.num_logprobs > 0) {
    std::vector<int32_t> ids(static_cast<size_t>(vocab));
    std::iota(ids.begin(), ids.end(), 0);
    const size_t k = std::min<size_t>(size_t(p.num_logprobs), size_t(vocab));
    std::partial_sort(ids.begin(), ids.begin() + long(k), ids.end(), [&](int32_t a, int32_t b) {
      return raw_logprobs[size_t(a)] > raw_logprobs[size_t(b)] ||
             (raw_logprobs[size_t(a)] == raw_logprobs[size_t(b)] && a < b);
    });
    for (size_t i = 0; i < k; ++i) res.top.push_back({ids[i], raw_logprobs[size_t(ids[i])]});
  }
  return res;
}

}  // namespace pagoda
