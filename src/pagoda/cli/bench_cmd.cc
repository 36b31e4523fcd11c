// `pagoda bench latency`: one batch of fixed-length random prompts generated to a fixed length, repeated;
// reports latency, tokens/s and, on the GPU, the memory bandwidth a decode step achieves against the
// device copy bandwidth measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>

#include <nlohmann/json.hpp>

#include "pagoda/cli/command_line.h"
#include "pagoda/cli/commands.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/engine/engine.h"
#include "pagoda/engine/generator.h"
#include "pagoda/engine/model_setup.h"

namespace pagoda {
namespace {

// The benchmarks make their random prompts up front (4 bytes a token).
constexpr int kMaxBenchPrompts = 1 << 20;
constexpr int64_t kMaxBenchPromptTokens = int64_t(1) << 28;

// Bytes of weights a decode step reads: every matrix and norm once (from the config, in the model dtype).
double weight_bytes(const ModelConfig& c, DType dt) {
  double H = c.hidden_size, D = c.head_dim, F = c.intermediate_size, V = c.vocab_size;
  double per_layer = H * (c.num_heads + 2.0 * c.num_kv_heads) * D + c.num_heads * D * H + 3.0 * H * F + 2.0 * H;
  double total = V * H * (c.tie_word_embeddings ? 1.0 : 2.0) + c.num_layers * per_layer + H;
  return total * double(dtype_size(dt));
}

}  // namespace

int run_bench_latency(const std::vector<std::string>& raw) {
  apply_early_log_level(raw);
  EngineArgs args;
  int input_len = 32, output_len = 128, batch = 8, iters = 3, warmup = 1;
  std::string json_out;
  ArgParser parser("pagoda bench latency",
                   "Latency of one batch: --batch-size random prompts of --input-len tokens, each generating exactly "
                   "--output-len tokens (greedy, EOS ignored), repeated --num-iters times after warm-up.");
  register_engine_options(parser, args, EngineOptionSet::kEngine);
  parser.add({"--input-len", {}, "N", "Prompt length in tokens.", "bench",
              [&](const std::string& v) { input_len = parse_int_arg("--input-len", v, kMaxModelLen, "pagoda's context length limit"); }, [&] { return std::to_string(input_len); }, {}});
  parser.add({"--output-len", {}, "N", "Generated tokens per request.", "bench",
              [&](const std::string& v) { output_len = parse_int_arg("--output-len", v, kMaxModelLen, "pagoda's context length limit"); }, [&] { return std::to_string(output_len); }, {}});
  parser.add({"--batch-size", {}, "N", "Requests in the batch.", "bench",
              [&](const std::string& v) { batch = parse_int_arg("--batch-size", v, kMaxNumSeqs, "pagoda's limit on sequences per step"); }, [&] { return std::to_string(batch); }, {}});
  parser.add({"--num-iters", {}, "N", "Timed repetitions.", "bench",
              [&](const std::string& v) { iters = parse_int_arg("--num-iters", v); }, [&] { return std::to_string(iters); }, {}});
  parser.add({"--num-iters-warmup", {}, "N", "Untimed repetitions first.", "bench",
              [&](const std::string& v) { warmup = parse_int_arg("--num-iters-warmup", v); }, [&] { return std::to_string(warmup); }, {}});
  parser.add({"--output-json", {}, "FILE", "Also write the results to FILE as JSON.", "bench",
              [&](const std::string& v) { json_out = v; }, {}, {}});
  if (!parse_command_line(parser, raw, false)) return 0;
  ValidatedArgs v = validate_engine_command(args);
  if (input_len < 1 || output_len < 1 || batch < 1 || iters < 1 || warmup < 0)
    throw_config_error("--input-len, --output-len, --batch-size and --num-iters must be >= 1");
  // 64-bit: both factors are user-given; the step budget has its own bound.
  const int64_t batch_tokens = int64_t(input_len) * batch;
  if (batch_tokens > kMaxNumBatchedTokens)
    throw_config_error("--input-len x --batch-size is ", batch_tokens, " tokens, more than pagoda's ", kMaxNumBatchedTokens,
                       " per step");
  if (!args.scheduler.max_num_batched_tokens) args.scheduler.max_num_batched_tokens = std::max(8192, int(batch_tokens));
  args.scheduler.max_num_seqs = std::max(args.scheduler.max_num_seqs, batch);
  EngineSetup e = setup_engine(args, v);
  const ModelConfig& cfg = e.runner->config();

  std::mt19937 rng(uint32_t(args.model.seed));
  std::uniform_int_distribution<int> tok(0, cfg.vocab_size - 1);
  std::vector<GenerationRequest> reqs(static_cast<size_t>(batch));
  for (auto& r : reqs) {
    for (int i = 0; i < input_len; ++i) r.prompt_ids.push_back(tok(rng));
    r.sampling.temperature = 0.0f;
    r.max_tokens = output_len;
    r.ignore_eos = true;
  }
  GeneratorOptions go = engine_options_from_args(args, e.max_model_len);
  go.enable_prefix_caching = false;  // repeated iterations reuse the prompts: no cache hits in the timing
  Generator gen(*e.runner, std::nullopt, go);
  std::vector<GenerationStats> runs;
  for (int i = 0; i < warmup + iters; ++i) {
    GenerationStats st;
    gen.generate(reqs, nullptr, &st);
    if (i >= warmup) runs.push_back(st);
    std::fprintf(stderr, "\r%s %d/%d", i < warmup ? "warm-up" : "timed  ", i < warmup ? i + 1 : i - warmup + 1,
                 i < warmup ? warmup : iters);
  }
  std::fprintf(stderr, "\n");
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.total_seconds < b.total_seconds; });
  const GenerationStats& med = runs[runs.size() / 2];
  const double latency = med.total_seconds;
  const double out_tps = double(batch) * output_len / latency;
  const double tpot = med.decode_seconds / std::max(1, output_len - 1);  // seconds per decode step
  const double wbytes = weight_bytes(cfg, e.model_dtype);
  const double kv_token_bytes = 2.0 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * double(dtype_size(e.runner->cache_options().dtype));
  const double avg_ctx = input_len + output_len / 2.0;
  const double step_bytes = wbytes + batch * avg_ctx * kv_token_bytes;
  const double achieved = step_bytes / tpot / 1e12;
  const double copy = e.device.kind == DeviceKind::kCuda ? measure_cuda_copy_bandwidth() : 0.0;
  std::printf("model %s  batch %d  input %d  output %d  device %s\n", e.model_name.c_str(), batch, input_len, output_len,
              describe(e.device).c_str());
  std::printf("latency (median of %d): %.3f s   output tokens/s: %.1f   prefill: %.3f s\n", iters, latency, out_tps,
              med.prefill_seconds);
  std::printf("decode step: %.3f ms (%.1f tokens/s)   bytes/step %.2f GB   achieved %.2f TB/s", tpot * 1e3,
              batch / tpot, step_bytes / 1e9, achieved);
  if (copy > 0) std::printf(" = %.0f%% of the device copy bandwidth (%.2f TB/s, measured now)", 100 * achieved / copy, copy);
  std::printf("\n");
  if (!json_out.empty()) {
    nlohmann::ordered_json j = {{"model", e.model_name}, {"batch_size", batch}, {"input_len", input_len},
                                {"output_len", output_len}, {"latency_s", latency}, {"output_tokens_per_s", out_tps},
                                {"decode_step_ms", tpot * 1e3}, {"achieved_tbs", achieved}, {"copy_tbs", copy}};
    write_text_file(json_out, j.dump());
  }
  return 0;
}

}  // namespace pagoda

namespace pagoda {

// `pagoda bench throughput`: many requests offline, as fast as the engine takes them (vLLM's
// benchmark_throughput): fixed or random input/output lengths, random token prompts, EOS ignored.
int run_bench_throughput(const std::vector<std::string>& raw) {
  apply_early_log_level(raw);
  EngineArgs args;
  int num_prompts = 100, input_len = 128, output_len = 128;
  double range_ratio = 0.0;
  std::string json_out;
  ArgParser parser("pagoda bench throughput",
                   "Offline throughput: --num-prompts requests of --input-len prompt tokens (random ids) each "
                   "generating --output-len tokens (EOS ignored), all submitted at once; with --random-range-ratio "
                   "R > 0 each length is drawn uniformly from [len * (1 - R), len * (1 + R)].");
  register_engine_options(parser, args, EngineOptionSet::kEngine);
  parser.add({"--num-prompts", {}, "N", "Number of requests.", "bench",
              [&](const std::string& v) { num_prompts = parse_int_arg("--num-prompts", v, kMaxBenchPrompts, "the benchmark's limit"); }, [&] { return std::to_string(num_prompts); }, {}});
  parser.add({"--input-len", {}, "N", "Prompt length in tokens.", "bench",
              [&](const std::string& v) { input_len = parse_int_arg("--input-len", v, kMaxModelLen, "pagoda's context length limit"); }, [&] { return std::to_string(input_len); }, {}});
  parser.add({"--output-len", {}, "N", "Generated tokens per request.", "bench",
              [&](const std::string& v) { output_len = parse_int_arg("--output-len", v, kMaxModelLen, "pagoda's context length limit"); }, [&] { return std::to_string(output_len); }, {}});
  parser.add({"--random-range-ratio", {}, "R", "Spread of random lengths (0 = fixed).", "bench",
              [&](const std::string& v) { range_ratio = parse_float_arg("--random-range-ratio", v); }, {}, {}});
  parser.add({"--output-json", {}, "FILE", "Also write the results to FILE as JSON.", "bench",
              [&](const std::string& v) { json_out = v; }, {}, {}});
  if (!parse_command_line(parser, raw, false)) return 0;
  ValidatedArgs v = validate_engine_command(args);
  if (num_prompts < 1 || input_len < 1 || output_len < 1 || !(range_ratio >= 0) || range_ratio >= 1)
    throw_config_error("--num-prompts, --input-len and --output-len must be >= 1 and --random-range-ratio in [0, 1)");
  // The prompts are made up front: bound their total (64-bit; both factors are user-given).
  if (int64_t(num_prompts) * input_len > kMaxBenchPromptTokens)
    throw_config_error("--num-prompts x --input-len is ", int64_t(num_prompts) * input_len, " prompt tokens, more than the ",
                       kMaxBenchPromptTokens, " the benchmark makes up front");
  EngineSetup e = setup_engine(args, v);
  const ModelConfig& cfg = e.runner->config();
  std::mt19937 rng(uint32_t(args.model.seed));
  std::uniform_int_distribution<int> tok(0, cfg.vocab_size - 1);
  auto draw = [&](int len) {
    if (range_ratio == 0) return len;
    std::uniform_int_distribution<int> d(std::max(1, int(len * (1 - range_ratio))), std::max(1, int(len * (1 + range_ratio))));
    return d(rng);
  };
  std::vector<GenerateRequest> reqs(static_cast<size_t>(num_prompts));
  int64_t prompt_tokens = 0, want_out = 0;
  for (auto& r : reqs) {
    int in = draw(input_len), out = draw(output_len);
    for (int i = 0; i < in; ++i) r.prompt_ids.push_back(tok(rng));
    r.params.sampling.temperature = 0.0f;
    r.params.max_tokens = out;
    r.params.ignore_eos = true;
    r.params.detokenize = false;
    prompt_tokens += in;
    want_out += out;
  }
  Engine engine(*e.runner, e.tokenizer, engine_options_from_args(args, e.max_model_len));
  size_t done = 0;
  const auto t0 = std::chrono::steady_clock::now();
  auto results = engine.generate(reqs, [&](size_t, const RequestOutput& o) {
    if (o.finished && (++done % std::max<size_t>(1, reqs.size() / 20) == 0 || done == reqs.size()))
      std::fprintf(stderr, "\rrequests %zu/%zu", done, reqs.size());
  });
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::fprintf(stderr, "\n");
  int64_t out_tokens = 0;
  for (const auto& r : results) out_tokens += int64_t(r.token_ids.size());
  EngineMetrics m = engine.metrics();
  std::printf("model %s  requests %d  input %d  output %d  device %s\n", e.model_name.c_str(), num_prompts, input_len,
              output_len, describe(e.device).c_str());
  std::printf("Throughput: %.2f requests/s, %.1f total tokens/s, %.1f output tokens/s (%.2f s; %lld prompt + %lld "
              "output tokens; %lld preemptions)\n",
              num_prompts / secs, double(prompt_tokens + out_tokens) / secs, double(out_tokens) / secs, secs,
              (long long)prompt_tokens, (long long)out_tokens, (long long)m.num_preemptions);
  if (out_tokens != want_out) throw_runtime_error("generated ", out_tokens, " tokens, expected ", want_out);
  if (!json_out.empty()) {
    nlohmann::ordered_json j = {{"model", e.model_name}, {"num_prompts", num_prompts}, {"input_len", input_len},
                                {"output_len", output_len}, {"seconds", secs}, {"requests_per_s", num_prompts / secs},
                                {"output_tokens_per_s", double(out_tokens) / secs},
                                {"total_tokens_per_s", double(prompt_tokens + out_tokens) / secs}};
    write_text_file(json_out, j.dump());
  }
  return 0;
}

}  // namespace pagoda
