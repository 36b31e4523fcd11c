// Shared helpers of the tokenizer tests: where the data lives, file reading, and tokenizers loaded once
// per process (the large tokenizer.json files take a fraction of a second each to parse).
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <vector>

#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda::testing_data {

inline std::filesystem::path data_dir() {
  const char* env = std::getenv("PAGODA_TEST_DATA");
  return std::filesystem::path(env != nullptr && *env != '\0' ? env : PAGODA_TEST_DATA_DEFAULT);
}

inline std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw std::runtime_error("cannot read test data file " + p.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `rel` is relative to the data folder, e.g. "tokenizers/llama3".
inline const Tokenizer& shared_tokenizer(const std::string& rel) {
  static std::mutex mu;
  static std::map<std::string, Tokenizer> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto it = cache.find(rel);
  if (it == cache.end()) it = cache.emplace(rel, Tokenizer::from_file(data_dir() / rel)).first;
  return it->second;
}

// llama.cpp's test-tokenizer-0 vectors: the .inp holds the strings separated by "\n__ggml_vocab_test__\n"
// (the last one is the empty string after the final separator); the .out has one line of space-separated
// ids per string (no BOS), so splitting it on '\n' gives the same count.
struct VectorCase {
  std::string text;
  std::vector<int> ids;
};

inline std::vector<VectorCase> load_vectors(const std::string& name) {
  const auto dir = data_dir() / "tokenizers" / "vectors";
  const std::string inp = read_file(dir / ("ggml-vocab-" + name + ".gguf.inp"));
  const std::string out = read_file(dir / ("ggml-vocab-" + name + ".gguf.out"));
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> texts;
  for (size_t pos = 0;;) {
    const size_t next = inp.find(sep, pos);
    if (next == std::string::npos) {
      texts.push_back(inp.substr(pos));
      break;
    }
    texts.push_back(inp.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::vector<std::string> lines;
  for (size_t pos = 0;;) {
    const size_t next = out.find('\n', pos);
    if (next == std::string::npos) {
      lines.push_back(out.substr(pos));
      break;
    }
    lines.push_back(out.substr(pos, next - pos));
    pos = next + 1;
  }
  if (texts.size() != lines.size()) {
    throw std::runtime_error("vector files of " + name + " disagree: " + std::to_string(texts.size()) + " strings, " +
                             std::to_string(lines.size()) + " id lines");
  }
  std::vector<VectorCase> cases;
  for (size_t i = 0; i < texts.size(); ++i) {
    VectorCase c{texts[i], {}};
    std::istringstream ids(lines[i]);
    for (int id; ids >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace pagoda::testing_data

namespace pagoda::testing_data {

// Writes `content` to <temp dir>/<name>/<file> and returns the folder.
inline std::filesystem::path write_temp(const std::string& name, const std::string& file, const std::string& content) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("pagoda_tokenizer_test_" + std::to_string(::getpid())) / name;
  std::filesystem::create_directories(dir);
  std::ofstream(dir / file, std::ios::binary) << content;
  return dir;
}

}  // namespace pagoda::testing_data
