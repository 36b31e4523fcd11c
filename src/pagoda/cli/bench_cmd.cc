// `pagoda bench latency`: one batch of fixed-length random prompts generated to a fixed length, repeated;
// reports latency, tokens/s and, on the GPU, the memory bandwidth a decode step achieves against the
// device copy bandwidth measured in the same run.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>

#include <nlohmann/json.hpp>

#include "pagoda/cli/command_line.h"
#include "pagoda/cli/commands.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/engine/engine.h"
#include "pagoda/engine/model_setup.h"
#include "pagoda/platform/device.h"
#ifdef PAGODA_WITH_CUDA_MODEL
#include "pagoda/model/cuda/cuda_model_runner.h"
#endif

namespace pagoda {
namespace {

// The benchmarks make their random prompts up front (4 bytes a token).
constexpr int kMaxBenchPrompts = 1 << 20;
constexpr int64_t kMaxBenchPromptTokens = int64_t(1) << 28;

// Bytes of weights a decode step reads: every matrix and norm once (from the config, in the model dtype; the
// linear layers and the lm_head in `quant`'s block bytes when the weights are quantized).
double weight_bytes(const ModelConfig& c, DType dt, QuantType quant) {
  double H = c.hidden_size, D = c.head_dim, F = c.intermediate_size, V = c.vocab_size;
  const double e = double(dtype_size(dt));
  const double q = quant == QuantType::kNone ? e : double(quant_traits(quant).block_bytes) / quant_traits(quant).block_elems;
  double matrices = H * (c.num_heads + 2.0 * c.num_kv_heads) * D + c.num_heads * D * H + 3.0 * H * F;
  return V * H * e * (c.tie_word_embeddings ? 1.0 : 0.0) + V * H * (c.tie_word_embeddings ? 0.0 : q + e) +
         c.num_layers * (matrices * q + 2.0 * H * e) + H * e;
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
  std::vector<GenerateRequest> reqs(static_cast<size_t>(batch));
  for (auto& r : reqs) {
    for (int i = 0; i < input_len; ++i) r.prompt_ids.push_back(tok(rng));
    r.params.sampling.temperature = 0.0f;
    r.params.max_tokens = output_len;
    r.params.ignore_eos = true;
  }
  EngineOptions eo = engine_options_from_args(args, e.max_model_len);
  eo.enable_prefix_caching = false;  // repeated iterations reuse the prompts: no cache hits in the timing
  Engine engine(*e.runner, std::nullopt, eo);
  std::vector<GenerateStats> runs;
  for (int i = 0; i < warmup + iters; ++i) {
    GenerateStats st;
    engine.generate(reqs, {}, &st);
    if (i >= warmup) runs.push_back(st);
    std::fprintf(stderr, "\r%s %d/%d", i < warmup ? "warm-up" : "timed  ", i < warmup ? i + 1 : i - warmup + 1,
                 i < warmup ? warmup : iters);
  }
  std::fprintf(stderr, "\n");
  std::sort(runs.begin(), runs.end(), [](const auto& a, const auto& b) { return a.total_seconds < b.total_seconds; });
  const GenerateStats& med = runs[runs.size() / 2];
  const double latency = med.total_seconds;
  const double out_tps = double(batch) * output_len / latency;
  const double tpot = med.decode_seconds / std::max(1, output_len - 1);  // seconds per decode step
  // The loaded weights when on the host (their real dtypes and quantization), else the config's estimate.
  const double wbytes = e.model.weights ? weight_bytes_per_step(*e.model.weights) : weight_bytes(cfg, e.model_dtype, builtin_model_quant(e.model_name));
  const double kv_token_bytes = double(e.kv_bytes_per_block) / e.runner->cache_options().block_size;  // every layer's
  const double avg_ctx = input_len + output_len / 2.0;
  const double step_bytes = wbytes + batch * avg_ctx * kv_token_bytes;
  const double achieved = step_bytes / tpot / 1e12;
  const double copy = e.device.kind == DeviceKind::kCuda ? measure_cuda_copy_bandwidth() : 0.0;
  std::printf("model %s  batch %d  input %d  output %d  device %s\n", e.model_name.c_str(), batch, input_len, output_len,
              describe(e.device).c_str());
  const double prefill_tps = med.prefill_seconds > 0 ? double(batch) * input_len / med.prefill_seconds : 0.0;
  std::printf("latency (median of %d): %.3f s   output tokens/s: %.1f   prefill: %.3f s (%.1f tokens/s)\n", iters, latency,
              out_tps, med.prefill_seconds, prefill_tps);
  if (e.device.kind == DeviceKind::kCuda)
    std::printf("decode step: %.3f ms (%.1f tokens/s)   bytes/step %.2f GB   achieved %.2f TB/s", tpot * 1e3,
                batch / tpot, step_bytes / 1e9, achieved);
  else
    std::printf("decode step: %.3f ms (%.1f tokens/s)   bytes/step %.3f GB   achieved %.1f GB/s", tpot * 1e3,
                batch / tpot, step_bytes / 1e9, achieved * 1e3);
  if (copy > 0) std::printf(" = %.0f%% of the device copy bandwidth (%.2f TB/s, measured now)", 100 * achieved / copy, copy);
  std::printf("\n");
  if (!json_out.empty()) {
    nlohmann::ordered_json j = {{"model", e.model_name}, {"batch_size", batch}, {"input_len", input_len},
                                {"output_len", output_len}, {"latency_s", latency}, {"output_tokens_per_s", out_tps},
                                {"prefill_s", med.prefill_seconds}, {"prefill_tokens_per_s", prefill_tps},
                                {"weight_bytes", wbytes}, {"step_bytes", step_bytes},
                                {"decode_step_ms", tpot * 1e3}, {"achieved_tbs", achieved}, {"copy_tbs", copy}};
    write_text_file(json_out, j.dump());
  }
  return 0;
}

}  // namespace pagoda

namespace pagoda {

namespace {

#ifdef PAGODA_WITH_CUDA_MODEL
// `bench throughput --step-profile FILE`: where the run's time went, by step kind (host phases, GPU time,
// the GPU's idle time between steps) and, for eager steps, by op (GPU time and achieved TFLOP/s of the
// GEMMs); one CSV row per step in FILE.
void report_step_profile(const std::vector<EngineStepTiming>& eng, const std::vector<CudaStepProfile>& run,
                         const ModelConfig& c, double wall_s, const std::string& csv) {
  if (eng.size() != run.size()) {
    std::printf("step profile: %zu engine steps but %zu runner steps; no report\n", eng.size(), run.size());
    return;
  }
  struct Sum {
    int steps = 0;
    double tokens = 0, decodes = 0, schedule = 0, build = 0, prep = 0, plan = 0, launch = 0, wait = 0, post = 0,
           forward = 0, gpu = 0;
  };
  const char* kinds[] = {"decode (graph)", "decode (eager)", "mixed/prefill", "graph capture"};
  Sum sums[4], all;
  struct Ops {  // eager steps of one kind
    std::array<double, kNumStepOps> s{};
    double tokens = 0, rows = 0, gpu = 0;
  } ops[4];
  std::ofstream f(csv);
  f << "step,kind,tokens,seqs,decodes,rows,schedule_ms,build_ms,forward_ms,post_ms,prep_ms,plan_ms,launch_ms,wait_ms,gpu_ms";
  for (const char* n : kStepOpNames) f << ",gpu_" << n << "_ms";
  f << "\n";
  for (size_t i = 0; i < eng.size(); ++i) {
    const EngineStepTiming& e = eng[i];
    const CudaStepProfile& r = run[i];
    const int k = r.capture ? 3 : r.graph ? 0 : e.decodes == e.tokens ? 1 : 2;
    for (Sum* s : {&sums[k], &all}) {
      ++s->steps;
      s->tokens += e.tokens;
      s->decodes += e.decodes;
      s->schedule += e.schedule_s;
      s->build += e.build_s;
      s->prep += r.prep_s;
      s->plan += r.plan_s;
      s->launch += r.launch_s;
      s->wait += r.wait_s;
      s->post += e.post_s;
      s->forward += e.forward_s;
      s->gpu += r.gpu_s;
    }
    if (!r.graph && !r.capture) {
      for (int o = 0; o < kNumStepOps; ++o) ops[k].s[size_t(o)] += r.op_s[size_t(o)];
      ops[k].tokens += r.tokens;
      ops[k].rows += r.rows;
      ops[k].gpu += r.gpu_s;
    }
    f << i << ',' << kinds[k] << ',' << e.tokens << ',' << e.seqs << ',' << e.decodes << ',' << r.rows << ','
      << e.schedule_s * 1e3 << ',' << e.build_s * 1e3 << ',' << e.forward_s * 1e3 << ',' << e.post_s * 1e3 << ','
      << r.prep_s * 1e3 << ',' << r.plan_s * 1e3 << ',' << r.launch_s * 1e3 << ',' << r.wait_s * 1e3 << ','
      << r.gpu_s * 1e3;
    for (double t : r.op_s) f << ',' << t * 1e3;
    f << '\n';
  }
  std::printf("\nStep profile: %d steps in %.2f s; engine steps %.2f s, GPU busy %.2f s (%.1f%% of the run)\n",
              all.steps, wall_s, all.schedule + all.build + all.forward + all.post, all.gpu, 100 * all.gpu / wall_s);
  std::printf("%-15s %6s %8s %8s | ms per step: %7s %6s %6s %6s %6s %6s %7s %6s | %8s %8s\n", "step kind", "steps",
              "tok/step", "dec/step", "wall", "sched", "build", "prep", "plan", "launch", "wait", "post", "gpu",
              "total s");
  auto row = [&](const char* name, const Sum& s) {
    if (s.steps == 0) return;
    const double n = s.steps;
    const double wall = s.schedule + s.build + s.forward + s.post;
    std::printf("%-15s %6d %8.1f %8.1f | %21.3f %6.3f %6.3f %6.3f %6.3f %6.3f %7.3f %6.3f | %8.3f %8.2f\n", name,
                s.steps, s.tokens / n, s.decodes / n, 1e3 * wall / n, 1e3 * s.schedule / n, 1e3 * s.build / n,
                1e3 * s.prep / n, 1e3 * s.plan / n, 1e3 * s.launch / n, 1e3 * s.wait / n, 1e3 * s.post / n,
                1e3 * s.gpu / n, wall);
  };
  for (int k = 0; k < 4; ++k) row(kinds[k], sums[k]);
  row("all", all);
  // GEMM FLOPs of the eager steps' tokens (2 * M * N * K per GEMM, summed over the layers).
  const double H = c.hidden_size, D = c.head_dim, F = c.intermediate_size, L = c.num_layers;
  const double QKV = (c.num_heads + 2.0 * c.num_kv_heads) * D;
  for (int k = 1; k <= 2; ++k) {
    const Ops& e = ops[k];
    if (e.gpu <= 0) continue;
    std::array<double, kNumStepOps> flops{};
    flops[size_t(StepOp::kQkvGemm)] = 2 * e.tokens * H * QKV * L;
    flops[size_t(StepOp::kOGemm)] = 2 * e.tokens * c.num_heads * D * H * L;
    flops[size_t(StepOp::kGateUpGemm)] = 2 * e.tokens * H * 2 * F * L;
    flops[size_t(StepOp::kDownGemm)] = 2 * e.tokens * F * H * L;
    flops[size_t(StepOp::kLogits)] = 2 * e.rows * H * double(c.vocab_size);
    double op_total = 0;
    for (double t : e.s) op_total += t;
    std::printf("GPU time of the %s steps by op (%.3f s from the steps' first to last event, %.3f s between op "
                "events):\n", kinds[k], e.gpu, op_total);
    for (int o = 0; o < kNumStepOps; ++o) {
      const double t = e.s[size_t(o)];
      std::printf("  %-14s %8.3f s %5.1f%%", kStepOpNames[o], t, op_total > 0 ? 100 * t / op_total : 0.0);
      if (flops[size_t(o)] > 0 && t > 0) std::printf("  %6.1f TFLOP/s", flops[size_t(o)] / t / 1e12);
      std::printf("\n");
    }
  }
}
#endif

}  // namespace

// `pagoda bench throughput`: many requests offline, as fast as the engine takes them (vLLM's
// benchmark_throughput): fixed or random input/output lengths, random token prompts, EOS ignored.
int run_bench_throughput(const std::vector<std::string>& raw) {
  apply_early_log_level(raw);
  EngineArgs args;
  int num_prompts = 100, input_len = 128, output_len = 128;
  double range_ratio = 0.0;
  std::string json_out, profile_csv;
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
  parser.add({"--step-profile", {}, "FILE", "GPU runs: time every step (host phases, GPU time, GPU time by op "
              "with events between the ops, so a little slower), print where the time went and write one CSV "
              "row per step to FILE.", "bench",
              [&](const std::string& v) { profile_csv = v; }, {}, {}});
  if (!parse_command_line(parser, raw, false)) return 0;
  ValidatedArgs v = validate_engine_command(args);
  if (num_prompts < 1 || input_len < 1 || output_len < 1 || !(range_ratio >= 0) || range_ratio >= 1)
    throw_config_error("--num-prompts, --input-len and --output-len must be >= 1 and --random-range-ratio in [0, 1)");
  // The prompts are made up front: bound their total (64-bit; both factors are user-given).
  if (int64_t(num_prompts) * input_len > kMaxBenchPromptTokens)
    throw_config_error("--num-prompts x --input-len is ", int64_t(num_prompts) * input_len, " prompt tokens, more than the ",
                       kMaxBenchPromptTokens, " the benchmark makes up front");
  // Offline batches on a large GPU: vLLM's LLM-class defaults for GPUs of >= 70 GiB other than the A100 (1024
  // sequences, 16384 tokens a step) where the options are not given: decode GEMMs of ~1000 rows instead of
  // ~250 use the tensor cores better (docs/benchmarks.md, offline throughput).
  if (args.device.device != "cpu") {
    const std::optional<DeviceInfo> gpu = detect_cuda_device();
    if (gpu && gpu->total_memory >= (70ull << 30) && gpu->name.find("A100") == std::string::npos) {
      if (!parser.given("--max-num-seqs")) args.scheduler.max_num_seqs = 1024;
      if (!parser.given("--max-num-batched-tokens") && args.scheduler.enable_chunked_prefill)
        args.scheduler.max_num_batched_tokens = args.scheduler.max_num_batched_tokens.value_or(16384);
      PAGODA_LOG_INFO("bench throughput on ", gpu->name, ": --max-num-seqs ", args.scheduler.max_num_seqs,
                      ", --max-num-batched-tokens ", args.scheduler.max_num_batched_tokens.value_or(8192));
    }
  }
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
  std::vector<EngineStepTiming> timeline;
#ifdef PAGODA_WITH_CUDA_MODEL
  auto* cuda_runner = dynamic_cast<CudaModelRunner*>(e.runner.get());
  if (!profile_csv.empty() && cuda_runner) {
    timeline.reserve(size_t(num_prompts) * size_t(output_len + 8));
    engine.set_step_timeline(&timeline);
    cuda_runner->set_profiling(true);
  }
#endif
  if (!profile_csv.empty() && timeline.capacity() == 0) throw_config_error("--step-profile needs a GPU run");
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
#ifdef PAGODA_WITH_CUDA_MODEL
  if (!profile_csv.empty()) report_step_profile(timeline, cuda_runner->step_profiles(), cfg, secs, profile_csv);
#endif
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
