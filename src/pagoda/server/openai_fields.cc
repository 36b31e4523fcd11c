// The request fields pagoda knows: vLLM's CompletionRequest and ChatCompletionRequest
// (vllm/entrypoints/openai/protocol.py) and OpenAI's fields of the same endpoints, each implemented,
// informational or accepted only when off.
#include <nlohmann/json.hpp>

#include "pagoda/server/openai_api.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

// Off values of the fields accepted only when off (null is always off).
constexpr const char* kFalse = "false";
constexpr const char* kEmptyList = "[]";
constexpr const char* kEmptyObject = "{}";

// vLLM's CompletionRequest and ChatCompletionRequest (vllm/entrypoints/openai/protocol.py) and the OpenAI
// fields of the same endpoints. `example` is a value the test sends: a valid one for implemented and
// informational fields, one pagoda refuses for kOffOnly fields; `off` lists the accepted off values.
constexpr RequestField kFields[] = {
    // name, endpoints, support, example, off values
    {"model", kBothEndpoints, FieldSupport::kImplemented, R"("stories")", {}},
    {"prompt", kCompletionsEndpoint, FieldSupport::kImplemented, R"("Once")", {}},
    {"messages", kChatEndpoint, FieldSupport::kImplemented, R"([{"role": "user", "content": "hi"}])", {}},
    {"n", kBothEndpoints, FieldSupport::kImplemented, "2", {}},
    {"max_tokens", kBothEndpoints, FieldSupport::kImplemented, "3", {}},
    {"max_completion_tokens", kChatEndpoint, FieldSupport::kImplemented, "3", {}},
    {"temperature", kBothEndpoints, FieldSupport::kImplemented, "0.5", {}},
    {"top_p", kBothEndpoints, FieldSupport::kImplemented, "0.9", {}},
    {"top_k", kBothEndpoints, FieldSupport::kImplemented, "5", {}},
    {"min_p", kBothEndpoints, FieldSupport::kImplemented, "0.1", {}},
    {"presence_penalty", kBothEndpoints, FieldSupport::kImplemented, "0.5", {}},
    {"frequency_penalty", kBothEndpoints, FieldSupport::kImplemented, "0.5", {}},
    {"repetition_penalty", kBothEndpoints, FieldSupport::kImplemented, "1.1", {}},
    {"seed", kBothEndpoints, FieldSupport::kImplemented, "-7", {}},
    {"stop", kBothEndpoints, FieldSupport::kImplemented, R"(["zzz"])", {}},
    {"stop_token_ids", kBothEndpoints, FieldSupport::kImplemented, "[5]", {}},
    {"ignore_eos", kBothEndpoints, FieldSupport::kImplemented, "true", {}},
    {"skip_special_tokens", kBothEndpoints, FieldSupport::kImplemented, "false", {}},
    {"stream", kBothEndpoints, FieldSupport::kImplemented, "false", {}},
    {"stream_options", kBothEndpoints, FieldSupport::kImplemented, "null", {}},
    {"logprobs", kBothEndpoints, FieldSupport::kImplemented, nullptr, {}},  // bool (chat) / int: by endpoint
    {"top_logprobs", kChatEndpoint, FieldSupport::kImplemented, nullptr, {}},
    {"add_special_tokens", kBothEndpoints, FieldSupport::kImplemented, "true", {}},
    {"truncate_prompt_tokens", kBothEndpoints, FieldSupport::kImplemented, "4", {}},
    {"request_id", kBothEndpoints, FieldSupport::kImplemented, R"("abc")", {}},
    {"return_tokens_as_token_ids", kBothEndpoints, FieldSupport::kImplemented, "true", {}},
    {"add_generation_prompt", kChatEndpoint, FieldSupport::kImplemented, "false", {}},
    {"continue_final_message", kChatEndpoint, FieldSupport::kImplemented, "false", {}},
    {"chat_template_kwargs", kChatEndpoint, FieldSupport::kImplemented, R"({"x": 1})", {}},
    {"documents", kChatEndpoint, FieldSupport::kImplemented, R"([{"title": "t", "text": "x"}])", {}},
    // Informational: accepted, nothing observable depends on them in pagoda (nor, without tools or
    // storage, in vLLM).
    {"user", kBothEndpoints, FieldSupport::kInformational, R"("u-1")", {}},
    {"metadata", kChatEndpoint, FieldSupport::kInformational, R"({"k": "v"})", {}},
    {"parallel_tool_calls", kChatEndpoint, FieldSupport::kInformational, "true", {}},
    {"include_reasoning", kChatEndpoint, FieldSupport::kInformational, "true", {}},
    // Accepted only when off.
    {"best_of", kBothEndpoints, FieldSupport::kOffOnly, "3", {}},  // off: null or equal to n
    {"echo", kBothEndpoints, FieldSupport::kOffOnly, "true", {kFalse}},
    {"suffix", kCompletionsEndpoint, FieldSupport::kOffOnly, R"("end")", {R"("")"}},
    {"logit_bias", kBothEndpoints, FieldSupport::kOffOnly, R"({"5": 10})", {kEmptyObject}},
    {"use_beam_search", kBothEndpoints, FieldSupport::kOffOnly, "true", {kFalse}},
    {"length_penalty", kBothEndpoints, FieldSupport::kOffOnly, "0.5", {"1.0"}},
    {"include_stop_str_in_output", kBothEndpoints, FieldSupport::kOffOnly, "true", {kFalse}},
    {"min_tokens", kBothEndpoints, FieldSupport::kOffOnly, "2", {"0"}},
    {"spaces_between_special_tokens", kBothEndpoints, FieldSupport::kOffOnly, "false", {"true"}},
    {"prompt_logprobs", kBothEndpoints, FieldSupport::kOffOnly, "1", {}},
    {"allowed_token_ids", kBothEndpoints, FieldSupport::kOffOnly, "[1, 2]", {}},
    {"bad_words", kBothEndpoints, FieldSupport::kOffOnly, R"(["x"])", {kEmptyList}},
    {"response_format", kBothEndpoints, FieldSupport::kOffOnly, R"({"type": "json_object"})", {R"({"type": "text"})"}},
    {"guided_json", kBothEndpoints, FieldSupport::kOffOnly, R"({"type": "object"})", {}},
    {"guided_regex", kBothEndpoints, FieldSupport::kOffOnly, R"("a+")", {}},
    {"guided_choice", kBothEndpoints, FieldSupport::kOffOnly, R"(["a", "b"])", {}},
    {"guided_grammar", kBothEndpoints, FieldSupport::kOffOnly, R"("root ::= \"a\"")", {}},
    {"guided_decoding_backend", kBothEndpoints, FieldSupport::kOffOnly, R"("xgrammar")", {}},
    {"guided_whitespace_pattern", kBothEndpoints, FieldSupport::kOffOnly, R"(" ")", {}},
    {"structural_tag", kBothEndpoints, FieldSupport::kOffOnly, R"("{}")", {}},
    {"structured_outputs", kBothEndpoints, FieldSupport::kOffOnly, R"({"regex": "a+"})", {}},
    {"priority", kBothEndpoints, FieldSupport::kOffOnly, "1", {"0"}},
    {"logits_processors", kBothEndpoints, FieldSupport::kOffOnly, R"(["m.P"])", {kEmptyList}},
    {"return_token_ids", kBothEndpoints, FieldSupport::kOffOnly, "true", {kFalse}},
    {"cache_salt", kBothEndpoints, FieldSupport::kOffOnly, R"("salt")", {}},
    {"kv_transfer_params", kBothEndpoints, FieldSupport::kOffOnly, R"({"a": 1})", {}},
    {"vllm_xargs", kBothEndpoints, FieldSupport::kOffOnly, R"({"a": 1})", {kEmptyObject}},
    {"mm_processor_kwargs", kBothEndpoints, FieldSupport::kOffOnly, R"({"a": 1})", {kEmptyObject}},
    {"prompt_embeds", kCompletionsEndpoint, FieldSupport::kOffOnly, R"("AAAA")", {}},
    {"tools", kChatEndpoint, FieldSupport::kOffOnly,
     R"([{"type": "function", "function": {"name": "f"}}])", {kEmptyList}},
    {"tool_choice", kChatEndpoint, FieldSupport::kOffOnly, R"("required")", {R"("none")", R"("auto")"}},
    {"functions", kChatEndpoint, FieldSupport::kOffOnly, R"([{"name": "f"}])", {kEmptyList}},
    {"function_call", kChatEndpoint, FieldSupport::kOffOnly, R"("auto")", {R"("none")"}},
    {"reasoning_effort", kChatEndpoint, FieldSupport::kOffOnly, R"("low")", {}},
    {"chat_template", kChatEndpoint, FieldSupport::kOffOnly, R"("{{ messages }}")", {}},
    {"store", kChatEndpoint, FieldSupport::kOffOnly, "true", {kFalse}},
    {"service_tier", kBothEndpoints, FieldSupport::kOffOnly, R"("flex")", {R"("auto")", R"("default")"}},
    {"modalities", kChatEndpoint, FieldSupport::kOffOnly, R"(["text", "audio"])", {R"(["text"])"}},
    {"audio", kChatEndpoint, FieldSupport::kOffOnly, R"({"voice": "alloy", "format": "wav"})", {}},
    {"prediction", kChatEndpoint, FieldSupport::kOffOnly, R"({"type": "content", "content": "x"})", {}},
    {"web_search_options", kChatEndpoint, FieldSupport::kOffOnly, "{}", {}},
};

}  // namespace

const RequestField* find_request_field(std::string_view name, bool chat) {
  for (const RequestField& f : kFields)
    if (name == f.name && (f.endpoints & (chat ? kChatEndpoint : kCompletionsEndpoint))) return &f;
  return nullptr;
}

bool request_field_is_off(const RequestField& f, const Json& v) {
  if (v.is_null()) return true;
  for (const char* off : f.off) {
    if (!off) break;
    if (v == Json::parse(off)) return true;
  }
  return false;
}

std::span<const RequestField> request_fields() { return kFields; }

const char* json_type_name(const nlohmann::ordered_json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned: return "an integer";
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::binary: return "binary data";
    case Json::value_t::discarded: return "an invalid value";
  }
  return "an invalid value";
}


}  // namespace pagoda
