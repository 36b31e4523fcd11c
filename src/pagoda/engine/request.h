// The request side of the engine: what goes in with a request (prompt ids, RequestParams with the
// sampling parameters) and what comes out (a RequestOutput per step, streamed; a GenerateResult per request
// of an offline batch), with per-request latencies. Engine-wide types (options, metrics) are in engine.h.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/core/ids.h"
#include "pagoda/ops/sample.h"

namespace pagoda {

struct RequestParams {
  SamplingParams sampling;              // sampling.num_logprobs: top logprobs per generated token
  int max_tokens = 16;                  // generated tokens at most (>= 0)
  std::vector<std::string> stop;        // stop strings: generation stops at the first, which is not output
  std::vector<int32_t> stop_token_ids;  // stop tokens, in addition to the model's EOS (ignore_eos aside)
  bool ignore_eos = false;
  bool skip_special_tokens = true;      // for the text
  bool detokenize = true;               // text deltas (when the engine has a tokenizer)
};

enum class FinishReason { kStop, kLength, kAbort };
inline const char* finish_reason_str(FinishReason r) {
  switch (r) {
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
  }
  return "";
}

// Latencies of one request, in seconds, measured on the steady clock from its add_request().
struct RequestMetrics {
  double queue_s = 0;                          // until first scheduled
  double ttft_s = 0;                           // until the first generated token (0 when none)
  std::vector<double> inter_token_latencies_s;  // between consecutive generated tokens
  double e2e_s = 0;                            // until finished
  int num_preemptions = 0;
};

// One step's news for one request. The text deltas of a request concatenate to its text; text that might
// start a stop string is held back until it cannot (and dropped when it does).
struct RequestOutput {
  RequestId id = 0;
  std::vector<int32_t> new_token_ids;
  std::string text_delta;               // "" without a tokenizer or with detokenize off
  std::vector<SampleResult> logprobs;   // one per new token: its logprob and the top sampling.num_logprobs
  bool finished = false;
  std::optional<FinishReason> finish_reason;  // set when finished
  std::optional<std::string> stop_string;     // the stop string that finished it
  std::optional<int32_t> stop_token_id;       // the EOS or stop token that finished it
  // Usage so far.
  int64_t num_prompt_tokens = 0;
  int64_t num_generated_tokens = 0;
  int64_t num_cached_tokens = 0;        // prompt tokens served by the prefix cache
  std::optional<RequestMetrics> metrics;  // on the finished output
};

// A request of an offline batch (Engine::generate()), and what became of it.
struct GenerateRequest {
  std::vector<int32_t> prompt_ids;
  RequestParams params;
};
struct GenerateResult {
  RequestId id = 0;
  std::vector<int32_t> token_ids;
  std::vector<SampleResult> logprobs;  // per generated token
  std::string text;
  FinishReason finish_reason = FinishReason::kLength;
  int64_t num_prompt_tokens = 0;
  int64_t num_cached_tokens = 0;
  RequestMetrics metrics;
};

}  // namespace pagoda
