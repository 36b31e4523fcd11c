// Hostile or mistaken configuration input: config files and -ac JSON nested deep enough to overflow a
// recursive walk, YAML aliases that expand exponentially, numbers near or past 2^31 and 2^63, values that
// would flood an error message. Each must be one config error (exit status 2), never a crash, a hang or
// a wrapped value.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pagoda/config/arg_preprocess.h"
#include "pagoda/config/attention_config.h"
#include "pagoda/config/config_files.h"
#include "pagoda/config/engine_args.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {
namespace {

using testing::AllOf;
using testing::HasSubstr;
namespace fs = std::filesystem;

// The config error `fn` throws; the test fails when it throws none or another kind.
template <typename F>
std::string error_of(F&& fn) {
  LogSilence quiet;
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    EXPECT_LT(std::string(e.what()).size(), 400u) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no pagoda::Error";
  return "";
}

std::string nested(int depth, char open = '[', char close = ']') {
  return std::string(size_t(depth), open) + std::string(size_t(depth), close);
}

class HostileConfigFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_hostile_cfg_" + std::to_string(::getpid()) + "_" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  std::string expand_error(const std::string& flag, const std::string& file) {
    return error_of([&] { expand_config_files({flag, file}, false, [](std::string_view) { return false; }); });
  }
  fs::path dir_;
};

TEST_F(HostileConfigFiles, DeepJsonConfigFile) {
  const std::string path = write("deep.json", R"({"attention-config": )" + nested(100000, '{', '}') + "}");
  EXPECT_THAT(expand_error("--json-config", path), AllOf(HasSubstr(path), HasSubstr("nested deeper than 128")));
  const std::string list = write("deep_list.json", R"({"served-model-name": )" + nested(200000) + "}");
  EXPECT_THAT(expand_error("--json-config", list), HasSubstr("nested deeper"));
}

TEST_F(HostileConfigFiles, DeepYamlFlowBlockAndMixed) {
  std::string path = write("flow.yaml", "attention-config: " + nested(100000) + "\n");
  EXPECT_THAT(expand_error("--config", path), AllOf(HasSubstr(path), HasSubstr("nests deeper than 128")));
  path = write("flow200.yaml", "attention-config: " + nested(200) + "\n");
  EXPECT_THAT(expand_error("--config", path), HasSubstr("nests deeper than 128"));
  std::string block;
  for (int i = 0; i < 3000; ++i) block += std::string(size_t(i), ' ') + "a:\n";
  path = write("block.yaml", block + std::string(3000, ' ') + "b: 1\n");
  EXPECT_THAT(expand_error("--config", path), HasSubstr("nests deeper than 128"));
  path = write("seq.yaml", "a: " + [] {
    std::string s;
    for (int i = 0; i < 50000; ++i) s += "- ";
    return s;
  }() + "x\n");
  EXPECT_THAT(expand_error("--config", path), HasSubstr(path));
}

TEST_F(HostileConfigFiles, YamlAliasesThatExpandExponentially) {
  std::string text = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 9; ++i) {
    text += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) text += (k ? ", *a" : "*a") + std::to_string(i - 1);
    text += "]\n";
  }
  const std::string path = write("laughs.yaml", text);  // 10^9 values from 9 lines
  EXPECT_THAT(expand_error("--config", path), AllOf(HasSubstr(path), HasSubstr("aliases")));
  // A few aliases are fine.
  const std::string ok = write("alias.yaml", "served-model-name: &n [a, b]\ntokenizer: x\n");
  LogSilence quiet;
  EXPECT_NO_THROW(expand_config_files({"--config", ok}, false, [](std::string_view) { return false; }));
}

TEST(HostileAttentionConfig, DeepJsonOnTheCommandLine) {
  EXPECT_THAT(error_of([] { parse_attention_config_json(R"({"backend": )" + nested(100000) + "}"); }),
              AllOf(HasSubstr("attention_config"), HasSubstr("nested deeper than 128")));
  EXPECT_THAT(error_of([] { parse_attention_config_json(nested(150, '{', '}')); }), HasSubstr("nested deeper"));
  // The same through -ac and the dotted form.
  auto takes_value = [](std::string_view) { return true; };
  EXPECT_THAT(error_of([&] { preprocess_args({"-ac.backend", nested(100000)}, takes_value); }),
              AllOf(HasSubstr("-ac.backend"), HasSubstr("nested deeper")));
  std::string dotted = "--attention-config";
  for (int i = 0; i < 1000; ++i) dotted += ".a";
  EXPECT_THAT(error_of([&] { preprocess_args({dotted, "1"}, takes_value); }), HasSubstr("more than 128 dotted keys"));
}

TEST(HostileAttentionConfig, HumanReadableIntsThatOverflowAreNotWrapped) {
  long long v = 0;
  EXPECT_FALSE(parse_human_readable_int("9999999999999T", &v));
  EXPECT_FALSE(parse_human_readable_int("99999999999999999999.5t", &v));
  EXPECT_TRUE(parse_human_readable_int("8T", &v));
  EXPECT_EQ(v, 8LL << 40);
  // Bare tokens in -ac JSON: an overflowing one stays as written, and the JSON parse refuses it.
  EXPECT_EQ(replace_human_readable_ints(R"({"a": 9999999999999T})"), R"({"a": 9999999999999T})");
  EXPECT_THAT(error_of([] { parse_attention_config_json(R"({"flex_attn_block_m": 9999999999999T})"); }),
              HasSubstr("Invalid JSON"));
  EXPECT_THAT(error_of([] { parse_attention_config_json(R"({"flex_attn_block_m": 99999999999999999999999k})"); }),
              HasSubstr("Invalid JSON"));
  EXPECT_THAT(error_of([] { parse_attention_config_json(R"({"flex_attn_block_m": 4294967296})"); }),
              HasSubstr("valid integer"));
}

TEST(HostileAttentionConfig, LongValuesArePreviewed) {
  const std::string name(100000, 'X');
  EXPECT_THAT(error_of([&] { parse_attention_config_json(R"({"backend": ")" + name + "\"}"); }),
              HasSubstr("(100000 bytes)"));
  EXPECT_THAT(error_of([&] { parse_attention_config_json("{\"" + name + "\": 1}"); }), HasSubstr("(100000 bytes)"));
}

// The engine options, through the real parser and validation.
std::string engine_error(const std::vector<std::string>& raw) {
  return error_of([&] {
    EngineArgs args;
    ArgParser parser("t", "t");
    register_engine_options(parser, args, EngineOptionSet::kServe);
    auto pre = preprocess_args(raw, [&](std::string_view n) { return parser.takes_value(n); });
    parser.parse(pre.args);
    validate_engine_args(args);
  });
}

TEST(HostileEngineArgs, IntegersNearAndPast2To31AreRefusedNotWrapped) {
  EXPECT_THAT(engine_error({"--max-model-len", "2147483647"}),
              AllOf(HasSubstr("--max-model-len"), HasSubstr("at most 16777216"), HasSubstr("context length")));
  EXPECT_THAT(engine_error({"--max-model-len", "4294967296"}), AllOf(HasSubstr("--max-model-len: 4294967296 is out of range")));
  EXPECT_THAT(engine_error({"--max-model-len", "99999999999999999999999"}), HasSubstr("out of range"));
  EXPECT_THAT(engine_error({"--max-model-len", "1e5"}), HasSubstr("invalid int value: '1e5'"));
  EXPECT_THAT(engine_error({"--block-size", "2147483647"}), AllOf(HasSubstr("--block-size"), HasSubstr("at most 65536")));
  EXPECT_THAT(engine_error({"--max-num-seqs", "2147483647"}), HasSubstr("--max-num-seqs"));
  EXPECT_THAT(engine_error({"--max-num-batched-tokens", "2147483648"}), HasSubstr("--max-num-batched-tokens"));
  EXPECT_THAT(engine_error({"--seed", "2147483648"}), HasSubstr("--seed: 2147483648 is out of range: at most 2147483647"));
  EXPECT_THAT(engine_error({"--seed", "-2147483649"}), HasSubstr("at least -2147483648"));
  EXPECT_THAT(engine_error({"--port", "4294967296"}), HasSubstr("--port"));
  EXPECT_THAT(engine_error({"--num-gpu-blocks-override", "0"}), HasSubstr("--num-gpu-blocks-override"));
  EXPECT_THAT(engine_error({"--max-model-len", std::string(100000, '9')}), HasSubstr("(100000 bytes)"));
}

TEST(HostileEngineArgs, MemoryAmountsMustBeFiniteAndPositive) {
  for (const char* bad : {"nan", "inf", "-1", "0", "1e300"})
    EXPECT_THAT(engine_error({"--kv-cache-space", bad}), HasSubstr("--kv-cache-space")) << bad;
  for (const char* bad : {"nan", "inf", "0", "1.5"})
    EXPECT_THAT(engine_error({"--gpu-memory-utilization", bad}), HasSubstr("--gpu-memory-utilization")) << bad;
}

// EngineArgs built in code (benchmarks, tests) skip the setters; validation still bounds them.
TEST(HostileEngineArgs, ValidationBoundsArgsBuiltInCode) {
  EngineArgs a;
  a.model.max_model_len = INT32_MAX;
  EXPECT_THAT(error_of([&] { validate_engine_args(a); }), HasSubstr("Invalid --max-model-len: 2147483647"));
  a = EngineArgs();
  a.scheduler.max_num_seqs = 0;
  EXPECT_THAT(error_of([&] { validate_engine_args(a); }), HasSubstr("--max-num-seqs"));
}

}  // namespace
}  // namespace pagoda
