// scheduler/: continuous batching under random arrivals and aborts, against a simulated model whose
// "greedy" next token is a hash of the K/V it reads back through the block table, so a wrong block, a
// stale slot, a lost prefix-cache block or a bad recomputation changes the output. Plus the rules one at a
// time: decodes first, preemption of the newest, FCFS, budgets, admission errors.
#include "pagoda/scheduler/scheduler.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "pagoda/core/error.h"

namespace pagoda {
namespace {

constexpr int32_t kVocab = 50;
constexpr int32_t kEos = 0;

int32_t next_token(std::span<const int32_t> seq) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : seq) h = (h ^ uint64_t(t + 1)) * 1099511628211ull;
  return int32_t((h >> 17) % uint64_t(kVocab));
}

// What a request generates when it runs alone: the oracle.
std::vector<int32_t> reference(std::vector<int32_t> tokens, int max_tokens, int max_model_len) {
  std::vector<int32_t> out;
  while (true) {
    const int32_t t = next_token(tokens);
    tokens.push_back(t);
    out.push_back(t);
    if (t == kEos || int(out.size()) >= max_tokens || int(tokens.size()) >= max_model_len) return out;
  }
}

// A model over a simulated KV cache: writes each chunk's tokens into their slots, and for a sampling chunk
// reads the whole sequence back from the slots.
class SimModel {
 public:
  SimModel(int32_t num_blocks, int32_t block_size) : bs_(block_size), slots_(size_t(num_blocks * block_size), -1) {}
  std::vector<int32_t> run(const Scheduler& s, const SchedulerOutput& out) {
    std::vector<int32_t> sampled(out.chunks.size(), -1);
    for (const ScheduledChunk& c : out.chunks) {
      std::span<const BlockId> table = s.kv_cache().block_table(c.id);
      const Request& r = *s.request(c.id);
      for (int64_t p = c.start; p < c.start + c.num_tokens; ++p) slots_[slot(table, p)] = r.tokens[size_t(p)];
    }
    for (size_t i = 0; i < out.chunks.size(); ++i) {
      const ScheduledChunk& c = out.chunks[i];
      if (!c.samples) continue;
      std::span<const BlockId> table = s.kv_cache().block_table(c.id);
      std::vector<int32_t> seq;
      for (int64_t p = 0; p < c.start + c.num_tokens; ++p) seq.push_back(slots_[slot(table, p)]);
      sampled[i] = next_token(seq);
    }
    return sampled;
  }

 private:
  size_t slot(std::span<const BlockId> table, int64_t p) const {
    return size_t(table[size_t(p / bs_)]) * size_t(bs_) + size_t(p % bs_);
  }
  int32_t bs_;
  std::vector<int32_t> slots_;
};

struct Spec {
  std::vector<int32_t> prompt;
  int max_tokens = 0;
};

struct RandomRun {
  int64_t steps = 0, preemptions = 0, finished = 0, aborted = 0, prefix_hits = 0;
};

RandomRun random_run(const SchedulerConfig& cfg, uint64_t seed, int num_requests) {
  Scheduler s(cfg);
  SimModel model(cfg.num_blocks, cfg.block_size);
  std::mt19937_64 rng(seed);
  auto rand = [&](int64_t n) { return int64_t(rng() % uint64_t(n)); };
  std::map<RequestId, Spec> specs;
  std::map<RequestId, std::vector<int32_t>> outputs;
  std::set<RequestId> done;
  std::vector<RequestId> first_admissions;
  std::set<RequestId> admitted;
  RandomRun run;
  RequestId next_id = 0;
  while (next_id < RequestId(num_requests) || s.has_unfinished()) {
    EXPECT_LT(run.steps, 20000) << "requests starve";
    if (run.steps >= 20000) break;
    // Arrivals: bursts of requests, some sharing a prompt prefix with an earlier one.
    if (next_id < RequestId(num_requests) && rand(3) == 0) {
      for (int64_t k = 1 + rand(3); k > 0 && next_id < RequestId(num_requests); --k) {
        Spec sp;
        if (!specs.empty() && rand(2) == 0) {
          const auto& src = std::next(specs.begin(), long(rand(int64_t(specs.size()))))->second.prompt;
          sp.prompt.assign(src.begin(), src.begin() + rand(int64_t(src.size()) + 1));
        }
        for (int64_t n = 1 + rand(24); n > 0; --n) sp.prompt.push_back(int32_t(1 + rand(kVocab - 1)));
        sp.prompt.resize(std::min<size_t>(sp.prompt.size(), size_t(cfg.max_model_len - 1)));
        sp.max_tokens = int(1 + rand(24));
        if (!s.check_request(int64_t(sp.prompt.size()), sp.max_tokens).empty()) continue;
        s.add_request(next_id, sp.prompt, sp.max_tokens);
        specs.emplace(next_id++, std::move(sp));
      }
    }
    // Aborts, of waiting and running requests alike.
    if (rand(25) == 0 && !specs.empty()) {
      const RequestId id = RequestId(rand(int64_t(next_id)));
      if (!done.count(id) && s.request(id)) {
        EXPECT_TRUE(s.finish_request(id));
        EXPECT_FALSE(s.kv_cache().holds_blocks(id));
        done.insert(id);
        ++run.aborted;
      }
    }

    const SchedulerOutput out = s.schedule();
    ++run.steps;
    int64_t total = 0;
    std::set<RequestId> ids;
    for (const ScheduledChunk& c : out.chunks) {
      const Request* r = s.request(c.id);
      EXPECT_TRUE(r && r->status == RequestStatus::kRunning);
      EXPECT_TRUE(ids.insert(c.id).second) << "request scheduled twice in a step";
      EXPECT_GT(c.num_tokens, 0);
      EXPECT_EQ(c.start, r->num_computed);
      EXPECT_LE(c.start + c.num_tokens, r->num_tokens());
      EXPECT_EQ(c.samples, c.start + c.num_tokens == r->num_tokens());
      EXPECT_GE(int64_t(s.kv_cache().block_table(c.id).size()), s.kv_cache().blocks_for(c.start + c.num_tokens));
      if (!cfg.enable_chunked_prefill && c.num_tokens > 1) {  // whole prompts (or recomputations over the budget)
        EXPECT_TRUE(c.samples || c.num_tokens == cfg.max_num_batched_tokens);
      }
      if (!admitted.count(c.id)) {
        admitted.insert(c.id);
        first_admissions.push_back(c.id);
        run.prefix_hits += c.start;
      }
      total += c.num_tokens;
    }
    EXPECT_EQ(total, out.num_tokens);
    EXPECT_LE(total, cfg.max_num_batched_tokens) << "token budget exceeded";
    EXPECT_LE(int(out.chunks.size()), cfg.max_num_seqs);
    for (RequestId id : out.preempted) EXPECT_FALSE(ids.count(id));

    const std::vector<int32_t> sampled = model.run(s, out);
    s.update(out, sampled);
    for (size_t i = 0; i < out.chunks.size(); ++i) {
      if (!out.chunks[i].samples) continue;
      const RequestId id = out.chunks[i].id;
      const Request& r = *s.request(id);
      outputs[id].push_back(sampled[i]);
      if (sampled[i] == kEos || r.num_output_tokens() >= r.max_tokens || r.num_tokens() >= cfg.max_model_len) {
        const auto want = reference(specs[id].prompt, specs[id].max_tokens, cfg.max_model_len);
        EXPECT_EQ(outputs[id], want) << "request " << id << " (preempted " << r.num_preemptions << " times)";
        EXPECT_TRUE(s.finish_request(id));
        done.insert(id);
        ++run.finished;
      }
    }
    s.check_invariants();
  }
  EXPECT_EQ(run.finished + run.aborted, num_requests);
  EXPECT_EQ(s.kv_cache().pool().num_in_use(), 0) << "blocks leaked";
  EXPECT_TRUE(std::is_sorted(first_admissions.begin(), first_admissions.end())) << "not first come, first served";
  run.preemptions = s.num_preemptions();
  return run;
}

TEST(Scheduler, RandomArrivalsAndAbortsKeepInvariants) {
  struct Case {
    int budget, max_seqs, blocks, block_size;
    bool chunked, caching;
  };
  const Case cases[] = {
      {7, 8, 24, 4, true, true},    {7, 8, 24, 4, true, false},  {64, 8, 20, 4, true, true},
      {64, 4, 200, 4, true, true},  {48, 16, 30, 4, false, true}, {48, 16, 30, 4, false, false},
      {16, 256, 12, 16, true, true}, {5, 3, 18, 3, true, true},
  };
  int64_t preemptions = 0, hits = 0, steps = 0, finished = 0, aborted = 0;
  for (size_t k = 0; k < std::size(cases); ++k) {
    const Case& c = cases[k];
    SchedulerConfig cfg;
    cfg.max_num_batched_tokens = c.budget;
    cfg.max_num_seqs = c.max_seqs;
    cfg.num_blocks = c.blocks;
    cfg.block_size = c.block_size;
    cfg.enable_chunked_prefill = c.chunked;
    cfg.enable_prefix_caching = c.caching;
    cfg.max_model_len = 48;
    for (uint64_t seed = 1; seed <= 3; ++seed) {
      SCOPED_TRACE("case " + std::to_string(k) + " seed " + std::to_string(seed));
      RandomRun r = random_run(cfg, seed * 100 + k, 60);
      preemptions += r.preemptions;
      hits += r.prefix_hits;
      steps += r.steps;
      finished += r.finished;
      aborted += r.aborted;
      if (::testing::Test::HasFailure()) return;
    }
  }
  std::printf("[ scheduler ] %lld steps, %lld requests finished, %lld aborted, %lld preemptions, %lld prefix-hit tokens\n",
              (long long)steps, (long long)finished, (long long)aborted, (long long)preemptions, (long long)hits);
  EXPECT_GT(preemptions, 50) << "the workloads should preempt";
  EXPECT_GT(hits, 0) << "the workloads should hit the prefix cache";
}

SchedulerConfig small_config() {
  SchedulerConfig cfg;
  cfg.max_num_batched_tokens = 10;
  cfg.max_num_seqs = 8;
  cfg.num_blocks = 64;
  cfg.block_size = 4;
  cfg.max_model_len = 64;
  cfg.enable_prefix_caching = false;
  return cfg;
}

std::vector<int32_t> ids(int n, int32_t first = 1) {
  std::vector<int32_t> t;
  for (int i = 0; i < n; ++i) t.push_back(first + i);
  return t;
}

// Samples token 7 for every sampling chunk.
void step_with(Scheduler& s, const SchedulerOutput& out) {
  s.update(out, std::vector<int32_t>(out.chunks.size(), 7));
}

TEST(Scheduler, DecodesFirstThenPrefillChunksUnderTheBudget) {
  Scheduler s(small_config());
  s.add_request(1, ids(3), 10);
  auto out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].num_tokens, 3);
  EXPECT_TRUE(out.chunks[0].samples);
  step_with(s, out);
  s.add_request(2, ids(30), 10);
  s.add_request(3, ids(5), 10);
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].id, 1u);  // the decode
  EXPECT_EQ(out.chunks[0].num_tokens, 1);
  EXPECT_EQ(out.chunks[1].id, 2u);  // then the oldest waiting prompt takes the rest; 3 waits its turn
  EXPECT_EQ(out.chunks[1].num_tokens, 9);
  EXPECT_FALSE(out.chunks[1].samples);
  step_with(s, out);
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].id, 1u);
  EXPECT_EQ(out.chunks[1].id, 2u);
  EXPECT_EQ(out.chunks[1].start, 9);
  EXPECT_EQ(out.num_tokens, 10);
  s.check_invariants();
}

TEST(Scheduler, PreemptsTheMostRecentlyArrivedRunningRequest) {
  SchedulerConfig cfg = small_config();
  cfg.num_blocks = 4;  // 16 tokens
  cfg.max_num_batched_tokens = 64;
  Scheduler s(cfg);
  s.add_request(1, ids(4), 8);
  s.add_request(2, ids(4, 20), 8);
  auto out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  step_with(s, out);  // both at 5 tokens, 4 computed: one block each
  bool preempted = false;
  for (int k = 0; k < 6 && !preempted; ++k) {
    out = s.schedule();
    if (!out.preempted.empty()) {
      preempted = true;
      EXPECT_EQ(out.preempted, std::vector<RequestId>{2});
      ASSERT_EQ(out.chunks.size(), 1u);
      EXPECT_EQ(out.chunks[0].id, 1u);
      const Request& r2 = *s.request(2);
      EXPECT_EQ(r2.status, RequestStatus::kWaiting);
      EXPECT_EQ(r2.num_computed, 0);
      EXPECT_EQ(r2.num_preemptions, 1);
      EXPECT_FALSE(s.kv_cache().holds_blocks(2));
    }
    step_with(s, out);
    s.check_invariants();
  }
  ASSERT_TRUE(preempted);
  const int64_t r2_tokens = s.request(2)->num_tokens();
  EXPECT_GT(r2_tokens, 4) << "its generated tokens are kept";
  ASSERT_TRUE(s.finish_request(1));
  out = s.schedule();  // 2 comes back and recomputes prompt + generated tokens
  ASSERT_EQ(out.chunks.size(), 1u);
  EXPECT_EQ(out.chunks[0].id, 2u);
  EXPECT_EQ(out.chunks[0].start, 0);
  EXPECT_EQ(out.chunks[0].num_tokens, r2_tokens);
  EXPECT_TRUE(out.chunks[0].samples);
}

TEST(Scheduler, AdmissionIsFirstComeFirstServedAndBoundedByMaxNumSeqs) {
  SchedulerConfig cfg = small_config();
  cfg.max_num_seqs = 2;
  cfg.max_num_batched_tokens = 100;
  Scheduler s(cfg);
  for (RequestId id = 1; id <= 4; ++id) s.add_request(id, ids(3), 4);
  auto out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].id, 1u);
  EXPECT_EQ(out.chunks[1].id, 2u);
  EXPECT_EQ(s.num_running(), 2);
  EXPECT_EQ(s.num_waiting(), 2);
  step_with(s, out);
  ASSERT_TRUE(s.finish_request(1));
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[0].id, 2u);
  EXPECT_EQ(out.chunks[1].id, 3u);
}

TEST(Scheduler, WithoutChunkedPrefillAPromptRunsWhole) {
  SchedulerConfig cfg = small_config();
  cfg.enable_chunked_prefill = false;
  Scheduler s(cfg);
  EXPECT_NE(s.check_request(11, 1).find("chunked prefill disabled"), std::string::npos);
  EXPECT_THROW(s.add_request(1, ids(11), 1), Error);
  s.add_request(2, ids(6), 4);
  s.add_request(3, ids(6), 4);
  auto out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 1u) << "3 does not fit what is left of the budget and is not chunked";
  EXPECT_EQ(out.chunks[0].num_tokens, 6);
  step_with(s, out);
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[1].num_tokens, 6);
}

TEST(Scheduler, RequestsThatCanNeverRunAreRejectedClearly) {
  SchedulerConfig cfg = small_config();
  cfg.max_model_len = 16;
  cfg.num_blocks = 3;  // 12 tokens
  Scheduler s(cfg);
  EXPECT_NE(s.check_request(16, 1).find("maximum context of 16"), std::string::npos);
  EXPECT_NE(s.check_request(0, 1).find("empty"), std::string::npos);
  EXPECT_NE(s.check_request(10, 5).find("needs 4 KV cache blocks"), std::string::npos);
  EXPECT_EQ(s.check_request(10, 3), "");  // 12 tokens computed at most: the last one never is
  try {
    s.add_request(5, ids(20), 1);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_NE(std::string(e.what()).find("maximum context"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(s.has_unfinished());
  SchedulerConfig bad = cfg;
  bad.max_num_batched_tokens = 0;
  EXPECT_THROW(Scheduler{bad}, Error);
}

TEST(Scheduler, FinishingWaitingAndRunningRequestsFreesTheirBlocks) {
  SchedulerConfig cfg = small_config();
  cfg.enable_prefix_caching = true;
  Scheduler s(cfg);
  s.add_request(1, ids(9), 8);
  s.add_request(2, ids(9), 8);
  s.add_request(3, ids(9), 8);
  auto out = s.schedule();  // 1 whole, 2 partly (budget 10)
  step_with(s, out);
  EXPECT_GT(s.kv_cache().pool().num_in_use(), 0);
  EXPECT_TRUE(s.finish_request(3));  // waiting
  EXPECT_TRUE(s.finish_request(2));  // running, mid-prefill
  EXPECT_TRUE(s.finish_request(1));  // running, decoding
  EXPECT_FALSE(s.finish_request(1));
  EXPECT_EQ(s.kv_cache().pool().num_in_use(), 0);
  EXPECT_FALSE(s.has_unfinished());
  s.check_invariants();
  EXPECT_TRUE(s.schedule().empty());
}

TEST(Scheduler, PrefixCacheHitSkipsTheSharedBlocks) {
  SchedulerConfig cfg = small_config();
  cfg.enable_prefix_caching = true;
  cfg.max_num_batched_tokens = 100;
  Scheduler s(cfg);
  std::vector<int32_t> a = ids(10), b = ids(8);
  b.insert(b.end(), {40, 41, 42});
  s.add_request(1, a, 2);
  auto out = s.schedule();
  step_with(s, out);
  s.add_request(2, b, 2);
  out = s.schedule();
  ASSERT_EQ(out.chunks.size(), 2u);
  EXPECT_EQ(out.chunks[1].id, 2u);
  EXPECT_EQ(out.chunks[1].start, 8);  // two blocks of 4 from request 1
  EXPECT_EQ(out.chunks[1].num_tokens, 3);
  EXPECT_EQ(s.request(2)->num_cached_tokens, 8);
  EXPECT_EQ(s.kv_cache().prefix_cache_stats().hits, 8);
  EXPECT_EQ(s.kv_cache().prefix_cache_stats().queries, 21);
  EXPECT_EQ(s.kv_cache().block_table(2)[0], s.kv_cache().block_table(1)[0]);
}

}  // namespace
}  // namespace pagoda
