// Components one by one: BPE merge order and unknown characters on a hand-written vocabulary, added-token
// flags, Metaspace/Digits/Split pre-tokenizers, normalizers and the special tokens of the shipped files.
// Expected ids come from Hugging Face `tokenizers` 0.23.2 on the same tokenizer.json content.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_data.h"

namespace pagoda {
namespace {

using nlohmann::json;
using testing_data::data_dir;
using testing_data::load_vectors;
using testing_data::read_file;
using testing_data::shared_tokenizer;
using testing_data::write_temp;

struct Expect {
  std::string text;
  std::vector<int> ids;
};

Tokenizer from_json(const std::string& name, const json& j) {
  return Tokenizer::from_file(write_temp(name, "tokenizer.json", j.dump()));
}

void expect_all(const Tokenizer& tok, const std::vector<Expect>& cases, bool parse_special = true) {
  for (const auto& c : cases) EXPECT_EQ(tok.encode(c.text, false, parse_special), c.ids) << "'" << c.text << "'";
}

json tiny_bpe() {
  return json::parse(R"({"version": "1.0", "added_tokens": [], "normalizer": null,
    "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": false},
    "post_processor": null, "decoder": null,
    "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"<unk>": 0, "a": 1, "b": 2, "c": 3, "ab": 4, "bc": 5, "abc": 6, "cab": 7, "ca": 8},
              "merges": ["b c", "a b", "a bc", "c a", "ca b"]}})");
}

TEST(BpeTest, MergesApplyInRankOrder) {
  const Tokenizer tok = from_json("tiny", tiny_bpe());
  expect_all(tok, {{"abc", {6}},
                   {"abcab", {6, 4}},
                   {"cab", {3, 4}},
                   {"ababab", {4, 4, 4}},
                   {"a b c", {1, 2, 3}},
                   {"bcabc", {5, 6}}});
  // Without a decoder, tokens are joined with spaces (as Hugging Face).
  EXPECT_EQ(tok.decode(tok.encode("cab", false), false), "c ab");
}

TEST(BpeTest, UnknownCharactersBecomeUnkFusedOrNot) {
  json j = tiny_bpe();
  expect_all(from_json("tiny_fuse", j), {{"xxab yc", {0, 4, 0, 3}}});
  j["model"]["fuse_unk"] = false;
  expect_all(from_json("tiny_nofuse", j), {{"xxab yc", {0, 0, 4, 0, 3}}});
}

TEST(BpeTest, IgnoreMergesTakesAWholeVocabularyWord) {
  json j = tiny_bpe();
  j["model"]["ignore_merges"] = true;
  expect_all(from_json("tiny_ignore", j), {{"cab abc", {7, 6}}});
}

TEST(BpeTest, MergesAsStringsEqualMergesAsPairs) {
  json j = json::parse(read_file(data_dir() / "tokenizers/gpt2/tokenizer.json"));
  for (auto& m : j["model"]["merges"]) m = m[0].get<std::string>() + " " + m[1].get<std::string>();
  const Tokenizer strings = from_json("gpt2_string_merges", j);
  for (const auto& c : load_vectors("gpt-2")) EXPECT_EQ(strings.encode(c.text, false), c.ids) << c.text;
}

// GPT-2 with added tokens exercising each flag (ids follow the vocabulary for contents it already has).
json gpt2_with_added_tokens() {
  json j = json::parse(read_file(data_dir() / "tokenizers/gpt2/tokenizer.json"));
  auto add = [&](int id, const char* content, bool lstrip, bool rstrip, bool single_word, bool normalized,
                 bool special) {
    j["added_tokens"].push_back({{"id", id},
                                 {"content", content},
                                 {"lstrip", lstrip},
                                 {"rstrip", rstrip},
                                 {"single_word", single_word},
                                 {"normalized", normalized},
                                 {"special", special}});
  };
  add(50257, "<mask>", true, false, false, false, true);
  add(21943, "foo", false, false, true, true, false);
  add(50258, " bar", false, true, false, false, false);
  add(15496, "Hello", true, true, true, true, false);
  add(50259, "<|im_start|>", false, true, false, false, true);
  add(50260, "<|im", false, false, false, false, false);
  add(50261, "\u00e9t\u00e9", false, false, false, true, false);
  return j;
}

TEST(AddedTokensTest, FlagsFollowHuggingFace) {
  const Tokenizer tok = from_json("gpt2_added", gpt2_with_added_tokens());
  expect_all(tok, {
                      {"a <mask> b", {64, 50257, 275}},  // lstrip takes the space before
                      {"a  <mask>", {64, 50257}},
                      {"x foo y", {87, 220, 21943, 331}},  // single_word: a word on its own
                      {"xfoo", {87, 21943}},               // ... not inside one (BPE finds "foo")
                      {"foo_", {21943, 62}},
                      {"a bar  c", {64, 50258, 66}},  // rstrip takes the spaces after
                      {"bar  c", {5657, 220, 269}},
                      {"Hello\nx", {15496, 87}},
                      {"\u00b2Hello\n", {31185, 15496}},          // "²" is not a word character (\w)
                      {"\u0301Hello\n", {136, 223, 15496, 198}},  // a combining mark is
                      {"<|im_start|>  hi", {50259, 5303}},
                      {"<|im_end|>", {50260, 62, 437, 91, 29}},  // leftmost-longest: "<|im"
                      {"<|im", {50260}},
                      {"\u00e9t\u00e9", {50261}},
                      {"e\u0301te\u0301", {68, 136, 223, 660, 136, 223}},  // no normalizer: NFD text differs
                  });
  // Special tokens are text when not parsed; non-special ones are still matched.
  expect_all(
      tok,
      {{"a <mask> b", {64, 1279, 27932, 29, 275}}, {"<|im_start|>  hi", {27, 91, 320, 62, 9688, 91, 29, 220, 23105}}},
      /*parse_special=*/false);
  EXPECT_TRUE(tok.is_special(50257));
  EXPECT_FALSE(tok.is_special(50258));
  EXPECT_EQ(tok.vocab_size(), 50262);
}

TEST(AddedTokensTest, NormalizedTokensMatchTheNormalizedText) {
  json j = gpt2_with_added_tokens();
  j["normalizer"] = {{"type", "NFKC"}};
  const Tokenizer tok = from_json("gpt2_added_nfkc", j);
  expect_all(tok, {{"e\u0301te\u0301", {50261}}, {"\ufb01 foo \u2460", {12463, 220, 21943, 352}}});
}

json stories_with_metaspace(const char* scheme, bool split) {
  json j = json::parse(read_file(data_dir() / "models/stories260K/hf/tokenizer.json"));
  j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "\u2581"}, {"prepend_scheme", scheme}, {"split", split}};
  j["decoder"] = j["pre_tokenizer"];
  return j;
}

TEST(PreTokenizerTest, MetaspacePrependSchemes) {
  const std::vector<Expect> first_or_always = {{"Hello world", {346, 306, 414, 263, 304, 341}},
                                               {" Hello", {346, 306, 414}},
                                               {"a</s> b  c", {261, 2, 268, 410, 280}},
                                               {"", {}}};
  expect_all(from_json("meta_first", stories_with_metaspace("first", true)), first_or_always);
  expect_all(from_json("meta_always", stories_with_metaspace("always", true)), first_or_always);
  expect_all(from_json("meta_never", stories_with_metaspace("never", false)),
             {{"Hello world", {440, 411, 306, 414, 263, 304, 341}},
              {" Hello", {346, 306, 414}},
              {"a</s> b  c", {412, 2, 268, 410, 280}},
              {"", {}}});
}

json gpt2_with_pre_tokenizer(const json& first) {
  json j = json::parse(read_file(data_dir() / "tokenizers/gpt2/tokenizer.json"));
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       {first, {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", !first.contains("pattern")}}}}};
  return j;
}

TEST(PreTokenizerTest, DigitsIndividualOrContiguous) {
  const std::string text = "abc 12345 x9 \u0663\u0664";
  EXPECT_EQ(from_json("digits1", gpt2_with_pre_tokenizer({{"type", "Digits"}, {"individual_digits", true}}))
                .encode(text, false),
            (std::vector<int>{39305, 220, 16, 17, 18, 19, 20, 2124, 24, 220, 149, 96, 149, 97}));
  EXPECT_EQ(from_json("digits0", gpt2_with_pre_tokenizer({{"type", "Digits"}, {"individual_digits", false}}))
                .encode(text, false),
            (std::vector<int>{39305, 220, 10163, 2231, 2124, 24, 220, 149, 96, 149, 97}));
}

TEST(PreTokenizerTest, SplitBehaviors) {
  const std::string text = "Hello, world!! 42 is  it?";
  auto split = [](const char* kind, const char* pattern, const char* behavior, bool invert) {
    return json{{"type", "Split"}, {"pattern", {{kind, pattern}}}, {"behavior", behavior}, {"invert", invert}};
  };
  const std::vector<int> merged_spaces = {15496, 11, 220, 6894, 3228, 220, 3682, 220, 271, 220, 220, 270, 30};
  EXPECT_EQ(from_json("split_prev", gpt2_with_pre_tokenizer(split("String", " ", "MergedWithPrevious", false)))
                .encode(text, false),
            merged_spaces);
  EXPECT_EQ(from_json("split_next_inv", gpt2_with_pre_tokenizer(split("String", " ", "MergedWithNext", true)))
                .encode(text, false),
            merged_spaces);
  EXPECT_EQ(from_json("split_removed_inv", gpt2_with_pre_tokenizer(split("Regex", "\\p{P}+|\\d", "Removed", true)))
                .encode(text, false),
            (std::vector<int>{11, 3228, 19, 17, 30}));
  EXPECT_EQ(from_json("split_contiguous", gpt2_with_pre_tokenizer(split("Regex", "\\p{P}+|\\d", "Contiguous", false)))
                .encode(text, false),
            (std::vector<int>{15496, 11, 995, 3228, 220, 3682, 318, 220, 340, 30}));
}

TEST(SpecialTokensTest, BosFollowsThePostProcessorAndConfig) {
  const Tokenizer& llama3 = shared_tokenizer("tokenizers/llama3");
  // The value in meta-llama/llama-models' own tokenizer test.
  EXPECT_EQ(llama3.encode("This is a test sentence.<|end_of_text|>", true),
            (std::vector<int>{128000, 2028, 374, 264, 1296, 11914, 13, 128001}));
  EXPECT_EQ(llama3.bos_id(), 128000);
  EXPECT_EQ(llama3.eos_ids(), (std::vector<int>{128009}));
  EXPECT_EQ(llama3.vocab_size(), 128256);
  EXPECT_EQ(llama3.token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(llama3.id_to_token(128009), "<|eot_id|>");
  EXPECT_EQ(llama3.id_to_token(2028), "This");
  EXPECT_EQ(llama3.id_to_token(1 << 20), "");
  EXPECT_EQ(llama3.decode({128000, 2028, 128009}, true), "This");
  EXPECT_EQ(llama3.decode({128000, 2028, 128009}, false), "<|begin_of_text|>This<|eot_id|>");

  const Tokenizer& spm = shared_tokenizer("tokenizers/llama-spm");
  EXPECT_EQ(spm.encode("Hello", true), (std::vector<int>{1, 15043}));
  EXPECT_EQ(spm.special_prefix_ids(), (std::vector<int>{1}));
  EXPECT_EQ(spm.vocab_size(), 32000);
  EXPECT_EQ(spm.eos_ids(), (std::vector<int>{2}));
  EXPECT_EQ(spm.decode({1, 15043}, false), "<s> Hello");  // as Hugging Face: "<s>" is the first token

  const Tokenizer& qwen = shared_tokenizer("tokenizers/qwen2");
  EXPECT_EQ(qwen.encode("Hello", true), qwen.encode("Hello", false));
  EXPECT_FALSE(qwen.bos_id().has_value());
  EXPECT_EQ(qwen.eos_ids(), (std::vector<int>{151645}));
  EXPECT_EQ(qwen.vocab_size(), 151669);
  EXPECT_TRUE(qwen.is_special(151645));   // <|im_end|>
  EXPECT_FALSE(qwen.is_special(151657));  // <tool_call> is an added token, not a special one
  EXPECT_FALSE(qwen.is_special(9707));

  const Tokenizer& gpt2 = shared_tokenizer("tokenizers/gpt2");
  EXPECT_EQ(gpt2.encode("Hello", true), (std::vector<int>{15496}));
  EXPECT_EQ(gpt2.vocab_size(), 50257);
}

TEST(SpecialTokensTest, ChatTemplates) {
  const auto dir = data_dir() / "tokenizers";
  EXPECT_EQ(shared_tokenizer("tokenizers/llama3").chat_template(), read_file(dir / "llama3/chat_template.jinja"));
  EXPECT_EQ(shared_tokenizer("tokenizers/qwen2").chat_template(), read_file(dir / "qwen2/chat_template.jinja"));
  EXPECT_EQ(shared_tokenizer("tokenizers/gpt2").chat_template(), "");
  const Tokenizer qwen25 = Tokenizer::from_files(dir / "qwen2/tokenizer.json", dir / "qwen2.5/tokenizer_config.json");
  EXPECT_EQ(qwen25.chat_template(), read_file(dir / "qwen2.5/chat_template.jinja"));
  // The config string alone (no .jinja beside it) gives the same template.
  const auto copy =
      write_temp("qwen25_config_only", "tokenizer_config.json", read_file(dir / "qwen2.5/tokenizer_config.json"));
  EXPECT_EQ(Tokenizer::from_files(dir / "qwen2/tokenizer.json", copy / "tokenizer_config.json").chat_template(),
            read_file(dir / "qwen2.5/chat_template.jinja"));
}

}  // namespace
}  // namespace pagoda
