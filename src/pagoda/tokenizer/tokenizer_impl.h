// The state behind pagoda::Tokenizer, shared by tokenizer.cc (encode/decode) and tokenizer_loader.cc
// (building it from the files). Internal to pagoda_tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/tokenizer/added_vocab.h"
#include "pagoda/tokenizer/bpe.h"
#include "pagoda/tokenizer/decoder.h"
#include "pagoda/tokenizer/normalizer.h"
#include "pagoda/tokenizer/pre_tokenizer.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

// The inputs a tokenizer is built from, as text; an absent optional file is nullopt. The labels name
// the inputs in errors (their paths, or bare file names for text given directly).
struct TokenizerSources {
  std::string tokenizer_json;
  std::string tokenizer_json_label = "tokenizer.json";
  std::optional<std::string> config;  // tokenizer_config.json
  std::string config_label = "tokenizer_config.json";
  std::optional<std::string> special_tokens_map;
  std::string special_tokens_map_label = "special_tokens_map.json";
  std::optional<std::string> generation_config;
  std::string generation_config_label = "generation_config.json";
  std::optional<std::string> chat_template_jinja;
};

// The same inputs parsed; JSON null for an absent optional file. The GGUF vocabulary (gguf_vocab.cc) builds
// them in memory.
struct TokenizerJson {
  tokenizer_detail::Json tokenizer;
  tokenizer_detail::Json config;
  tokenizer_detail::Json special_tokens_map;
  tokenizer_detail::Json generation_config;
};

struct Tokenizer::Impl {
  std::string source;  // the tokenizer.json path, for messages
  std::unique_ptr<tokenizer_detail::TokenModel> model;  // BPE or WordPiece
  tokenizer_detail::AddedVocab added;
  std::unique_ptr<tokenizer_detail::Normalizer> normalizer;       // may be null
  std::unique_ptr<tokenizer_detail::PreTokenizer> pre_tokenizer;  // may be null
  std::unique_ptr<tokenizer_detail::Decoder> decoder;             // null: tokens joined with spaces
  std::vector<int> prefix_ids;                                    // added before the text by add_special_tokens
  std::vector<int> suffix_ids;                                    // added after it
  std::optional<int> bos_id;
  std::vector<int> eos_ids;
  std::string chat_template;
  std::string bos_token;  // the config's token strings ("" when not named)
  std::string eos_token;
  int vocab_size = 0;

  // Reads tokenizer.json and the optional files beside tokenizer_config (tokenizer_loader.cc).
  void load(const std::filesystem::path& tokenizer_json, const std::filesystem::path& tokenizer_config);
  // The same from text, no file I/O.
  void load(const TokenizerSources& sources);
  // From parsed inputs; of `sources` only the labels and chat_template_jinja are read.
  void load(const TokenizerJson& json, const TokenizerSources& sources);

  std::vector<int> encode(std::string_view text, bool add_special_tokens, bool parse_special) const;
  std::string decode(std::span<const int> ids, bool skip_special_tokens,
                     tokenizer_detail::InvalidBytes invalid = tokenizer_detail::InvalidBytes::kReplace) const;

 private:
  void build(const TokenizerJson& json, const TokenizerSources& sources);
  // Normalizes one text segment, splits off normalized added tokens, pre-tokenizes and runs the model.
  void encode_segment(std::string_view text, bool at_start, bool parse_special, std::vector<int>* ids) const;
  void encode_normalized(std::string text, bool at_start, std::vector<int>* ids) const;
};

}  // namespace pagoda
