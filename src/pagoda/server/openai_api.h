// The OpenAI-compatible request and response bodies (vLLM's dialect): parsing /v1/completions and
// /v1/chat/completions requests into engine requests, and writing the responses, whole or as SSE chunks.
// JSON stays in openai_api.cc and api_server.cc.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pagoda/engine/request_output.h"
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

// What the handlers need to know about the served model.
struct ServedModel {
  std::vector<std::string> names;  // the first is reported in responses
  std::string root;                // the model as given
  int max_model_len = 0;
  std::optional<Tokenizer> tokenizer;
  std::shared_ptr<const ChatTemplate> chat_template;  // --chat-template, else the tokenizer's, else null
};

// One HTTP completion request, parsed and validated: prompts.size() * n engine requests, the one of
// prompt p and sample i at index p * n + i, with params[index].
struct CompletionJob {
  bool chat = false;
  bool stream = false;
  bool include_usage = false;
  int n = 1;
  int logprobs = -1;  // completions: top logprobs per token (-1: none); chat: top_logprobs when logprobs
  std::string id;     // "cmpl-..." / "chatcmpl-..."
  int64_t created = 0;
  std::string model;
  std::vector<std::vector<int32_t>> prompts;
  std::vector<RequestParams> params;  // one per engine request
};

// Throws ApiError (400 bad JSON or values, 404 unknown model).
CompletionJob parse_completion_request(const std::string& body, bool chat, const ServedModel& model);

// Builds the response text of a job from engine outputs.
class CompletionResponse {
 public:
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
    std::vector<SampleResult> logprobs;
    std::string finish_reason;
    std::optional<std::string> stop_reason;
    bool started = false;
    int64_t prompt_tokens = 0, completion_tokens = 0;
  };
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
std::string tokenize_body(const std::string& request, const ServedModel& model);
std::string detokenize_body(const std::string& request, const ServedModel& model);

}  // namespace pagoda
