// CPU decode at long context for several KV cache dtypes on one model, in one run: ms per decode step (one
// sequence, one token, logits included) at each context length, tokens/s, the KV bytes a step reads, and the
// bytes a step reads in all (weights + KV) against the memory read bandwidth measured in the same run.
//
// Filling 32k tokens by prefill would take minutes on a small CPU, so each dtype prefills --fill tokens of a
// real text (encoded by its own cache write), and those blocks' bytes are copied over the rest of the
// context (CpuModelRunner::kv_cache_data). Attention then reads real encoded keys and values at every
// position and does exactly the work of a real context of that length; only the positions repeat. The model
// is one copy of the weights shared by one runner per dtype; the timed steps interleave the dtypes (each
// repeat runs every context and dtype once, the dtype order rotating), and the table gives medians with
// the quartiles beside them (the spread a shared machine adds).
//
// --clock cpu times the steps with the calling thread's CPU time instead of the wall clock (with --threads 1,
// so that the whole step runs on that thread): on a machine shared with other work it gives what a step costs
// while it runs, where wall times also hold the time other processes took the cores.
//
// usage: cpu_decode_bench [--model M] [--dtypes auto,fp8,...] [--contexts 1024,8192,32768] [--fill 512]
//                         [--repeats 15] [--threads N] [--clock wall|cpu] [--block-size N] [--text FILE]
//                         [--output-json FILE]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/engine/model_setup.h"
#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/ops/thread_pool.h"

namespace pagoda {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::string model = "smollm2:135m";
  std::vector<std::string> dtypes = {"auto", "fp8", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                                     "turboquant_3bit_nc"};
  std::vector<int> contexts = {1024, 8192, 32768};
  int fill = 512;
  int repeats = 15;
  int threads = 0;
  int block_size = 0;  // 0: as selected
  bool cpu_clock = false;
  std::string text = "/usr/share/common-licenses/GPL-3";
  std::string json_out;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "cpu_decode_bench: %s\nusage: cpu_decode_bench [--model M] [--dtypes auto,fp8,...] "
               "[--contexts 1024,8192,32768] [--fill 512] [--repeats 15] [--threads N] [--clock wall|cpu] "
               "[--block-size N] [--text FILE] [--output-json FILE]\n", why.c_str());
  std::exit(2);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');)
    if (!item.empty()) out.push_back(item);
  return out;
}

int positive(const std::string& opt, const std::string& v) {
  char* end = nullptr;
  const long x = std::strtol(v.c_str(), &end, 10);
  if (v.empty() || *end != 0 || x < 1 || x > (1 << 24)) usage(opt + " needs a positive integer, got '" + v + "'");
  return int(x);
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") usage("CPU decode tokens/s at long context for several KV cache dtypes");
    if (i + 1 >= argc) usage("missing value after " + a);
    const std::string v = argv[++i];
    if (a == "--model") o.model = v;
    else if (a == "--dtypes") o.dtypes = split_list(v);
    else if (a == "--contexts") {
      o.contexts.clear();
      for (const std::string& c : split_list(v)) o.contexts.push_back(positive(a, c));
    } else if (a == "--fill") o.fill = positive(a, v);
    else if (a == "--repeats") o.repeats = positive(a, v);
    else if (a == "--threads") o.threads = positive(a, v);
    else if (a == "--block-size") o.block_size = positive(a, v);
    else if (a == "--clock") {
      if (v != "wall" && v != "cpu") usage("--clock takes wall or cpu");
      o.cpu_clock = v == "cpu";
    }
    else if (a == "--text") o.text = v;
    else if (a == "--output-json") o.json_out = v;
    else usage("unknown option " + a);
  }
  if (o.dtypes.empty() || o.contexts.empty()) usage("--dtypes and --contexts need at least one entry");
  if (o.cpu_clock && o.threads != 1) usage("--clock cpu needs --threads 1 (the calling thread's CPU time)");
  std::sort(o.contexts.begin(), o.contexts.end());
  return o;
}

// Seconds of the wall clock, or of the calling thread's CPU time.
double now_s(bool cpu_clock) {
  if (cpu_clock) {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  }
  return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}

// Read bandwidth: 8-wide sums over a 512 MiB buffer split between the threads (the ceiling of a decode step,
// which streams the weights and the KV cache once). Median of 5 passes; bytes/s.
double read_bandwidth(ThreadPool& pool, bool cpu_clock) {
  const size_t n = size_t(512) << 20 >> 2;
  std::vector<float> buf(n, 1.0f);
  std::vector<float> partial(64);
  std::vector<double> t;
  for (int rep = 0; rep < 6; ++rep) {
    const double t0 = now_s(cpu_clock);
    parallel_for(&pool, 64, 1, [&](int64_t b, int64_t e) {
      for (int64_t c = b; c < e; ++c) {
        typedef float v8 __attribute__((vector_size(32)));
        v8 acc[4] = {};  // 4 independent chains: the adds' latency must not be the limit
        const float* p = buf.data() + size_t(c) * (n / 64);
        for (size_t i = 0; i < n / 64; i += 32)
          for (int a = 0; a < 4; ++a) {
            v8 v;
            std::memcpy(&v, p + i + 8 * a, 32);
            acc[a] += v;
          }
        partial[size_t(c)] = acc[0][0] + acc[1][1] + acc[2][2] + acc[3][3];
      }
    });
    if (rep > 0) t.push_back(now_s(cpu_clock) - t0);  // the first pass faults the pages in
  }
  std::sort(t.begin(), t.end());
  return double(n) * 4 / t[t.size() / 2];
}

struct Contender {
  std::string dtype;
  EngineSetup setup;
  CpuModelRunner* runner = nullptr;
  std::vector<std::vector<double>> times;  // [context][repeat], seconds
};

// The KV bytes a decode step at context `ctx` reads: every layer's ctx + 1 tokens in its own format.
double kv_bytes_per_step(CpuModelRunner& r, int ctx) {
  double b = 0;
  for (int l = 0; l < r.config().num_layers; ++l)
    b += double(ctx + 1) * double(r.kv_cache_block_bytes(l)) / double(r.cache_options().block_size);
  return b;
}

ForwardBatch one_sequence(const std::vector<int32_t>& tokens, int seq_len, int block_size) {
  ForwardBatch b;
  b.token_ids = tokens;
  b.query_start_loc = {0, int32_t(tokens.size())};
  b.seq_lens = {seq_len};
  b.max_blocks_per_seq = (seq_len + block_size - 1) / block_size;
  for (int k = 0; k < b.max_blocks_per_seq; ++k) b.block_tables.push_back(k);
  b.logits_indices = {int32_t(tokens.size()) - 1};
  return b;
}

int run(const Options& o) {
  set_log_level(LogLevel::kError);  // the engine's startup lines, once per dtype, would bury the table
  std::ifstream in(o.text, std::ios::binary);
  if (!in) usage("cannot read --text " + o.text);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int max_ctx = o.contexts.back();

  EngineArgs args;
  args.model.model = o.model;
  args.device.device = "cpu";
  args.device.cpu_threads = o.threads;
  args.model.max_model_len = std::max(max_ctx + 1, o.fill);
  if (o.block_size > 0) args.cache.block_size = o.block_size;
  const int min_bs = o.block_size > 0 ? o.block_size : 16;  // the smallest block pagoda selects
  args.cache.num_gpu_blocks_override = (max_ctx + 1 + min_bs - 1) / min_bs + 1;
  args.scheduler.max_num_batched_tokens = std::max(8192, o.fill);
  std::vector<Contender> cs;
  for (const std::string& d : o.dtypes) {
    EngineArgs a = args;
    a.cache.kv_cache_dtype = d;
    try {
      ValidatedArgs v = validate_engine_args(a);
      Contender c;
      c.dtype = d;
      c.setup = setup_engine(a, v, cs.empty() ? nullptr : &cs.front().setup.model);
      c.runner = dynamic_cast<CpuModelRunner*>(c.setup.runner.get());
      PAGODA_CHECK(c.runner != nullptr, "--device cpu gave a runner that is not the CPU's");
      cs.push_back(std::move(c));
    } catch (const Error& e) {
      std::printf("%s: skipped, it does not run here: %s\n", d.c_str(), e.what());
    }
  }
  if (cs.empty()) usage("no dtype could be set up");
  const EngineSetup& base = cs.front().setup;
  if (!base.tokenizer) usage("the model has no tokenizer; the cache is filled from a tokenized text");
  std::vector<int> ids = base.tokenizer->encode(text, true);
  if (int(ids.size()) < o.fill + 1) usage("--text has fewer than --fill + 1 tokens");
  const std::vector<int32_t> fill(ids.begin(), ids.begin() + o.fill);
  const std::vector<int32_t> next = {ids[size_t(o.fill)]};
  if (max_ctx > base.runner->config().max_position_embeddings)
    std::printf("note: contexts beyond the model's %d positions run RoPE extrapolated; the work per step is the same\n",
                base.runner->config().max_position_embeddings);

  // Fill: prefill the text, then copy its blocks over the longest context.
  for (Contender& c : cs) {
    CpuModelRunner& r = *c.runner;
    const int bs = r.cache_options().block_size;
    if (o.fill % bs != 0) usage("--fill must be a multiple of the block size " + std::to_string(bs));
    const int64_t need = (max_ctx + 1 + bs - 1) / bs;
    PAGODA_CHECK(need <= r.cache_options().num_blocks, "cache of ", r.cache_options().num_blocks, " blocks, need ", need);
    r.forward(one_sequence(fill, o.fill, bs));
    const int64_t filled = o.fill / bs;
    for (int l = 0; l < r.config().num_layers; ++l) {
      uint8_t* data = r.kv_cache_data(l);
      const size_t bb = r.kv_cache_block_bytes(l);
      for (int64_t k = filled; k < need; ++k) std::memcpy(data + size_t(k) * bb, data + size_t(k % filled) * bb, bb);
    }
    c.times.assign(o.contexts.size(), {});
  }

  ThreadPool pool(o.threads);
  const double bandwidth = read_bandwidth(pool, o.cpu_clock);
  // One untimed round, then the timed repeats; within a repeat every context and dtype once, the dtype
  // order rotating so that no dtype always follows the same one.
  for (int rep = -1; rep < o.repeats; ++rep) {
    for (size_t ci = 0; ci < o.contexts.size(); ++ci) {
      for (size_t k = 0; k < cs.size(); ++k) {
        Contender& c = cs[(k + size_t(std::max(rep, 0))) % cs.size()];
        const ForwardBatch b = one_sequence(next, o.contexts[ci] + 1, c.runner->cache_options().block_size);
        const double t0 = now_s(o.cpu_clock);
        c.runner->forward(b);
        const double s = now_s(o.cpu_clock) - t0;
        if (rep >= 0) c.times[ci].push_back(s);
      }
    }
    std::fprintf(stderr, "\rrepeat %d/%d", std::max(rep + 1, 0), o.repeats);
  }
  std::fprintf(stderr, "\n");

  const double wbytes = base.model.weights ? weight_bytes_per_step(*base.model.weights) : 0.0;
  std::printf("model %s (%.1f MB of weights read per step), %s, %d threads, memory read bandwidth %.1f GB/s "
              "(measured now)\n", base.model_name.c_str(), wbytes / 1e6, describe(base.device).c_str(), pool.num_threads(),
              bandwidth / 1e9);
  std::printf("cache filled with %d tokens of %s, copied over the context; median of %d steps, %s\n", o.fill,
              o.text.c_str(), o.repeats, o.cpu_clock ? "the thread's CPU time" : "wall clock");
  std::printf("%-8s %-20s %10s %15s %10s %14s %10s %12s %10s\n", "context", "kv_cache_dtype", "ms/step",
              "(p25-p75)", "tokens/s", "KV MB/step", "KV / auto", "speed / auto", "GB/s");
  std::string json = "{\"model\": \"" + base.model_name + "\", \"threads\": " + std::to_string(pool.num_threads()) +
                     ", \"clock\": \"" + (o.cpu_clock ? "cpu" : "wall") + "\"" +
                     ", \"read_bandwidth_gbs\": " + std::to_string(bandwidth / 1e9) + ", \"weight_bytes\": " +
                     std::to_string(wbytes) + ", \"fill_tokens\": " + std::to_string(o.fill) + ", \"rows\": [";
  bool first_row = true;
  for (size_t ci = 0; ci < o.contexts.size(); ++ci) {
    const int ctx = o.contexts[ci];
    double auto_s = 0, auto_kv = 0;
    for (Contender& c : cs) {
      std::vector<double> t = c.times[ci];
      std::sort(t.begin(), t.end());
      const double s = t[t.size() / 2], p25 = t[t.size() / 4], p75 = t[t.size() * 3 / 4];
      const double kv = kv_bytes_per_step(*c.runner, ctx);
      if (&c == &cs.front()) auto_s = s, auto_kv = kv;
      const double gbs = (wbytes + kv) / s / 1e9;
      char spread[32];
      std::snprintf(spread, sizeof spread, "(%.1f-%.1f)", p25 * 1e3, p75 * 1e3);
      std::printf("%-8d %-20s %10.3f %15s %10.1f %14.2f %10.3f %12.2f %10.1f\n", ctx, c.dtype.c_str(), s * 1e3, spread,
                  1 / s, kv / 1e6, kv / auto_kv, auto_s / s, gbs);
      json += std::string(first_row ? "" : ", ") + "{\"context\": " + std::to_string(ctx) + ", \"kv_cache_dtype\": \"" +
              c.dtype + "\", \"ms_per_step\": " + std::to_string(s * 1e3) + ", \"ms_p25\": " + std::to_string(p25 * 1e3) +
              ", \"ms_p75\": " + std::to_string(p75 * 1e3) + ", \"tokens_per_s\": " +
              std::to_string(1 / s) + ", \"kv_bytes_per_step\": " + std::to_string(kv) + ", \"kv_ratio_to_first\": " +
              std::to_string(kv / auto_kv) + ", \"speed_ratio_to_first\": " + std::to_string(auto_s / s) +
              ", \"achieved_gbs\": " + std::to_string(gbs) + "}";
      first_row = false;
    }
  }
  json += "]}";
  if (cs.front().dtype != "auto") std::printf("(ratios are to %s, the first dtype)\n", cs.front().dtype.c_str());
  if (!o.json_out.empty()) {
    std::ofstream out(o.json_out);
    out << json << "\n";
    if (!out) usage("cannot write " + o.json_out);
  }
  return 0;
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  const pagoda::Options o = pagoda::parse(argc, argv);
  try {
    return pagoda::run(o);
  } catch (const pagoda::Error& e) {
    std::fprintf(stderr, "cpu_decode_bench: %s\n", e.what());
    return 1;
  }
}
