// Continuous batching, vLLM v1 style: each step the scheduler picks, under a token budget, one token for
// every decoding request, then chunks of prompts (or of recomputation after preemption) for running
// requests, then admits waiting requests first come, first served. Requests join and leave between any
// two steps.
//
// Blocks: a request holds blocks for its computed and scheduled tokens. When a running request needs a
// block and none is available, the most recently arrived running request is preempted (recompute): its
// blocks are freed, it returns to the waiting queue at its arrival position (ahead of every request that
// has not run yet) and later recomputes its prompt and generated tokens, usually from the prefix cache.
// Admission never preempts; a step that preempted admits nobody.
//
// Use: schedule() -> the model computes the chunks (K/V into the blocks, logits for the chunks that sample)
// -> update() with the sampled tokens -> finish_request() for requests that stopped (the engine decides).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "pagoda/core/ids.h"
#include "pagoda/kv_cache/kv_cache_manager.h"
#include "pagoda/scheduler/request.h"

namespace pagoda {

struct SchedulerConfig {
  int max_num_seqs = 256;              // running requests at most
  int max_num_batched_tokens = 8192;   // tokens computed per step at most
  bool enable_chunked_prefill = true;  // off: a prompt is computed in one step (it must fit the budget)
  int max_model_len = 2048;            // prompt + generated tokens at most
  int32_t num_blocks = 0;              // KV cache blocks
  int32_t block_size = 16;             // tokens per block
  bool enable_prefix_caching = true;
};

// Request `id` computes its tokens [start, start + num_tokens) this step; when `samples`, they end with its
// last known token and the logits of that token give its next token.
struct ScheduledChunk {
  RequestId id = 0;
  int64_t start = 0;
  int32_t num_tokens = 0;
  bool samples = false;
};

struct SchedulerOutput {
  std::vector<ScheduledChunk> chunks;  // decodes, then prefill chunks of running requests, then admissions
  int64_t num_tokens = 0;              // sum of chunks' num_tokens <= max_num_batched_tokens
  std::vector<RequestId> preempted;    // preempted during this step (none of them is in chunks)
  bool empty() const { return chunks.empty(); }
};

class Scheduler {
 public:
  // Throws a config pagoda::Error for a nonsensical config (non-positive sizes).
  explicit Scheduler(const SchedulerConfig& config);

  // Why a request with this prompt length and max_tokens can never run ("" when it can): an empty prompt,
  // a prompt with no room for a generated token under max_model_len, a prompt over the token budget without
  // chunked prefill, or more blocks than the whole KV cache.
  std::string check_request(int64_t num_prompt_tokens, int max_tokens) const;

  // Queues a request at the back of the waiting queue. Throws a runtime pagoda::Error with check_request()'s
  // reason; PAGODA_CHECK: the id is not in use.
  void add_request(RequestId id, std::vector<int32_t> prompt_ids, int max_tokens);

  SchedulerOutput schedule();

  // After the model ran `out`: advances each chunk's computed tokens, registers newly full blocks in the
  // prefix cache and appends sampled[i] to the request of each sampling chunk i (sampled.size() ==
  // out.chunks.size(); other entries are ignored). Chunks of requests finished since schedule() are skipped.
  void update(const SchedulerOutput& out, std::span<const int32_t> sampled);

  // Removes a waiting or running request and frees its blocks (finished, aborted). False when unknown.
  bool finish_request(RequestId id);

  const Request* request(RequestId id) const;
  int num_running() const { return int(running_.size()); }
  int num_waiting() const { return int(waiting_.size()); }
  bool has_unfinished() const { return !requests_.empty(); }
  int64_t num_preemptions() const { return num_preemptions_; }
  const KvCacheManager& kv_cache() const { return kv_; }
  const SchedulerConfig& config() const { return config_; }

  // PAGODA_CHECKs the KV cache's invariants and the queues': every request is in exactly one queue, both
  // in arrival order, waiting requests hold no blocks, running requests hold blocks for their computed
  // tokens, and nothing exceeds max_model_len or max_num_seqs.
  void check_invariants() const;

 private:
  void preempt(Request* r, SchedulerOutput& out, int64_t& budget);
  void insert_running(Request* r);
  void insert_waiting(Request* r);

  SchedulerConfig config_;
  KvCacheManager kv_;
  std::unordered_map<RequestId, std::unique_ptr<Request>> requests_;
  std::vector<Request*> running_;  // in arrival order
  std::deque<Request*> waiting_;   // in arrival order
  uint64_t next_arrival_ = 0;
  int64_t num_preemptions_ = 0;
};

}  // namespace pagoda
