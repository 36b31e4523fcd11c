// chat-template-cases.json: 24 chat renderings (qwen3, qwen2.5, llama3.1 templates) with the ids their
// tokenizer.json gives (add_special_tokens=False, special-token text matched as added tokens). A strong
// check of added and special tokens next to ordinary text.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_data.h"

namespace pagoda {
namespace {

using testing_data::data_dir;
using testing_data::read_file;
using testing_data::shared_tokenizer;

const char* tokenizer_for(const std::string& tmpl) {
  if (tmpl == "qwen3" || tmpl == "qwen2.5") return "tokenizers/qwen2";  // qwen2.5 uses qwen2's tokenizer.json
  if (tmpl == "llama3.1") return "tokenizers/llama3";
  return nullptr;
}

TEST(ChatTemplateCasesTest, RenderedTextEncodesToTheReferenceIds) {
  const auto cases = nlohmann::json::parse(read_file(data_dir() / "tokenizers/chat-template-cases.json"))["cases"];
  ASSERT_EQ(cases.size(), 24u);
  int passed = 0;
  for (const auto& c : cases) {
    const std::string id = c["id"].get<std::string>();
    const char* folder = tokenizer_for(c["template"].get<std::string>());
    ASSERT_NE(folder, nullptr) << id;
    const Tokenizer& tok = shared_tokenizer(folder);
    const std::string rendered = c["rendered"].get<std::string>();
    const auto expected = c["token_ids"].get<std::vector<int>>();
    const std::vector<int> ids = tok.encode(rendered, /*add_special_tokens=*/false);
    EXPECT_EQ(ids, expected) << id;
    passed += ids == expected;
    // Lossless: the rendering (special tokens included) comes back from its ids, also when streamed.
    EXPECT_EQ(tok.decode(expected, false), rendered) << id;
    IncrementalDetokenizer stream(tok, /*skip_special_tokens=*/false);
    std::string streamed;
    for (int t : expected) streamed += stream.add(t);
    streamed += stream.finish();
    EXPECT_EQ(streamed, rendered) << id;
  }
  std::printf("chat templates: %d/%zu renderings encode exactly\n", passed, cases.size());
}

TEST(ChatTemplateCasesTest, SpecialTokensAreTextWhenNotParsed) {
  // Untrusted user text must not turn into control tokens.
  const Tokenizer& qwen = shared_tokenizer("tokenizers/qwen2");
  const std::vector<int> ids = qwen.encode("<|im_start|>user", false, /*parse_special=*/false);
  for (int id : ids) EXPECT_FALSE(qwen.is_special(id));
  EXPECT_EQ(qwen.decode(ids, true), "<|im_start|>user");
  EXPECT_EQ(qwen.encode("<|im_start|>user", false).front(), 151644);
}

}  // namespace
}  // namespace pagoda
