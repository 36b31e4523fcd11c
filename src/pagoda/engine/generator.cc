#include "pagoda/engine/generator.h"

#include <chrono>

namespace pagoda {

Generator::Generator(ModelRunner& runner, std::optional<Tokenizer> tokenizer, GeneratorOptions options)
    : engine_(runner, std::move(tokenizer), options) {}

std::vector<GenerationOutput> Generator::generate(const std::vector<GenerationRequest>& requests,
                                                  const TokenCallback& on_token, GenerationStats* stats) {
  const auto t_start = std::chrono::steady_clock::now();
  const EngineMetrics before = engine_.metrics();
  std::vector<GenerateRequest> batch;
  for (const GenerationRequest& r : requests) {
    GenerateRequest g;
    g.prompt_ids = r.prompt_ids;
    g.params.sampling = r.sampling;
    g.params.max_tokens = r.max_tokens;
    g.params.stop = r.stop;
    g.params.stop_token_ids = r.stop_token_ids;
    g.params.ignore_eos = r.ignore_eos;
    batch.push_back(std::move(g));
  }
  auto on_output = [&](size_t i, const RequestOutput& o) {
    if (!on_token) return;
    if (o.new_token_ids.empty()) {
      if (!o.text_delta.empty()) on_token(i, -1, o.text_delta);
      return;
    }
    for (size_t k = 0; k < o.new_token_ids.size(); ++k)
      on_token(i, o.new_token_ids[k], k + 1 == o.new_token_ids.size() ? o.text_delta : std::string());
  };
  std::vector<GenerateResult> results = engine_.generate(batch, on_output);

  std::vector<GenerationOutput> outs;
  GenerationStats st;
  for (size_t i = 0; i < results.size(); ++i) {
    GenerationOutput o;
    o.token_ids = std::move(results[i].token_ids);
    o.samples = std::move(results[i].logprobs);
    o.text = std::move(results[i].text);
    o.finish_reason = results[i].finish_reason;
    st.prompt_tokens += int64_t(requests[i].prompt_ids.size());
    st.generated_tokens += int64_t(o.token_ids.size());
    outs.push_back(std::move(o));
  }
  const EngineMetrics after = engine_.metrics();
  st.prefill_seconds = after.prefill_seconds - before.prefill_seconds;
  st.decode_seconds = after.decode_seconds - before.decode_seconds;
  st.steps = after.num_steps - before.num_steps;
  st.total_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t_start).count();
  if (stats) *stats = st;
  return outs;
}

}  // namespace pagoda
