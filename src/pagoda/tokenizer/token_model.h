// The model stage of tokenizer.json ("model"): what turns one pre-token into ids. BPE (bpe.h) and
// WordPiece (wordpiece.h) implement it. Internal to pagoda_tokenizer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagoda/tokenizer/json_util.h"
#include "pagoda/tokenizer/string_map.h"

namespace pagoda::tokenizer_detail {

// Ids above this bound are rejected at load time: a vocabulary is dense in practice, and a corrupt file
// must not make us allocate a table for an id of two billion.
inline constexpr int kMaxTokenId = (1 << 24) - 1;

// Reads model["vocab"] (an object of token -> id) into token -> id and the flat id -> token table
// (tokens [max_id + 1]; holes are empty and false in has_token), with the checks every model applies:
// integer ids in 0..kMaxTokenId, and no large gaps. Errors name `here`.
void read_vocab(const Json& model, const std::string& here, StringMap<int>* vocab, std::vector<std::string>* tokens,
                std::vector<bool>* has_token);

class TokenModel {
 public:
  virtual ~TokenModel() = default;
  // Appends the ids of one pre-token (already normalized and pre-tokenized). Thread-safe.
  virtual void encode(std::string_view word, std::vector<int>* ids) const = 0;
  virtual std::optional<int> token_to_id(std::string_view token) const = 0;
  // nullptr when no vocabulary entry has this id.
  virtual const std::string* id_to_token(int id) const = 0;
  // The largest id in the vocabulary, -1 when it is empty.
  virtual int max_id() const = 0;
};

}  // namespace pagoda::tokenizer_detail
