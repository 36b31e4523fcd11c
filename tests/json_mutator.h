// Mutations of a JSON document for the CTest fuzz drivers (config.json, tokenizer.json): structure-aware
// ones that keep the text valid JSON so the parser's field checks are reached (a value replaced by a
// hostile one, a key removed, deep nesting) and byte-level ones that exercise the syntax errors (bit
// flips, truncation, spliced tokens). Deterministic in the seed.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace pagoda::test {

class JsonMutator {
 public:
  explicit JsonMutator(uint64_t seed) : rng_(seed) {}

  uint64_t pick(uint64_t n) { return n ? rng_() % n : 0; }

  // One mutant of `doc` as text: mostly structural (1-3 edits), sometimes byte-level on the dumped text.
  std::string mutate(const nlohmann::json& doc) {
    nlohmann::json j = doc;
    const int edits = 1 + int(pick(3));
    for (int e = 0; e < edits; ++e) edit(j);
    // Invalid UTF-8 in a string is kept as U+FFFD (dump() would throw); the byte edits below add raw bytes.
    std::string text = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    if (pick(4) == 0) bytes(text);
    return text;
  }

 private:
  nlohmann::json hostile() {
    static const std::vector<nlohmann::json> values = {
        0, -1, 1, 2, 3, 7, 64, 2147483647, 2147483648LL, 4294967296LL, 1099511627776LL, INT64_MAX,
        UINT64_MAX, 1.5, 1e9, 1e308, -0.0, 4096.0, "", "x", "silu", "BPE", "Sequence", "ByteLevel",
        "Regex", nullptr, true, false, nlohmann::json::array(), nlohmann::json::object(),
        nlohmann::json::array({1, 2}), {{"type", "Sequence"}}, {{"Regex", "(a+)+$"}}, {{"String", ""}}};
    switch (pick(4)) {
      case 0: return std::string(1 + pick(4000), "a\xC3\xA9[{\"\\ "[pick(8)]);  // a long string
      case 1: {  // deep nesting, under and over kMaxJsonDepth
        nlohmann::json v = 1;
        for (uint64_t d = 0, n = pick(300); d < n; ++d) v = nlohmann::json::array({std::move(v)});
        return v;
      }
      default: return values[pick(values.size())];
    }
  }

  // Replaces, removes or retypes one node chosen uniformly over the document.
  void edit(nlohmann::json& root) {
    std::vector<nlohmann::json*> nodes = {&root};
    for (size_t i = 0; i < nodes.size() && nodes.size() < 200000; ++i)
      if (nodes[i]->is_structured())
        for (auto& child : *nodes[i]) nodes.push_back(&child);
    nlohmann::json& n = *nodes[pick(nodes.size())];
    switch (pick(5)) {
      case 0:  // remove a key or an item
        if (n.is_object() && !n.empty()) {
          auto it = n.begin();
          std::advance(it, long(pick(n.size())));
          n.erase(it);
        } else if (n.is_array() && !n.empty()) {
          n.erase(n.begin() + long(pick(n.size())));
        }
        break;
      case 1:  // scale a number
        if (n.is_number_integer()) n = int64_t(uint64_t(n.get<int64_t>()) * (1 + pick(100000)) - pick(3));  // wraps
        else if (n.is_number()) n = -n.get<double>();
        else n = hostile();
        break;
      case 2:  // add a key or an item
        if (n.is_object()) n[std::string(1, char('a' + pick(26)))] = hostile();
        else if (n.is_array()) n.push_back(hostile());
        else n = hostile();
        break;
      default:
        n = hostile();
    }
  }

  void bytes(std::string& text) {
    static const char* splices[] = {"{", "}", "[", "]", ",", ":", "\"", "null", "1e999", "-", "\\u0000", "\\ud800",
                                    "\xff", "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["};
    switch (pick(3)) {
      case 0:
        for (int i = 0; i < 1 + int(pick(4)); ++i)
          if (!text.empty()) text[pick(text.size())] ^= char(1u << pick(8));
        break;
      case 1: text.resize(pick(text.size() + 1)); break;
      default: text.insert(pick(text.size() + 1), splices[pick(sizeof(splices) / sizeof(splices[0]))]);
    }
  }

  std::mt19937_64 rng_;
};

}  // namespace pagoda::test
