#include "pagoda/python/offline_llm.h"

#include <chrono>

#include <nlohmann/json.hpp>
#include <unordered_map>

#include "pagoda/cli/command_line.h"
#include "pagoda/core/error.h"
#include "pagoda/engine/engine.h"
#include "pagoda/engine/model_setup.h"
#include "pagoda/ops/sample.h"
#include "pagoda/tokenizer/chat_template.h"

namespace pagoda {
namespace {

SamplingParams sampling_of(const OfflineRequest& r) {
  SamplingParams s;
  s.temperature = r.temperature;
  s.top_k = r.top_k;
  s.top_p = r.top_p;
  s.min_p = r.min_p;
  s.repetition_penalty = r.repetition_penalty;
  s.presence_penalty = r.presence_penalty;
  s.frequency_penalty = r.frequency_penalty;
  s.seed = r.seed;
  s.logprobs = r.logprobs.has_value();
  s.num_logprobs = r.logprobs.value_or(0);
  return s;
}

RequestParams params_of(const OfflineRequest& r) {
  RequestParams p;
  p.sampling = sampling_of(r);
  p.max_tokens = r.max_tokens;
  p.stop = r.stop;
  p.stop_token_ids = r.stop_token_ids;
  p.ignore_eos = r.ignore_eos;
  p.skip_special_tokens = r.skip_special_tokens;
  p.detokenize = r.detokenize;
  return p;
}

// The parser `pagoda generate` builds for the engine options.
struct EngineParser {
  EngineArgs args;
  ArgParser parser{"LLM", "pagoda's offline engine"};
  EngineParser() { register_engine_options(parser, args, EngineOptionSet::kEngine); }
};

}  // namespace

std::vector<EngineOptionInfo> offline_engine_options() {
  EngineParser p;
  std::vector<EngineOptionInfo> out;
  for (const OptionDecl& o : p.parser.options()) {
    EngineOptionInfo info;
    info.name = o.name.substr(2);
    info.takes_value = !o.metavar.empty();
    info.has_no_form = bool(o.set_no);
    out.push_back(std::move(info));
  }
  return out;
}

OfflineEngineArgs parse_offline_engine_args(const std::vector<std::string>& argv) {
  EngineParser p;
  if (!parse_command_line(p.parser, argv, false)) throw_config_error("-h/--help is not an engine option");
  OfflineEngineArgs out;
  out.validated = validate_engine_args(p.args);
  out.args = p.args;
  return out;
}

void check_offline_request(const OfflineRequest& request) {
  Sampler check(sampling_of(request));  // the engine's own checks and texts (logprobs included)
}

std::string render_chat(const Tokenizer& tokenizer, const std::string& chat_template, const std::string& messages_json,
                        const std::string& tools_json, bool add_generation_prompt, const std::string& kwargs_json) {
  using Json = nlohmann::ordered_json;
  auto parse = [](const std::string& text, const char* what) {
    check_json_depth(text, what);
    try {
      return Json::parse(text);
    } catch (const std::exception& e) {
      throw_config_error(what, " is not valid JSON: ", text_preview(e.what(), 200));
    }
  };
  const Json messages = parse(messages_json, "messages");
  const Json tools = parse(tools_json, "tools");
  const Json kwargs = parse(kwargs_json, "chat_template_kwargs");
  if (!chat_template.empty())
    return render_chat_template(chat_template, messages, tools, add_generation_prompt, kwargs, tokenizer.bos_token(),
                                tokenizer.eos_token());
  return apply_chat_template(tokenizer, messages, tools, add_generation_prompt, kwargs);
}

OfflineLlm::OfflineLlm(const OfflineEngineArgs& a) : setup_(std::make_unique<EngineSetup>(setup_engine(a.args, a.validated))) {
  engine_ = std::make_unique<Engine>(*setup_->runner, setup_->tokenizer,
                                     engine_options_from_args(a.args, setup_->max_model_len));
}

OfflineLlm::~OfflineLlm() = default;

std::optional<std::vector<OfflineResult>> OfflineLlm::generate(const std::vector<OfflineRequest>& requests,
                                                               const Poll& poll) {
  std::lock_guard<std::mutex> lock(mu_);
  const auto start = std::chrono::steady_clock::now();
  std::vector<OfflineResult> results(requests.size());
  std::unordered_map<RequestId, size_t> index;
  // Aborts every request of the batch and steps until the engine has let them go (their blocks freed).
  auto abort_batch = [&] {
    for (const auto& entry : index) engine_->abort(entry.first);
    while (engine_->has_unfinished()) engine_->step();
  };
  try {
    for (size_t i = 0; i < requests.size(); ++i) {
      RequestId id = 0;
      try {
        id = engine_->add_request(requests[i].prompt_ids, params_of(requests[i]));
      } catch (const Error& e) {
        throw_config_error("request ", i, ": ", e.what());
      }
      index.emplace(id, i);
    }
    OfflineProgress progress;
    progress.total = requests.size();
    if (poll && !poll(progress)) {
      abort_batch();
      return std::nullopt;
    }
    while (progress.finished < progress.total) {
      PAGODA_CHECK(engine_->has_unfinished(), "offline batch: ", progress.total - progress.finished,
                   " requests unfinished but the engine has no work");
      for (const RequestOutput& o : engine_->step()) {
        auto it = index.find(o.id);
        if (it == index.end()) continue;
        const OfflineRequest& req = requests[it->second];
        OfflineResult& r = results[it->second];
        r.token_ids.insert(r.token_ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
        r.text += o.text_delta;
        if (req.logprobs) {
          if (!r.logprobs) r.logprobs.emplace();
          for (const SampleResult& s : o.logprobs) {
            OfflineTokenLogprob t;
            t.token = s.token;
            t.logprob = s.logprob;
            for (const TokenLogprob& top : s.top) t.top.emplace_back(top.id, top.logprob);
            r.logprobs->push_back(std::move(t));
          }
        }
        r.num_cached_tokens = o.num_cached_tokens;
        if (!o.finished) continue;
        r.finish_reason = finish_reason_str(*o.finish_reason);
        r.stop_string = o.stop_string;
        if (o.stop_token_id) {
          for (int32_t t : req.stop_token_ids)
            if (t == *o.stop_token_id) r.stop_token_id = t;
        }
        if (o.metrics) {
          r.queue_s = o.metrics->queue_s;
          r.ttft_s = o.metrics->ttft_s;
          r.e2e_s = o.metrics->e2e_s;
        }
        ++progress.finished;
        progress.prompt_tokens += int64_t(req.prompt_ids.size());
        progress.output_tokens += int64_t(r.token_ids.size());
      }
      progress.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      if (poll && !poll(progress)) {
        abort_batch();
        return std::nullopt;
      }
    }
  } catch (...) {
    try {
      abort_batch();
    } catch (...) {  // the first failure is the one to report
    }
    throw;
  }
  return results;
}

const std::optional<Tokenizer>& OfflineLlm::tokenizer() const { return engine_->tokenizer(); }
const std::string& OfflineLlm::model() const { return setup_->model_name; }
int OfflineLlm::max_model_len() const { return engine_->max_model_len(); }
std::string OfflineLlm::device() const { return describe(setup_->device); }
std::string OfflineLlm::dtype() const { return std::string(dtype_name(setup_->model_dtype)); }
std::string OfflineLlm::kv_cache_dtype() const { return setup_->kv_cache_dtype; }
int OfflineLlm::block_size() const { return setup_->attention.block_size; }

std::vector<std::string> OfflineLlm::attention_backends() const {
  std::vector<std::string> out;
  for (BackendName b : setup_->layer_backends) out.emplace_back(backend_name_str(b));
  return out;
}

}  // namespace pagoda
