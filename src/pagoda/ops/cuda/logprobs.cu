// Top-k log-probabilities of the unmodified logits: one 512-thread block per row, one pass over the row.
// Each thread keeps a running (max, sum of exp) and its own sorted top-20 in registers; the block then
// merges the sums and pops the k best heads.
#include <cmath>

#include "pagoda/ops/cuda/cuda_common.cuh"
#include "pagoda/ops/cuda/sampling.h"

namespace pagoda {
namespace {

using namespace cuda_detail;

constexpr int kThreads = 512;
constexpr int kTop = kMaxTopLogprobs;

// Running log-sum-exp state: the sum of exp(l - m) over the entries seen (with its Kahan compensation c,
// so that a thread's ~V/512 terms add with ~2 ulp error instead of up to V/512 ulp), m their maximum.
struct Lse {
  float m = -INFINITY;
  float s = 0.f;
  float c = 0.f;

  __device__ __forceinline__ void add(float v) {  // Kahan: s + c tracks the exact sum
    const float y = v - c, t = s + y;
    c = (t - s) - y;
    s = t;
  }
  __device__ __forceinline__ void push(float l) {
    if (l > m) {  // new maximum: rescale what was summed (exp(-inf) = 0 for the first entry)
      const float f = expf(m - l);
      s *= f;
      c *= f;
      m = l;
      add(1.f);
    } else if (l != -INFINITY) {
      add(expf(l - m));
    }
  }
};

__device__ __forceinline__ Lse lse_merge(Lse a, Lse b) {
  if (a.m == -INFINITY) return b;
  if (b.m == -INFINITY) return a;
  const float m = fmaxf(a.m, b.m);
  return Lse{m, (a.s - a.c) * expf(a.m - m) + (b.s - b.c) * expf(b.m - m), 0.f};
}

__device__ Lse block_lse(Lse v) {
  __shared__ float pm[32], ps[32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
  v = Lse{v.m, v.s - v.c, 0.f};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = lse_merge(v, Lse{__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.s, o), 0.f});
  __syncthreads();
  if (lane == 0) pm[warp] = v.m, ps[warp] = v.s;
  __syncthreads();
  v = lane < nwarps ? Lse{pm[lane], ps[lane], 0.f} : Lse{};
#pragma unroll
  for (int o = 16; o > 0; o >>= 1)
    v = lse_merge(v, Lse{__shfl_xor_sync(kFullMask, v.m, o), __shfl_xor_sync(kFullMask, v.s, o), 0.f});
  return v;
}

struct Args {
  const float* logits;
  int64_t ld;
  int vocab, k;
  float* out_logprobs;
  int32_t* out_ids;
  const int32_t* tokens;
  float* out_token_logprobs;
};

__global__ void __launch_bounds__(kThreads) top_logprobs_kernel(Args a) {
  const int r = blockIdx.x;
  const float* row = a.logits + int64_t(r) * a.ld;
  const bool vec = (reinterpret_cast<uintptr_t>(row) & 15) == 0;
  uint64_t top[kTop];  // descending packed (value, index); 0 is "empty" (below every real entry)
#pragma unroll
  for (int j = 0; j < kTop; ++j) top[j] = 0;
  Lse acc;
  bool nan = false;
  auto visit = [&](float l, uint32_t i) {
    if (l != l) nan = true;
    else acc.push(l);
    uint64_t key = pack_value_index(l, i);
    if (key > top[kTop - 1]) {  // rare after the first few entries: insert, keeping the order
#pragma unroll
      for (int j = 0; j < kTop; ++j) {
        const uint64_t hi = key > top[j] ? key : top[j];
        key = key > top[j] ? top[j] : key;
        top[j] = hi;
      }
    }
  };
  const int groups = (a.vocab + 3) / 4;
  for (int g = threadIdx.x; g < groups; g += blockDim.x) {
    const int64_t i0 = int64_t(g) * 4;
    if (vec && i0 + 4 <= a.vocab) {
      const float4 q = *reinterpret_cast<const float4*>(row + i0);
      visit(q.x, uint32_t(i0));
      visit(q.y, uint32_t(i0 + 1));
      visit(q.z, uint32_t(i0 + 2));
      visit(q.w, uint32_t(i0 + 3));
    } else {
      for (int64_t i = i0; i < i0 + 4 && i < a.vocab; ++i) visit(row[i], uint32_t(i));
    }
  }
  const Lse total = block_lse(acc);
  const bool any_nan = __syncthreads_or(nan);
  // log-softmax(l) = l - (m + log(sum exp(l - m))); NaN anywhere makes every log-probability NaN, as torch.
  const float lse = any_nan ? NAN : total.m + logf(total.s);

  for (int j = 0; j < a.k; ++j) {
    const uint64_t best = block_max_u64(top[0]);
    if (top[0] == best) {  // the owner (indices are unique) pops its head
#pragma unroll
      for (int q = 0; q < kTop - 1; ++q) top[q] = top[q + 1];
      top[kTop - 1] = 0;
    }
    if (threadIdx.x == 0) {
      a.out_ids[int64_t(r) * a.k + j] = int32_t(packed_index(best));
      a.out_logprobs[int64_t(r) * a.k + j] = packed_value(best) - lse;
    }
  }
  if (a.tokens && threadIdx.x == 0) {
    const int32_t t = a.tokens[r];
    a.out_token_logprobs[r] = (t >= 0 && t < a.vocab) ? row[t] - lse : NAN;
  }
}

}  // namespace

void top_logprobs(const TopLogprobsParams& p, cudaStream_t stream) {
  PAGODA_CHECK(p.rows >= 0 && p.vocab > 0, "top_logprobs: rows ", p.rows, " vocab ", p.vocab);
  PAGODA_CHECK(p.k >= 0 && p.k <= kMaxTopLogprobs && p.k <= p.vocab, "top_logprobs: k ", p.k, " must be in [0, ",
               kMaxTopLogprobs, "] and <= vocab");
  if (p.rows == 0 || (p.k == 0 && !p.tokens)) return;
  PAGODA_CHECK(p.logits && (p.k == 0 || (p.out_logprobs && p.out_ids)) && (!p.tokens || p.out_token_logprobs),
               "top_logprobs: null pointer");
  const int64_t ld = p.ld ? p.ld : p.vocab;
  PAGODA_CHECK(ld >= p.vocab, "top_logprobs: ld ", ld, " < vocab ", p.vocab);
  const Args a{p.logits, ld, p.vocab, p.k, p.out_logprobs, p.out_ids, p.tokens, p.out_token_logprobs};
  top_logprobs_kernel<<<unsigned(p.rows), kThreads, 0, stream>>>(a);
  PAGODA_CUDA_CHECK_LAUNCH();
}

}  // namespace pagoda
