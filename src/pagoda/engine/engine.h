// The serving engine: requests in, streamed outputs out. Each step() runs
//   drain the inbox (new requests, aborts) -> schedule -> plan the forward batch -> forward -> sample
//   -> detokenize, check stops -> outputs,
// with continuous batching, chunked prefill, prefix caching and preemption by recomputation (see
// scheduler/scheduler.h and kv_cache/kv_cache_manager.h).
//
// Threads: add_request(), abort(), has_unfinished(), wait_for_work(), wake() and metrics() may be called
// from any thread; step() and generate() from one thread at a time (the loop). A server runs
//   while (engine.wait_for_work()) for (auto& out : engine.step()) deliver(out);
// and calls engine.wake() to end the loop.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pagoda/config/engine_args.h"
#include "pagoda/core/ids.h"
#include "pagoda/engine/request.h"
#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/model/model_runner.h"
#include "pagoda/scheduler/scheduler.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

struct EngineOptions {
  int max_num_seqs = 256;
  int max_num_batched_tokens = 8192;
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = true;
  int max_model_len = 0;  // 0: the model's max_position_embeddings
};

// The scheduler and cache options of `args`; max_model_len as resolved at engine start. An unset
// --max-num-batched-tokens is 8192, and at least max_model_len without chunked prefill.
EngineOptions engine_options_from_args(const EngineArgs& args, int max_model_len);

// Host time of one engine step that ran the model (recorded while a timeline is set): drain + schedule, the
// batch build, the runner's forward call (its GPU wait included), and sampling + scheduler update + outputs.
struct EngineStepTiming {
  int tokens = 0, seqs = 0, decodes = 0;
  double schedule_s = 0, build_s = 0, forward_s = 0, post_s = 0;
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

// What one Engine::generate() call did: tokens of its requests, and the engine's time over the call.
struct GenerateStats {
  int64_t prompt_tokens = 0;
  int64_t generated_tokens = 0;
  double prefill_seconds = 0;  // model time of steps that processed prompt tokens
  double decode_seconds = 0;   // model time of decode-only steps
  double total_seconds = 0;    // wall time of the call
  int64_t steps = 0;           // steps that ran the model
};

class Engine {
 public:
  // The runner owns the KV cache (its num_blocks blocks of block_size tokens) and must outlive the engine.
  // The tokenizer is optional: without one, prompts are ids and outputs carry no text. Throws a config
  // pagoda::Error for bad options.
  Engine(ModelRunner& runner, std::optional<Tokenizer> tokenizer, const EngineOptions& options);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Queues a request; it joins the batch at the next step(). Throws a runtime pagoda::Error naming the
  // problem for a request that can never run (empty prompt, token ids outside the vocabulary, a prompt
  // that leaves no room under max_model_len, more blocks than the whole KV cache, bad sampling values),
  // leaving the engine as it was.
  RequestId add_request(std::vector<int32_t> prompt_ids, const RequestParams& params);
  // The prompt as text, encoded with the tokenizer (add_special_tokens: BOS as the tokenizer says).
  RequestId add_request(std::string_view prompt, const RequestParams& params, bool add_special_tokens = true);

  // Ends a request (queued, waiting or running) at the next step(), which returns its final output with
  // finish_reason "abort" and frees its blocks. Unknown or finished ids are ignored.
  void abort(RequestId id);

  // One engine step; returns an output for every request that produced a token, finished or was aborted.
  std::vector<RequestOutput> step();

  // True from add_request() until step() has returned the request's final output.
  bool has_unfinished() const { return num_unfinished_.load() > 0; }
  // Blocks until there is a request to work on (true). Returns false instead when wake() was called since
  // the last return (consuming that wake), or, with a timeout, when it expires with nothing to do.
  bool wait_for_work();
  bool wait_for_work(std::chrono::milliseconds timeout);
  void wake();

  // Runs `requests` to completion through step(), calling on_output(index, output) for each of their
  // outputs; returns their results in order, and what the call did in *stats when given. Validates every
  // request before adding any (throwing as add_request() does). Must not run while another thread loops on
  // step(); outputs of other requests in the engine are dropped.
  std::vector<GenerateResult> generate(
      const std::vector<GenerateRequest>& requests,
      const std::function<void(size_t index, const RequestOutput& output)>& on_output = {},
      GenerateStats* stats = nullptr);

  EngineMetrics metrics() const;
  // Appends an EngineStepTiming for every step that runs the model to *timeline (nullptr: stop); step thread.
  void set_step_timeline(std::vector<EngineStepTiming>* timeline) { timeline_ = timeline; }
  const std::optional<Tokenizer>& tokenizer() const { return tokenizer_; }
  int max_model_len() const { return scheduler_.config().max_model_len; }
  const Scheduler& scheduler() const { return scheduler_; }  // step thread only

 private:
  using Clock = std::chrono::steady_clock;
  struct Live;
  struct Command {
    bool abort = false;
    RequestId id = 0;
    std::vector<int32_t> prompt_ids;
    RequestParams params;
    Clock::time_point arrival;
  };

  // Why the request can never run ("" when it can).
  std::string validate(std::span<const int32_t> prompt_ids, const RequestParams& params) const;
  void drain_inbox(std::vector<RequestOutput>& outs);
  void process_token(Live& live, const Request& req, const SampleResult& sample, Clock::time_point now,
                     RequestOutput& out);
  void finish(Live& live, FinishReason reason, Clock::time_point now, RequestOutput& out);

  ModelRunner& runner_;
  std::optional<Tokenizer> tokenizer_;
  Scheduler scheduler_;
  std::vector<int32_t> eos_ids_;

  // Inbox, shared with other threads.
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Command> inbox_;
  int64_t inbox_adds_ = 0;  // adds in inbox_
  int wakes_ = 0;
  std::atomic<RequestId> next_id_{1};
  std::atomic<int64_t> num_unfinished_{0};

  // Step thread only.
  std::unordered_map<RequestId, std::unique_ptr<Live>> live_;
  EngineMetrics counters_;
  std::vector<EngineStepTiming>* timeline_ = nullptr;

  // The snapshot metrics() returns, refreshed at the end of each step.
  mutable std::mutex metrics_mu_;
  EngineMetrics snapshot_;
};

}  // namespace pagoda
