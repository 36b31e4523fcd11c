#include "pagoda/tokenizer/bpe.h"

#include <algorithm>
#include <cstdio>
#include <queue>

#include "pagoda/core/logging.h"
#include "pagoda/tokenizer/unicode.h"

namespace pagoda::tokenizer_detail {

namespace {

// Cache bounds: long pre-tokens are rare and costly to key; the entry cap bounds memory (~10 MB).
constexpr size_t kMaxCachedWordBytes = 256;
constexpr size_t kMaxCacheEntries = 65536;

}  // namespace

void read_vocab(const Json& model, const std::string& here, StringMap<int>* vocab, std::vector<std::string>* tokens,
                std::vector<bool>* has_token) {
  const Json& entries = json_field(model, "vocab", here);
  if (!entries.is_object()) throw_config_error(here, ": 'vocab' must be an object of token -> id, got ", json_preview(entries));
  int max_id = -1;
  vocab->reserve(entries.size());
  for (const auto& [token, id_json] : entries.items()) {
    if (!id_json.is_number_integer())
      throw_config_error(here, ": the id of token '", text_preview(token), "' is not an integer: ", json_preview(id_json));
    const auto id = id_json.get<long long>();
    if (id < 0 || id > kMaxTokenId) {
      throw_config_error(here, ": token '", text_preview(token), "' has id ", id, ", outside 0..", kMaxTokenId);
    }
    (*vocab)[token] = static_cast<int>(id);
    max_id = std::max(max_id, static_cast<int>(id));
  }
  // id -> token is a flat table; a vocabulary whose ids leave most of it empty (a handful of tokens with
  // ids in the millions) would cost memory out of all proportion to the file, and no real one does.
  if (static_cast<size_t>(max_id) >= 2 * entries.size() + 4096) {
    throw_config_error(here, ": the vocabulary has ", entries.size(), " tokens but ids up to ", max_id,
                       "; pagoda needs ids numbered from 0 without large gaps");
  }
  tokens->resize(static_cast<size_t>(max_id + 1));
  has_token->assign(tokens->size(), false);
  for (const auto& [token, id] : *vocab) {
    (*tokens)[id] = token;
    (*has_token)[id] = true;
  }
}

BpeModel::BpeModel(const Json& model, const std::string& where) {
  const std::string here = where + ": model";
  read_vocab(model, here, &vocab_, &tokens_, &has_token_);

  continuing_subword_prefix_ = json_string_or(model, "continuing_subword_prefix", "", here);
  end_of_word_suffix_ = json_string_or(model, "end_of_word_suffix", "", here);
  byte_fallback_ = json_bool_or(model, "byte_fallback", false, here);
  fuse_unk_ = json_bool_or(model, "fuse_unk", false, here);
  ignore_merges_ = json_bool_or(model, "ignore_merges", false, here);
  if (model.contains("dropout") && model["dropout"].is_number() && model["dropout"].get<double>() > 0) {
    PAGODA_LOG_WARNING(here, ": BPE dropout is a training-time option; pagoda encodes without it");
  }
  const std::string unk = json_string_or(model, "unk_token", "", here);
  if (!unk.empty()) {
    auto it = vocab_.find(unk);
    if (it == vocab_.end()) throw_config_error(here, ": unk_token '", text_preview(unk), "' is not in the vocabulary");
    unk_id_ = it->second;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = vocab_.find(std::string_view(name));
    byte_token_ids_[b] = it == vocab_.end() ? -1 : it->second;
  }
  load_merges(json_field(model, "merges", here), here);
}

void BpeModel::load_merges(const Json& merges, const std::string& where) {
  if (!merges.is_array()) throw_config_error(where, ": 'merges' must be a list, got ", json_preview(merges));
  merges_.reserve(merges.size());
  int rank = 0;
  for (const Json& m : merges) {
    std::string left, right;
    if (m.is_string()) {
      // Legacy form "a b": exactly one space (tokens with spaces need the pair form).
      const std::string& s = m.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        throw_config_error(where, ": merge #", rank, " '", text_preview(s), "' is not two tokens separated by one space");
      }
      left = s.substr(0, sp);
      right = s.substr(sp + 1);
    } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
      left = m[0].get<std::string>();
      right = m[1].get<std::string>();
    } else {
      throw_config_error(where, ": merge #", rank, " must be \"a b\" or [\"a\", \"b\"], found ", json_preview(m));
    }
    std::string merged = left;
    std::string_view tail = right;
    if (!continuing_subword_prefix_.empty() &&
        tail.substr(0, continuing_subword_prefix_.size()) == continuing_subword_prefix_) {
      tail.remove_prefix(continuing_subword_prefix_.size());
    }
    merged.append(tail);
    auto find = [&](const std::string& t) {
      auto it = vocab_.find(t);
      if (it == vocab_.end()) {
        throw_config_error(where, ": merge #", rank, " ('", text_preview(left), "', '", text_preview(right), "') uses token '", text_preview(t),
                           "', which is not in the vocabulary");
      }
      return it->second;
    };
    // A later duplicate of a pair overrides the earlier one, as in Hugging Face's map construction.
    merges_[pair_key(find(left), find(right))] = Merge{rank, find(merged)};
    ++rank;
  }
}

std::optional<int> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int id) const {
  if (id < 0 || id >= static_cast<int>(tokens_.size()) || !has_token_[id]) return nullptr;
  return &tokens_[id];
}

void BpeModel::encode(std::string_view word, std::vector<int>* ids) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    // Llama 3 (tiktoken): a pre-token that is itself a token is taken whole.
    if (auto it = vocab_.find(word); it != vocab_.end()) {
      ids->push_back(it->second);
      return;
    }
  }
  const bool cacheable = word.size() <= kMaxCachedWordBytes;
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (auto it = cache_.find(word); it != cache_.end()) {
      ids->insert(ids->end(), it->second.begin(), it->second.end());
      return;
    }
  }
  const size_t start = ids->size();
  merge_word(word, ids);
  if (cacheable) {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    if (cache_.size() < kMaxCacheEntries)
      cache_.emplace(std::string(word), std::vector<int>(ids->begin() + start, ids->end()));
  }
}

// Hugging Face's Word::merge_all: a doubly linked list of symbols and a min-heap of candidate merges
// ordered by (rank, position); stale heap entries are recognized and skipped when popped.
void BpeModel::merge_word(std::string_view word, std::vector<int>* ids) const {
  struct Symbol {
    int id;
    int prev;
    int next;
    size_t len;  // bytes of the word covered; 0 once merged into its left neighbour
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  auto add = [&](int id, size_t len) {
    const int n = static_cast<int>(symbols.size());
    if (n > 0) symbols.back().next = n;
    symbols.push_back({id, n - 1, -1, len});
  };

  // An unk symbol not yet added (fuse_unk grows it over consecutive unknown characters).
  int pending_unk_id = -1;
  size_t pending_unk_len = 0;
  auto flush_unk = [&] {
    if (pending_unk_id >= 0) add(pending_unk_id, pending_unk_len);
    pending_unk_id = -1;
  };
  std::string unit;
  size_t i = 0;
  while (i < word.size()) {
    char32_t cp;
    const size_t n = utf8_decode(word, i, &cp);
    const bool first = i == 0, last = i + n == word.size();
    unit.clear();
    if (!first) unit.append(continuing_subword_prefix_);
    unit.append(word.substr(i, n));
    if (last) unit.append(end_of_word_suffix_);
    i += n;

    if (auto it = vocab_.find(unit); it != vocab_.end()) {
      flush_unk();
      add(it->second, n);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char b : unit) all = all && byte_token_ids_[b] >= 0;
      if (all) {
        for (unsigned char b : unit) add(byte_token_ids_[b], 1);
        continue;
      }
    }
    if (unk_id_) {
      if (pending_unk_id >= 0 && fuse_unk_) {
        pending_unk_len += n;
      } else {
        flush_unk();
        pending_unk_id = *unk_id_;
        pending_unk_len = n;
      }
    }
    // Without an unk token an unknown character is dropped, as in Hugging Face.
  }
  flush_unk();

  struct Candidate {
    int rank;
    int pos;
    int new_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  auto find_merge = [&](int left, int right) -> const Merge* {
    auto it = merges_.find(pair_key(left, right));
    return it == merges_.end() ? nullptr : &it->second;
  };
  for (size_t k = 0; k + 1 < symbols.size(); ++k) {
    if (const Merge* m = find_merge(symbols[k].id, symbols[k + 1].id)) {
      queue.push({m->rank, static_cast<int>(k), m->new_id});
    }
  }
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& cur = symbols[top.pos];
    if (cur.len == 0 || cur.next == -1) continue;
    const int next_pos = cur.next;
    const Symbol right = symbols[next_pos];
    const Merge* m = find_merge(cur.id, right.id);
    if (m == nullptr || m->new_id != top.new_id) continue;  // stale: one side changed since it was queued

    cur.id = top.new_id;
    cur.len += right.len;
    cur.next = right.next;
    symbols[next_pos].len = 0;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const Merge* pm = find_merge(symbols[cur.prev].id, cur.id)) queue.push({pm->rank, cur.prev, pm->new_id});
    }
    if (cur.next >= 0) {
      if (const Merge* nm = find_merge(cur.id, symbols[cur.next].id)) queue.push({nm->rank, top.pos, nm->new_id});
    }
  }
  for (const Symbol& s : symbols) {
    if (s.len != 0) ids->push_back(s.id);
  }
}

}  // namespace pagoda::tokenizer_detail
