// Attention benchmark: TRITON_ATTN and FLASH_ATTN (FA2, FA3) on decode (paged KV, batch x context) in TB/s
// and prefill in TFLOP/s, with the device-to-device copy bandwidth measured in the same run as the ceiling.
// Peers (PyTorch SDPA flash/cuDNN, FlexAttention) are measured by bench/peers/attention_peers.py on the same
// shapes in the same device call.
//
//   attention_bench [--backend triton|flash2|flash3|all] [--only decode|prefill|all]
//                   [--decode BATCH CTX [--kv bf16|fp8]]
//                   [--prefill BATCH LEN HEAD [--non-causal] [--contiguous]]
//                   [--merge-min-splits N] [--splits N] [--no-kv-stage] [--cold | --cold-clean | --graph]
//                   [--repeat N] [--cooldown MS] [--layout nhd|hnd] [--no-cluster-merge] [--help]
//
// --decode runs one decode shape (bf16 KV, or fp8 e4m3 on TRITON_ATTN with --kv fp8) on the chosen backends
// and skips the ceiling (for profilers: scripts/device/profile_decode.sh).
// --prefill runs one prefill shape likewise: BATCH sequences of LEN tokens (no earlier context), head size
// HEAD, 32 query / 8 KV heads, causal unless --non-causal, paged blocks of 16 unless --contiguous (one block
// per sequence), so that a profiler sees the kernels of that shape only.
// --merge-min-splits sets where split-KV decode merges its splits (in the kernel from N splits), for A/B runs.
// --no-cluster-merge: split-KV decode merges in the separate merge kernel even where SM 9.0 clusters would
// take the merge (cluster_merge in the planner options), for A/B runs.
// --splits N forces N KV splits on TRITON_ATTN (the planner's choice otherwise), for split-count sweeps.
// --cold: each timed call follows a 256 MB memset that evicts L2 and hides the host's launch latency (see
// Timing); bench/peers/attention_peers.py --cold times the peers the same way.
// --cold-clean: the same with a 256 MB read instead of the memset, so that L2 holds no dirty lines either
// (the state attention meets inside a captured decode step); attention_peers.py --cold-clean likewise.
// --graph: decode as a captured engine step runs it: 20 calls back to back in one CUDA graph, each over its own
// copy of the KV cache (see GraphTiming); a call's time is a replay's over 20. Prefill shapes keep the default
// timing (their launch latency is under 0.1% of them). attention_peers.py --graph likewise.
// --repeat N: the whole sweep N times over (each pass prints its lines), so that shapes whose figures swing
// between runs (long prefills) can be compared by their median over passes taken in one call.
// --cooldown MS: the GPU idles MS milliseconds before each (backend, shape), so that every shape starts from
// the same clocks: the H200 runs long prefills power-limited, and a shape timed right after them meets lowered
// clocks (docs/attention-kernels.md, "Benchmarking and profiling the kernels").
// attention_peers.py --cooldown likewise.
// --layout hnd: the paged cache as [block][KV head][token][K|V] instead of [block][token][KV head][K|V] (NHD,
// the default and vLLM's), for A/B runs of how the decode kernel's DRAM efficiency depends on the runs it
// reads (NHD: 512 bytes per token and KV head at head 128; HND: a 16-token page of one head is 8 KB).
// --no-kv-stage: FLASH_ATTN without its KV staging buffer (FA3 gathers 16-token pages), for A/B runs.
// Output: one line per (backend, shape), `BACKEND decode ... ms TB/s` or `BACKEND prefill ... ms TFLOP/s`
// (FLASH_ATTN lines also name the kernels the plan ran: fa2, fa3 or fa3+fa2), and $OUT/attention_bench.csv
// when OUT is set. A shape that fails prints `FAILED: why` on its line, the rest still run, exit status 1.
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
#include "pagoda/attention/flash_attn/flash_attn.h"
#include "pagoda/attention/paged/paged_attention.h"

using namespace pagoda;
using namespace pagoda::bench;

namespace {

__global__ void fill_random(uint16_t* p, size_t n, uint32_t seed, bool fp8) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 2654435761u ^ seed;
    x ^= x >> 13;
    x *= 0x5bd1e995u;
    x ^= x >> 15;
    float f = (float(x & 0xffff) / 65536.f - 0.5f) * 2.f;
    if (fp8) {
      reinterpret_cast<uint8_t*>(p)[i] = uint8_t((x >> 16) & 0x77);  // finite e4m3 codes, |v| < 2
    } else {
      __nv_bfloat16 b = __float2bfloat16(f);
      p[i] = *reinterpret_cast<uint16_t*>(&b);
    }
  }
}

class EventPair {
 public:
  EventPair() {
    CK(cudaEventCreate(&start_));
    CK(cudaEventCreate(&stop_));
  }
  ~EventPair() {
    cudaEventDestroy(start_);
    cudaEventDestroy(stop_);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// Cold timing (--cold): before each timed call a memset of `flush_bytes` evicts L2 (the previous call's KV
// would otherwise hit in it at small shapes) and keeps the GPU busy while the host enqueues the call, so the
// host's launch latency is not timed either (as triton.testing.do_bench times kernels). Without it, each
// call is timed from an idle GPU: the launch latency counts, and L2 may hold the previous call's data.
// The memset leaves L2 full of dirty lines that the timed call then writes back to DRAM (as do_bench's
// zero_() does); --cold-clean flushes with a read (flush_read_kernel), leaving clean lines.
struct Timing {
  void* flush = nullptr;  // non-null: cold timing
  size_t flush_bytes = 0;
  bool clean = false;     // flush by reading, not by a memset
  unsigned* sink = nullptr;
};

// Reads n 16-byte words; writes only if their XOR is a value the buffer cannot produce (never), so the reads
// stay and nothing dirty is left in L2.
__global__ void flush_read_kernel(const uint4* p, size_t n, unsigned* sink) {
  unsigned x = 0;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 v = __ldcg(p + i);
    x ^= v.x ^ v.y ^ v.z ^ v.w;
  }
  if (x == 0xdeadbeefu) *sink = x;
}

// Graph timing (--graph), for decode: `calls` calls captured back to back into one CUDA graph, as the engine
// captures a decode step (cuda_model_runner.cc); each timed unit is one replay, a call's time the replay's
// over `calls`, the median over `iters` replays. No flush runs between the calls: the host's launch latency
// is hidden behind the replay, and L2 holds what the previous call left. The calls read `copies` copies of
// the KV cache in turn (at least two, and together at least kRotateBytes), so that no call finds its KV in L2:
// inside a decode step each layer's attention reads its own layer's cache.
struct GraphTiming {
  int calls = 0;  // > 0: graph timing of decode shapes
  static constexpr size_t kRotateBytes = size_t(192) << 20;  // ~4 x the L2 of the GPUs pagoda targets
};

// `f(stream, call)` enqueues call number `call` on `stream`: run once per call outside the capture first (first-use
// set-up such as function attributes stays out of the graph), then captured and replayed.
template <typename F>
float graph_ms(F&& f, int calls, int iters) {
  struct Resources {
    cudaStream_t stream = nullptr;
    cudaGraph_t graph = nullptr;
    cudaGraphExec_t exec = nullptr;
    ~Resources() {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      if (stream && cudaStreamIsCapturing(stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
        cudaGraph_t g = nullptr;
        if (cudaStreamEndCapture(stream, &g) == cudaSuccess && g) cudaGraphDestroy(g);
      }
      if (exec) cudaGraphExecDestroy(exec);
      if (graph) cudaGraphDestroy(graph);
      if (stream) cudaStreamDestroy(stream);
    }
  } r;
  CK(cudaStreamCreateWithFlags(&r.stream, cudaStreamNonBlocking));
  for (int i = 0; i < calls; ++i) f(r.stream, i);
  CK(cudaGetLastError());
  CK(cudaStreamSynchronize(r.stream));
  CK(cudaStreamBeginCapture(r.stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) f(r.stream, i);
  CK(cudaStreamEndCapture(r.stream, &r.graph));
  CK(cudaGraphInstantiate(&r.exec, r.graph, 0));
  for (int i = 0; i < 2; ++i) CK(cudaGraphLaunch(r.exec, r.stream));
  CK(cudaStreamSynchronize(r.stream));
  EventPair ev;
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    CK(cudaEventRecord(ev.start_, r.stream));
    CK(cudaGraphLaunch(r.exec, r.stream));
    CK(cudaEventRecord(ev.stop_, r.stream));
    CK(cudaEventSynchronize(ev.stop_));
    float ms;
    CK(cudaEventElapsedTime(&ms, ev.start_, ev.stop_));
    t.push_back(ms / calls);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// Median of `iters` timed calls after 3 warm-up calls; each call timed alone with events on the default stream.
template <typename F>
float median_ms(F&& f, int iters, const Timing& timing = {}) {
  EventPair ev;
  for (int i = 0; i < 3; ++i) f();
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> t;
  for (int i = 0; i < iters; ++i) {
    if (timing.flush && timing.clean) {
      flush_read_kernel<<<1024, 256>>>(static_cast<const uint4*>(timing.flush), timing.flush_bytes / 16, timing.sink);
    } else if (timing.flush) {
      CK(cudaMemsetAsync(timing.flush, i & 0xff, timing.flush_bytes));
    }
    CK(cudaEventRecord(ev.start_));
    f();
    CK(cudaEventRecord(ev.stop_));
    CK(cudaEventSynchronize(ev.stop_));
    CK(cudaGetLastError());
    float ms;
    CK(cudaEventElapsedTime(&ms, ev.start_, ev.stop_));
    t.push_back(ms);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

enum class Backend { kTriton, kFlash2, kFlash3 };

const char* backend_name(Backend b) {
  switch (b) {
    case Backend::kTriton: return "TRITON_ATTN";
    case Backend::kFlash2: return "FLASH_ATTN(v2)";
    case Backend::kFlash3: return "FLASH_ATTN(v3)";
  }
  return "?";
}

struct Shape {
  int batch, ctx, q_len;  // prefill shapes here have ctx == q_len (no earlier context)
  int hq = 32, hk = 8, d = 128, bs = 16;
  DType kv = DType::kBF16;
  bool causal = true;
  bool contiguous = false;  // identity block table; with bs == ctx one block per sequence, i.e. a contiguous cache
};

struct Result {
  float ms = 0;
  double bytes = 0;  // KV read + q read + out written
  double flops = 0;  // 4 * d per (query, key) pair per query head
  std::string kernels;  // FLASH_ATTN: the kernels its plan ran
};

// Planner overrides and the timing mode, for A/B runs. merge_min_splits < 0: the library default for where
// split-KV decode merges (in the kernel or after it). kv_stage: FLASH_ATTN gets a KV staging buffer (FA3
// prefill steps whose blocks do not hold whole tiles copy their context into contiguous blocks first; the
// copy is part of the timed step). splits > 0: TRITON_ATTN runs exactly that many KV splits.
struct Knobs {
  int merge_min_splits = -1;
  bool cluster_merge = true;  // --no-cluster-merge: false
  bool kv_stage = true;
  int splits = 0;
  KvLayout layout = KvLayout::kNHD;  // --layout: the paged cache's layout
  Timing timing;  // --cold: L2 flushed and the launch latency hidden before each timed call
  GraphTiming graph;  // --graph: decode timed as graph replays (GraphTiming)
};

Result run_shape(Backend backend, const Shape& s, int num_sms, const Knobs& knobs) {
  const int T = s.batch * s.q_len;
  const int blocks_per_seq = (s.ctx + s.bs - 1) / s.bs;
  const size_t num_blocks = size_t(s.batch) * blocks_per_seq;
  const size_t kvsz = s.kv == DType::kBF16 ? 2 : 1;
  const size_t cache_elems = num_blocks * s.bs * s.hk * 2 * s.d;
  const size_t q_elems = size_t(T) * s.hq * s.d;
  // Graph timing: `copies` caches in one pool, copy c in blocks c * num_blocks.., with its own block table.
  const bool graph = knobs.graph.calls > 0 && s.q_len == 1;
  const size_t cache_bytes = cache_elems * kvsz;
  const int copies =
      graph ? int(std::clamp<size_t>((GraphTiming::kRotateBytes + cache_bytes - 1) / cache_bytes, 2, 64)) : 1;
  DeviceBuffer q(q_elems * 2), out(q_elems * 2), cache(copies * cache_bytes);
  fill_random<<<1024, 256>>>(q.as<uint16_t>(), q_elems, 1, false);
  CK(cudaGetLastError());
  fill_random<<<4096, 256>>>(cache.as<uint16_t>(), copies * cache_elems, 2, s.kv != DType::kBF16);
  CK(cudaGetLastError());
  std::vector<int> h_qsl(s.batch + 1), h_sl(s.batch, s.ctx), h_bt(copies * num_blocks);
  for (int i = 0; i <= s.batch; ++i) h_qsl[i] = i * s.q_len;
  // Paged: sequence i uses blocks i, batch + i, 2*batch + i, ... (scattered). Contiguous: identity.
  for (int c = 0; c < copies; ++c)
    for (int i = 0; i < s.batch; ++i)
      for (int b = 0; b < blocks_per_seq; ++b)
        h_bt[c * num_blocks + size_t(i) * blocks_per_seq + b] =
            int(c * num_blocks) + (s.contiguous ? i * blocks_per_seq + b : b * s.batch + i);
  DeviceBuffer qsl(sizeof(int) * h_qsl.size()), sl(sizeof(int) * h_sl.size()), bt(sizeof(int) * h_bt.size());
  CK(cudaMemcpy(qsl.as<int>(), h_qsl.data(), sizeof(int) * h_qsl.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(sl.as<int>(), h_sl.data(), sizeof(int) * h_sl.size(), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(bt.as<int>(), h_bt.data(), sizeof(int) * h_bt.size(), cudaMemcpyHostToDevice));
  CK(cudaDeviceSynchronize());

  PagedAttentionParams p;
  p.q = q.as<void>();
  p.out = out.as<void>();
  p.kv_cache = cache.as<void>();
  p.dtype = DType::kBF16;
  p.kv_dtype = s.kv;
  p.num_tokens = T;
  p.num_seqs = s.batch;
  p.num_q_heads = s.hq;
  p.num_kv_heads = s.hk;
  p.head_size = s.d;
  p.block_size = s.bs;
  p.max_blocks_per_seq = blocks_per_seq;
  p.query_start_loc = qsl.as<int>();
  p.seq_lens = sl.as<int>();
  p.block_tables = bt.as<int>();
  p.scale = 1.0f / std::sqrt(float(s.d));
  p.causal = s.causal;
  p.layout = knobs.layout;
  const AttentionBatchInfo info{std::vector<int>(s.batch, s.q_len), h_sl};
  const int iters = s.q_len > 1 ? 10 : 50;
  // Times `run(params, stream)`: graph replays over the cache copies (--graph, decode), else median_ms.
  auto time_calls = [&](auto&& run) {
    if (!graph) return median_ms([&] { run(p, cudaStream_t(nullptr)); }, iters, knobs.timing);
    return graph_ms(
        [&](cudaStream_t stream, int call) {
          PagedAttentionParams pc = p;
          pc.block_tables = bt.as<int>() + size_t(call % copies) * num_blocks;
          run(pc, stream);
        },
        knobs.graph.calls, 20);
  };

  Result r;
  switch (backend) {
    case Backend::kTriton: {
      PagedAttentionOptions opt;
      opt.num_sms = num_sms;
      opt.fp8_kv = dtype_is_fp8(s.kv);
      if (knobs.merge_min_splits >= 0) opt.in_kernel_merge_min_splits = knobs.merge_min_splits;
      opt.cluster_merge = knobs.cluster_merge;
      if (knobs.splits > 0) {
        opt.force_splits = true;
        opt.max_splits = knobs.splits;
      }
      PagedAttentionWorkspace ws;
      ws.reserve(T, s.batch, s.hq, s.d, opt.max_splits);
      plan_paged_attention(info, s.hq, s.hk, s.d, DType::kBF16, opt, ws, nullptr);
      CK(cudaDeviceSynchronize());
      r.ms = time_calls([&](const PagedAttentionParams& pc, cudaStream_t st) { run_paged_attention(pc, ws, st); });
      break;
    }
    case Backend::kFlash2:
    case Backend::kFlash3: {
      FlashAttnOptions opt;
      opt.version = backend == Backend::kFlash3 ? 3 : 2;
      opt.num_sms = num_sms;
      if (knobs.merge_min_splits >= 0) opt.in_kernel_merge_min_splits = knobs.merge_min_splits;
      opt.cluster_merge = knobs.cluster_merge;
      FlashAttnWorkspace ws;
      ws.reserve(T, s.batch, s.hq, s.d, opt.max_splits);
      if (knobs.kv_stage && s.q_len > 1) ws.reserve_kv_stage(s.batch * s.ctx, s.batch, s.hk, s.d, DType::kBF16);
      plan_flash_attention(info, s.hq, s.hk, s.d, DType::kBF16, s.kv, /*alibi=*/false, opt, ws, nullptr);
      CK(cudaDeviceSynchronize());
      r.ms = time_calls([&](const PagedAttentionParams& pc, cudaStream_t st) { run_flash_attention(pc, ws, st); });
      const bool fa2 = ws.fa2.num_work_items > 0;
      r.kernels = ws.fa3_items > 0 ? (fa2 ? "fa3+fa2" : "fa3") : "fa2";
      break;
    }
  }
  CK(cudaDeviceSynchronize());
  r.bytes = double(s.batch) * s.ctx * s.hk * 2 * s.d * kvsz + 2.0 * T * s.hq * s.d * 2;
  // Query token t sits at position ctx - q_len + t. Causal: it attends keys 0..pos (pos + 1 of them); for
  // prefill (ctx == q_len) the sum over a sequence is n(n+1)/2. Non-causal: every key, q_len * ctx pairs.
  double pairs = 0;
  if (s.causal) {
    for (int t = 0; t < s.q_len; ++t) pairs += s.ctx - s.q_len + t + 1;
  } else {
    pairs = double(s.q_len) * s.ctx;
  }
  r.flops = 4.0 * s.d * s.hq * s.batch * pairs;
  return r;
}

// A benchmark case: a shape and the backends that run it.
struct Case {
  Shape shape;
  bool triton;  // TRITON_ATTN runs it
  bool flash;   // FLASH_ATTN (v2 and v3) runs it
};

std::vector<Case> decode_cases() {
  const std::vector<std::pair<int, int>> shapes = {{1, 1024}, {1, 8192},   {1, 32768},  {16, 4096},
                                                   {64, 2048}, {128, 4096}, {256, 1024}, {32, 8192}};
  std::vector<Case> cases;
  for (DType kv : {DType::kBF16, DType::kF8E4M3}) {
    for (auto [batch, ctx] : shapes) {
      Shape s{batch, ctx, 1};
      s.kv = kv;
      cases.push_back({s, true, kv == DType::kBF16});  // FLASH_ATTN decode: bf16 KV only
    }
  }
  return cases;
}

// bf16, 32 query heads, 8 KV heads (GQA 4) and paged blocks of 16 unless the case says otherwise.
// A prefill shape: `batch` sequences of n new tokens (no earlier context), head size d.
Shape prefill_shape(int batch, int n, int d, bool causal) {
  Shape s{batch, n, n};
  s.d = d;
  s.causal = causal;
  return s;
}

// The same shape over one block per sequence: the cache is contiguous (the paged-vs-contiguous comparison).
Shape contiguous(Shape s) {
  s.bs = s.ctx;
  s.contiguous = true;
  return s;
}

std::vector<Case> prefill_cases() {
  std::vector<Case> cases;
  cases.push_back({prefill_shape(4, 8192, 128, true), true, true});
  Shape mha = prefill_shape(4, 8192, 128, true);  // the peers' usual comparison is MHA
  mha.hk = 32;
  cases.push_back({mha, false, true});
  for (int d : {128, 64, 256})
    for (bool causal : {true, false}) {
      if (d != 128 || !causal) cases.push_back({prefill_shape(4, 8192, d, causal), false, true});
      cases.push_back({contiguous(prefill_shape(4, 8192, d, causal)), false, true});
    }
  cases.push_back({prefill_shape(1, 4096, 128, true), true, true});
  Shape fp8 = prefill_shape(4, 8192, 128, true);  // FLASH_ATTN: FA3 over fp8 KV (staged), else FA2
  fp8.kv = DType::kF8E4M3;
  cases.push_back({fp8, false, true});
  return cases;
}

std::string describe(Backend b, const Shape& s) {
  char buf[256];
  if (s.q_len == 1) {
    std::snprintf(buf, sizeof(buf), "%-14s decode  kv=%-4s batch=%4d ctx=%6d", backend_name(b),
                  s.kv == DType::kBF16 ? "bf16" : "fp8", s.batch, s.ctx);
  } else {
    std::snprintf(buf, sizeof(buf), "%-14s prefill %-10s batch=%d len=%5d d=%3d hq=%d hk=%2d block=%4d%s%s",
                  backend_name(b), s.causal ? "causal" : "non-causal", s.batch, s.q_len, s.d, s.hq, s.hk, s.bs,
                  s.contiguous ? " (contiguous)" : "", s.kv == DType::kBF16 ? "" : " kv=fp8");
  }
  return buf;
}

struct Args {
  std::vector<Backend> backends = {Backend::kTriton, Backend::kFlash2, Backend::kFlash3};
  bool decode = true, prefill = true;
  int one_batch = 0, one_ctx = 0;  // --decode BATCH CTX
  DType one_kv = DType::kBF16;      // --kv bf16|fp8 (with --decode)
  int pre_batch = 0, pre_len = 0, pre_head = 0;  // --prefill BATCH LEN HEAD
  bool pre_causal = true, pre_contiguous = false;  // --non-causal, --contiguous (with --prefill)
  Knobs knobs;                     // --merge-min-splits N, --no-cluster-merge, --splits N, --no-kv-stage (A/B runs)
  bool cold = false;               // --cold or --cold-clean: see Timing
  bool cold_clean = false;         // --cold-clean
  bool graph = false;              // --graph: decode timed as graph replays
  int repeat = 1;                  // --repeat N
  int cooldown_ms = 0;             // --cooldown MS
};

constexpr const char* kUsage =
    "usage: attention_bench [--backend triton|flash2|flash3|all] [--only decode|prefill|all]\n"
    "                       [--decode BATCH CTX [--kv bf16|fp8]]\n"
    "                       [--prefill BATCH LEN HEAD [--non-causal] [--contiguous]]\n"
    "                       [--merge-min-splits N] [--splits N] [--no-kv-stage] [--cold | --cold-clean | --graph]\n"
    "                       [--repeat N] [--cooldown MS] [--layout nhd|hnd] [--no-cluster-merge]\n"
    "The options are described at the top of bench/attention_bench.cu and in docs/benchmarks.md.\n";

[[noreturn]] void usage_error(const std::string& what) {
  std::fprintf(stderr, "attention_bench: %s\n%s", what.c_str(), kUsage);
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string opt = argv[i];
    auto value = [&](const char* name) -> std::string {
      if (i + 1 >= argc) usage_error(std::string(name) + " needs a value");
      return argv[++i];
    };
    if (opt == "--help" || opt == "-h") {
      std::printf("%s", kUsage);
      std::exit(0);
    } else if (opt == "--backend") {
      const std::string v = value("--backend");
      if (v == "triton") a.backends = {Backend::kTriton};
      else if (v == "flash2") a.backends = {Backend::kFlash2};
      else if (v == "flash3") a.backends = {Backend::kFlash3};
      else if (v != "all") usage_error("unknown --backend '" + v + "': use triton, flash2, flash3 or all");
    } else if (opt == "--only") {
      const std::string v = value("--only");
      if (v != "decode" && v != "prefill" && v != "all")
        usage_error("unknown --only '" + v + "': use decode, prefill or all");
      a.decode = v != "prefill";
      a.prefill = v != "decode";
    } else if (opt == "--kv") {
      const std::string v = value("--kv");
      if (v == "fp8") a.one_kv = DType::kF8E4M3;
      else if (v != "bf16") usage_error("unknown --kv '" + v + "': use bf16 or fp8");
    } else if (opt == "--no-kv-stage") {
      a.knobs.kv_stage = false;
    } else if (opt == "--cold") {
      a.cold = true;
    } else if (opt == "--repeat") {
      a.repeat = std::atoi(value("--repeat").c_str());
      if (a.repeat <= 0) usage_error("--repeat needs a positive count");
    } else if (opt == "--layout") {
      const std::string v = value("--layout");
      if (v == "hnd") a.knobs.layout = KvLayout::kHND;
      else if (v != "nhd") usage_error("unknown --layout '" + v + "': use nhd or hnd");
    } else if (opt == "--cooldown") {
      const std::string v = value("--cooldown");
      char* end = nullptr;
      const long ms = std::strtol(v.c_str(), &end, 10);
      if (v.empty() || *end != '\0' || ms < 0 || ms > 600000)
        usage_error("--cooldown needs milliseconds from 0 to 600000, not '" + v + "'");
      a.cooldown_ms = int(ms);
    } else if (opt == "--cold-clean") {
      a.cold = a.cold_clean = true;
    } else if (opt == "--graph") {
      a.graph = true;
    } else if (opt == "--splits") {
      a.knobs.splits = std::atoi(value("--splits").c_str());
      if (a.knobs.splits <= 0) usage_error("--splits needs a positive count");
    } else if (opt == "--no-cluster-merge") {
      a.knobs.cluster_merge = false;
    } else if (opt == "--merge-min-splits") {
      a.knobs.merge_min_splits = std::atoi(value("--merge-min-splits").c_str());
    } else if (opt == "--decode") {
      a.one_batch = std::atoi(value("--decode").c_str());
      a.one_ctx = std::atoi(value("--decode").c_str());
      if (a.one_batch <= 0 || a.one_ctx <= 0) usage_error("--decode needs a positive BATCH and CTX");
    } else if (opt == "--prefill") {
      a.pre_batch = std::atoi(value("--prefill").c_str());
      a.pre_len = std::atoi(value("--prefill").c_str());
      a.pre_head = std::atoi(value("--prefill").c_str());
      if (a.pre_batch <= 0 || a.pre_len <= 1) usage_error("--prefill needs a positive BATCH and a LEN above 1");
      if (a.pre_head <= 0 || a.pre_head > 256 || a.pre_head % 8 != 0)
        usage_error("--prefill needs a HEAD size that is a multiple of 8 up to 256");
    } else if (opt == "--non-causal") {
      a.pre_causal = false;
    } else if (opt == "--contiguous") {
      a.pre_contiguous = true;
    } else {
      usage_error("unknown option '" + opt + "'");
    }
  }
  if (a.graph && a.cold) usage_error("--graph times without a flush: give it or --cold / --cold-clean, not both");
  if (a.pre_batch > 0 && a.one_batch > 0) usage_error("--decode and --prefill each run one shape: give one of them");
  if (a.pre_batch == 0 && (!a.pre_causal || a.pre_contiguous))
    usage_error("--non-causal and --contiguous go with --prefill");
  return a;
}

// Measures the device copy bandwidth (bytes read + written, 4 GiB copy), the ceiling of decode.
}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  cudaDeviceProp prop;
  cudaError_t e = cudaGetDeviceProperties(&prop, 0);
  if (e != cudaSuccess) {
    std::fprintf(stderr, "attention_bench: no CUDA device: %s\n", cudaGetErrorString(e));
    return 1;
  }
  const int num_sms = prop.multiProcessorCount;
  Knobs knobs = args.knobs;
  constexpr size_t kFlushBytes = size_t(256) << 20;  // > the L2 of every GPU pagoda targets (H200: 50 MB)
  std::unique_ptr<DeviceBuffer> flush;
  if (args.cold) {
    flush = std::make_unique<DeviceBuffer>(kFlushBytes + 16);
    CK(cudaMemset(flush->as<void>(), 0, kFlushBytes + 16));
    knobs.timing = Timing{flush->as<void>(), kFlushBytes, args.cold_clean,
                          reinterpret_cast<unsigned*>(flush->as<char>() + kFlushBytes)};
  }
  if (args.graph) knobs.graph.calls = 20;
  int failures = 0;
  auto run = [&](Backend b, const Shape& s, double copy_tbs, FILE* csv) {
    const std::string what = describe(b, s) + (knobs.layout == KvLayout::kHND ? " HND" : "");
    if (args.cooldown_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(args.cooldown_ms));
    try {
      Result r = run_shape(b, s, num_sms, knobs);
      const std::string kernels = r.kernels.empty() ? "" : "  kernels=" + r.kernels;
      if (s.q_len == 1) {
        double tbs = r.bytes / (r.ms * 1e-3) / 1e12;
        if (copy_tbs > 0)
          std::printf("%s  %8.3f ms  %6.2f TB/s (%.0f%% of copy)%s\n", what.c_str(), r.ms, tbs, 100 * tbs / copy_tbs,
                      kernels.c_str());
        else
          std::printf("%s  %8.3f ms  %6.2f TB/s%s\n", what.c_str(), r.ms, tbs, kernels.c_str());
      } else {
        std::printf("%s  %8.3f ms  %6.1f TFLOP/s%s\n", what.c_str(), r.ms, r.flops / (r.ms * 1e-3) / 1e12,
                    kernels.c_str());
      }
      if (csv) {
        const bool decode = s.q_len == 1;
        std::fprintf(csv, "%s,%s,%s,%d,%d,%d,%d,%d,%d,%d,%d,%d,%s,%.4f,", backend_name(b),
                     decode ? "decode" : "prefill", s.kv == DType::kBF16 ? "bf16" : "fp8", s.batch, s.ctx, s.q_len,
                     s.d, s.hq, s.hk, s.bs, int(s.contiguous), int(s.causal), r.kernels.c_str(), r.ms);
        if (decode) std::fprintf(csv, "%.3f,,", r.bytes / (r.ms * 1e-3) / 1e12);
        else std::fprintf(csv, ",%.2f,", r.flops / (r.ms * 1e-3) / 1e12);
        std::fprintf(csv, "%.3f\n", copy_tbs);
      }
    } catch (const std::exception& ex) {
      ++failures;
      std::printf("%s  FAILED: %s\n", what.c_str(), ex.what());
    }
    std::fflush(stdout);
  };

  if (args.one_batch > 0) {  // one shape, for profilers
    Shape s{args.one_batch, args.one_ctx, 1};
    s.kv = args.one_kv;
    for (Backend b : args.backends) {
      if (b != Backend::kTriton && s.kv != DType::kBF16) continue;  // FLASH_ATTN decode rows: bf16 KV only
      run(b, s, 0, nullptr);
    }
    return failures ? 1 : 0;
  }
  if (args.pre_batch > 0) {  // one shape, for profilers
    Shape s = prefill_shape(args.pre_batch, args.pre_len, args.pre_head, args.pre_causal);
    if (args.pre_contiguous) s = contiguous(s);
    for (Backend b : args.backends) run(b, s, 0, nullptr);
    return failures ? 1 : 0;
  }

  std::printf("device: %s, %d SMs\n", prop.name, num_sms);
  if (args.cold)
    std::printf("timing: cold (L2 flushed by a 256 MB %s and the launch latency hidden before each timed call)\n",
                args.cold_clean ? "read" : "memset");
  if (args.graph)
    std::printf("timing: graph (decode: 20 calls per CUDA graph replay over rotating KV-cache copies; prefill: "
                "each call alone)\n");
  if (std::find(args.backends.begin(), args.backends.end(), Backend::kFlash3) != args.backends.end())
    std::printf("FLASH_ATTN(v3): FA3 prefill kernel %s\n",
                flash_attn_fa3_supported() ? "available" : "unavailable on this device/binary: its prefill runs FA2");
  double copy_tbs = 0;
  try {
    copy_tbs = measure_copy_tbs();
    std::printf("ceiling: device copy %.2f TB/s\n", copy_tbs);
  } catch (const std::exception& ex) {
    ++failures;
    std::printf("ceiling: device copy FAILED: %s\n", ex.what());
  }

  const char* out_dir = std::getenv("OUT");
  FILE* csv = out_dir ? std::fopen((std::string(out_dir) + "/attention_bench.csv").c_str(), "w") : nullptr;
  if (out_dir && !csv) std::printf("cannot write %s/attention_bench.csv\n", out_dir);
  if (csv)
    std::fprintf(csv, "backend,kind,kv,batch,ctx,q_len,head_size,q_heads,kv_heads,block_size,contiguous,causal,"
                      "kernels,ms,tbs,tflops,copy_tbs\n");
  std::vector<Case> cases;
  if (args.decode) cases = decode_cases();
  if (args.prefill) {
    std::vector<Case> p = prefill_cases();
    cases.insert(cases.end(), p.begin(), p.end());
  }
  for (int pass = 1; pass <= args.repeat; ++pass) {
    if (args.repeat > 1) std::printf("pass %d of %d\n", pass, args.repeat);
    for (const Case& c : cases) {
      for (Backend b : args.backends) {
        const bool runs = b == Backend::kTriton ? c.triton : c.flash;
        if (runs) run(b, c.shape, copy_tbs, csv);
      }
    }
  }
  if (csv) std::fclose(csv);
  if (failures) std::printf("%d shape(s) FAILED\n", failures);
  return failures ? 1 : 0;
}
