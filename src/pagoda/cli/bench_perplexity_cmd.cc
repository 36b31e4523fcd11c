// `pagoda bench perplexity`: what a KV cache dtype costs in quality on real text, measured as llama.cpp's
// perplexity tool measures a model. The tokenized text (BOS added as the tokenizer says) is cut into chunks of
// --ctx-size tokens; each chunk runs as one prefill from an empty cache with logits at every position, its
// first token replaced by BOS when the tokenizer adds one, and its second half is scored: position j predicts
// token j + 1 with at least ctx/2 tokens of context. PPL = exp(mean NLL), with llama.cpp's standard error.
//
// Every dtype other than `auto` runs beside an `auto` cache on the same chunks, in this process and over one
// copy of the weights (one model runner each): mean and max KL(P_auto || P_dtype) of the next-token
// distributions over the scored positions, computed in double from the full logits, and the fraction of those
// positions whose top tokens agree. --greedy-prompts N adds N prompts cut from the text (evenly spaced
// windows) continued greedily with each dtype: how many tokens each keeps equal to `auto`'s before diverging.
#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "pagoda/attention/backend.h"
#include "pagoda/cli/command_line.h"
#include "pagoda/cli/commands.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"
#include "pagoda/engine/engine.h"
#include "pagoda/engine/model_setup.h"
#include "pagoda/ops/thread_pool.h"

namespace pagoda {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::ordered_json;

struct PerplexityOptions {
  std::string file;
  int ctx = 512;
  int chunks = -1;  // all
  int greedy_prompts = 0;
  int greedy_prompt_len = 64;
  int greedy_tokens = 64;
  std::string json_out;
};

// One KV cache dtype: its runner and what was measured with it. contenders[0] is always `auto`, the base.
struct Contender {
  std::string dtype;  // as given
  ValidatedArgs validated;
  EngineSetup setup;
  // llama.cpp's sums over the scored positions: NLL, its square, NLL x base NLL, KL and its square.
  double nll = 0, nll2 = 0, nll_x_base = 0, kl = 0, kl2 = 0;
  int64_t count = 0, same_top = 0;
  std::vector<float> kl_values;   // per scored position
  std::vector<double> chunk_ppl;  // running PPL after each chunk
  double forward_s = 0;
  int64_t forward_tokens = 0;
  std::vector<std::vector<int32_t>> greedy;  // per prompt
};

// Mean and standard error of a per-position quantity from its sum and sum of squares (llama.cpp's
// mean_and_uncertainty: no error from 10 values or fewer).
std::pair<double, double> mean_and_error(double sum, double sum2, int64_t n) {
  if (n < 1) return {0.0, 0.0};
  const double f = sum / double(n);
  const double var = sum2 / double(n) - f * f;
  return {f, var > 0 && n > 10 ? std::sqrt(var / double(n - 1)) : 0.0};
}

// The log-normaliser (log-sum-exp, in double) and the argmax (lowest id on ties) of one logits row.
struct RowStats {
  double lse = 0;
  int argmax = 0;
};
RowStats row_stats(const float* x, int n) {
  RowStats r;
  float m = x[0];
  for (int i = 1; i < n; ++i)
    if (x[i] > m) m = x[i], r.argmax = i;
  double s = 0;
  for (int i = 0; i < n; ++i) s += std::exp(double(x[i]) - double(m));
  r.lse = double(m) + std::log(s);
  return r;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_config_error("--file ", path, ": cannot read it (", std::strerror(errno), ")");
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw_config_error("--file ", path, ": cannot read it");
  std::string text = ss.str();
  if (trim(text).empty()) throw_config_error("--file ", path, " is empty: give a text to score");
  return text;
}

class ProgressBar {
 public:
  explicit ProgressBar(int64_t total) : total_(std::max<int64_t>(1, total)), start_(Clock::now()) {}
  // Redraws at most 5 times a second (stderr may be a log file), and at the end.
  void advance(const std::string& what) {
    ++done_;
    const Clock::time_point now = Clock::now();
    if (done_ < total_ && now - drawn_ < std::chrono::milliseconds(200)) return;
    drawn_ = now;
    const int width = 30, filled = int(width * done_ / total_);
    const double s = std::chrono::duration<double>(now - start_).count();
    const double eta = done_ > 0 ? s * double(total_ - done_) / double(done_) : 0.0;
    std::fprintf(stderr, "\r[%s%s] %lld/%lld %-24s %5.0f s, ~%.0f s left ", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), '.').c_str(), (long long)done_, (long long)total_,
                 what.c_str(), s, eta);
    if (done_ == total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  int64_t total_, done_ = 0;
  Clock::time_point start_, drawn_;
};

// What a dtype's cache stores, for the report: the element type ("bfloat16" for `auto` over a bf16 model) or
// "packed" (turboquant_* slots), and how many layers keep an `auto` cache (TurboQuant's boundary layers,
// spec §3.7, and --kv-cache-dtype-skip-layers).
std::string stored_as(const Contender& c) {
  const DType d = kv_cache_element_dtype(c.setup.kv_cache_dtype, c.setup.model_dtype);
  int kept = 0;
  for (const std::string& l : c.setup.layer_kv_cache_dtypes) kept += l != c.setup.kv_cache_dtype;
  const std::string s = d == DType::kU8 ? "packed" : std::string(dtype_name(d));
  return kept == 0 ? s : s + "; " + std::to_string(kept) + " at " + std::string(dtype_name(c.setup.model_dtype));
}

}  // namespace

int run_bench_perplexity(const std::vector<std::string>& raw) {
  apply_early_log_level(raw);
  EngineArgs args;
  PerplexityOptions o;
  ArgParser parser(
      "pagoda bench perplexity",
      "Perplexity of a model over a text file, as llama.cpp's perplexity tool computes it (chunks of --ctx-size "
      "tokens, the second half of each scored), for one or more KV cache dtypes: --kv-cache-dtype takes a "
      "comma-separated list (auto,fp8,turboquant_k3v4_nc,...). Every dtype other than auto is compared with an "
      "auto cache on the same chunks, over the same weights: mean and max KL divergence of the next-token "
      "distributions, top-1 agreement, and with --greedy-prompts the greedy tokens each prompt keeps before "
      "diverging. The table goes to stdout, the progress to stderr. Example text: "
      "/usr/share/common-licenses/GPL-3.");
  register_engine_options(parser, args, EngineOptionSet::kEngine);
  parser.add({"--file", {"-f"}, "FILE", "The text to score (read as UTF-8 bytes).", "perplexity",
              [&](const std::string& v) { o.file = v; }, {}, {}});
  parser.add({"--ctx-size", {"-c"}, "N", "Tokens per chunk; the second half of each is scored.", "perplexity",
              [&](const std::string& v) { o.ctx = parse_int_arg("--ctx-size", v, kMaxModelLen, "pagoda's context length limit"); },
              [&] { return std::to_string(o.ctx); }, {}});
  parser.add({"--chunks", {}, "K", "Score only the first K chunks (-1 = all the text holds).", "perplexity",
              [&](const std::string& v) { o.chunks = parse_int_arg("--chunks", v); }, [&] { return std::to_string(o.chunks); }, {}});
  parser.add({"--greedy-prompts", {}, "N", "Also continue N prompts from the text greedily with each dtype and "
              "count the tokens until the first divergence from auto (0 = off).", "perplexity",
              [&](const std::string& v) { o.greedy_prompts = parse_int_arg("--greedy-prompts", v, kMaxNumSeqs, "pagoda's limit on sequences per step"); },
              [&] { return std::to_string(o.greedy_prompts); }, {}});
  parser.add({"--greedy-prompt-tokens", {}, "N", "Length of each greedy prompt: windows of N tokens evenly spaced "
              "over the text (after BOS, when the tokenizer adds one).", "perplexity",
              [&](const std::string& v) { o.greedy_prompt_len = parse_int_arg("--greedy-prompt-tokens", v, kMaxModelLen, "pagoda's context length limit"); },
              [&] { return std::to_string(o.greedy_prompt_len); }, {}});
  parser.add({"--greedy-tokens", {}, "N", "Tokens generated per greedy prompt (EOS ignored).", "perplexity",
              [&](const std::string& v) { o.greedy_tokens = parse_int_arg("--greedy-tokens", v, kMaxModelLen, "pagoda's context length limit"); },
              [&] { return std::to_string(o.greedy_tokens); }, {}});
  parser.add({"--output-json", {}, "FILE", "Also write the results to FILE as JSON.", "perplexity",
              [&](const std::string& v) { o.json_out = v; }, {}, {}});
  if (!parse_command_line(parser, raw, false)) return 0;
  if (o.file.empty()) throw_config_error("pagoda bench perplexity needs --file TEXT (for example /usr/share/common-licenses/GPL-3)");
  if (o.ctx < 4) throw_config_error("--ctx-size must be at least 4 (half of it is context, the rest is scored), got ", o.ctx);
  if (o.chunks == 0 || o.chunks < -1) throw_config_error("--chunks must be -1 (all) or >= 1, got ", o.chunks);
  if (o.greedy_prompts < 0 || o.greedy_prompt_len < 1 || o.greedy_tokens < 1)
    throw_config_error("--greedy-prompts must be >= 0, --greedy-prompt-tokens and --greedy-tokens >= 1");
  const std::string text = read_text_file(o.file);

  // The dtypes, `auto` first (the base of the comparison), each validated as the engine validates it.
  std::vector<std::string> dtypes = {"auto"};
  for (const std::string& part : split(args.cache.kv_cache_dtype, ',')) {
    const std::string d(trim(part));
    if (d.empty()) throw_config_error("--kv-cache-dtype: empty entry in '", args.cache.kv_cache_dtype, "'");
    if (std::find(dtypes.begin(), dtypes.end(), d) == dtypes.end()) dtypes.push_back(d);
  }
  // One sequence of --ctx-size tokens, or the greedy prompts side by side: size the caches for that (the
  // smallest block size pagoda selects is 16) rather than for the engine's defaults, and let one prefill
  // step take a whole chunk.
  const int64_t greedy_len = o.greedy_prompt_len + o.greedy_tokens + 8;  // + BOS and the tokenizer's prefix
  const int bs = args.cache.block_size.value_or(16);
  const int64_t need_blocks = std::max<int64_t>((o.ctx + bs - 1) / bs, o.greedy_prompts * ((greedy_len + bs - 1) / bs)) + 1;
  if (!args.cache.num_gpu_blocks_override) {
    if (need_blocks > INT32_MAX) throw_config_error("--ctx-size / --greedy-prompts need more KV blocks than pagoda allows");
    args.cache.num_gpu_blocks_override = int(need_blocks);
  }
  if (!args.scheduler.max_num_batched_tokens) args.scheduler.max_num_batched_tokens = std::max(8192, o.ctx);
  args.scheduler.max_num_seqs = std::max(args.scheduler.max_num_seqs, o.greedy_prompts);
  // The arguments of one dtype's engine: --kv-cache-dtype-skip-layers applies to the quantized ones only.
  auto args_of = [&](const std::string& dtype) {
    EngineArgs a = args;
    a.cache.kv_cache_dtype = dtype;
    if (dtype == "auto") a.cache.kv_cache_dtype_skip_layers.clear();
    return a;
  };
  std::vector<Contender> cs(dtypes.size());
  for (size_t i = 0; i < dtypes.size(); ++i) {
    cs[i].dtype = dtypes[i];
    cs[i].validated = validate_engine_command(args_of(dtypes[i]));
  }
  for (size_t i = 0; i < cs.size(); ++i)
    cs[i].setup = setup_engine(args_of(cs[i].dtype), cs[i].validated, i == 0 ? nullptr : &cs[0].setup.model);
  EngineSetup& base = cs[0].setup;
  if (!base.tokenizer) throw_config_error("model ", base.model_name, " has no tokenizer: give one with --tokenizer");
  if (o.ctx > base.max_model_len)
    throw_config_error("--ctx-size ", o.ctx, " is longer than the model's context (--max-model-len ", base.max_model_len, ")");
  for (const Contender& c : cs)
    if (c.setup.runner->cache_options().num_blocks * int64_t(c.setup.runner->cache_options().block_size) < o.ctx)
      throw_config_error("the KV cache of ", c.dtype, " holds fewer than --ctx-size ", o.ctx, " tokens; raise --num-gpu-blocks-override");

  const std::vector<int> ids = base.tokenizer->encode(text, true);
  const std::vector<int> prefix = base.tokenizer->special_prefix_ids();
  const int64_t n_tokens = int64_t(ids.size());
  if (n_tokens < 2 * int64_t(o.ctx))
    throw_config_error("--file ", o.file, " tokenizes to ", n_tokens, " tokens; perplexity with --ctx-size ", o.ctx,
                       " needs at least 2 x ", o.ctx, " = ", 2 * int64_t(o.ctx), " (give a longer text or a smaller --ctx-size)");
  const int n_chunks = int(o.chunks < 0 ? n_tokens / o.ctx : std::min<int64_t>(o.chunks, n_tokens / o.ctx));
  const int vocab = base.runner->config().vocab_size;
  const int first = o.ctx / 2, rows = o.ctx - 1 - first;
  if (prefix.size() >= size_t(first)) throw_config_error("--ctx-size ", o.ctx, " is too small for the tokenizer's prefix");

  ThreadPool pool(args.device.cpu_threads);
  ProgressBar progress(int64_t(n_chunks) * int64_t(cs.size()) + (o.greedy_prompts > 0 ? int64_t(cs.size()) : 0));
  const size_t nrows = size_t(rows);
  std::vector<RowStats> stats(nrows);
  std::vector<double> row_nll(nrows), base_nll(nrows), row_kl(nrows), base_lse(nrows);
  std::vector<int> base_top(nrows);
  std::vector<float> base_logits;
  for (int chunk = 0; chunk < n_chunks; ++chunk) {
    const int64_t start = int64_t(chunk) * o.ctx;
    ForwardBatch b;
    b.token_ids.assign(ids.begin() + start, ids.begin() + start + o.ctx);
    std::copy(prefix.begin(), prefix.end(), b.token_ids.begin());  // llama.cpp: each chunk starts with BOS
    b.query_start_loc = {0, o.ctx};
    b.seq_lens = {o.ctx};
    for (int j = first; j < o.ctx - 1; ++j) b.logits_indices.push_back(j);
    for (size_t ci = 0; ci < cs.size(); ++ci) {
      Contender& c = cs[ci];
      const int cbs = c.setup.runner->cache_options().block_size;
      b.max_blocks_per_seq = (o.ctx + cbs - 1) / cbs;
      b.block_tables.resize(size_t(b.max_blocks_per_seq));
      for (int k = 0; k < b.max_blocks_per_seq; ++k) b.block_tables[size_t(k)] = k;
      const Clock::time_point t0 = Clock::now();
      std::vector<float> logits = c.setup.runner->forward(b);
      c.forward_s += std::chrono::duration<double>(Clock::now() - t0).count();
      c.forward_tokens += o.ctx;
      PAGODA_CHECK(logits.size() == size_t(rows) * size_t(vocab), "forward returned ", logits.size(), " logits");
      // Per scored row: NLL of the next token, top token, and KL(P_base || P_c) = sum_i p_i (log p_i - log q_i).
      pool.parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const float* x = logits.data() + r * vocab;
          const RowStats s = row_stats(x, vocab);
          stats[size_t(r)] = s;
          row_nll[size_t(r)] = s.lse - double(x[ids[size_t(start + first + r + 1)]]);
          if (ci == 0) continue;
          const float* a = base_logits.data() + r * vocab;
          double kl = 0;
          for (int i = 0; i < vocab; ++i) {
            const double la = double(a[i]) - base_lse[size_t(r)], lb = double(x[i]) - s.lse;
            kl += std::exp(la) * (la - lb);
          }
          row_kl[size_t(r)] = kl;
        }
      });
      for (int r = 0; r < rows; ++r) {
        const double v = row_nll[size_t(r)];
        c.nll += v;
        c.nll2 += v * v;
        if (ci == 0) {
          base_nll[size_t(r)] = v;
          base_lse[size_t(r)] = stats[size_t(r)].lse;
          base_top[size_t(r)] = stats[size_t(r)].argmax;
          continue;
        }
        c.nll_x_base += v * base_nll[size_t(r)];
        c.kl += row_kl[size_t(r)];
        c.kl2 += row_kl[size_t(r)] * row_kl[size_t(r)];
        c.kl_values.push_back(float(row_kl[size_t(r)]));
        c.same_top += stats[size_t(r)].argmax == base_top[size_t(r)];
      }
      c.count += rows;
      c.chunk_ppl.push_back(std::exp(c.nll / double(c.count)));
      if (ci == 0) base_logits = std::move(logits);
      progress.advance("chunk " + std::to_string(chunk + 1) + " " + c.dtype);
    }
  }

  // Greedy continuations of windows of the text, the same prompts through each dtype's engine.
  if (o.greedy_prompts > 0) {
    const int64_t n_text = n_tokens - int64_t(prefix.size());
    if (n_text < o.greedy_prompt_len)
      throw_config_error("--greedy-prompt-tokens ", o.greedy_prompt_len, " is longer than the text (", n_text, " tokens)");
    std::vector<GenerateRequest> reqs(size_t(o.greedy_prompts));
    for (int p = 0; p < o.greedy_prompts; ++p) {
      const int64_t at = int64_t(prefix.size()) + (o.greedy_prompts > 1 ? p * (n_text - o.greedy_prompt_len) / (o.greedy_prompts - 1) : 0);
      GenerateRequest& r = reqs[size_t(p)];
      r.prompt_ids.assign(prefix.begin(), prefix.end());
      r.prompt_ids.insert(r.prompt_ids.end(), ids.begin() + at, ids.begin() + at + o.greedy_prompt_len);
      r.params.sampling.temperature = 0.0f;
      r.params.max_tokens = o.greedy_tokens;
      r.params.ignore_eos = true;
      r.params.detokenize = false;
    }
    for (Contender& c : cs) {
      EngineOptions eo = engine_options_from_args(args, c.setup.max_model_len);
      eo.enable_prefix_caching = false;
      Engine engine(*c.setup.runner, std::nullopt, eo);
      for (const GenerateResult& r : engine.generate(reqs)) c.greedy.push_back(r.token_ids);
      progress.advance("greedy " + c.dtype);
    }
  }

  // Report.
  const int64_t scored = cs[0].count;
  std::printf("model %s  text %s (%lld tokens)  %d chunks of %d tokens, %lld scored  device %s\n", base.model_name.c_str(),
              o.file.c_str(), (long long)n_tokens, n_chunks, o.ctx, (long long)scored, describe(base.device).c_str());
  std::printf("%-20s %-22s %-22s %-22s %-24s %-10s %-18s %s\n", "kv_cache_dtype", "stored as", "PPL",
              "ln(PPL/PPL_auto)", "mean KL(auto||dtype)", "max KL", "top-1 = auto", "prefill tokens/s");
  Json results = Json::array();
  const auto [base_mean, base_err] = mean_and_error(cs[0].nll, cs[0].nll2, scored);
  for (Contender& c : cs) {
    // PPL's standard error as llama.cpp's perplexity(): sqrt(var(NLL) / (n - 1)) x PPL.
    const double mean = c.nll / double(c.count);
    const double var = c.nll2 / double(c.count) - mean * mean;
    const double ppl = std::exp(mean), ppl_err = var > 0 ? std::sqrt(var / double(c.count - 1)) * ppl : 0.0;
    const double tps = c.forward_s > 0 ? double(c.forward_tokens) / c.forward_s : 0.0;
    Json j = {{"kv_cache_dtype", c.dtype}, {"stored_as", stored_as(c)}, {"ppl", ppl}, {"ppl_stderr", ppl_err},
              {"nll_mean", mean}, {"chunk_ppl", c.chunk_ppl}, {"prefill_tokens_per_s", tps}};
    char ppl_s[64], ratio_s[64] = "", kl_s[64] = "", max_s[32] = "", top_s[32] = "";
    std::snprintf(ppl_s, sizeof ppl_s, "%.4f ± %.4f", ppl, ppl_err);
    if (&c != &cs[0]) {
      // ln(PPL/PPL_auto) with the covariance of the two NLLs over the same positions (llama.cpp's KL report).
      const auto [m, e] = mean_and_error(c.nll, c.nll2, c.count);
      const double cov = c.count >= 10 ? (c.nll_x_base / double(c.count) - m * base_mean) / double(c.count - 1) : 0.0;
      const double ratio_err = std::sqrt(std::max(0.0, e * e + base_err * base_err - 2 * cov));
      const auto [kl, kl_err] = mean_and_error(c.kl, c.kl2, c.count);
      std::vector<float> sorted = c.kl_values;
      std::sort(sorted.begin(), sorted.end());
      const double kl_max = sorted.empty() ? 0.0 : double(sorted.back());
      const double kl_median = sorted.empty() ? 0.0 : double(sorted[sorted.size() / 2]);
      const double kl_p99 = sorted.empty() ? 0.0 : double(sorted[std::min(sorted.size() - 1, size_t(0.99 * double(sorted.size())))]);
      const double top = double(c.same_top) / double(c.count);
      const double top_err = c.count > 1 ? std::sqrt(top * (1 - top) / double(c.count - 1)) : 0.0;
      j["ln_ppl_ratio"] = m - base_mean;
      j["ln_ppl_ratio_stderr"] = ratio_err;
      j["kl_mean"] = kl;
      j["kl_stderr"] = kl_err;
      j["kl_median"] = kl_median;
      j["kl_p99"] = kl_p99;
      j["kl_max"] = kl_max;
      j["top1_agreement"] = top;
      j["top1_agreement_stderr"] = top_err;
      std::snprintf(ratio_s, sizeof ratio_s, "%+.5f ± %.5f", m - base_mean, ratio_err);
      std::snprintf(kl_s, sizeof kl_s, "%.6f ± %.6f", kl, kl_err);
      std::snprintf(max_s, sizeof max_s, "%.4f", kl_max);
      std::snprintf(top_s, sizeof top_s, "%.2f ± %.2f %%", 100 * top, 100 * top_err);
    }
    std::printf("%-20s %-22s %-22s %-22s %-24s %-10s %-18s %.1f\n", c.dtype.c_str(), stored_as(c).c_str(), ppl_s, ratio_s,
                kl_s, max_s, top_s, tps);
    results.push_back(j);
  }
  Json greedy_json;
  if (o.greedy_prompts > 0) {
    std::printf("\ngreedy: %d prompts of %d tokens from the text, %d tokens each; tokens equal to auto's before the "
                "first difference (%d = none)\n", o.greedy_prompts, o.greedy_prompt_len, o.greedy_tokens, o.greedy_tokens);
    greedy_json = {{"prompts", o.greedy_prompts}, {"prompt_tokens", o.greedy_prompt_len}, {"tokens", o.greedy_tokens}};
    for (size_t ci = 1; ci < cs.size(); ++ci) {
      std::vector<int> div;
      int identical = 0;
      for (size_t p = 0; p < cs[ci].greedy.size(); ++p) {
        const auto& x = cs[0].greedy[p];
        const auto& y = cs[ci].greedy[p];
        size_t k = 0;
        while (k < x.size() && k < y.size() && x[k] == y[k]) ++k;
        div.push_back(int(k));
        identical += k == x.size() && k == y.size();
      }
      double mean = 0;
      for (int d : div) mean += d;
      mean /= double(std::max<size_t>(1, div.size()));
      std::printf("%-20s mean %6.1f  identical %d/%d  per prompt:", cs[ci].dtype.c_str(), mean, identical, o.greedy_prompts);
      for (int d : div) std::printf(" %d", d);
      std::printf("\n");
      results[ci]["greedy_first_divergence"] = div;
      results[ci]["greedy_mean_first_divergence"] = mean;
      results[ci]["greedy_identical"] = identical;
    }
  }
  if (!o.json_out.empty()) {
    Json j = {{"model", base.model_name}, {"file", o.file}, {"num_tokens", n_tokens}, {"ctx_size", o.ctx},
              {"chunks", n_chunks}, {"scored_tokens", scored}, {"bos_per_chunk", !prefix.empty()},
              {"device", describe(base.device)}, {"results", results}};
    if (o.greedy_prompts > 0) j["greedy"] = greedy_json;
    write_text_file(o.json_out, j.dump(2));
  }
  return 0;
}

}  // namespace pagoda
