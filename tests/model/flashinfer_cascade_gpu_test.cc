// FLASHINFER's cascade attention through the CUDA model runner (label gpu). Sequences whose block tables
// share a prompt prefix's blocks (what the prefix cache gives requests with a common prefix; `generate` runs
// one prompt, so the steps are built here) get the same greedy tokens with use_cascade_attention as without
// it. Their decode steps run eagerly with cascade on (a captured grid replays no plan, so the runner's
// wants_eager() keeps them off the graph) and replay CUDA graphs with it off; a decode step with no shared
// prefix replays its graph either way.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>

#include <gtest/gtest.h>

#include "model_test_util.h"
#include "pagoda/attention/registry.h"
#include "pagoda/model/cuda/cuda_model_runner.h"
#include "pagoda/model/load_model.h"
#include "pagoda/platform/device.h"

namespace pagoda::test {
namespace {

constexpr int kBlock = 16;
constexpr int kPrefix = 96;        // 6 shared blocks: at least kFiMinCascadeKeys (32) keys
constexpr int kBlocksPerSeq = 10;  // prefix + suffix (<= 12) + decode steps (<= 20) < 160 keys
constexpr int kSeqs = 5;

std::unique_ptr<CudaModelRunner> make_runner(const LoadedModel& model, bool cascade) {
  const BackendRegistry registry = BackendRegistry::builtin(false);
  RunnerOptions ro;
  ro.cascade = cascade;
  CudaRunnerOptions o;
  o.dtype = o.kv_dtype = DType::kBF16;
  o.block_size = kBlock;
  o.attention = group_attention_layers(
      model.config,
      std::vector<std::shared_ptr<const AttentionBackend>>(size_t(model.config.num_layers), registry.shared(BackendName::kFlashInfer)),
      o.dtype, o.kv_dtype, o.layout, o.block_size, true, ro);
  o.num_blocks_override = 6 + kSeqs * kBlocksPerSeq;
  o.max_num_tokens = 512;
  o.max_num_seqs = 8;
  o.max_model_len = kBlocksPerSeq * kBlock;
  auto r = std::make_unique<CudaModelRunner>(model, o);
  r->capture_decode_graphs();
  r->set_profiling(true);
  return r;
}

struct Seq {
  std::vector<int32_t> tokens;  // the prompt, then the fed tokens
  std::vector<int32_t> blocks;  // [kBlocksPerSeq]
  int done = 0;                 // tokens already in the cache
};

// One step: every sequence in `which` adds its tokens past `done` (a prefill chunk or one decode token);
// forward() returns the logits of each one's last token.
ForwardBatch make_batch(std::vector<Seq>& seqs, const std::vector<int>& which) {
  ForwardBatch b;
  b.max_blocks_per_seq = kBlocksPerSeq;
  b.query_start_loc.push_back(0);
  for (int i : which) {
    Seq& s = seqs[size_t(i)];
    b.token_ids.insert(b.token_ids.end(), s.tokens.begin() + s.done, s.tokens.end());
    b.query_start_loc.push_back(int32_t(b.token_ids.size()));
    b.seq_lens.push_back(int32_t(s.tokens.size()));
    b.block_tables.insert(b.block_tables.end(), s.blocks.begin(), s.blocks.end());
    b.logits_indices.push_back(int32_t(b.token_ids.size()) - 1);
    s.done = int(s.tokens.size());
  }
  return b;
}

TEST(FlashInferCascadeGpu, SharedPrefixDecodesEagerlyToTheSameTokens) {
  const auto device = detect_cuda_device();
  if (!device) GTEST_SKIP() << "skipped: no CUDA device";
  LoadOptions lo;
  lo.dtype = DType::kBF16;
  LoadedModel model = load_model(data_dir() + "/reference/qwen3-tiny", lo);  // head size 64: FLASHINFER's
  const int vocab = model.config.vocab_size;
  auto on = make_runner(model, true), off = make_runner(model, false);

  std::mt19937 rng(20261205u);
  std::vector<int32_t> prefix(kPrefix);
  for (auto& t : prefix) t = int32_t(rng() % uint32_t(vocab));
  std::vector<Seq> seqs(kSeqs);
  for (int i = 0; i < kSeqs; ++i) {
    seqs[size_t(i)].tokens = prefix;
    for (int k = 0; k < 3 + 2 * i; ++k) seqs[size_t(i)].tokens.push_back(int32_t(rng() % uint32_t(vocab)));
    for (int k = 0; k < kBlocksPerSeq; ++k)
      seqs[size_t(i)].blocks.push_back(k < kPrefix / kBlock ? k : kPrefix / kBlock + i * kBlocksPerSeq + k);
    if (i > 0) seqs[size_t(i)].done = kPrefix;  // a prefix-cache hit: the shared blocks are sequence 0's
  }
  // Step 0: sequence 0's whole prompt writes the shared blocks. Step 1: the others' suffixes over the cached
  // prefix with sequence 0's first decode token. Then decode steps of all five, and last a decode step of
  // sequence 0 alone (no group).
  std::vector<std::vector<int>> steps = {{0}, {0, 1, 2, 3, 4}};
  for (int k = 0; k < 16; ++k) steps.push_back({0, 1, 2, 3, 4});
  steps.push_back({0});
  // Both runners are fed the same tokens (cascade off's greedy ones), so each row is compared on equal
  // inputs. Cascade changes only the order of the softmax sums (the prefix and the suffix merged by
  // log-sum-exp) in float32 before the bf16 rounding of the attention output, so a bf16 logit moves by a
  // rounding or two: as in generate_gpu_test, the greedy tokens must agree wherever the top-1/top-2 margin
  // is at least 0.1.
  int compared = 0, rows = 0;
  double max_diff = 0;
  for (size_t st = 0; st < steps.size(); ++st) {
    const std::vector<int>& which = steps[st];
    const ForwardBatch b = make_batch(seqs, which);
    const std::vector<float> lo_off = off->forward(b), lo_on = on->forward(b);
    ASSERT_EQ(lo_off.size(), size_t(which.size()) * vocab);
    ASSERT_EQ(lo_on.size(), lo_off.size());
    for (size_t r = 0; r < which.size(); ++r) {
      const float* a = lo_off.data() + r * vocab;
      const float* c = lo_on.data() + r * vocab;
      const int top = int(std::max_element(a, a + vocab) - a);
      float second = -INFINITY;
      for (int v = 0; v < vocab; ++v)
        if (v != top) second = std::max(second, a[v]);
      for (int v = 0; v < vocab; ++v) max_diff = std::max(max_diff, std::fabs(double(a[v]) - double(c[v])));
      ++rows;
      if (a[top] - second >= 0.1f) {
        ++compared;
        EXPECT_EQ(int(std::max_element(c, c + vocab) - c), top) << "step " << st << " row " << r;
      }
      seqs[size_t(which[r])].tokens.push_back(int32_t(top));
    }
  }
  std::printf("[cascade] %d of %d rows compared, max |logit difference| %.4g\n", compared, rows, max_diff);
  EXPECT_GT(compared, rows / 2);

  const auto& pon = on->step_profiles();
  const auto& poff = off->step_profiles();
  ASSERT_EQ(pon.size(), steps.size());
  ASSERT_EQ(poff.size(), steps.size());
  for (size_t st = 2; st + 1 < steps.size(); ++st) {
    EXPECT_FALSE(pon[st].graph) << "step " << st << ": a shared-prefix decode step replayed a graph with cascade on";
    EXPECT_TRUE(poff[st].graph) << "step " << st << ": a decode step ran eagerly with cascade off";
  }
  EXPECT_TRUE(pon.back().graph) << "a decode step without a shared prefix ran eagerly with cascade on";
  EXPECT_TRUE(poff.back().graph);
}

}  // namespace
}  // namespace pagoda::test
