// `pagoda generate --model DIR` with one hostile file in DIR (the stories260K model otherwise): every case
// must exit with status 2 and print exactly one ERROR line naming the file and the field, never crash
// (a signal), hang or run with a silently wrong value.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
using test::run_pagoda;
using test::test_data_dir;
using testing::AllOf;
using testing::HasSubstr;
namespace fs = std::filesystem;

class HostileModelCli : public testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("pagoda_hostile_model_" + std::to_string(::getpid()) + "_" +
                                        testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
    const fs::path src = fs::path(test_data_dir()) / "models/stories260K/hf";
    for (const auto& f : fs::directory_iterator(src)) fs::copy_file(f.path(), dir_ / f.path().filename());
  }
  void TearDown() override { fs::remove_all(dir_); }
  // Back to the unmodified model.
  void reset() {
    TearDown();
    SetUp();
  }

  void write(const std::string& file, const std::string& text) { std::ofstream(dir_ / file, std::ios::trunc) << text; }
  // Edits one JSON file of the model folder.
  void edit(const std::string& file, const std::function<void(Json&)>& change) {
    std::ifstream in(dir_ / file);
    Json j = Json::parse(in);
    change(j);
    write(file, j.dump());
  }
  // Runs generate and returns its one ERROR line, checking the exit status and that there is one.
  std::string error_line(const std::string& extra = "") {
    auto r = run_pagoda("generate --model " + dir_.string() + " --max-tokens 1 " + extra);
    EXPECT_EQ(r.exit_code, 2) << r.err.substr(0, 2000);
    std::string line;
    int errors = 0;
    std::istringstream lines(r.err);
    for (std::string l; std::getline(lines, l);) {
      if (l.rfind("ERROR", 0) == 0) {
        ++errors;
        line = l;
      }
    }
    EXPECT_EQ(errors, 1) << r.err.substr(0, 2000);
    EXPECT_LT(line.size(), 500u) << line.substr(0, 1000);
    return line;
  }
  static std::string deep(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

  fs::path dir_;
};

TEST_F(HostileModelCli, DeepNestingInEachJsonFile) {
  for (const char* file : {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
                           "special_tokens_map.json"}) {
    reset();
    write(file, R"({"eos_token_id": )" + deep(200000) + "}");
    EXPECT_THAT(error_line(), AllOf(HasSubstr(file), HasSubstr("nested deeper than 128"))) << file;
  }
  reset();
  // A deep value inside an otherwise valid config.json.
  std::ifstream in(fs::path(test_data_dir()) / "models/stories260K/hf/config.json");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  text.replace(text.find("\"silu\""), 6, deep(50000));
  write("config.json", text);
  EXPECT_THAT(error_line(), AllOf(HasSubstr("config.json"), HasSubstr("nested deeper")));
}

TEST_F(HostileModelCli, EosTokenIds) {
  for (const char* eos : {"1099511627776", "-1", "1.5", "[2, 4294967296]"}) {
    edit("config.json", [&](Json& j) { j["eos_token_id"] = Json::parse(eos); });
    EXPECT_THAT(error_line(), AllOf(HasSubstr("config.json"), HasSubstr("eos_token_id"))) << eos;
  }
}

TEST_F(HostileModelCli, GenerationConfigEosTokenId) {
  write("generation_config.json", R"({"bos_token_id": 1, "eos_token_id": 1099511627776})");
  EXPECT_THAT(error_line(), AllOf(HasSubstr("generation_config.json"), HasSubstr("eos_token_id"), HasSubstr("vocab_size 512")));
}

TEST_F(HostileModelCli, SizesThatWouldAllocateWithoutBound) {
  edit("config.json", [](Json& j) { j["num_hidden_layers"] = 1000000000; });
  EXPECT_THAT(error_line(), AllOf(HasSubstr("config.json"), HasSubstr("'num_hidden_layers' is 1000000000")));
  edit("config.json", [](Json& j) { j["num_hidden_layers"] = Json::parse("1e9"); });
  EXPECT_THAT(error_line(), HasSubstr("num_hidden_layers"));
  edit("config.json", [](Json& j) {
    j["num_hidden_layers"] = 5;
    j["vocab_size"] = 1LL << 40;
  });
  EXPECT_THAT(error_line(), HasSubstr("vocab_size"));
  // Within the bounds but not the weights' sizes: refused at the first tensor, before allocating.
  edit("config.json", [](Json& j) {
    j["vocab_size"] = 512;
    j["num_hidden_layers"] = 1000;
  });
  EXPECT_THAT(error_line(), AllOf(HasSubstr("missing tensor 'model.layers.5."), HasSubstr("does not match config.json")));
}

TEST_F(HostileModelCli, HeadsThatDoNotDivide) {
  edit("config.json", [](Json& j) {
    j.erase("head_dim");
    j["num_attention_heads"] = 7;
    j["num_key_value_heads"] = 7;
  });
  EXPECT_THAT(error_line(), AllOf(HasSubstr("config.json"), HasSubstr("hidden_size 64 is not a multiple of num_attention_heads 7")));
  edit("config.json", [](Json& j) { j["num_key_value_heads"] = 3; });
  EXPECT_THAT(error_line(), HasSubstr("num_key_value_heads"));
}

TEST_F(HostileModelCli, MaxModelLenNear2To31) {
  EXPECT_THAT(error_line("--max-model-len 2147483647"), AllOf(HasSubstr("--max-model-len"), HasSubstr("16777216")));
  EXPECT_THAT(error_line("--max-model-len 4294967296"), AllOf(HasSubstr("--max-model-len"), HasSubstr("out of range")));
  EXPECT_THAT(error_line("--num-gpu-blocks-override 2147483647"), AllOf(HasSubstr("KV cache"), HasSubstr("more than this machine")));
}

TEST_F(HostileModelCli, TokenizerValues) {
  edit("tokenizer.json", [](Json& j) { j["pre_tokenizer"] = {{"type", std::string(1 << 20, 'T')}}; });
  EXPECT_THAT(error_line(), AllOf(HasSubstr("tokenizer.json"), HasSubstr("(1048576 bytes)")));
  reset();
  edit("tokenizer_config.json", [](Json& j) { j["chat_template"] = Json::array({1}); });
  EXPECT_THAT(error_line(), AllOf(HasSubstr("tokenizer_config.json"), HasSubstr("chat_template")));
}

}  // namespace
}  // namespace pagoda
