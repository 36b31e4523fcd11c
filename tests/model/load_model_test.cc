// load_model: dummy weights, the built-in dummy:tiny, and the checkpoint/config mismatch errors.
#include "pagoda/model/load_model.h"

#include <cmath>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model_test_util.h"
#include "pagoda/core/error.h"
#include "safetensors_writer.h"

namespace pagoda::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using nlohmann::json;

LoadOptions options(LoadFormat format, std::optional<DType> dtype = std::nullopt, uint64_t seed = 0) {
  LoadOptions o;
  o.load_format = format;
  o.dtype = dtype;
  o.seed = seed;
  return o;
}

TEST(LoadModel, DummyTinyRunsWithoutFiles) {
  LoadedModel m = load_model(kDummyTinyModel, options(LoadFormat::kAuto, std::nullopt, 7));
  EXPECT_EQ(m.config.arch, Architecture::kQwen3);
  EXPECT_EQ(m.config.vocab_size, 512);
  EXPECT_EQ(m.config.hidden_size, 256);
  CpuModelRunner runner(m, {.num_blocks = 16, .block_size = 128}, 2);
  BlockAllocator alloc(16);
  std::vector<Sequence> seqs(3);
  seqs[0].prompt = {1, 5, 9, 200, 31};
  seqs[1].prompt = {1};
  seqs[2].prompt = std::vector<int32_t>(150, 42);
  for (auto& s : seqs) s.max_new_tokens = 16;
  run_greedy(runner, alloc, seqs, 32);
  for (auto& s : seqs) {
    ASSERT_EQ(s.output.size(), 16u);
    for (float x : s.last_prompt_logits) ASSERT_TRUE(std::isfinite(x));
    for (int32_t t : s.output) ASSERT_TRUE(t >= 0 && t < 512);
  }
  // Same seed, same weights, same tokens (run alone this time).
  LoadedModel m2 = load_model(kDummyTinyModel, options(LoadFormat::kAuto, std::nullopt, 7));
  CpuModelRunner r2(m2, {.num_blocks = 16, .block_size = 16}, 1);
  BlockAllocator a2(16);
  std::vector<Sequence> one(1);
  one[0].prompt = seqs[0].prompt;
  one[0].max_new_tokens = 16;
  run_greedy(r2, a2, one, 1 << 20);
  EXPECT_EQ(one[0].output, seqs[0].output);
  // Logits spread like a real model's: not all equal, not huge.
  float lo = 1e9f, hi = -1e9f;
  for (float x : seqs[0].last_prompt_logits) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GT(hi - lo, 0.1f);
  EXPECT_LT(hi - lo, 100.0f);
  EXPECT_THROW(load_model(kDummyTinyModel, options(LoadFormat::kSafetensors)), Error);
}

TEST(LoadModel, DummyFormatUsesTheConfigShapes) {
  LoadedModel m = load_model(data_dir() + "/reference/llama-tiny", options(LoadFormat::kDummy, DType::kF16));
  EXPECT_EQ(m.weights->layers.size(), 3u);
  EXPECT_EQ(m.weights->lm_head.data, m.weights->embed.data);  // tied
  EXPECT_EQ(m.weights->layers[0].q.dtype, DType::kF16);
  EXPECT_EQ(m.weights->layers[0].gate.rows, 384);
  EXPECT_EQ(parse_load_format("dummy"), LoadFormat::kDummy);
  EXPECT_THROW(parse_load_format("pt"), Error);
}

TEST(LoadModel, DtypeOverrideConvertsWeights) {
  LoadedModel bf = load_model(data_dir() + "/reference/qwen2-tiny");
  LoadedModel f32 = load_model(data_dir() + "/reference/qwen2-tiny", options(LoadFormat::kAuto, DType::kF32));
  EXPECT_EQ(bf.weights->layers[1].v.dtype, DType::kBF16);
  EXPECT_EQ(f32.weights->layers[1].v.dtype, DType::kF32);
  // bf16 -> f32 is exact, so both give the same logits.
  auto run = [](const LoadedModel& m) {
    CpuModelRunner r(m, {.num_blocks = 4, .block_size = 16}, 1);
    BlockAllocator a(4);
    std::vector<Sequence> s(1);
    s[0].prompt = {3, 1, 4, 1, 5, 9, 2, 6};
    s[0].max_new_tokens = 1;
    run_greedy(r, a, s, 8);
    return s[0].last_prompt_logits;
  };
  EXPECT_EQ(run(bf), run(f32));
}

// A small Llama checkpoint written by the test, then broken in one way at a time.
class BadCheckpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir("bad_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    cfg_ = {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 16}, {"hidden_size", 8}, {"intermediate_size", 12},
            {"num_hidden_layers", 1}, {"num_attention_heads", 2}, {"num_key_value_heads", 1}, {"tie_word_embeddings", true}};
    write_text(dir_ / "config.json", cfg_.dump());
    auto f = [](int64_t n) { return f32_bytes(std::vector<float>(size_t(n), 0.01f)); };
    tensors_ = {{"model.embed_tokens.weight", "F32", {16, 8}, f(128)},
                {"model.norm.weight", "F32", {8}, f(8)},
                {"model.layers.0.input_layernorm.weight", "F32", {8}, f(8)},
                {"model.layers.0.post_attention_layernorm.weight", "F32", {8}, f(8)},
                {"model.layers.0.self_attn.q_proj.weight", "F32", {8, 8}, f(64)},
                {"model.layers.0.self_attn.k_proj.weight", "F32", {4, 8}, f(32)},
                {"model.layers.0.self_attn.v_proj.weight", "F32", {4, 8}, f(32)},
                {"model.layers.0.self_attn.o_proj.weight", "F32", {8, 8}, f(64)},
                {"model.layers.0.mlp.gate_proj.weight", "F32", {12, 8}, f(96)},
                {"model.layers.0.mlp.up_proj.weight", "F32", {12, 8}, f(96)},
                {"model.layers.0.mlp.down_proj.weight", "F32", {8, 12}, f(96)}};
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string load_error() {
    write_bytes(dir_ / "model.safetensors", st_image(tensors_));
    try {
      load_model(dir_.string());
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
  std::filesystem::path dir_;
  json cfg_;
  std::vector<StTensor> tensors_;
};

TEST_F(BadCheckpoint, ValidOneLoads) { EXPECT_EQ(load_error(), ""); }

TEST_F(BadCheckpoint, MissingTensor) {
  tensors_.erase(tensors_.begin() + 6);  // v_proj
  EXPECT_THAT(load_error(), AllOf(HasSubstr("missing tensor 'model.layers.0.self_attn.v_proj.weight'"), HasSubstr("layer 0"),
                                  HasSubstr(dir_.string())));
}

TEST_F(BadCheckpoint, ShapeMismatch) {
  tensors_[5] = {"model.layers.0.self_attn.k_proj.weight", "F32", {8, 8}, f32_bytes(std::vector<float>(64, 0.0f))};
  EXPECT_THAT(load_error(), AllOf(HasSubstr("'model.layers.0.self_attn.k_proj.weight'"), HasSubstr("model.safetensors"),
                                  HasSubstr("shape (8, 8)"), HasSubstr("(4, 8)")));
}

TEST_F(BadCheckpoint, DtypeMismatch) {
  tensors_[1] = {"model.norm.weight", "I32", {8}, std::vector<uint8_t>(32, 0)};
  EXPECT_THAT(load_error(), AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("dtype I32"), HasSubstr("F32, BF16 or F16")));
  tensors_[1] = {"model.norm.weight", "F64", {8}, std::vector<uint8_t>(64, 0)};
  EXPECT_THAT(load_error(), HasSubstr("dtype F64"));
}

TEST_F(BadCheckpoint, UnknownArchitectureAndUntiedHead) {
  cfg_["architectures"] = {"FalconForCausalLM"};
  write_text(dir_ / "config.json", cfg_.dump());
  EXPECT_THAT(load_error(), HasSubstr("unknown architecture 'FalconForCausalLM'"));
  cfg_["architectures"] = {"LlamaForCausalLM"};
  cfg_["tie_word_embeddings"] = false;
  write_text(dir_ / "config.json", cfg_.dump());
  EXPECT_THAT(load_error(), HasSubstr("missing tensor 'lm_head.weight'"));
}

TEST_F(BadCheckpoint, NoWeightsOrNoFolder) {
  try {
    load_model(dir_.string());
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_THAT(std::string(e.what()), HasSubstr("model.safetensors"));
  }
  EXPECT_THROW(load_model((dir_ / "nope").string()), Error);
}

// A config.json whose sizes disagree with the weights fails on the first tensor that disagrees, before any
// weight is copied: the layers and the vocabulary it claims are never allocated.
TEST_F(BadCheckpoint, ConfigLargerThanTheWeightsFailsBeforeAllocating) {
  cfg_["num_hidden_layers"] = 1000;
  write_text(dir_ / "config.json", cfg_.dump());
  EXPECT_THAT(load_error(), HasSubstr("missing tensor 'model.layers.1.input_layernorm.weight'"));
  cfg_["num_hidden_layers"] = 1;
  cfg_["vocab_size"] = 1 << 24;
  write_text(dir_ / "config.json", cfg_.dump());
  EXPECT_THAT(load_error(), AllOf(HasSubstr("'model.embed_tokens.weight'"), HasSubstr("shape (16, 8)"), HasSubstr("(16777216, 8)")));
}

// Random weights are sized by config.json alone: sizes inside every bound can still multiply to more
// memory than the machine has, which is refused before allocating.
TEST_F(BadCheckpoint, DummyWeightsLargerThanMemoryAreRefused) {
  cfg_["vocab_size"] = 1 << 24;
  cfg_["hidden_size"] = 1 << 16;
  cfg_["num_attention_heads"] = 64;
  cfg_["num_key_value_heads"] = 8;
  cfg_["intermediate_size"] = 1 << 20;
  cfg_["num_hidden_layers"] = 1024;
  write_text(dir_ / "config.json", cfg_.dump());
  try {
    load_model(dir_.string(), options(LoadFormat::kDummy));
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("random weights"), HasSubstr("do not fit in this machine's")));
  }
}

TEST_F(BadCheckpoint, HostileShardIndex) {
  const auto index = dir_ / "model.safetensors.index.json";
  auto index_error = [&](const std::string& text) {
    write_text(index, text);
    try {
      load_model(dir_.string());
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
      EXPECT_LT(std::string(e.what()).size(), 400u);
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(index_error(R"({"weight_map": )" + std::string(100000, '[') + std::string(100000, ']') + "}"),
              AllOf(HasSubstr("model.safetensors.index.json"), HasSubstr("nested deeper")));
  EXPECT_THAT(index_error(R"({"weight_map": {"model.norm.weight": [1, 2, 3]}})"),
              AllOf(HasSubstr("'model.norm.weight'"), HasSubstr("a list of 3 items")));
  EXPECT_THAT(index_error(R"({"weight_map": {"model.norm.weight": ")" + std::string(100000, 'a') + "/b\"}}"),
              HasSubstr("is not a plain file name"));
}

// Mistral with a sliding window (dummy weights): a window wider than the sequence changes nothing, a narrow one
// changes the logits, and chunked prefill + decode agrees with a one-shot prefill under the window.
TEST(CpuModelRunner, MistralSlidingWindow) {
  auto dir = temp_dir("mistral");
  auto logits_for = [&](json window, int chunk) {
    json cfg = {{"architectures", {"MistralForCausalLM"}}, {"vocab_size", 64}, {"hidden_size", 64}, {"intermediate_size", 96},
                {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}, {"sliding_window", window},
                {"torch_dtype", "float32"}};
    write_text(dir / "config.json", cfg.dump());
    LoadedModel m = load_model(dir.string(), options(LoadFormat::kDummy, std::nullopt, 3));
    CpuModelRunner r(m, {.num_blocks = 8, .block_size = 4}, 2);
    BlockAllocator a(8);
    std::vector<Sequence> s(1);
    for (int i = 0; i < 20; ++i) s[0].prompt.push_back((i * 7) % 64);
    s[0].max_new_tokens = 4;
    run_greedy(r, a, s, chunk);
    return std::make_pair(s[0].last_prompt_logits, s[0].output);
  };
  auto none = logits_for(nullptr, 100);
  EXPECT_EQ(logits_for(1000, 100), none);
  auto narrow = logits_for(5, 100);
  EXPECT_NE(narrow.first, none.first);
  EXPECT_EQ(logits_for(5, 3), narrow);
  std::filesystem::remove_all(dir);
}

TEST(CpuModelRunner, RejectsMalformedBatches) {
  LoadedModel m = load_model(kDummyTinyModel);
  CpuModelRunner r(m, {.num_blocks = 2, .block_size = 16}, 1);
  ForwardBatch b;
  b.token_ids = {1, 2};
  b.query_start_loc = {0, 2};
  b.seq_lens = {2};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.logits_indices = {1};
  EXPECT_EQ(r.forward(b).size(), 512u);
  auto bad = b;
  bad.seq_lens = {1};
  EXPECT_THROW(r.forward(bad), Error);
  bad = b;
  bad.block_tables = {5};
  EXPECT_THROW(r.forward(bad), Error);
  bad = b;
  bad.token_ids = {1, 9999};
  EXPECT_THROW(r.forward(bad), Error);
  bad = b;
  bad.seq_lens = {40};
  EXPECT_THROW(r.forward(bad), Error);
  bad = b;
  bad.logits_indices = {2};
  EXPECT_THROW(r.forward(bad), Error);
  bad = b;
  bad.query_start_loc = {0, 1};
  EXPECT_THROW(r.forward(bad), Error);
}

}  // namespace
}  // namespace pagoda::test
