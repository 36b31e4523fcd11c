// Golden chat renderings: chat-template-cases.json holds 24 conversations rendered by jinja2 with Hugging
// Face's settings through the real Qwen3, Qwen2.5 and Llama 3.1 templates. pagoda's renderer must give the
// same text byte for byte, and that text must encode to the reference ids.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/tokenizer/chat_template.h"
#include "test_data.h"

namespace pagoda {
namespace {

using nlohmann::ordered_json;
using testing_data::data_dir;
using testing_data::read_file;

// The tokenizer a case's template belongs to: Qwen2.5's config (and template) over Qwen2's tokenizer.json.
const Tokenizer& tokenizer_for_template(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  const auto dir = data_dir() / "tokenizers";
  if (name == "qwen3") return cache.emplace(name, Tokenizer::from_file(dir / "qwen2")).first->second;
  if (name == "qwen2.5") {
    return cache
        .emplace(name, Tokenizer::from_files(dir / "qwen2/tokenizer.json", dir / "qwen2.5/tokenizer_config.json"))
        .first->second;
  }
  if (name == "llama3.1") return cache.emplace(name, Tokenizer::from_file(dir / "llama3")).first->second;
  throw std::runtime_error("no tokenizer for template " + name);
}

std::string escaped(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else
      out += c;
  }
  return out;
}

// "" when equal; otherwise where the two strings part, with some context of each.
std::string first_difference(const std::string& expected, const std::string& actual) {
  if (expected == actual) return "";
  size_t i = 0;
  while (i < expected.size() && i < actual.size() && expected[i] == actual[i]) ++i;
  const size_t from = i > 60 ? i - 60 : 0;
  return "first difference at byte " + std::to_string(i) + " (expected " + std::to_string(expected.size()) +
         " bytes, got " + std::to_string(actual.size()) + ")\n  common: ..." +
         escaped(expected.substr(from, i - from)) + "\n  expected: " + escaped(expected.substr(i, 80)) +
         "\n  actual:   " + escaped(actual.substr(i, 80));
}

ordered_json load_cases() {
  // ordered_json keeps the key order of tool schemas and arguments, which tojson must reproduce.
  return ordered_json::parse(read_file(data_dir() / "tokenizers/chat-template-cases.json"));
}

TEST(ChatTemplateRenderTest, AllCasesRenderExactlyAndEncodeToTheReferenceIds) {
  const ordered_json file = load_cases();
  const ordered_json& cases = file["cases"];
  ASSERT_EQ(cases.size(), 24u);
  int rendered_ok = 0, ids_ok = 0;
  for (const ordered_json& c : cases) {
    const std::string id = c["id"].get<std::string>();
    const Tokenizer& tok = tokenizer_for_template(c["template"].get<std::string>());
    std::string rendered;
    try {
      rendered =
          apply_chat_template(tok, c["messages"], c["tools"], c["add_generation_prompt"].get<bool>(), c["kwargs"]);
    } catch (const Error& e) {
      ADD_FAILURE() << id << ": " << e.what();
      continue;
    }
    const std::string expected = c["rendered"].get<std::string>();
    const std::string diff = first_difference(expected, rendered);
    EXPECT_EQ(diff, "") << id;
    rendered_ok += diff.empty();
    const auto ids = tok.encode(rendered, /*add_special_tokens=*/false);
    EXPECT_EQ(ids, c["token_ids"].get<std::vector<int>>()) << id;
    ids_ok += ids == c["token_ids"].get<std::vector<int>>();
  }
  std::printf("chat templates: %d/%zu render exactly, %d/%zu encode to the reference ids\n", rendered_ok, cases.size(),
              ids_ok, cases.size());
}

TEST(ChatTemplateRenderTest, TemplateFilesMatchTheTokenizerConfigs) {
  // The renderings come from the .jinja files; transformers prefers them to the config's string.
  for (const char* name : {"qwen3", "qwen2.5", "llama3.1"}) {
    const std::string dir = std::string(name) == "qwen3"     ? "qwen2"
                            : std::string(name) == "qwen2.5" ? "qwen2.5"
                                                             : "llama3";
    EXPECT_EQ(tokenizer_for_template(name).chat_template(),
              read_file(data_dir() / "tokenizers" / dir / "chat_template.jinja"))
        << name;
  }
  EXPECT_EQ(tokenizer_for_template("llama3.1").bos_token(), "<|begin_of_text|>");
  EXPECT_EQ(tokenizer_for_template("llama3.1").eos_token(), "<|eot_id|>");
  EXPECT_EQ(tokenizer_for_template("qwen3").bos_token(), "");
  EXPECT_EQ(tokenizer_for_template("qwen3").eos_token(), "<|im_end|>");
}

TEST(ChatTemplateRenderTest, PlainJsonInputsConvert) {
  // nlohmann::json (sorted keys) converts to ordered_json implicitly; key order then follows the sort.
  const nlohmann::json messages = nlohmann::json::parse(R"([{"role": "user", "content": "Hi"}])");
  const std::string out = apply_chat_template(tokenizer_for_template("qwen3"), messages, nullptr, true, nullptr);
  EXPECT_EQ(out, "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

TEST(ChatTemplateRenderTest, Qwen3ThinkingAndToolCallsWithStringArguments) {
  const Tokenizer& qwen3 = tokenizer_for_template("qwen3");
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "user", "content": "Weather?"},
    {"role": "assistant", "content": "Let me check.", "reasoning_content": "\nNeed the tool.\n",
     "tool_calls": [{"type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Oslo\"}"}},
                    {"name": "get_time", "arguments": {"tz": "CET"}}]},
    {"role": "tool", "content": "sunny"},
    {"role": "tool", "content": "12:00"}
  ])");
  // Reference: jinja2 3.1.6 with Hugging Face's settings on the same inputs.
  const std::string expected =
      "<|im_start|>user\nWeather?<|im_end|>\n<|im_start|>assistant\n<think>\nNeed the tool.\n</think>\n\n"
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n"
      "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_call><|im_end|>\n"
      "<|im_start|>user\n<tool_response>\nsunny\n</tool_response>\n<tool_response>\n12:00\n</tool_response><|im_end|>\n"
      "<|im_start|>assistant\n<think>\n\n</think>\n\n";
  const std::string out =
      apply_chat_template(qwen3, messages, nullptr, true, ordered_json::parse(R"({"enable_thinking": false})"));
  EXPECT_EQ(first_difference(expected, out), "");
}

TEST(ChatTemplateRenderTest, Llama31RaisesForSeveralToolCalls) {
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "user", "content": "x"},
    {"role": "assistant", "tool_calls": [{"function": {"name": "a", "arguments": {}}},
                                         {"function": {"name": "b", "arguments": {}}}]}
  ])");
  try {
    apply_chat_template(tokenizer_for_template("llama3.1"), messages, nullptr, false, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "This model only supports single tool-calls at once!");
  }
}

TEST(ChatTemplateRenderTest, Llama31DateStringAndIpythonRole) {
  const ordered_json messages = ordered_json::parse(R"([
    {"role": "system", "content": "  Be brief.  "},
    {"role": "user", "content": "Run it"},
    {"role": "ipython", "content": {"result": 4}}
  ])");
  const std::string out = apply_chat_template(tokenizer_for_template("llama3.1"), messages, nullptr, false,
                                              ordered_json::parse(R"({"date_string": "01 Jan 2025"})"));
  EXPECT_EQ(out,
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nCutting Knowledge Date: December 2023\n"
            "Today Date: 01 Jan 2025\n\nBe brief.<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nRun it"
            "<|eot_id|><|start_header_id|>ipython<|end_header_id|>\n\n{\"result\": 4}<|eot_id|>");
}

TEST(ChatTemplateRenderTest, ErrorsNameTheProblem) {
  Tokenizer gpt2 = Tokenizer::from_file(data_dir() / "tokenizers/gpt2");
  ASSERT_EQ(gpt2.chat_template(), "");
  try {
    apply_chat_template(gpt2, ordered_json::array(), nullptr, true, nullptr);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
  }
  EXPECT_THROW(render_chat_template("{{ messages }}", ordered_json::object(), nullptr, false, nullptr, "", ""), Error);
  EXPECT_THROW(render_chat_template("x", ordered_json::array(), nullptr, false,
                                    ordered_json::parse(R"({"messages": 1})"), "", ""),
               Error);
}

}  // namespace
}  // namespace pagoda
