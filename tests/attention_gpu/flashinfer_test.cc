// FLASHINFER's CUDA kernels (flashinfer_cuda.h) against its float64 CPU reference executing the same plan
// over the same cache bytes and the same rounded (or FP8-quantized) queries (flashinfer_case.h): head sizes 64,
// 128, 256 (tensor cores) and 96, 512 (SIMT); page sizes 1, 8, 16, 64, 128 in NHD and HND; GQA 1 to 80; lengths 1,
// 7, 17, 97, 513, 4099 in mixed prefill and decode; window, non-causal, cascade groups, the captured-decode
// grid; bf16 and fp16 queries; bf16/fp16 (either under either) and fp8 e4m3 / e5m2 caches, e4m3 with FP8 queries. Outputs poisoned (0xff: NaN) before each launch, and relaunched on a re-poisoned output (what a
// graph replay computes). Without a device every test prints "skipped: no CUDA device".
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <cstring>

#include "flashinfer_case.h"
#include "pagoda/attention/flashinfer/flashinfer_cuda.h"
#include "pagoda/attention/flashinfer/flashinfer_cuda_runner.h"

namespace pagoda {
namespace {

using fi_test::Case;
using fi_test::Inputs;
using fi_test::Layer;
using fi_test::Step;
using fi_test::StepSpec;

bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}
#define SKIP_WITHOUT_GPU() \
  if (!have_gpu()) GTEST_SKIP() << "skipped: no CUDA device"

struct DeviceBuf {
  void* p = nullptr;
  DeviceBuf(const void* src, size_t bytes) {
    EXPECT_EQ(cudaMalloc(&p, std::max<size_t>(bytes, 1)), cudaSuccess);
    if (src && bytes) {
      EXPECT_EQ(cudaMemcpy(p, src, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    }
  }
  ~DeviceBuf() { cudaFree(p); }
  DeviceBuf(const DeviceBuf&) = delete;
  DeviceBuf& operator=(const DeviceBuf&) = delete;
};

// Runs the case on the device; returns max |gpu - ref| over the outputs (infinity if one was not written)
// and checks a relaunch on a re-poisoned output gives the same bits.
double run_case(const Case& c, const Inputs& in) {
  const size_t qn = in.qn;
  const Step& st = in.st;
  DeviceBuf dq(in.qh.data(), qn * 2), dout(nullptr, qn * 2), dcache(in.cache.data(), in.cache.size()),
      dqsl(st.qsl.data(), st.qsl.size() * 4), dlens(st.ctx.data(), st.ctx.size() * 4),
      dtables(st.tables.data(), st.tables.size() * 4);
  FiCudaParams p = fi_test::host_params(c, in);
  fi_cuda_plan_alloc(in.plan, c.layer.num_q_heads, c.layer.head_size, &p.plan);
  fi_cuda_plan_upload(in.plan, &p.plan, nullptr);
  p.q = dq.p;
  p.out = dout.p;
  p.kv_cache = dcache.p;
  p.query_start_loc = static_cast<const int32_t*>(dqsl.p);
  p.seq_lens = static_cast<const int32_t*>(dlens.p);
  p.block_tables = static_cast<const int32_t*>(dtables.p);
  std::vector<uint16_t> got(qn), again(qn);
  for (auto* dst : {&got, &again}) {
    EXPECT_EQ(cudaMemset(dout.p, 0xff, qn * 2), cudaSuccess);
    fi_cuda_run(p, nullptr);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(dst->data(), dout.p, qn * 2, cudaMemcpyDeviceToHost), cudaSuccess);
  }
  fi_cuda_plan_free(&p.plan);
  EXPECT_EQ(std::memcmp(got.data(), again.data(), qn * 2), 0) << "a relaunch computes other bits";
  return fi_test::max_error(c, in, got);
}

// FP8 queries where the case asks for them over an e4m3 cache and this binary has FP8 MMA for the device.
bool fp8_queries(const Case& c) { return c.quantize_q && c.kv_dtype == DType::kF8E4M3 && c.mma() && fi_fp8_mma_available(); }

double gpu_tolerance(const Case& c) { return fi_test::tolerance(c, fp8_queries(c)); }

void check(const Case& c, uint64_t seed) {
  SCOPED_TRACE(c.str());
  const Inputs in = fi_test::make_inputs(c, seed, fp8_queries(c));
  const double err = run_case(c, in), tol = gpu_tolerance(c);
  EXPECT_LE(err, tol);
  std::printf("[ flashinfer gpu ] %s%s: max err %.3g (tolerance %.3g)\n", c.str().c_str(),
              c.mma() ? (fp8_queries(c) ? ", tensor cores, FP8 MMA" : ", tensor cores") : ", SIMT", err, tol);
}

const StepSpec kMixed{{1, 1, 1, 1, 1, 1, 7, 17, 97, 33}, {1, 7, 17, 97, 513, 4099, 7, 17, 97, 4099}, {}, {}};

TEST(FlashInferGpu, HeadSizesPagesLayoutsAndGqa) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 1;
  for (int hd : {64, 96, 128, 256, 512})  // 96 and 512: the SIMT kernel
    for (int bs : {1, 8, 16, 64, 128})
      for (int gqa : {1, 4, 8}) {
        Case c;
        c.layer = {4 * gqa, 4, hd, bs, 0, true, (bs + gqa) % 2 ? KvLayout::kHND : KvLayout::kNHD};
        c.spec = hd >= 256 ? StepSpec{{1, 1, 17, 7}, {97, 4099, 513, 7}, {}, {}} : kMixed;  // fewer reference flops
        c.dtype = c.kv_dtype = hd == 128 ? DType::kF16 : DType::kBF16;
        check(c, seed++);
      }
}

TEST(FlashInferGpu, WindowNonCausalAndFp8) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 100;
  for (DType kv : {DType::kBF16, DType::kF8E4M3, DType::kF8E5M2})
    for (int window : {0, 100})
      for (bool causal : {true, false})
        for (bool q8 : {false, true}) {
          if (q8 && kv != DType::kF8E4M3) continue;
          Case c;
          c.layer = {16, 4, 128, 16, window, causal, KvLayout::kNHD};
          c.spec = kMixed;
          c.kv_dtype = kv;
          c.quantize_q = q8;
          check(c, seed++);
        }
  for (int hd : {64, 256})
    for (DType kv : {DType::kF8E4M3, DType::kF8E5M2}) {
      Case c;
      c.layer = {32, 4, hd, 16, 0, true, KvLayout::kHND};
      c.spec = kMixed;
      c.dtype = DType::kF16;
      c.kv_dtype = kv;
      c.quantize_q = true;  // applies to e4m3 only
      check(c, seed++);
    }
}

// Decode steps (every task one m-tile): the tensor-core decode kernel, at every head size, page size, cache
// dtype and GQA 1-16, contexts of one key to 9000 (split many ways, merged by the merge kernel).
TEST(FlashInferGpu, DecodeKernel) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 300;
  const StepSpec decode{{1, 1, 1, 1, 1}, {1, 17, 190, 1100, 9000}, {}, {}};
  for (int hd : {64, 128, 256})
    for (DType kv : {DType::kBF16, DType::kF8E4M3, DType::kF8E5M2})
      for (auto [bs, gqa] : {std::pair{1, 1}, {16, 4}, {64, 8}, {16, 16}}) {
        Case c;
        c.layer = {4 * gqa, 4, hd, bs, 0, true, (bs + gqa) % 2 ? KvLayout::kHND : KvLayout::kNHD};
        c.spec = decode;
        c.dtype = hd == 64 ? DType::kF16 : DType::kBF16;
        c.kv_dtype = kv == DType::kBF16 ? c.dtype : kv;
        c.quantize_q = gqa == 4;
        const Inputs in = fi_test::make_inputs(c, seed, fp8_queries(c));
        ASSERT_TRUE(fi_decode_plan(in.plan)) << c.str();
        check(c, seed++);
      }
}

// A cache of the other 16-bit dtype (spec §3.3 declares both): the SIMT kernel, at any head size.
TEST(FlashInferGpu, Other16BitCaches) {
  SKIP_WITHOUT_GPU();
  uint64_t seed = 150;
  for (int hd : {128, 512})
    for (auto [q, kv] : {std::pair{DType::kBF16, DType::kF16}, {DType::kF16, DType::kBF16}}) {
      Case c;
      c.layer = {16, 4, hd, 16, 0, true, KvLayout::kHND};
      c.spec = hd == 512 ? StepSpec{{1, 1, 17, 7}, {97, 4099, 513, 7}, {}, {}} : kMixed;
      c.dtype = q;
      c.kv_dtype = kv;
      check(c, seed++);
    }
}

// Query heads per KV head past one m-tile: 24 (three m-tiles of packed rows) and 80 (two passes over the keys).
TEST(FlashInferGpu, LargeGqaGroups) {
  SKIP_WITHOUT_GPU();
  for (int gqa : {24, 80}) {
    Case c;
    c.layer = {2 * gqa, 2, 128, 16, 0, true, KvLayout::kNHD};
    c.spec = {{1, 1, 7, 3}, {97, 2000, 7, 600}, {}, {}};
    check(c, uint64_t(200 + gqa));
  }
}

TEST(FlashInferGpu, CascadeAndCapturedGrid) {
  SKIP_WITHOUT_GPU();
  for (int n : {2, 17, 256}) {
    Case c;
    c.layer = {32, 8, 128, 16, 0, true, KvLayout::kHND};
    c.cascade = true;
    c.spec.group_keys = {4096};
    for (int s = 0; s < n; ++s) c.spec.q_lens.push_back(1), c.spec.ctx.push_back(4096 + 1 + s % 97), c.spec.group.push_back(0);
    check(c, uint64_t(n));
  }
  for (int splits : {1, 8, 32}) {
    Case c;
    c.layer = {32, 8, 128, 16, 0, true, KvLayout::kNHD};
    c.spec = {{1, 1, 1, 1}, {1, 17, 513, 4099}, {}, {}};
    c.graph_splits = splits;
    check(c, uint64_t(300 + splits));
  }
}

// The runner through the AttentionRunner interface: eager steps
// with cascade, and a captured-decode runner whose one plan serves steps of any context; against dense
// float64 attention over the same cache bytes.
TEST(FlashInferGpu, RunnerEagerAndCaptured) {
  SKIP_WITHOUT_GPU();
  LayerShape shape;
  shape.num_q_heads = 16, shape.num_kv_heads = 4, shape.head_size = 128, shape.block_size = 16;
  shape.dtype = shape.kv_dtype = DType::kBF16;
  const Layer L{16, 4, 128, 16, 0, true, KvLayout::kNHD};
  for (int graph_batch : {0, 4}) {
    RunnerOptions o;
    o.cascade = graph_batch == 0;
    auto runner = make_flashinfer_cuda_runner(shape, o);
    runner->reserve({.max_tokens = 64, .max_seqs = 8, .max_model_len = 5000, .graph_batch = graph_batch});
    if (graph_batch > 0) runner->plan({}, nullptr);  // once, at capture
    for (int step = 0; step < 2; ++step) {
      std::mt19937_64 rng(uint64_t(40 + step + graph_batch));
      const StepSpec spec = graph_batch > 0 ? StepSpec{{1, 1, 1, 1}, {1 + step, 300, 2000 + step, 4099}, {}, {}}
                                            : StepSpec{{1, 1, 9, 1}, {1200, 1300, 800, 97}, {0, 0, 0, -1}, {512}};
      Step st = fi_test::make_step(spec, L.block_size, rng);
      std::vector<float> f32 = fi_test::make_cache(L, st, rng);
      std::vector<uint16_t> cache(f32.size());
      for (size_t i = 0; i < f32.size(); ++i) store_from_f32(cache.data(), DType::kBF16, i, std::isnan(f32[i]) ? 0.0f : f32[i]);
      const size_t qn = size_t(st.tokens) * L.num_q_heads * L.head_size;
      std::vector<float> qf = fi_test::random_nonzero(qn, rng);
      std::vector<uint16_t> qh(qn);
      std::vector<double> q(qn);
      for (size_t i = 0; i < qn; ++i) qh[i] = f32_to_bf16(qf[i]), q[i] = bf16_to_f32(qh[i]);
      const FiCacheView view{cache.data(), DType::kBF16, L.layout, st.num_blocks, L.num_kv_heads, L.head_size, L.block_size};
      const auto want = fi_test::dense_attention(L, st, q, view);
      if (graph_batch == 0) {
        AttentionBatch b{std::vector<int>(st.q_lens.begin(), st.q_lens.end()), std::vector<int>(st.ctx.begin(), st.ctx.end()),
                         st.tables.data(), st.stride};
        runner->plan(b, nullptr);
      }
      DeviceBuf dq(qh.data(), qn * 2), dout(nullptr, qn * 2), dcache(cache.data(), cache.size() * 2),
          dqsl(st.qsl.data(), st.qsl.size() * 4), dlens(st.ctx.data(), st.ctx.size() * 4),
          dtables(st.tables.data(), st.tables.size() * 4);
      EXPECT_EQ(cudaMemset(dout.p, 0xff, qn * 2), cudaSuccess);
      AttentionParams a;
      a.q = dq.p, a.out = dout.p, a.kv_cache = dcache.p, a.num_blocks = st.num_blocks;
      a.query_start_loc = static_cast<const int32_t*>(dqsl.p), a.seq_lens = static_cast<const int32_t*>(dlens.p);
      a.block_tables = static_cast<const int32_t*>(dtables.p), a.block_table_stride = st.stride;
      a.num_tokens = st.tokens, a.num_seqs = st.num_seqs();
      runner->run(a, nullptr);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
      std::vector<uint16_t> got(qn);
      ASSERT_EQ(cudaMemcpy(got.data(), dout.p, qn * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      double worst = 0;
      for (size_t i = 0; i < qn; ++i) {
        const double x = bf16_to_f32(got[i]);
        ASSERT_TRUE(std::isfinite(x)) << i;
        worst = std::max(worst, std::abs(x - want[i]));
      }
      Case c;
      c.layer = L;
      c.spec = spec;
      EXPECT_LE(worst, gpu_tolerance(c)) << "graph batch " << graph_batch << " step " << step;
    }
  }
}

}  // namespace
}  // namespace pagoda
