// Bad tokenizer files give a pagoda::Error that names the file and the problem, never a crash; mutated
// tokenizer.json files (truncated, bytes flipped, values of the wrong type) are rejected or load cleanly.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <random>

#include "pagoda/core/error.h"
#include "test_data.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing_data::data_dir;
using testing_data::read_file;
using testing_data::write_temp;

// The message of the pagoda::Error `fn` throws ("" and a test failure when it does not throw one).
template <typename F>
std::string error_of(F&& fn, ErrorKind kind) {
  try {
    fn();
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), kind) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "no pagoda::Error thrown";
  return "";
}

std::string load_error(const std::string& name, const std::string& content, ErrorKind kind = ErrorKind::kConfig) {
  const auto dir = write_temp(name, "tokenizer.json", content);
  return error_of([&] { Tokenizer::from_file(dir); }, kind);
}

json stories() { return json::parse(read_file(data_dir() / "models/stories260K/hf/tokenizer.json")); }

TEST(TokenizerErrorsTest, MissingFile) {
  const std::string msg = error_of([] { Tokenizer::from_file("/nonexistent/model"); }, ErrorKind::kRuntime);
  EXPECT_NE(msg.find("/nonexistent/model"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not found"), std::string::npos) << msg;

  const auto empty = write_temp("empty_dir", "README", "");
  const std::string in_dir = error_of([&] { Tokenizer::from_file(empty); }, ErrorKind::kRuntime);
  EXPECT_NE(in_dir.find("tokenizer.json"), std::string::npos) << in_dir;

  const auto spm_only = write_temp("spm_only", "tokenizer.model", "x");
  const std::string hint = error_of([&] { Tokenizer::from_file(spm_only); }, ErrorKind::kRuntime);
  EXPECT_NE(hint.find("SentencePiece"), std::string::npos) << hint;
}

TEST(TokenizerErrorsTest, MalformedJson) {
  const std::string msg = load_error("malformed", "{\"model\": {\"type\": \"BPE\", ");
  EXPECT_NE(msg.find("malformed/tokenizer.json"), std::string::npos) << msg;
  EXPECT_NE(msg.find("not valid JSON"), std::string::npos) << msg;
  EXPECT_NE(load_error("not_object", "[1, 2]").find("JSON object"), std::string::npos);
  EXPECT_NE(load_error("no_model", "{}").find("'model'"), std::string::npos);

  const auto dir = write_temp("bad_config", "tokenizer.json", stories().dump());
  write_temp("bad_config", "tokenizer_config.json", "{oops");
  const std::string cfg = error_of([&] { Tokenizer::from_file(dir); }, ErrorKind::kConfig);
  EXPECT_NE(cfg.find("tokenizer_config.json"), std::string::npos) << cfg;
}

TEST(TokenizerErrorsTest, UnsupportedModelTypes) {
  for (const char* type : {"Unigram", "WordLevel"}) {
    json j = stories();
    j["model"]["type"] = type;
    const std::string msg = load_error(std::string("model_") + type, j.dump());
    EXPECT_NE(msg.find(type), std::string::npos) << msg;
    EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
    EXPECT_NE(msg.find("tokenizer.json"), std::string::npos) << msg;
  }
}

TEST(TokenizerErrorsTest, UnsupportedComponents) {
  const std::vector<std::pair<const char*, json>> cases = {
      {"normalizer", {{"type", "Lowercase"}}},
      {"normalizer", {{"type", "Sequence"}, {"normalizers", {{{"type", "NFC"}}, {{"type", "Lowercase"}}}}}},
      {"pre_tokenizer", {{"type", "Whitespace"}}},
      {"decoder", {{"type", "CTC"}}},
      {"post_processor", {{"type", "SomethingNew"}}},
  };
  int n = 0;
  for (const auto& [field, spec] : cases) {
    json j = stories();
    j[field] = spec;
    const std::string msg = load_error("component_" + std::to_string(n++), j.dump());
    EXPECT_NE(msg.find(field), std::string::npos) << msg;
    EXPECT_NE(msg.find("not supported"), std::string::npos) << msg;
  }
}

TEST(TokenizerErrorsTest, InconsistentModel) {
  json j = stories();
  j["model"]["merges"].push_back({"\u2581t", "nonexistent"});
  EXPECT_NE(load_error("bad_merge", j.dump()).find("nonexistent"), std::string::npos);
  j = stories();
  j["model"]["merges"].push_back("a b c");
  EXPECT_NE(load_error("bad_merge_string", j.dump()).find("a b c"), std::string::npos);
  j = stories();
  j["model"]["vocab"]["huge"] = 2000000000;
  EXPECT_NE(load_error("huge_id", j.dump()).find("2000000000"), std::string::npos);
  j = stories();
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "(unclosed"}}}, {"behavior", "Isolated"}};
  EXPECT_NE(load_error("bad_regex", j.dump()).find("(unclosed"), std::string::npos);
  j = stories();
  j["model"]["vocab"] = json::array({1, 2});
  EXPECT_NE(load_error("vocab_array", j.dump()).find("vocab"), std::string::npos);
}

// Loads a mutated file: it must either load (and then encode/decode without crashing) or throw pagoda::Error.
void load_or_reject(const std::string& content, int n) {
  const auto dir = write_temp("fuzz", "tokenizer.json", content);
  try {
    const Tokenizer tok = Tokenizer::from_file(dir);
    const std::vector<int> ids = tok.encode("Once upon a time, <s> there was \xF0\x9F\xA6\x99 a\tlittle\n girl.", true);
    (void)tok.decode(ids, false);
  } catch (const Error&) {
  } catch (const std::exception& e) {
    ADD_FAILURE() << "mutation " << n << ": not a pagoda::Error: " << e.what();
  }
}

TEST(TokenizerErrorsTest, FuzzedFilesAreRejectedCleanly) {
  const std::string original = stories().dump();
  std::mt19937 rng(1234);
  for (int n = 0; n < 150; ++n) {
    std::string s = original;
    switch (n % 3) {
      case 0:  // truncated
        s.resize(rng() % s.size());
        break;
      case 1:  // a few bytes replaced
        for (int k = 0; k < 1 + static_cast<int>(rng() % 4); ++k) s[rng() % s.size()] = static_cast<char>(rng() % 128);
        break;
      case 2: {  // one value anywhere replaced by a value of another type
        json j = json::parse(original);
        const std::vector<json> values = {nullptr, -1, 7, "x", json::array(), json::object(), true, 1e300};
        std::vector<json*> nodes;
        std::function<void(json&)> walk = [&](json& v) {
          nodes.push_back(&v);
          if (v.is_structured() && nodes.size() < 4000) {
            for (auto& child : v) walk(child);
          }
        };
        walk(j);
        *nodes[rng() % nodes.size()] = values[rng() % values.size()];
        s = j.dump();
        break;
      }
    }
    load_or_reject(s, n);
  }
}

}  // namespace
}  // namespace pagoda
