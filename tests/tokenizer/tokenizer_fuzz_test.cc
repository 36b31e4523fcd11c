// Runs the tokenizer.json fuzz entry point over a few thousand mutants of the real tokenizers in the shared
// test data (cut to their first few hundred tokens so a load takes a millisecond; their normalizers,
// pre-tokenizers, decoders, post-processors, added tokens and tokenizer_config.json are kept whole), so
// every CI run exercises the loader's error paths.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../json_mutator.h"
#include "fuzz_tokenizer.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/tokenizer/tokenizer.h"
#include "test_data.h"

namespace pagoda::test {
namespace {

using nlohmann::json;
using testing_data::data_dir;
using testing_data::read_file;

struct Seed {
  std::string name;
  json tokenizer, config;  // config: null when the folder has none
};

// The vocabulary cut to ids below `keep` (the byte alphabet and the first merges' results), with the
// merges that stay inside it.
json cut_vocabulary(json t, int keep) {
  json& model = t["model"];
  json vocab = json::object();
  for (auto& [token, id] : model["vocab"].items())
    if (id.get<int>() < keep) vocab[token] = id;
  json merges = json::array();
  for (const json& m : model["merges"]) {
    std::string left, right;
    if (m.is_array()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      const std::string s = m.get<std::string>();
      left = s.substr(0, s.find(' '));
      right = s.substr(s.find(' ') + 1);
    }
    if (vocab.contains(left) && vocab.contains(right) && vocab.contains(left + right)) merges.push_back(m);
  }
  model["vocab"] = std::move(vocab);
  model["merges"] = std::move(merges);
  return t;
}

const std::vector<Seed>& seeds() {
  static const std::vector<Seed> all = [] {
    std::vector<Seed> out;
    const auto stories = data_dir() / "models/stories260K/hf";
    out.push_back({"stories260K", json::parse(read_file(stories / "tokenizer.json")),
                   json::parse(read_file(stories / "tokenizer_config.json"))});
    for (const char* name : {"gpt2", "llama-spm", "llama3", "qwen2"}) {
      const auto dir = data_dir() / "tokenizers" / name;
      out.push_back({name, cut_vocabulary(json::parse(read_file(dir / "tokenizer.json")), 600),
                     json::parse(read_file(dir / "tokenizer_config.json"))});
    }
    return out;
  }();
  return all;
}

TEST(TokenizerFuzz, SeedsLoad) {
  for (const Seed& s : seeds()) {
    EXPECT_NO_THROW(Tokenizer::from_json_text(s.tokenizer.dump(), s.config.dump())) << s.name;
    const std::string input = s.tokenizer.dump() + std::string(kFuzzTokenizerConfigSeparator) + s.config.dump();
    fuzz_tokenizer(reinterpret_cast<const uint8_t*>(input.data()), input.size());
  }
}

TEST(TokenizerFuzz, MutatedFilesNeverCrash) {
  JsonMutator m(20261204);
  int loaded = 0, rejected = 0;
  const LogLevel saved = log_level();
  set_log_level(LogLevel::kError);  // warnings about odd but accepted values would flood the output
  const auto start = std::chrono::steady_clock::now();
  constexpr int kIterations = 2500;
  for (int iter = 0; iter < kIterations; ++iter) {
    const Seed& s = seeds()[m.pick(seeds().size())];
    const bool mutate_config = m.pick(4) == 0;
    const std::string tokenizer = mutate_config ? s.tokenizer.dump() : m.mutate(s.tokenizer);
    const std::string config = m.pick(5) == 0 ? std::string() : mutate_config ? m.mutate(s.config) : s.config.dump();
    const std::string input = tokenizer + std::string(kFuzzTokenizerConfigSeparator) + config;
    fuzz_tokenizer(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    try {
      Tokenizer::from_json_text(tokenizer, config);
      ++loaded;
    } catch (const Error& e) {
      ++rejected;
      const std::string what = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << what;
      EXPECT_TRUE(what.find("tokenizer.json") != std::string::npos ||
                  what.find("tokenizer_config.json") != std::string::npos) << what;
      // One short line: the message never carries a whole user value.
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_LT(what.size(), 600u) << what;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  set_log_level(saved);
  // Both outcomes must be common, or the mutations are not exercising the loader.
  EXPECT_GT(loaded, 300);
  EXPECT_GT(rejected, 300);
  std::printf("[ fuzz ] %d mutated tokenizers in %.2f s: %d loaded, %d rejected with pagoda::Error\n", kIterations, secs,
              loaded, rejected);
}

}  // namespace
}  // namespace pagoda::test
