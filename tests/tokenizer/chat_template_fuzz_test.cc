// Runs the fuzz entry point (fuzz_chat_template.cc) over a few thousand mutated real templates and
// conversations, so every CI run exercises the chat-template engine's limits and error paths: edits of the
// Qwen2.5, Qwen3 and Llama 3.1 templates with hostile pieces spliced in (int64 edges, division by zero, huge
// repetitions and loops, recursion, deep brackets), and their JSON contexts mutated in turn.
#include <gtest/gtest.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "pagoda/core/error.h"
#include "pagoda/tokenizer/chat_template.h"
#include "test_data.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace pagoda {
namespace {

using nlohmann::ordered_json;
using testing_data::data_dir;
using testing_data::read_file;

// Template sources and contexts of the golden cases: the seed inputs.
struct Seeds {
  std::vector<std::string> templates;
  std::vector<std::string> contexts;
};

Seeds load_seeds() {
  Seeds s;
  for (const char* dir : {"qwen2", "qwen2.5", "llama3"}) {
    s.templates.push_back(read_file(data_dir() / "tokenizers" / dir / "chat_template.jinja"));
  }
  const ordered_json file = ordered_json::parse(read_file(data_dir() / "tokenizers/chat-template-cases.json"));
  for (const ordered_json& c : file["cases"]) {
    ordered_json ctx = ordered_json::object();
    for (const char* key : {"messages", "tools", "add_generation_prompt", "kwargs"}) ctx[key] = c[key];
    s.contexts.push_back(ctx.dump());
  }
  return s;
}

// Pieces spliced into templates: syntax, and the operations a hostile template uses.
const char* const kTemplatePieces[] = {
    "{{", "}}", "{%", "%}", "{#", "#}", "-", "(", ")", "[", "]", "{", "}", "|", ".", ",", " ", "\n", "'", "\"",
    "if ", "endif", "for ", "endfor", " in ", "not ", " is ", "~", "0", "x", "loop.", "ns.", "set ", "::-1",
    "tojson", "raise_exception(", " * 10**10", " ** 63", " // 0", " % 0", " // -1", " % -1",
    "(-9223372036854775807 - 1)", "9223372036854775807", "range(10**10)", "range(100000)", "'x' * 100000",
    "[messages] * 1000", "|join('x' * 1000)", "[::-9223372036854775807]", "[9223372036854775807:]",
    "{% macro m() %}{{ m() }}{% endmacro %}{{ m() }}", "{% set ns = namespace(a=[]) %}",
    "{% set ns.a = [ns.a] %}", "{% set ns.a = ns %}", "|tojson(indent=10**9)", "|indent(10**9)",
    "((((((((((", "]]]]]]]]", "messages[0].content", "|list", "|sum", "|abs", "|int", ".split(',')"};

// Pieces spliced into the JSON contexts.
const char* const kContextPieces[] = {"[", "]", "{", "}", ",", ":", "\"", "null", "true", "9223372036854775807",
                                      "-9223372036854775808", "18446744073709551616", "1e308", "-0.0", "\"\\u0000\"",
                                      "[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[", "{\"a\":{\"a\":{\"a\":{\"a\":"};

std::string mutate(std::string s, const char* const* pieces, size_t n_pieces, std::mt19937_64& rng) {
  const int edits = 1 + static_cast<int>(rng() % 4);
  for (int e = 0; e < edits; ++e) {
    const size_t pos = rng() % (s.size() + 1);
    switch (rng() % 4) {
      case 0:
        s.erase(pos, 1 + rng() % 8);
        break;
      case 1:
      case 2:
        s.insert(pos, pieces[rng() % n_pieces]);
        break;
      default:
        if (!s.empty()) s.insert(pos, s.substr(rng() % s.size(), rng() % 16));
    }
  }
  return s;
}

TEST(ChatTemplateFuzz, MutatedRealTemplatesOnlyEverThrowPagodaErrors) {
  const Seeds seeds = load_seeds();
  ASSERT_EQ(seeds.templates.size(), 3u);
  ASSERT_FALSE(seeds.contexts.empty());
  std::mt19937_64 rng(20261204);
  int rendered = 0, refused = 0;
  for (int iter = 0; iter < 3000; ++iter) {
    std::string source = seeds.templates[rng() % seeds.templates.size()];
    std::string context = seeds.contexts[rng() % seeds.contexts.size()];
    if (rng() % 4 != 0) source = mutate(source, kTemplatePieces, std::size(kTemplatePieces), rng);
    if (rng() % 3 == 0) context = mutate(context, kContextPieces, std::size(kContextPieces), rng);
    const std::string input = source + '\0' + context;
    // Traps on anything but success or pagoda::Error.
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    try {
      RenderLimits limits;
      limits.max_steps = 200000;
      limits.max_output_bytes = 1 << 20;
      ChatTemplate(source).render(ordered_json::parse(R"([{"role": "user", "content": "q"}])"), nullptr, true,
                                  nullptr, "<s>", "</s>", limits);
      ++rendered;
    } catch (const Error&) {
      ++refused;
    }
  }
  // Both outcomes must be common, or the mutations are not exercising the engine.
  EXPECT_GT(rendered, 300);
  EXPECT_GT(refused, 300);
  std::printf("[ fuzz ] 3000 mutated templates: %d rendered, %d refused with pagoda::Error\n", rendered, refused);
}

}  // namespace
}  // namespace pagoda
