// Fuzz target for chat templates: the lexer, parser and renderer of pagoda's Jinja subset, and the JSON
// inputs it is given. Built as a libFuzzer binary with clang (-DPAGODA_FUZZ=ON), and driven over mutated
// real templates by chat_template_fuzz_test.cc in every build.
//
// Input: template source, a NUL byte, then a JSON object {"messages": [...], "tools": [...],
// "add_generation_prompt": bool, "kwargs": {...}} (each part optional; without a NUL or with bad JSON the
// template renders a small fixed conversation). Rendered under small limits so that each input is quick.
//
// Contract checked: parsing and rendering either succeed or throw pagoda::Error. Anything else (a crash, a
// sanitizer report, another exception such as std::bad_alloc) traps.
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "pagoda/core/error.h"
#include "pagoda/core/json_depth.h"
#include "pagoda/tokenizer/chat_template.h"

namespace {

using nlohmann::ordered_json;

const ordered_json& default_messages() {
  static const ordered_json m = ordered_json::parse(R"([
    {"role": "system", "content": "sys"}, {"role": "user", "content": "q"},
    {"role": "assistant", "content": "<think>r</think>a",
     "tool_calls": [{"function": {"name": "f", "arguments": {"x": 1}}}]},
    {"role": "tool", "content": "out"}, {"role": "user", "content": "q2"}])");
  return m;
}

void render(std::string_view source, std::string_view context) {
  ordered_json messages = default_messages(), tools, kwargs;
  bool add_generation_prompt = true;
  if (!context.empty()) {
    pagoda::check_json_depth(context, "fuzz context", 64);
    const ordered_json ctx = ordered_json::parse(context, nullptr, /*allow_exceptions=*/false);
    if (ctx.is_object()) {
      if (ctx.contains("messages")) messages = ctx["messages"];
      if (ctx.contains("tools")) tools = ctx["tools"];
      if (ctx.contains("kwargs")) kwargs = ctx["kwargs"];
      if (ctx.contains("add_generation_prompt")) add_generation_prompt = ctx["add_generation_prompt"].is_boolean() &&
                                                                         ctx["add_generation_prompt"].get<bool>();
    }
  }
  pagoda::RenderLimits limits;
  limits.max_steps = 200000;
  limits.max_output_bytes = 1 << 20;
  limits.max_input_depth = 32;
  const pagoda::ChatTemplate t(source);
  t.render(messages, tools, add_generation_prompt, kwargs, "<s>", "</s>", limits);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  try {
    render(input.substr(0, nul), nul == std::string_view::npos ? std::string_view() : input.substr(nul + 1));
  } catch (const pagoda::Error&) {
    // Expected for malformed or hostile templates and inputs.
  } catch (...) {
    __builtin_trap();
  }
  return 0;
}
