// FLASHINFER benchmark: pagoda's FLASHINFER kernels over their plan (flashinfer_plan.h, flashinfer_cuda.h) on
// Llama-3-8B's attention (32 query / 8 KV heads, head size 128, bf16 queries), with the device-to-device copy
// bandwidth measured in the same run as the ceiling. bench/peers/flashinfer_peer.py runs the FlashInfer library
// on the same shapes and prints the same lines and CSV columns (impl FLASHINFER-LIB).
//
//   flashinfer_bench [--only decode|pages|prefill|cascade] [--quick] [--cold] [--rounds R] [--calls N]
//                    [--cooldown MS] [--help]
//
// decode   batch 1/16/64/128/256 x context 1k/4k/8k/32k, pages of 16, NHD: KV bf16, e4m3 with FP8 queries
//          (variant fp8-q), e4m3 with bf16 queries (variant bf16-q: disable_flashinfer_q_quantization), e5m2.
// pages    batch 64, context 4096, pages of 1/8/16/64/128 in NHD and HND, KV bf16.
// prefill  (batch, length) (1, 8192), (4, 4096), (16, 1024), causal, no earlier context (TFLOP/s).
// cascade  256 requests decoding one token each over a shared 32768-token prefix (the same blocks, as the prefix
//          cache gives) plus 1 + (i % 64) tokens of their own: cascade off (plain decode) and on. Both report the
//          plain decode's bytes over their time, so the cascade's speedup shows as a higher equivalent TB/s.
// --quick: one shape of each kind. --cooldown MS: the GPU idles MS milliseconds before each shape, so that every
// shape starts from the same clocks (as the peer's --cooldown).
//
// Timing (docs/benchmarks.md, METHOD.md): per shape one CUDA graph of `calls` run() calls back to back (plan
// built and uploaded once, outside the graph, as the engine plans a step once for all its layers), decode calls
// reading copies of the cache in turn (together >= 192 MB, ~4x the L2) so that no call finds its KV in L2; a
// call's time is a replay's over `calls`, the median of `rounds` replays. --cold: instead, each timed call is
// one eager call after a 256 MB memset that evicts L2 and keeps the GPU busy while the host enqueues the call,
// the timing bench/peers/flashinfer_peer.py uses for the library (median of `rounds` x `calls` calls).
// Output: one line per (shape, variant), `PAGODA decode batch=B ctx=C page=P layout=L kv=K variant=V: X ms,
// Y TB/s (Z% of copy) [N CTAs for S slots, M merged, decode|general kernel]` (prefill: TFLOP/s; the bracket is
// the plan: attend CTAs, the split target, tokens merged from slabs, the kernel that runs it), and $OUT/flashinfer_bench.csv (impl,kind,batch,ctx,page,layout,kv,
// variant,ms,tbps,tflops) when OUT is set, appended to (the header only in a new file) so that a device
// script's calls of one section each fill one file. A shape that fails prints FAILED and the rest run; exit status 1.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "bench_cuda.cuh"
#include "pagoda/attention/flashinfer/flashinfer_cuda.h"

using namespace pagoda;
using namespace pagoda::bench;

namespace {

constexpr int kHq = 32, kHk = 8, kHead = 128;
constexpr size_t kRotateBytes = size_t(192) << 20;

// Random bf16 in (-1, 1) (16-bit elements), or finite fp8 codes of |v| < 2 in either format (bytes).
__global__ void fill(uint8_t* p, size_t n, uint32_t seed, bool fp8) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint32_t x = mix(i, seed);
    if (fp8) {
      p[i] = uint8_t(x & 0x37);  // exponent bits capped: finite and small in e4m3 and e5m2
    } else if (i % 2 == 0) {
      *reinterpret_cast<__nv_bfloat16*>(p + i) = __float2bfloat16((float(x & 0xffff) / 65536.f - 0.5f) * 2.f);
    }
  }
}

struct Shape {
  std::string kind;  // decode, pages, prefill, cascade
  int batch = 1, ctx = 1024, q_len = 1, page = 16;
  KvLayout layout = KvLayout::kNHD;
  DType kv = DType::kBF16;
  bool quantize_q = false, cascade = false;
  int shared = 0;  // cascade: shared prefix keys
  std::string variant() const {
    if (kind == "cascade") return cascade ? "on" : "off";
    if (kv == DType::kF8E4M3) return quantize_q ? "fp8-q" : "bf16-q";
    return "-";
  }
  const char* kv_name() const { return kv == DType::kBF16 ? "bf16" : kv == DType::kF8E4M3 ? "e4m3" : "e5m2"; }
};

int seq_len(const Shape& s, int i) { return s.kind == "cascade" ? s.shared + 1 + i % 64 : s.ctx; }

struct Result {
  double ms = 0, bytes = 0, flops = 0;
  int ctas = 0, target = 0, merged = 0;  // the plan: attend CTAs, the split target (SMs x resident), merged tokens
  bool decode = false;                   // the decode kernel serves the plan (fi_decode_plan)
};

Result run_shape(const Shape& s, int num_sms, int rounds, int calls, bool cold) {
  const size_t es = s.kv == DType::kBF16 ? 2 : 1;
  const size_t row_bytes = size_t(2) * kHead * es;  // K and V of one (token, KV head)
  // Block tables: every sequence's blocks scattered over the cache (block j of sequence i at j * batch + i);
  // with a shared prefix, its blocks come first and every member points at them.
  std::vector<int> lens(size_t(s.batch)), qsl(size_t(s.batch) + 1, 0);
  int stride = 0;
  for (int i = 0; i < s.batch; ++i) {
    lens[size_t(i)] = seq_len(s, i);
    qsl[size_t(i) + 1] = qsl[size_t(i)] + s.q_len;
    stride = std::max(stride, (lens[size_t(i)] + s.page - 1) / s.page);
  }
  const int shared_blocks = s.shared / s.page;
  std::vector<int> table(size_t(s.batch) * stride, 0);
  int num_blocks = shared_blocks;
  for (int j = shared_blocks; j < stride; ++j)
    for (int i = 0; i < s.batch; ++i)
      if (j * s.page < lens[size_t(i)]) table[size_t(i) * stride + j] = num_blocks++;
  for (int i = 0; i < s.batch; ++i)
    for (int j = 0; j < shared_blocks; ++j) table[size_t(i) * stride + j] = j;
  const size_t cache_bytes = size_t(num_blocks) * s.page * kHk * row_bytes;
  const int copies = s.kind == "prefill" ? 1 : int(std::clamp<size_t>((kRotateBytes + cache_bytes - 1) / cache_bytes, 1, 64));
  std::vector<int> tables(size_t(copies) * table.size());
  for (int c = 0; c < copies; ++c)
    for (size_t k = 0; k < table.size(); ++k) tables[size_t(c) * table.size() + k] = table[k] + c * num_blocks;

  DeviceBuffer cache(cache_bytes * copies), q(size_t(qsl.back()) * kHq * kHead * 2), out(size_t(qsl.back()) * kHq * kHead * 2),
      dqsl(qsl.size() * 4), dlens(lens.size() * 4), dtables(tables.size() * 4);
  fill<<<4096, 256>>>(cache.as<uint8_t>(), cache_bytes * copies, 7, s.kv != DType::kBF16);
  fill<<<1024, 256>>>(q.as<uint8_t>(), size_t(qsl.back()) * kHq * kHead * 2, 3, false);
  CK(cudaGetLastError());
  CK(cudaMemcpy(dqsl.as<void>(), qsl.data(), qsl.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dlens.as<void>(), lens.data(), lens.size() * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(dtables.as<void>(), tables.data(), tables.size() * 4, cudaMemcpyHostToDevice));

  FiPlan plan;
  FiPlanLimits lim;
  lim.max_tokens = qsl.back();
  lim.max_seqs = s.batch;
  lim.max_model_len = *std::max_element(lens.begin(), lens.end());
  lim.target_ctas = num_sms * fi_cuda_resident_ctas(DType::kBF16, s.kv, kHead, s.quantize_q);
  lim.cascade = s.cascade;
  plan.reserve({kHq, kHk, s.page, 0, true}, lim);
  std::vector<int> q_lens(size_t(s.batch), s.q_len);
  plan.build({q_lens.data(), lens.data(), table.data(), stride, s.batch});
  if (s.cascade && plan.cascade().groups.empty()) throw std::runtime_error("the plan found no shared-prefix group");

  cudaStream_t stream;
  CK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  FiCudaParams p;
  fi_cuda_plan_alloc(plan, kHq, kHead, &p.plan);
  fi_cuda_plan_upload(plan, &p.plan, stream);
  p.q = q.as<void>();
  p.out = out.as<void>();
  p.dtype = DType::kBF16;
  p.kv_cache = cache.as<void>();
  p.kv_dtype = s.kv;
  p.layout = s.layout;
  p.num_q_heads = kHq;
  p.num_kv_heads = kHk;
  p.head_size = kHead;
  p.block_size = s.page;
  p.quantize_q = s.quantize_q;
  p.query_start_loc = dqsl.as<int32_t>();
  p.seq_lens = dlens.as<int32_t>();
  p.block_table_stride = stride;
  auto call = [&](int i) {
    p.block_tables = dtables.as<int32_t>() + size_t(i % copies) * table.size();
    fi_cuda_run(p, stream);
  };
  for (int i = 0; i < calls; ++i) call(i);  // first use outside the capture (function attributes)
  CK(cudaStreamSynchronize(stream));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  if (cold) {
    DeviceBuffer flush(size_t(256) << 20);
    for (int r = 0; r < rounds * calls + 2; ++r) {
      CK(cudaMemsetAsync(flush.as<void>(), r & 0xff, size_t(256) << 20, stream));
      CK(cudaEventRecord(e0, stream));
      call(r);
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 2) t.push_back(ms);
    }
  } else {
    cudaGraph_t g = nullptr;
    cudaGraphExec_t exec = nullptr;
    CK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < calls; ++i) call(i);
    CK(cudaStreamEndCapture(stream, &g));
    const cudaError_t e = cudaGraphInstantiate(&exec, g, 0);
    cudaGraphDestroy(g);
    CK(e);
    for (int r = 0; r < rounds + 2; ++r) {
      CK(cudaEventRecord(e0, stream));
      CK(cudaGraphLaunch(exec, stream));
      CK(cudaEventRecord(e1, stream));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (r >= 2) t.push_back(ms / float(calls));
    }
    cudaGraphExecDestroy(exec);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  fi_cuda_plan_free(&p.plan);
  cudaStreamDestroy(stream);
  std::sort(t.begin(), t.end());
  Result res;
  res.ms = t[t.size() / 2];
  res.ctas = plan.num_tasks() * kHk;
  res.target = lim.target_ctas;
  res.merged = plan.num_merged();
  res.decode = fi_decode_plan(plan);
  for (int i = 0; i < s.batch; ++i) res.bytes += double(lens[size_t(i)]) * kHk * double(row_bytes);
  if (s.kind == "prefill")  // causal: half the score matrix, 4 flops per (query, key, dimension) per head
    res.flops = 4.0 * s.batch * kHq * kHead * double(s.q_len) * s.q_len / 2;
  return res;
}

std::vector<Shape> shapes(const std::string& only, bool quick) {
  std::vector<Shape> v;
  auto want = [&](const char* k) { return only.empty() || only == k; };
  if (want("decode")) {
    const std::vector<int> batches = quick ? std::vector<int>{64} : std::vector<int>{1, 16, 64, 128, 256};
    const std::vector<int> ctxs = quick ? std::vector<int>{4096} : std::vector<int>{1024, 4096, 8192, 32768};
    for (int ctx : ctxs)
      for (int b : batches)
        for (auto [kv, q8] : {std::pair{DType::kBF16, false}, {DType::kF8E4M3, true}, {DType::kF8E4M3, false}, {DType::kF8E5M2, false}}) {
          Shape s;
          s.kind = "decode", s.batch = b, s.ctx = ctx, s.kv = kv, s.quantize_q = q8;
          v.push_back(s);
        }
  }
  if (want("pages"))
    for (int page : quick ? std::vector<int>{1} : std::vector<int>{1, 8, 16, 64, 128})
      for (KvLayout layout : {KvLayout::kNHD, KvLayout::kHND}) {
        Shape s;
        s.kind = "pages", s.batch = 64, s.ctx = 4096, s.page = page, s.layout = layout;
        v.push_back(s);
      }
  if (want("prefill"))
    for (auto [b, n] : quick ? std::vector<std::pair<int, int>>{{4, 4096}} : std::vector<std::pair<int, int>>{{1, 8192}, {4, 4096}, {16, 1024}}) {
      Shape s;
      s.kind = "prefill", s.batch = b, s.ctx = n, s.q_len = n;
      v.push_back(s);
    }
  if (want("cascade"))
    for (bool on : {false, true}) {
      Shape s;
      s.kind = "cascade", s.batch = 256, s.shared = quick ? 4096 : 32768, s.ctx = s.shared, s.cascade = on;
      v.push_back(s);
    }
  return v;
}

struct Args {
  std::string only;
  bool quick = false, cold = false;
  int rounds = 15, calls = 20, cooldown_ms = 0;
};

[[noreturn]] void usage(int status) {
  std::fprintf(status ? stderr : stdout,
               "usage: flashinfer_bench [--only decode|pages|prefill|cascade] [--quick] [--cold] [--rounds R]\n"
               "                        [--calls N] [--cooldown MS]\n"
               "  decode: batch 1-256 x context 1k-32k, KV bf16 / e4m3 (FP8 or bf16 queries) / e5m2; pages: 1-128, NHD\n"
               "  and HND; prefill: causal (1, 8192), (4, 4096), (16, 1024); cascade: 256 x 32k shared prefix, off / on.\n"
               "  defaults: every kind, 15 rounds of 20-call graphs; --cold: eager calls after a 256 MB memset\n");
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
    else if (s == "--quick") a.quick = true;
    else if (s == "--cold") a.cold = true;
    else if (s == "--rounds") a.rounds = value();
    else if (s == "--calls") a.calls = value();
    else if (s == "--cooldown") {
      if (i + 1 >= argc) usage(2);
      char* end = nullptr;
      const long ms = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || ms < 0) usage(2);
      a.cooldown_ms = int(ms);
    }
    else if (s == "--only" && i + 1 < argc) {
      a.only = argv[++i];
      if (a.only != "decode" && a.only != "pages" && a.only != "prefill" && a.only != "cascade") usage(2);
    } else usage(2);
  }
  return a;
}

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse(argc, argv);
  cudaDeviceProp prop;
  if (cudaGetDeviceProperties(&prop, 0) != cudaSuccess) {
    std::fprintf(stderr, "flashinfer_bench: no CUDA device\n");
    return 1;
  }
  const double ceiling = measure_copy_tbs();
  std::printf("device %s, %d SMs; copy bandwidth (read + write) %.2f TB/s; FP8 MMA %s\n", prop.name,
              prop.multiProcessorCount, ceiling, fi_fp8_mma_available() ? "yes" : "no");
  FILE* csv = nullptr;
  if (const char* out = std::getenv("OUT")) {
    const std::string path = std::string(out) + "/flashinfer_bench.csv";
    FILE* existing = std::fopen(path.c_str(), "r");
    if (existing) std::fclose(existing);
    csv = std::fopen(path.c_str(), "a");
    if (csv && !existing) std::fprintf(csv, "impl,kind,batch,ctx,page,layout,kv,variant,ms,tbps,tflops\n");
  }
  int status = 0;
  for (const Shape& s : shapes(args.only, args.quick)) {
    char head[200];
    if (s.kind == "prefill")
      std::snprintf(head, sizeof head, "PAGODA prefill batch=%d len=%d page=%d layout=%s kv=%s", s.batch, s.q_len, s.page,
                    kv_layout_str(s.layout), s.kv_name());
    else if (s.kind == "cascade")
      std::snprintf(head, sizeof head, "PAGODA cascade %s batch=%d prefix=%d page=%d layout=%s kv=%s", s.variant().c_str(),
                    s.batch, s.shared, s.page, kv_layout_str(s.layout), s.kv_name());
    else
      std::snprintf(head, sizeof head, "PAGODA %s batch=%d ctx=%d page=%d layout=%s kv=%s variant=%s", s.kind.c_str(),
                    s.batch, s.ctx, s.page, kv_layout_str(s.layout), s.kv_name(), s.variant().c_str());
    if (args.cooldown_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(args.cooldown_ms));
    try {
      const Result r = run_shape(s, prop.multiProcessorCount, args.rounds, args.calls, args.cold);
      const double tbs = r.bytes / (r.ms * 1e-3) / 1e12, tflops = r.flops / (r.ms * 1e-3) / 1e12;
      char plan[100];
      std::snprintf(plan, sizeof plan, " [%d CTAs for %d slots, %d merged, %s kernel]", r.ctas, r.target, r.merged,
                    r.decode ? "decode" : "general");
      if (s.kind == "prefill") std::printf("%s: %.4f ms, %.1f TFLOP/s%s\n", head, r.ms, tflops, plan);
      else std::printf("%s: %.4f ms, %.2f TB/s (%.0f%% of copy)%s\n", head, r.ms, tbs, 100 * tbs / ceiling, plan);
      if (csv)
        std::fprintf(csv, "PAGODA,%s,%d,%d,%d,%s,%s,%s,%.5f,%.4f,%.2f\n", s.kind.c_str(), s.batch, s.kind == "cascade" ? s.shared : s.ctx,
                     s.page, kv_layout_str(s.layout), s.kv_name(), s.variant().c_str(), r.ms, tbs, tflops);
    } catch (const std::exception& e) {
      std::printf("%s: FAILED: %s\n", head, e.what());
      status = 1;
      (void)cudaGetLastError();
    }
    std::fflush(stdout);
  }
  if (csv) std::fclose(csv);
  return status;
}
