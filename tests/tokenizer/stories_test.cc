// stories260K (llama2.c's TinyStories model): its tokenizer.json (Metaspace pre-tokenizer, prepend_scheme
// "always", BPE with byte fallback) against golden.json: the 256 greedy ids decode to the golden greedy
// text, and the text encodes back to the same ids (VERIFIED.md: tokenizer.json and sentencepiece agree
// on it, and both equal the generated ids). The text has no leading, trailing or doubled spaces, the
// cases where sentencepiece and tokenizer.json differ for this model.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_data.h"

namespace pagoda {
namespace {

using testing_data::data_dir;
using testing_data::read_file;
using testing_data::shared_tokenizer;

struct Golden {
  std::string greedy_text;
  std::string sampled_text;
  std::vector<int> greedy_ids;
};

Golden load_golden() {
  const auto j = nlohmann::json::parse(read_file(data_dir() / "models/stories260K/golden.json"));
  return {j["greedy"]["text"].get<std::string>(), j["sampled"]["text"].get<std::string>(),
          j["hf_reference"]["greedy_token_ids"].get<std::vector<int>>()};
}

TEST(Stories260KTest, GreedyIdsDecodeToTheGoldenText) {
  const Tokenizer& tok = shared_tokenizer("models/stories260K/hf");
  const Golden g = load_golden();
  ASSERT_EQ(g.greedy_ids.size(), 256u);
  // run.c strips the leading space of the first piece after BOS; the decoder drops the first token's "▁".
  EXPECT_EQ(tok.decode(g.greedy_ids, true), g.greedy_text);
  std::vector<int> with_bos = {1};
  with_bos.insert(with_bos.end(), g.greedy_ids.begin(), g.greedy_ids.end());
  EXPECT_EQ(tok.decode(with_bos, /*skip_special_tokens=*/true), g.greedy_text);
  // Not skipped, "<s>" is the first token, so the next one keeps its space (as Hugging Face).
  EXPECT_EQ(tok.decode(with_bos, false), "<s> " + g.greedy_text);
}

TEST(Stories260KTest, GoldenTextEncodesToTheGreedyIds) {
  const Tokenizer& tok = shared_tokenizer("models/stories260K/hf");
  const Golden g = load_golden();
  EXPECT_EQ(tok.encode(g.greedy_text, false), g.greedy_ids);
  std::vector<int> with_bos = {1};
  with_bos.insert(with_bos.end(), g.greedy_ids.begin(), g.greedy_ids.end());
  EXPECT_EQ(tok.encode(g.greedy_text, true), with_bos);
  EXPECT_EQ(tok.bos_id(), 1);
  EXPECT_EQ(tok.eos_ids(), (std::vector<int>{2}));
  EXPECT_EQ(tok.vocab_size(), 512);
  EXPECT_EQ(tok.decode(tok.encode(g.sampled_text, true), true), g.sampled_text);
}

TEST(Stories260KTest, StreamingTheGenerationGivesTheGoldenText) {
  const Tokenizer& tok = shared_tokenizer("models/stories260K/hf");
  const Golden g = load_golden();
  const std::vector<int> prompt = {1};  // generation starts from BOS
  IncrementalDetokenizer stream(tok, /*skip_special_tokens=*/true, prompt);
  std::string text;
  for (int id : g.greedy_ids) text += stream.add(id);
  text += stream.finish();
  EXPECT_EQ(text, g.greedy_text);
}

}  // namespace
}  // namespace pagoda
