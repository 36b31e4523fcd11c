// `pagoda embed` on all-MiniLM-L6-v2 (scripts/fetch-models.sh; skipped without it): the JSON it prints
// against sentence-transformers' reference, texts from arguments and from a file, and its errors.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>

#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "pagoda/model/builtin_models.h"

namespace pagoda {
namespace {

namespace fs = std::filesystem;
using test::run_pagoda;

const nlohmann::json& reference() {
  static const nlohmann::json j = [] {
    std::ifstream in(fs::path(PAGODA_SOURCE_DIR) / "tests/model/data/minilm_reference.json");
    return nlohmann::json::parse(in);
  }();
  return j;
}

double max_err(const nlohmann::json& a, const nlohmann::json& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i].get<double>() - b[i].get<double>()));
  return m;
}

class EmbedCli : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fs::exists(model_cache_dir() / "all-MiniLM-L6-v2" / "model.safetensors"))
      GTEST_SKIP() << "skipped: all-MiniLM-L6-v2 is not in " << model_cache_dir().string()
                   << " (run `bash scripts/fetch-models.sh`)";
  }
};

TEST_F(EmbedCli, TextsFromArgumentsAndFileMatchTheReference) {
  const auto& cases = reference()["cases"];
  const fs::path file = fs::temp_directory_path() / ("pagoda_embed_" + std::to_string(::getpid()) + ".txt");
  {
    std::ofstream out(file);
    out << cases[2]["text"].get<std::string>() << "\n\n" << cases[3]["text"].get<std::string>() << "\n";
  }
  const test::CliResult r = run_pagoda("embed all-MiniLM-L6-v2 --threads 2 --text 'Hello world!' --text '" +
                                       cases[1]["text"].get<std::string>() + "' --input-file " + file.string());
  fs::remove(file);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["data"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(j["data"][i]["index"], i);
    // The bound of tests/model/minilm_test.cc (float32 through another summation order).
    EXPECT_LE(max_err(j["data"][i]["embedding"], cases[i]["embedding"]), 1e-5) << i;
  }
  int64_t tokens = 0;
  for (size_t i = 0; i < 4; ++i) tokens += int64_t(cases[i]["ids"].size());
  EXPECT_EQ(j["usage"]["prompt_tokens"], tokens);
}

TEST_F(EmbedCli, Errors) {
  test::CliResult r = run_pagoda("embed all-MiniLM-L6-v2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("nothing to embed"), std::string::npos) << r.err;
  r = run_pagoda("embed /nonexistent/folder --text hi");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("is not an embedding model"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace pagoda
