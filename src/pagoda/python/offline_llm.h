// The engine behind pagoda's Python `LLM` class, in plain C++ (no Python headers), so that the bindings
// (module.cc) stay a thin translation layer and the rest of the tree changes under them in one place.
//
// Nothing here is a second implementation: engine options go through `pagoda generate`'s own parser,
// config-file expansion and checks (so every error text is the CLI's), the engine starts through
// setup_engine() as every command does, and requests run on the serving Engine. The one thing it adds is an
// offline batch that runs step by step and calls back between steps, so that the caller can report
// progress and cancel (Ctrl-C in Python) without leaving requests behind in the engine.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "pagoda/config/engine_args.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

class Engine;
struct EngineSetup;

// An engine option as LLM(...) accepts it: `name` without the leading dashes ("max-model-len").
struct EngineOptionInfo {
  std::string name;
  bool takes_value = false;  // false: a flag (--enforce-eager)
  bool has_no_form = false;  // --no-NAME exists (--no-enable-prefix-caching)
};
// The engine options of `pagoda generate`, in declaration order.
std::vector<EngineOptionInfo> offline_engine_options();

// Engine options parsed and validated as `pagoda generate` does it; throws pagoda::Error (config) with the
// CLI's texts. `argv` holds options only ("--model", "DIR", "--dtype=float32", "--config", "f.yaml", ...).
struct OfflineEngineArgs {
  EngineArgs args;
  ValidatedArgs validated;
};
OfflineEngineArgs parse_offline_engine_args(const std::vector<std::string>& argv);

// One request of an offline batch: the prompt's token ids and the SamplingParams fields the engine runs.
struct OfflineRequest {
  std::vector<int32_t> prompt_ids;
  float temperature = 1.0f;
  int top_k = 0;  // 0 or -1: all
  float top_p = 1.0f;
  float min_p = 0.0f;
  float repetition_penalty = 1.0f;
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  uint64_t seed = 0;
  std::optional<int> logprobs;  // vLLM's: none, or the top-k alternatives besides the sampled token (0: only it)
  int max_tokens = 16;
  std::vector<std::string> stop;
  std::vector<int32_t> stop_token_ids;
  bool ignore_eos = false;
  bool skip_special_tokens = true;
  bool detokenize = true;
};

// Throws pagoda::Error (config) for sampling values the engine refuses, with the CLI's texts.
void check_offline_request(const OfflineRequest& request);

struct OfflineTokenLogprob {
  int32_t token = -1;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely first
};

struct OfflineResult {
  std::vector<int32_t> token_ids;
  std::string text;
  std::optional<std::vector<OfflineTokenLogprob>> logprobs;  // one per generated token when asked for
  std::string finish_reason;                 // "stop", "length" or "abort"
  std::optional<std::string> stop_string;    // vLLM's stop_reason: the stop string, or
  std::optional<int32_t> stop_token_id;      //   one of the request's stop_token_ids (EOS is neither)
  int64_t num_cached_tokens = 0;             // prompt tokens served by the prefix cache
  double queue_s = 0, ttft_s = 0, e2e_s = 0;  // from the request's arrival
};

// What a batch has done so far, for progress bars: requests finished and their prompt and output tokens.
struct OfflineProgress {
  size_t finished = 0;
  size_t total = 0;
  int64_t prompt_tokens = 0;
  int64_t output_tokens = 0;
  double elapsed_s = 0;
};

// Renders a conversation for LLM.chat() and Tokenizer.apply_chat_template() as the server's chat endpoint
// does: `messages_json` a JSON list of messages, `tools_json` a list or "null", `kwargs_json` an object or
// "null"; with `chat_template` when not empty, else the tokenizer's own template (a config error when it
// has none). Throws pagoda::Error.
std::string render_chat(const Tokenizer& tokenizer, const std::string& chat_template, const std::string& messages_json,
                        const std::string& tools_json, bool add_generation_prompt, const std::string& kwargs_json);

class OfflineLlm {
 public:
  // Starts the engine as `pagoda generate` does (device, model, per-layer backend selection with its log
  // lines, weights, KV cache, tokenizer). Throws pagoda::Error.
  explicit OfflineLlm(const OfflineEngineArgs& args);
  ~OfflineLlm();
  OfflineLlm(const OfflineLlm&) = delete;
  OfflineLlm& operator=(const OfflineLlm&) = delete;

  // Called before the first step and after every step, on the calling thread; returning false cancels.
  using Poll = std::function<bool(const OfflineProgress&)>;
  // Runs `requests` to completion and returns their results in order, or nullopt when `poll` cancelled: then
  // every request of the batch has been aborted and the engine is idle again. A request the engine refuses
  // (empty prompt, too long, ids outside the vocabulary, bad sampling values) throws pagoda::Error (config)
  // "request I: ..." before anything runs. One batch at a time: a second caller waits.
  std::optional<std::vector<OfflineResult>> generate(const std::vector<OfflineRequest>& requests, const Poll& poll);

  const std::optional<Tokenizer>& tokenizer() const;
  const std::string& model() const;          // as given
  int max_model_len() const;
  std::string device() const;                // "cpu", or the GPU's description
  std::string dtype() const;                 // the model's compute dtype
  std::string kv_cache_dtype() const;
  int block_size() const;
  std::vector<std::string> attention_backends() const;  // per layer

 private:
  std::unique_ptr<EngineSetup> setup_;
  std::unique_ptr<Engine> engine_;  // declared after setup_: destroyed first, it uses setup_'s runner
  std::mutex mu_;                   // one batch at a time
};

}  // namespace pagoda
