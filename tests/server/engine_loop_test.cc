// The server's engine thread when a step fails: the requests in flight end with the error (so their HTTP
// clients get a 500 naming it), the loop keeps serving, and a later request gives the same greedy tokens
// as before the failure.
#include <gtest/gtest.h>

#include <atomic>
#include <new>

#include "pagoda/server/engine_loop.h"

#include "server_test_util.h"

namespace pagoda::test {
namespace {

// stories260K's CPU runner, made to throw from forward() while `fail` is set.
class FailingRunner : public ModelRunner {
 public:
  explicit FailingRunner(ModelRunner& inner) : inner_(inner) {}
  std::vector<float> forward(const ForwardBatch& b) override {
    if (fail) throw std::bad_alloc();
    return inner_.forward(b);
  }
  std::optional<std::vector<int32_t>> forward_greedy(const ForwardBatch& b) override {
    if (fail) throw std::bad_alloc();
    return inner_.forward_greedy(b);
  }
  const ModelConfig& config() const override { return inner_.config(); }
  const KvCacheOptions& cache_options() const override { return inner_.cache_options(); }
  std::atomic<bool> fail{false};

 private:
  ModelRunner& inner_;
};

// Runs a stream to its end: (tokens, error).
std::pair<std::vector<int32_t>, std::string> drain(OutputStream& s) {
  std::vector<int32_t> tokens;
  std::string error;
  std::vector<StreamItem> items;
  while (s.pop(items, std::chrono::milliseconds(100)))
    for (const StreamItem& it : items) {
      tokens.insert(tokens.end(), it.output.new_token_ids.begin(), it.output.new_token_ids.end());
      if (!it.error.empty()) error = it.error;
    }
  return {tokens, error};
}

TEST(EngineLoop, AFailingStepFailsTheRequestsInFlightAndServingGoesOn) {
  EngineArgs args;
  args.model.model = stories_dir() + "/hf";
  EngineSetup setup = setup_engine(args, validate_engine_args(args));
  FailingRunner runner(*setup.runner);
  Engine engine(runner, setup.tokenizer, engine_options_from_args(args, setup.max_model_len));
  EngineLoop loop(engine);
  RequestParams p;
  p.max_tokens = 32;
  p.sampling.temperature = 0;
  auto [golden, no_error] = drain(*loop.submit({{1}}, {p}));
  ASSERT_EQ(golden.size(), 32u);
  ASSERT_EQ(no_error, "");

  runner.fail = true;
  auto failing = loop.submit({{1}, {1, 2}}, {p, p});
  auto [tokens, error] = drain(*failing);
  EXPECT_NE(error.find("bad_alloc"), std::string::npos) << error;
  EXPECT_EQ(loop.num_live(), 0u);

  runner.fail = false;
  auto [again, again_error] = drain(*loop.submit({{1}}, {p}));
  EXPECT_EQ(again_error, "");
  EXPECT_EQ(again, golden);
  // The failed requests were aborted in the engine: nothing is left running or holding KV blocks.
  for (int i = 0; i < 100 && engine.has_unfinished(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_FALSE(engine.has_unfinished());
  EXPECT_EQ(engine.metrics().kv_cache_usage, 0.0);
}

}  // namespace
}  // namespace pagoda::test
