// The WordPiece model of tokenizer.json ("model": {"type": "WordPiece", ...}) and the BERT components that
// come with it: BertNormalizer, BertPreTokenizer and the WordPiece decoder. Internal to pagoda_tokenizer.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagoda/tokenizer/decoder.h"
#include "pagoda/tokenizer/json_util.h"
#include "pagoda/tokenizer/normalizer.h"
#include "pagoda/tokenizer/pre_tokenizer.h"
#include "pagoda/tokenizer/string_map.h"
#include "pagoda/tokenizer/token_model.h"

namespace pagoda::tokenizer_detail {

// Greedy longest-match-first over a word: the first piece is a plain vocabulary entry, the rest carry
// continuing_subword_prefix ("##"); a word with any part that matches nothing, or longer than
// max_input_chars_per_word code points, becomes the single unk_token (as Hugging Face's WordPiece).
class WordPieceModel final : public TokenModel {
 public:
  WordPieceModel(const Json& model, const std::string& where);
  void encode(std::string_view word, std::vector<int>* ids) const override;
  std::optional<int> token_to_id(std::string_view token) const override;
  const std::string* id_to_token(int id) const override;
  int max_id() const override { return static_cast<int>(tokens_.size()) - 1; }

 private:
  StringMap<int> vocab_;
  std::vector<std::string> tokens_;  // [max_id + 1]; holes are empty and absent from has_token_
  std::vector<bool> has_token_;
  int unk_id_ = 0;
  std::string prefix_;
  size_t max_chars_ = 100;
};

// BertNormalizer: clean_text (drop NUL, U+FFFD and control characters, whitespace to ' '),
// handle_chinese_chars (spaces around CJK ideographs), strip_accents (NFD then drop Mn; null follows
// lowercase) and lowercase, in that order.
std::unique_ptr<Normalizer> make_bert_normalizer(const Json& spec, const std::string& where);
// BertPreTokenizer: split on whitespace (dropped) and isolate each punctuation character (ASCII
// punctuation and Unicode P*).
std::unique_ptr<PreTokenizer> make_bert_pre_tokenizer();
// WordPiece decoder: pieces with the prefix glue to the previous one, others get a space; cleanup removes
// the space before punctuation and English contractions as Hugging Face does.
std::unique_ptr<Decoder> make_wordpiece_decoder(const Json& spec, const std::string& where);

}  // namespace pagoda::tokenizer_detail
