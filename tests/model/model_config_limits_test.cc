// config.json / generation_config.json from a hostile or broken source: deep nesting, out-of-range and
// fractional numbers, sizes that would drive huge allocations, inconsistent heads. Each must be one short
// config error naming the file and the field, never a crash or a silently wrong value.
#include <cstdint>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/model/model_config.h"

namespace pagoda::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;
using nlohmann::json;

json base() {
  return {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 512}, {"hidden_size", 64}, {"intermediate_size", 128},
          {"num_hidden_layers", 4}, {"num_attention_heads", 4}, {"num_key_value_heads", 2}};
}

// The error of parsing `config` (+ generation_config.json `gen`), checked to be one short config-kind line.
std::string error_of(const std::string& config, const std::string& gen = "") {
  try {
    parse_model_config_text(config, "/m/config.json", gen, "/m/generation_config.json");
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.exit_code(), 2) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_LT(what.size(), 300u) << what;
    return what;
  }
  ADD_FAILURE() << "no error for " << config.substr(0, 200) << " / " << gen.substr(0, 200);
  return "";
}
std::string error_of(const json& config) { return error_of(config.dump()); }

std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

TEST(ModelConfigLimits, DeepNestingIsRefusedBeforeParsing) {
  // 200k levels: parsing, copying or dump()ing this recursively would overflow the stack.
  EXPECT_THAT(error_of(R"({"a": )" + nested(200000) + "}"), AllOf(HasSubstr("/m/config.json"), HasSubstr("nested deeper")));
  json j = base();
  j["hidden_act"] = json::array();
  std::string text = j.dump();
  text.replace(text.find("[]"), 2, nested(50000));
  EXPECT_THAT(error_of(text), AllOf(HasSubstr("/m/config.json"), HasSubstr("nested deeper than 128")));
  EXPECT_THAT(error_of(base().dump(), R"({"eos_token_id": )" + nested(100000) + "}"),
              AllOf(HasSubstr("/m/generation_config.json"), HasSubstr("nested deeper")));
}

TEST(ModelConfigLimits, MessagesNeverCarryAWholeValue) {
  json j = base();
  json deep = "gelu";
  for (int i = 0; i < 100; ++i) deep = json::array({deep});  // under the depth limit
  j["hidden_act"] = deep;
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("hidden_act"), HasSubstr("a list of 1 item")));
  j["hidden_act"] = std::string(1 << 20, 'g');
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("hidden_act"), HasSubstr("(1048576 bytes)")));
  j = base();
  j["architectures"] = {std::string(100000, 'X')};
  EXPECT_THAT(error_of(j), HasSubstr("unknown architecture"));
  j = base();
  j["torch_dtype"] = std::string(100000, 'f');
  EXPECT_THAT(error_of(j), HasSubstr("torch_dtype"));
}

TEST(ModelConfigLimits, EosTokenIdMustBeATokenOfTheModel) {
  for (const char* bad : {"1099511627776", "-1", "1.5", "\"2\"", "true", "512", "[2, 1099511627776]", "[2, -1]", "[[2]]"}) {
    json j = base();
    j["eos_token_id"] = json::parse(bad);
    EXPECT_THAT(error_of(j), AllOf(HasSubstr("/m/config.json"), HasSubstr("eos_token_id"))) << bad;
    // The same in generation_config.json, which overrides config.json.
    EXPECT_THAT(error_of(base().dump(), std::string(R"({"eos_token_id": )") + bad + "}"),
                AllOf(HasSubstr("/m/generation_config.json"), HasSubstr("eos_token_id"))) << bad;
  }
  json j = base();
  j["eos_token_id"] = json::parse("1099511627776");
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("1099511627776"), HasSubstr("vocab_size 512"), HasSubstr("0..511")));
  j["eos_token_id"] = json::array({2, 511, 7.0});  // an integral float is an integer
  EXPECT_EQ(parse_model_config_text(j.dump(), "c").eos_token_ids, (std::vector<int>{2, 511, 7}));
  j["eos_token_id"] = nullptr;
  EXPECT_TRUE(parse_model_config_text(j.dump(), "c").eos_token_ids.empty());
}

TEST(ModelConfigLimits, BosAndPadTokenIds) {
  json j = base();
  j["bos_token_id"] = 1LL << 40;
  EXPECT_THAT(error_of(j), HasSubstr("bos_token_id"));
  j["bos_token_id"] = -5;
  EXPECT_THAT(error_of(j), HasSubstr("bos_token_id"));
  EXPECT_THAT(error_of(base().dump(), R"({"bos_token_id": 4096})"), HasSubstr("/m/generation_config.json"));
  j["bos_token_id"] = nullptr;
  EXPECT_EQ(parse_model_config_text(j.dump(), "c").bos_token_id, -1);
  // pad_token_id is never used: any int32 id (or the old -1) passes, anything else does not.
  j["pad_token_id"] = -1;
  EXPECT_NO_THROW(parse_model_config_text(j.dump(), "c"));
  j["pad_token_id"] = 100000;
  EXPECT_NO_THROW(parse_model_config_text(j.dump(), "c"));
  j["pad_token_id"] = 1LL << 40;
  EXPECT_THAT(error_of(j), HasSubstr("pad_token_id"));
  j["pad_token_id"] = 0.5;
  EXPECT_THAT(error_of(j), HasSubstr("pad_token_id"));
}

TEST(ModelConfigLimits, SizesAreBoundedBeforeAnythingIsSized) {
  struct Case {
    const char* field;
    const char* value;
  };
  for (const Case& c : {Case{"num_hidden_layers", "1000000000"}, Case{"num_hidden_layers", "1e9"},
                        Case{"num_hidden_layers", "4.5"}, Case{"num_hidden_layers", "0"}, Case{"num_hidden_layers", "-4"},
                        Case{"hidden_size", "2147483648"}, Case{"hidden_size", "1e300"}, Case{"vocab_size", "1099511627776"},
                        Case{"intermediate_size", "4294967296"}, Case{"num_attention_heads", "100000"},
                        Case{"num_key_value_heads", "8"}, Case{"num_key_value_heads", "0"}, Case{"head_dim", "65536"},
                        Case{"head_dim", "-2"}, Case{"max_position_embeddings", "2147483647"},
                        Case{"max_position_embeddings", "0"}}) {
    json j = base();
    j[c.field] = json::parse(c.value);
    EXPECT_THAT(error_of(j), AllOf(HasSubstr("/m/config.json"), HasSubstr(c.field))) << c.field << " = " << c.value;
  }
  json j = base();
  j["num_hidden_layers"] = 1000000000;
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("'num_hidden_layers' is 1000000000"), HasSubstr("[1, 1024]")));
  j["num_hidden_layers"] = 4.5;
  EXPECT_THAT(error_of(j), HasSubstr("'num_hidden_layers' must be an integer, got the number 4.5"));
  // Integers written as floats are integers.
  j["num_hidden_layers"] = 4.0;
  j["max_position_embeddings"] = json::parse("1e5");
  const ModelConfig c = parse_model_config_text(j.dump(), "c");
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.max_position_embeddings, 100000);
}

TEST(ModelConfigLimits, HeadsMustDivide) {
  json j = base();
  j["num_attention_heads"] = 3;  // 64 / 3, no head_dim
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(error_of(j), AllOf(HasSubstr("hidden_size 64 is not a multiple of num_attention_heads 3"), HasSubstr("head_dim")));
  j["head_dim"] = 16;  // an explicit head_dim need not divide hidden_size (Qwen3 does this)
  EXPECT_EQ(parse_model_config_text(j.dump(), "c").head_dim, 16);
  j = base();
  j["num_key_value_heads"] = 3;
  EXPECT_THAT(error_of(j), HasSubstr("not a multiple of num_key_value_heads 3"));
  j = base();
  j["head_dim"] = 15;
  EXPECT_THAT(error_of(j), HasSubstr("even"));
}

TEST(ModelConfigLimits, RopeScalingNumbers) {
  json j = base();
  j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}, {"low_freq_factor", 1.0}, {"high_freq_factor", 4.0},
                       {"original_max_position_embeddings", 1e20}};
  EXPECT_THAT(error_of(j), HasSubstr("original_max_position_embeddings"));
  j["rope_scaling"]["original_max_position_embeddings"] = 8192.5;
  EXPECT_THAT(error_of(j), HasSubstr("original_max_position_embeddings"));
  j["rope_scaling"]["original_max_position_embeddings"] = 8192;
  EXPECT_EQ(parse_model_config_text(j.dump(), "c").rope_scaling.original_max_position_embeddings, 8192);
  j["rope_theta"] = -1;
  EXPECT_THAT(error_of(j), HasSubstr("rope_theta"));
}

}  // namespace
}  // namespace pagoda::test
