// What goes into the engine with a request and what comes out of each step: per-request parameters,
// streamed outputs (new token ids, text delta, logprobs, finish), per-request latencies and engine metrics.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/kv_cache/kv_cache_manager.h"
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

// A snapshot of the engine, for logs and Prometheus: gauges, then counters since the engine started.
struct EngineMetrics {
  int num_running = 0;
  int num_waiting = 0;              // including requests added but not yet seen by step()
  double kv_cache_usage = 0;        // fraction of KV blocks held by requests
  int32_t num_kv_blocks = 0;
  int64_t prefix_cache_queries = 0;  // tokens looked up in the prefix cache on admission
  int64_t prefix_cache_hits = 0;     // of those, tokens found
  int64_t prompt_tokens = 0;         // prompts of requests that produced their first token
  int64_t generation_tokens = 0;
  int64_t computed_tokens = 0;       // tokens run through the model (recomputation included, cache hits not)
  int64_t num_preemptions = 0;
  int64_t num_steps = 0;             // steps that ran the model
  int64_t finished_stop = 0, finished_length = 0, finished_abort = 0;
  double prefill_seconds = 0;        // model time of steps with prompt (or recomputed) tokens
  double decode_seconds = 0;         // model time of decode-only steps
  double prefix_cache_hit_rate() const {
    return prefix_cache_queries > 0 ? double(prefix_cache_hits) / double(prefix_cache_queries) : 0.0;
  }
};

}  // namespace pagoda
