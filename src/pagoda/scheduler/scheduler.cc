#include "pagoda/scheduler/scheduler.h"

#include <algorithm>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

bool by_arrival(const Request* a, const Request* b) { return a->arrival < b->arrival; }

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& c)
    : config_(c), kv_(std::max(c.num_blocks, 0), std::max(c.block_size, 1), c.enable_prefix_caching) {
  if (c.max_num_seqs <= 0) throw_config_error("--max-num-seqs must be positive, got ", c.max_num_seqs);
  if (c.max_num_batched_tokens <= 0)
    throw_config_error("--max-num-batched-tokens must be positive, got ", c.max_num_batched_tokens);
  if (c.max_model_len <= 0) throw_config_error("--max-model-len must be positive, got ", c.max_model_len);
  if (c.block_size <= 0) throw_config_error("--block-size must be positive, got ", c.block_size);
  if (c.num_blocks <= 0) throw_config_error("the KV cache has no blocks; raise --kv-cache-space");
}

std::string Scheduler::check_request(int64_t num_prompt_tokens, int max_tokens) const {
  const int64_t max_len = config_.max_model_len;
  if (num_prompt_tokens <= 0) return "the prompt is empty (it needs at least one token, e.g. BOS)";
  if (num_prompt_tokens >= max_len)
    return str_cat("the prompt has ", num_prompt_tokens, " tokens, more than the model's maximum context of ", max_len,
                   " minus one generated token (see --max-model-len)");
  if (!config_.enable_chunked_prefill && num_prompt_tokens > config_.max_num_batched_tokens)
    return str_cat("the prompt has ", num_prompt_tokens, " tokens, more than --max-num-batched-tokens ",
                   config_.max_num_batched_tokens, " with chunked prefill disabled; raise it or enable chunked prefill");
  if (max_tokens < 0) return str_cat("max_tokens must be >= 0, got ", max_tokens);
  // The last sampled token is never computed: at most prompt + max_tokens - 1 tokens (< max_model_len) need
  // K/V, and a request must fit the cache on its own (preemption frees everything else for it).
  const int64_t computed = std::max(num_prompt_tokens, std::min(num_prompt_tokens + max_tokens - 1, max_len - 1));
  const int64_t blocks = kv_.blocks_for(computed);
  if (blocks > kv_.num_blocks())
    return str_cat("the request needs ", blocks, " KV cache blocks (", computed, " tokens of ", config_.block_size,
                   " per block) but the cache has only ", kv_.num_blocks(),
                   " blocks; raise --kv-cache-space or lower max_tokens or the prompt length");
  return "";
}

void Scheduler::add_request(RequestId id, std::vector<int32_t> prompt_ids, int max_tokens) {
  std::string why = check_request(int64_t(prompt_ids.size()), max_tokens);
  if (!why.empty()) throw_runtime_error("request ", id, ": ", why);
  PAGODA_CHECK(!requests_.count(id), "request id ", id, " is already in use");
  auto r = std::make_unique<Request>();
  r->id = id;
  r->arrival = next_arrival_++;
  r->num_prompt_tokens = int64_t(prompt_ids.size());
  r->tokens = std::move(prompt_ids);
  r->max_tokens = max_tokens;
  waiting_.push_back(r.get());
  requests_.emplace(id, std::move(r));
}

const Request* Scheduler::request(RequestId id) const {
  auto it = requests_.find(id);
  return it == requests_.end() ? nullptr : it->second.get();
}

void Scheduler::insert_running(Request* r) {
  running_.insert(std::upper_bound(running_.begin(), running_.end(), r, by_arrival), r);
}

void Scheduler::insert_waiting(Request* r) {
  waiting_.insert(std::upper_bound(waiting_.begin(), waiting_.end(), r, by_arrival), r);
}

void Scheduler::preempt(Request* r, SchedulerOutput& out, int64_t& budget) {
  running_.erase(std::find(running_.begin(), running_.end(), r));
  auto c = std::find_if(out.chunks.begin(), out.chunks.end(), [&](const ScheduledChunk& x) { return x.id == r->id; });
  if (c != out.chunks.end()) {  // scheduled earlier in this step (a decode): give its tokens back
    budget += c->num_tokens;
    out.num_tokens -= c->num_tokens;
    out.chunks.erase(c);
  }
  kv_.free(r->id);
  r->num_computed = 0;
  r->status = RequestStatus::kWaiting;
  ++r->num_preemptions;
  ++num_preemptions_;
  insert_waiting(r);
  out.preempted.push_back(r->id);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;
  auto add_chunk = [&](Request* r, int64_t n) {
    out.chunks.push_back({r->id, r->num_computed, int32_t(n), r->num_computed + n == r->num_tokens()});
    out.num_tokens += n;
    budget -= n;
  };

  // Running requests: decodes first, then the chunks of those still prefilling (or recomputing), each in
  // arrival order. A request that cannot get its blocks preempts the newest running request, possibly itself.
  for (int pass = 0; pass < 2 && budget > 0; ++pass) {
    const std::vector<Request*> snapshot = running_;
    for (Request* r : snapshot) {
      if (budget == 0) break;
      if (r->status != RequestStatus::kRunning) continue;  // preempted earlier in this step
      const bool decode = r->num_pending() == 1;
      if ((pass == 0) != decode) continue;
      PAGODA_CHECK(r->num_pending() >= 1, "running request ", r->id, " has nothing to compute");
      const int64_t n = std::min(r->num_pending(), budget);
      bool preempted_self = false;
      while (!kv_.allocate(r->id, r->num_computed + n)) {
        Request* victim = running_.back();
        preempt(victim, out, budget);
        if (victim == r) {
          preempted_self = true;
          break;
        }
      }
      if (!preempted_self) add_chunk(r, n);
    }
  }

  // Waiting requests, first come first served; the head waits rather than being overtaken.
  if (out.preempted.empty()) {
    while (!waiting_.empty() && budget > 0 && int(running_.size()) < config_.max_num_seqs) {
      Request* r = waiting_.front();
      const PrefixMatch hit = kv_.match_prefix(r->tokens, r->num_tokens() - 1);
      const int64_t pending = r->num_tokens() - hit.num_tokens();
      const int64_t n = std::min(pending, budget);
      // Without chunked prefill the whole prompt goes in one step, unless it can never fit one (the
      // recomputation of a preempted request grown past the budget).
      if (!config_.enable_chunked_prefill && n < pending && pending <= config_.max_num_batched_tokens) break;
      if (!kv_.allocate(r->id, hit.num_tokens() + n, hit)) break;
      if (kv_.prefix_caching()) kv_.record_prefix_lookup(r->num_tokens(), hit.num_tokens());
      waiting_.pop_front();
      r->num_computed = hit.num_tokens();
      if (r->num_cached_tokens < 0) r->num_cached_tokens = hit.num_tokens();
      r->status = RequestStatus::kRunning;
      insert_running(r);
      add_chunk(r, n);
    }
  }
  return out;
}

void Scheduler::update(const SchedulerOutput& out, std::span<const int32_t> sampled) {
  PAGODA_CHECK(sampled.size() == out.chunks.size(), "update: ", sampled.size(), " sampled tokens for ",
               out.chunks.size(), " chunks");
  for (size_t i = 0; i < out.chunks.size(); ++i) {
    const ScheduledChunk& c = out.chunks[i];
    auto it = requests_.find(c.id);
    if (it == requests_.end() || it->second->status != RequestStatus::kRunning) continue;
    Request& r = *it->second;
    PAGODA_CHECK(r.num_computed == c.start, "request ", r.id, " computed ", r.num_computed, " tokens, the chunk starts at ",
                 c.start);
    r.num_computed += c.num_tokens;
    kv_.cache_blocks(r.id, r.tokens, r.num_computed);
    if (c.samples) {
      r.tokens.push_back(sampled[i]);
      PAGODA_CHECK(r.num_tokens() <= config_.max_model_len, "request ", r.id, " grew past max_model_len ",
                   config_.max_model_len, " (it should have finished)");
    }
  }
}

bool Scheduler::finish_request(RequestId id) {
  auto it = requests_.find(id);
  if (it == requests_.end()) return false;
  Request* r = it->second.get();
  if (r->status == RequestStatus::kRunning) running_.erase(std::find(running_.begin(), running_.end(), r));
  else waiting_.erase(std::find(waiting_.begin(), waiting_.end(), r));
  kv_.free(id);
  requests_.erase(it);
  return true;
}

void Scheduler::check_invariants() const {
  kv_.check_invariants();
  PAGODA_CHECK(running_.size() + waiting_.size() == requests_.size(), running_.size(), " running + ", waiting_.size(),
               " waiting != ", requests_.size(), " requests");
  PAGODA_CHECK(int(running_.size()) <= config_.max_num_seqs, running_.size(), " running requests, more than max_num_seqs ",
               config_.max_num_seqs);
  PAGODA_CHECK(std::is_sorted(running_.begin(), running_.end(), by_arrival), "running queue out of arrival order");
  PAGODA_CHECK(std::is_sorted(waiting_.begin(), waiting_.end(), by_arrival), "waiting queue out of arrival order");
  for (const Request* r : running_) {
    PAGODA_CHECK(requests_.count(r->id) && r->status == RequestStatus::kRunning, "running request ", r->id, " is not running");
    PAGODA_CHECK(r->num_computed < r->num_tokens(), "running request ", r->id, " has no token to compute");
    PAGODA_CHECK(int64_t(kv_.block_table(r->id).size()) >= kv_.blocks_for(r->num_computed), "request ", r->id,
                 " holds too few blocks for its ", r->num_computed, " computed tokens");
  }
  for (const Request* r : waiting_) {
    PAGODA_CHECK(requests_.count(r->id) && r->status == RequestStatus::kWaiting, "waiting request ", r->id, " is not waiting");
    PAGODA_CHECK(r->num_computed == 0 && !kv_.holds_blocks(r->id), "waiting request ", r->id, " holds blocks");
  }
  for (const auto& [id, r] : requests_)
    PAGODA_CHECK(r->num_tokens() <= config_.max_model_len, "request ", id, " exceeds max_model_len");
}

}  // namespace pagoda
