// WordPiece and the BERT components on a small hand-made vocabulary: what each rule of Hugging Face's
// BertNormalizer, BertPreTokenizer, WordPiece model and decoder does (the real all-MiniLM-L6-v2 file is
// tests/model/minilm_test.cc, against sentence-transformers).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {
namespace {

nlohmann::json bert_json(nlohmann::json normalizer = nullptr, int max_chars = 100) {
  const std::vector<std::string> vocab = {"[PAD]", "[UNK]", "[CLS]", "[SEP]", "un", "##aff", "##able", "aff", "able",
                                          "!", "cafe", "café", "東", "京", "i", "##̇", "e", "##e", ",", "##s", "hello"};
  nlohmann::json v = nlohmann::json::object();
  for (size_t i = 0; i < vocab.size(); ++i) v[vocab[i]] = i;
  if (normalizer.is_null())
    normalizer = {{"type", "BertNormalizer"}, {"clean_text", true}, {"handle_chinese_chars", true},
                  {"strip_accents", nullptr}, {"lowercase", true}};
  return {{"model", {{"type", "WordPiece"}, {"unk_token", "[UNK]"}, {"continuing_subword_prefix", "##"},
                     {"max_input_chars_per_word", max_chars}, {"vocab", v}}},
          {"normalizer", normalizer},
          {"pre_tokenizer", {{"type", "BertPreTokenizer"}}},
          {"decoder", {{"type", "WordPiece"}, {"prefix", "##"}, {"cleanup", true}}},
          {"added_tokens", {{{"id", 0}, {"content", "[PAD]"}, {"special", true}},
                            {{"id", 1}, {"content", "[UNK]"}, {"special", true}},
                            {{"id", 2}, {"content", "[CLS]"}, {"special", true}},
                            {{"id", 3}, {"content", "[SEP]"}, {"special", true}}}},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single", {{{"SpecialToken", {{"id", "[CLS]"}, {"type_id", 0}}}}, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}},
                        {{"SpecialToken", {{"id", "[SEP]"}, {"type_id", 0}}}}}},
            {"special_tokens", {{"[CLS]", {{"id", "[CLS]"}, {"ids", {2}}, {"tokens", {"[CLS]"}}}},
                                {"[SEP]", {{"id", "[SEP]"}, {"ids", {3}}, {"tokens", {"[SEP]"}}}}}}}}};
}

Tokenizer load(const nlohmann::json& j) { return Tokenizer::from_json_text(j.dump()); }

TEST(WordPiece, LongestMatchFirstWithContinuations) {
  const Tokenizer t = load(bert_json());
  EXPECT_EQ(t.encode("unaffable", false), (std::vector<int>{4, 5, 6}));
  EXPECT_EQ(t.encode("affable", false), (std::vector<int>{7, 6}));
  // One unmatched piece makes the whole word [UNK], not a partial match.
  EXPECT_EQ(t.encode("unaffablex", false), (std::vector<int>{1}));
  EXPECT_EQ(t.encode("unaffable!", true), (std::vector<int>{2, 4, 5, 6, 9, 3}));
}

TEST(WordPiece, WordsLongerThanTheLimitAreUnknown) {
  const Tokenizer t = load(bert_json(nullptr, 8));
  EXPECT_EQ(t.encode("unaffable", false), (std::vector<int>{1}));  // 9 characters > 8
  EXPECT_EQ(t.encode("affable", false), (std::vector<int>{7, 6}));
}

TEST(WordPiece, BertNormalizerLowercasesStripsAccentsAndSplitsCjk) {
  const Tokenizer t = load(bert_json());
  // strip_accents null follows lowercase: "CAFÉ" -> "cafe"; CJK ideographs become words of their own;
  // control characters vanish and whitespace of any kind separates.
  EXPECT_EQ(t.encode("CAFÉ\x01\t東京", false), (std::vector<int>{10, 12, 13}));
  // U+0130 lowercases to "i" + U+0307 (Rust's to_lowercase), then the accent is stripped.
  EXPECT_EQ(t.encode("\xC4\xB0", false), (std::vector<int>{14}));
  // Punctuation is isolated.
  EXPECT_EQ(t.encode("e,e", false), (std::vector<int>{16, 18, 16}));
}

TEST(WordPiece, AccentsKeptWhenStripAccentsIsFalse) {
  nlohmann::json n = {{"type", "BertNormalizer"}, {"strip_accents", false}, {"lowercase", true}};
  const Tokenizer t = load(bert_json(n));
  EXPECT_EQ(t.encode("CAFÉ", false), (std::vector<int>{11}));
}

TEST(WordPiece, DecodeGluesContinuationsAndCleansUp) {
  const Tokenizer t = load(bert_json());
  EXPECT_EQ(t.decode(std::vector<int>{2, 4, 5, 6, 9, 18, 20, 19, 3}, /*skip_special_tokens=*/true), "unaffable!, hellos");
}

TEST(WordPiece, UnknownTokenMustBeInTheVocabulary) {
  nlohmann::json j = bert_json();
  j["model"]["unk_token"] = "[NOPE]";
  EXPECT_THROW(load(j), Error);
}

}  // namespace
}  // namespace pagoda
