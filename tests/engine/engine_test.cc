// engine/: the Engine API on stories260K (a real tiny Llama): the golden greedy tokens, prefix-cache hits
// counted in the tokens given to the model, preemption under a tiny KV cache, chunked prefill under a
// 7-token budget, aborts, request errors, stops, logprobs and the thread-safe inbox. Greedy outputs are
// compared exactly: the CPU forward pass is batch invariant (a row's result does not depend on the rest of
// the batch), so batching, chunking, preemption and prefix caching must not change a single token.
#include "pagoda/engine/engine.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/model/load_model.h"

namespace pagoda {
namespace {

std::string data_dir() {
  const char* env = std::getenv("PAGODA_TEST_DATA");
  return env && *env ? env : PAGODA_TEST_DATA_DEFAULT;
}
std::string stories_dir() { return data_dir() + "/models/stories260K"; }

const LoadedModel& stories() {
  static const LoadedModel m = load_model(stories_dir() + "/hf");
  return m;
}
const Tokenizer& stories_tokenizer() {
  static const Tokenizer t = Tokenizer::from_file(stories_dir() + "/hf");
  return t;
}
const nlohmann::json& golden() {
  static const nlohmann::json g = [] {
    std::ifstream in(stories_dir() + "/golden.json");
    return nlohmann::json::parse(in);
  }();
  return g;
}
std::vector<int32_t> golden_ids() { return golden()["hf_reference"]["greedy_token_ids"].get<std::vector<int32_t>>(); }

// BOS + the golden continuation's first n - 1 tokens: natural text of n tokens.
std::vector<int32_t> golden_prompt(int n, int skip = 0) {
  std::vector<int32_t> p{1};
  const auto g = golden_ids();
  p.insert(p.end(), g.begin() + skip, g.begin() + skip + n - 1);
  return p;
}

RequestParams greedy(int max_tokens) {
  RequestParams p;
  p.sampling.temperature = 0;
  p.max_tokens = max_tokens;
  p.ignore_eos = true;
  return p;
}

// A runner plus an engine over it (the engine holds a reference to the runner).
struct Rig {
  CpuModelRunner runner;
  Engine engine;
  Rig(int64_t num_blocks, int block_size, EngineOptions o, bool with_tokenizer = true)
      : runner(stories(), {.num_blocks = num_blocks, .block_size = block_size}, 1),
        engine(runner, with_tokenizer ? std::optional<Tokenizer>(stories_tokenizer()) : std::nullopt, o) {}
};

// One request run alone in a roomy cache: the oracle.
const GenerateResult& alone_result(const std::vector<int32_t>& prompt, int max_tokens) {
  static std::map<std::pair<std::vector<int32_t>, int>, GenerateResult> memo;
  auto key = std::make_pair(prompt, max_tokens);
  auto it = memo.find(key);
  if (it != memo.end()) return it->second;
  Rig rig(64, 16, {});
  return memo[key] = rig.engine.generate({{prompt, greedy(max_tokens)}})[0];
}
std::vector<int32_t> alone(const std::vector<int32_t>& prompt, int max_tokens) {
  return alone_result(prompt, max_tokens).token_ids;
}

TEST(Engine, Stories260KGoldenGreedyTokensAndText) {
  Rig rig(32, 16, {});
  RequestParams p = greedy(256);
  p.ignore_eos = false;
  const RequestId id = rig.engine.add_request(std::string_view(""), p);  // "" = BOS only
  EXPECT_TRUE(rig.engine.has_unfinished());
  std::vector<int32_t> tokens;
  std::string text;
  std::optional<RequestOutput> last;
  while (rig.engine.has_unfinished()) {
    for (RequestOutput& o : rig.engine.step()) {
      EXPECT_EQ(o.id, id);
      EXPECT_EQ(o.new_token_ids.size(), 1u);
      tokens.insert(tokens.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      text += o.text_delta;
      last = std::move(o);
    }
  }
  EXPECT_EQ(tokens, golden_ids());
  EXPECT_EQ(text, golden()["greedy"]["text"].get<std::string>());
  ASSERT_TRUE(last && last->finished);
  EXPECT_EQ(*last->finish_reason, FinishReason::kLength);
  EXPECT_EQ(last->num_prompt_tokens, 1);
  EXPECT_EQ(last->num_generated_tokens, 256);
  ASSERT_TRUE(last->metrics);
  EXPECT_GT(last->metrics->ttft_s, 0);
  EXPECT_EQ(last->metrics->inter_token_latencies_s.size(), 255u);
  EXPECT_GE(last->metrics->e2e_s, last->metrics->ttft_s);
  const EngineMetrics m = rig.engine.metrics();
  EXPECT_EQ(m.prompt_tokens, 1);
  EXPECT_EQ(m.generation_tokens, 256);
  EXPECT_EQ(m.computed_tokens, 256);  // BOS + 255 generated tokens fed back
  EXPECT_EQ(m.finished_length, 1);
  EXPECT_EQ(m.num_running + m.num_waiting, 0);
  EXPECT_EQ(m.kv_cache_usage, 0.0);
}

TEST(Engine, PrefixCacheHitComputesOnlyTheSuffix) {
  const std::vector<int32_t> first = golden_prompt(37);  // 2 full blocks of 16, then 5 tokens
  std::vector<int32_t> second(first.begin(), first.begin() + 32);
  for (int32_t t : {300, 301, 302, 303, 304, 305, 306}) second.push_back(t);  // the same 2 blocks, another suffix
  constexpr int kMaxTokens = 8;
  for (bool caching : {true, false}) {
    SCOPED_TRACE(caching ? "prefix caching on" : "prefix caching off");
    EngineOptions o;
    o.enable_prefix_caching = caching;
    Rig rig(32, 16, o);
    auto r1 = rig.engine.generate({{first, greedy(kMaxTokens)}});
    const int64_t before = rig.engine.metrics().computed_tokens;
    EXPECT_EQ(before, int64_t(first.size()) + kMaxTokens - 1);
    auto r2 = rig.engine.generate({{second, greedy(kMaxTokens)}});
    const int64_t computed = rig.engine.metrics().computed_tokens - before;
    // Tokens given to the model: the prompt (less the cached blocks), then each generated token but the last.
    EXPECT_EQ(computed, int64_t(second.size()) - (caching ? 32 : 0) + kMaxTokens - 1);
    EXPECT_EQ(r2[0].num_cached_tokens, caching ? 32 : 0);
    EXPECT_EQ(r2[0].token_ids, alone(second, kMaxTokens));
    EXPECT_EQ(r1[0].token_ids, alone(first, kMaxTokens));
    const EngineMetrics m = rig.engine.metrics();
    EXPECT_EQ(m.prefix_cache_hits, caching ? 32 : 0);
    EXPECT_EQ(m.prefix_cache_queries, caching ? int64_t(first.size() + second.size()) : 0);
  }
}

std::vector<std::vector<int32_t>> eight_prompts() {
  std::vector<std::vector<int32_t>> p;
  for (int i = 0; i < 8; ++i) p.push_back(golden_prompt(3 + 2 * i, 7 * i));
  return p;
}

TEST(Engine, PreemptionUnderATinyCacheKeepsGreedyOutputsIdentical) {
  constexpr int kMaxTokens = 40;
  const auto prompts = eight_prompts();
  struct Case {
    int64_t blocks;
    bool caching;
    int budget;
  };
  for (const Case c : {Case{4, false, 8192}, Case{4, true, 8192}, Case{6, true, 7}, Case{5, false, 16}}) {
    SCOPED_TRACE("blocks " + std::to_string(c.blocks) + (c.caching ? " caching" : "") + " budget " + std::to_string(c.budget));
    EngineOptions o;
    o.enable_prefix_caching = c.caching;
    o.max_num_batched_tokens = c.budget;
    Rig rig(c.blocks, 16, o);
    std::vector<GenerateRequest> reqs;
    for (const auto& p : prompts) reqs.push_back({p, greedy(kMaxTokens)});
    auto results = rig.engine.generate(reqs);
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_EQ(results[i].token_ids, alone(prompts[i], kMaxTokens)) << "request " << i;
      EXPECT_EQ(results[i].text, alone_result(prompts[i], kMaxTokens).text);
    }
    const EngineMetrics m = rig.engine.metrics();
    std::printf("[ engine ] %lld blocks, budget %d%s: %lld preemptions, %lld tokens computed for %lld generated\n",
                (long long)c.blocks, c.budget, c.caching ? ", prefix caching" : "", (long long)m.num_preemptions,
                (long long)m.computed_tokens, (long long)m.generation_tokens);
    EXPECT_GT(m.num_preemptions, 0);
    int preempted = 0;
    for (const auto& r : results) preempted += r.metrics.num_preemptions > 0;
    EXPECT_GT(preempted, 0);
    EXPECT_EQ(m.kv_cache_usage, 0.0);
    EXPECT_EQ(rig.engine.scheduler().kv_cache().pool().num_in_use(), 0);
  }
}

TEST(Engine, ChunkedPrefillWithA7TokenBudgetGivesTheSameGreedyTokens) {
  constexpr int kMaxTokens = 12;
  std::vector<std::vector<int32_t>> prompts;
  for (int n : {1, 7, 17, 40, 97}) prompts.push_back(golden_prompt(n, n % 5));
  std::vector<GenerateRequest> reqs;
  for (const auto& p : prompts) reqs.push_back({p, greedy(kMaxTokens)});
  for (bool chunked : {true, false}) {
    EngineOptions o;
    o.enable_chunked_prefill = chunked;
    o.max_num_batched_tokens = chunked ? 7 : 97;
    o.enable_prefix_caching = false;
    Rig rig(64, 16, o);
    for (const auto& r : reqs) rig.engine.add_request(r.prompt_ids, r.params);
    std::map<RequestId, std::vector<int32_t>> got;
    int64_t computed = 0;
    while (rig.engine.has_unfinished()) {
      for (const RequestOutput& out : rig.engine.step())
        got[out.id].insert(got[out.id].end(), out.new_token_ids.begin(), out.new_token_ids.end());
      const int64_t now = rig.engine.metrics().computed_tokens;
      ASSERT_LE(now - computed, o.max_num_batched_tokens) << "token budget exceeded";
      computed = now;
    }
    ASSERT_EQ(got.size(), prompts.size());
    size_t i = 0;
    for (const auto& [id, tokens] : got) {
      EXPECT_EQ(tokens, alone(prompts[i], kMaxTokens)) << (chunked ? "chunked" : "unchunked") << " prompt of " << prompts[i].size();
      ++i;
    }
  }
}

// The step timeline (bench throughput --step-profile) has one entry per step that ran the model, whose
// tokens add up to the computed tokens, with decodes counted among the sequences.
TEST(Engine, StepTimelineRecordsEveryModelStep) {
  EngineOptions o;
  o.max_num_batched_tokens = 7;
  o.enable_prefix_caching = false;
  Rig rig(64, 16, o);
  std::vector<EngineStepTiming> timeline;
  rig.engine.set_step_timeline(&timeline);
  for (int n : {1, 9, 17}) rig.engine.add_request(golden_prompt(n), greedy(5));
  while (rig.engine.has_unfinished()) rig.engine.step();
  const EngineMetrics m = rig.engine.metrics();
  ASSERT_EQ(int64_t(timeline.size()), m.num_steps);
  int64_t tokens = 0, decodes = 0;
  for (const EngineStepTiming& t : timeline) {
    EXPECT_GE(t.tokens, 1);
    EXPECT_LE(t.tokens, 7);
    EXPECT_LE(t.decodes, t.seqs);
    EXPECT_LE(t.decodes, t.tokens);
    EXPECT_GE(t.schedule_s, 0);
    EXPECT_GE(t.forward_s, 0);
    EXPECT_GE(t.post_s, 0);
    tokens += t.tokens;
    decodes += t.decodes;
  }
  EXPECT_EQ(tokens, m.computed_tokens);
  EXPECT_EQ(decodes, 3 * 4);  // every generated token but each request's first is a decode
}


// generate()'s stats count that call alone: the second of two identical calls reports what one call did.
TEST(Engine, GenerateStatsCountOneCall) {
  EngineOptions o;
  o.enable_prefix_caching = false;  // the second call computes its prompts again
  Rig rig(64, 16, o);
  const std::vector<GenerateRequest> reqs = {{golden_prompt(5), greedy(6)}, {golden_prompt(9, 2), greedy(3)}};
  GenerateStats first, second;
  rig.engine.generate(reqs, {}, &first);
  rig.engine.generate(reqs, {}, &second);
  for (const GenerateStats& s : {first, second}) {
    EXPECT_EQ(s.prompt_tokens, 5 + 9);
    EXPECT_EQ(s.generated_tokens, 6 + 3);
    EXPECT_EQ(s.steps, 6);  // one step prefills both prompts and samples their first tokens, then 5 decodes
    EXPECT_GT(s.prefill_seconds, 0);
    EXPECT_GT(s.decode_seconds, 0);
    EXPECT_GE(s.total_seconds, s.prefill_seconds + s.decode_seconds);
  }
  EXPECT_EQ(rig.engine.metrics().num_steps, 12);
}
// The reference models' float32 greedy continuations (Qwen3, Llama, Qwen2: GQA, q/k norm, biases), all four
// prompts (1 to 200 tokens) in one batch: under a 7-token budget, and with a KV cache too small for all of them.
TEST(Engine, ReferenceModelsBatchedWithChunkingAndPreemption) {
  for (const char* name : {"qwen3-tiny", "llama-tiny", "qwen2-tiny"}) {
    SCOPED_TRACE(name);
    const std::string dir = data_dir() + "/reference/" + name;
    std::ifstream in(dir + "/reference.json");
    const nlohmann::json ref = nlohmann::json::parse(in);
    const LoadedModel model = load_model(dir);
    std::vector<GenerateRequest> reqs;
    for (const auto& p : ref["prompts"])
      reqs.push_back({p["input_ids"].get<std::vector<int32_t>>(), greedy(int(p["float32"]["greedy"].size()))});
    for (auto [budget, blocks] : {std::pair{7, 24}, std::pair{64, 16}}) {
      CpuModelRunner runner(model, {.num_blocks = blocks, .block_size = 16, .dtype = DType::kF32}, 1);
      EngineOptions o;
      o.max_num_batched_tokens = budget;
      Engine engine(runner, std::nullopt, o);
      const auto results = engine.generate(reqs);
      for (size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ(results[i].token_ids, ref["prompts"][i]["float32"]["greedy"].get<std::vector<int32_t>>())
            << ref["prompts"][i]["name"] << ", budget " << budget << ", " << blocks << " blocks";
      if (blocks == 16) {
        EXPECT_GT(engine.metrics().num_preemptions, 0);
      }
    }
  }
}

TEST(Engine, AbortFreesEveryBlock) {
  EngineOptions o;
  o.max_num_batched_tokens = 16;
  Rig rig(16, 16, o);
  std::vector<RequestId> ids;
  for (const auto& p : eight_prompts()) ids.push_back(rig.engine.add_request(p, greedy(100)));
  for (int k = 0; k < 3; ++k) rig.engine.step();
  EXPECT_GT(rig.engine.metrics().kv_cache_usage, 0.0);
  EXPECT_GT(rig.engine.metrics().num_waiting, 0) << "some should still wait";
  const RequestId late = rig.engine.add_request(golden_prompt(5), greedy(4));  // aborted before any step sees it
  ids.push_back(late);
  for (RequestId id : ids) rig.engine.abort(id);
  rig.engine.abort(999999);  // unknown: ignored
  auto outs = rig.engine.step();
  ASSERT_EQ(outs.size(), ids.size());
  for (const RequestOutput& out : outs) {
    EXPECT_TRUE(out.finished);
    EXPECT_EQ(*out.finish_reason, FinishReason::kAbort);
    EXPECT_TRUE(out.new_token_ids.empty());
  }
  EXPECT_FALSE(rig.engine.has_unfinished());
  const EngineMetrics m = rig.engine.metrics();
  EXPECT_EQ(m.finished_abort, int64_t(ids.size()));
  EXPECT_EQ(m.num_running + m.num_waiting, 0);
  EXPECT_EQ(m.kv_cache_usage, 0.0);
  const BlockPool& pool = rig.engine.scheduler().kv_cache().pool();
  EXPECT_EQ(pool.num_in_use(), 0);
  EXPECT_EQ(pool.num_free() + pool.num_evictable(), 16);
  rig.engine.scheduler().check_invariants();
  rig.engine.abort(ids[0]);  // finished: ignored
  EXPECT_TRUE(rig.engine.step().empty());
  // The engine still serves.
  auto r = rig.engine.generate({{golden_prompt(5), greedy(6)}});
  EXPECT_EQ(r[0].token_ids, alone(golden_prompt(5), 6));
}

TEST(Engine, RequestErrorsAreClearAndLeaveTheEngineWorking) {
  EngineOptions o;
  o.max_model_len = 24;
  Rig rig(3, 16, o);  // 48 tokens of cache
  auto expect_error = [&](const std::vector<int32_t>& prompt, const RequestParams& p, const std::string& what) {
    try {
      rig.engine.add_request(prompt, p);
      ADD_FAILURE() << "no error for " << what;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
    }
  };
  expect_error(golden_prompt(24), greedy(1), "maximum context of 24");
  expect_error({}, greedy(1), "empty");
  expect_error({1, 512}, greedy(1), "outside the vocabulary");
  RequestParams bad = greedy(1);
  bad.sampling.temperature = -1;
  expect_error({1}, bad, "temperature");
  EXPECT_FALSE(rig.engine.has_unfinished());
  // max_model_len caps generation: 20 prompt tokens + 4 generated = 24.
  auto r = rig.engine.generate({{golden_prompt(20), greedy(100)}});
  EXPECT_EQ(r[0].token_ids.size(), 4u);
  EXPECT_EQ(r[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(r[0].token_ids, alone(golden_prompt(20), 4));
  // generate() validates every request before running any.
  EXPECT_THROW(rig.engine.generate({{golden_prompt(3), greedy(2)}, {golden_prompt(30), greedy(2)}}), Error);
  EXPECT_FALSE(rig.engine.has_unfinished());

  // A request that could never fit the whole KV cache, though it fits max_model_len.
  Rig small(2, 16, {});
  try {
    small.engine.add_request(golden_prompt(10), greedy(40));
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("needs 4 KV cache blocks"), std::string::npos) << e.what();
  }
  EXPECT_NO_THROW(small.engine.add_request(golden_prompt(10), greedy(23)));  // 32 tokens computed at most
}

TEST(Engine, StopsLogprobsAndEmptyGenerations) {
  Rig rig(32, 16, {});
  const std::vector<int32_t> bos{1};
  const std::string text = golden()["greedy"]["text"].get<std::string>();
  // A stop string: text up to it; the deltas never show part of it.
  RequestParams p = greedy(256);
  p.stop = {"Lily", "zebra"};
  RequestId id = rig.engine.add_request(bos, p);
  std::string streamed;
  std::optional<RequestOutput> last;
  while (rig.engine.has_unfinished())
    for (auto& o : rig.engine.step()) {
      EXPECT_EQ(o.id, id);
      streamed += o.text_delta;
      EXPECT_EQ(streamed.find('L'), std::string::npos) << "held back text leaked: " << streamed;
      last = o;
    }
  EXPECT_EQ(streamed, "Once upon a time, there was a little girl named ");
  EXPECT_EQ(*last->finish_reason, FinishReason::kStop);
  EXPECT_EQ(last->stop_string, "Lily");

  // A stop token: the token is returned, its text is not.
  const auto g = golden_ids();
  p = greedy(256);
  p.stop_token_ids = {g[4]};
  p.sampling.num_logprobs = 3;
  auto r = rig.engine.generate({{bos, p}});
  ASSERT_EQ(r[0].token_ids, std::vector<int32_t>(g.begin(), g.begin() + 5));
  EXPECT_EQ(r[0].finish_reason, FinishReason::kStop);
  EXPECT_EQ(r[0].text, stories_tokenizer().decode(std::vector<int>(g.begin(), g.begin() + 4), true));
  ASSERT_EQ(r[0].logprobs.size(), 5u);
  for (size_t i = 0; i < 5; ++i) {
    ASSERT_EQ(r[0].logprobs[i].top.size(), 3u);
    EXPECT_EQ(r[0].logprobs[i].top[0].id, g[i]);
    EXPECT_EQ(r[0].logprobs[i].token, g[i]);
    EXPECT_LE(r[0].logprobs[i].logprob, 0.0f);
  }

  // max_tokens 0 finishes at once.
  r = rig.engine.generate({{bos, greedy(0)}});
  EXPECT_TRUE(r[0].token_ids.empty());
  EXPECT_EQ(r[0].finish_reason, FinishReason::kLength);

  // The model's EOS stops unless ignored (stories260K's greedy story has none: make its 5th token the EOS).
  LoadedModel eos_model = stories();
  eos_model.config.eos_token_ids = {g[4]};
  CpuModelRunner runner(eos_model, {.num_blocks = 8, .block_size = 16}, 1);
  Engine engine(runner, stories_tokenizer(), {});
  p = greedy(20);
  p.ignore_eos = false;
  id = engine.add_request(bos, p);
  last.reset();
  while (engine.has_unfinished())
    for (auto& o : engine.step()) last = o;
  EXPECT_EQ(last->num_generated_tokens, 5);
  EXPECT_EQ(*last->finish_reason, FinishReason::kStop);
  EXPECT_EQ(last->stop_token_id, g[4]);
  p.ignore_eos = true;
  r = engine.generate({{bos, p}});
  EXPECT_EQ(r[0].token_ids, std::vector<int32_t>(g.begin(), g.begin() + 20));
  EXPECT_EQ(r[0].finish_reason, FinishReason::kLength);
}

TEST(Engine, AddAndAbortFromOtherThreadsWhileOneThreadSteps) {
  EngineOptions o;
  o.max_num_batched_tokens = 32;
  Rig rig(12, 16, o);
  std::mutex mu;
  std::map<RequestId, std::vector<int32_t>> tokens;
  std::map<RequestId, FinishReason> reasons;
  std::thread loop([&] {
    while (rig.engine.wait_for_work())
      for (const RequestOutput& out : rig.engine.step()) {
        std::lock_guard<std::mutex> lock(mu);
        auto& t = tokens[out.id];
        t.insert(t.end(), out.new_token_ids.begin(), out.new_token_ids.end());
        if (out.finished) reasons[out.id] = *out.finish_reason;
      }
  });
  const auto prompts = eight_prompts();
  std::map<RequestId, size_t> prompt_of;
  std::vector<RequestId> aborted;
  std::vector<std::thread> clients;
  for (int c = 0; c < 3; ++c)
    clients.emplace_back([&, c] {
      for (int k = 0; k < 4; ++k) {
        const size_t which = size_t(c * 4 + k) % prompts.size();
        const RequestId id = rig.engine.add_request(prompts[which], greedy(20));
        {
          std::lock_guard<std::mutex> lock(mu);
          prompt_of[id] = which;
        }
        if (k == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(1));
          rig.engine.abort(id);
          std::lock_guard<std::mutex> lock(mu);
          aborted.push_back(id);
        }
        (void)rig.engine.metrics();
      }
    });
  for (auto& t : clients) t.join();
  while (true) {
    {
      std::lock_guard<std::mutex> lock(mu);
      if (reasons.size() == 12) break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  rig.engine.wake();
  loop.join();
  EXPECT_FALSE(rig.engine.has_unfinished());
  for (const auto& [id, which] : prompt_of) {
    const bool was_aborted = std::find(aborted.begin(), aborted.end(), id) != aborted.end();
    if (reasons[id] == FinishReason::kAbort) {
      EXPECT_TRUE(was_aborted);
      const auto want = alone(prompts[which], 20);
      EXPECT_EQ(tokens[id], std::vector<int32_t>(want.begin(), want.begin() + long(tokens[id].size())));
    } else {
      EXPECT_EQ(reasons[id], FinishReason::kLength);
      EXPECT_EQ(tokens[id], alone(prompts[which], 20)) << "request " << id;
    }
  }
  EXPECT_EQ(rig.engine.metrics().kv_cache_usage, 0.0);
  EXPECT_FALSE(rig.engine.wait_for_work(std::chrono::milliseconds(1)));
}

}  // namespace
}  // namespace pagoda
