// Token sampling from one row of logits: greedy, temperature, top-k, top-p, min-p, repetition / presence /
// frequency penalties, a seeded RNG per sampler, and top-K logprobs of the unmodified distribution.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace pagoda {

struct SamplingParams {
  float temperature = 1.0f;         // 0 = greedy (argmax of the penalised logits; ties -> lowest id)
  int top_k = 0;                    // keep the k most likely tokens; 0 or -1 = all
  float top_p = 1.0f;               // keep the smallest most-likely set with probability >= top_p; (0, 1]
  float min_p = 0.0f;               // drop tokens with p < min_p * p_max; [0, 1]
  float repetition_penalty = 1.0f;  // > 0; tokens of prompt or output: l > 0 ? l / r : l * r
  float presence_penalty = 0.0f;    // [-2, 2]; l -= presence for tokens of the output
  float frequency_penalty = 0.0f;   // [-2, 2]; l -= frequency * count in the output
  uint64_t seed = 0;
  int num_logprobs = 0;  // how many top logprobs to return (of the raw logits, before any penalty)
  // Compute the sampled token's logprob even with num_logprobs == 0 (OpenAI's `logprobs: true` without
  // `top_logprobs`, completions' `logprobs: 0`); num_logprobs > 0 implies it.
  bool logprobs = false;

  bool wants_logprobs() const { return logprobs || num_logprobs > 0; }
  // Greedy with no penalty and no logprobs: the token is argmax(logits) alone (a runner may compute it where
  // the logits are).
  bool plain_greedy() const {
    return temperature == 0.0f && repetition_penalty == 1.0f && presence_penalty == 0.0f && frequency_penalty == 0.0f &&
           !wants_logprobs();
  }
};

struct TokenLogprob {
  int32_t id;
  float logprob;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0;              // of `token` under the raw logits; 0 unless params.wants_logprobs()
  std::vector<TokenLogprob> top;  // num_logprobs entries, most likely first (ties -> lowest id)
};

class Sampler {
 public:
  // Throws a config pagoda::Error naming the field for an out-of-range parameter.
  explicit Sampler(const SamplingParams& params);

  // Applies, in order: repetition, frequency and presence penalties; temperature; min-p; top-k; top-p;
  // then draws from what is left (vLLM's order). The RNG advances only for non-greedy draws.
  SampleResult sample(std::span<const float> logits, std::span<const int32_t> prompt_ids,
                      std::span<const int32_t> output_ids);

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  std::mt19937_64 rng_;
  std::vector<float> work_;
  std::vector<int32_t> order_;
};

// Index of the largest value (the first one on ties).
int32_t argmax(std::span<const float> x);

}  // namespace pagoda
