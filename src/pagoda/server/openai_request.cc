// Parsing and validating /v1/completions, /v1/chat/completions, /tokenize and /detokenize request bodies.
//
// Every value is read with the JSON type it must have and range-checked at full width (integers as int64,
// numbers as double) before it is narrowed, and an error names the field and the JSON type it had, never
// the value itself (a value can be megabytes, or nested deep enough that printing it recurses too far).
// Every field of vLLM's request models is in the table of openai_fields.cc: implemented, informational, or
// accepted only with a value that means "off" (anything else is a 400 naming it); fields vLLM does not know
// are ignored with a warning, as vLLM does.
#include <algorithm>
#include <cmath>
#include <ctime>
#include <limits>
#include <random>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/json_depth.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"
#include "pagoda/ops/sample.h"
#include "pagoda/server/openai_api.h"
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

// A name as it may appear in a log line: at most 64 bytes, printable ASCII.
std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 64)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 64) out += "...";
  return out;
}

// Messages of the parser and the template can quote the input they stopped at: keep them short.
std::string clip(std::string_view s) {
  constexpr size_t kMax = 300;
  return s.size() <= kMax ? std::string(s) : str_cat(s.substr(0, kMax), "...");
}

// --- Typed fields: each reads one value with the JSON type it must have.

[[noreturn]] void wrong_type(const char* name, const char* want, const Json& v) {
  bad_request(str_cat("'", name, "' must be ", want, ", got ", json_type_name(v)), name);
}

const Json* find(const Json& obj, const char* name) {
  auto it = obj.find(name);
  return it == obj.end() || it->is_null() ? nullptr : &*it;
}

// An integer, at full width: integral floats (3.0, 1e3) are integers as in pydantic; other floats and values
// outside int64 are refused.
int64_t as_int(const Json& v, const char* name) {
  if (v.is_number_integer() && !v.is_number_unsigned()) return v.get<int64_t>();
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > uint64_t(std::numeric_limits<int64_t>::max()))
      bad_request(str_cat("'", name, "' is out of range: ", u, " does not fit in 64 bits"), name);
    return int64_t(u);
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || std::floor(d) != d) bad_request(str_cat("'", name, "' must be an integer, got a fractional number"), name);
    // [-2^63, 2^63): the doubles that convert to int64 exactly.
    if (d < -9223372036854775808.0 || d >= 9223372036854775808.0)
      bad_request(str_cat("'", name, "' is out of range: ", d, " does not fit in 64 bits"), name);
    return int64_t(d);
  }
  wrong_type(name, "an integer", v);
}

std::optional<int64_t> get_int(const Json& obj, const char* name) {
  const Json* v = find(obj, name);
  if (!v) return std::nullopt;
  return as_int(*v, name);
}

// An integer in [lo, hi], or `fallback` when absent or null.
int64_t int_in(const Json& obj, const char* name, int64_t lo, int64_t hi, int64_t fallback) {
  std::optional<int64_t> v = get_int(obj, name);
  if (!v) return fallback;
  if (*v < lo || *v > hi) bad_request(str_cat("'", name, "' must be in [", lo, ", ", hi, "], got ", *v), name);
  return *v;
}

std::optional<double> get_number(const Json& obj, const char* name) {
  const Json* v = find(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_number()) wrong_type(name, "a number", *v);
  const double d = v->get<double>();
  if (!std::isfinite(d)) bad_request(str_cat("'", name, "' must be a finite number"), name);
  return d;
}

std::optional<bool> get_bool(const Json& obj, const char* name) {
  const Json* v = find(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) wrong_type(name, "a boolean", *v);
  return v->get<bool>();
}

std::optional<std::string> get_string(const Json& obj, const char* name) {
  const Json* v = find(obj, name);
  if (!v) return std::nullopt;
  if (!v->is_string()) wrong_type(name, "a string", *v);
  return v->get<std::string>();
}

// A number in a range given as a predicate and its text ("in (0, 1]").
float float_field(const Json& obj, const char* name, double fallback, bool (*ok)(double), const char* range) {
  std::optional<double> v = get_number(obj, name);
  if (!v) return float(fallback);
  if (!ok(*v)) bad_request(str_cat("'", name, "' must be ", range, ", got ", *v), name);
  return float(*v);
}

int32_t vocab_size(const ServedModel& model) {
  if (model.vocab_size > 0) return model.vocab_size;
  return model.tokenizer ? model.tokenizer->vocab_size() : std::numeric_limits<int32_t>::max();
}

// A list of token ids, each in [0, vocab); at most `max_count`.
std::vector<int32_t> token_list(const Json& j, const char* param, const ServedModel& model, int64_t max_count) {
  if (!j.is_array()) wrong_type(param, "a list of token ids", j);
  if (int64_t(j.size()) > max_count)
    bad_request(str_cat("'", param, "' has ", j.size(), " token ids, more than the limit of ", max_count), param);
  const int64_t vocab = vocab_size(model);
  std::vector<int32_t> ids;
  ids.reserve(j.size());
  for (const auto& x : j) {
    if (!x.is_number()) bad_request(str_cat("'", param, "' must hold token ids (integers), got ", json_type_name(x)), param);
    const int64_t v = as_int(x, param);
    if (v < 0 || v >= vocab) bad_request(str_cat("token id ", v, " in '", param, "' is outside the vocabulary [0, ", vocab, ")"), param);
    ids.push_back(int32_t(v));
  }
  return ids;
}

Json parse_body(const std::string& text) {
  try {
    check_json_depth(text, "the request body");
  } catch (const Error& e) {
    bad_request(e.what());
  }
  Json body;
  try {
    body = Json::parse(text);
  } catch (const std::exception& e) {
    bad_request(str_cat("Invalid JSON in the request body: ", clip(e.what())));
  }
  if (!body.is_object()) bad_request(str_cat("the request body must be a JSON object, got ", json_type_name(body)));
  return body;
}

std::string check_model(const Json& body, const ServedModel& model) {
  std::optional<std::string> m = get_string(body, "model");
  if (!m) return model.names.front();
  if (std::find(model.names.begin(), model.names.end(), *m) == model.names.end())
    throw ApiError{404, str_cat("The model `", printable(*m), "` does not exist."), "model"};
  return *m;
}

std::vector<int32_t> encode(const ServedModel& model, const std::string& text, bool add_special_tokens, const char* param) {
  if (!model.tokenizer) bad_request("this model has no tokenizer: give the prompt as token ids", param);
  std::vector<int> ids = model.tokenizer->encode(text, add_special_tokens);
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::vector<std::vector<int32_t>> completion_prompts(const Json& body, const ServedModel& model, bool add_special_tokens) {
  const RequestLimits& lim = model.limits;
  const Json* p = find(body, "prompt");
  if (!p) bad_request("'prompt' is required", "prompt");
  const char* kWant = "a string, a list of strings, a list of token ids or a list of lists of token ids";
  std::vector<std::vector<int32_t>> prompts;
  if (p->is_string()) {
    prompts.push_back(encode(model, p->get<std::string>(), add_special_tokens, "prompt"));
    return prompts;
  }
  if (!p->is_array()) wrong_type("prompt", kWant, *p);
  if (p->empty()) bad_request("'prompt' is an empty list", "prompt");
  if ((*p)[0].is_number()) {
    prompts.push_back(token_list(*p, "prompt", model, lim.max_total_tokens));
    return prompts;
  }
  // A batch: bounded before any of it is tokenized.
  if (int64_t(p->size()) > lim.max_prompts_per_request)
    bad_request(str_cat("'prompt' has ", p->size(), " prompts, more than the limit of ", lim.max_prompts_per_request,
                        " per request"), "prompt");
  const bool strings = (*p)[0].is_string();
  if (!strings && !(*p)[0].is_array()) wrong_type("prompt", kWant, *p);
  for (const auto& s : *p) {
    if (strings) {
      if (!s.is_string()) bad_request(str_cat("'prompt' is a list of strings but holds ", json_type_name(s)), "prompt");
      prompts.push_back(encode(model, s.get<std::string>(), add_special_tokens, "prompt"));
    } else {
      if (!s.is_array()) bad_request(str_cat("'prompt' is a list of token id lists but holds ", json_type_name(s)), "prompt");
      prompts.push_back(token_list(s, "prompt", model, lim.max_total_tokens));
    }
  }
  return prompts;
}

struct ChatOptions {
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};

std::vector<int32_t> chat_prompt(const Json& body, const ServedModel& model, bool add_special_tokens,
                                 const std::atomic<bool>* cancel) {
  const Json* msgs = find(body, "messages");
  if (!msgs) bad_request("'messages' is required", "messages");
  if (!msgs->is_array()) wrong_type("messages", "a list of messages", *msgs);
  if (msgs->empty()) bad_request("'messages' is an empty list", "messages");
  if (int64_t(msgs->size()) > model.limits.max_messages)
    bad_request(str_cat("'messages' has ", msgs->size(), " messages, more than the limit of ", model.limits.max_messages),
                "messages");
  for (const auto& m : *msgs) {
    if (!m.is_object()) bad_request(str_cat("each message must be an object, got ", json_type_name(m)), "messages");
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad_request("each message must have a 'role' (a string)", "messages");
  }
  if (!model.chat_template)
    bad_request("this model has no chat template (tokenizer_config.json has none): start the server with "
                "--chat-template FILE", "messages");
  Json kwargs = Json::object();
  if (const Json* k = find(body, "chat_template_kwargs")) {
    if (!k->is_object()) wrong_type("chat_template_kwargs", "an object", *k);
    kwargs = *k;
  }
  if (const Json* d = find(body, "documents")) {
    if (!d->is_array()) wrong_type("documents", "a list of objects", *d);
    for (const auto& doc : *d)
      if (!doc.is_object()) bad_request(str_cat("each of 'documents' must be an object, got ", json_type_name(doc)), "documents");
    kwargs["documents"] = *d;
  }
  ChatOptions o;
  std::optional<bool> agp = get_bool(body, "add_generation_prompt");
  o.continue_final_message = get_bool(body, "continue_final_message").value_or(false);
  if (o.continue_final_message && agp.value_or(false))
    bad_request("'continue_final_message' and 'add_generation_prompt' cannot both be true", "continue_final_message");
  o.add_generation_prompt = o.continue_final_message ? false : agp.value_or(true);
  std::string final_content;
  if (o.continue_final_message) {
    auto c = msgs->back().find("content");
    if (c == msgs->back().end() || !c->is_string())
      bad_request("'continue_final_message' needs the final message's 'content' to be a string", "continue_final_message");
    final_content = c->get<std::string>();
  }
  std::string bos = model.tokenizer ? model.tokenizer->bos_token() : "";
  std::string eos = model.tokenizer ? model.tokenizer->eos_token() : "";
  std::string text;
  try {
    RenderLimits limits = model.render_limits;
    limits.cancel = cancel;
    text = model.chat_template->render(*msgs, Json(), o.add_generation_prompt, kwargs, bos, eos, limits);
  } catch (const Error& e) {
    bad_request(str_cat("chat template: ", clip(e.what())), "messages");
  }
  if (o.continue_final_message) {
    // As vLLM: the rendering up to the end of the final message's text, so the model continues it.
    const size_t at = final_content.empty() ? std::string::npos : text.rfind(final_content);
    if (at == std::string::npos)
      bad_request("'continue_final_message': the chat template's rendering does not contain the final message",
                  "continue_final_message");
    text.resize(at + final_content.size());
  }
  std::vector<int32_t> ids = encode(model, text, add_special_tokens, "messages");
  if (ids.empty()) bad_request("the chat prompt is empty (no tokens)", "messages");
  return ids;
}

std::vector<std::string> stop_list(const Json& body, const RequestLimits& lim) {
  const Json* v = find(body, "stop");
  if (!v) return {};
  if (!v->is_string() && !v->is_array()) wrong_type("stop", "a string or a list of strings", *v);
  const Json list = v->is_string() ? Json::array({*v}) : *v;
  if (int64_t(list.size()) > lim.max_stop_strings)
    bad_request(str_cat("'stop' has ", list.size(), " strings, more than the limit of ", lim.max_stop_strings), "stop");
  std::vector<std::string> out;
  for (const auto& s : list) {
    if (!s.is_string()) bad_request(str_cat("'stop' must hold strings, got ", json_type_name(s)), "stop");
    const std::string& str = s.get_ref<const std::string&>();
    if (int64_t(str.size()) > lim.max_stop_string_bytes)
      bad_request(str_cat("a 'stop' string has ", str.size(), " bytes, more than the limit of ", lim.max_stop_string_bytes),
                  "stop");
    if (!str.empty()) out.push_back(str);
  }
  return out;
}

// The fields of the table: refuses a non-off value of a kOffOnly field, warns about unknown fields.
void check_fields(const Json& body, bool chat, int64_t n) {
  std::vector<std::string> unknown;
  for (auto it = body.begin(); it != body.end(); ++it) {
    const RequestField* f = find_request_field(it.key(), chat);
    if (!f) {
      if (unknown.size() < 16) unknown.push_back(printable(it.key()));
      continue;
    }
    if (f->support != FieldSupport::kOffOnly) continue;
    const bool off = std::string_view(f->name) == "best_of"
                         ? it->is_null() || (it->is_number() && as_int(*it, "best_of") == n)
                         : request_field_is_off(*f, *it);
    if (!off) bad_request(str_cat("'", f->name, "' is not supported by pagoda yet"), f->name);
  }
  if (!unknown.empty())
    PAGODA_LOG_WARNING("The following fields were present in the request but ignored: ", join(unknown, ", "));
  // Informational fields still have a type.
  if (chat) {
    get_bool(body, "parallel_tool_calls");
    get_bool(body, "include_reasoning");
    if (const Json* m = find(body, "metadata"); m && !m->is_object()) wrong_type("metadata", "an object", *m);
  }
  get_string(body, "user");
}

}  // namespace

CompletionJob parse_completion_request(const std::string& text, bool chat, const ServedModel& model,
                                       const std::atomic<bool>* cancel) {
  const RequestLimits& lim = model.limits;
  const Json body = parse_body(text);
  CompletionJob job;
  job.chat = chat;
  job.created = int64_t(std::time(nullptr));
  job.model = check_model(body, model);
  if (std::optional<std::string> rid = get_string(body, "request_id")) {
    if (rid->empty() || rid->size() > 128) bad_request("'request_id' must have 1 to 128 bytes", "request_id");
    job.id = (chat ? "chatcmpl-" : "cmpl-") + *rid;
  } else {
    job.id = (chat ? "chatcmpl-" : "cmpl-") + random_hex(32);
  }
  job.n = int(int_in(body, "n", 1, lim.max_n, 1));
  check_fields(body, chat, job.n);

  job.stream = get_bool(body, "stream").value_or(false);
  if (const Json* so = find(body, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    if (!job.stream) bad_request("'stream_options' needs 'stream': true", "stream_options");
    job.include_usage = get_bool(*so, "include_usage").value_or(false);
    if (get_bool(*so, "continuous_usage_stats").value_or(false))
      bad_request("'stream_options.continuous_usage_stats' is not supported by pagoda yet", "stream_options");
  }
  job.return_tokens_as_token_ids = get_bool(body, "return_tokens_as_token_ids").value_or(false);

  RequestParams p;
  SamplingParams& s = p.sampling;
  s.temperature = float_field(body, "temperature", 1.0, [](double x) { return x >= 0; }, ">= 0");
  s.top_p = float_field(body, "top_p", 1.0, [](double x) { return x > 0 && x <= 1; }, "in (0, 1]");
  s.min_p = float_field(body, "min_p", 0.0, [](double x) { return x >= 0 && x <= 1; }, "in [0, 1]");
  s.presence_penalty = float_field(body, "presence_penalty", 0.0, [](double x) { return x >= -2 && x <= 2; }, "in [-2, 2]");
  s.frequency_penalty = float_field(body, "frequency_penalty", 0.0, [](double x) { return x >= -2 && x <= 2; }, "in [-2, 2]");
  s.repetition_penalty = float_field(body, "repetition_penalty", 1.0, [](double x) { return x > 0; }, "> 0");
  // -1 and 0 disable top-k; a k beyond the vocabulary keeps every token. Beyond int32 it is refused, not
  // clamped: no vocabulary is that large, so such a value is a client's mistake worth telling.
  const int64_t top_k = get_int(body, "top_k").value_or(0);
  if (top_k < -1 || top_k > std::numeric_limits<int32_t>::max())
    bad_request(str_cat("'top_k' must be -1 or 0 (disabled) or in [1, 2147483647], got ", top_k), "top_k");
  s.top_k = int(top_k);
  p.stop = stop_list(body, lim);
  if (const Json* v = find(body, "stop_token_ids")) p.stop_token_ids = token_list(*v, "stop_token_ids", model, lim.max_stop_token_ids);
  p.ignore_eos = get_bool(body, "ignore_eos").value_or(false);
  p.skip_special_tokens = get_bool(body, "skip_special_tokens").value_or(true);

  if (chat) {
    const bool want = get_bool(body, "logprobs").value_or(false);
    std::optional<int64_t> top = get_int(body, "top_logprobs");
    if (top && !want) bad_request("'top_logprobs' needs 'logprobs': true", "top_logprobs");
    if (top && (*top < 0 || *top > lim.max_logprobs))
      bad_request(str_cat("'top_logprobs' must be in [0, ", lim.max_logprobs, "], got ", *top), "top_logprobs");
    if (want) job.logprobs = int(top.value_or(0));
  } else if (std::optional<int64_t> lp = get_int(body, "logprobs")) {
    if (*lp < 0 || *lp > lim.max_logprobs)
      bad_request(str_cat("'logprobs' must be in [0, ", lim.max_logprobs, "], got ", *lp), "logprobs");
    job.logprobs = int(*lp);
  }
  s.num_logprobs = std::max(job.logprobs, 0);
  s.logprobs = job.logprobs >= 0;
  try {
    Sampler check(s);
  } catch (const Error& e) {
    bad_request(e.what());
  }

  std::optional<int64_t> max_tokens = get_int(body, "max_tokens");
  if (chat)
    if (std::optional<int64_t> m = get_int(body, "max_completion_tokens")) max_tokens = m;
  const char* max_param = chat && find(body, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  if (max_tokens && *max_tokens < 1) bad_request(str_cat("'", max_param, "' must be >= 1, got ", *max_tokens), max_param);
  if (!chat && !max_tokens) max_tokens = 16;

  const bool add_special_tokens = get_bool(body, "add_special_tokens").value_or(!chat);
  std::vector<std::vector<int32_t>> prompts;
  if (chat) prompts.push_back(chat_prompt(body, model, add_special_tokens, cancel));
  else prompts = completion_prompts(body, model, add_special_tokens);

  if (std::optional<int64_t> t = get_int(body, "truncate_prompt_tokens")) {
    // -1: the model's context length (vLLM); otherwise keep the last t tokens.
    if (*t == -1) *t = model.max_model_len;
    if (*t < 1 || *t > model.max_model_len)
      bad_request(str_cat("'truncate_prompt_tokens' must be -1 or in [1, ", model.max_model_len, "], got ", *t),
                  "truncate_prompt_tokens");
    for (auto& ids : prompts)
      if (int64_t(ids.size()) > *t) ids.erase(ids.begin(), ids.end() - *t);
  }

  const char* prompt_param = chat ? "messages" : "prompt";
  const int64_t engine_requests = int64_t(prompts.size()) * job.n;
  if (engine_requests > lim.max_engine_requests)
    bad_request(str_cat("this request asks for ", engine_requests, " generations (", prompts.size(), " prompts x n = ",
                        job.n, "), more than the limit of ", lim.max_engine_requests, " per request"), "n");
  int64_t total_tokens = 0;
  for (const auto& ids : prompts) {
    const int64_t len = int64_t(ids.size());
    if (len == 0) bad_request("the prompt is empty (no tokens)", prompt_param);
    if (len >= model.max_model_len)
      bad_request(str_cat("This model's maximum context length is ", model.max_model_len, " tokens. However, your ",
                          prompt_param, " has ", len, " tokens. Please reduce the length of the ", prompt_param, "."),
                  prompt_param);
    // As vLLM; compared as max_tokens > max_model_len - len, since len + max_tokens may overflow.
    if (max_tokens && *max_tokens > model.max_model_len - len)
      bad_request(str_cat("'", max_param, "' is too large: ", *max_tokens, ". This model's maximum context length is ",
                          model.max_model_len, " tokens and your request has ", len, " input tokens (", *max_tokens,
                          " > ", model.max_model_len, " - ", len, ")."),
                  max_param);
    // Without max_tokens a generation may run to the context length. Each term <= max_model_len: no overflow.
    total_tokens += int64_t(job.n) * (len + max_tokens.value_or(model.max_model_len - len));
  }
  if (total_tokens > lim.max_total_tokens)
    bad_request(str_cat("this request asks for ", total_tokens, " tokens in all (prompt and completion tokens of its ",
                        engine_requests, " generations), more than the limit of ", lim.max_total_tokens,
                        ": lower 'max_tokens', 'n' or the number of prompts"), max_param);

  const uint64_t base_seed = [&] {
    std::optional<int64_t> seed = get_int(body, "seed");
    return seed ? uint64_t(*seed) : uint64_t(std::random_device{}()) << 32 | std::random_device{}();
  }();
  job.params.reserve(size_t(engine_requests));
  job.prompts.reserve(size_t(engine_requests));
  for (const auto& ids : prompts) {
    for (int k = 0; k < job.n; ++k) {
      RequestParams q = p;
      q.max_tokens = int(max_tokens.value_or(model.max_model_len - int64_t(ids.size())));
      q.sampling.seed = base_seed + uint64_t(k);
      job.params.push_back(std::move(q));
      job.prompts.push_back(ids);
    }
  }
  return job;
}

std::string tokenize_body(const std::string& request, const ServedModel& model, const std::atomic<bool>* cancel) {
  const Json body = parse_body(request);
  check_model(body, model);
  std::vector<int32_t> ids;
  if (find(body, "messages")) {
    ids = chat_prompt(body, model, get_bool(body, "add_special_tokens").value_or(false), cancel);
  } else {
    std::optional<std::string> p = get_string(body, "prompt");
    if (!p) bad_request("'prompt' (a string) or 'messages' is required", "prompt");
    ids = encode(model, *p, get_bool(body, "add_special_tokens").value_or(true), "prompt");
  }
  Json strs;
  if (get_bool(body, "return_token_strs").value_or(false) && model.tokenizer) {
    strs = Json::array();
    for (int32_t id : ids) strs.push_back(model.tokenizer->id_to_token(id));
  }
  return Json{{"count", ids.size()}, {"max_model_len", model.max_model_len}, {"tokens", ids}, {"token_strs", strs}}.dump(
      -1, ' ', false, Json::error_handler_t::replace);
}

std::string detokenize_body(const std::string& request, const ServedModel& model) {
  const Json body = parse_body(request);
  check_model(body, model);
  const Json* t = find(body, "tokens");
  if (!t) bad_request("'tokens' (a list of token ids) is required", "tokens");
  if (!model.tokenizer) bad_request("this model has no tokenizer", "tokens");
  std::vector<int32_t> ids = token_list(*t, "tokens", model, model.limits.max_total_tokens);
  return Json{{"prompt", model.tokenizer->decode(std::vector<int>(ids.begin(), ids.end()), false)}}.dump(
      -1, ' ', false, Json::error_handler_t::replace);
}

}  // namespace pagoda
