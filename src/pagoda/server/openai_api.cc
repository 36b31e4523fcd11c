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

std::string dump(const Json& j) { return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace); }

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}

bool is_continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Whether `s` is whole UTF-8 characters (a token's piece may be part of one).
bool valid_utf8(std::string_view s) {
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > s.size()) return false;
    for (size_t k = 1; k < len; ++k)
      if (!is_continuation(static_cast<unsigned char>(s[i + k]))) return false;
    i += len;
  }
  return true;
}

// A token's string in logprobs: its text, or for a piece of a character its bytes as vLLM writes them
// ("bytes:\\xe4\\xb8"), which JSON can carry.
std::string token_string(const std::string& piece) {
  if (valid_utf8(piece)) return piece;
  static const char* kHex = "0123456789abcdef";
  std::string out = "bytes:";
  for (unsigned char c : piece) {
    out += "\\x";
    out += kHex[c >> 4];
    out += kHex[c & 15];
  }
  return out;
}

// Bytes at the end of `s` that begin a character and stop before its end.
size_t incomplete_tail(std::string_view s) {
  for (size_t k = 1; k <= std::min<size_t>(4, s.size()); ++k) {
    const unsigned char c = static_cast<unsigned char>(s[s.size() - k]);
    if (is_continuation(c)) continue;
    const size_t want = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 1;
    return k < want ? k : 0;
  }
  return 0;
}

// vLLM's floor for a logprob (-inf is not JSON).
double clamp_logprob(float lp) { return lp < -9999.0f ? -9999.0 : double(lp); }

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

CompletionResponse::CompletionResponse(const CompletionJob& job, const ServedModel& model)
    : job_(job), model_(model), choices_(job.prompts.size()) {}

std::vector<CompletionResponse::LogprobEntry> CompletionResponse::logprob_entries(int index, const RequestOutput& out) {
  Choice& c = choices_[size_t(index)];
  std::vector<LogprobEntry> entries;
  if (job_.logprobs < 0) return entries;
  const bool as_ids = job_.return_tokens_as_token_ids || !model_.tokenizer;
  if (!c.pieces && model_.tokenizer) {
    // The same left context as the engine's detokenizer, so the first token keeps its leading space.
    const std::vector<int32_t>& prompt = job_.prompts[size_t(index)];
    c.pieces.emplace(*model_.tokenizer, job_.params[size_t(index)].skip_special_tokens,
                     std::span<const int>(prompt.data(), prompt.size()));
  }
  auto alt = [&](int32_t id, std::string bytes, float lp) {
    LogprobAlt a;
    a.token = as_ids ? str_cat("token_id:", id) : token_string(bytes);
    a.bytes = std::move(bytes);
    a.logprob = clamp_logprob(lp);
    return a;
  };
  for (const SampleResult& r : out.logprobs) {
    LogprobEntry e;
    std::vector<LogprobAlt> top;
    for (const TokenLogprob& x : r.top) top.push_back(alt(x.id, c.pieces ? c.pieces->peek_piece(x.id) : "", x.logprob));
    std::string piece = c.pieces ? c.pieces->add_piece(r.token) : "";
    // A token that continues a character starts inside the character the text counts as begun.
    e.text_offset = c.chars - (incomplete_tail(c.tail) > 0 ? 1 : 0);
    for (unsigned char b : piece) c.chars += is_continuation(b) ? 0 : 1;
    c.tail += piece;
    if (c.tail.size() > 4) c.tail.erase(0, c.tail.size() - 4);
    static_cast<LogprobAlt&>(e) = alt(r.token, std::move(piece), r.logprob);
    e.top = std::move(top);
    entries.push_back(std::move(e));
  }
  return entries;
}

namespace {

using LogprobEntry = CompletionResponse::LogprobEntry;

// Completions' logprobs object of some tokens of a choice.
Json completion_logprobs(const std::vector<LogprobEntry>& lps) {
  Json text_offset = Json::array(), token_logprobs = Json::array(), tokens = Json::array(), top = Json::array();
  for (const auto& e : lps) {
    text_offset.push_back(e.text_offset);
    tokens.push_back(e.token);
    token_logprobs.push_back(e.logprob);
    Json m = Json::object();
    for (const auto& x : e.top) m[x.token] = x.logprob;
    top.push_back(std::move(m));
  }
  Json j;
  j["text_offset"] = std::move(text_offset);
  j["token_logprobs"] = std::move(token_logprobs);
  j["tokens"] = std::move(tokens);
  j["top_logprobs"] = std::move(top);
  return j;
}

Json chat_logprobs(const std::vector<LogprobEntry>& lps) {
  Json content = Json::array();
  for (const auto& e : lps) {
    Json top = Json::array();
    for (const auto& x : e.top) top.push_back({{"token", x.token}, {"logprob", x.logprob}, {"bytes", bytes_of(x.bytes)}});
    content.push_back({{"token", e.token}, {"logprob", e.logprob}, {"bytes", bytes_of(e.bytes)}, {"top_logprobs", std::move(top)}});
  }
  return Json{{"content", std::move(content)}};
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
  const std::vector<LogprobEntry> entries = logprob_entries(index, out);
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
    choice["logprobs"] = want_lp ? chat_logprobs(entries) : Json();
  } else {
    choice["text"] = out.text_delta;
    choice["logprobs"] = want_lp ? completion_logprobs(entries) : Json();
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
  std::vector<LogprobEntry> entries = logprob_entries(index, out);
  c.logprobs.insert(c.logprobs.end(), std::make_move_iterator(entries.begin()), std::make_move_iterator(entries.end()));
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
      choice["logprobs"] = want_lp ? chat_logprobs(c.logprobs) : Json();
    } else {
      choice["text"] = c.text;
      choice["logprobs"] = want_lp ? completion_logprobs(c.logprobs) : Json();
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

std::string models_body(const ServedModel& model, int64_t created) {
  Json data = Json::array();
  for (const auto& name : model.names)
    data.push_back({{"id", name}, {"object", "model"}, {"created", created}, {"owned_by", "pagoda"}, {"root", model.root},
                    {"parent", nullptr}, {"max_model_len", model.max_model_len}, {"permission", Json::array()}});
  return dump(Json{{"object", "list"}, {"data", data}});
}

}  // namespace pagoda
