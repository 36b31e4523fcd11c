// Paged attention kernels against a float64 CPU reference (house style §4, §5): the case description, the
// random inputs in a shuffled block pool, the poisoned output and the reference check, shared by the
// TRITON_ATTN and FLASH_ATTN tests. The kernel under test is a Launch (plan + run + synchronise).
//
// Tolerance, derived: q, k, v are the exact stored values (bf16/fp16/fp8 codes are decoded identically by
// the reference), QK^T is accumulated in fp32 from exact products, and softmax runs in fp32. The
// dominant error is rounding P to the element type before the P·V product (relative u per weight) and
// the final rounding of O (relative u): |O - O_ref| <= u * max|v| + u * |O_ref| <= 2 u max|v|, with
// u = 2^-8 (bf16) or 2^-11 (fp16). fp32 (CUDA-core kernel) is bounded by the fp32 accumulation over at
// most a few thousand keys: 1e-5 * max|v| leaves two orders of margin over n * 2^-24. A wrong mask,
// index or missing block moves O by O(max|v|), far above either bound.
// PRECOND for a kernel checked here: fp32 accumulation of QK^T and P·V, P rounded to the element type once
// (the tensor-core kernels of TRITON_ATTN/FA2 and the wgmma kernel of FA3 alike).
#pragma once

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "pagoda/attention/paged/paged_attention.h"
#include "pagoda/core/dtype.h"

namespace pagoda::attention_test {

inline bool have_gpu() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

#define SKIP_WITHOUT_GPU() \
  if (!::pagoda::attention_test::have_gpu()) GTEST_SKIP() << "skipped: no CUDA device"

#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

struct Case {
  std::vector<int> query_lens;
  std::vector<int> seq_lens;
  int num_q_heads = 8, num_kv_heads = 2, head_size = 128, block_size = 16;
  DType dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;
  KvLayout layout = KvLayout::kNHD;
  int sliding_window = 0;
  float softcap = 0.f;
  bool alibi = false, sinks = false;
  bool causal = true;     // false: every query token attends the whole context
  int force_splits = 0;   // > 0: exactly this many KV splits
  int merge_in_kernel_from = 0;  // > 0: in_kernel_merge_min_splits (the decode kernel merges its splits)
  bool cluster_merge = true;     // false: the split merge runs in the merge kernel even where SM 9.0 clusters fit
  int launches = 1;       // > 1: relaunch with the output poisoned again, as a replayed decode step would
  int check_every = 1;    // reference on every n-th query token (long prefills)
  int q_pad = 0;          // extra elements after each token's q (q as a slice of a fused qkv row)
  bool batch_invariant = false;  // the planner's batch-invariant rule (one KV split, no decode-only kernel)
  unsigned seed = 1;
};

inline std::string describe(const Case& c) {
  std::string s = "seqs=" + std::to_string(c.query_lens.size()) + " q0=" + std::to_string(c.query_lens[0]) +
                  " ctx0=" + std::to_string(c.seq_lens[0]) + " H=" + std::to_string(c.num_q_heads) + "/" +
                  std::to_string(c.num_kv_heads) + " D=" + std::to_string(c.head_size) + " bs=" +
                  std::to_string(c.block_size) + " " + std::string(dtype_name(c.dtype)) + " kv=" +
                  std::string(dtype_name(c.kv_dtype));
  if (c.sliding_window > 0) s += " window=" + std::to_string(c.sliding_window);
  if (c.softcap > 0) s += " softcap";
  if (c.alibi) s += " alibi";
  if (c.sinks) s += " sinks";
  if (c.force_splits > 0) s += " splits=" + std::to_string(c.force_splits);
  if (c.merge_in_kernel_from > 0) s += " merge-in-kernel";
  if (!c.cluster_merge) s += " merge-kernel";
  if (c.launches > 1) s += " launches=" + std::to_string(c.launches);
  if (c.layout == KvLayout::kHND) s += " HND";
  if (c.q_pad > 0) s += " strided-q";
  if (!c.causal) s += " non-causal";
  if (c.batch_invariant) s += " batch-invariant";
  return s;
}

// Plans and launches the kernel under test on `p` (inputs uploaded, output poisoned) for `batch`, then
// synchronises the device. num_sms: the device's multiprocessor count.
using Launch = std::function<void(const PagedAttentionParams& p, const AttentionBatchInfo& batch, const Case& c,
                                  int num_sms)>;

// Frees the device buffers of a case on every exit path (an ASSERT returns early).
struct DeviceAllocations {
  std::vector<void*> ptrs;
  ~DeviceAllocations() {
    for (void* p : ptrs) cudaFree(p);
  }
  template <typename T>
  cudaError_t alloc(T** p, size_t bytes) {
    cudaError_t e = cudaMalloc(reinterpret_cast<void**>(p), bytes);
    if (e == cudaSuccess) ptrs.push_back(*p);
    return e;
  }
};

// Runs `launch` on random inputs of case `c` and checks every output (of every check_every-th query token)
// against the float64 reference; `kernel` names the kernel in the printed error line.
inline void run_case(const Case& c, const std::string& kernel, const Launch& launch) {
  SCOPED_TRACE(kernel + " " + describe(c));
  std::mt19937 rng(c.seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int S = int(c.query_lens.size()), Hq = c.num_q_heads, Hk = c.num_kv_heads, D = c.head_size, bs = c.block_size;
  std::vector<int> qsl(S + 1, 0);
  for (int s = 0; s < S; ++s) qsl[s + 1] = qsl[s] + c.query_lens[s];
  const int T = qsl[S];
  int max_blocks = 0, total_blocks = 0;
  for (int s = 0; s < S; ++s) {
    max_blocks = std::max(max_blocks, (c.seq_lens[s] + bs - 1) / bs);
    total_blocks += (c.seq_lens[s] + bs - 1) / bs;
  }
  const int num_blocks = total_blocks + 3;
  // Block tables: a random permutation of the pool (blocks of different sequences interleave).
  std::vector<int> perm(num_blocks);
  for (int i = 0; i < num_blocks; ++i) perm[i] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  std::vector<int> btab(size_t(S) * std::max(1, max_blocks), -1);
  int next = 0;
  for (int s = 0; s < S; ++s)
    for (int b = 0; b < (c.seq_lens[s] + bs - 1) / bs; ++b) btab[size_t(s) * max_blocks + b] = perm[next++];

  const size_t esz = dtype_size(c.dtype), kvsz = dtype_size(c.kv_dtype);
  const size_t cache_elems = size_t(num_blocks) * bs * Hk * 2 * D;
  std::vector<uint8_t> q(size_t(T) * Hq * D * esz), cache(cache_elems * kvsz);
  std::vector<double> qd(size_t(T) * Hq * D), cached(cache_elems);
  // Scale q so that scores spread over a few units: softmax neither uniform nor one-hot.
  for (size_t i = 0; i < qd.size(); ++i) {
    store_from_f32(q.data(), c.dtype, i, nd(rng));
    qd[i] = load_as_f32(q.data(), c.dtype, i);
  }
  for (size_t i = 0; i < cache_elems; ++i) {
    store_from_f32(cache.data(), c.kv_dtype, i, nd(rng));
    cached[i] = load_as_f32(cache.data(), c.kv_dtype, i);
  }
  std::vector<float> slopes(Hq), sinks(Hq);
  for (int h = 0; h < Hq; ++h) {
    slopes[h] = std::pow(2.f, -8.f * (h + 1) / Hq);
    sinks[h] = nd(rng);
  }
  const float scale = 1.f / std::sqrt(float(D));
  const float k_scale = c.kv_dtype == c.dtype ? 1.f : 0.75f, v_scale = c.kv_dtype == c.dtype ? 1.f : 1.25f;

  auto slot_index = [&](int s, int key, int kvh) -> size_t {
    int blk = btab[size_t(s) * max_blocks + key / bs], off = key % bs;
    size_t slot = c.layout == KvLayout::kNHD ? (size_t(blk) * bs + off) * Hk + kvh : (size_t(blk) * Hk + kvh) * bs + off;
    return slot * 2 * D;
  };

  // ---- device ----
  DeviceAllocations dev;
  void *dq, *dout, *dcache;
  int *dqsl, *dsl, *dbt;
  float *dslopes, *dsinks;
  const size_t q_stride = size_t(Hq) * D + c.q_pad;
  CUDA_OK(dev.alloc(&dq, size_t(T) * q_stride * esz));
  CUDA_OK(dev.alloc(&dout, q.size()));
  CUDA_OK(dev.alloc(&dcache, cache.size()));
  CUDA_OK(dev.alloc(&dqsl, sizeof(int) * qsl.size()));
  CUDA_OK(dev.alloc(&dsl, sizeof(int) * S));
  CUDA_OK(dev.alloc(&dbt, sizeof(int) * btab.size()));
  CUDA_OK(dev.alloc(&dslopes, sizeof(float) * Hq));
  CUDA_OK(dev.alloc(&dsinks, sizeof(float) * Hq));
  CUDA_OK(cudaMemset(dq, 0xff, size_t(T) * q_stride * esz));  // padding holds NaN: must never be read
  CUDA_OK(cudaMemcpy2D(dq, q_stride * esz, q.data(), size_t(Hq) * D * esz, size_t(Hq) * D * esz, T, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dout, 0xff, q.size()));  // poison: NaN in every float format
  CUDA_OK(cudaMemcpy(dcache, cache.data(), cache.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dqsl, qsl.data(), sizeof(int) * qsl.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dsl, c.seq_lens.data(), sizeof(int) * S, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dbt, btab.data(), sizeof(int) * btab.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dslopes, slopes.data(), sizeof(float) * Hq, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dsinks, sinks.data(), sizeof(float) * Hq, cudaMemcpyHostToDevice));

  PagedAttentionParams p;
  p.q = dq;
  p.q_token_stride = c.q_pad > 0 ? int64_t(q_stride) : 0;
  p.out = dout;
  p.kv_cache = dcache;
  p.dtype = c.dtype;
  p.kv_dtype = c.kv_dtype;
  p.layout = c.layout;
  p.num_tokens = T;
  p.num_seqs = S;
  p.num_q_heads = Hq;
  p.num_kv_heads = Hk;
  p.head_size = D;
  p.block_size = bs;
  p.max_blocks_per_seq = max_blocks;
  p.query_start_loc = dqsl;
  p.seq_lens = dsl;
  p.block_tables = dbt;
  p.scale = scale;
  p.k_scale = k_scale;
  p.v_scale = v_scale;
  p.sliding_window = c.sliding_window;
  p.causal = c.causal;
  p.softcap = c.softcap;
  p.alibi_slopes = c.alibi ? dslopes : nullptr;
  p.sinks = c.sinks ? dsinks : nullptr;

  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  launch(p, AttentionBatchInfo{c.query_lens, c.seq_lens}, c, prop.multiProcessorCount);
  if (::testing::Test::HasFatalFailure()) return;
  std::vector<uint8_t> out(q.size());
  CUDA_OK(cudaMemcpy(out.data(), dout, out.size(), cudaMemcpyDeviceToHost));

  // ---- reference (float64), threads over sequences x tokens ----
  double vmax = 0;
  for (double x : cached) vmax = std::max(vmax, std::fabs(x));
  vmax *= v_scale;
  const double u = c.dtype == DType::kBF16 ? std::ldexp(1.0, -8) : c.dtype == DType::kF16 ? std::ldexp(1.0, -11) : 0.0;
  const double tol = c.dtype == DType::kF32 ? 1e-5 * vmax : 2 * u * vmax;
  const int G = Hq / Hk;
  std::vector<std::pair<int, int>> rows;  // (seq, token-in-seq)
  for (int s = 0; s < S; ++s)
    for (int t = 0; t < c.query_lens[s]; ++t)
      if (t % c.check_every == 0 || t == c.query_lens[s] - 1) rows.emplace_back(s, t);
  const int nthreads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  std::vector<double> worst(size_t(nthreads), 0.0);
  std::vector<long> unwritten(size_t(nthreads), 0);
  auto work = [&](int tid) {
    std::vector<double> sc, acc(D);
    for (size_t ri = size_t(tid); ri < rows.size(); ri += size_t(nthreads)) {
      auto [s, t] = rows[ri];
      int ctx = c.seq_lens[s], pos = ctx - c.query_lens[s] + t, tok = qsl[s] + t;
      for (int h = 0; h < Hq; ++h) {
        int kvh = h / G;
        const double* qv = &qd[(size_t(tok) * Hq + h) * D];
        sc.assign(ctx, -INFINITY);
        double m = -INFINITY;
        for (int key = 0; (!c.causal || key <= pos) && key < ctx; ++key) {
          if (c.sliding_window > 0 && key <= pos - c.sliding_window) continue;
          const double* kv = &cached[slot_index(s, key, kvh)];
          double dot = 0;
          for (int d = 0; d < D; ++d) dot += qv[d] * kv[d];
          double x = dot * scale * k_scale;
          if (c.softcap > 0) x = c.softcap * std::tanh(x / c.softcap);
          if (c.alibi) x += slopes[h] * double(key - pos);
          sc[key] = x;
          m = std::max(m, x);
        }
        if (c.sinks) m = std::max(m, double(sinks[h]));
        double l = c.sinks ? std::exp(sinks[h] - m) : 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int key = 0; key < ctx; ++key) {
          if (sc[key] == -INFINITY) continue;
          double pe = std::exp(sc[key] - m);
          l += pe;
          const double* vv = &cached[slot_index(s, key, kvh) + D];
          for (int d = 0; d < D; ++d) acc[d] += pe * vv[d];
        }
        for (int d = 0; d < D; ++d) {
          double ref = acc[d] / l * v_scale;
          double got = load_as_f32(out.data(), c.dtype, (size_t(tok) * Hq + h) * D + d);
          if (std::isnan(got)) ++unwritten[size_t(tid)];
          else worst[size_t(tid)] = std::max(worst[size_t(tid)], std::fabs(got - ref));
        }
      }
    }
  };
  std::vector<std::thread> th;
  for (int i = 0; i < nthreads; ++i) th.emplace_back(work, i);
  for (auto& x : th) x.join();
  long nan_count = 0;
  double err = 0;
  for (int i = 0; i < nthreads; ++i) {
    nan_count += unwritten[size_t(i)];
    err = std::max(err, worst[size_t(i)]);
  }
  EXPECT_EQ(nan_count, 0) << "unwritten or NaN outputs";
  EXPECT_LE(err, tol) << "max abs error " << err << " vs bound " << tol;
  std::printf("[attention] %-9s %-96s max|err| %.3e (bound %.3e)\n", kernel.c_str(), describe(c).c_str(), err, tol);
}

// Decode with split KV, shared by the backends' tests: forced split counts (what a captured decode step
// uses) over short and long contexts, and long and short contexts where the planner chooses the splits.
// The splits merge (how) 0: in the separate merge kernel; 1: as the planner's defaults say (SM 9.0: a
// cluster per row group merging through distributed shared memory where the step's clusters fit the GPU,
// else the merge kernel); 2: in the decode kernel by request (SM 9.0: in clusters where they fit; before:
// the last CTA of a row group, counted on device counters that must re-arm). The split cases run three
// times, each on a freshly poisoned output. On an H200, 3 x 8 clusters of 3 fit, 3 x 8 of 16 do not (at
// most 7 clusters of 16), and 24 splits exceed the largest cluster: there the merge kernel takes over.
inline std::vector<Case> decode_split_kv_cases() {
  std::vector<Case> cases;
  // how: 0 the merge kernel, 1 the default, 2 in the decode kernel
  for (int splits : {1, 3, 16, 24}) {
    for (int how : {0, 1, 2}) {
      if ((splits == 1 && how != 1) || (splits == 24 && how != 2) || (splits == 16 && how == 1)) continue;
      const int in_kernel = how == 2 ? 2 : 0;
      Case c;
      c.cluster_merge = how != 0;
      c.query_lens = {1, 1, 1};
      c.seq_lens = {4099, 1, 1000};
      c.num_q_heads = 32;
      c.num_kv_heads = 8;
      c.force_splits = splits;
      c.merge_in_kernel_from = in_kernel;
      c.launches = splits > 1 ? 3 : 1;
      cases.push_back(c);
    }
  }
  Case automatic;  // batch 1, long context: the planner splits
  automatic.query_lens = {1};
  automatic.seq_lens = {8000};
  automatic.num_q_heads = 32;
  automatic.num_kv_heads = 8;
  automatic.launches = 3;
  cases.push_back(automatic);
  Case short_ctx = automatic;  // batch 1, short context: the planner's 7 splits, 8 clusters of 7 on SM 9.0
  short_ctx.seq_lens = {1000};
  cases.push_back(short_ctx);
  return cases;
}

// The features one at a time on `base`, as both backends' tests run them: sliding window 64, soft-cap 5,
// sinks, sinks through a 4-way split merge (in the merge kernel, and in the decode kernel), ALiBi, the HND
// layout.
inline std::vector<Case> one_feature_cases(const Case& base) {
  std::vector<Case> cases(7, base);
  cases[0].sliding_window = 64;
  cases[1].softcap = 5.f;
  cases[2].sinks = true;
  cases[3].sinks = true;
  cases[3].force_splits = 4;  // sinks through the merge
  cases[3].cluster_merge = false;
  cases[4].alibi = true;
  cases[5].layout = KvLayout::kHND;
  cases[6].sinks = true;
  cases[6].force_splits = 4;
  cases[6].merge_in_kernel_from = 2;
  return cases;
}

// Between launches of a `launches > 1` case: NaN in every float format again, so the check sees only what
// the last launch wrote.
inline void repoison_output(const PagedAttentionParams& p) {
  CUDA_OK(cudaMemset(p.out, 0xff, size_t(p.num_tokens) * p.num_q_heads * p.head_size * dtype_size(p.dtype)));
}

}  // namespace pagoda::attention_test
