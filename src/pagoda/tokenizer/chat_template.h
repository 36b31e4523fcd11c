// Chat templates: render a conversation into the model's prompt text with the Jinja template of its
// tokenizer_config.json, as Hugging Face's apply_chat_template does (jinja2 with trim_blocks and
// lstrip_blocks, tojson = json.dumps(ensure_ascii=False), raise_exception, strftime_now).
//
// pagoda carries its own Jinja subset (jinja_*.h): enough for the real templates of Qwen2.5, Qwen3
// (thinking, tools, reasoning_content, tool calls and responses), Llama 3.1 (tools, date_string, ipython
// role) and Mistral-style templates; jinja_parser.h and jinja_builtins.h list what it supports. Checked
// against jinja2 3.1.6: the 24 golden renderings of chat-template-cases.json byte for byte, and (during
// development) thousands of random conversations through the real templates. Differences from jinja2:
//  * x.y / x[i] of an undefined x is undefined, not an error (a misspelt variable renders as "").
//  * Not supported: include/import/extends/block/call/filter/with/do tags, recursive loops, *args and
//    **kwargs, `%` string formatting and str.format, filters and methods not listed in jinja_builtins.h.
//  * Integers are 64-bit (Python's are unbounded; an overflow becomes a float); dict keys are strings.
//
// Inputs are JSON. Use nlohmann::ordered_json so that objects keep their key order: tojson writes keys in
// the order it is given (Python dicts keep insertion order), and a tool schema whose keys come out sorted
// renders to different text and tokens than the reference. A plain nlohmann::json converts implicitly,
// with its keys sorted.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "pagoda/core/json_depth.h"

namespace pagoda {

// Bounds on one rendering, for templates and inputs that come from users (a template file, messages,
// tools, chat_template_kwargs). Past one, rendering stops with pagoda::Error (kRuntime) naming it. The
// defaults are far above what real templates need (a long conversation through Qwen3's or Llama 3.1's
// template takes a few thousand steps) and keep a hostile one to about a second and tens of MiB.
struct RenderLimits {
  // Work: a step per statement and expression, four per loop iteration, one per 16 bytes of each string
  // the renderer builds, copies or writes out, one per 8 items of each list or dict an expression gives,
  // and one per 64 nodes (or 1 KiB of strings) of each list or dict an operation walks (compares, prints,
  // sorts, iterates).
  int64_t max_steps = 10'000'000;
  // The rendered text, and each string or list built on the way ('x' * n, a join, a list concatenation).
  size_t max_output_bytes = size_t{16} << 20;
  // Nesting of the JSON arrays and objects in messages, tools and kwargs (capped at 256 levels).
  int max_input_depth = kMaxJsonDepth;
  // Wall-clock limit from the start of the rendering; zero means none.
  std::chrono::steady_clock::duration timeout{0};
  // When set (by any thread) the rendering stops within about a thousand steps: "rendering cancelled".
  // May be null; otherwise it must outlive the call.
  const std::atomic<bool>* cancel = nullptr;
};

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
