#include "pagoda/tokenizer/added_vocab.h"

#include <algorithm>

#include "pagoda/tokenizer/unicode.h"

namespace pagoda::tokenizer_detail {

namespace {

char32_t first_char(std::string_view s) {
  char32_t cp;
  utf8_decode(s, 0, &cp);
  return cp;
}

char32_t last_char(std::string_view s) {
  size_t i = s.size() - 1;
  while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
  char32_t cp;
  utf8_decode(s, i, &cp);
  return cp;
}

// Where the trailing whitespace of `s` begins.
size_t trailing_space_start(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t i = end - 1;
    while (i > 0 && (static_cast<unsigned char>(s[i]) & 0xC0) == 0x80) --i;
    char32_t cp;
    utf8_decode(s, i, &cp);
    if (!is_whitespace(cp)) break;
    end = i;
  }
  return end;
}

// Length of the leading whitespace of `s`.
size_t leading_space_len(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    char32_t cp;
    const size_t n = utf8_decode(s, i, &cp);
    if (!is_whitespace(cp)) break;
    i += n;
  }
  return i;
}

}  // namespace

void AddedVocab::Trie::insert(std::string_view key, int id) {
  int node = 0;
  for (unsigned char b : key) {
    auto& children = nodes_[node].children;
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, 0),
                               [](const auto& a, const auto& c) { return a.first < c.first; });
    if (it != children.end() && it->first == b) {
      node = it->second;
      continue;
    }
    const int child = static_cast<int>(nodes_.size());
    children.insert(it, {b, child});
    nodes_.emplace_back();  // invalidates `children`; not used again in this iteration
    node = child;
  }
  if (nodes_[node].id < 0) nodes_[node].id = id;  // the first token with a given content wins
  first_byte_[static_cast<unsigned char>(key[0])] = true;
}

std::pair<size_t, int> AddedVocab::Trie::longest_match(std::string_view text, size_t pos) const {
  if (!first_byte_[static_cast<unsigned char>(text[pos])]) return {0, -1};
  std::pair<size_t, int> best{0, -1};
  int node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto& children = nodes_[node].children;
    const auto b = static_cast<unsigned char>(text[i]);
    auto it = std::lower_bound(children.begin(), children.end(), std::make_pair(b, 0),
                               [](const auto& a, const auto& c) { return a.first < c.first; });
    if (it == children.end() || it->first != b) break;
    node = it->second;
    if (nodes_[node].id >= 0) best = {i + 1 - pos, nodes_[node].id};
  }
  return best;
}

void AddedVocab::add(AddedToken token) {
  if (auto it = by_id_.find(token.id); it != by_id_.end()) {
    by_content_.erase(tokens_[it->second].content);
    by_content_.emplace(token.content, it->second);
    tokens_[it->second] = std::move(token);
    return;
  }
  by_id_[token.id] = tokens_.size();
  by_content_.emplace(token.content, tokens_.size());
  tokens_.push_back(std::move(token));
}

void AddedVocab::set_special(int id) {
  if (auto it = by_id_.find(id); it != by_id_.end()) tokens_[it->second].special = true;
}

const AddedToken* AddedVocab::find_by_id(int id) const {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &tokens_[it->second];
}

const AddedToken* AddedVocab::find_by_content(std::string_view content) const {
  auto it = by_content_.find(content);
  return it == by_content_.end() ? nullptr : &tokens_[it->second];
}

// Hugging Face's AddedVocabulary::find_matches. The search resumes after each match even when the match
// is then ignored (single_word, special tokens not parsed), as its Aho-Corasick iterator does.
void AddedVocab::split(std::string_view text, bool normalized_set, bool parse_special,
                       std::vector<Segment>* out) const {
  const Trie& trie = normalized_set ? normalized_ : raw_;
  if (trie.empty() || text.empty()) {
    out->push_back({text, -1, 0});
    return;
  }
  size_t start_offset = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto [len, id] = trie.longest_match(text, pos);
    if (len == 0) {
      ++pos;
      continue;
    }
    size_t start = pos, stop = pos + len;
    pos = stop;
    const AddedToken& token = *find_by_id(id);
    if (token.special && !parse_special) continue;
    // Inside whitespace that the previous token's rstrip already took.
    if (start < start_offset) continue;
    if (token.single_word) {
      // Hugging Face tests the neighbours with the regexes \w$ and ^\w.
      const bool space_before = start == 0 || !is_word_char(last_char(text.substr(0, start)));
      const bool space_after = stop == text.size() || !is_word_char(first_char(text.substr(stop)));
      if (!space_before || !space_after) continue;
    }
    if (token.lstrip) start = std::max(trailing_space_start(text.substr(0, start)), start_offset);
    if (token.rstrip) stop += leading_space_len(text.substr(stop));
    if (start > start_offset) out->push_back({text.substr(start_offset, start - start_offset), -1, start_offset});
    out->push_back({text.substr(start, stop - start), id, start});
    start_offset = stop;
  }
  if (start_offset != text.size()) {
    out->push_back({text.substr(start_offset), -1, start_offset});
  }
}

}  // namespace pagoda::tokenizer_detail
