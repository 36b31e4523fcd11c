// Greedy and seeded sampling, one 1024-thread block per row of logits.
//
// Sampling finds the kept set as a threshold on x = logit / T: min-p is a per-token test, top-k and top-p
// each become "x >= t" for a t found by a histogram search (search() below), and the draw is a Gumbel-max
// over the kept tokens. Every pass reads the row again (from L2 when the batch's logits fit, else HBM):
// 1 pass (max) + 1 (draw), plus typically 2-3 per active top-k / top-p search.
#include <cmath>

#include "pagoda/ops/cuda/cuda_common.cuh"
#include "pagoda/ops/cuda/philox.h"
#include "pagoda/ops/cuda/sampling.h"

namespace pagoda {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 1024;
constexpr int kBins = 256;
// exp(x - max) underflows to 0 in fp32 below -103.97: tokens further down have no mass and are excluded.
constexpr float kRangeNats = 104.0f;
// The first search pass histograms only the entries within this many nats of the maximum (probability ratio
// >= e^-16 = 1.1e-7), where top-k and top-p boundaries usually are; the rest is searched only when needed.
constexpr float kWindowNats = 16.0f;
// Each search pass strictly shrinks the set of distinct values still in question (the range's two ends
// land in bins 0 and 255), so the search ends; in practice in 2-4 passes. The cap only guards against bugs.
constexpr int kMaxSearchPasses = 64;
constexpr float kMassScale = 4294967296.0f;  // probability ratios in 2^-32 fixed point

// x = logit * inv_t is always rounded on its own (__fmul_rn is never fused into an FMA): every pass, and
// the threshold comparisons, must see the same x for the same token.
__device__ __forceinline__ float scaled(float logit, float inv_t) { return __fmul_rn(logit, inv_t); }

struct RowCtx {
  const float* row;
  int vocab;
  float inv_t;  // 1 / temperature
  float m;      // largest x
  float lo0;    // m - kRangeNats
  float min_p;  // <= 0: off
};

// Token with x = logit * inv_t is a candidate: within range of the max and passing min-p.
__device__ __forceinline__ bool candidate(const RowCtx& c, float x) {
  return x >= c.lo0 && (c.min_p <= 0.f || expf(x - c.m) >= c.min_p);
}

// Visits the row in groups of 4 consecutive entries, group g = i / 4 by lane g % 32 of warp (g / 32) %
// nwarps. f(first_index, values[4], n) with n valid entries (0..4). Every lane of a warp makes the same
// number of calls, so f may use warp-synchronous intrinsics.
template <typename F>
__device__ __forceinline__ void for_each_group(const float* row, int vocab, F&& f) {
  const int groups = (vocab + 3) / 4;
  const bool vec = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
  const int lane = threadIdx.x & 31;
  for (int base = threadIdx.x & ~31; base < groups; base += blockDim.x) {
    const int g = base + lane;
    const int64_t i0 = int64_t(g) * 4;
    const int n = g < groups ? min(4, int(vocab - i0)) : 0;
    float v[4] = {0.f, 0.f, 0.f, 0.f};
    if (n == 4 && vec) {
      const float4 q = *reinterpret_cast<const float4*>(row + i0);
      v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (j < n) v[j] = row[i0 + j];
    }
    f(i0, v, n);
  }
}

// Index of the largest logit (NaN largest, ties to the lowest index). Every thread gets it.
__device__ uint32_t block_argmax(const float* row, int vocab) {
  uint64_t best = 0;
  for_each_group(row, vocab, [&](int64_t i0, const float (&v)[4], int n) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      if (j < n) {
        const uint64_t key = pack_value_index(v[j], uint32_t(i0 + j));
        best = key > best ? key : best;
      }
    }
  });
  return packed_index(block_max_u64(best));
}

struct Hist {
  uint32_t count[kBins];
  uint32_t kmin[kBins];  // ordered_key of the smallest / largest x in the bin
  uint32_t kmax[kBins];
  unsigned long long mass[kBins];  // sum of round(exp(x - m) * 2^32)
};

struct SearchState {
  unsigned long long above;   // measure of the candidates above the current range
  unsigned long long target;  // measure to reach
  float lo, hi;               // next range: [lo, hi], or [lo, hi) when hi_open
  float t;                    // the threshold, when done
  int done, hi_open;
};

// Adds one entry per participating lane to its bin; lanes with the same bin are combined first, so a bin
// hit by the whole warp costs one shared-memory atomic, not 32 serialised ones.
// PRECOND: called by all 32 lanes of the warp.
__device__ __forceinline__ void hist_add(Hist& h, bool in, int bin, uint32_t key, unsigned long long fixed) {
  const unsigned active = __ballot_sync(kFullMask, in);
  if (!in) return;
  const unsigned peers = __match_any_sync(active, bin);
  const uint32_t mass_hi = __reduce_add_sync(peers, uint32_t(fixed >> 16));  // <= 32 * 2^16: no overflow
  const uint32_t mass_lo = __reduce_add_sync(peers, uint32_t(fixed & 0xffffu));
  const uint32_t kmin = __reduce_min_sync(peers, key);
  const uint32_t kmax = __reduce_max_sync(peers, key);
  if ((threadIdx.x & 31) == __ffs(peers) - 1) {
    atomicAdd(&h.count[bin], uint32_t(__popc(peers)));
    atomicAdd(&h.mass[bin], (static_cast<unsigned long long>(mass_hi) << 16) + mass_lo);
    atomicMin(&h.kmin[bin], kmin);
    atomicMax(&h.kmax[bin], kmax);
  }
}

// Warp 0: finds the bin where the measure, accumulated from the top, reaches the target, and writes the
// next step to `s`. `first`: the window pass; `total` is then the measure of the whole domain [full_lo, m].
__device__ void scan_bins(const Hist& h, SearchState& s, bool mass_mode, bool first, float top_p,
                          unsigned long long target, unsigned long long above, float lo, float full_lo,
                          unsigned long long total) {
  const int lane = threadIdx.x;
  unsigned long long mu[8], lane_total = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    mu[j] = mass_mode ? h.mass[8 * lane + j] : h.count[8 * lane + j];
    lane_total += mu[j];
  }
  unsigned long long suffix = lane_total;  // measure of bins >= 8 * lane
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const unsigned long long y = __shfl_down_sync(kFullMask, suffix, o);
    if (lane + o < 32) suffix += y;
  }
  if (first && mass_mode) {
    target = static_cast<unsigned long long>(ceil(double(top_p) * double(total)));
    target = target < 1 ? 1 : target;
  }
  const unsigned reach = __ballot_sync(kFullMask, above + suffix >= target);
  if (reach == 0) {
    if (lane == 0) {
      if (first && lo > full_lo && total >= target) {  // the boundary lies below the window
        s.done = 0;
        s.lo = full_lo;
        s.hi = lo;
        s.hi_open = 1;
        s.above = above + suffix;
        s.target = target;
      } else {  // fewer candidates than the target: keep them all
        s.done = 1;
        s.t = full_lo;
      }
    }
    return;
  }
  if (lane == 31 - __clz(reach)) {
    unsigned long long cum = above + suffix - lane_total;
    int bin = -1;
#pragma unroll
    for (int j = 7; j >= 0; --j) {
      if (bin < 0) {
        if (cum + mu[j] >= target) bin = 8 * lane + j;
        else cum += mu[j];
      }
    }
    const float vmin = key_to_float(h.kmin[bin]), vmax = key_to_float(h.kmax[bin]);
    s.target = target;
    s.above = cum;
    s.done = vmin == vmax;
    s.t = vmin;
    s.lo = vmin;
    s.hi = vmax;
    s.hi_open = 0;
  }
}

// The largest value t among the candidates with x >= floor such that the measure (count, or fixed-point
// mass when mass_mode) of the candidates with x >= t reaches the target: k, or ceil(top_p * their total
// mass). Returns max(floor, lo0) when all of them are needed. Every thread gets the result.
//
// Pass 0 histograms only the window [m - kWindowNats, m] (most of a real vocabulary lies further down and
// costs one comparison) and sums the measure of the whole domain. Each later pass histograms the entries
// of one range: below the window if the target was not reached in it, else the boundary bin [min, max].
__device__ float search(const RowCtx& c, Hist& h, SearchState& s, bool mass_mode, unsigned long long count_target,
                        float top_p, float floor) {
  const float full_lo = fmaxf(floor, c.lo0);
  float lo = fmaxf(full_lo, c.m - kWindowNats), hi = c.m;
  bool hi_open = false;
  unsigned long long above = 0, target = count_target;
  for (int pass = 0; pass < kMaxSearchPasses; ++pass) {
    if (!(lo < hi)) return lo;
    for (int b = threadIdx.x; b < kBins; b += blockDim.x) {
      h.count[b] = 0;
      h.kmin[b] = 0xffffffffu;
      h.kmax[b] = 0;
      h.mass[b] = 0;
    }
    __syncthreads();
    const float scale = float(kBins) / (hi - lo);  // may be +inf for a subnormal range: handled below
    const float domain_lo = pass == 0 ? full_lo : lo;
    unsigned long long mine = 0;  // pass 0: this thread's share of the domain's measure
    for_each_group(c.row, c.vocab, [&](int64_t, const float (&v)[4], int n) {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float x = scaled(v[j], c.inv_t);
        bool dom = j < n && x >= domain_lo && (hi_open ? x < hi : x <= hi);
        float e = 0.f;
        if (dom) {
          e = expf(x - c.m);
          dom = c.min_p <= 0.f || e >= c.min_p;
        }
        const unsigned long long fixed = __float2ull_rn(e * kMassScale);
        if (pass == 0 && dom) mine += mass_mode ? fixed : 1ull;
        const bool in = dom && x >= lo;
        const float d = x - lo;  // monotone binning: bin(lo) = 0, bin(hi) = kBins - 1
        const int bin = in && d > 0.f ? int(fminf(d * scale, float(kBins - 1))) : 0;
        hist_add(h, in, bin, ordered_key(x), fixed);
      }
    });
    const unsigned long long total = pass == 0 ? block_sum_u64(mine) : 0;  // uniform branch
    __syncthreads();
    if (threadIdx.x < 32) scan_bins(h, s, mass_mode, pass == 0, top_p, target, above, lo, full_lo, total);
    __syncthreads();
    if (s.done) return s.t;
    lo = s.lo;
    hi = s.hi;
    hi_open = s.hi_open;
    above = s.above;
    target = s.target;
  }
  return full_lo;
}

struct SampleArgs {
  const float* logits;
  int64_t ld;
  int vocab;
  const float* temperature;
  const int32_t* top_k;
  const float* top_p;
  const float* min_p;
  const uint64_t* seeds;
  const uint64_t* steps;
  int32_t* out;
};

__global__ void __launch_bounds__(kThreads) sample_kernel(SampleArgs a) {
  __shared__ Hist hist;
  __shared__ SearchState state;
  const int r = blockIdx.x;
  const float* row = a.logits + int64_t(r) * a.ld;
  const float temperature = a.temperature[r];
  const int top_k = a.top_k ? a.top_k[r] : 0;
  // Everything below is uniform over the block (depends on the row only), so the barriers are safe.
  if (temperature >= kGreedyTemperature && top_k != 1) {
    float lmax = -INFINITY;
    for_each_group(row, a.vocab, [&](int64_t, const float (&v)[4], int n) {
#pragma unroll
      for (int j = 0; j < 4; ++j)
        if (j < n) lmax = fmaxf(lmax, v[j]);
    });
    lmax = block_max(lmax);
    if (isfinite(lmax)) {
      RowCtx c;
      c.row = row;
      c.vocab = a.vocab;
      c.inv_t = 1.0f / temperature;
      c.m = scaled(lmax, c.inv_t);
      c.lo0 = __fsub_rn(c.m, kRangeNats);
      c.min_p = a.min_p ? fminf(a.min_p[r], 1.0f) : 0.f;
      const float top_p = a.top_p ? a.top_p[r] : 1.0f;
      float t = c.lo0;
      if (top_k > 0 && top_k < a.vocab) t = search(c, hist, state, false, (unsigned long long)top_k, 0.f, t);
      if (top_p < 1.0f) t = search(c, hist, state, true, 0, fmaxf(top_p, 0.f), t);

      // Gumbel-max draw over the kept tokens: argmax of x - log(-log(u)).
      const uint64_t seed = a.seeds[r], step = a.steps[r];
      uint64_t best = 0;
      for_each_group(row, a.vocab, [&](int64_t i0, const float (&v)[4], int n) {
        Philox4 words;
        bool drawn = false;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const float x = scaled(v[j], c.inv_t);
          if (j < n && x >= t && candidate(c, x)) {
            if (!drawn) {
              words = sampler_random_words(seed, step, uint64_t(i0) / 4);
              drawn = true;
            }
            const float score = x - logf(-logf(uniform_from_word(words.v[j])));
            const uint64_t key = pack_value_index(score, uint32_t(i0 + j));
            best = key > best ? key : best;
          }
        }
      });
      best = block_max_u64(best);
      if (threadIdx.x == 0) a.out[r] = int32_t(packed_index(best));
      return;
    }
  }
  const uint32_t token = block_argmax(row, a.vocab);
  if (threadIdx.x == 0) a.out[r] = int32_t(token);
}

__global__ void __launch_bounds__(kThreads) argmax_kernel(const float* logits, int64_t ld, int vocab, int32_t* out) {
  const uint32_t token = block_argmax(logits + int64_t(blockIdx.x) * ld, vocab);
  if (threadIdx.x == 0) out[blockIdx.x] = int32_t(token);
}

}  // namespace

void argmax(const ArgmaxParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.rows >= 0 && p.vocab > 0, "argmax: rows ", p.rows, " vocab ", p.vocab);
  if (p.rows == 0) return;
  PAGODA_CHECK(p.logits && p.out_tokens, "argmax: null pointer");
  const int64_t ld = p.ld ? p.ld : p.vocab;
  PAGODA_CHECK(ld >= p.vocab, "argmax: ld ", ld, " < vocab ", p.vocab);
  argmax_kernel<<<unsigned(p.rows), kThreads, 0, stream>>>(p.logits, ld, p.vocab, p.out_tokens);
  PAGODA_CUDA_CHECK_LAUNCH();
}

void sample(const SampleParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.rows >= 0 && p.vocab > 0, "sample: rows ", p.rows, " vocab ", p.vocab);
  if (p.rows == 0) return;
  PAGODA_CHECK(p.logits && p.out_tokens && p.temperature && p.seeds && p.steps,
               "sample: logits, out_tokens, temperature, seeds and steps are required");
  const int64_t ld = p.ld ? p.ld : p.vocab;
  PAGODA_CHECK(ld >= p.vocab, "sample: ld ", ld, " < vocab ", p.vocab);
  const SampleArgs a{p.logits, ld, p.vocab, p.temperature, p.top_k, p.top_p, p.min_p, p.seeds, p.steps, p.out_tokens};
  sample_kernel<<<unsigned(p.rows), kThreads, 0, stream>>>(a);
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda
