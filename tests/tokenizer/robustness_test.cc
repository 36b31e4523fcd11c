// Random input through encode/decode: never a crash, ids always in range, decode always valid UTF-8, and
// the byte-level tokenizers give valid UTF-8 text back unchanged. Also logs the encoding speed.
#include <gtest/gtest.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <random>

#include "test_data.h"

namespace pagoda {
namespace {

using testing_data::data_dir;
using testing_data::load_vectors;
using testing_data::read_file;
using testing_data::shared_tokenizer;

const char* kAllTokenizers[] = {"tokenizers/gpt2", "tokenizers/llama3", "tokenizers/qwen2", "tokenizers/llama-spm",
                                "models/stories260K/hf"};

void append_utf8(char32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

bool valid_utf8(const std::string& s) {
  // Decode and re-encode each character; an invalid sequence or overlong form fails the round trip.
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    const size_t n = b < 0x80                 ? 1
                     : b >= 0xC2 && b <= 0xDF ? 2
                     : b >= 0xE0 && b <= 0xEF ? 3
                     : b >= 0xF0 && b <= 0xF4 ? 4
                                              : 0;
    if (n == 0 || i + n > s.size()) return false;
    char32_t cp = n == 1 ? b : b & (0xFF >> (n + 1));
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if ((c & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (c & 0x3F);
    }
    if ((cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF) return false;
    std::string again;
    append_utf8(cp, &again);
    if (again != s.substr(i, n)) return false;
    i += n;
  }
  return true;
}

std::string random_bytes(std::mt19937& rng) {
  std::string s(rng() % 64, '\0');
  for (char& c : s) {
    // Bias toward bytes that start or continue multi-byte sequences, and toward spaces and '<'.
    const unsigned r = rng() % 10;
    c = static_cast<char>(r < 3   ? 0x80 + rng() % 0x80
                          : r < 5 ? 0xC0 + rng() % 0x40
                          : r < 6 ? ' '
                          : r < 7 ? '<'
                                  : rng() % 256);
  }
  return s;
}

// Valid UTF-8 from ranges that NFC leaves unchanged (so Qwen's normalizer keeps it as is): ASCII and
// whitespace, Cyrillic letters, CJK ideographs, Hangul syllables and emoji.
std::string random_nfc_text(std::mt19937& rng) {
  static const std::pair<char32_t, char32_t> kRanges[] = {
      {0x20, 0x7E},     {0x20, 0x7E},     {0x20, 0x7E},       {0x09, 0x0D}, {0x410, 0x44F},
      {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0x1F300, 0x1F64F}, {0xA0, 0xA0}, {0x3000, 0x3000}};
  std::string s;
  const size_t n = rng() % 40;
  for (size_t i = 0; i < n; ++i) {
    const auto& [lo, hi] = kRanges[rng() % std::size(kRanges)];
    append_utf8(lo + rng() % (hi - lo + 1), &s);
  }
  return s;
}

// Any code point but surrogates.
std::string random_unicode_text(std::mt19937& rng) {
  std::string s;
  const size_t n = rng() % 30;
  for (size_t i = 0; i < n; ++i) {
    char32_t cp = rng() % 4 == 0 ? rng() % 0x110000 : rng() % 0x3000;
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = ' ';
    append_utf8(cp, &s);
  }
  return s;
}

TEST(RobustnessTest, RandomBytesNeverBreakEncodeOrDecode) {
  std::mt19937 rng(42);
  for (const char* path : kAllTokenizers) {
    const Tokenizer& tok = shared_tokenizer(path);
    for (int n = 0; n < 300; ++n) {
      const std::string input = random_bytes(rng);
      for (bool parse_special : {true, false}) {
        const std::vector<int> ids = tok.encode(input, true, parse_special);
        for (int id : ids) ASSERT_TRUE(id >= 0 && id < tok.vocab_size()) << path << ": id " << id;
        const std::string text = tok.decode(ids, false);
        ASSERT_TRUE(valid_utf8(text)) << path;
        // Invalid input bytes were read as U+FFFD, so the text is a fixed point from here on.
        if (std::string_view(path).find("tokenizers/llama-spm") == std::string_view::npos &&
            std::string_view(path).find("stories") == std::string_view::npos) {
          EXPECT_EQ(tok.decode(tok.encode(text, false, parse_special), false), text) << path;
        }
      }
      // Random ids (including out-of-range ones) decode to valid UTF-8, also when streamed.
      std::vector<int> ids;
      for (int k = 0; k < 20; ++k) ids.push_back(static_cast<int>(rng() % (tok.vocab_size() + 100)) - 50);
      ASSERT_TRUE(valid_utf8(tok.decode(ids, true)));
      IncrementalDetokenizer stream(tok);
      for (int id : ids) ASSERT_TRUE(valid_utf8(stream.add(id))) << path;
      ASSERT_TRUE(valid_utf8(stream.finish()));
    }
  }
}

TEST(RobustnessTest, ByteLevelTokenizersAreLosslessOnValidUtf8) {
  std::mt19937 rng(7);
  for (const char* path : {"tokenizers/gpt2", "tokenizers/llama3", "tokenizers/qwen2"}) {
    const Tokenizer& tok = shared_tokenizer(path);
    const bool nfc = std::string_view(path).find("qwen") != std::string_view::npos;
    for (int n = 0; n < 500; ++n) {
      const std::string text = nfc || n % 2 ? random_nfc_text(rng) : random_unicode_text(rng);
      ASSERT_TRUE(valid_utf8(text));
      const std::vector<int> ids = tok.encode(text, false);
      EXPECT_EQ(tok.decode(ids, false), text) << path;
      IncrementalDetokenizer stream(tok, false);
      std::string streamed;
      for (int id : ids) streamed += stream.add(id);
      EXPECT_EQ(streamed + stream.finish(), text) << path;
    }
  }
}

// Not a timed assertion: prints how fast loading and encoding are (the note in tokenizer.h quotes it).
// The corpus is the data set's own documents, templates and JSON (mixed prose, markup and code, 80 KB,
// repeated to over 100 KB); each tokenizer is loaded fresh so the first encode starts with an empty word
// cache.
TEST(RobustnessTest, EncodeThroughput) {
  std::string corpus;
  for (const char* f : {"README.md", "tokenizers/VERIFIED.md", "tokenizers/SOURCES.md", "models/stories260K/GOLDEN.md",
                        "models/stories260K/VERIFIED.md", "tokenizers/llama3/chat_template.jinja",
                        "tokenizers/qwen2/chat_template.jinja", "tokenizers/chat-template-cases.json"}) {
    corpus += read_file(data_dir() / f);
  }
  const std::string documents = corpus;
  while (corpus.size() < 100 * 1024) corpus += documents;  // the repeat is encoded from the word cache
  for (const char* path : kAllTokenizers) {
    using Clock = std::chrono::steady_clock;
    auto ms = [](auto a, auto b) { return std::chrono::duration<double, std::milli>(b - a).count(); };
    const auto t0 = Clock::now();
    const Tokenizer tok = Tokenizer::from_file(data_dir() / path);
    const auto t1 = Clock::now();
    const std::vector<int> ids = tok.encode(corpus, false);
    const auto t2 = Clock::now();
    const std::vector<int> again = tok.encode(corpus, false);
    const auto t3 = Clock::now();
    const std::string text = tok.decode(ids, false);
    const auto t4 = Clock::now();
    EXPECT_EQ(ids, again);
    std::printf(
        "%-22s load %.0f ms; %zu KB -> %zu ids: encode %.1f ms (%.1f MB/s), again with the word cache "
        "warm %.1f ms; decode %.1f ms\n",
        path, ms(t0, t1), corpus.size() / 1024, ids.size(), ms(t1, t2), corpus.size() / 1e3 / ms(t1, t2), ms(t2, t3),
        ms(t3, t4));
  }
}

}  // namespace
}  // namespace pagoda
