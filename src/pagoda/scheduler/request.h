// A request as the scheduler sees it: token ids (prompt, then generated), how many of them have K/V in
// the cache, and where it is in its life. Sampling, detokenization and stop conditions belong to the engine.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pagoda/core/ids.h"

namespace pagoda {

enum class RequestStatus { kWaiting, kRunning };

struct Request {
  RequestId id = 0;
  uint64_t arrival = 0;           // order of add_request(): first come, first served
  std::vector<int32_t> tokens;    // prompt, then generated tokens
  int64_t num_prompt_tokens = 0;
  int max_tokens = 0;             // generated tokens at most (sizes the admission check)
  int64_t num_computed = 0;       // tokens whose K/V are in this request's blocks
  int64_t num_cached_tokens = -1; // prompt tokens found in the prefix cache at first admission (-1 before)
  int num_preemptions = 0;
  RequestStatus status = RequestStatus::kWaiting;

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_output_tokens() const { return num_tokens() - num_prompt_tokens; }
  // Tokens still to be computed before the next token can be sampled.
  int64_t num_pending() const { return num_tokens() - num_computed; }
  std::span<const int32_t> prompt() const { return std::span<const int32_t>(tokens).first(size_t(num_prompt_tokens)); }
  std::span<const int32_t> output() const { return std::span<const int32_t>(tokens).subspan(size_t(num_prompt_tokens)); }
};

}  // namespace pagoda
