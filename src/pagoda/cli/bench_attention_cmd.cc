// `pagoda bench attention`: every attention backend that can run here, on the model's attention shapes and a
// load (decode, prefill, mixed, or the steps of a `bench serve --save-trace` run), timed as the engine runs it,
// checked against a float64 attention, with the engine flags that select the fastest accurate one. The
// measurement is attention_bench.{h,cc}; this file parses, selects, prints, and writes JSON and the PNG.
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

#include "pagoda/attention/startup.h"
#include "pagoda/cli/attention_bench.h"
#include "pagoda/cli/command_line.h"
#include "pagoda/cli/commands.h"
#include "pagoda/cli/png_chart.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/strings.h"
#include "pagoda/engine/model_setup.h"

namespace pagoda {
namespace {

using Json = nlohmann::ordered_json;

struct Options {
  std::string workload = "decode";
  std::string trace_file;
  int trace_steps = 8;
  std::vector<std::string> backends;
  std::vector<int> block_sizes;
  std::vector<int> fa_versions;
  int batch = 8, context = 1024, prompt = 256;
  double time_budget_s = 10;
  std::string json_out, plot;
};

std::string fmt(const char* f, double x) {
  char b[64];
  std::snprintf(b, sizeof b, f, x);
  return b;
}

std::vector<int> int_list(const std::string& opt, const std::string& v) {
  std::vector<int> out;
  for (const std::string& part : split(v, ',')) out.push_back(parse_int_arg(opt, std::string(trim(part))));
  return out;
}

// Takes `--name V` / `--name=V` out of `raw` (every occurrence); returns the last value.
std::optional<std::string> take_option(std::vector<std::string>& raw, const std::string& name) {
  std::optional<std::string> value;
  for (size_t i = 0; i < raw.size();) {
    if (raw[i] == name && i + 1 < raw.size()) {
      value = raw[i + 1];
      raw.erase(raw.begin() + std::ptrdiff_t(i), raw.begin() + std::ptrdiff_t(i) + 2);
    } else if (starts_with(raw[i], name + "=")) {
      value = raw[i].substr(name.size() + 1);
      raw.erase(raw.begin() + std::ptrdiff_t(i));
    } else {
      ++i;
    }
  }
  return value;
}

// The requests of a `pagoda bench serve --save-trace` file.
std::vector<TraceRequest> read_trace(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw_config_error("--workload serve-trace: cannot read ", path);
  Json j;
  try {
    j = Json::parse(in);
  } catch (const std::exception& e) {
    throw_config_error("--workload serve-trace: ", path, " is not JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("requests") || !j["requests"].is_array())
    throw_config_error("--workload serve-trace: ", path, " has no \"requests\" array (write it with pagoda bench serve --save-trace)");
  std::vector<TraceRequest> out;
  for (const Json& r : j["requests"]) {
    TraceRequest t;
    try {
      t.arrival_s = r.at("arrival_s").get<double>();
      t.ttft_s = r.at("ttft_s").get<double>();
      t.e2e_s = r.at("e2e_s").get<double>();
      t.prompt_tokens = r.at("prompt_tokens").get<int>();
      t.output_tokens = r.at("output_tokens").get<int>();
    } catch (const std::exception& e) {
      throw_config_error("--workload serve-trace: ", path, ": a request lacks a field (", e.what(), ")");
    }
    if (!(t.arrival_s >= 0) || !(t.ttft_s >= 0) || !(t.e2e_s >= t.ttft_s) || t.prompt_tokens < 1 || t.output_tokens < 0 ||
        t.prompt_tokens > kMaxModelLen || t.output_tokens > kMaxModelLen)
      throw_config_error("--workload serve-trace: ", path, ": request ", out.size(), " has out-of-range fields");
    out.push_back(t);
  }
  return out;
}

// Redraws on a terminal (stderr) at most 5 times a second; silent when stderr is not one.
class Progress {
 public:
  Progress() : tty_(::isatty(STDERR_FILENO) == 1) {}
  void operator()(int64_t done, int64_t total, const std::string& what) {
    if (!tty_) return;
    const auto now = std::chrono::steady_clock::now();
    if (done < total && now - drawn_ < std::chrono::milliseconds(200)) return;
    drawn_ = now;
    const int width = 30, filled = int(width * std::min(done, total) / std::max<int64_t>(1, total));
    std::fprintf(stderr, "\r[%s%s] %3d%% %-40.40s", std::string(size_t(filled), '#').c_str(),
                 std::string(size_t(width - filled), '.').c_str(), int(100 * done / std::max<int64_t>(1, total)), what.c_str());
    if (done >= total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  bool tty_;
  std::chrono::steady_clock::time_point drawn_{};
};

// Why engine start chose `auto_backend`: its rule, not a measurement.
std::string why_automatic(BackendName auto_backend, const DeviceInfo& device) {
  if (device.kind == DeviceKind::kCpu)
    return str_cat("on the CPU engine start runs ", backend_name_str(auto_backend), " by rule (CPU_ATTN unless "
                   "--attention-backend FLEX_ATTENTION is given, TURBOQUANT for a turboquant_* cache), not by measurement");
  std::vector<std::string> names;
  for (BackendName b : cuda_priority_list(device.cc.value_or(ComputeCapability{9, 0}), false))
    names.emplace_back(backend_name_str(b));
  return str_cat(backend_name_str(auto_backend), " is the first valid backend of the priority list for compute capability ",
                 device.cc ? device.cc->str() : "?", " (", join(names, " > "), "), not a measurement");
}

}  // namespace

int run_bench_attention_hooked(const std::vector<std::string>& raw_in, const BenchAttentionHooks* hooks) {
  apply_early_log_level(raw_in);
  // Options that take lists or two words are taken out before the engine's parser sees them.
  std::vector<std::string> raw = raw_in;
  Options o;
  if (auto v = take_option(raw, "--block-size")) o.block_sizes = int_list("--block-size", *v);
  std::vector<std::string> dtypes = {"auto"};
  if (auto v = take_option(raw, "--kv-cache-dtype")) {
    dtypes.clear();
    for (const std::string& d : split(*v, ',')) dtypes.emplace_back(trim(d));
  }
  for (size_t i = 0; i + 2 < raw.size(); ++i)  // --workload serve-trace FILE
    if (raw[i] == "--workload" && raw[i + 1] == "serve-trace" && !starts_with(raw[i + 2], "--")) {
      o.trace_file = raw[i + 2];
      raw.erase(raw.begin() + std::ptrdiff_t(i) + 2);
    }
  EngineArgs args;
  ArgParser parser(
      "pagoda bench attention",
      "Measure every attention backend that can run here on this model's attention shapes and a load, check each "
      "against a float64 attention, and recommend the fastest accurate one with the exact flags that select it. "
      "Engine start's own choice and the reasons each other candidate is not valid are shown first. Lists "
      "(comma-separated) of --backends, --kv-cache-dtype, --block-size and --flash-attn-version are crossed. The "
      "table goes to stdout; progress to stderr on a terminal. See docs/benchmarks.md.");
  register_engine_options(parser, args, EngineOptionSet::kEngine);
  const std::vector<std::string> bench_opts = {"--workload", "--trace-steps", "--backends", "--flash-attn-version",
                                               "--batch-size", "--context-len", "--prompt-len", "--time-budget",
                                               "--output-json", "--plot"};
  parser.add({"--workload", {}, "W", "decode (default), prefill, mixed, or serve-trace FILE (a trace written by "
              "pagoda bench serve --save-trace).", "bench attention",
              [&](const std::string& v) { check_choice("--workload", v, {"decode", "prefill", "mixed", "serve-trace"}); o.workload = v; },
              [&] { return o.workload; }, {}});
  parser.add({"--trace-steps", {}, "N", "serve-trace: engine steps reconstructed at evenly spaced instants.", "bench attention",
              [&](const std::string& v) { o.trace_steps = parse_int_arg("--trace-steps", v, 1000, "steps"); },
              [&] { return std::to_string(o.trace_steps); }, {}});
  parser.add({"--backends", {}, "A,B", "Backends to try (default: all six).", "bench attention",
              [&](const std::string& v) { o.backends = split(v, ','); }, {}, {}});
  parser.add({"--flash-attn-version", {}, "V,..", "FLASH_ATTN versions to try (2, 3).", "bench attention",
              [&](const std::string& v) { o.fa_versions = int_list("--flash-attn-version", v); }, {}, {}});
  parser.add({"--batch-size", {}, "N", "Sequences decoding (decode, mixed) or prefilling (prefill).", "bench attention",
              [&](const std::string& v) { o.batch = parse_int_arg("--batch-size", v, kMaxNumSeqs, "sequences"); },
              [&] { return std::to_string(o.batch); }, {}});
  parser.add({"--context-len", {}, "N", "Context of each decoding sequence.", "bench attention",
              [&](const std::string& v) { o.context = parse_int_arg("--context-len", v, kMaxModelLen, "pagoda's context limit"); },
              [&] { return std::to_string(o.context); }, {}});
  parser.add({"--prompt-len", {}, "N", "New tokens of a prefilling sequence (prefill, mixed).", "bench attention",
              [&](const std::string& v) { o.prompt = parse_int_arg("--prompt-len", v, kMaxModelLen, "pagoda's context limit"); },
              [&] { return std::to_string(o.prompt); }, {}});
  parser.add({"--time-budget", {}, "S", "Seconds of timed rounds for all candidates together (at least 3 rounds).",
              "bench attention", [&](const std::string& v) { o.time_budget_s = parse_float_arg("--time-budget", v); },
              [&] { return fmt("%g", o.time_budget_s); }, {}});
  parser.add({"--output-json", {}, "FILE", "Also write the results to FILE as JSON.", "bench attention",
              [&](const std::string& v) { o.json_out = v; }, {}, {}});
  parser.add({"--plot", {}, "FILE.png", "Also draw the times as a PNG bar chart.", "bench attention",
              [&](const std::string& v) { o.plot = v; }, {}, {}});
  if (!parse_command_line(parser, raw, false)) return 0;
  if (o.batch < 1 || o.context < 1 || o.prompt < 1 || o.trace_steps < 1 || !(o.time_budget_s >= 0))
    throw_config_error("--batch-size, --context-len, --prompt-len and --trace-steps must be >= 1, --time-budget >= 0");
  if (o.workload == "serve-trace" && o.trace_file.empty())
    throw_config_error("--workload serve-trace needs the trace file: --workload serve-trace FILE");
  for (const std::string& d : dtypes)
    if (std::find(kv_cache_dtype_choices().begin(), kv_cache_dtype_choices().end(), d) == kv_cache_dtype_choices().end())
      throw_config_error("--kv-cache-dtype: '", d, "' is not a KV cache dtype (", join(kv_cache_dtype_choices(), ", "), ")");
  if (dtypes.empty()) throw_config_error("--kv-cache-dtype: give at least one dtype");
  for (int b : o.block_sizes)
    if (b < 1 || b > kMaxBlockSize) throw_config_error("--block-size must be between 1 and ", kMaxBlockSize, ", got ", b);
  const ValidatedArgs base_v = validate_engine_command(args);

  // The engine flags the user gave, without the ones each candidate sets.
  std::vector<std::string> engine_raw = raw;
  for (const std::string& name : bench_opts) take_option(engine_raw, name);
  take_option(engine_raw, "--attention-backend");

  std::vector<BackendName> backends;
  if (o.backends.empty()) backends.assign(kAllBackendNames.begin(), kAllBackendNames.end());
  for (const std::string& b : o.backends) {
    auto n = parse_backend_name(trim(b));
    if (!n) throw_config_error("--backends: unknown backend '", b, "'");
    backends.push_back(*n);
  }

  const DeviceInfo device = pick_engine_device(args.device.device);
  const ModelConfig cfg = read_engine_model_config(args);
  const DType model_dtype =
      resolve_model_dtype(base_v.dtype, cfg.checkpoint_dtype, device.kind == DeviceKind::kCuda && *device.cc < ComputeCapability{8, 0});

  // One candidate's engine view: its flags parsed as the engine commands parse them, then engine start's selection.
  auto select = [&](const std::vector<std::string>& flags, bool quiet) {
    EngineArgs a;
    ArgParser p("pagoda", "");
    register_engine_options(p, a, EngineOptionSet::kEngine);
    std::vector<std::string> all = engine_raw;
    all.insert(all.end(), flags.begin(), flags.end());
    parse_command_line(p, all, false);
    std::optional<LogSilence> silence;
    if (quiet) silence.emplace();
    const ValidatedArgs v = validate_engine_args(a);
    const ResolvedAttentionSettings s = resolve_attention_settings(v, device.kind);
    const EngineAttentionSelection e = select_engine_attention(s, a, cfg, model_dtype, device);
    CandidateSelection c;
    c.layer_backends = e.selection.per_layer;
    c.layer_kv_cache_dtypes = e.layer_kv_cache_dtypes;
    c.block_size = e.selection.plan.block_size;
    c.layout = e.selection.plan.kv_layout;
    c.flash_attn_version = e.selection.plan.flash_attn_version;
    c.attention = s.attention;
    c.batch_invariant = s.batch_invariant;
    c.causal = !s.attention.use_non_causal;
    c.kv_cache_dtype = e.kv_cache_dtype;
    c.model_dtype = model_dtype;
    return c;
  };

  // Engine start's choice with the user's flags (the first dtype and block size of the lists).
  std::vector<std::string> auto_flags = {"--kv-cache-dtype", dtypes.front()};
  if (!o.block_sizes.empty()) auto_flags.insert(auto_flags.end(), {"--block-size", std::to_string(o.block_sizes.front())});
  std::optional<BackendName> auto_backend;
  std::string auto_error;
  int auto_block = 0;
  try {
    const CandidateSelection a = select(auto_flags, false);
    auto_backend = a.layer_backends.front();
    for (size_t l = 0; l < a.layer_backends.size(); ++l)
      if (a.layer_kv_cache_dtypes[l] == a.kv_cache_dtype) {
        auto_backend = a.layer_backends[l];
        break;
      }
    auto_block = a.block_size;
  } catch (const Error& e) {
    auto_error = e.what();
  }

  std::vector<BenchCandidate> cands;
  for (BackendName b : backends)
    for (const std::string& d : dtypes) {
      std::vector<std::optional<int>> blocks(1);
      if (!o.block_sizes.empty()) blocks.assign(o.block_sizes.begin(), o.block_sizes.end());
      std::vector<std::optional<int>> fas(1);
      if (b == BackendName::kFlashAttn && !o.fa_versions.empty()) fas.assign(o.fa_versions.begin(), o.fa_versions.end());
      for (const auto& bs : blocks)
        for (const auto& fa : fas) {
          BenchCandidate c;
          c.backend = b;
          c.kv_cache_dtype = d;
          c.block_size = bs;
          c.flash_attn_version = fa;
          c.flags = {"--attention-backend", std::string(backend_name_str(b)), "--kv-cache-dtype", d};
          if (bs) c.flags.insert(c.flags.end(), {"--block-size", std::to_string(*bs)});
          if (fa) c.flags.insert(c.flags.end(), {"--attention-config.flash_attn_version", std::to_string(*fa)});
          c.automatic = auto_backend == b && d == dtypes.front() && (o.block_sizes.empty() || bs == o.block_sizes.front()) &&
                        !fa;
          cands.push_back(c);
        }
    }
  if (auto_backend && std::none_of(cands.begin(), cands.end(), [](const BenchCandidate& c) { return c.automatic; })) {
    BenchCandidate c;
    c.backend = *auto_backend;
    c.kv_cache_dtype = dtypes.front();
    if (!o.block_sizes.empty()) c.block_size = o.block_sizes.front();
    c.flags = {"--attention-backend", std::string(backend_name_str(c.backend)), "--kv-cache-dtype", c.kv_cache_dtype};
    if (c.block_size) c.flags.insert(c.flags.end(), {"--block-size", std::to_string(*c.block_size)});
    c.automatic = true;
    cands.push_back(c);
  }

  BenchAttentionRequest req;
  req.device = device;
  req.model = &cfg;
  req.workload = o.workload == "decode"    ? decode_workload(o.batch, o.context)
                 : o.workload == "prefill" ? prefill_workload(o.batch, o.prompt)
                 : o.workload == "mixed"   ? mixed_workload(o.batch, o.context, o.prompt)
                                           : trace_workload(read_trace(o.trace_file), o.trace_steps);
  req.threads = args.device.cpu_threads;
  req.time_budget_s = o.time_budget_s;
  req.kv_budget_bytes = args.cache.kv_cache_space_gib * double(1ull << 30);
  req.seed = uint64_t(args.model.seed);
  Progress progress;
  const BenchCeilings ceil = run_attention_bench(
      req, cands, [&](const BenchCandidate& c) { return select(c.flags, true); },
      [&](int64_t d, int64_t t, const std::string& w) { progress(d, t, w); }, hooks);
  const int best = recommended_candidate(cands);
  const BenchCandidate* autoc = nullptr;
  for (const BenchCandidate& c : cands)
    if (c.automatic) autoc = &c;

  // Report.
  std::printf("model %s: %d layers, %d query / %d KV heads x %d%s; device %s\n", args.model.model.c_str(), cfg.num_layers,
              cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.sliding_window > 0 ? str_cat(", window ", cfg.sliding_window).c_str() : "",
              describe(device).c_str());
  std::printf("workload %s: %s\n", req.workload.name.c_str(), req.workload.describe.c_str());
  std::printf("ceilings: %s\n", ceil.describe.c_str());
  if (auto_backend)
    std::printf("engine start's choice with your flags: %s (kv %s, block %d)\n\n", std::string(backend_name_str(*auto_backend)).c_str(),
                dtypes.front().c_str(), auto_block);
  else
    std::printf("engine start's choice with your flags: none: %s\n\n", auto_error.c_str());
  std::printf("%-34s %-9s %-20s %9s %9s %7s %-21s %11s  %s\n", "CANDIDATE", "STATUS", "MS/STEP (Q1-Q3)", "GB/S", "GFLOP/S",
              "%CEIL", "ERROR / BOUND", "KV TOKENS", "RUNNER");
  auto pct_ceiling = [&](const BenchCandidate& c) {
    const double bw = c.bytes_per_step / c.median_s / ceil.bytes_per_s;
    const double fl = ceil.flops_per_s > 0 ? c.flops_per_step / c.median_s / ceil.flops_per_s : 0.0;
    return 100 * std::max(bw, fl);
  };
  for (size_t i = 0; i < cands.size(); ++i) {
    const BenchCandidate& c = cands[i];
    std::string name = c.name() + (c.automatic ? " *" : "");
    if (!c.timed()) {
      std::printf("%-34s %-9s %s\n", name.c_str(), "invalid", join(c.reasons, "; ").c_str());
      continue;
    }
    const std::string status = int(i) == best ? "BEST" : c.accurate ? "ok" : !c.checked ? "unchecked" : "INACCURATE";
    const std::string ms = fmt("%.3f", c.median_s * 1e3) + " (" + fmt("%.3f", c.q1_s * 1e3) + "-" + fmt("%.3f", c.q3_s * 1e3) + ")";
    std::printf("%-34s %-9s %-20s %9.2f %9.2f %6.1f%% %-21s %11lld  %s\n", name.c_str(), status.c_str(), ms.c_str(),
                c.bytes_per_step / c.median_s / 1e9, c.flops_per_step / c.median_s / 1e9, pct_ceiling(c),
                (fmt("%.2e", c.error) + " / " + fmt("%.2e", c.bound)).c_str(), (long long)c.capacity_tokens, c.runner.c_str());
  }
  std::printf("\n* engine start's choice. ERROR / BOUND: the output row (token, query head) nearest its bound, on the first "
              "layer a candidate runs, over every step: max |out - float64 attention| and the row's bound from the KV "
              "format's rounding, both relative to the largest |value| the row attends (docs/benchmarks.md):\n");
  std::vector<std::string> seen;
  for (const BenchCandidate& c : cands)
    if (c.timed() && std::find(seen.begin(), seen.end(), c.bound_text) == seen.end()) {
      seen.push_back(c.bound_text);
      std::printf("  %s\n", c.bound_text.c_str());
    }
  std::printf("INACCURATE: a row above its bound, never recommended. unchecked: some row's bound is 2 or more (the trivial "
              "one), so the check says nothing and it is not recommended; judge its quality with pagoda bench perplexity.\n");
  std::printf("KV tokens: what --kv-cache-space %.1f GiB holds with every layer's cache in the candidate's format.\n\n",
              args.cache.kv_cache_space_gib);

  Json rec = nullptr;
  std::string verdict;
  if (best < 0) {
    std::printf("recommendation: none: no candidate was timed within its accuracy bound\n");
  } else {
    const BenchCandidate& b = cands[size_t(best)];
    std::string cmd = "pagoda generate";
    for (const std::string& a : engine_raw) cmd += " " + a;
    for (const std::string& a : b.flags) cmd += " " + a;
    std::printf("recommendation: %s, %.3f ms per step\n  flags: %s\n  e.g.:  %s\n", b.name().c_str(), b.median_s * 1e3,
                join(b.flags, " ").c_str(), cmd.c_str());
    rec = {{"candidate", b.name()}, {"backend", std::string(backend_name_str(b.backend))}, {"flags", b.flags},
           {"command", cmd}, {"automatic", b.automatic}};
    const BenchCandidate* fastest = &b;
    for (const BenchCandidate& c : cands)
      if (c.timed() && c.accurate && c.median_s < fastest->median_s) fastest = &c;
    if (b.automatic && fastest != &b) {
      verdict = str_cat("engine start's choice: ", fastest->name(), " had a ", fmt("%.1f", 100 * (1 - fastest->median_s / b.median_s)),
                        "% lower median, within the spread of the rounds (quartiles overlap): no flag needed");
    } else if (b.automatic) {
      verdict = "engine start's choice is the fastest accurate one on this load: no flag needed";
    } else if (autoc && autoc->timed() && autoc->median_s > 0) {
      const double slower = 100 * (autoc->median_s / b.median_s - 1);
      verdict = str_cat("engine start's choice ", autoc->name(), " is ", fmt("%.1f", slower), "% slower on this load (",
                        fmt("%.3f", autoc->median_s * 1e3), " vs ", fmt("%.3f", b.median_s * 1e3), " ms per step)",
                        autoc->accurate ? "" : " and outside its accuracy bound", "; ", why_automatic(autoc->backend, device));
      rec["automatic_slower_percent"] = slower;
    } else {
      verdict = str_cat("engine start's choice was not timed here", auto_error.empty() ? "" : ": " + auto_error);
    }
    std::printf("  %s\n", verdict.c_str());
    rec["why"] = verdict;
  }

  if (!o.json_out.empty()) {
    Json cj = Json::array();
    for (size_t i = 0; i < cands.size(); ++i) {
      const BenchCandidate& c = cands[i];
      Json j = {{"name", c.name()}, {"backend", std::string(backend_name_str(c.backend))}, {"kv_cache_dtype", c.kv_cache_dtype},
                {"block_size", c.block_size ? Json(*c.block_size) : Json(nullptr)},
                {"flash_attn_version", c.flash_attn_version ? Json(*c.flash_attn_version) : Json(nullptr)},
                {"flags", c.flags}, {"automatic", c.automatic}, {"valid", c.timed()}, {"reasons", c.reasons},
                {"recommended", int(i) == best}};
      if (c.timed())
        j.update({{"runner", c.runner}, {"block_size_used", c.plan_block_size}, {"rounds", c.round_s.size()},
                  {"median_ms", c.median_s * 1e3}, {"q1_ms", c.q1_s * 1e3}, {"q3_ms", c.q3_s * 1e3},
                  {"bytes_per_step", c.bytes_per_step}, {"flops_per_step", c.flops_per_step},
                  {"gb_per_s", c.bytes_per_step / c.median_s / 1e9}, {"gflop_per_s", c.flops_per_step / c.median_s / 1e9},
                  {"percent_of_ceiling", pct_ceiling(c)}, {"error", c.error}, {"bound", c.bound},
                  {"bound_model", c.bound_text}, {"checked", c.checked}, {"accurate", c.accurate}, {"kv_bytes_per_token", c.kv_bytes_per_token},
                  {"kv_capacity_tokens", c.capacity_tokens}, {"layers", c.num_layers}, {"own_layers", c.own_layers}});
      cj.push_back(j);
    }
    Json steps = Json::array();
    for (const BenchStep& s : req.workload.steps)
      steps.push_back({{"label", s.label}, {"query_lens", s.batch.query_lens}, {"seq_lens", s.batch.seq_lens}});
    Json j = {{"model", args.model.model}, {"device", describe(device)},
              {"shape", {{"layers", cfg.num_layers}, {"q_heads", cfg.num_heads}, {"kv_heads", cfg.num_kv_heads},
                         {"head_size", cfg.head_dim}, {"sliding_window", cfg.sliding_window}}},
              {"workload", {{"name", req.workload.name}, {"describe", req.workload.describe}, {"steps", steps}}},
              {"ceilings", {{"bytes_per_s", ceil.bytes_per_s}, {"flops_per_s", ceil.flops_per_s}, {"describe", ceil.describe}}},
              {"automatic", {{"backend", auto_backend ? Json(std::string(backend_name_str(*auto_backend))) : Json(nullptr)},
                             {"error", auto_error.empty() ? Json(nullptr) : Json(auto_error)}}},
              {"candidates", cj}, {"recommendation", rec}};
    write_text_file(o.json_out, j.dump(2));
  }
  if (!o.plot.empty()) {
    BarChart chart;
    chart.title = str_cat("attention, ", args.model.model, ", ", req.workload.name, ": ms per step (", cfg.num_layers, " layers)");
    for (size_t i = 0; i < cands.size(); ++i) {
      const BenchCandidate& c = cands[i];
      if (!c.timed()) continue;
      const bool bad = c.checked && !c.accurate;
      const uint32_t color = int(i) == best ? 0x2CA02C : bad ? 0xD62728 : c.automatic ? 0x1F77B4 : 0x9A9A9A;
      chart.bars.push_back({c.name(), c.median_s * 1e3,
                            fmt("%.3f ms", c.median_s * 1e3) + (bad ? " INACCURATE" : !c.checked ? " UNCHECKED" : "") +
                                (c.automatic ? " *" : ""), color});
    }
    chart.legend = {{0x2CA02C, "recommended"}, {0x1F77B4, "engine start's choice (*)"}, {0xD62728, "outside accuracy bound"},
                    {0x9A9A9A, "other"}};
    chart.footnote = str_cat(describe(device), "; median of ", cands.empty() ? 0 : (best >= 0 ? cands[size_t(best)].round_s.size() : 0),
                             " interleaved rounds");
    const std::vector<uint8_t> png = bar_chart_png(chart);
    std::ofstream out(o.plot, std::ios::binary);
    if (!out || !out.write(reinterpret_cast<const char*>(png.data()), std::streamsize(png.size())))
      throw_runtime_error("cannot write --plot ", o.plot);
  }
  return 0;
}

int run_bench_attention(const std::vector<std::string>& raw) { return run_bench_attention_hooked(raw, nullptr); }

}  // namespace pagoda
