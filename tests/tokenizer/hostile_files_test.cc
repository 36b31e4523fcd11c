// Tokenizer files from a hostile or broken source: nesting deep enough to overflow a recursive walk, values
// that would flood an error message, ids that would size huge tables. Each must be one short config error
// naming the file, never a crash.
#include <string>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/tokenizer/tokenizer.h"
#include "test_data.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing_data::data_dir;
using testing_data::read_file;
using testing_data::write_temp;

json stories() { return json::parse(read_file(data_dir() / "models/stories260K/hf/tokenizer.json")); }
std::string stories_config() { return read_file(data_dir() / "models/stories260K/hf/tokenizer_config.json"); }
std::string nested(int depth) { return std::string(size_t(depth), '[') + std::string(size_t(depth), ']'); }

// The message of the config error loading `dir` throws, checked to be one short line.
std::string error_of_dir(const std::filesystem::path& dir) {
  try {
    Tokenizer::from_file(dir);
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.exit_code(), 2) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_LT(what.size(), 400u) << what;
    return what;
  }
  ADD_FAILURE() << "no error loading " << dir;
  return "";
}

std::string error_of_text(const std::string& tokenizer_json, const std::string& config = "") {
  try {
    Tokenizer::from_json_text(tokenizer_json, config);
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(e.exit_code(), 2) << what;
    EXPECT_EQ(what.find('\n'), std::string::npos) << what;
    EXPECT_LT(what.size(), 400u) << what;
    return what;
  }
  ADD_FAILURE() << "no error";
  return "";
}

TEST(TokenizerHostileFiles, DeepNestingInEveryFileIsRefused) {
  const std::string deep = nested(200000);
  // tokenizer.json
  auto dir = write_temp("deep_tokenizer", "tokenizer.json", R"({"model": )" + deep + "}");
  std::string msg = error_of_dir(dir);
  EXPECT_NE(msg.find("deep_tokenizer/tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("nested deeper than 128"), std::string::npos) << msg;
  // Each companion file beside a valid tokenizer.json.
  for (const char* file : {"tokenizer_config.json", "special_tokens_map.json", "generation_config.json"}) {
    dir = write_temp(std::string("deep_") + file, "tokenizer.json", stories().dump());
    write_temp(std::string("deep_") + file, file, R"({"chat_template": )" + deep + "}");
    msg = error_of_dir(dir);
    EXPECT_NE(msg.find(file), std::string::npos) << msg;
    EXPECT_NE(msg.find("nested deeper"), std::string::npos) << msg;
  }
  EXPECT_NE(error_of_text(stories().dump(), R"({"added_tokens_decoder": )" + deep + "}").find("tokenizer_config.json"),
            std::string::npos);
}

TEST(TokenizerHostileFiles, MessagesNeverCarryAWholeValue) {
  json j = stories();
  json deep = 1;
  for (int i = 0; i < 120; ++i) deep = json::array({deep});  // under the depth limit
  j["added_tokens"].push_back({{"id", deep}, {"content", "x"}});
  EXPECT_NE(error_of_text(j.dump()).find("a list of 1 item"), std::string::npos);
  j = stories();
  j["model"]["merges"].push_back(json::array({std::string(1 << 20, 'a'), deep}));
  EXPECT_NE(error_of_text(j.dump()).find("merge #"), std::string::npos);
  j = stories();
  j["pre_tokenizer"] = {{"type", std::string(1 << 20, 'T')}};
  EXPECT_NE(error_of_text(j.dump()).find("(1048576 bytes)"), std::string::npos);
  j = stories();
  j["model"]["vocab"][std::string(1 << 20, 'v')] = "seven";
  EXPECT_NE(error_of_text(j.dump()).find("is not an integer"), std::string::npos);
  EXPECT_NE(error_of_text(stories().dump(), R"({"chat_template": [1, 2]})").find("found the number 1"), std::string::npos);
  EXPECT_NE(error_of_text(stories().dump(), R"({"chat_template": 7})").find("got the number 7"), std::string::npos);
}

TEST(TokenizerHostileFiles, IdsThatWouldSizeHugeTablesAreRefused) {
  json j = stories();
  j["model"]["vocab"]["far"] = 16000000;  // within the id limit, but 512 tokens cannot need a 16M table
  EXPECT_NE(error_of_text(j.dump()).find("without large gaps"), std::string::npos);
  j = stories();
  j["decoder"] = {{"type", "Strip"}, {"content", " "}, {"start", json::parse("18446744073709551615")}, {"stop", 0}};
  EXPECT_NE(error_of_text(j.dump()).find("'start' must be a non-negative integer"), std::string::npos);
}

TEST(TokenizerHostileFiles, GenerationConfigEosIdsAreChecked) {
  for (const char* eos : {"1.5", "1099511627776", "-1", "[2, \"x\"]"}) {
    const auto dir = write_temp(std::string("gen_eos_") + eos, "tokenizer.json", stories().dump());
    write_temp(std::string("gen_eos_") + eos, "generation_config.json", std::string(R"({"eos_token_id": )") + eos + "}");
    const std::string msg = error_of_dir(dir);
    EXPECT_NE(msg.find("generation_config.json"), std::string::npos) << eos << ": " << msg;
  }
}

TEST(TokenizerHostileFiles, FromJsonTextMatchesFromFile) {
  const auto dir = write_temp("from_text", "tokenizer.json", stories().dump());
  write_temp("from_text", "tokenizer_config.json", stories_config());
  const Tokenizer a = Tokenizer::from_file(dir);
  const Tokenizer b = Tokenizer::from_json_text(stories().dump(), stories_config());
  const std::string text = "Once upon a time, there was a little girl.";
  EXPECT_EQ(a.encode(text, true), b.encode(text, true));
  EXPECT_EQ(a.bos_id(), b.bos_id());
  EXPECT_EQ(a.eos_ids(), b.eos_ids());
  EXPECT_EQ(a.vocab_size(), b.vocab_size());
}

}  // namespace
}  // namespace pagoda
