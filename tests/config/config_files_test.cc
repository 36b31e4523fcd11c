// Spec §9.5: YAML and JSON config files.
#include <cstdio>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pagoda/config/config_files.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {
namespace {

using testing::ElementsAre;
namespace fs = std::filesystem;

class ConfigFiles : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_cfg_" + std::to_string(::getpid()) + "_" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  static bool no_form(std::string_view n) { return n == "--enable-prefix-caching"; }
  std::vector<std::string> expand(const std::vector<std::string>& a, bool positional = false) {
    LogSilence quiet;
    return expand_config_files(a, positional, no_form);
  }
  std::string error_of(const std::vector<std::string>& a, std::vector<LogRecord>* log = nullptr) {
    LogCapture cap;
    try {
      expand(a);
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      if (log) *log = cap.records();
      return e.what();
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(ConfigFiles, YamlExpansion) {
  std::string f = write("c.yaml",
                        "model: /models/x\n"
                        "kv_cache_dtype: fp8\n"
                        "block-size: 32\n"
                        "enforce-eager: true\n"
                        "enable-prefix-caching: false\n"
                        "batch-invariant: false\n"
                        "served-model-name: [a, b]\n"
                        "empty: []\n"
                        "seed: null\n"
                        "attention_config:\n"
                        "  backend: FLASH_ATTN\n"
                        "  flash_attn_version: 2\n");
  auto a = expand({"--config", f, "--block-size", "64"});
  EXPECT_THAT(a, ElementsAre("--model", "/models/x", "--kv-cache-dtype", "fp8", "--block-size", "32", "--enforce-eager",
                             "--no-enable-prefix-caching", "--served-model-name", "a", "b", "--seed", "None",
                             "--attention-config", R"({"backend":"FLASH_ATTN","flash_attn_version":2})", "--block-size", "64"));
}

TEST_F(ConfigFiles, JsonAfterYamlAndAfterPositionalModel) {
  std::string y = write("c.yml", "port: 9000\n");
  std::string j = write("c.json", R"({"model": "/models/Meta-Llama-3-8B",
    "attention_config": {"backend": "FLASH_ATTN", "flash_attn_version": 2, "use_prefill_decode_attention": true}})");
  auto a = expand({"mymodel", "--json-config", j, "--config", y, "--port", "1"}, true);
  EXPECT_THAT(a, ElementsAre("mymodel", "--port", "9000", "--model", "/models/Meta-Llama-3-8B", "--attention-config",
                             R"({"backend":"FLASH_ATTN","flash_attn_version":2,"use_prefill_decode_attention":true})",
                             "--port", "1"));
}

TEST_F(ConfigFiles, Errors) {
  std::string y = write("c.yaml", "a: 1\n");
  std::string j = write("c.json", "{}");
  EXPECT_EQ(error_of({"--config", j}), "Config file must be of a yaml/yml type. json supplied");
  EXPECT_EQ(error_of({"--json-config", y}), "Config file must be of a json type. yaml supplied");
  EXPECT_EQ(error_of({"--config", y, "--config", y}), "More than one config file specified!");
  EXPECT_EQ(error_of({"--json-config", j, "--json-config", j}), "More than one JSON config file specified!");
  EXPECT_EQ(error_of({"--model", "m", "--config"}), "No config file specified! Please check your command-line arguments.");
  EXPECT_EQ(error_of({"--json-config"}), "No JSON config file specified! Please check your command-line arguments.");
  std::string missing = (dir_ / "missing.yaml").string();
  std::vector<LogRecord> log;
  EXPECT_EQ(error_of({"--config", missing}, &log), "Unable to read the config file at " + missing + ": No such file or directory");
  ASSERT_EQ(log.size(), 1u);
  EXPECT_EQ(log[0].level, LogLevel::kError);
  EXPECT_EQ(log[0].message, "Unable to read the config file at " + missing + ". Check path correctness");
  std::string list = write("list.yaml", "- a\n- b\n");
  EXPECT_EQ(error_of({"--config", list}), "Config file " + list + " must contain a mapping of option names to values.");
  std::string arr = write("arr.json", "[1]");
  EXPECT_EQ(error_of({"--json-config", arr}), "Config file " + arr + " must contain a mapping of option names to values.");
  std::string bad = write("bad.json", "{\"a\": ");
  EXPECT_THAT(error_of({"--json-config", bad}), testing::StartsWith("Unable to parse the config file at " + bad));
  std::string bady = write("bad.yaml", "a: [1, 2\n");
  EXPECT_THAT(error_of({"--config", bady}), testing::StartsWith("Unable to parse the config file at " + bady));
}

}  // namespace
}  // namespace pagoda
