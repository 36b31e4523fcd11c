// TURBOQUANT's CUDA kernels and runner on the device, against the float64 references of turboquant_reference.h
// (the format's, and the kernel's deliberate fp16 operands) with their derived tolerances, on the shapes that
// break kernels: every preset; GQA 1, 4, 8 (and 16); block sizes 16, 64, 128; head sizes 64, 128, 256 (the
// tensor-core kernel) and 80, 96 (the CUDA-core kernel); sequence lengths 1, 7, 17, 97, 513, 4099; prefill,
// decode and mixed steps; forced and planned KV splits; outputs poisoned before every launch; relaunches and
// CUDA-graph replays on re-poisoned outputs equal to the eager result. The CTA body also runs on the host
// (turboquant_emulation_test.cc), the encoder in ops_cuda_rope_kv_turboquant_*_test.
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include "pagoda/attention/paged/paged_attention.h"
#include "pagoda/attention/turboquant/turboquant_cuda_attention.h"
#include "pagoda/attention/turboquant/turboquant_cuda_runner.h"
#include "turboquant_reference.h"

namespace pagoda {
namespace {

using tq_test::TqCase;
using tq_test::TqInputs;

bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  return n > 0;
}
#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "skipped: no CUDA device"
#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

struct DeviceAllocations {
  std::vector<void*> ptrs;
  ~DeviceAllocations() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <typename T>
  cudaError_t alloc(T** p, size_t bytes) {
    const cudaError_t e = cudaMalloc(reinterpret_cast<void**>(p), bytes);
    if (e == cudaSuccess) ptrs.push_back(*p);
    return e;
  }
};

// A case's inputs on the device.
struct DeviceCase {
  DeviceAllocations mem;
  void *q = nullptr, *out = nullptr, *cache = nullptr;
  int *qsl = nullptr, *sl = nullptr, *bt = nullptr;
  size_t out_bytes = 0;
};

void upload(const TqCase& c, const TqInputs& in, DeviceCase& d) {
  d.out_bytes = size_t(in.T) * c.num_q_heads * c.head_size * dtype_size(c.dtype);
  CUDA_OK(d.mem.alloc(&d.q, in.q.size()));
  CUDA_OK(d.mem.alloc(&d.out, d.out_bytes));
  CUDA_OK(d.mem.alloc(&d.cache, in.cache.size()));
  CUDA_OK(d.mem.alloc(&d.qsl, in.qsl.size() * 4));
  CUDA_OK(d.mem.alloc(&d.sl, c.seq_lens.size() * 4));
  CUDA_OK(d.mem.alloc(&d.bt, in.btab.size() * 4));
  CUDA_OK(cudaMemcpy(d.q, in.q.data(), in.q.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d.cache, in.cache.data(), in.cache.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d.qsl, in.qsl.data(), in.qsl.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d.sl, c.seq_lens.data(), c.seq_lens.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(d.bt, in.btab.data(), in.btab.size() * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(d.out, 0xff, d.out_bytes));  // poison: NaN in bf16 and fp16
}

std::vector<uint8_t> download(const DeviceCase& d) {
  std::vector<uint8_t> out(d.out_bytes);
  EXPECT_EQ(cudaMemcpy(out.data(), d.out, d.out_bytes, cudaMemcpyDeviceToHost), cudaSuccess);
  return out;
}

int device_sms() {
  cudaDeviceProp prop;
  return cudaGetDeviceProperties(&prop, 0) == cudaSuccess ? prop.multiProcessorCount : 132;
}

// plan_paged_attention + turboquant_attention (the kernel family's interface), launched c.launches times on a
// re-poisoned output. general_body: max_query_len unknown, so decode steps run the general body too.
void run_family(const TqCase& c, bool general_body = false) {
  const TqInputs in = tq_test::make_inputs(c);
  DeviceCase d;
  upload(c, in, d);
  if (::testing::Test::HasFatalFailure()) return;
  const TurboQuantPreset& preset = tq_test::preset_of(c);
  PagedAttentionOptions opt;
  opt.num_sms = device_sms();
  opt.fp8_kv = true;
  opt.cluster_merge = false;
  if (c.force_splits > 0) {
    opt.force_splits = true;
    opt.max_splits = c.force_splits;
  }
  PagedAttentionWorkspace ws;
  ws.reserve(in.T, in.S, c.num_q_heads, c.head_size, opt.max_splits);
  plan_paged_attention(AttentionBatchInfo{c.query_lens, c.seq_lens}, c.num_q_heads, c.num_kv_heads, c.head_size,
                       c.dtype, opt, ws, nullptr);
  TurboQuantAttentionParams p;
  p.q = d.q;
  p.q_stride = int64_t(in.q_stride);
  p.out = d.out;
  p.kv_cache = d.cache;
  p.dtype = c.dtype;
  p.key_bits = preset.key_bits;
  p.value_bits = preset.value_bits;
  p.norm_correction = preset.norm_correction;
  p.num_tokens = in.T;
  p.num_seqs = in.S;
  p.num_q_heads = c.num_q_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_size = c.head_size;
  p.block_size = c.block_size;
  p.max_blocks_per_seq = in.max_blocks;
  p.query_start_loc = d.qsl;
  p.seq_lens = d.sl;
  p.block_tables = d.bt;
  p.scale = in.scale;
  p.layer = c.layer;
  for (size_t i = 0; i < in.codebook.size(); ++i) p.centroids[i] = in.codebook[i];
  p.max_query_len = general_body ? 0 : *std::max_element(c.query_lens.begin(), c.query_lens.end());
  std::vector<uint8_t> first;
  for (int i = 0; i < c.launches; ++i) {
    if (i > 0) {
      CUDA_OK(cudaMemset(d.out, 0xff, d.out_bytes));
    }
    turboquant_attention(p, ws, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint8_t> out = download(d);
    if (i == 0) first = out;
    else EXPECT_EQ(out, first) << "launch " << i << " differs from the first";
  }
  tq_test::check_output(c, in, first, general_body ? "cuda-gen" : "cuda", turboquant_attention_uses_tensor_cores(c.head_size));
}

LayerShape shape_of(const TqCase& c) {
  LayerShape s;
  s.num_q_heads = c.num_q_heads;
  s.num_kv_heads = c.num_kv_heads;
  s.head_size = c.head_size;
  s.dtype = c.dtype;
  s.kv_dtype = DType::kU8;
  s.kv_preset = std::string(tq_test::preset_of(c).name);
  s.layout = KvLayout::kHND;
  s.block_size = c.block_size;
  return s;
}

AttentionParams params_of(const TqCase& c, const TqInputs& in, const DeviceCase& d) {
  AttentionParams a;
  a.layer = c.layer;
  a.q = d.q;
  a.q_stride = int64_t(in.q_stride);
  a.out = d.out;
  a.kv_cache = d.cache;
  a.num_blocks = in.num_blocks;
  a.query_start_loc = d.qsl;
  a.seq_lens = d.sl;
  a.block_tables = d.bt;
  a.block_table_stride = in.max_blocks;
  a.num_tokens = in.T;
  a.num_seqs = in.S;
  return a;
}

// The runner (make_turboquant_cuda_runner): reserve, plan, run. graph: a runner for a captured decode step of
// this batch (RunnerLimits::graph_batch), its run captured in a CUDA graph and replayed twice on re-poisoned
// outputs; each replay must equal the eager runner's output bitwise when the split counts agree, and both
// must pass the references.
void run_runner(const TqCase& c, bool graph, int max_graph_splits = 32) {
  const TqInputs in = tq_test::make_inputs(c);
  DeviceCase d;
  upload(c, in, d);
  if (::testing::Test::HasFatalFailure()) return;
  RunnerOptions o;
  o.num_sms = device_sms();
  o.tq_max_graph_splits = max_graph_splits;
  auto runner = make_turboquant_cuda_runner(shape_of(c), o);
  const AttentionParams a = params_of(c, in, d);
  cudaStream_t stream;
  CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  if (!graph) {
    runner->reserve({.max_tokens = in.T, .max_seqs = in.S, .max_model_len = 8192});
    runner->plan(AttentionBatch{c.query_lens, c.seq_lens}, stream);
    runner->run(a, stream);
    CUDA_OK(cudaStreamSynchronize(stream));
    tq_test::check_output(c, in, download(d), "runner", turboquant_attention_uses_tensor_cores(c.head_size));
    CUDA_OK(cudaStreamDestroy(stream));
    return;
  }
  runner->reserve({.max_tokens = in.S, .max_seqs = in.S, .max_model_len = 8192, .graph_batch = in.S});
  runner->plan({}, stream);
  runner->run(a, stream);  // first use outside the capture (function attributes)
  CUDA_OK(cudaStreamSynchronize(stream));
  const std::vector<uint8_t> eager = download(d);
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  CUDA_OK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  runner->run(a, stream);
  CUDA_OK(cudaStreamEndCapture(stream, &g));
  CUDA_OK(cudaGraphInstantiate(&exec, g, 0));
  for (int i = 0; i < 2; ++i) {
    CUDA_OK(cudaMemset(d.out, 0xff, d.out_bytes));
    CUDA_OK(cudaGraphLaunch(exec, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(download(d), eager) << "replay " << i << " differs from the same runner's eager run";
  }
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(g);
  CUDA_OK(cudaStreamDestroy(stream));
  tq_test::check_output(c, in, eager, "graph", turboquant_attention_uses_tensor_cores(c.head_size));
}

TqCase make(int preset, int D, int hq, int hk, std::vector<int> q, std::vector<int> ctx, unsigned seed) {
  TqCase c;
  c.preset = preset;
  c.head_size = D;
  c.num_q_heads = hq;
  c.num_kv_heads = hk;
  c.query_lens = std::move(q);
  c.seq_lens = std::move(ctx);
  c.seed = seed;
  return c;
}

TEST(TurboQuantGpu, PrefillLengthsPresetsAndHeadSizes) {
  SKIP_WITHOUT_GPU();
  for (int preset = 0; preset < 4; ++preset)
    for (int D : {64, 128, 256})
      for (int L : {1, 7, 17, 97, 513}) {
        TqCase c = make(preset, D, 8, 2, {L}, {L}, unsigned(preset * 10000 + D * 10 + L));
        c.dtype = L % 2 ? DType::kBF16 : DType::kF16;
        run_family(c);
      }
}

TEST(TurboQuantGpu, LongPrefill4099) {
  SKIP_WITHOUT_GPU();
  for (int preset : {1, 3}) {
    TqCase c = make(preset, 128, 4, 1, {4099}, {4099}, 41);
    c.check_every = 41;
    run_family(c);
  }
}

TEST(TurboQuantGpu, DecodeGqaAndBlockSizes) {
  SKIP_WITHOUT_GPU();
  for (auto [hq, hk] : std::vector<std::pair<int, int>>{{8, 8}, {8, 2}, {16, 2}, {16, 1}})
    for (int bs : {16, 64, 128})
      for (int preset = 0; preset < 4; ++preset) {
        TqCase c = make(preset, 128, hq, hk, {1, 1, 1, 1}, {1, 7, 4099, 513}, unsigned(hq * 1000 + bs * 10 + preset));
        c.block_size = bs;
        run_family(c);  // GQA <= 8: the decode body
        if (hq / hk <= 8 && bs == 16) run_family(c, /*general_body=*/true);
      }
}

TEST(TurboQuantGpu, MixedPrefillDecodeBatch) {
  SKIP_WITHOUT_GPU();
  for (int preset = 0; preset < 4; ++preset) {
    TqCase c = make(preset, 128, 8, 2, {1, 1, 129, 1, 17, 1, 7}, {1, 4099, 513, 33, 17, 700, 100}, 7u + preset);
    c.q_pad = 2 * 2 * 128;  // q as the slice of a fused qkv row
    run_family(c);
    c.dtype = DType::kF16;
    c.head_size = 64;
    c.q_pad = 0;
    run_family(c);
  }
}

// Forced split counts (what a captured decode step uses) and the planner's own, three launches each on a
// re-poisoned output: the split merge must rewrite every output.
TEST(TurboQuantGpu, DecodeSplitKv) {
  SKIP_WITHOUT_GPU();
  for (int preset = 0; preset < 4; ++preset)
    for (int splits : {0, 1, 3, 16, 24}) {
      TqCase c = make(preset, preset == 2 ? 256 : 128, 32, 8, {1, 1, 1}, {4099, 1, 1000}, unsigned(splits * 10 + preset));
      c.force_splits = splits;
      c.launches = 3;
      run_family(c);
      if (splits == 3) run_family(c, /*general_body=*/true);
    }
  TqCase batch1 = make(1, 128, 32, 8, {1}, {8000}, 3);  // batch 1, long context: the planner splits
  batch1.launches = 3;
  run_family(batch1);
}

// Head sizes outside 64/128/256 run the CUDA-core kernel (prefill, decode, split KV).
TEST(TurboQuantGpu, OtherHeadSizes) {
  SKIP_WITHOUT_GPU();
  for (int D : {80, 96, 32})
    for (int preset = 0; preset < 4; ++preset) {
      TqCase c = make(preset, D, 8, 2, {17, 1, 1}, {33, 200, 1}, unsigned(D + preset));
      run_family(c);
      c.force_splits = 4;
      c.launches = 2;
      run_family(c);
    }
}

TEST(TurboQuantGpu, RunnerEagerAndGraphReplay) {
  SKIP_WITHOUT_GPU();
  for (int preset = 0; preset < 4; ++preset) {
    run_runner(make(preset, 128, 32, 8, {1, 40, 1}, {1000, 40, 77}, 50u + preset), false);
    run_runner(make(preset, 128, 32, 8, {1, 1, 1}, {4099, 17, 1000}, 60u + preset), true);
    run_runner(make(preset, 64, 9, 3, {1}, {2049}, 70u + preset), true, 8);  // the built-in model's heads
  }
}

}  // namespace
}  // namespace pagoda
