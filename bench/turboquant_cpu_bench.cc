// CPU decode attention: TURBOQUANT's presets over their packed cache beside CPU_ATTN over a float32 and a
// bfloat16 cache (the `auto` caches of a float32 / bfloat16 model), one decode token of one sequence per call
// (the new token's K/V written, then attention over the whole context), at SmolLM2-135M's attention shape
// (9/3 heads x 64) and Llama-3-8B's (32/8 x 128). Prints the time per layer-step, the cache bytes it reads,
// the achieved GB/s against the memory read bandwidth measured in the same run (the ceiling of a kernel that
// only streams the cache), and the speed-up over the float32 and bfloat16 caches.
//
// Each configuration cycles through enough copies of its cache ("layers") to span >= 256 MiB, so every call
// reads from DRAM as a real model's decode step does (30 layers of cache do not fit the last-level cache).
//
// --clock cpu times with the calling thread's CPU time (use it with --threads 1 on a busy machine).
//
// usage: turboquant_cpu_bench [--threads 2] [--contexts 1024,8192,32768] [--min-time 0.5] [--shapes small,large]
//                             [--clock wall|cpu]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "pagoda/attention/cpu_attn/cpu_attn.h"
#include "pagoda/attention/cpu_attn/cpu_attn_runner.h"
#include "pagoda/attention/turboquant/turboquant_cpu.h"
#include "pagoda/attention/turboquant/turboquant_cpu_runner.h"
#include "pagoda/core/dtype.h"
#include "pagoda/ops/thread_pool.h"

namespace pagoda {
namespace {

bool g_cpu_clock = false;

// Wall clock, or with --clock cpu the calling thread's CPU time: on a machine shared with other work it gives
// what the kernel costs while it runs (meaningful with one thread only).
double now_s() {
  if (g_cpu_clock) {
    timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
  }
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Median of 5 repetitions of fn(call) run for min_time / 5 each; seconds per call.
template <typename F>
double time_call(F&& fn, double min_time) {
  std::vector<double> t;
  int64_t calls = 0;
  for (int rep = 0; rep < 5; ++rep) {
    int64_t n = 0;
    const double start = now_s();
    double el = 0;
    do {
      fn(calls++);
      ++n;
      el = now_s() - start;
    } while (el < min_time / 5);
    t.push_back(el / double(n));
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

// Read bandwidth: 8-wide sums over a 512 MiB buffer split between the threads.
double read_bandwidth(ThreadPool& pool, double min_time) {
  const size_t n = size_t(512) << 20 >> 2;
  std::vector<float> buf(n, 1.0f);
  std::vector<float> partial(64);
  const double s = time_call(
      [&](int64_t) {
        parallel_for(&pool, 64, 1, [&](int64_t b, int64_t e) {
          for (int64_t c = b; c < e; ++c) {
            typedef float v8 __attribute__((vector_size(32)));
            v8 acc[4] = {};
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
      },
      min_time);
  return double(n) * 4 / s / 1e9;
}

struct Shape {
  const char* name;
  int nq, nkv, hd;
};

struct Result {
  double seconds, bytes;
};

// One configuration: `kv` is "float32", "bfloat16" or a turboquant_* preset.
Result bench_one(const Shape& sh, int ctx, const std::string& kv, ThreadPool& pool, double min_time) {
  const int bs = 16, nblk = (ctx + bs - 1) / bs;
  const bool tq = kv.rfind("turboquant_", 0) == 0;
  const DType cache_dtype = tq ? DType::kU8 : *dtype_from_name(kv);
  const int64_t row_bytes = tq ? turboquant_layout(*turboquant_preset(kv), sh.hd).slot_bytes
                               : int64_t(2 * sh.hd) * int64_t(dtype_size(cache_dtype));
  const int64_t layer_bytes = int64_t(nblk) * sh.nkv * bs * row_bytes;
  const int layers = int(std::max<int64_t>(1, ((int64_t(256) << 20) + layer_bytes - 1) / layer_bytes));
  std::vector<uint8_t> cache(size_t(layer_bytes) * size_t(layers));

  // One layer's worth of random keys and values, written by the layer's own writer, copied to the others.
  std::mt19937_64 rng(1);
  std::normal_distribution<float> g;
  const int64_t row = int64_t(sh.nkv) * sh.hd;
  std::vector<float> k(size_t(ctx * row)), v(size_t(ctx * row));
  for (auto& x : k) x = g(rng);
  for (auto& x : v) x = g(rng);
  std::vector<int64_t> slots(static_cast<size_t>(ctx));
  for (int i = 0; i < ctx; ++i) slots[size_t(i)] = i;
  if (tq) {
    const TurboQuantCpuShape s = turboquant_cpu_shape(kv, sh.hd, sh.nq, sh.nkv, bs, 0.0f);
    TurboQuantCpuWorkspace ws(s, 1);
    TurboQuantCpuWriteKvParams w;
    w.key = k.data();
    w.value = v.data();
    w.slot_mapping = slots.data();
    w.num_tokens = ctx;
    w.kv_cache = cache.data();
    w.num_blocks = nblk;
    turboquant_cpu_write_kv(s, w, ws);
  } else {
    CpuAttnWriteKvParams w{.key = k.data(), .value = v.data(), .slot_mapping = slots.data(), .num_tokens = ctx,
                           .kv_cache = cache.data(), .cache_dtype = cache_dtype, .num_blocks = nblk,
                           .num_kv_heads = sh.nkv, .head_size = sh.hd, .block_size = bs};
    cpu_attn_write_kv(w);
  }
  for (int l = 1; l < layers; ++l) std::memcpy(cache.data() + size_t(l) * size_t(layer_bytes), cache.data(), size_t(layer_bytes));

  LayerShape ls;
  ls.num_q_heads = sh.nq;
  ls.num_kv_heads = sh.nkv;
  ls.head_size = sh.hd;
  ls.dtype = DType::kF32;
  ls.kv_dtype = cache_dtype;
  ls.kv_preset = tq ? kv : "";
  ls.layout = KvLayout::kHND;
  ls.block_size = bs;
  RunnerOptions o;
  o.cpu = true;
  o.num_threads = pool.num_threads();
  o.parallel_for = [&pool](int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& body) {
    pool.parallel_for(n, grain, body);
  };
  auto runner = tq ? make_turboquant_cpu_runner(ls, o) : make_cpu_attn_runner(ls, o);
  runner->reserve({});
  runner->plan({{1}, {ctx}}, nullptr);
  std::vector<float> q(size_t(sh.nq) * sh.hd), out(q.size());
  for (auto& x : q) x = g(rng);
  std::vector<int32_t> qsl = {0, 1}, lens = {ctx}, table(static_cast<size_t>(nblk));
  for (int b = 0; b < nblk; ++b) table[size_t(b)] = b;
  const int64_t last_slot = ctx - 1;
  AttentionParams p;
  p.q = q.data();
  p.out = out.data();
  p.num_blocks = nblk;
  p.k = k.data() + size_t(last_slot * row);  // the decode token's own K/V, written to its slot
  p.v = v.data() + size_t(last_slot * row);
  p.slot_mapping = &last_slot;
  p.query_start_loc = qsl.data();
  p.seq_lens = lens.data();
  p.block_tables = table.data();
  p.block_table_stride = nblk;
  p.num_tokens = 1;
  p.num_seqs = 1;
  const double s = time_call(
      [&](int64_t call) {
        p.layer = int(call % layers);
        p.kv_cache = cache.data() + size_t(call % layers) * size_t(layer_bytes);
        runner->run(p, nullptr);
      },
      min_time);
  return {s, double(ctx) * sh.nkv * double(row_bytes)};
}

std::vector<int> parse_ints(const std::string& s) {
  std::vector<int> out;
  size_t at = 0;
  while (at < s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(std::stoi(s.substr(at, comma - at)));
    at = comma + 1;
  }
  return out;
}

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "turboquant_cpu_bench: %s\nusage: turboquant_cpu_bench [--threads 2] "
               "[--contexts 1024,8192,32768] [--min-time 0.5] [--shapes small,large] [--clock wall|cpu]\n", why);
  std::exit(2);
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) {
  using namespace pagoda;
  int threads = 2;
  std::vector<int> contexts = {1024, 8192, 32768};
  double min_time = 0.5;
  std::string shapes = "small,large";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value of " + a).c_str());
      return argv[++i];
    };
    if (a == "--threads") threads = std::stoi(next());
    else if (a == "--contexts") contexts = parse_ints(next());
    else if (a == "--min-time") min_time = std::stod(next());
    else if (a == "--shapes") shapes = next();
    else if (a == "--clock") {
      const std::string c = next();
      if (c != "cpu" && c != "wall") usage("--clock takes cpu or wall");
      g_cpu_clock = c == "cpu";
    }
    else usage(("unknown option " + a).c_str());
  }
  if (threads < 1 || min_time <= 0 || contexts.empty()) usage("bad value");
  ThreadPool pool(threads);
  const double bw = read_bandwidth(pool, min_time);
  std::printf("turboquant_cpu_bench: %d thread%s, memory read bandwidth %.1f GB/s (the streaming ceiling)\n", threads,
              threads > 1 ? "s" : "", bw);
  const Shape all[] = {{"small", 9, 3, 64}, {"large", 32, 8, 128}};
  const char* caches[] = {"float32", "bfloat16", "turboquant_k8v4", "turboquant_4bit_nc", "turboquant_k3v4_nc",
                          "turboquant_3bit_nc"};
  for (const Shape& sh : all) {
    if (shapes.find(sh.name) == std::string::npos) continue;
    for (int ctx : contexts) {
      std::printf("\n== heads %d/%d x %d, context %d, one decode token per layer-step\n", sh.nq, sh.nkv, sh.hd, ctx);
      std::printf("%-20s %10s %12s %9s %8s %9s %9s\n", "cache", "us/step", "MB read", "GB/s", "of peak", "vs f32",
                  "vs bf16");
      double t_f32 = 0, t_bf16 = 0;
      for (const char* kv : caches) {
        const Result r = bench_one(sh, ctx, kv, pool, min_time);
        if (std::string(kv) == "float32") t_f32 = r.seconds;
        if (std::string(kv) == "bfloat16") t_bf16 = r.seconds;
        const double gbs = r.bytes / r.seconds / 1e9;
        std::printf("%-20s %10.1f %12.3f %9.1f %7.0f%% %8.2fx", kv, r.seconds * 1e6, r.bytes / 1e6, gbs, 100 * gbs / bw,
                    t_f32 / r.seconds);
        if (t_bf16 > 0) std::printf(" %8.2fx\n", t_bf16 / r.seconds);
        else std::printf(" %9s\n", "-");
      }
    }
  }
  return 0;
}
