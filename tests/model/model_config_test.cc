// config.json parsing: the reference configs, each architecture's quirks, and the errors.
#include "pagoda/model/model_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "model_test_util.h"
#include "pagoda/core/error.h"

namespace pagoda::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using nlohmann::json;

json base(const std::string& arch) {
  return {{"architectures", {arch}}, {"vocab_size", 100}, {"hidden_size", 64}, {"intermediate_size", 128},
          {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
}

ModelConfig parse(const json& j, const std::string& gen = "") { return parse_model_config_text(j.dump(), "config.json", gen); }

std::string error_of(const json& j) {
  try {
    parse(j);
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig);
    return e.what();
  }
  return "";
}

TEST(ModelConfig, ReferenceQwen3) {
  ModelConfig c = parse_model_config(data_dir() + "/reference/qwen3-tiny");
  EXPECT_EQ(c.arch, Architecture::kQwen3);
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.checkpoint_dtype, DType::kBF16);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
}

TEST(ModelConfig, ReferenceLlamaWithLlama3Rope) {
  ModelConfig c = parse_model_config(data_dir() + "/reference/llama-tiny/config.json");
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, "llama3");
  EXPECT_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 256);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
}

TEST(ModelConfig, ReferenceQwen2AndStories) {
  ModelConfig q = parse_model_config(data_dir() + "/reference/qwen2-tiny");
  EXPECT_EQ(q.arch, Architecture::kQwen2);
  EXPECT_TRUE(q.attention_bias);
  EXPECT_FALSE(q.o_proj_bias);
  EXPECT_EQ(q.sliding_window, 0);
  ModelConfig s = parse_model_config(data_dir() + "/models/stories260K/hf");
  EXPECT_EQ(s.head_dim, 8);
  EXPECT_EQ(s.num_kv_heads, 4);
  EXPECT_EQ(s.checkpoint_dtype, DType::kF32);
  EXPECT_EQ(s.rope_theta, 10000.0);
}

// Both spellings of RoPE: rope_parameters (transformers 5) and the classic keys give the same config.
TEST(ModelConfig, RopeParametersAndClassicKeysAgree) {
  json classic = base("LlamaForCausalLM");
  classic["rope_theta"] = 500000.0;
  classic["rope_scaling"] = {{"type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                             {"original_max_position_embeddings", 8192}};
  json t5 = base("LlamaForCausalLM");
  t5["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 8.0}, {"low_freq_factor", 1.0},
                           {"high_freq_factor", 4.0}, {"original_max_position_embeddings", 8192}};
  ModelConfig a = parse(classic), b = parse(t5);
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.rope_scaling.type, "llama3");
  EXPECT_EQ(b.rope_scaling.type, "llama3");
  EXPECT_EQ(a.rope_scaling.original_max_position_embeddings, b.rope_scaling.original_max_position_embeddings);
  json bad = base("LlamaForCausalLM");
  bad["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_THAT(error_of(bad), HasSubstr("rope type 'yarn' is not supported"));
  bad["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 4.0}};
  EXPECT_THAT(error_of(bad), HasSubstr("low_freq_factor"));
}

TEST(ModelConfig, HeadDimDefaultsAndKvHeads) {
  json j = base("MistralForCausalLM");
  j.erase("num_key_value_heads");
  ModelConfig c = parse(j);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.num_kv_heads, 4);
  j["head_dim"] = 32;
  EXPECT_EQ(parse(j).head_dim, 32);
}

TEST(ModelConfig, SlidingWindowQuirks) {
  json m = base("MistralForCausalLM");
  m["sliding_window"] = 4096;
  ModelConfig c = parse(m);
  EXPECT_EQ(c.sliding_window, 4096);
  EXPECT_TRUE(c.uses_sliding_window(0) && c.uses_sliding_window(3));
  m["sliding_window"] = nullptr;
  EXPECT_FALSE(parse(m).uses_sliding_window(0));

  json q = base("Qwen2ForCausalLM");
  q["sliding_window"] = 128;
  q["use_sliding_window"] = true;
  q["max_window_layers"] = 2;
  c = parse(q);
  EXPECT_FALSE(c.uses_sliding_window(1));
  EXPECT_TRUE(c.uses_sliding_window(2));
  q["use_sliding_window"] = false;
  EXPECT_FALSE(parse(q).uses_sliding_window(3));
  json q3 = base("Qwen3ForCausalLM");
  q3["sliding_window"] = 64;
  q3["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "sliding_attention"};
  c = parse(q3);
  EXPECT_EQ(c.layer_uses_sliding_window, (std::vector<bool>{false, true, false, true}));
  q3["layer_types"] = {"full_attention"};
  EXPECT_THAT(error_of(q3), HasSubstr("one type per layer"));
  q3["layer_types"] = {"full_attention", "chunked_attention", "full_attention", "full_attention"};
  EXPECT_THAT(error_of(q3), HasSubstr("chunked_attention"));
  q3["layer_types"] = {"sliding_attention", "full_attention", "full_attention", "full_attention"};
  q3["sliding_window"] = nullptr;
  EXPECT_THAT(error_of(q3), HasSubstr("sliding_window"));
}

TEST(ModelConfig, BiasNormDtypeAndQuantization) {
  json l = base("LlamaForCausalLM");
  l["attention_bias"] = true;
  l["torch_dtype"] = "float16";
  ModelConfig c = parse(l);
  EXPECT_TRUE(c.attention_bias && c.o_proj_bias);
  EXPECT_EQ(c.checkpoint_dtype, DType::kF16);
  l["dtype"] = "bfloat16";  // transformers 5 key wins
  EXPECT_EQ(parse(l).checkpoint_dtype, DType::kBF16);
  l["dtype"] = "float64";
  EXPECT_THAT(error_of(l), HasSubstr("float64"));
  l.erase("dtype");
  l["quantization_config"] = {{"quant_method", "compressed-tensors"},
                              {"kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}, {"strategy", "tensor"}}}};
  c = parse(l);
  EXPECT_TRUE(c.has_kv_cache_scheme);
  EXPECT_EQ(c.kv_cache_scheme_strategy, "tensor");
  l["quantization_config"] = {{"quant_method", "gptq"}, {"bits", 4}};
  EXPECT_THAT(error_of(l), HasSubstr("quantized weights"));
  json q3 = base("Qwen3ForCausalLM");
  EXPECT_TRUE(parse(q3).qk_norm);
}

TEST(ModelConfig, GenerationConfigOverridesTokens) {
  json j = base("Qwen3ForCausalLM");
  j["bos_token_id"] = 5;
  j["eos_token_id"] = 6;
  EXPECT_EQ(parse(j).eos_token_ids, std::vector<int>{6});
  ModelConfig c = parse(j, R"({"bos_token_id": 7, "eos_token_id": [8, 9]})");
  EXPECT_EQ(c.bos_token_id, 7);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{8, 9}));
  EXPECT_THROW(parse(j, "[]"), Error);
}

TEST(ModelConfig, Errors) {
  EXPECT_THAT(error_of(base("GPT2LMHeadModel")),
              AllOf(HasSubstr("unknown architecture 'GPT2LMHeadModel'"), HasSubstr("Qwen3ForCausalLM")));
  json j = base("LlamaForCausalLM");
  j.erase("architectures");
  EXPECT_THAT(error_of(j), HasSubstr("missing 'architectures'"));
  j["model_type"] = "qwen2";
  EXPECT_EQ(parse(j).arch, Architecture::kQwen2);
  for (const char* field : {"vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads"}) {
    json k = base("LlamaForCausalLM");
    k.erase(field);
    EXPECT_THAT(error_of(k), AllOf(HasSubstr("config.json"), HasSubstr(std::string("missing required field '") + field)));
  }
  json k = base("LlamaForCausalLM");
  k["hidden_size"] = "big";
  EXPECT_THAT(error_of(k), HasSubstr("'hidden_size' must be an integer"));
  k = base("LlamaForCausalLM");
  k["num_key_value_heads"] = 3;
  EXPECT_THAT(error_of(k), HasSubstr("not a multiple"));
  k = base("LlamaForCausalLM");
  k["hidden_size"] = 66;
  EXPECT_THAT(error_of(k), HasSubstr("no head_dim"));
  k = base("LlamaForCausalLM");
  k["hidden_act"] = "gelu";
  EXPECT_THAT(error_of(k), HasSubstr("hidden_act"));
  EXPECT_THROW(parse_model_config_text("{", "config.json"), Error);
  EXPECT_THROW(parse_model_config_text("[]", "config.json"), Error);
  try {
    parse_model_config("/nonexistent/model");
    ADD_FAILURE();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
    EXPECT_THAT(std::string(e.what()), AllOf(HasSubstr("'/nonexistent/model'"), HasSubstr("does not exist")));
  }
}

}  // namespace
}  // namespace pagoda::test
