// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocabulary, ranked merges, byte
// fallback, ignore_merges, and a cache of finished pre-tokens. Internal to pagoda_tokenizer.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pagoda/tokenizer/json_util.h"
#include "pagoda/tokenizer/string_map.h"
#include "pagoda/tokenizer/token_model.h"

namespace pagoda::tokenizer_detail {

class BpeModel final : public TokenModel {
 public:
  // `model` is the "model" object of tokenizer.json; `where` names the file for error messages.
  BpeModel(const Json& model, const std::string& where);

  // Appends the ids of one pre-token (already normalized and pre-tokenized). Thread-safe.
  void encode(std::string_view word, std::vector<int>* ids) const override;

  std::optional<int> token_to_id(std::string_view token) const override;
  // nullptr when no vocabulary entry has this id.
  const std::string* id_to_token(int id) const override;
  // The largest id in the vocabulary, -1 when it is empty.
  int max_id() const override { return static_cast<int>(tokens_.size()) - 1; }

 private:
  struct Merge {
    int rank;
    int new_id;
  };
  static uint64_t pair_key(int left, int right) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
  }
  void load_merges(const Json& merges, const std::string& where);
  void merge_word(std::string_view word, std::vector<int>* ids) const;

  StringMap<int> vocab_;
  std::vector<std::string> tokens_;  // [max_id + 1]; holes are empty and absent from has_token_
  std::vector<bool> has_token_;
  std::unordered_map<uint64_t, Merge> merges_;  // (left id, right id) -> rank and id of the merged token
  std::optional<int> unk_id_;
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  std::array<int, 256> byte_token_ids_{};  // id of "<0xNN>" per byte, -1 when absent

  // Pre-token -> ids. Bounded: once full, new words are computed but not stored (as Hugging Face does).
  mutable std::mutex cache_mutex_;
  mutable StringMap<std::vector<int>> cache_;
};

}  // namespace pagoda::tokenizer_detail
