// Offline generation over a model runner: a batch of requests is prefilled in chunks under a token
// budget and decoded together, one token per sequence per step, until each request stops (max tokens,
// EOS, a stop token or a stop string). Used by `pagoda generate`; the serving engine's scheduler
// generalises it (continuous arrival, preemption, prefix caching).
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/model/model_runner.h"
#include "pagoda/ops/sample.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

struct GenerationRequest {
  std::vector<int32_t> prompt_ids;
  SamplingParams sampling;
  int max_tokens = 16;
  std::vector<std::string> stop;        // stop strings (not included in the output)
  std::vector<int32_t> stop_token_ids;  // in addition to the model's EOS ids
  bool ignore_eos = false;
};

enum class FinishReason { kLength, kStop };
inline const char* finish_reason_str(FinishReason r) { return r == FinishReason::kLength ? "length" : "stop"; }

struct GenerationOutput {
  std::vector<int32_t> token_ids;
  std::vector<SampleResult> samples;  // per generated token (logprobs when asked)
  std::string text;
  FinishReason finish_reason = FinishReason::kLength;
};

struct GenerationStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;  // steps that processed prompt tokens
  double decode_seconds = 0;   // decode-only steps
  double total_seconds = 0;
  int64_t steps = 0;
};

// Called for each generated token with the request index and the newly completed text.
using TokenCallback = std::function<void(size_t request, int32_t token, const std::string& text_delta)>;

struct GeneratorOptions {
  int max_num_batched_tokens = 8192;  // token budget per step
  int max_model_len = 0;              // 0: the model's max_position_embeddings
};

class Generator {
 public:
  // The runner owns the KV cache of `num_blocks` blocks; the tokenizer is optional (ids only without one).
  Generator(ModelRunner& runner, std::optional<Tokenizer> tokenizer, GeneratorOptions options);

  // Runs all requests to completion. Throws a runtime pagoda::Error when a request cannot fit the KV cache
  // or exceeds max_model_len.
  std::vector<GenerationOutput> generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token,
                                         GenerationStats* stats);

 private:
  ModelRunner& runner_;
  std::optional<Tokenizer> tokenizer_;
  GeneratorOptions options_;
};

}  // namespace pagoda
