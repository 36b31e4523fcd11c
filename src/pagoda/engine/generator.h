// Offline generation of a batch of requests to completion: a thin wrapper over Engine::generate() that
// keeps the interface `pagoda generate` uses (a token callback and run statistics).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/engine/engine.h"
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

// Called for each step's news of a request: its new token (-1 when none) and the newly output text.
using TokenCallback = std::function<void(size_t request, int32_t token, const std::string& text_delta)>;

using GeneratorOptions = EngineOptions;

class Generator {
 public:
  // The runner owns the KV cache of `num_blocks` blocks; the tokenizer is optional (ids only without one).
  Generator(ModelRunner& runner, std::optional<Tokenizer> tokenizer, GeneratorOptions options);

  // Runs all requests to completion. Throws a runtime pagoda::Error when a request can never run (see
  // Engine::add_request), before any runs.
  std::vector<GenerationOutput> generate(const std::vector<GenerationRequest>& requests, const TokenCallback& on_token,
                                         GenerationStats* stats);

 private:
  Engine engine_;
};

}  // namespace pagoda
