#include "pagoda/tokenizer/chat_template.h"

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/jinja/eval.h"
#include "pagoda/jinja/parser.h"
#include "pagoda/jinja/value.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

ChatTemplate::ChatTemplate(std::string_view source) : template_(jinja::parse_template(source)) {}

std::string ChatTemplate::render(const nlohmann::ordered_json& messages, const nlohmann::ordered_json& tools,
                                 bool add_generation_prompt, const nlohmann::ordered_json& kwargs,
                                 const std::string& bos_token, const std::string& eos_token,
                                 const RenderLimits& limits) const {
  if (!messages.is_array())
    throw_runtime_error("chat template: messages must be a JSON list, not ", messages.type_name());
  if (!tools.is_null() && !tools.is_array()) {
    throw_runtime_error("chat template: tools must be a JSON list or null, not ", tools.type_name());
  }
  if (!kwargs.is_null() && !kwargs.is_object()) {
    throw_runtime_error("chat template: template variables must be a JSON object, not ", kwargs.type_name());
  }
  jinja::Dict globals;
  try {
    // The variables transformers passes: messages, tools, documents, add_generation_prompt, the special
    // tokens, then the caller's extra variables.
    globals.set("messages", jinja::Value::from_json(messages, limits.max_input_depth));
    globals.set("tools", jinja::Value::from_json(tools, limits.max_input_depth));
    globals.set("documents", jinja::Value(nullptr));
    globals.set("add_generation_prompt", jinja::Value(add_generation_prompt));
    if (!bos_token.empty()) globals.set("bos_token", jinja::Value(bos_token));
    if (!eos_token.empty()) globals.set("eos_token", jinja::Value(eos_token));
    if (kwargs.is_object()) {
      for (const auto& [key, value] : kwargs.items()) {
        if (key == "messages" || key == "tools" || key == "add_generation_prompt") {
          throw_runtime_error("chat template: '", key,
                              "' cannot be passed as a template variable; it is set by the request");
        }
        globals.set(key, jinja::Value::from_json(value, limits.max_input_depth));
      }
    }
  } catch (const jinja::RenderError& e) {
    throw_runtime_error("chat template: ", e.what());
  }
  return jinja::render_template(*template_, globals, limits);
}

std::string render_chat_template(const std::string& template_text, const nlohmann::ordered_json& messages,
                                 const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                 const nlohmann::ordered_json& kwargs, const std::string& bos_token,
                                 const std::string& eos_token, const RenderLimits& limits) {
  return ChatTemplate(template_text)
      .render(messages, tools, add_generation_prompt, kwargs, bos_token, eos_token, limits);
}

std::string apply_chat_template(const Tokenizer& tokenizer, const nlohmann::ordered_json& messages,
                                const nlohmann::ordered_json& tools, bool add_generation_prompt,
                                const nlohmann::ordered_json& kwargs, const RenderLimits& limits) {
  if (tokenizer.chat_template().empty()) {
    throw_config_error(
        "this model's tokenizer has no chat template (no chat_template in tokenizer_config.json and no "
        "chat_template.jinja beside it); use a completion request with a plain prompt, or add a chat template");
  }
  return render_chat_template(tokenizer.chat_template(), messages, tools, add_generation_prompt, kwargs,
                              tokenizer.bos_token(), tokenizer.eos_token(), limits);
}

}  // namespace pagoda
