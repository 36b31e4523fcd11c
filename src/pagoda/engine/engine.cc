#include "pagoda/engine/engine.h"

#include <algorithm>
#include <climits>

#include "pagoda/core/error.h"
#include "pagoda/engine/stop_strings.h"

namespace pagoda {
namespace {

double seconds(std::chrono::steady_clock::duration d) { return std::chrono::duration<double>(d).count(); }

SchedulerConfig scheduler_config(const ModelRunner& runner, const EngineOptions& o) {
  const int64_t num_blocks = runner.cache_options().num_blocks;
  if (num_blocks > INT32_MAX) throw_config_error("the KV cache has ", num_blocks, " blocks, more than the scheduler's limit of ", INT32_MAX);
  SchedulerConfig c;
  c.max_num_seqs = o.max_num_seqs;
  c.max_num_batched_tokens = o.max_num_batched_tokens;
  c.enable_chunked_prefill = o.enable_chunked_prefill;
  c.enable_prefix_caching = o.enable_prefix_caching;
  c.max_model_len = o.max_model_len > 0 ? o.max_model_len : runner.config().max_position_embeddings;
  c.num_blocks = int32_t(num_blocks);
  c.block_size = runner.cache_options().block_size;
  return c;
}

}  // namespace

EngineOptions engine_options_from_args(const EngineArgs& args, int max_model_len) {
  EngineOptions o;
  o.max_num_seqs = args.scheduler.max_num_seqs;
  o.enable_chunked_prefill = args.scheduler.enable_chunked_prefill;
  o.enable_prefix_caching = args.cache.enable_prefix_caching;
  o.max_model_len = max_model_len;
  o.max_num_batched_tokens =
      args.scheduler.max_num_batched_tokens.value_or(o.enable_chunked_prefill ? 8192 : std::max(8192, max_model_len));
  return o;
}

// Engine-side state of a request: sampling, text and timing (the scheduler keeps its tokens).
struct Engine::Live {
  RequestParams params;
  Sampler sampler;
  std::optional<IncrementalDetokenizer> detok;
  StopStringFilter stop;
  int64_t num_prompt_tokens = 0;
  int64_t num_generated = 0;
  Clock::time_point arrival, last_token;
  bool scheduled = false;
  RequestMetrics metrics;
  explicit Live(const RequestParams& p) : params(p), sampler(p.sampling), stop(p.stop) {}
};

Engine::Engine(ModelRunner& runner, std::optional<Tokenizer> tokenizer, const EngineOptions& options)
    : runner_(runner), tokenizer_(std::move(tokenizer)), scheduler_(scheduler_config(runner, options)),
      eos_ids_(runner.config().eos_token_ids) {}

Engine::~Engine() = default;

std::string Engine::validate(std::span<const int32_t> prompt_ids, const RequestParams& params) const {
  std::string why = scheduler_.check_request(int64_t(prompt_ids.size()), params.max_tokens);
  if (!why.empty()) return why;
  const int vocab = runner_.config().vocab_size;
  for (int32_t id : prompt_ids)
    if (id < 0 || id >= vocab) return str_cat("prompt token id ", id, " is outside the vocabulary [0, ", vocab, ")");
  if (!params.stop.empty() && !(tokenizer_ && params.detokenize)) return "stop strings need a tokenizer and detokenization";
  Sampler check(params.sampling);  // throws a config error naming a bad sampling value
  return "";
}

RequestId Engine::add_request(std::vector<int32_t> prompt_ids, const RequestParams& params) {
  std::string why = validate(prompt_ids, params);
  if (!why.empty()) throw_runtime_error(why);
  const RequestId id = next_id_.fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(Command{false, id, std::move(prompt_ids), params, Clock::now()});
    ++inbox_adds_;
    num_unfinished_.fetch_add(1);
  }
  cv_.notify_all();
  return id;
}

RequestId Engine::add_request(std::string_view prompt, const RequestParams& params, bool add_special_tokens) {
  if (!tokenizer_) throw_runtime_error("a text prompt needs a tokenizer; this model has none (give token ids)");
  std::vector<int> ids = tokenizer_->encode(prompt, add_special_tokens);
  return add_request(std::vector<int32_t>(ids.begin(), ids.end()), params);
}

void Engine::abort(RequestId id) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    inbox_.push_back(Command{true, id, {}, {}, Clock::now()});
  }
  cv_.notify_all();
}

bool Engine::wait_for_work() {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return wakes_ > 0 || num_unfinished_.load() > 0; });
  if (wakes_ > 0) {
    --wakes_;
    return false;
  }
  return true;
}

bool Engine::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_for(lock, timeout, [&] { return wakes_ > 0 || num_unfinished_.load() > 0; });
  if (wakes_ > 0) {
    --wakes_;
    return false;
  }
  return num_unfinished_.load() > 0;
}

void Engine::wake() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++wakes_;
  }
  cv_.notify_all();
}

void Engine::finish(Live& live, FinishReason reason, Clock::time_point now, RequestOutput& out) {
  out.finished = true;
  out.finish_reason = reason;
  live.metrics.e2e_s = seconds(now - live.arrival);
  out.metrics = live.metrics;
  switch (reason) {
    case FinishReason::kStop: ++counters_.finished_stop; break;
    case FinishReason::kLength: ++counters_.finished_length; break;
    case FinishReason::kAbort: ++counters_.finished_abort; break;
  }
  num_unfinished_.fetch_sub(1);
}

void Engine::drain_inbox(std::vector<RequestOutput>& outs) {
  std::vector<Command> cmds;
  {
    std::lock_guard<std::mutex> lock(mu_);
    cmds.swap(inbox_);
    inbox_adds_ = 0;
  }
  const Clock::time_point now = Clock::now();
  for (Command& c : cmds) {
    if (c.abort) {
      auto it = live_.find(c.id);
      if (it == live_.end()) continue;
      Live& live = *it->second;
      const Request* req = scheduler_.request(c.id);
      RequestOutput out;
      out.id = c.id;
      out.num_prompt_tokens = live.num_prompt_tokens;
      out.num_generated_tokens = live.num_generated;
      out.num_cached_tokens = req ? std::max<int64_t>(0, req->num_cached_tokens) : 0;
      if (req) live.metrics.num_preemptions = req->num_preemptions;
      scheduler_.finish_request(c.id);
      finish(live, FinishReason::kAbort, now, out);
      live_.erase(it);
      outs.push_back(std::move(out));
      continue;
    }
    auto live = std::make_unique<Live>(c.params);
    live->arrival = c.arrival;
    live->num_prompt_tokens = int64_t(c.prompt_ids.size());
    if (tokenizer_ && c.params.detokenize)
      live->detok.emplace(*tokenizer_, c.params.skip_special_tokens,
                          std::span<const int>(c.prompt_ids.data(), c.prompt_ids.size()));
    scheduler_.add_request(c.id, std::move(c.prompt_ids), c.params.max_tokens);
    if (c.params.max_tokens == 0) {  // nothing to generate
      RequestOutput out;
      out.id = c.id;
      out.num_prompt_tokens = live->num_prompt_tokens;
      scheduler_.finish_request(c.id);
      finish(*live, FinishReason::kLength, now, out);
      outs.push_back(std::move(out));
      continue;
    }
    live_.emplace(c.id, std::move(live));
  }
}

void Engine::process_token(Live& live, const Request& req, const SampleResult& sample, Clock::time_point now,
                           RequestOutput& out) {
  const int32_t tok = sample.token;
  out.new_token_ids.push_back(tok);
  out.logprobs.push_back(sample);
  ++live.num_generated;
  ++counters_.generation_tokens;
  if (live.num_generated == 1) {
    live.metrics.ttft_s = seconds(now - live.arrival);
    counters_.prompt_tokens += live.num_prompt_tokens;
  } else {
    live.metrics.inter_token_latencies_s.push_back(seconds(now - live.last_token));
  }
  live.last_token = now;

  const auto& stops = live.params.stop_token_ids;
  const bool stop_token = (!live.params.ignore_eos && std::find(eos_ids_.begin(), eos_ids_.end(), tok) != eos_ids_.end()) ||
                          std::find(stops.begin(), stops.end(), tok) != stops.end();
  // A stop token's own text is not output (as in vLLM).
  StopStringFilter::Result text = live.stop.add(live.detok && !stop_token ? live.detok->add(tok) : std::string());
  out.text_delta += text.emit;
  std::optional<FinishReason> reason;
  if (text.match) {
    reason = FinishReason::kStop;
    out.stop_string = text.match;
  } else if (stop_token) {
    reason = FinishReason::kStop;
    out.stop_token_id = tok;
  } else if (live.num_generated >= live.params.max_tokens || req.num_tokens() >= scheduler_.config().max_model_len) {
    reason = FinishReason::kLength;
  }
  if (!reason) return;
  if (!text.match && live.detok) {  // the text held back by the detokenizer, which may still hold a stop string
    StopStringFilter::Result rest = live.stop.add(live.detok->finish());
    out.text_delta += rest.emit;
    if (rest.match) {
      reason = FinishReason::kStop;
      out.stop_string = rest.match;
      out.stop_token_id.reset();
    }
  }
  out.text_delta += live.stop.flush();
  live.metrics.num_preemptions = req.num_preemptions;
  finish(live, *reason, now, out);
}

std::vector<RequestOutput> Engine::step() {
  std::vector<RequestOutput> outs;
  const Clock::time_point t_start = Clock::now();
  drain_inbox(outs);
  const SchedulerOutput so = scheduler_.schedule();
  if (!so.empty()) {
    const Clock::time_point t_scheduled = Clock::now();
    // Plan: the batch of chunks, each sequence's block table padded to the longest.
    ForwardBatch b;
    b.query_start_loc.push_back(0);
    size_t max_blocks = 0;
    for (const ScheduledChunk& c : so.chunks) max_blocks = std::max(max_blocks, scheduler_.kv_cache().block_table(c.id).size());
    b.max_blocks_per_seq = int(max_blocks);
    bool has_prefill = false;
    for (const ScheduledChunk& c : so.chunks) {
      const Request& r = *scheduler_.request(c.id);
      b.token_ids.insert(b.token_ids.end(), r.tokens.begin() + c.start, r.tokens.begin() + c.start + c.num_tokens);
      b.query_start_loc.push_back(int32_t(b.token_ids.size()));
      b.seq_lens.push_back(int32_t(c.start + c.num_tokens));
      std::span<const BlockId> table = scheduler_.kv_cache().block_table(c.id);
      b.block_tables.insert(b.block_tables.end(), table.begin(), table.end());
      b.block_tables.resize(b.block_tables.size() + (max_blocks - table.size()), 0);
      if (c.samples) b.logits_indices.push_back(int32_t(b.token_ids.size()) - 1);
      has_prefill = has_prefill || c.num_tokens > 1 || c.start < r.num_prompt_tokens;
    }

    // Plain greedy rows need only the argmax: let the runner compute it where the logits are (on a GPU only
    // the token ids then cross to the host).
    bool all_greedy = !b.logits_indices.empty();
    for (const ScheduledChunk& c : so.chunks) {
      if (!c.samples) continue;
      all_greedy = all_greedy && live_.at(c.id)->sampler.params().plain_greedy();
    }
    const Clock::time_point t0 = Clock::now();
    std::optional<std::vector<int32_t>> greedy;
    std::vector<float> logits;
    if (all_greedy) greedy = runner_.forward_greedy(b);
    if (!greedy) logits = runner_.forward(b);
    const Clock::time_point now = Clock::now();
    (has_prefill ? counters_.prefill_seconds : counters_.decode_seconds) += seconds(now - t0);
    if (timeline_) {
      EngineStepTiming st;
      st.tokens = int(so.num_tokens);
      st.seqs = int(so.chunks.size());
      for (const ScheduledChunk& c : so.chunks) st.decodes += c.num_tokens == 1 && c.start >= scheduler_.request(c.id)->num_prompt_tokens;
      st.schedule_s = seconds(t_scheduled - t_start);
      st.build_s = seconds(t0 - t_scheduled);
      st.forward_s = seconds(now - t0);
      timeline_->push_back(st);
    }
    ++counters_.num_steps;
    counters_.computed_tokens += so.num_tokens;

    // Sample.
    const size_t vocab = size_t(runner_.config().vocab_size);
    std::vector<int32_t> sampled(so.chunks.size(), -1);
    std::vector<SampleResult> samples(so.chunks.size());
    size_t row = 0;
    for (size_t i = 0; i < so.chunks.size(); ++i) {
      const ScheduledChunk& c = so.chunks[i];
      Live& live = *live_.at(c.id);
      if (!live.scheduled) {
        live.scheduled = true;
        live.metrics.queue_s = seconds(t0 - live.arrival);
      }
      if (!c.samples) continue;
      const Request& r = *scheduler_.request(c.id);
      if (greedy) samples[i].token = (*greedy)[row];
      else samples[i] = live.sampler.sample(std::span<const float>(logits.data() + row * vocab, vocab), r.prompt(), r.output());
      sampled[i] = samples[i].token;
      ++row;
    }
    scheduler_.update(so, sampled);

    // Outputs.
    for (size_t i = 0; i < so.chunks.size(); ++i) {
      const ScheduledChunk& c = so.chunks[i];
      if (!c.samples) continue;
      auto it = live_.find(c.id);
      Live& live = *it->second;
      const Request& r = *scheduler_.request(c.id);
      RequestOutput out;
      out.id = c.id;
      process_token(live, r, samples[i], now, out);
      out.num_prompt_tokens = live.num_prompt_tokens;
      out.num_generated_tokens = live.num_generated;
      out.num_cached_tokens = std::max<int64_t>(0, r.num_cached_tokens);
      if (out.finished) {
        scheduler_.finish_request(c.id);
        live_.erase(it);
      }
      outs.push_back(std::move(out));
    }
    if (timeline_) timeline_->back().post_s = seconds(Clock::now() - now);
  }

  counters_.num_preemptions = scheduler_.num_preemptions();
  EngineMetrics m = counters_;
  m.num_running = scheduler_.num_running();
  m.num_waiting = scheduler_.num_waiting();
  m.kv_cache_usage = scheduler_.kv_cache().usage();
  m.num_kv_blocks = scheduler_.kv_cache().num_blocks();
  m.prefix_cache_queries = scheduler_.kv_cache().prefix_cache_stats().queries;
  m.prefix_cache_hits = scheduler_.kv_cache().prefix_cache_stats().hits;
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    snapshot_ = m;
  }
  return outs;
}

EngineMetrics Engine::metrics() const {
  EngineMetrics m;
  {
    std::lock_guard<std::mutex> lock(metrics_mu_);
    m = snapshot_;
  }
  std::lock_guard<std::mutex> lock(mu_);
  m.num_waiting += int(inbox_adds_);
  return m;
}

std::vector<GenerateResult> Engine::generate(const std::vector<GenerateRequest>& requests,
                                             const std::function<void(size_t, const RequestOutput&)>& on_output,
                                             GenerateStats* stats) {
  const Clock::time_point start = Clock::now();
  const EngineMetrics before = metrics();
  for (size_t i = 0; i < requests.size(); ++i) {
    std::string why = validate(requests[i].prompt_ids, requests[i].params);
    if (!why.empty()) throw_runtime_error("request ", i, ": ", why);
  }
  std::vector<GenerateResult> results(requests.size());
  std::unordered_map<RequestId, size_t> index;
  for (size_t i = 0; i < requests.size(); ++i) {
    results[i].id = add_request(requests[i].prompt_ids, requests[i].params);
    results[i].num_prompt_tokens = int64_t(requests[i].prompt_ids.size());
    index.emplace(results[i].id, i);
  }
  size_t remaining = requests.size();
  while (remaining > 0) {
    PAGODA_CHECK(has_unfinished(), "generate: ", remaining, " requests unfinished but the engine has no work");
    for (const RequestOutput& o : step()) {
      auto it = index.find(o.id);
      if (it == index.end()) continue;
      GenerateResult& r = results[it->second];
      r.token_ids.insert(r.token_ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      r.logprobs.insert(r.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
      r.text += o.text_delta;
      r.num_cached_tokens = o.num_cached_tokens;
      if (on_output) on_output(it->second, o);
      if (o.finished) {
        r.finish_reason = *o.finish_reason;
        if (o.metrics) r.metrics = *o.metrics;
        --remaining;
      }
    }
  }
  if (stats) {
    const EngineMetrics after = metrics();
    GenerateStats st;
    for (const GenerateResult& r : results) {
      st.prompt_tokens += r.num_prompt_tokens;
      st.generated_tokens += int64_t(r.token_ids.size());
    }
    st.prefill_seconds = after.prefill_seconds - before.prefill_seconds;
    st.decode_seconds = after.decode_seconds - before.decode_seconds;
    st.steps = after.num_steps - before.num_steps;
    st.total_seconds = std::chrono::duration<double>(Clock::now() - start).count();
    *stats = st;
  }
  return results;
}

}  // namespace pagoda
