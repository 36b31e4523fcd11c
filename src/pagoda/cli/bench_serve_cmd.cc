// `pagoda bench serve`: a load generator against a running OpenAI-compatible server (pagoda's or any),
// like vLLM's benchmark_serving: random token-id prompts sent at a request rate (Poisson arrivals, or all at
// once), streamed, with time to first token, time per output token, inter-token latency and end-to-end
// latency percentiles, request and token throughput. One of the few translation units with httplib.
#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include <nlohmann/json.hpp>

#include "pagoda/cli/command_line.h"
#include "pagoda/cli/commands.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
using Clock = std::chrono::steady_clock;

struct Result {
  bool ok = false;
  std::string error;
  double start = 0, ttft = 0, e2e = 0;  // start: seconds after the first request was due
  std::vector<double> itl;  // seconds between consecutive content chunks
  int64_t output_tokens = 0, prompt_tokens = 0;
};

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  double idx = p / 100.0 * double(v.size() - 1);
  size_t lo = size_t(idx), hi = std::min(v.size() - 1, lo + 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - double(lo));
}

double mean(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return v.empty() ? 0 : s / double(v.size());
}

}  // namespace

int run_bench_serve(const std::vector<std::string>& raw) {
  std::string host = "127.0.0.1", model, endpoint = "/v1/completions", api_key, json_out;
  int port = 8000, num_prompts = 100, input_len = 128, output_len = 128, max_concurrency = 256, seed = 0;
  std::string trace_out;
  double rate = 0;  // 0: all at once
  ArgParser parser("pagoda bench serve",
                   "Load a running OpenAI-compatible server with --num-prompts streamed completions of random token "
                   "prompts at --request-rate (Poisson; 0 = all at once) and report throughput and TTFT / TPOT / ITL / "
                   "end-to-end latency percentiles.");
  auto S = [](std::string& dst) { return [&dst](const std::string& v) { dst = v; }; };
  parser.add({"--host", {}, "HOST", "Server host.", "", S(host), [&] { return host; }, {}});
  parser.add({"--port", {}, "PORT", "Server port.", "", [&](const std::string& v) { port = parse_int_arg("--port", v); },
              [&] { return std::to_string(port); }, {}});
  parser.add({"--model", {}, "NAME", "Model name to request (default: the first of /v1/models).", "", S(model), {}, {}});
  parser.add({"--endpoint", {}, "PATH", "Completions endpoint.", "", S(endpoint), [&] { return endpoint; }, {}});
  parser.add({"--api-key", {}, "KEY", "Bearer token.", "", S(api_key), {}, {}});
  parser.add({"--num-prompts", {}, "N", "Requests to send.", "", [&](const std::string& v) { num_prompts = parse_int_arg("--num-prompts", v); },
              [&] { return std::to_string(num_prompts); }, {}});
  parser.add({"--random-input-len", {}, "N", "Prompt tokens per request.", "",
              [&](const std::string& v) { input_len = parse_int_arg("--random-input-len", v); }, [&] { return std::to_string(input_len); }, {}});
  parser.add({"--random-output-len", {}, "N", "Generated tokens per request (EOS ignored).", "",
              [&](const std::string& v) { output_len = parse_int_arg("--random-output-len", v); }, [&] { return std::to_string(output_len); }, {}});
  parser.add({"--request-rate", {}, "R", "Requests per second (Poisson arrivals); 0 sends all at once.", "",
              [&](const std::string& v) { rate = parse_float_arg("--request-rate", v); }, [&] { return std::to_string(rate); }, {}});
  parser.add({"--max-concurrency", {}, "N", "Requests in flight at most.", "",
              [&](const std::string& v) { max_concurrency = parse_int_arg("--max-concurrency", v); }, [&] { return std::to_string(max_concurrency); }, {}});
  parser.add({"--seed", {}, "N", "Random seed of prompts and arrivals.", "", [&](const std::string& v) { seed = parse_int_arg("--seed", v); }, {}, {}});
  parser.add({"--output-json", {}, "FILE", "Also write the results to FILE as JSON.", "", S(json_out), {}, {}});
  parser.add({"--save-trace", {}, "FILE", "Also write each request's arrival, time to first token, end and lengths "
              "to FILE (JSON), the load `pagoda bench attention --workload serve-trace FILE` replays.", "", S(trace_out), {}, {}});
  if (!parse_command_line(parser, raw, false)) return 0;
  if (num_prompts < 1 || input_len < 1 || output_len < 1 || max_concurrency < 1 || rate < 0)
    throw_config_error("--num-prompts, --random-input-len, --random-output-len and --max-concurrency must be >= 1, --request-rate >= 0");
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);

  httplib::Client probe(host, port);
  probe.set_connection_timeout(5, 0);
  auto models = probe.Get("/v1/models", headers);
  if (!models) throw_runtime_error("cannot reach the server at http://", host, ":", port, " (", httplib::to_string(models.error()), ")");
  if (models->status != 200) throw_runtime_error("GET /v1/models answered ", models->status, ": ", models->body);
  int vocab_guess = 500;  // token ids below this exist in any vocabulary the benchmark targets
  if (model.empty()) model = Json::parse(models->body)["data"][0]["id"].get<std::string>();

  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::uniform_int_distribution<int> tok(3, vocab_guess - 1);
  std::exponential_distribution<double> gap(rate > 0 ? rate : 1.0);
  std::vector<Json> bodies;
  for (int i = 0; i < num_prompts; ++i) {
    std::vector<int> prompt;
    for (int t = 0; t < input_len; ++t) prompt.push_back(tok(rng));
    bodies.push_back({{"model", model}, {"prompt", prompt}, {"max_tokens", output_len}, {"temperature", 0.0},
                      {"ignore_eos", true}, {"stream", true}, {"stream_options", {{"include_usage", true}}}});
  }
  std::vector<double> send_at(size_t(num_prompts), 0.0);
  for (int i = 1; i < num_prompts; ++i) send_at[size_t(i)] = send_at[size_t(i) - 1] + (rate > 0 ? gap(rng) : 0.0);

  std::vector<Result> results(static_cast<size_t>(num_prompts));
  std::atomic<int> in_flight{0}, done{0};
  std::mutex print_mu;
  const auto t0 = Clock::now();
  auto worker = [&](int i) {
    Result& r = results[size_t(i)];
    httplib::Client c(host, port);
    c.set_read_timeout(600, 0);
    const auto start = Clock::now();
    r.start = std::chrono::duration<double>(start - t0).count();
    auto last = start;
    bool first = true;
    std::string buffer;
    auto on_data = [&](const char* data, size_t len) {
      buffer.append(data, len);
      size_t pos;
      while ((pos = buffer.find("\n\n")) != std::string::npos) {
        std::string event = buffer.substr(0, pos);
        buffer.erase(0, pos + 2);
        if (event.rfind("data: ", 0) != 0) continue;
        std::string payload = event.substr(6);
        if (payload == "[DONE]") continue;
        Json j = Json::parse(payload, nullptr, false);
        if (j.is_discarded()) continue;
        if (j.contains("usage") && j["usage"].is_object()) {
          r.output_tokens = j["usage"].value("completion_tokens", int64_t(0));
          r.prompt_tokens = j["usage"].value("prompt_tokens", int64_t(0));
        }
        if (!j.contains("choices") || j["choices"].empty()) continue;
        const auto now = Clock::now();
        if (first) {
          r.ttft = std::chrono::duration<double>(now - start).count();
          first = false;
        } else {
          r.itl.push_back(std::chrono::duration<double>(now - last).count());
        }
        last = now;
      }
      return true;
    };
    httplib::Request req;
    req.method = "POST";
    req.path = endpoint;
    req.headers = headers;
    req.set_header("Content-Type", "application/json");
    req.body = bodies[size_t(i)].dump();
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) { return on_data(d, n); };
    auto res = c.send(req);
    r.e2e = std::chrono::duration<double>(Clock::now() - start).count();
    if (!res) r.error = httplib::to_string(res.error());
    else if (res->status != 200) r.error = "HTTP " + std::to_string(res->status);
    else r.ok = !first;
    --in_flight;
    int d = ++done;
    std::lock_guard<std::mutex> lock(print_mu);
    std::fprintf(stderr, "\r[%-40s] %d/%d", std::string(size_t(40 * d / num_prompts), '#').c_str(), d, num_prompts);
  };
  std::vector<std::thread> threads;
  for (int i = 0; i < num_prompts; ++i) {
    std::this_thread::sleep_until(t0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(send_at[size_t(i)])));
    while (in_flight.load() >= max_concurrency) std::this_thread::sleep_for(std::chrono::milliseconds(1));
    ++in_flight;
    threads.emplace_back(worker, i);
  }
  for (auto& t : threads) t.join();
  std::fprintf(stderr, "\n");
  const double duration = std::chrono::duration<double>(Clock::now() - t0).count();

  int ok = 0;
  int64_t in_tokens = 0, out_tokens = 0;
  std::vector<double> ttft, tpot, itl, e2e;
  std::string first_error;
  for (const auto& r : results) {
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++ok;
    in_tokens += r.prompt_tokens;
    out_tokens += r.output_tokens;
    ttft.push_back(r.ttft * 1e3);
    e2e.push_back(r.e2e * 1e3);
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) * 1e3 / double(r.output_tokens - 1));
    for (double x : r.itl) itl.push_back(x * 1e3);
  }
  auto line = [](const char* k, double v) { std::printf("%-40s %.2f\n", k, v); };
  std::printf("============ Serving Benchmark Result ============\n");
  std::printf("%-40s %d\n", "Successful requests:", ok);
  std::printf("%-40s %d\n", "Failed requests:", num_prompts - ok);
  line("Benchmark duration (s):", duration);
  std::printf("%-40s %lld\n", "Total input tokens:", (long long)in_tokens);
  std::printf("%-40s %lld\n", "Total generated tokens:", (long long)out_tokens);
  line("Request throughput (req/s):", ok / duration);
  line("Output token throughput (tok/s):", double(out_tokens) / duration);
  line("Total token throughput (tok/s):", double(in_tokens + out_tokens) / duration);
  auto block = [&](const char* title, const char* name, const std::vector<double>& v) {
    std::printf("%s\n", title);
    std::printf("%-40s %.2f\n", (std::string("Mean ") + name + " (ms):").c_str(), mean(v));
    std::printf("%-40s %.2f\n", (std::string("Median ") + name + " (ms):").c_str(), percentile(v, 50));
    std::printf("%-40s %.2f\n", (std::string("P99 ") + name + " (ms):").c_str(), percentile(v, 99));
  };
  block("---------------Time to First Token----------------", "TTFT", ttft);
  block("-----Time per Output Token (excl. 1st token)------", "TPOT", tpot);
  block("---------------Inter-token Latency----------------", "ITL", itl);
  block("----------------End-to-end Latency----------------", "E2EL", e2e);
  std::printf("==================================================\n");
  if (!json_out.empty()) {
    Json j = {{"successful_requests", ok}, {"duration_s", duration}, {"output_tokens", out_tokens},
              {"request_throughput", ok / duration}, {"output_throughput", double(out_tokens) / duration},
              {"mean_ttft_ms", mean(ttft)}, {"p99_ttft_ms", percentile(ttft, 99)}, {"mean_tpot_ms", mean(tpot)},
              {"mean_itl_ms", mean(itl)}, {"p99_itl_ms", percentile(itl, 99)}};
    write_text_file(json_out, j.dump());
  }
  if (!trace_out.empty()) {
    // Successful requests only: a failed one has no lengths. prompt_tokens from the server's usage, else as sent.
    Json reqs = Json::array();
    for (const auto& r : results)
      if (r.ok)
        reqs.push_back({{"arrival_s", r.start}, {"ttft_s", r.ttft}, {"e2e_s", r.e2e},
                        {"prompt_tokens", r.prompt_tokens > 0 ? r.prompt_tokens : int64_t(input_len)},
                        {"output_tokens", r.output_tokens}});
    write_text_file(trace_out, Json({{"model", model}, {"duration_s", duration}, {"requests", reqs}}).dump(1));
  }
  if (ok < num_prompts) {
    report_error(str_cat(num_prompts - ok, " requests failed; the first: ", first_error));
    return 1;
  }
  return 0;
}

}  // namespace pagoda
