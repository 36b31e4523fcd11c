// TurboQuant decode benchmark: decode attention over a paged KV cache, 32 query / 8 KV heads, head size 128,
// batch x context, for a bf16 cache (TRITON_ATTN's and FLASH_ATTN's runners: the paged FA2 decode kernel), an
// fp8 e4m3 cache (TRITON_ATTN) and each turboquant_* preset (TURBOQUANT's CUDA runner), all through the
// runners' plan/run as the engine drives them.
//
//   turboquant_bench [--batch N]... [--ctx N]... [--rounds R] [--calls N] [--split-cap N]... [--help]
//
// --split-cap N: every preset once more with at most N KV splits in an eager decode step (the split rule's
// cap, RunnerOptions::tq_split_cap, 32 by default), named "preset/capN", in the same rounds.
//
// Timing (docs/benchmarks.md, METHOD.md): each (format, shape) is one CUDA graph of `calls` decode calls back
// to back (as a captured decode step runs its layers), the calls reading `copies` copies of the cache in turn
// (together >= 192 MB, ~4x the L2) so that no call finds its KV in L2; a call's time is a replay's over
// `calls`. The formats of a shape are timed interleaved, `rounds` rounds of one replay each, and each reports
// its median, so that clock drift and neighbours hit every format alike. The device-to-device copy bandwidth
// (bytes read + written) measured in the same run is the ceiling.
// Output: a line per (shape, format): ms per call, TB/s of cache bytes read (and the fraction of the copy
// ceiling), decode tokens/s, and the tokens/s ratio to the faster bf16 runner; the same in
// $OUT/turboquant_bench.csv when OUT is set. Exit status 1 if a shape fails (it prints FAILED and the rest run).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_cuda.cuh"
#include "pagoda/core/turboquant.h"
#include "turboquant_bench_runners.h"

using namespace pagoda;
using namespace pagoda::bench;

namespace {

constexpr int kHq = 32, kHk = 8, kHead = 128, kBlock = 16;
constexpr size_t kRotateBytes = size_t(192) << 20;

// Random bf16 in (-1, 1), or finite e4m3 codes (|v| < 2).
__global__ void fill_plain(uint8_t* p, size_t n, uint32_t seed, bool fp8) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t x = mix(i, seed);
    if (fp8) {
      p[i] = uint8_t(x & 0x77);
    } else if (i % 2 == 0) {
      const __nv_bfloat16 b = __float2bfloat16((float(x & 0xffff) / 65536.f - 0.5f) * 2.f);
      *reinterpret_cast<__nv_bfloat16*>(p + i) = b;
    }
  }
}

// Random codes with finite fp16 fields (norm in [1, 2), scale in [2^-6, 2^-5), zero in (-2, -1]) and finite
// FP8 keys: the kernel's work on real data, not on zeros or NaN.
__global__ void fill_turboquant(uint8_t* p, size_t n, uint32_t seed, TurboQuantLayout L) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t x = mix(i, seed);
    const int o = int(i % size_t(L.slot_bytes));
    auto f16_byte = [&](int field, uint16_t base) {
      const uint16_t h = uint16_t(base | (x & 0x3ff));
      return uint8_t(o == field ? h & 0xff : h >> 8);
    };
    uint8_t b = uint8_t(x >> 8);
    if (L.key_bits == 8 && o < L.key_code_bytes) b &= 0x77;
    if (L.key_norm_offset >= 0 && (o == L.key_norm_offset || o == L.key_norm_offset + 1)) b = f16_byte(L.key_norm_offset, 0x3C00);
    if (o == L.value_scale_offset || o == L.value_scale_offset + 1) b = f16_byte(L.value_scale_offset, 0x2000);
    if (o == L.value_zero_offset || o == L.value_zero_offset + 1) b = f16_byte(L.value_zero_offset, 0xBC00);
    p[i] = b;
  }
}

struct Format {
  std::string name;     // "bf16", "fp8", "turboquant_k3v4_nc"
  std::string backend;  // "TRITON_ATTN", "FLASH_ATTN", "TURBOQUANT"
  double token_bytes;   // cache bytes per (token, KV head)
  int split_cap = 0;    // TURBOQUANT: RunnerOptions::tq_split_cap (0: the default)
  std::string label() const { return split_cap > 0 ? name + "/cap" + std::to_string(split_cap) : name; }
};

std::vector<Format> formats(const std::vector<int>& split_caps) {
  std::vector<Format> f = {{"bf16", "TRITON_ATTN", 2.0 * 2 * kHead}, {"bf16", "FLASH_ATTN", 2.0 * 2 * kHead},
                           {"fp8", "TRITON_ATTN", 2.0 * kHead}};
  std::vector<int> caps = {0};
  caps.insert(caps.end(), split_caps.begin(), split_caps.end());
  for (int cap : caps)
    for (const TurboQuantPreset& p : kTurboQuantPresets)
      f.push_back({std::string(p.name), "TURBOQUANT", double(turboquant_layout(p, kHead).slot_bytes), cap});
  return f;
}

// One (format, shape): its caches, runner and captured graph of `calls` decode calls.
struct Setup {
  std::unique_ptr<DeviceBuffer> cache, q, out, qsl, sl, bt;
  std::shared_ptr<BenchRunner> runner;
  cudaGraphExec_t exec = nullptr;
  cudaStream_t stream = nullptr;
  ~Setup() {
    if (exec) cudaGraphExecDestroy(exec);
    if (stream) cudaStreamDestroy(stream);
  }
};

std::unique_ptr<Setup> prepare(const Format& f, int batch, int ctx, int calls, int num_sms) {
  auto s = std::make_unique<Setup>();
  const int blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const size_t num_blocks = size_t(batch) * blocks_per_seq;
  const size_t cache_bytes = size_t(double(num_blocks) * kBlock * kHk * f.token_bytes);
  const int copies = int(std::clamp<size_t>((kRotateBytes + cache_bytes - 1) / cache_bytes, 1, 64));
  s->cache = std::make_unique<DeviceBuffer>(cache_bytes * copies);
  if (f.backend == "TURBOQUANT") {
    const TurboQuantPreset& p = *turboquant_preset(f.name);
    fill_turboquant<<<4096, 256>>>(s->cache->as<uint8_t>(), cache_bytes * copies, 7, turboquant_layout(p, kHead));
  } else {
    fill_plain<<<4096, 256>>>(s->cache->as<uint8_t>(), cache_bytes * copies, 7, f.name == "fp8");
  }
  CK(cudaGetLastError());
  const size_t q_bytes = size_t(batch) * kHq * kHead * 2;
  s->q = std::make_unique<DeviceBuffer>(q_bytes);
  s->out = std::make_unique<DeviceBuffer>(q_bytes);
  fill_plain<<<256, 256>>>(s->q->as<uint8_t>(), q_bytes, 3, false);
  CK(cudaGetLastError());
  std::vector<int> qsl(size_t(batch) + 1), sl(size_t(batch), ctx), bt(size_t(copies) * num_blocks);
  for (int i = 0; i <= batch; ++i) qsl[size_t(i)] = i;
  // Sequence i uses blocks i, batch + i, 2 batch + i, ... of its copy (scattered, as attention_bench).
  for (int c = 0; c < copies; ++c)
    for (int i = 0; i < batch; ++i)
      for (int b = 0; b < blocks_per_seq; ++b)
        bt[size_t(c) * num_blocks + size_t(i) * blocks_per_seq + b] = int(c * num_blocks) + b * batch + i;
  s->qsl = std::make_unique<DeviceBuffer>(qsl.size() * 4);
  s->sl = std::make_unique<DeviceBuffer>(sl.size() * 4);
  s->bt = std::make_unique<DeviceBuffer>(bt.size() * 4);
  CK(cudaMemcpy(s->qsl->as<void>(), qsl.data(), qsl.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(s->sl->as<void>(), sl.data(), sl.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(s->bt->as<void>(), bt.data(), bt.size() * 4, cudaMemcpyHostToDevice));
  s->runner = bench_make_runner(f.backend, f.name, kHq, kHk, kHead, kBlock, num_sms, batch, ctx, f.split_cap);
  CK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking));
  bench_plan(*s->runner, batch, ctx, s->stream);
  auto call = [&](int i) {
    BenchCall a;
    a.layer = i % 30;
    a.q = s->q->as<void>();
    a.out = s->out->as<void>();
    a.kv_cache = s->cache->as<void>();
    a.num_blocks = int64_t(num_blocks) * copies;
    a.query_start_loc = s->qsl->as<int>();
    a.seq_lens = s->sl->as<int>();
    a.block_tables = s->bt->as<int>() + size_t(i % copies) * num_blocks;
    a.block_table_stride = blocks_per_seq;
    a.batch = batch;
    bench_run(*s->runner, a, s->stream);
  };
  for (int i = 0; i < calls; ++i) call(i);  // first use outside the capture (function attributes)
  CK(cudaStreamSynchronize(s->stream));
  cudaGraph_t g = nullptr;
  CK(cudaStreamBeginCapture(s->stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) call(i);
  CK(cudaStreamEndCapture(s->stream, &g));
  const cudaError_t e = cudaGraphInstantiate(&s->exec, g, 0);
  cudaGraphDestroy(g);
  CK(e);
  for (int i = 0; i < 2; ++i) CK(cudaGraphLaunch(s->exec, s->stream));
  CK(cudaStreamSynchronize(s->stream));
  return s;
}

struct Args {
  std::vector<int> batches, ctxs, split_caps;
  int rounds = 15, calls = 20;
};

[[noreturn]] void usage(int status) {
  std::fprintf(status ? stderr : stdout,
               "usage: turboquant_bench [--batch N]... [--ctx N]... [--rounds R] [--calls N] [--split-cap N]...\n"
               "  defaults: batch 1 16 64 128, ctx 1024 4096 16384 32768, 15 rounds of 20-call graphs\n"
               "  --split-cap N: each preset also with at most N KV splits (eager decode; default 32)\n");
  std::exit(status);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string s = argv[i];
    auto value = [&] {
      if (i + 1 >= argc) usage(2);
      const int v = std::atoi(argv[++i]);
      if (v <= 0) usage(2);
      return v;
    };
    if (s == "--help") usage(0);
    else if (s == "--batch") a.batches.push_back(value());
    else if (s == "--ctx") a.ctxs.push_back(value());
    else if (s == "--rounds") a.rounds = value();
    else if (s == "--calls") a.calls = value();
    else if (s == "--split-cap") a.split_caps.push_back(value());
    else usage(2);
  }
  if (a.batches.empty()) a.batches = {1, 16, 64, 128};
  if (a.ctxs.empty()) a.ctxs = {1024, 4096, 16384, 32768};
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "turboquant_bench: no CUDA device\n");
    return 1;
  }
  const double ceiling = measure_copy_tbs();
  std::printf("device %s, %d SMs; copy bandwidth (read + write) %.2f TB/s\n", prop.name, prop.multiProcessorCount,
              ceiling);
  FILE* csv = nullptr;
  if (const char* out = std::getenv("OUT")) {
    csv = std::fopen((std::string(out) + "/turboquant_bench.csv").c_str(), "w");
    if (csv) std::fprintf(csv, "batch,ctx,format,backend,ms,tbs,tokens_per_s,ratio_vs_bf16\n");
  }
  int status = 0;
  const std::vector<Format> fmts = formats(args.split_caps);
  for (int ctx : args.ctxs)
    for (int batch : args.batches) {
      std::vector<std::unique_ptr<Setup>> setups;
      try {
        for (const Format& f : fmts) setups.push_back(prepare(f, batch, ctx, args.calls, prop.multiProcessorCount));
        std::vector<std::vector<float>> t(fmts.size());
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        for (int r = 0; r < args.rounds; ++r)
          for (size_t i = 0; i < fmts.size(); ++i) {
            CK(cudaEventRecord(e0, setups[i]->stream));
            CK(cudaGraphLaunch(setups[i]->exec, setups[i]->stream));
            CK(cudaEventRecord(e1, setups[i]->stream));
            CK(cudaEventSynchronize(e1));
            float ms;
            CK(cudaEventElapsedTime(&ms, e0, e1));
            t[i].push_back(ms / float(args.calls));
          }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        std::vector<double> med(fmts.size());
        double bf16 = INFINITY;
        for (size_t i = 0; i < fmts.size(); ++i) {
          std::sort(t[i].begin(), t[i].end());
          med[i] = t[i][t[i].size() / 2];
          if (fmts[i].name == "bf16") bf16 = std::min(bf16, med[i]);
        }
        for (size_t i = 0; i < fmts.size(); ++i) {
          const double bytes = double(batch) * ctx * kHk * fmts[i].token_bytes;
          const double tbs = bytes / (med[i] * 1e-3) / 1e12;
          const double tok = batch / (med[i] * 1e-3);
          std::printf("decode batch=%4d ctx=%6d %-26s %-12s %9.4f ms %6.2f TB/s (%3.0f%% of copy) %10.0f tok/s %5.2fx bf16\n",
                      batch, ctx, fmts[i].label().c_str(), fmts[i].backend.c_str(), med[i], tbs, 100 * tbs / ceiling,
                      tok, bf16 / med[i]);
          if (csv)
            std::fprintf(csv, "%d,%d,%s,%s,%.5f,%.4f,%.1f,%.4f\n", batch, ctx, fmts[i].label().c_str(),
                         fmts[i].backend.c_str(), med[i], tbs, tok, bf16 / med[i]);
        }
      } catch (const std::exception& e) {
        std::printf("decode batch=%4d ctx=%6d FAILED: %s\n", batch, ctx, e.what());
        status = 1;
        (void)cudaGetLastError();
      }
      std::fflush(stdout);
    }
  if (csv) std::fclose(csv);
  return status;
}
