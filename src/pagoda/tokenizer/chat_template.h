// Chat templates: render a conversation into the model's prompt text with the Jinja template of its
// tokenizer_config.json, as Hugging Face's apply_chat_template does (jinja2 with trim_blocks and
// lstrip_blocks, tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now).
//
// pagoda carries its own Jinja subset (pagoda/jinja/): enough for the real templates of Qwen2.5, Qwen3
// (thinking, tools, reasoning_content, tool calls and responses), Llama 3.1 (tools, date_string, ipython
// role) and Mistral-style templates; jinja/parser.h and jinja/builtins.h list what it supports. Checked
// against jinja2 3.1.6: the 24 golden renderings of chat-template-cases.json byte for byte, and (during
// development) thousands of random conversations through the real templates. Differences from jinja2:
//  * x.y / x[i] of an undefined x is undefined, not an error (a misspelt variable renders as "").
//  * Not supported: include/import/extends/block/call/filter/with/do tags, recursive loops, *args and
//    **kwargs, `%` string formatting and str.format, filters and methods not listed in jinja/builtins.h.
//  * Integers are 64-bit (Python's are unbounded; an overflow becomes a float); dict keys are strings.
//
// Inputs are JSON. Use nlohmann::ordered_json so that objects keep their key order: tojson writes keys in
// the order it is given (Python dicts keep insertion order), and a tool schema whose keys come out sorted
// renders to different text and tokens than the reference. A plain nlohmann::json converts implicitly,
// with its keys sorted.
#pragma once

#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "pagoda/jinja/render_limits.h"

namespace pagoda {

// Bounds on one rendering (defined with the Jinja engine, which enforces them).
using RenderLimits = jinja::RenderLimits;

class Tokenizer;
namespace jinja {
struct Template;
}

class ChatTemplate {
 public:
  // Parses the template; throws pagoda::Error (kConfig) "chat template line N: expected ..., found ..." for
  // a syntax error.
  explicit ChatTemplate(std::string_view source);

  // `messages`: a list of {"role": ..., "content": ..., ...}. `tools`: a list of tool schemas, or null
  // (the template then sees tools = none). `kwargs`: an object of extra variables (enable_thinking,
  // date_string, ...), or null; they may not be named messages, tools or add_generation_prompt.
  // bos_token / eos_token: "" leaves the variable undefined. Throws pagoda::Error (kRuntime) when rendering
  // fails ("chat template line N: ..."), with raise_exception's message as written by the template, or for
  // inputs of the wrong JSON type, or past one of `limits`. Thread-safe: renderings share nothing but the
  // parsed template.
  std::string render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                     bool add_generation_prompt, const nlohmann::ordered_json& kwargs, const std::string& bos_token,
                     const std::string& eos_token, const RenderLimits& limits = {}) const;

 private:
  std::shared_ptr<const jinja::Template> template_;
};

// Parses and renders in one call (ChatTemplate::render's contract).
std::string render_chat_template(const std::string& template_text, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& kwargs, const std::string& bos_token,
                                 const std::string& eos_token, const RenderLimits& limits = {});

// Renders with the tokenizer's chat template and its bos/eos token strings. Throws pagoda::Error (kConfig)
// when the tokenizer has no chat template.
std::string apply_chat_template(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                                const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                const nlohmann::ordered_json& kwargs, const RenderLimits& limits = {});

}  // namespace pagoda
