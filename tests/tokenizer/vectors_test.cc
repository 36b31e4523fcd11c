// llama.cpp's tokenizer vectors (47 strings per vocabulary, ids without BOS), for each tokenizer.json:
// exact ids, decode round trip, and streaming decode.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "pagoda/core/strings.h"
#include "test_data.h"

namespace pagoda {
namespace {

using testing_data::load_vectors;
using testing_data::shared_tokenizer;

struct VectorSet {
  const char* folder;   // under tokenizers/
  const char* vectors;  // ggml-vocab-<name>.gguf.{inp,out}
};

std::string ids_str(const std::vector<int>& ids) {
  std::vector<std::string> parts;
  for (int id : ids) parts.push_back(std::to_string(id));
  return "[" + join(parts, ", ") + "]";
}

// Independent of the library's own UTF-8 code: RFC 3629 well-formedness.
bool well_formed_utf8(const std::string& s) {
  size_t i = 0;
  while (i < s.size()) {
    const auto b = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned lo = 0x80, hi = 0xBF;
    if (b < 0x80) {
      n = 1;
    } else if (b >= 0xC2 && b <= 0xDF) {
      n = 2;
    } else if (b >= 0xE0 && b <= 0xEF) {
      n = 3;
      if (b == 0xE0) lo = 0xA0;
      if (b == 0xED) hi = 0x9F;
    } else if (b >= 0xF0 && b <= 0xF4) {
      n = 4;
      if (b == 0xF0) lo = 0x90;
      if (b == 0xF4) hi = 0x8F;
    } else {
      return false;
    }
    if (i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return false;
    }
    i += n;
  }
  return true;
}

void PrintTo(const VectorSet& v, std::ostream* os) { *os << v.folder; }

class VectorsTest : public ::testing::TestWithParam<VectorSet> {};

TEST_P(VectorsTest, EncodeMatchesReferenceIds) {
  const Tokenizer& tok = shared_tokenizer(std::string("tokenizers/") + GetParam().folder);
  const auto cases = load_vectors(GetParam().vectors);
  ASSERT_EQ(cases.size(), 47u);
  int passed = 0;
  for (const auto& c : cases) {
    const std::vector<int> ids = tok.encode(c.text, /*add_special_tokens=*/false);
    EXPECT_EQ(ids_str(ids), ids_str(c.ids)) << "text: '" << c.text << "'";
    passed += ids == c.ids;
  }
  std::printf("%s: %d/%zu vectors encode exactly\n", GetParam().folder, passed, cases.size());
}

TEST_P(VectorsTest, DecodeGivesBackTheText) {
  // All four are lossless on these strings: byte-level BPE maps every byte; the Llama 2 layout prepends
  // one "▁" that its decoder's Strip removes again, and byte fallback covers characters outside the
  // vocabulary. (Qwen's NFC normalizer would change non-NFC input; every vector string is already NFC.)
  const Tokenizer& tok = shared_tokenizer(std::string("tokenizers/") + GetParam().folder);
  for (const auto& c : load_vectors(GetParam().vectors)) {
    EXPECT_EQ(tok.decode(c.ids, /*skip_special_tokens=*/false), c.text);
    EXPECT_EQ(tok.decode(c.ids, /*skip_special_tokens=*/true), c.text);
  }
}

TEST_P(VectorsTest, StreamingDecodeConcatenatesToFullDecode) {
  const Tokenizer& tok = shared_tokenizer(std::string("tokenizers/") + GetParam().folder);
  for (const auto& c : load_vectors(GetParam().vectors)) {
    for (bool with_bos : {false, true}) {
      std::vector<int> ids = tok.encode(c.text, /*add_special_tokens=*/with_bos);
      for (bool skip : {true, false}) {
        IncrementalDetokenizer stream(tok, skip);
        std::string text;
        for (int id : ids) {
          const std::string chunk = stream.add(id);
          EXPECT_TRUE(well_formed_utf8(chunk)) << "chunk of '" << c.text << "'";
          text += chunk;
        }
        text += stream.finish();
        EXPECT_EQ(text, tok.decode(ids, skip)) << "skip=" << skip << " bos=" << with_bos;
      }
    }
  }
}

TEST_P(VectorsTest, StreamingAfterAPromptEmitsOnlyTheContinuation) {
  const Tokenizer& tok = shared_tokenizer(std::string("tokenizers/") + GetParam().folder);
  for (const auto& c : load_vectors(GetParam().vectors)) {
    const std::vector<int> ids = tok.encode(c.text, /*add_special_tokens=*/true);
    for (size_t split = 0; split <= ids.size(); split += 3) {
      const std::vector<int> prompt(ids.begin(), ids.begin() + split);
      IncrementalDetokenizer stream(tok, /*skip_special_tokens=*/true, prompt);
      std::string text;
      for (size_t i = split; i < ids.size(); ++i) text += stream.add(ids[i]);
      text += stream.finish();
      const std::string full = tok.decode(ids, true);
      const std::string head = tok.decode(prompt, true);
      if (full.compare(0, head.size(), head) == 0) {
        // The continuation completes the prompt's text to the full text.
        EXPECT_EQ(head + text, full) << "'" << c.text << "' split at " << split;
      } else {
        // The prompt ends inside a character, so its own decode shows U+FFFD there: the stream emits the
        // whole character and the rest of the text. (Each U+FFFD of `head` stands for 1-3 bytes, so the
        // prompt's bytes are at most head.size().)
        EXPECT_TRUE(text.size() <= full.size() && full.compare(full.size() - text.size(), text.size(), text) == 0)
            << "'" << c.text << "' split at " << split << ": '" << text << "' does not end the text";
        EXPECT_LE(full.size() - text.size(), head.size()) << "'" << c.text << "' split at " << split;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tokenizers, VectorsTest,
                         ::testing::Values(VectorSet{"gpt2", "gpt-2"}, VectorSet{"llama3", "llama-bpe"},
                                           VectorSet{"qwen2", "qwen2"}, VectorSet{"llama-spm", "llama-spm"}),
                         [](const auto& info) {
                           std::string n = info.param.folder;
                           for (char& ch : n) ch = std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
                           return n;
                         });

}  // namespace
}  // namespace pagoda
