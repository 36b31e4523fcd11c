// Token selection from fp32 logits [rows, vocab] on the GPU, one thread block per row (vocab up to 2^31).
//
// argmax: the index of the largest logit; ties go to the lowest index and a NaN counts as the largest, as
// torch.argmax has it.
//
// sample: per row, in vLLM's order: temperature (x = logit / T; T < 1e-5 means greedy = argmax), min-p
// (keep tokens whose probability is >= min_p * the largest probability), top-k (keep tokens whose x is >=
// the k-th largest x among those kept; ties at the k-th value are all kept), top-p (keep token j when the
// probability mass, renormalised over the tokens kept so far, of tokens with x strictly greater than x_j is
// < top_p: the smallest top set reaching top_p, ties kept), then a draw from softmax(x) over what is kept,
// by the Gumbel-max method with Philox noise keyed by the row's (seed, step) (philox.h), so the same
// (seed, step, logits) gives the same token in any batch. Probability masses are summed in 2^-32 fixed
// point, so the result does not depend on the order of the sums. top_k == 1 is greedy.
// Tokens more than 104 nats below the maximum x (probability ratio < e^-104, fp32 exp underflow) are never
// sampled; NaN logits are never sampled. A row whose maximum logit is not finite falls back to argmax.
//
// top_logprobs: log-softmax of the unmodified logits: the k (<= 20) largest, descending (ties: lower index
// first), and optionally the log-probability of given tokens (e.g. the sampled ones).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pagoda {

struct ArgmaxParams {
  const float* logits = nullptr;  // [rows, vocab], row stride ld elements
  int64_t ld = 0;                 // 0 means vocab
  int rows = 0, vocab = 0;
  int32_t* out_tokens = nullptr;  // [rows]
};
void argmax(const ArgmaxParams& p, cudaStream_t stream);

inline constexpr float kGreedyTemperature = 1e-5f;  // temperature below this samples greedily (vLLM's eps)

struct SampleParams {
  const float* logits = nullptr;  // [rows, vocab], row stride ld elements; not modified
  int64_t ld = 0;                 // 0 means vocab
  int rows = 0, vocab = 0;
  // Per-row device arrays [rows]. A null optional array switches that filter off for every row.
  const float* temperature = nullptr;  // required; < kGreedyTemperature: greedy
  const int32_t* top_k = nullptr;      // <= 0 or >= vocab: off
  const float* top_p = nullptr;        // >= 1: off; in (0, 1)
  const float* min_p = nullptr;        // <= 0: off; in [0, 1]
  const uint64_t* seeds = nullptr;     // required
  const uint64_t* steps = nullptr;     // required: the request's output position (or any per-step counter)
  int32_t* out_tokens = nullptr;       // [rows]
};
void sample(const SampleParams& p, cudaStream_t stream);

inline constexpr int kMaxTopLogprobs = 20;

struct TopLogprobsParams {
  const float* logits = nullptr;  // [rows, vocab], row stride ld elements
  int64_t ld = 0;                 // 0 means vocab
  int rows = 0, vocab = 0;
  int k = 0;                      // 0 .. min(kMaxTopLogprobs, vocab)
  float* out_logprobs = nullptr;  // [rows, k], descending
  int32_t* out_ids = nullptr;     // [rows, k]
  const int32_t* tokens = nullptr;     // [rows] or nullptr: also the log-probability of tokens[r] ...
  float* out_token_logprobs = nullptr;  // ... written here [rows] (tokens outside the vocab give NaN)
};
void top_logprobs(const TopLogprobsParams& p, cudaStream_t stream);

}  // namespace pagoda
