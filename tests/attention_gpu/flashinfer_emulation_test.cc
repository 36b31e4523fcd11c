// FLASHINFER's CUDA kernel code (flashinfer_cuda_row.cuh: the per-lane steps of the attend and merge kernels)
// run on the host, one warp emulated as 32 lanes in lockstep with the shuffle reduction's butterfly, against
// the float64 CPU reference executing the same plan over the same cache bytes and rounded queries. It checks
// the kernels' own indexing (rows, packed GQA heads, NHD/HND pages of any size, run-time split ranges, slabs,
// the merge) on machines without a GPU; flashinfer_test.cc runs the compiled kernels on the device.
#include <gtest/gtest.h>

#include "../attention_cpu/flashinfer_test_util.h"
#include "pagoda/attention/flashinfer/flashinfer_cuda_row.cuh"

namespace pagoda {
namespace {

using namespace fi_detail;
using fi_test::Layer;
using fi_test::Step;
using fi_test::StepSpec;

template <typename T, KvKind kKv>
void emulate(const FiCudaParams& p) {
  const int g = p.num_q_heads / p.num_kv_heads;
  for (int i = 0; i < p.plan.num_tasks; ++i) {
    const FiTask task = p.plan.tasks[i];
    for (int kvh = 0; kvh < p.num_kv_heads; ++kvh)
      for (int pr = 0; pr < (task.row_end - task.row_begin) * g; ++pr) {  // the warps of the CTA, one after another
        RowState st[32];
        for (int lane = 0; lane < 32; ++lane) row_begin<T>(p, task, kvh, pr, lane, st[lane]);
        for (int k = st[0].kb; k < st[0].ke; ++k) {
          const int64_t row = key_row(p, task, kvh, st[0], k);
          if (row < 0) continue;
          float v[32], w[32];
          for (int lane = 0; lane < 32; ++lane) v[lane] = key_part<T, kKv>(p, st[lane], row, lane);
          for (int o = 16; o > 0; o /= 2) {  // __shfl_xor_sync butterfly
            for (int lane = 0; lane < 32; ++lane) w[lane] = v[lane] + v[lane ^ o];
            std::copy(w, w + 32, v);
          }
          for (int lane = 0; lane < 32; ++lane) key_update<T, kKv>(p, st[lane], v[lane], row, lane);
        }
        for (int lane = 0; lane < 32; ++lane) row_end<T>(p, task, st[lane], lane);
      }
  }
  for (int i = 0; i < p.plan.num_merged; ++i)
    for (int x = 0; x < p.num_q_heads * p.head_size; ++x) merge_elem<T>(p, i, x);
}

struct Case {
  Layer layer;
  StepSpec spec;
  DType dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;
  bool cascade = false;
  int graph_splits = 0;
  int target = 64;
};

void check(const Case& c, uint64_t seed) {
  const Layer& L = c.layer;
  std::mt19937_64 rng(seed);
  Step st = fi_test::make_step(c.spec, L.block_size, rng);
  std::vector<float> f32 = fi_test::make_cache(L, st, rng);
  const bool fp8 = dtype_is_fp8(c.kv_dtype);
  const float ks = fp8 ? 0.02f : 1.0f, vs = fp8 ? 0.03f : 1.0f;
  std::vector<uint8_t> cache(f32.size() * dtype_size(c.kv_dtype));
  for (size_t i = 0; i < f32.size(); ++i) {
    const bool is_v = (i / size_t(L.head_size)) % 2 == 1;
    const float x = std::isnan(f32[i]) ? 0.0f : f32[i];
    store_from_f32(cache.data(), c.kv_dtype, i, fp8 ? x / (is_v ? vs : ks) : x);
  }
  const size_t qn = size_t(st.tokens) * L.num_q_heads * L.head_size;
  std::vector<float> qf = fi_test::random_nonzero(qn, rng);
  std::vector<uint16_t> qh(qn), out(qn, 0xffff);  // poisoned: NaN in bf16 and fp16
  std::vector<double> q(qn);
  for (size_t i = 0; i < qn; ++i) {
    store_from_f32(qh.data(), c.dtype, i, qf[i]);
    q[i] = load_as_f32(qh.data(), c.dtype, i);
  }
  FiPlan plan;
  plan.reserve(L.plan_shape(), {st.tokens, st.num_seqs(), *std::max_element(st.ctx.begin(), st.ctx.end()), c.target,
                                c.cascade, c.graph_splits});
  if (c.graph_splits > 0) plan.build_graph_decode(st.num_seqs(), c.graph_splits);
  else plan.build(st.fi());

  std::vector<double> want(qn, std::nan("")), so(size_t(plan.max_slabs()) * L.num_q_heads * L.head_size),
      sl(size_t(plan.max_slabs()) * L.num_q_heads);
  FiCpuParams<double> r;
  r.query = q.data();
  r.out = want.data();
  r.cache = {cache.data(), c.kv_dtype, L.layout, st.num_blocks, L.num_kv_heads, L.head_size, L.block_size, ks, vs};
  r.query_start_loc = st.qsl.data();
  r.seq_lens = st.ctx.data();
  r.block_tables = st.tables.data();
  r.block_table_stride = st.stride;
  r.num_seqs = st.num_seqs();
  r.num_q_heads = L.num_q_heads;
  r.plan = &plan;
  r.slab_o = so.data();
  r.slab_lse = sl.data();
  fi_cpu_run(r);

  std::vector<float> slab_o(size_t(plan.max_slabs()) * L.num_q_heads * L.head_size, std::nanf("")),
      slab_lse(size_t(plan.max_slabs()) * L.num_q_heads, std::nanf(""));
  FiCudaParams p;
  p.plan.tasks = const_cast<FiTask*>(plan.tasks());
  p.plan.row_token = const_cast<int32_t*>(plan.row_token());
  p.plan.row_seq = const_cast<int32_t*>(plan.row_seq());
  p.plan.merge_token = const_cast<int32_t*>(plan.merge_token());
  p.plan.merge_indptr = const_cast<int32_t*>(plan.merge_indptr());
  p.plan.merge_slab = const_cast<int32_t*>(plan.merge_slab());
  p.plan.slab_o = slab_o.data();
  p.plan.slab_lse = slab_lse.data();
  p.plan.num_tasks = plan.num_tasks();
  p.plan.num_merged = plan.num_merged();
  p.q = qh.data();
  p.out = out.data();
  p.dtype = c.dtype;
  p.kv_cache = cache.data();
  p.kv_dtype = c.kv_dtype;
  p.layout = L.layout;
  p.num_q_heads = L.num_q_heads;
  p.num_kv_heads = L.num_kv_heads;
  p.head_size = L.head_size;
  p.block_size = L.block_size;
  p.sliding_window = L.window;
  p.causal = L.causal;
  p.k_scale = ks;
  p.v_scale = vs;
  p.query_start_loc = st.qsl.data();
  p.seq_lens = st.ctx.data();
  p.block_tables = st.tables.data();
  p.block_table_stride = st.stride;
  const bool bf16 = c.dtype == DType::kBF16;
  switch (c.kv_dtype) {
    case DType::kF8E4M3: bf16 ? emulate<__nv_bfloat16, KvKind::kE4M3>(p) : emulate<__half, KvKind::kE4M3>(p); break;
    case DType::kF8E5M2: bf16 ? emulate<__nv_bfloat16, KvKind::kE5M2>(p) : emulate<__half, KvKind::kE5M2>(p); break;
    default: bf16 ? emulate<__nv_bfloat16, KvKind::kSame>(p) : emulate<__half, KvKind::kSame>(p); break;
  }
  double worst = 0;
  for (size_t i = 0; i < qn; ++i) {
    const double x = load_as_f32(out.data(), c.dtype, i);
    ASSERT_TRUE(std::isfinite(x)) << "output " << i << " not written";
    worst = std::max(worst, std::abs(x - want[i]));
  }
  // flashinfer_test.cc's bound: one rounding to the output dtype plus the float32 arithmetic's, fp8 values
  // up to 1.125.
  const double tol = (bf16 ? 0x1p-8 : 0x1p-11) +
                     2 * 1.27 * fi_test::tolerance(L.head_size, *std::max_element(st.ctx.begin(), st.ctx.end()), fi_test::kU32);
  EXPECT_LE(worst, tol);
  std::printf("[ flashinfer emulation ] heads %d/%d x %d, block %d %s, %s / kv %s%s%s: max err %.3g (tolerance %.3g)\n",
              L.num_q_heads, L.num_kv_heads, L.head_size, L.block_size, kv_layout_str(L.layout),
              std::string(dtype_name(c.dtype)).c_str(), std::string(dtype_name(c.kv_dtype)).c_str(),
              c.cascade ? ", cascade" : "", c.graph_splits ? ", graph grid" : "", worst, tol);
}

const StepSpec kMixed{{1, 1, 1, 1, 7, 17, 33}, {1, 17, 513, 4099, 7, 97, 600}, {}, {}};

TEST(FlashInferEmulation, HeadSizesPagesLayoutsAndGqa) {
  uint64_t seed = 1;
  for (auto [hd, bs, gqa] : {std::tuple{64, 1, 1}, {64, 16, 8}, {128, 8, 4}, {128, 64, 1}, {256, 16, 4}, {512, 128, 2}}) {
    Case c;
    c.layer = {2 * gqa, 2, hd, bs, 0, true, seed % 2 ? KvLayout::kHND : KvLayout::kNHD};
    c.spec = kMixed;
    c.dtype = c.kv_dtype = hd == 128 ? DType::kF16 : DType::kBF16;
    check(c, seed++);
  }
}

TEST(FlashInferEmulation, WindowNonCausalAndFp8) {
  uint64_t seed = 50;
  for (DType kv : {DType::kF8E4M3, DType::kF8E5M2}) {
    Case c;
    c.layer = {8, 2, 64, 16, 0, true, KvLayout::kNHD};
    c.spec = kMixed;
    c.kv_dtype = kv;
    check(c, seed++);
  }
  for (int window : {0, 100})
    for (bool causal : {true, false}) {
      if (window == 0 && causal) continue;
      Case c;
      c.layer = {8, 2, 64, 16, window, causal, KvLayout::kHND};
      c.spec = kMixed;
      check(c, seed++);
    }
}

TEST(FlashInferEmulation, CascadeAndCapturedGrid) {
  Case c;
  c.layer = {8, 2, 64, 16, 0, true, KvLayout::kHND};
  c.cascade = true;
  c.spec.group_keys = {1024};
  for (int s = 0; s < 24; ++s) c.spec.q_lens.push_back(s % 7 == 3 ? 5 : 1), c.spec.ctx.push_back(1024 + 6 + s * 3), c.spec.group.push_back(0);
  check(c, 70);
  for (int splits : {1, 4, 16}) {
    Case d;
    d.layer = {8, 2, 64, 16, 0, true, KvLayout::kNHD};
    d.spec = {{1, 1, 1, 1}, {1, 17, 513, 4099}, {}, {}};
    d.graph_splits = splits;
    check(d, uint64_t(80 + splits));
  }
}

}  // namespace
}  // namespace pagoda
