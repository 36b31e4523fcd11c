#include "pagoda/server/openai_api.h"

#include <algorithm>
#include <ctime>
#include <random>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/strings.h"
#include "pagoda/ops/sample.h"
#include "pagoda/tokenizer/chat_template.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

[[noreturn]] void bad_request(const std::string& message, const std::string& param = "") {
  throw ApiError{400, message, param};
}

std::string random_hex(size_t n) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* kHex = "0123456789abcdef";
  std::string s(n, '0');
  for (auto& c : s) c = kHex[rng() % 16];
  return s;
}

std::string dump(const Json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

// A typed field of the body, or nullopt when absent or null.
template <typename T>
std::optional<T> field(const Json& body, const char* name) {
  auto it = body.find(name);
  if (it == body.end() || it->is_null()) return std::nullopt;
  try {
    if constexpr (std::is_same_v<T, bool>) {
      if (!it->is_boolean()) throw std::invalid_argument("");
    } else if constexpr (std::is_integral_v<T>) {
      if (!it->is_number_integer()) throw std::invalid_argument("");
    } else if constexpr (std::is_floating_point_v<T>) {
      if (!it->is_number()) throw std::invalid_argument("");
    } else if constexpr (std::is_same_v<T, std::string>) {
      if (!it->is_string()) throw std::invalid_argument("");
    }
    return it->get<T>();
  } catch (const std::exception&) {
    bad_request(str_cat("'", name, "' has the wrong type: ", dump(*it)), name);
  }
}

std::vector<int32_t> token_list(const Json& j, const char* param) {
  std::vector<int32_t> ids;
  for (const auto& x : j) {
    if (!x.is_number_integer()) bad_request(str_cat("'", param, "' must be a string, a list of strings or a list of token ids"), param);
    int64_t v = x.get<int64_t>();
    if (v < 0 || v > INT32_MAX) bad_request(str_cat("token id ", v, " is out of range"), param);
    ids.push_back(int32_t(v));
  }
  return ids;
}

std::vector<int32_t> encode(const ServedModel& model, const std::string& text, bool add_special_tokens) {
  if (!model.tokenizer) bad_request("this model has no tokenizer: give the prompt as token ids", "prompt");
  std::vector<int> ids = model.tokenizer->encode(text, add_special_tokens);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::vector<std::vector<int32_t>> completion_prompts(const Json& body, const ServedModel& model) {
  auto it = body.find("prompt");
  if (it == body.end() || it->is_null()) bad_request("'prompt' is required", "prompt");
  const Json& p = *it;
  std::vector<std::vector<int32_t>> prompts;
  if (p.is_string()) {
    prompts.push_back(encode(model, p.get<std::string>(), true));
  } else if (p.is_array() && !p.empty() && p[0].is_string()) {
    for (const auto& s : p) {
      if (!s.is_string()) bad_request("'prompt' mixes strings and other values", "prompt");
      prompts.push_back(encode(model, s.get<std::string>(), true));
    }
  } else if (p.is_array() && !p.empty() && p[0].is_array()) {
    for (const auto& s : p) prompts.push_back(token_list(s, "prompt"));
  } else if (p.is_array()) {
    prompts.push_back(token_list(p, "prompt"));
  } else {
    bad_request("'prompt' must be a string, a list of strings or a list of token ids", "prompt");
  }
  for (const auto& ids : prompts)
    if (ids.empty()) bad_request("the prompt is empty (no tokens)", "prompt");
  return prompts;
}

std::vector<int32_t> chat_prompt(const Json& body, const ServedModel& model) {
  auto it = body.find("messages");
  if (it == body.end() || !it->is_array() || it->empty()) bad_request("'messages' must be a non-empty list", "messages");
  for (const auto& m : *it)
    if (!m.is_object() || !m.contains("role")) bad_request("each message must be an object with a 'role'", "messages");
  if (!model.chat_template)
    bad_request("this model has no chat template (tokenizer_config.json has none): start the server with "
                "--chat-template FILE", "messages");
  Json tools = body.contains("tools") ? body["tools"] : Json();
  Json kwargs = body.contains("chat_template_kwargs") ? body["chat_template_kwargs"] : Json::object();
  bool add_generation_prompt = field<bool>(body, "add_generation_prompt").value_or(true);
  std::string bos = model.tokenizer ? model.tokenizer->bos_token() : "";
  std::string eos = model.tokenizer ? model.tokenizer->eos_token() : "";
  std::string text;
  try {
    text = model.chat_template->render(*it, tools, add_generation_prompt, kwargs, bos, eos);
  } catch (const Error& e) {
    bad_request(str_cat("chat template: ", e.what()), "messages");
  }
  std::vector<int32_t> ids = encode(model, text, false);
  if (ids.empty()) bad_request("the chat prompt is empty (no tokens)", "messages");
  return ids;
}

std::vector<std::string> stop_list(const Json& body) {
  auto it = body.find("stop");
  if (it == body.end() || it->is_null()) return {};
  if (it->is_string()) return {it->get<std::string>()};
  std::vector<std::string> out;
  if (!it->is_array()) bad_request("'stop' must be a string or a list of strings", "stop");
  for (const auto& s : *it) {
    if (!s.is_string()) bad_request("'stop' must be a string or a list of strings", "stop");
    if (!s.get<std::string>().empty()) out.push_back(s.get<std::string>());
  }
  return out;
}

std::string token_text(const ServedModel& model, int32_t id) {
  if (!model.tokenizer) return str_cat("token_id:", id);
  return model.tokenizer->decode(std::vector<int>{id}, false);
}

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

}  // namespace

const char* api_error_type(int status) {
  switch (status) {
    case 400: return "BadRequestError";
    case 401: return "UnauthorizedError";
    case 404: return "NotFoundError";
    case 503: return "ServiceUnavailableError";
    default: return "InternalServerError";
  }
}

std::string api_error_body(const ApiError& e) {
  Json j;
  j["error"] = {{"message", e.message},
                {"type", api_error_type(e.status)},
                {"param", e.param.empty() ? Json() : Json(e.param)},
                {"code", e.status}};
  return dump(j);
}

CompletionJob parse_completion_request(const std::string& text, bool chat, const ServedModel& model) {
  Json body;
  try {
    body = Json::parse(text);
  } catch (const std::exception& e) {
    bad_request(str_cat("Invalid JSON in the request body: ", e.what()));
  }
  if (!body.is_object()) bad_request("the request body must be a JSON object");
  CompletionJob job;
  job.chat = chat;
  job.created = int64_t(std::time(nullptr));
  job.id = (chat ? "chatcmpl-" : "cmpl-") + random_hex(32);
  job.model = model.names.front();
  if (auto m = field<std::string>(body, "model")) {
    if (std::find(model.names.begin(), model.names.end(), *m) == model.names.end())
      throw ApiError{404, str_cat("The model `", *m, "` does not exist."), "model"};
    job.model = *m;
  }
  job.stream = field<bool>(body, "stream").value_or(false);
  if (auto it = body.find("stream_options"); it != body.end() && it->is_object()) {
    if (!job.stream) bad_request("'stream_options' needs 'stream': true", "stream_options");
    job.include_usage = field<bool>(*it, "include_usage").value_or(false);
  }
  job.n = int(field<int64_t>(body, "n").value_or(1));
  if (job.n < 1 || job.n > 128) bad_request(str_cat("'n' must be between 1 and 128, got ", job.n), "n");

  RequestParams p;
  SamplingParams& s = p.sampling;
  s.temperature = float(field<double>(body, "temperature").value_or(1.0));
  s.top_p = float(field<double>(body, "top_p").value_or(1.0));
  s.top_k = int(field<int64_t>(body, "top_k").value_or(0));
  s.min_p = float(field<double>(body, "min_p").value_or(0.0));
  s.presence_penalty = float(field<double>(body, "presence_penalty").value_or(0.0));
  s.frequency_penalty = float(field<double>(body, "frequency_penalty").value_or(0.0));
  s.repetition_penalty = float(field<double>(body, "repetition_penalty").value_or(1.0));
  if (s.temperature < 0) bad_request(str_cat("'temperature' must be >= 0, got ", s.temperature), "temperature");
  p.stop = stop_list(body);
  if (auto it = body.find("stop_token_ids"); it != body.end() && it->is_array()) p.stop_token_ids = token_list(*it, "stop_token_ids");
  p.ignore_eos = field<bool>(body, "ignore_eos").value_or(false);
  p.skip_special_tokens = field<bool>(body, "skip_special_tokens").value_or(true);
  const char* lp_param = chat ? "top_logprobs" : "logprobs";
  std::optional<int64_t> lp = field<int64_t>(body, lp_param);
  if (lp && (*lp < 0 || *lp > 20)) bad_request(str_cat("'", lp_param, "' must be between 0 and 20, got ", *lp), lp_param);
  if (chat) {
    if (field<bool>(body, "logprobs").value_or(false)) job.logprobs = int(lp.value_or(0));
  } else if (lp) {
    job.logprobs = int(*lp);
  }
  s.num_logprobs = std::max(job.logprobs, 0);
  try {
    Sampler check(s);
  } catch (const Error& e) {
    bad_request(e.what());
  }

  std::optional<int64_t> max_tokens = field<int64_t>(body, "max_tokens");
  if (chat) {
    if (auto m = field<int64_t>(body, "max_completion_tokens")) max_tokens = m;
    job.prompts.push_back(chat_prompt(body, model));
  } else {
    job.prompts = completion_prompts(body, model);
    if (!max_tokens) max_tokens = 16;
  }
  if (max_tokens && *max_tokens < 0) bad_request(str_cat("'max_tokens' must be >= 0, got ", *max_tokens), "max_tokens");
  for (const auto& ids : job.prompts) {
    const int64_t len = int64_t(ids.size());
    if (len >= model.max_model_len || (max_tokens && len + *max_tokens > model.max_model_len))
      bad_request(str_cat("This model's maximum context length is ", model.max_model_len, " tokens. However, you requested ",
                          len + max_tokens.value_or(0), " tokens (", len, " in the ", chat ? "messages" : "prompt", ", ",
                          max_tokens.value_or(0), " in the completion). Please reduce the length of the ",
                          chat ? "messages" : "prompt", " or completion."),
                  chat ? "messages" : "prompt");
  }
  std::optional<int64_t> seed = field<int64_t>(body, "seed");
  const uint64_t base_seed = seed ? uint64_t(*seed) : std::random_device{}();
  for (size_t i = 0; i < job.prompts.size(); ++i) {
    for (int k = 0; k < job.n; ++k) {
      RequestParams q = p;
      q.max_tokens = int(max_tokens.value_or(model.max_model_len - int64_t(job.prompts[i].size())));
      q.sampling.seed = base_seed + uint64_t(k);
      job.params.push_back(q);
    }
  }
  std::vector<std::vector<int32_t>> expanded;
  for (const auto& ids : job.prompts)
    for (int k = 0; k < job.n; ++k) expanded.push_back(ids);
  job.prompts = std::move(expanded);
  return job;
}

CompletionResponse::CompletionResponse(const CompletionJob& job, const ServedModel& model)
    : job_(job), model_(model), choices_(job.prompts.size()) {}

namespace {

// Completions' logprobs object for tokens [begin, end) of a choice; `offset` is the text offset of begin.
Json completion_logprobs(const ServedModel& model, const std::vector<SampleResult>& lps, size_t offset) {
  Json j;
  Json text_offset = Json::array(), token_logprobs = Json::array(), tokens = Json::array(), top = Json::array();
  for (const auto& r : lps) {
    std::string t = token_text(model, r.token);
    text_offset.push_back(offset);
    offset += t.size();
    tokens.push_back(t);
    token_logprobs.push_back(r.logprob);
    Json m = Json::object();
    for (const auto& x : r.top) m[token_text(model, x.id)] = x.logprob;
    top.push_back(m);
  }
  j["text_offset"] = text_offset;
  j["token_logprobs"] = token_logprobs;
  j["tokens"] = tokens;
  j["top_logprobs"] = top;
  return j;
}

Json chat_logprobs(const ServedModel& model, const std::vector<SampleResult>& lps) {
  Json content = Json::array();
  for (const auto& r : lps) {
    std::string t = token_text(model, r.token);
    Json top = Json::array();
    for (const auto& x : r.top) {
      std::string xt = token_text(model, x.id);
      top.push_back({{"token", xt}, {"logprob", x.logprob}, {"bytes", bytes_of(xt)}});
    }
    content.push_back({{"token", t}, {"logprob", r.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
  }
  return Json{{"content", content}};
}

Json stop_reason_json(const RequestOutput& out) {
  if (out.stop_string) return *out.stop_string;
  if (out.stop_token_id) return *out.stop_token_id;
  return Json();
}

}  // namespace

std::string CompletionResponse::stream_events(int index, const RequestOutput& out) {
  Choice& c = choices_[size_t(index)];
  c.prompt_tokens = out.num_prompt_tokens;
  c.completion_tokens = out.num_generated_tokens;
  const bool want_lp = job_.logprobs >= 0 && !out.logprobs.empty();
  std::string events;
  auto chunk = [&](Json choice) {
    Json j;
    j["id"] = job_.id;
    j["object"] = job_.chat ? "chat.completion.chunk" : "text_completion";
    j["created"] = job_.created;
    j["model"] = job_.model;
    j["choices"] = Json::array({std::move(choice)});
    events += "data: " + dump(j) + "\n\n";
  };
  if (job_.chat && !c.started) {
    chunk(Json{{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}}, {"logprobs", nullptr}, {"finish_reason", nullptr}});
  }
  c.started = true;
  const std::string reason = out.finished && out.finish_reason ? finish_reason_str(*out.finish_reason) : "";
  if (out.text_delta.empty() && !want_lp && !out.finished) return events;
  Json choice;
  choice["index"] = index;
  if (job_.chat) {
    choice["delta"] = out.text_delta.empty() && out.finished ? Json::object() : Json{{"content", out.text_delta}};
    choice["logprobs"] = want_lp ? chat_logprobs(model_, out.logprobs) : Json();
  } else {
    choice["text"] = out.text_delta;
    choice["logprobs"] = want_lp ? completion_logprobs(model_, out.logprobs, c.text.size()) : Json();
  }
  c.text += out.text_delta;
  choice["finish_reason"] = out.finished ? Json(reason) : Json();
  choice["stop_reason"] = out.finished ? stop_reason_json(out) : Json();
  chunk(std::move(choice));
  return events;
}

std::string CompletionResponse::usage_json() const {
  int64_t prompt = 0, completion = 0;
  for (size_t i = 0; i < choices_.size(); ++i) {
    if (i % size_t(job_.n) == 0) prompt += choices_[i].prompt_tokens;
    completion += choices_[i].completion_tokens;
  }
  return dump(Json{{"prompt_tokens", prompt}, {"total_tokens", prompt + completion}, {"completion_tokens", completion}});
}

std::string CompletionResponse::stream_end() {
  std::string events;
  if (job_.include_usage) {
    Json j;
    j["id"] = job_.id;
    j["object"] = job_.chat ? "chat.completion.chunk" : "text_completion";
    j["created"] = job_.created;
    j["model"] = job_.model;
    j["choices"] = Json::array();
    j["usage"] = Json::parse(usage_json());
    events += "data: " + dump(j) + "\n\n";
  }
  return events + "data: [DONE]\n\n";
}

void CompletionResponse::add(int index, const RequestOutput& out) {
  Choice& c = choices_[size_t(index)];
  c.text += out.text_delta;
  c.token_ids.insert(c.token_ids.end(), out.new_token_ids.begin(), out.new_token_ids.end());
  c.logprobs.insert(c.logprobs.end(), out.logprobs.begin(), out.logprobs.end());
  c.prompt_tokens = out.num_prompt_tokens;
  c.completion_tokens = out.num_generated_tokens;
  if (out.finished && out.finish_reason) {
    c.finish_reason = finish_reason_str(*out.finish_reason);
    Json sr = stop_reason_json(out);
    if (!sr.is_null()) c.stop_reason = dump(sr);
  }
}

std::string CompletionResponse::body() const {
  Json j;
  j["id"] = job_.id;
  j["object"] = job_.chat ? "chat.completion" : "text_completion";
  j["created"] = job_.created;
  j["model"] = job_.model;
  Json choices = Json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    Json choice;
    choice["index"] = i;
    const bool want_lp = job_.logprobs >= 0;
    if (job_.chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = want_lp ? chat_logprobs(model_, c.logprobs) : Json();
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = want_lp ? completion_logprobs(model_, c.logprobs, 0) : Json();
    }
    choice["finish_reason"] = c.finish_reason;
    choice["stop_reason"] = c.stop_reason ? Json::parse(*c.stop_reason) : Json();
    choices.push_back(std::move(choice));
  }
  j["choices"] = std::move(choices);
  j["usage"] = Json::parse(usage_json());
  return dump(j);
}

}  // namespace pagoda

namespace pagoda {
namespace {

Json parse_object(const std::string& text, const ServedModel& model) {
  Json body;
  try {
    body = Json::parse(text);
  } catch (const std::exception& e) {
    bad_request(str_cat("Invalid JSON in the request body: ", e.what()));
  }
  if (!body.is_object()) bad_request("the request body must be a JSON object");
  if (auto m = field<std::string>(body, "model"))
    if (std::find(model.names.begin(), model.names.end(), *m) == model.names.end())
      throw ApiError{404, str_cat("The model `", *m, "` does not exist."), "model"};
  return body;
}

}  // namespace

std::string models_body(const ServedModel& model, int64_t created) {
  Json data = Json::array();
  for (const auto& name : model.names)
    data.push_back({{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "pagoda"}, {"root", model.root},
                    {"parent", nullptr}, {"max_model_len", model.max_model_len}, {"permission", Json::array()}});
  return dump(Json{{"object", "list"}, {"data", data}});
}

std::string tokenize_body(const std::string& request, const ServedModel& model) {
  Json body = parse_object(request, model);
  std::vector<int32_t> ids;
  if (body.contains("messages")) {
    ids = chat_prompt(body, model);
  } else {
    auto p = field<std::string>(body, "prompt");
    if (!p) bad_request("'prompt' (a string) or 'messages' is required", "prompt");
    ids = encode(model, *p, field<bool>(body, "add_special_tokens").value_or(true));
  }
  Json strs;
  if (field<bool>(body, "return_token_strs").value_or(false) && model.tokenizer) {
    strs = Json::array();
    for (int32_t id : ids) strs.push_back(model.tokenizer->id_to_token(id));
  }
  return dump(Json{{"count", ids.size()}, {"max_model_len", model.max_model_len}, {"tokens", ids}, {"token_strs", strs}});
}

std::string detokenize_body(const std::string& request, const ServedModel& model) {
  Json body = parse_object(request, model);
  auto it = body.find("tokens");
  if (it == body.end() || !it->is_array()) bad_request("'tokens' (a list of token ids) is required", "tokens");
  std::vector<int32_t> ids = token_list(*it, "tokens");
  if (!model.tokenizer) bad_request("this model has no tokenizer", "tokens");
  for (int32_t id : ids)
    if (id >= model.tokenizer->vocab_size())
      bad_request(str_cat("token id ", id, " is outside the vocabulary [0, ", model.tokenizer->vocab_size(), ")"), "tokens");
  return dump(Json{{"prompt", model.tokenizer->decode(std::vector<int>(ids.begin(), ids.end()), false)}});
}

}  // namespace pagoda
