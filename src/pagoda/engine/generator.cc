#include "pagoda/engine/generator.h"

#include <algorithm>
#include <chrono>

#include "pagoda/core/error.h"
#include "pagoda/kv_cache/block_allocator.h"

namespace pagoda {
namespace {

struct SeqState {
  size_t index = 0;
  const GenerationRequest* req = nullptr;
  std::vector<int32_t> tokens;  // prompt + generated
  int64_t computed = 0;         // tokens whose K/V are in the cache
  SequenceBlocks blocks;
  Sampler sampler;
  std::optional<IncrementalDetokenizer> detok;
  GenerationOutput out;
  bool done = false;
  explicit SeqState(const SamplingParams& p) : sampler(p) {}
};

}  // namespace

Generator::Generator(ModelRunner& runner, std::optional<Tokenizer> tokenizer, GeneratorOptions options)
    : runner_(runner), tokenizer_(std::move(tokenizer)), options_(options) {}

std::vector<GenerationOutput> Generator::generate(const std::vector<GenerationRequest>& requests,
                                                  const TokenCallback& on_token, GenerationStats* stats) {
  using Clock = std::chrono::steady_clock;
  const auto t_start = Clock::now();
  const ModelConfig& cfg = runner_.config();
  const int block_size = runner_.cache_options().block_size;
  const int64_t max_len = options_.max_model_len > 0 ? options_.max_model_len : cfg.max_position_embeddings;
  BlockAllocator alloc(int32_t(runner_.cache_options().num_blocks));
  GenerationStats st;

  std::vector<std::unique_ptr<SeqState>> seqs;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto& r = requests[i];
    if (r.prompt_ids.empty()) throw_runtime_error("request ", i, ": the prompt is empty (give a prompt or --prompt-token-ids)");
    int64_t need = int64_t(r.prompt_ids.size()) + r.max_tokens;
    if (int64_t(r.prompt_ids.size()) >= max_len)
      throw_runtime_error("request ", i, ": the prompt has ", r.prompt_ids.size(), " tokens, more than the model's maximum context of ",
                          max_len, " minus one generated token (see --max-model-len)");
    need = std::min(need, max_len);
    int64_t blocks_needed = (need + block_size - 1) / block_size;
    if (blocks_needed > alloc.num_blocks())
      throw_runtime_error("request ", i, " needs ", blocks_needed, " KV cache blocks (", need, " tokens) but the cache has only ",
                          alloc.num_blocks(), " blocks; raise --kv-cache-space or lower --max-tokens");
    for (int32_t id : r.prompt_ids)
      if (id < 0 || id >= cfg.vocab_size)
        throw_runtime_error("request ", i, ": prompt token id ", id, " is outside the vocabulary [0, ", cfg.vocab_size, ")");
    auto s = std::make_unique<SeqState>(r.sampling);
    s->index = i;
    s->req = &r;
    s->tokens = r.prompt_ids;
    if (tokenizer_) s->detok.emplace(*tokenizer_, true, std::span<const int>(r.prompt_ids.data(), r.prompt_ids.size()));
    st.prompt_tokens += int64_t(r.prompt_ids.size());
    if (r.max_tokens <= 0) s->done = true;
    seqs.push_back(std::move(s));
  }

  auto finish = [&](SeqState& s, FinishReason why) {
    s.done = true;
    s.out.finish_reason = why;
    if (s.detok) {
      std::string rest = s.detok->finish();
      if (!rest.empty() && on_token) on_token(s.index, -1, rest);
      s.out.text += rest;
    }
    s.blocks.release(alloc);
  };

  while (true) {
    // Schedule: decodes first (one token each), then prefill chunks within the token budget.
    std::vector<SeqState*> step;
    std::vector<int64_t> take;
    int64_t budget = options_.max_num_batched_tokens;
    for (int pass = 0; pass < 2; ++pass) {
      for (auto& sp : seqs) {
        SeqState& s = *sp;
        if (s.done) continue;
        int64_t pending = int64_t(s.tokens.size()) - s.computed;
        bool decoding = s.computed >= int64_t(s.req->prompt_ids.size());
        if ((pass == 0) != decoding) continue;
        int64_t n = std::min(pending, budget);
        if (n <= 0) continue;
        // Blocks for the tokens of this step; the allocator was sized for every request up front only in the
        // single-request case, so a full cache is an error here rather than a preemption (the scheduler of the
        // serving engine preempts).
        if (alloc.num_free() * int64_t(block_size) + int64_t(s.blocks.blocks().size()) * block_size < s.computed + n)
          throw_runtime_error("the KV cache is full (", alloc.num_blocks(), " blocks of ", block_size,
                              " tokens); raise --kv-cache-space or lower --max-tokens or the batch");
        s.blocks.reserve(alloc, s.computed + n, block_size);
        step.push_back(&s);
        take.push_back(n);
        budget -= n;
      }
    }
    if (step.empty()) break;

    ForwardBatch b;
    int max_blocks = 0;
    for (SeqState* s : step) max_blocks = std::max(max_blocks, int(s->blocks.blocks().size()));
    b.max_blocks_per_seq = max_blocks;
    b.query_start_loc.push_back(0);
    std::vector<SeqState*> sampled;
    bool has_prefill = false;
    for (size_t i = 0; i < step.size(); ++i) {
      SeqState& s = *step[i];
      int64_t n = take[i];
      for (int64_t t = 0; t < n; ++t) b.token_ids.push_back(s.tokens[size_t(s.computed + t)]);
      b.query_start_loc.push_back(int32_t(b.token_ids.size()));
      b.seq_lens.push_back(int32_t(s.computed + n));
      std::vector<int32_t> row = s.blocks.blocks();
      row.resize(size_t(max_blocks), 0);
      b.block_tables.insert(b.block_tables.end(), row.begin(), row.end());
      has_prefill = has_prefill || s.computed < int64_t(s.req->prompt_ids.size());
      s.computed += n;
      if (s.computed == int64_t(s.tokens.size())) {  // all known tokens computed: sample the next one
        b.logits_indices.push_back(int32_t(b.token_ids.size()) - 1);
        sampled.push_back(&s);
      }
    }
    // Plain greedy rows need only the argmax: let the runner compute it where the logits are.
    bool all_greedy = !sampled.empty();
    for (SeqState* s : sampled) {
      const SamplingParams& sp = s->req->sampling;
      all_greedy = all_greedy && sp.temperature == 0.0f && sp.repetition_penalty == 1.0f && sp.presence_penalty == 0.0f &&
                   sp.frequency_penalty == 0.0f && sp.num_logprobs == 0;
    }
    const auto t0 = Clock::now();
    std::optional<std::vector<int32_t>> greedy;
    std::vector<float> logits;
    if (all_greedy) greedy = runner_.forward_greedy(b);
    if (!greedy) logits = runner_.forward(b);
    const double dt = std::chrono::duration<double>(Clock::now() - t0).count();
    (has_prefill ? st.prefill_seconds : st.decode_seconds) += dt;
    ++st.steps;

    const size_t V = size_t(cfg.vocab_size);
    for (size_t k = 0; k < sampled.size(); ++k) {
      SeqState& s = *sampled[k];
      SampleResult r;
      if (greedy) {
        r.token = (*greedy)[k];
      } else {
        std::span<const float> row(logits.data() + k * V, V);
        std::span<const int32_t> prompt(s.req->prompt_ids.data(), s.req->prompt_ids.size());
        std::span<const int32_t> output(s.out.token_ids.data(), s.out.token_ids.size());
        r = s.sampler.sample(row, prompt, output);
      }
      s.tokens.push_back(r.token);
      s.out.token_ids.push_back(r.token);
      s.out.samples.push_back(r);
      ++st.generated_tokens;
      std::string delta;
      if (s.detok) delta = s.detok->add(r.token);
      bool is_eos = !s.req->ignore_eos && std::find(cfg.eos_token_ids.begin(), cfg.eos_token_ids.end(), r.token) != cfg.eos_token_ids.end();
      bool is_stop_token = std::find(s.req->stop_token_ids.begin(), s.req->stop_token_ids.end(), r.token) != s.req->stop_token_ids.end();
      // Stop strings: cut the text at the first match (the match itself is not output).
      bool stop_string = false;
      if (!s.req->stop.empty() && !delta.empty()) {
        std::string text = s.out.text + delta;
        size_t cut = std::string::npos;
        for (const auto& stop : s.req->stop) {
          if (stop.empty()) continue;
          size_t from = s.out.text.size() >= stop.size() ? s.out.text.size() - stop.size() + 1 : 0;
          size_t pos = text.find(stop, from);
          if (pos != std::string::npos) cut = std::min(cut, pos);
        }
        if (cut != std::string::npos) {
          delta = text.substr(s.out.text.size(), cut > s.out.text.size() ? cut - s.out.text.size() : 0);
          if (cut < s.out.text.size()) s.out.text.resize(cut);
          stop_string = true;
        }
      }
      s.out.text += delta;
      if (on_token) on_token(s.index, r.token, delta);
      if (stop_string) {
        s.detok.reset();  // text after the stop string is dropped
        finish(s, FinishReason::kStop);
      } else if (is_eos || is_stop_token) {
        finish(s, FinishReason::kStop);
      } else if (int(s.out.token_ids.size()) >= s.req->max_tokens || int64_t(s.tokens.size()) >= max_len) {
        finish(s, FinishReason::kLength);
      }
    }
  }
  std::vector<GenerationOutput> outs;
  for (auto& s : seqs) {
    if (!s->done) s->blocks.release(alloc);
    outs.push_back(std::move(s->out));
  }
  st.total_seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  if (stats) *stats = st;
  return outs;
}

}  // namespace pagoda
