// One FLASHINFER kernel case, shared by the GPU test (flashinfer_test.cc) and the host emulation of the
// kernels' code (flashinfer_emulation_test.cc): a random step over a paged cache in the cache dtype, rounded
// queries, the step's plan, the float64 reference executing that plan over the same cache bytes, the kernel
// parameters over host arrays, and the error bound.
#pragma once

#include <cuda_fp8.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "../attention_cpu/flashinfer_test_util.h"
#include "pagoda/attention/flashinfer/flashinfer_cuda.h"

namespace pagoda::fi_test {

struct Case {
  Layer layer;
  StepSpec spec;
  DType dtype = DType::kBF16;     // queries and output
  DType kv_dtype = DType::kBF16;  // the cache
  bool cascade = false;
  int graph_splits = 0;  // > 0: the captured-decode grid
  int target = 264;      // CTAs the plan aims to fill (132 SMs x 2)
  bool quantize_q = false;  // e4m3 caches: FP8 queries (where the kernel applies it: see fp8_queries())

  // Whether the tensor-core kernel serves the case (the SIMT kernel serves other head sizes, and a cache of the
  // other 16-bit dtype).
  bool mma() const {
    const bool other16 = kv_dtype != dtype && dtype_size(kv_dtype) == 2;
    return !other16 && (layer.head_size == 64 || layer.head_size == 128 || layer.head_size == 256);
  }
  std::string str() const {
    char b[200];
    std::snprintf(b, sizeof b, "heads %d/%d x %d, block %d %s, %s / kv %s%s%s%s", layer.num_q_heads, layer.num_kv_heads,
                  layer.head_size, layer.block_size, kv_layout_str(layer.layout), std::string(dtype_name(dtype)).c_str(),
                  std::string(dtype_name(kv_dtype)).c_str(), quantize_q ? " (fp8 queries)" : "",
                  cascade ? ", cascade" : "", graph_splits ? ", graph grid" : "");
    return b;
  }
};

struct Inputs {
  Step st;
  std::vector<uint8_t> cache;  // the cache's bytes (unused blocks zero)
  float ks = 1.0f, vs = 1.0f;  // fp8 scales
  std::vector<uint16_t> qh;    // queries in the case's dtype
  std::vector<double> q;       // the queries the kernel multiplies: qh, or its per-row e4m3 quantization
  FiPlan plan;
  std::vector<double> want;  // the float64 reference of the same plan
  size_t qn = 0;
};

// The kernel's per-row query quantization (flashinfer_cuda_mma.cuh): scale amax / 448, e4m3 codes of x / scale.
inline void quantize_rows(const Case& c, Inputs& in) {
  const int hd = c.layer.head_size;
  for (size_t row = 0; row < in.qn / size_t(hd); ++row) {
    float amax = 0;
    for (int d = 0; d < hd; ++d) amax = std::max(amax, std::abs(float(in.q[row * hd + size_t(d)])));
    const float qs = amax > 0 ? amax / 448.0f : 1.0f;
    for (int d = 0; d < hd; ++d) {
      const float x = float(in.q[row * hd + size_t(d)]);
      __nv_fp8_e4m3 v;
      v.__x = __nv_cvt_float_to_fp8(x / qs, __NV_SATFINITE, __NV_E4M3);
      in.q[row * hd + size_t(d)] = double(float(v)) * double(qs);
    }
  }
}

// `fp8_queries`: whether the kernel under test quantizes the queries (the case asks and the kernel can).
inline Inputs make_inputs(const Case& c, uint64_t seed, bool fp8_queries) {
  const Layer& L = c.layer;
  Inputs in;
  std::mt19937_64 rng(seed);
  in.st = make_step(c.spec, L.block_size, rng);
  const Step& st = in.st;
  std::vector<float> f32 = make_cache(L, st, rng);
  const bool fp8 = dtype_is_fp8(c.kv_dtype);
  in.ks = fp8 ? 0.02f : 1.0f, in.vs = fp8 ? 0.03f : 1.0f;
  in.cache.resize(f32.size() * dtype_size(c.kv_dtype));
  for (size_t i = 0; i < f32.size(); ++i) {
    const bool is_v = (i / size_t(L.head_size)) % 2 == 1;
    const float x = std::isnan(f32[i]) ? 0.0f : f32[i];
    store_from_f32(in.cache.data(), c.kv_dtype, i, fp8 ? x / (is_v ? in.vs : in.ks) : x);
  }
  in.qn = size_t(st.tokens) * L.num_q_heads * L.head_size;
  std::vector<float> qf = random_nonzero(in.qn, rng);
  in.qh.resize(in.qn);
  in.q.resize(in.qn);
  for (size_t i = 0; i < in.qn; ++i) {
    store_from_f32(in.qh.data(), c.dtype, i, qf[i]);
    in.q[i] = load_as_f32(in.qh.data(), c.dtype, i);
  }
  if (fp8_queries) quantize_rows(c, in);
  in.plan.reserve(L.plan_shape(), {st.tokens, st.num_seqs(), *std::max_element(st.ctx.begin(), st.ctx.end()), c.target,
                                   c.cascade, c.graph_splits});
  if (c.graph_splits > 0) in.plan.build_graph_decode(st.num_seqs(), c.graph_splits);
  else in.plan.build(st.fi());

  in.want = run_plan_reference(L, st, in.plan, in.q,
                               {in.cache.data(), c.kv_dtype, L.layout, st.num_blocks, L.num_kv_heads, L.head_size,
                                L.block_size, in.ks, in.vs});
  return in;
}

// The kernel parameters over the inputs' host arrays; the caller points q, out, the cache, the step's arrays
// and p.plan at device copies (GPU) or leaves them (emulation: plan arrays from in.plan).
inline FiCudaParams host_params(const Case& c, const Inputs& in) {
  const Layer& L = c.layer;
  FiCudaParams p;
  p.q = in.qh.data();
  p.dtype = c.dtype;
  p.kv_cache = in.cache.data();
  p.kv_dtype = c.kv_dtype;
  p.layout = L.layout;
  p.num_q_heads = L.num_q_heads;
  p.num_kv_heads = L.num_kv_heads;
  p.head_size = L.head_size;
  p.block_size = L.block_size;
  p.sliding_window = L.window;
  p.causal = L.causal;
  p.k_scale = in.ks;
  p.v_scale = in.vs;
  p.quantize_q = c.quantize_q;
  p.query_start_loc = in.st.qsl.data();
  p.seq_lens = in.st.ctx.data();
  p.block_tables = in.st.tables.data();
  p.block_table_stride = in.st.stride;
  return p;
}

// The output is a convex combination of values of magnitude <= 1 (fp8: <= 1.125 after e4m3/e5m2 rounding,
// 1.27 bounds |k| |v|), rounded once to the output dtype (at magnitude < 1 at most 2^-8 bf16, 2^-11 fp16); the
// float32 arithmetic (exp2f and logf within a few ulps, inside the factor 2) stays within fi_test::tolerance
// at float32 roundoff. The tensor-core kernel also rounds each probability (in [0, 1]) to the p.v product's
// type before multiplying: the query dtype over 16-bit caches, fp16 over fp8 ones (relative 2^-8 / 2^-11),
// which moves the output by at most that times max |v|. `device_fp8`: FP8 products computed by the tensor
// cores, whose accumulation of e4m3 products is not IEEE float32; a relative 2^-13 of sum |q k| per score
// (FP8 accumulators keep at least 14 significant bits) moves a logit by 2^-13 hd 1.27 / sqrt(hd), and the
// output by twice that times max |v|.
inline double tolerance(const Case& c, bool device_fp8 = false) {
  const double out_ulp = c.dtype == DType::kBF16 ? 0x1p-8 : 0x1p-11;
  const int max_ctx = *std::max_element(c.spec.ctx.begin(), c.spec.ctx.end());
  double tol = out_ulp + 2 * 1.27 * fi_test::tolerance(c.layer.head_size, max_ctx, kU32);
  if (c.mma()) tol += 1.27 * (dtype_is_fp8(c.kv_dtype) || c.dtype == DType::kF16 ? 0x1p-11 : 0x1p-8);
  if (device_fp8) tol += 2 * 1.27 * 0x1p-13 * 1.27 * std::sqrt(double(c.layer.head_size));
  return tol;
}

// max |got - want| over the outputs, or infinity when one was not written (poison) or is not finite.
inline double max_error(const Case& c, const Inputs& in, const std::vector<uint16_t>& got) {
  double worst = 0;
  for (size_t i = 0; i < in.qn; ++i) {
    const double x = load_as_f32(got.data(), c.dtype, i);
    if (!std::isfinite(x)) return INFINITY;
    worst = std::max(worst, std::abs(x - in.want[i]));
  }
  return worst;
}

}  // namespace pagoda::fi_test
