// stories260K (a real trained model, float32, head_dim 8, tied embeddings): greedy from BOS reproduces
// llama2.c's golden 256 tokens.
#include <chrono>
#include <cstdio>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model_test_util.h"
#include "pagoda/model/load_model.h"

namespace pagoda::test {
namespace {

using nlohmann::json;

TEST(Stories260K, Greedy256TokensFromBosMatchGolden) {
  const std::string dir = data_dir() + "/models/stories260K";
  const json golden = json::parse(read_file(dir + "/golden.json"));
  const auto want = golden["hf_reference"]["greedy_token_ids"].get<std::vector<int32_t>>();
  ASSERT_EQ(want.size(), 256u);
  LoadedModel model = load_model(dir + "/hf");
  EXPECT_EQ(model.config.bos_token_id, 1);
  EXPECT_TRUE(model.config.tie_word_embeddings);
  EXPECT_EQ(model.config.head_dim, 8);
  for (int block_size : {128, 16}) {
    CpuModelRunner runner(model, {.num_blocks = 32, .block_size = block_size}, 1);
    BlockAllocator alloc(32);
    Sequence s;
    s.prompt = {model.config.bos_token_id};
    s.max_new_tokens = 256;
    std::vector<Sequence> seqs{std::move(s)};
    const auto t0 = std::chrono::steady_clock::now();
    run_greedy(runner, alloc, seqs, 1);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_EQ(seqs[0].output, want) << "block size " << block_size;
    std::printf("[ stories260K ] block %d: 256 greedy tokens in %.3f s = %.0f tokens/s (1 thread)\n", block_size, secs,
                256 / secs);
  }
}

// First-position top-5 logits of the HF float32 run (golden.json hf_reference.first_positions).
TEST(Stories260K, FirstPositionsTop5Logits) {
  // Float32 vs float32 with a different summation order; hidden size 64, 5 layers: see kLogitTol in
  // reference_models_test.cc (the same bound, with K = 172 instead of 512, is smaller).
  constexpr double kTol = 1e-4;
  const std::string dir = data_dir() + "/models/stories260K";
  const json first = json::parse(read_file(dir + "/golden.json"))["hf_reference"]["first_positions"];
  LoadedModel model = load_model(dir + "/hf");
  CpuModelRunner runner(model, {.num_blocks = 1, .block_size = 128}, 1);
  BlockAllocator alloc(1);
  Sequence s;
  s.prompt = first["input_ids"].get<std::vector<int32_t>>();
  s.max_new_tokens = 1;
  s.keep_prompt_logits = true;
  std::vector<Sequence> seqs{std::move(s)};
  run_greedy(runner, alloc, seqs, 1 << 20);
  const auto& L = seqs[0].prompt_logits;
  ASSERT_EQ(L.size(), first["top5_ids"].size());
  for (size_t pos = 0; pos < L.size(); ++pos)
    for (size_t k = 0; k < 5; ++k) {
      const int id = first["top5_ids"][pos][k].get<int>();
      EXPECT_NEAR(L[pos][size_t(id)], first["top5_logits"][pos][k].get<double>(), kTol) << "pos " << pos << " rank " << k;
    }
}

}  // namespace
}  // namespace pagoda::test
