// The GPU path with batch invariance on (label gpu): a prompt's logits are bitwise equal alone and inside
// batches of 2, 7 and 33, with TRITON_ATTN and FLASH_ATTN (FA2, and FA3 on SM 9.0), bf16 and fp8 KV, with
// the decode step of a lone sequence replayed from a CUDA graph and the batched one run eagerly.
#include "batch_invariance.h"
#include "model_test_util.h"
#include "pagoda/attention/registry.h"
#include "pagoda/model/cuda/cuda_model_runner.h"
#include "pagoda/model/load_model.h"
#include "pagoda/platform/device.h"

namespace pagoda::test {
namespace {

TEST(BatchInvarianceGpu, LogitsAreBitwiseEqualAloneAndInBatches) {
  const auto device = detect_cuda_device();
  if (!device) GTEST_SKIP() << "skipped: no CUDA device";
  LoadOptions lo;
  lo.dtype = DType::kBF16;
  LoadedModel model = load_model(data_dir() + "/reference/qwen3-tiny", lo);
  const BackendRegistry registry = BackendRegistry::builtin(false);
  struct Case {
    BackendName backend;
    int fa_version;
    DType kv_dtype;
  };
  std::vector<Case> cases = {{BackendName::kTritonAttn, 2, DType::kBF16}, {BackendName::kTritonAttn, 2, DType::kF8E4M3},
                             {BackendName::kFlashAttn, 2, DType::kBF16}, {BackendName::kFlashAttn, 2, DType::kF8E4M3}};
  if (device->cc->major == 9)
    cases.insert(cases.end(), {{BackendName::kFlashAttn, 3, DType::kBF16}, {BackendName::kFlashAttn, 3, DType::kF8E4M3}});
  constexpr int kBlocksPerSeq = 4;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(backend_name_str(c.backend)) + " FA" + std::to_string(c.fa_version) + " kv " +
                 std::string(dtype_name(c.kv_dtype)));
    RunnerOptions ro;
    ro.batch_invariant = true;
    ro.flash_attn_version = c.fa_version;
    CudaRunnerOptions o;
    o.dtype = DType::kBF16;
    o.kv_dtype = c.kv_dtype;
    o.block_size = 16;
    o.attention = group_attention_layers(
        model.config, std::vector<std::shared_ptr<const AttentionBackend>>(size_t(model.config.num_layers), registry.shared(c.backend)),
        o.dtype, o.kv_dtype, o.layout, o.block_size, true, ro);
    o.batch_invariant = true;
    o.num_blocks_override = 33 * kBlocksPerSeq;
    o.max_num_tokens = 2048;
    o.max_num_seqs = 64;
    o.max_model_len = 64;
    CudaModelRunner runner(model, o);
    expect_batch_invariant(runner, {2, 7, 33}, kBlocksPerSeq, 20261204u);
  }
}

}  // namespace
}  // namespace pagoda::test
