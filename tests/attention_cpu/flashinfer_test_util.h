// FLASHINFER's CPU tests: a step over a paged cache with optional shared prefixes (the prefix cache's
// identical block ids), filled with fresh random values, and plain dense attention in float64 over the
// cache's own values (the oracle).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "pagoda/attention/flashinfer/flashinfer_cpu.h"
#include "pagoda/attention/flashinfer/flashinfer_plan.h"
#include "pagoda/core/dtype.h"

namespace pagoda::fi_test {

constexpr double kU64 = 0x1p-53;  // float64 unit roundoff
constexpr double kU32 = 0x1p-24;  // float32 unit roundoff

struct Layer {
  int num_q_heads = 4, num_kv_heads = 1, head_size = 64, block_size = 16;
  int window = 0;
  bool causal = true;
  KvLayout layout = KvLayout::kNHD;
  FiPlanShape plan_shape() const { return {num_q_heads, num_kv_heads, block_size, window, causal}; }
};

// Sequence s adds q_lens[s] tokens to a context of ctx[s]; groups[s] >= 0 makes the first prefix[groups[s]]
// keys of s use the same blocks as the other sequences of that group (a prefix-cache hit).
struct StepSpec {
  std::vector<int> q_lens, ctx;
  std::vector<int> group;        // empty or [num_seqs]: -1 or a group id
  std::vector<int> group_keys;   // [num groups]: shared keys, a multiple of the block size
};

struct Step {
  std::vector<int32_t> q_lens, ctx, qsl{0}, tables;
  int stride = 0, num_blocks = 0, tokens = 0;
  int num_seqs() const { return int(ctx.size()); }
  FiStep fi() const { return {q_lens.data(), ctx.data(), tables.data(), stride, num_seqs()}; }
};

inline Step make_step(const StepSpec& spec, int block_size, std::mt19937_64& rng) {
  Step st;
  const int S = int(spec.ctx.size());
  for (int s = 0; s < S; ++s) {
    st.q_lens.push_back(spec.q_lens[size_t(s)]);
    st.ctx.push_back(spec.ctx[size_t(s)]);
    st.qsl.push_back(st.qsl.back() + spec.q_lens[size_t(s)]);
    st.stride = std::max(st.stride, (spec.ctx[size_t(s)] + block_size - 1) / block_size);
  }
  st.tokens = st.qsl.back();
  st.tables.assign(size_t(S) * st.stride, -1);
  // Shared blocks first, then every sequence's own; ids shuffled so that neighbours in a table are not
  // neighbours in the cache.
  int next = 0;
  std::vector<std::vector<int32_t>> shared(spec.group_keys.size());
  for (size_t g = 0; g < spec.group_keys.size(); ++g)
    for (int b = 0; b < spec.group_keys[g] / block_size; ++b) shared[g].push_back(next++);
  for (int s = 0; s < S; ++s) {
    const int g = spec.group.empty() ? -1 : spec.group[size_t(s)];
    const int nb = (spec.ctx[size_t(s)] + block_size - 1) / block_size;
    for (int b = 0; b < nb; ++b)
      st.tables[size_t(s) * st.stride + b] = g >= 0 && b < int(shared[size_t(g)].size()) ? shared[size_t(g)][size_t(b)] : next++;
  }
  std::vector<int32_t> perm(size_t(next) + 3);
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  for (auto& id : st.tables)
    if (id >= 0) id = perm[size_t(id)];
  st.num_blocks = next + 3;
  return st;
}

inline std::vector<float> random_nonzero(size_t n, std::mt19937_64& rng) {
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = (rng() & 1) ? mag(rng) : -mag(rng);
  return v;
}

// A float32 cache of the layer's layout with every key and value of the step's sequences random (the
// unused blocks NaN, so that a read of them fails the comparison).
inline std::vector<float> make_cache(const Layer& L, const Step& st, std::mt19937_64& rng) {
  std::vector<float> cache(size_t(st.num_blocks) * L.num_kv_heads * L.block_size * 2 * L.head_size,
                           std::numeric_limits<float>::quiet_NaN());
  FiCacheView v{nullptr, DType::kF32, L.layout, st.num_blocks, L.num_kv_heads, L.head_size, L.block_size};
  for (int s = 0; s < st.num_seqs(); ++s)
    for (int p = 0; p < st.ctx[size_t(s)]; ++p) {
      const int32_t id = st.tables[size_t(s) * st.stride + p / L.block_size];
      for (int h = 0; h < L.num_kv_heads; ++h) {
        float* row = cache.data() + v.row(id, h, p % L.block_size);
        if (!std::isnan(row[0])) continue;  // a shared block: written once
        auto x = random_nonzero(size_t(2 * L.head_size), rng);
        std::copy(x.begin(), x.end(), row);
      }
    }
  return cache;
}

// Plain attention in float64: every query token over its own sequence's keys under the mask, reading
// element values through `view` (any dtype and layout).
inline std::vector<double> dense_attention(const Layer& L, const Step& st, const std::vector<double>& q, const FiCacheView& view) {
  const int hd = L.head_size, g = L.num_q_heads / L.num_kv_heads;
  const double scale = 1.0 / std::sqrt(double(hd));
  std::vector<double> out(size_t(st.tokens) * L.num_q_heads * hd, 0.0);
  std::vector<double> sc;
  auto elem = [&](int64_t i, float sc_) {
    return double(load_as_f32(view.data, view.dtype, size_t(i))) * (dtype_is_fp8(view.dtype) ? double(sc_) : 1.0);
  };
  for (int s = 0; s < st.num_seqs(); ++s) {
    const int len = st.ctx[size_t(s)], ql = st.q_lens[size_t(s)];
    for (int i = 0; i < ql; ++i) {
      const int t = st.qsl[size_t(s)] + i, pos = len - ql + i;
      for (int h = 0; h < L.num_q_heads; ++h) {
        const int kvh = h / g;
        const double* qq = q.data() + (int64_t(t) * L.num_q_heads + h) * hd;
        sc.assign(size_t(len), -std::numeric_limits<double>::infinity());
        double mx = -std::numeric_limits<double>::infinity();
        for (int k = 0; k < len; ++k) {
          if (!fi_visible(pos, k, L.window, L.causal)) continue;
          const int64_t e = view.row(st.tables[size_t(s) * st.stride + k / L.block_size], kvh, k % L.block_size);
          double d = 0;
          for (int x = 0; x < hd; ++x) d += qq[x] * elem(e + x, view.k_scale);
          sc[size_t(k)] = d * scale;
          mx = std::max(mx, sc[size_t(k)]);
        }
        double sum = 0;
        double* o = out.data() + (int64_t(t) * L.num_q_heads + h) * hd;
        for (int k = 0; k < len; ++k) {
          if (sc[size_t(k)] == -std::numeric_limits<double>::infinity()) continue;
          const double w = std::exp(sc[size_t(k)] - mx);
          sum += w;
          const int64_t e = view.row(st.tables[size_t(s) * st.stride + k / L.block_size], kvh, k % L.block_size) + hd;
          for (int x = 0; x < hd; ++x) o[x] += w * elem(e + x, view.v_scale);
        }
        for (int x = 0; x < hd; ++x) o[x] /= sum;
      }
    }
  }
  return out;
}

// The float64 executor of `plan` over the step (flashinfer_cpu.h): out[token, query head, dimension], NaN
// wherever the plan writes nothing.
inline std::vector<double> run_plan_reference(const Layer& L, const Step& st, const FiPlan& plan,
                                              const std::vector<double>& q, const FiCacheView& cache) {
  std::vector<double> out(size_t(st.tokens) * L.num_q_heads * L.head_size, std::nan(""));
  std::vector<double> slab_o(size_t(plan.max_slabs()) * L.num_q_heads * L.head_size, std::nan(""));
  std::vector<double> slab_lse(size_t(plan.max_slabs()) * L.num_q_heads, std::nan(""));
  FiCpuParams<double> p;
  p.query = q.data();
  p.out = out.data();
  p.cache = cache;
  p.query_start_loc = st.qsl.data();
  p.seq_lens = st.ctx.data();
  p.block_tables = st.tables.data();
  p.block_table_stride = st.stride;
  p.num_seqs = st.num_seqs();
  p.num_q_heads = L.num_q_heads;
  p.plan = &plan;
  p.slab_o = slab_o.data();
  p.slab_lse = slab_lse.data();
  fi_cpu_run(p);
  return out;
}

// The bound on |executor - dense| for outputs that are convex combinations of values of magnitude <= 1, both
// computed with unit roundoff u: a score's dot product errs by <= hd u |q||k| (|q_i k_i| <= 1, times the scale
// 1/sqrt(hd): hd^1.5 u absolute), which exp() turns into a relative weight error of that size; the sums over
// n keys (and the log-sum-exp merge, a few operations per partial) add n u; each side errs by at most that,
// and the factor 2 covers the normalisation.
inline double tolerance(int head_size, int max_keys, double u) {
  return 4.0 * (std::pow(double(head_size), 1.5) + max_keys + 64) * u;
}

}  // namespace pagoda::fi_test
