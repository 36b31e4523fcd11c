// Layer groups: layers that chose different backends or have different shapes get runners of their own, and
// the runner sees the layer's settings (the non-causal flag reaches the kernel).
#include <gtest/gtest.h>

#include <cmath>

#include "model_test_util.h"
#include "pagoda/attention/registry.h"
#include "pagoda/core/error.h"
#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/model/load_model.h"

namespace pagoda::test {
namespace {

TEST(AttentionGroups, GroupByBackendAndShape) {
  ModelConfig c;
  c.num_layers = 5;
  c.num_heads = 8;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.sliding_window = 4096;
  c.layer_uses_sliding_window = {true, false, true, false, false};
  const BackendRegistry r = BackendRegistry::builtin(true);
  const auto triton = r.shared(BackendName::kTritonAttn), flash = r.shared(BackendName::kFlashAttn);
  // Sliding-window layers on one backend, full layers on another: two groups.
  auto groups = group_attention_layers(c, {triton, flash, triton, flash, flash}, DType::kBF16, DType::kBF16,
                                       KvLayout::kNHD, 16, true, {});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].layers, (std::vector<int>{0, 2}));
  EXPECT_EQ(groups[0].shape.sliding_window, 4096);
  EXPECT_EQ(groups[0].backend, triton);
  EXPECT_EQ(groups[1].layers, (std::vector<int>{1, 3, 4}));
  EXPECT_EQ(groups[1].shape.sliding_window, 0);
  // One backend, two shapes: still two groups; one backend and one shape: one.
  EXPECT_EQ(group_attention_layers(c, std::vector(5, flash), DType::kBF16, DType::kBF16, KvLayout::kNHD, 16, true, {}).size(), 2u);
  c.sliding_window = 0;
  EXPECT_EQ(group_attention_layers(c, std::vector(5, flash), DType::kBF16, DType::kBF16, KvLayout::kNHD, 16, true, {}).size(), 1u);
}

// Prefill logits of token 0 with a later token changed: unchanged when causal, changed when not.
TEST(AttentionGroups, NonCausalReachesTheKernel) {
  LoadedModel model = load_model(data_dir() + "/models/stories260K/hf");
  const KvCacheOptions cache{.num_blocks = 4, .block_size = 16};
  auto first_row = [&](bool causal, int32_t third) {
    auto groups = group_attention_layers(model.config,
                                         std::vector(size_t(model.config.num_layers), cpu_attention_backend()),
                                         DType::kF32, cache.dtype, KvLayout::kHND, cache.block_size, causal, {});
    CpuModelRunner runner(model, cache, std::move(groups), 1);
    ForwardBatch b;
    b.token_ids = {1, 403, third, 87, 12};
    b.query_start_loc = {0, 5};
    b.seq_lens = {5};
    b.block_tables = {0};
    b.max_blocks_per_seq = 1;
    b.logits_indices = {0};
    return runner.forward(b);
  };
  EXPECT_EQ(first_row(true, 55), first_row(true, 301));
  EXPECT_NE(first_row(false, 55), first_row(false, 301));
  EXPECT_NE(first_row(false, 55), first_row(true, 55));
}

// An fp8 cache's per-layer scales reach the kernels: a scale that saturates the cache changes the logits, a
// power of two (exact in fp8) keeps them within fp8 rounding of scale 1.
TEST(AttentionGroups, LayerKvScalesReachTheKernels) {
  LoadedModel model = load_model(data_dir() + "/reference/llama-tiny");
  auto logits = [&](float k_scale, float v_scale) {
    KvCacheOptions cache{.num_blocks = 4, .block_size = 16, .dtype = DType::kF8E4M3};
    cache.layer_scales.assign(size_t(model.config.num_layers), KvScales{});
    cache.layer_scales[1].k = k_scale;
    cache.layer_scales[1].v = v_scale;
    CpuModelRunner runner(model, cache, 1);
    ForwardBatch b;
    b.token_ids = {1, 403, 55, 87, 12, 9, 300};
    b.query_start_loc = {0, 7};
    b.seq_lens = {7};
    b.block_tables = {0};
    b.max_blocks_per_seq = 1;
    b.logits_indices = {6};
    return runner.forward(b);
  };
  const auto base = logits(1, 1);
  auto max_diff = [&](const std::vector<float>& x) {
    float d = 0;
    for (size_t i = 0; i < x.size(); ++i) d = std::max(d, std::abs(x[i] - base[i]));
    return d;
  };
  EXPECT_GT(max_diff(logits(1e-4f, 1)), 0.05f);  // k / 1e-4 saturates e4m3 (448)
  EXPECT_GT(max_diff(logits(1, 1e-4f)), 0.05f);
  EXPECT_LT(max_diff(logits(4, 0.25f)), 0.05f);  // exact powers of two: the same values up to fp8 rounding
}

TEST(AttentionGroups, EveryLayerNeedsExactlyOneGroup) {
  LoadedModel model = load_model(data_dir() + "/models/stories260K/hf");
  const KvCacheOptions cache{.num_blocks = 4, .block_size = 16};
  auto groups = group_attention_layers(model.config, std::vector(size_t(model.config.num_layers), cpu_attention_backend()),
                                       DType::kF32, cache.dtype, KvLayout::kHND, cache.block_size, true, {});
  groups[0].layers.pop_back();
  EXPECT_THROW((CpuModelRunner{model, cache, groups, 1}), Error);
  // A group whose block size is not the cache's, or whose cache format its runner does not read, is refused
  // with a message, not run.
  groups = group_attention_layers(model.config, std::vector(size_t(model.config.num_layers), cpu_attention_backend()),
                                  DType::kF32, DType::kBF16, KvLayout::kHND, 32, true, {});
  EXPECT_THROW((CpuModelRunner{model, cache, groups, 1}), Error);
  groups = group_attention_layers(model.config, std::vector(size_t(model.config.num_layers), cpu_attention_backend()),
                                  DType::kF32, std::vector<std::string>(size_t(model.config.num_layers), "turboquant_k8v4"),
                                  DType::kBF16, KvLayout::kHND, cache.block_size, true, {});
  EXPECT_THROW((CpuModelRunner{model, cache, groups, 1}), Error);
}

// Each layer's cache has its own format: the KV cache dtype of the layer resolved against the model dtype,
// grouped with the layers of the same format, sized by its backend's cache shape (spec §10), and run.
TEST(AttentionGroups, PerLayerKvCacheDtypes) {
  LoadedModel model = load_model(data_dir() + "/reference/llama-tiny");  // 3 layers, 4 KV heads of 32
  const ModelConfig& c = model.config;
  ASSERT_EQ(c.num_layers, 3);
  const auto cpu = std::vector(size_t(c.num_layers), cpu_attention_backend());
  const int block = 16;
  auto groups_of = [&](std::vector<std::string> kv) {
    return group_attention_layers(c, cpu, DType::kF32, kv, DType::kBF16, KvLayout::kHND, block, true, {});
  };
  // `auto` and bfloat16 are the same format in a bfloat16 model: two groups.
  auto groups = groups_of({"fp8_e5m2", "auto", "bfloat16"});
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_EQ(groups[0].layers, (std::vector<int>{0}));
  EXPECT_EQ(groups[0].shape.kv_dtype, DType::kF8E5M2);
  EXPECT_EQ(groups[1].layers, (std::vector<int>{1, 2}));
  EXPECT_EQ(groups[1].shape.kv_dtype, DType::kBF16);
  EXPECT_EQ(groups[1].shape.kv_preset, "");
  // Bytes of a block: kv heads x block x (K + V of head_dim elements).
  const int64_t per_element_block = int64_t(c.num_kv_heads) * block * 2 * c.head_dim;
  EXPECT_EQ(kv_block_bytes(groups[0]), per_element_block * 1);
  EXPECT_EQ(kv_block_bytes(groups[1]), per_element_block * 2);
  EXPECT_EQ(kv_block_bytes(groups), per_element_block * (1 + 2 + 2));
  // A TurboQuant layer: bytes, and its preset.
  LayerShape tq;
  set_layer_kv_cache_dtype(tq, "turboquant_3bit_nc", DType::kBF16);
  EXPECT_EQ(tq.kv_dtype, DType::kU8);
  EXPECT_EQ(tq.kv_preset, "turboquant_3bit_nc");

  // The formats reach the kernels: fp8 in layer 0 alone changes the logits, and differs from fp8 everywhere.
  auto logits = [&](std::vector<std::string> kv) {
    CpuModelRunner runner(model, KvCacheOptions{.num_blocks = 4, .block_size = block}, groups_of(kv), 1);
    ForwardBatch b;
    b.token_ids = {1, 403, 55, 87, 12, 9, 300};
    b.query_start_loc = {0, 7};
    b.seq_lens = {7};
    b.block_tables = {0};
    b.max_blocks_per_seq = 1;
    b.logits_indices = {6};
    return runner.forward(b);
  };
  const auto bf16 = logits({"auto", "auto", "auto"});
  const auto mixed = logits({"fp8_e5m2", "auto", "auto"});
  const auto fp8 = logits({"fp8_e5m2", "fp8_e5m2", "fp8_e5m2"});
  EXPECT_EQ(logits({"bfloat16", "auto", "bfloat16"}), bf16);
  EXPECT_NE(mixed, bf16);
  EXPECT_NE(mixed, fp8);
  for (float x : mixed) ASSERT_TRUE(std::isfinite(x));
}

}  // namespace
}  // namespace pagoda::test
