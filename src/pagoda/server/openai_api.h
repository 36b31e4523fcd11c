// The OpenAI-compatible request and response bodies (vLLM's dialect): parsing /v1/completions and
// /v1/chat/completions requests into engine requests, and writing the responses, whole or as SSE chunks.
// JSON stays in openai_api.cc, openai_request.cc and api_server.cc.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "pagoda/engine/request.h"
#include "pagoda/tokenizer/chat_template.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

class ChatTemplate;

// An error answered as {"error": {"message", "type", "param", "code"}} with HTTP `status`.
struct ApiError {
  int status = 400;
  std::string message;
  std::string param;  // "" -> null
};
const char* api_error_type(int status);
std::string api_error_body(const ApiError& e);

// Bounds on what one HTTP request may cost, checked before anything reaches the engine (an over-limit
// request is a 400 naming the limit). The parsed job holds prompts.size() * n copies of the prompt ids and
// of the stop strings, so the products are what is bounded. Defaults are generous: well above what an
// OpenAI or vLLM client sends (OpenAI itself allows 4 stop strings, n <= 128, 20 logprobs).
struct RequestLimits {
  int64_t max_prompts_per_request = 1024;   // entries of a completions 'prompt' batch
  int64_t max_n = 128;
  int64_t max_engine_requests = 1024;       // prompts x n
  int64_t max_stop_strings = 64;
  int64_t max_stop_string_bytes = 256;      // each: 64 x 256 B x 1024 copies is 16 MiB at most
  int64_t max_stop_token_ids = 1024;
  int64_t max_messages = 4096;              // chat 'messages'
  int64_t max_total_tokens = int64_t(1) << 24;  // sum over engine requests of prompt + max_tokens (64 MiB of ids)
  int64_t max_logprobs = 20;                // vLLM's --max-logprobs default
};

// What the handlers need to know about the served model.
struct ServedModel {
  std::vector<std::string> names;  // the first is reported in responses
  std::string root;                // the model as given
  int max_model_len = 0;
  std::optional<Tokenizer> tokenizer;
  std::shared_ptr<const ChatTemplate> chat_template;  // --chat-template, else the tokenizer's, else null
  RequestLimits limits;
  int32_t vocab_size = 0;  // the model's; token ids must be below it (0: the tokenizer's vocab_size())
  // A chat rendering's budgets; the server sets a deadline, and each request passes its cancel flag.
  RenderLimits render_limits;
};

// The request fields pagoda knows (vLLM's CompletionRequest / ChatCompletionRequest and OpenAI's fields):
// implemented; informational (accepted, nothing observable depends on them); or accepted only with a
// value that means "off" (null or one of `off`; best_of: null or equal to n), any other value a 400
// "'NAME' is not supported by pagoda yet". Fields not in the table are ignored with a warning log, as vLLM
// does.
enum class FieldSupport { kImplemented, kInformational, kOffOnly };
inline constexpr int kChatEndpoint = 1, kCompletionsEndpoint = 2, kBothEndpoints = 3;
struct RequestField {
  const char* name;
  int endpoints;  // kChatEndpoint | kCompletionsEndpoint
  FieldSupport support;
  const char* example;          // JSON text: valid (implemented, informational) or refused (kOffOnly); null: none
  const char* off[3];           // JSON texts of the off values besides null
};
std::span<const RequestField> request_fields();
// The field `name` of the endpoint, or null when the table has none.
const RequestField* find_request_field(std::string_view name, bool chat);
// Whether `value` is null or one of f.off (best_of's "equal to n" is the caller's).
bool request_field_is_off(const RequestField& f, const nlohmann::ordered_json& value);

// "an integer", "an array", ...: how error messages name a value's JSON type (never its text).
const char* json_type_name(const nlohmann::ordered_json& v);

// One HTTP completion request, parsed and validated: prompts.size() * n engine requests, the one of
// prompt p and sample i at index p * n + i, with params[index].
struct CompletionJob {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  int n = 1;
  int logprobs = -1;  // completions: top logprobs per token (-1: none); chat: top_logprobs when logprobs
  bool return_tokens_as_token_ids = false;  // logprobs' tokens as "token_id:N"
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params;  // one per engine request
};

// Throws ApiError (400 bad JSON, values or a request over model.limits; 404 unknown model).
// `cancel` (may be null): set when the client has gone away; a chat rendering in progress stops.
CompletionJob parse_completion_request(const std::string& body, bool chat, const ServedModel& model,
                                       const std::atomic<bool>* cancel = nullptr);

// Builds the response text of a job from engine outputs.
class CompletionResponse {
 public:
  // One token of a choice's logprobs, as the response writes it.
  struct LogprobAlt {
    std::string token, bytes;  // bytes: the raw UTF-8 bytes the token adds to the text (maybe part of a character)
    double logprob;
  };
  struct LogprobEntry : LogprobAlt {
    int64_t text_offset;  // code points of the choice's text before this token
    std::vector<LogprobAlt> top;
  };

  CompletionResponse(const CompletionJob& job, const ServedModel& model);
  // Streaming: the SSE events ("data: {...}\n\n" lines) for one output; the first call for a choice of a
  // chat also sends the role.
  std::string stream_events(int index, const RequestOutput& out);
  // Streaming: the usage chunk (when asked for) and "data: [DONE]".
  std::string stream_end();
  // Not streaming: records an output; body() writes the whole response.
  void add(int index, const RequestOutput& out);
  std::string body() const;

 private:
  struct Choice {
    std::string text;
    std::vector<int32_t> token_ids;
    std::vector<LogprobEntry> logprobs;
    std::string finish_reason;
    std::optional<std::string> stop_reason;
    bool started = false;
    int64_t prompt_tokens = 0, completion_tokens = 0;
    std::optional<IncrementalDetokenizer> pieces;  // the tokens' bytes in context (piece mode)
    int64_t chars = 0;                             // code points begun by the pieces so far
    std::string tail;                              // the pieces' last bytes (<= 4)
  };
  std::vector<LogprobEntry> logprob_entries(int index, const RequestOutput& out);
  std::string usage_json() const;
  const CompletionJob& job_;
  const ServedModel& model_;
  std::vector<Choice> choices_;
};

}  // namespace pagoda

namespace pagoda {

// GET /v1/models.
std::string models_body(const ServedModel& model, int64_t created);
// POST /tokenize and /detokenize (vLLM's shapes). Throw ApiError.
std::string tokenize_body(const std::string& request, const ServedModel& model, const std::atomic<bool>* cancel = nullptr);
std::string detokenize_body(const std::string& request, const ServedModel& model);

}  // namespace pagoda
