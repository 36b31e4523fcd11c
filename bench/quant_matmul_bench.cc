// CPU quantized matmul at the SmolLM2-135M shapes: GEMV (one token, decode) in GB/s of weights streamed,
// beside the memory read bandwidth measured in the same run (the GEMV ceiling), and GEMM (a 512-token
// prompt) in GOP/s (2 m n k / s). Then the whole model's matmuls per token / per prompt from those times.
//
// usage: quant_matmul_bench [--threads 1,2] [--types Q4_1,Q8_0,...] [--m 512] [--min-time 0.3]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "pagoda/ops/gemm.h"
#include "pagoda/ops/quant/quant.h"
#include "pagoda/ops/quant/quant_matmul.h"

namespace pagoda {
namespace {

using Clock = std::chrono::steady_clock;

struct Options {
  std::vector<int> threads = {1, 2};
  std::vector<QuantType> types = {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1,
                                  QuantType::kQ8_0, QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K};
  int64_t m = 512;
  double min_time = 0.3;
};

[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr, "quant_matmul_bench: %s\nusage: quant_matmul_bench [--threads 1,2] [--types Q4_1,Q8_0] "
               "[--m 512] [--min-time 0.3]\n", why);
  std::exit(2);
}

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at <= s.size()) {
    const size_t comma = std::min(s.find(',', at), s.size());
    out.push_back(s.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help") usage("CPU quantized matmul benchmark");
    if (i + 1 >= argc) usage(("missing value after " + a).c_str());
    const std::string v = argv[++i];
    if (a == "--threads") {
      o.threads.clear();
      for (const auto& t : split(v)) o.threads.push_back(std::max(1, std::atoi(t.c_str())));
    } else if (a == "--types") {
      o.types.clear();
      for (const auto& t : split(v)) {
        bool found = false;
        for (QuantType q : {QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1, QuantType::kQ8_0,
                            QuantType::kQ4_K, QuantType::kQ5_K, QuantType::kQ6_K})
          if (quant_traits(q).name == t) {
            o.types.push_back(q);
            found = true;
          }
        if (!found) usage(("unknown type " + t).c_str());
      }
    } else if (a == "--m") {
      o.m = std::atoll(v.c_str());
      if (o.m < 4) usage("--m needs at least 4 rows (fewer take the GEMV kernels)");
    } else if (a == "--min-time") {
      o.min_time = std::atof(v.c_str());
    } else {
      usage(("unknown option " + a).c_str());
    }
  }
  return o;
}

// Median of 5 timings, each repeating fn until min_time / 5 has passed; seconds per call.
template <typename F>
double time_call(F&& fn, double min_time) {
  std::vector<double> t;
  for (int rep = 0; rep < 5; ++rep) {
    int64_t calls = 0;
    const auto start = Clock::now();
    double el = 0;
    do {
      fn(calls++);
      el = std::chrono::duration<double>(Clock::now() - start).count();
    } while (el < min_time / 5);
    t.push_back(el / double(calls));
  }
  std::sort(t.begin(), t.end());
  return t[2];
}

// Read bandwidth: 8-wide sums over a 512 MiB buffer split between the threads (the GEMV ceiling).
double read_bandwidth(ThreadPool& pool, double min_time) {
  const size_t n = size_t(512) << 20 >> 2;
  static std::vector<float> buf(n, 1.0f);
  std::vector<float> partial(64);
  const double s = time_call(
      [&](int64_t) {
        parallel_for(&pool, 64, 1, [&](int64_t b, int64_t e) {
          for (int64_t c = b; c < e; ++c) {
            typedef float v8 __attribute__((vector_size(32)));
            v8 acc = {};
            const float* p = buf.data() + size_t(c) * (n / 64);
            for (size_t i = 0; i < n / 64; i += 8) {
              v8 v;
              std::memcpy(&v, p + i, 32);
              acc += v;
            }
            partial[size_t(c)] = acc[0] + acc[7];
          }
        });
      },
      min_time);
  return double(n) * 4 / s / 1e9;
}

struct Shape {
  const char* name;
  int64_t n, k;
  int per_model;  // times per SmolLM2-135M forward (30 layers)
};
// SmolLM2-135M: hidden 576, 9 query / 3 KV heads of 64, MLP 1536, vocab 49152 (tied Q8_0 lm_head).
const Shape kShapes[] = {{"q/o 576x576", 576, 576, 60},  {"k/v 192x576", 192, 576, 60},
                         {"gate/up 1536x576", 1536, 576, 60}, {"down 576x1536", 576, 1536, 30}};
const Shape kLmHead = {"lm_head 49152x576", 49152, 576, 1};

std::vector<uint8_t> random_weights(QuantType t, int64_t n, int64_t k) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  std::vector<float> w(static_cast<size_t>(k));
  std::vector<uint8_t> q(quant_row_bytes(t, k) * size_t(n));
  for (int64_t j = 0; j < n; ++j) {
    for (auto& v : w) v = normal(rng);
    quantize_row(t, w.data(), q.data() + quant_row_bytes(t, k) * size_t(j), k);
  }
  return q;
}

struct Result {
  double gemv_s = 0, gemm_s = 0;
};

// GEMV cycles through copies of W totalling > 256 MiB so every call streams from memory, as a model's
// decode step does (its 98 MB of weights do not stay in cache); the GEMM reuses one copy.
Result bench_shape(QuantType t, const Shape& s, int64_t m, ThreadPool& pool, double min_time, bool gemm) {
  const auto w = random_weights(t, s.n, s.k);
  const size_t copies = std::max<size_t>(1, (size_t(256) << 20) / w.size() + 1);
  std::vector<uint8_t> many(w.size() * copies);
  for (size_t c = 0; c < copies; ++c) std::memcpy(many.data() + c * w.size(), w.data(), w.size());
  std::mt19937 rng(2);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(m * s.k));
  for (auto& v : x) v = normal(rng);
  std::vector<float> y(static_cast<size_t>(m * s.n));
  Result r;
  MatmulParams p{.x = x.data(), .w = nullptr, .w_quant = t, .y = y.data(), .m = 1, .n = s.n, .k = s.k};
  r.gemv_s = time_call(
      [&](int64_t call) {
        p.w = many.data() + size_t(call % int64_t(copies)) * w.size();
        matmul(p, &pool);
      },
      min_time);
  if (gemm) {
    p.m = m;
    p.w = w.data();
    r.gemm_s = time_call([&](int64_t) { matmul(p, &pool); }, min_time);
  }
  return r;
}

int run(const Options& o) {
  std::printf("quant_matmul_bench: kernels %s, activations quantized per block to int8; GEMM m = %lld\n",
              quant::quant_isa_name(quant::quant_isas_available().back()), static_cast<long long>(o.m));
  for (int th : o.threads) {
    ThreadPool pool(th);
    const double bw = read_bandwidth(pool, o.min_time);
    std::printf("\n== %d thread%s: memory read bandwidth %.1f GB/s (the GEMV ceiling)\n", th, th > 1 ? "s" : "", bw);
    std::printf("%-5s %-18s %9s %8s %7s %10s\n", "type", "shape (n x k)", "GEMV us", "GB/s", "of bw", "GEMM GOP/s");
    for (QuantType t : o.types) {
      double decode_s = 0, prompt_s = 0;
      double decode_bytes = 0;
      for (const Shape& s : kShapes) {
        const Result r = bench_shape(t, s, o.m, pool, o.min_time, true);
        const double bytes = double(quant_row_bytes(t, s.k)) * double(s.n);
        std::printf("%-5s %-18s %9.1f %8.2f %6.0f%% %10.1f\n", std::string(quant_traits(t).name).c_str(), s.name,
                    r.gemv_s * 1e6, bytes / r.gemv_s / 1e9, 100 * bytes / r.gemv_s / 1e9 / bw,
                    2.0 * double(o.m) * double(s.n) * double(s.k) / r.gemm_s / 1e9);
        decode_s += r.gemv_s * s.per_model;
        prompt_s += r.gemm_s * s.per_model;
        decode_bytes += bytes * s.per_model;
      }
      // The tied lm_head is Q8_0 in the Q4_1 file; decode computes it once per token, a prompt only for its
      // last token.
      const Result lm = bench_shape(QuantType::kQ8_0, kLmHead, o.m, pool, o.min_time, false);
      const double lm_bytes = double(quant_row_bytes(QuantType::kQ8_0, kLmHead.k)) * double(kLmHead.n);
      std::printf("%-5s %-18s %9.1f %8.2f %6.0f%%\n", "Q8_0", kLmHead.name, lm.gemv_s * 1e6, lm_bytes / lm.gemv_s / 1e9,
                  100 * lm_bytes / lm.gemv_s / 1e9 / bw);
      decode_s += lm.gemv_s;
      decode_bytes += lm_bytes;
      std::printf("  SmolLM2-135M %s matmuls: decode %.1f tokens/s (%.1f MB/token at %.2f GB/s); prompt of %lld: "
                  "%.1f tokens/s\n", std::string(quant_traits(t).name).c_str(), 1 / decode_s, decode_bytes / 1e6,
                  decode_bytes / decode_s / 1e9, static_cast<long long>(o.m), double(o.m) / (prompt_s + lm.gemv_s));
    }
  }
  return 0;
}

}  // namespace
}  // namespace pagoda

int main(int argc, char** argv) { return pagoda::run(pagoda::parse(argc, argv)); }
