// The CPU path is batch invariant: a prompt's logits are bitwise equal alone and inside batches of 2, 7 and
// 33 (every op computes a row with the same operation sequence whatever the other rows are).
#include <gtest/gtest-spi.h>

#include "batch_invariance.h"
#include "model_test_util.h"
#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/model/load_model.h"

namespace pagoda::test {
namespace {

TEST(BatchInvariance, CpuLogitsAreBitwiseEqualAloneAndInBatches) {
  for (const std::string& dir : {data_dir() + "/models/stories260K/hf", data_dir() + "/reference/qwen3-tiny"}) {
    SCOPED_TRACE(dir);
    LoadedModel model = load_model(dir);
    constexpr int kBlockSize = 16, kBlocksPerSeq = 4;  // prompts + 1 token <= 64 positions
    for (int threads : {1, 2}) {
      CpuModelRunner runner(model, {.num_blocks = 33 * kBlocksPerSeq, .block_size = kBlockSize}, threads);
      expect_batch_invariant(runner, {2, 7, 33}, kBlocksPerSeq, 20261204u + uint32_t(threads));
    }
  }
}

// The checker itself: a runner whose output depends on the batch must fail it.
class BatchDependentRunner final : public ModelRunner {
 public:
  explicit BatchDependentRunner(ModelRunner& inner) : inner_(inner) {}
  std::vector<float> forward(const ForwardBatch& b) override {
    std::vector<float> l = inner_.forward(b);
    for (float& x : l) x += 1e-3f * float(b.num_seqs() - 1);
    return l;
  }
  const ModelConfig& config() const override { return inner_.config(); }
  const KvCacheOptions& cache_options() const override { return inner_.cache_options(); }

 private:
  ModelRunner& inner_;
};

TEST(BatchInvariance, CheckerCatchesABatchDependentRunner) {
  LoadedModel model = load_model(data_dir() + "/models/stories260K/hf");
  CpuModelRunner inner(model, {.num_blocks = 8, .block_size = 16}, 1);
  BatchDependentRunner runner(inner);
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    expect_batch_invariant(runner, {2}, 4, 7u);
  }
  EXPECT_EQ(failures.size(), 2);  // prefill and decode
}

}  // namespace
}  // namespace pagoda::test
