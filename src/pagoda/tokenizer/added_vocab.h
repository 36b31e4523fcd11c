// Added tokens (tokenizer.json "added_tokens", tokenizer_config.json "added_tokens_decoder"): finding them
// in text before the model sees it, with Hugging Face's lstrip / rstrip / single_word / normalized rules.
// Internal to pagoda_tokenizer.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pagoda/tokenizer/string_map.h"

namespace pagoda::tokenizer_detail {

struct AddedToken {
  std::string content;
  int id = -1;
  bool special = false;
  bool lstrip = false;       // swallow whitespace on its left
  bool rstrip = false;       // swallow whitespace on its right
  bool normalized = false;   // matched in the normalized text rather than the raw text
  bool single_word = false;  // only matched when not inside a word
};

// A piece of the input: an added token (id >= 0) or text for the model (id == -1). `offset` is where the
// piece starts in the string that was split.
struct Segment {
  std::string_view text;
  int id = -1;
  size_t offset = 0;
};

class AddedVocab {
 public:
  // Adds or replaces (same id) a token. Call finalize() after the last one.
  void add(AddedToken token);
  // Builds the matchers; `normalize` maps the content of a normalized token to its normalized form.
  template <typename NormalizeFn>
  void finalize(NormalizeFn&& normalize) {
    raw_ = Trie();
    normalized_ = Trie();
    for (const AddedToken& t : tokens_) {
      if (t.content.empty()) continue;
      if (t.normalized) {
        normalized_.insert(normalize(t.content), t.id);
      } else {
        raw_.insert(t.content, t.id);
      }
    }
  }

  // Splits `text` at the added tokens of the raw (normalized == false) or normalized set: the leftmost
  // match wins, then the longest. With parse_special false, special tokens are left as text.
  void split(std::string_view text, bool normalized_set, bool parse_special, std::vector<Segment>* out) const;
  bool has_normalized_tokens() const { return !normalized_.empty(); }

  const AddedToken* find_by_id(int id) const;
  const AddedToken* find_by_content(std::string_view content) const;
  const std::vector<AddedToken>& tokens() const { return tokens_; }
  void set_special(int id);

 private:
  // A byte trie of token contents; node 0 is the root.
  class Trie {
   public:
    Trie() : nodes_(1) {}
    void insert(std::string_view key, int id);
    bool empty() const { return nodes_.size() == 1; }
    // Longest key starting at text[pos]: (length, id), or length 0 when none.
    std::pair<size_t, int> longest_match(std::string_view text, size_t pos) const;

   private:
    struct Node {
      std::vector<std::pair<unsigned char, int>> children;  // sorted by byte
      int id = -1;
    };
    std::vector<Node> nodes_;
    bool first_byte_[256] = {};
  };

  std::vector<AddedToken> tokens_;
  std::unordered_map<int, size_t> by_id_;  // id -> index in tokens_
  StringMap<size_t> by_content_;           // content -> index in tokens_ (the first token wins)
  Trie raw_;
  Trie normalized_;
};

}  // namespace pagoda::tokenizer_detail
