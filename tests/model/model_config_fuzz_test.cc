// Runs the config.json fuzz entry point over a few thousand mutants of the real configs in the shared test
// data (structure-aware: hostile values, removed keys, deep nesting; and byte-level), with and without a
// generation_config.json, so every CI run exercises the parser's error paths.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../json_mutator.h"
#include "fuzz_model_config.h"
#include "model_test_util.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/model/model_config.h"

namespace pagoda::test {
namespace {

struct Seed {
  nlohmann::json config, generation;
};

std::vector<Seed> seeds() {
  std::vector<Seed> out;
  for (const char* dir : {"/reference/llama-tiny", "/reference/qwen2-tiny", "/reference/qwen3-tiny", "/models/stories260K/hf"}) {
    const std::string base = data_dir() + dir;
    out.push_back({nlohmann::json::parse(read_file(base + "/config.json")),
                   nlohmann::json::parse(read_file(base + "/generation_config.json"))});
  }
  return out;
}

TEST(ModelConfigFuzz, SeedsParse) {
  for (const Seed& s : seeds()) {
    const std::string text = s.config.dump();
    EXPECT_NO_THROW(parse_model_config_text(text, "config.json", s.generation.dump())) << text;
  }
}

TEST(ModelConfigFuzz, MutatedConfigsNeverCrash) {
  const std::vector<Seed> all = seeds();
  JsonMutator m(20261204);
  int parsed = 0, rejected = 0;
  const LogLevel saved = log_level();
  set_log_level(LogLevel::kError);  // warnings about odd but accepted values would flood the output
  const auto start = std::chrono::steady_clock::now();
  constexpr int kIterations = 4000;
  for (int iter = 0; iter < kIterations; ++iter) {
    const Seed& s = all[m.pick(all.size())];
    // Mutate config.json, generation_config.json or both; the generation file is sometimes absent.
    const int which = int(m.pick(3));
    const std::string config = which == 1 ? s.config.dump() : m.mutate(s.config);
    const std::string gen = m.pick(4) == 0 ? std::string() : which == 0 ? s.generation.dump() : m.mutate(s.generation);
    const std::string input = gen.empty() ? config : config + std::string(kFuzzGenerationSeparator) + gen;
    fuzz_model_config(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    try {
      parse_model_config_text(config, "config.json", gen);
      ++parsed;
    } catch (const Error& e) {
      ++rejected;
      const std::string what = e.what();
      EXPECT_EQ(e.kind(), ErrorKind::kConfig) << what;
      EXPECT_TRUE(what.find("config.json") != std::string::npos) << what;
      // One short line: the message never carries a whole user value.
      EXPECT_EQ(what.find('\n'), std::string::npos) << what;
      EXPECT_LT(what.size(), 400u) << what;
    }
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  set_log_level(saved);
  // Both outcomes must be common, or the mutations are not exercising the parser.
  EXPECT_GT(parsed, 200);
  EXPECT_GT(rejected, 1000);
  std::printf("[ fuzz ] %d mutated configs in %.2f s: %d parsed, %d rejected with pagoda::Error\n", kIterations, secs,
              parsed, rejected);
}

}  // namespace
}  // namespace pagoda::test
