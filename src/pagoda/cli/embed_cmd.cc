// `pagoda embed`: sentence embeddings of texts with an encoder model, offline, as one JSON object in the
// shape of the OpenAI embeddings response.
#include <cstdio>
#include <fstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "pagoda/cli/command_line.h"
#include "pagoda/cli/commands.h"
#include "pagoda/core/error.h"
#include "pagoda/engine/embedder.h"
#include "pagoda/model/builtin_models.h"

namespace pagoda {

// find_embedding_model(), or a config error naming what `model` should be.
std::filesystem::path resolve_embedding_model(const std::string& model) {
  if (const std::optional<std::filesystem::path> p = find_embedding_model(model)) return *p;
  throw_config_error("'", model, "' is not an embedding model: give a folder with the config.json of a BERT-family "
                     "encoder (or the name of one in ", model_cache_dir().string(), ", e.g. all-MiniLM-L6-v2 after `",
                     kFetchModelsCommand, "`)");
}

int run_embed(const std::vector<std::string>& raw) {
  apply_early_log_level(raw);
  std::string model;
  std::vector<std::string> texts;
  std::string input_file;
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  ArgParser parser("pagoda embed",
                   "Embed texts with an encoder model (a folder such as sentence-transformers' all-MiniLM-L6-v2) "
                   "and print {\"data\": [{\"index\", \"embedding\"}], \"usage\"} as JSON on stdout.");
  parser.add_positional("MODEL", "The model folder, or its name in pagoda's model cache.",
                        [&](const std::string& v) { model = v; });
  parser.add({"--model", {}, "MODEL", "Same as the positional MODEL.", "embed", [&](const std::string& v) { model = v; }, {}, {}});
  parser.add({"--text", {}, "TEXT", "A text to embed (repeatable).", "embed",
              [&](const std::string& v) { texts.push_back(v); }, {}, {}});
  parser.add({"--input-file", {}, "FILE", "Embed each line of FILE (empty lines skipped).", "embed",
              [&](const std::string& v) { input_file = v; }, {}, {}});
  parser.add({"--threads", {}, "N", "CPU threads (default: all).", "embed",
              [&](const std::string& v) { threads = parse_int_arg("--threads", v); }, {}, {}});
  if (!parse_command_line(parser, raw, true)) return 0;
  if (model.empty()) throw_config_error("give the model: pagoda embed MODEL --text TEXT");
  if (threads < 1) throw_config_error("--threads must be >= 1, got ", threads);
  if (!input_file.empty()) {
    std::ifstream in(input_file);
    if (!in) throw_config_error("cannot read --input-file ", input_file);
    for (std::string line; std::getline(in, line);)
      if (!line.empty()) texts.push_back(line);
  }
  if (texts.empty()) throw_config_error("nothing to embed: give --text TEXT or --input-file FILE");

  Embedder embedder(resolve_embedding_model(model), threads);
  std::vector<std::vector<int>> seqs;
  int64_t tokens = 0;
  for (const std::string& t : texts) {
    seqs.push_back(embedder.tokenize(t));
    tokens += int64_t(seqs.back().size());
  }
  const std::vector<std::vector<float>> vecs = embedder.embed(seqs);
  nlohmann::json out = {{"object", "list"}, {"model", model}, {"data", nlohmann::json::array()},
                        {"usage", {{"prompt_tokens", tokens}, {"total_tokens", tokens}}}};
  for (size_t i = 0; i < vecs.size(); ++i)
    out["data"].push_back({{"object", "embedding"}, {"index", i}, {"embedding", vecs[i]}});
  std::puts(out.dump().c_str());
  return 0;
}

}  // namespace pagoda
