// FLEX_ATTENTION's CUDA kernels against the CPU kernel (flex_cpu_forward, the oracle): a step's random inputs
// (per-sequence generators, so a sequence's data is the same in any batch), the paged cache in NHD on the
// device and in CPU_ATTN's order on the host, the poisoned output, and the element-wise check.
//
// Tolerance, derived per output row (both kernels see the same stored q, k, v values):
//   the float32 arithmetic of either kernel: a score is a dot of hd exact products summed in float32
//   ((hd + 2) u sum|q k| scale, u = 2^-24) followed by a few rounded operations (soft-cap, ALiBi, bias, and
//   the tensor-core kernel's scaling by log2 e: 16 u of the magnitudes involved); a uniform score error ds moves each softmax weight by a relative 2 ds,
//   the exponentials and the running sums of L keys add (2 L + 16) u: |O - O_exact| <= max|v| (2 ds + (2 L +
//   16) u) (flex_cpu_test's bound, which holds for the CUDA-core kernel's sums and for the tensor-core kernel's
//   float32 accumulators alike);
//   float16 / bfloat16 outputs add the tensor-core kernel's rounding of P to the element type before P V
//   (relative u_T per weight: u_T max|v|) and the rounding of O (u_T |O| <= u_T max|v|): 2 u_T max|v|, with
//   u_T = 2^-11 (float16) or 2^-8 (bfloat16);
// tol = 2 max|v| (2 ds + (2 L + 16) u) + 2 u_T max|v| (the GPU's error plus the oracle's). A wrong mask, a
// missed block or a wrong index moves O by a sizable fraction of max|v|; a row the mask leaves no key must
// be exactly 0 on both.
#pragma once

#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "pagoda/attention/flex_attention/flex_cpu.h"
#include "pagoda/attention/flex_attention/flex_cuda.h"
#include "pagoda/core/dtype.h"
#include "pagoda/core/strings.h"

namespace pagoda::flex_test {

inline bool have_gpu() {
  int n = 0;
  const bool ok = cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
  (void)cudaGetLastError();
  return ok;
}
#define SKIP_WITHOUT_GPU() \
  if (!::pagoda::flex_test::have_gpu()) GTEST_SKIP() << "skipped: no CUDA device"
#define CUDA_OK(x) ASSERT_EQ((x), cudaSuccess) << #x

constexpr double kU = 0x1p-24;

struct Seq {
  int ctx;    // tokens in the cache after the step
  int q_len;  // new tokens (the last q_len of ctx)
  uint64_t id = 0;  // the sequence's data generator (0: from its index in the step)
};

struct Case {
  int head_size = 128, block_size = 16, num_q_heads = 8, num_kv_heads = 2;
  DType dtype = DType::kBF16;
  DType kv_dtype = DType::kBF16;
  std::vector<Seq> seqs;
  int block_m = 64, block_n = 64;
  int q_pad = 0;  // extra elements after each token's query row (q as a slice of a fused qkv row); % 8 == 0
  std::string str(const FlexMask& m) const {
    std::string s = str_cat("hd ", head_size, " bs ", block_size, " heads ", num_q_heads, "/", num_kv_heads, " ",
                            dtype_name(dtype), " kv ", dtype_name(kv_dtype), " tiles ", block_m, "/", block_n, " ",
                            m.str(), " seqs");
    for (const Seq& q : seqs) s += str_cat(" (", q.ctx, ",", q.q_len, ")");
    if (q_pad > 0) s += str_cat(" q_pad ", q_pad);
    return s;
  }
};

inline double unit_roundoff(DType t) {
  return t == DType::kBF16 ? 0x1p-8 : t == DType::kF16 ? 0x1p-11 : 0.0;
}

template <typename T>
struct DeviceBuffer {
  T* p = nullptr;
  size_t n = 0;
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count) : n(count) {
    void* v = nullptr;
    if (cudaMalloc(&v, std::max<size_t>(1, count) * sizeof(T)) == cudaSuccess) p = static_cast<T*>(v);
  }
  ~DeviceBuffer() { cudaFree(p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

// A step's inputs: host values (float, already rounded to the stored dtypes) and their device copies.
struct Step {
  Case c;
  int T = 0, S = 0, num_blocks = 0, max_blocks = 0, max_ctx = 0;
  std::vector<int32_t> qsl, seq_lens, q_lens, tables;
  std::vector<float> q;         // [T, nq, hd], values of c.dtype
  std::vector<float> cache_hnd;  // CPU_ATTN order [blocks, nkv, bs, 2 hd], values of c.kv_dtype
  std::vector<uint8_t> q_dev_bytes, cache_nhd_bytes;
};

inline float round_to(float x, DType t) {
  uint8_t b[4];
  store_from_f32(b, t, 0, x);
  return load_as_f32(b, t, 0);
}

// Fresh random inputs: magnitudes in [0.1, 1] with random signs (never zeros); blocks shuffled in a pool with
// spare blocks whose contents are random too (never read: no sequence's table names them).
inline Step make_step(const Case& c, uint64_t seed) {
  Step st;
  st.c = c;
  const int hd = c.head_size, bs = c.block_size, nkv = c.num_kv_heads, nq = c.num_q_heads;
  st.S = int(c.seqs.size());
  int total = 0;
  for (const Seq& s : c.seqs) {
    const int nb = (s.ctx + bs - 1) / bs;
    total += nb;
    st.max_blocks = std::max(st.max_blocks, nb + 1);
    st.max_ctx = std::max(st.max_ctx, s.ctx);
  }
  st.num_blocks = total + 3;
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> mag(0.1f, 1.0f);
  auto draw = [&](std::mt19937_64& r) { return (r() & 1) ? mag(r) : -mag(r); };
  std::vector<int32_t> perm(size_t(st.num_blocks));
  std::iota(perm.begin(), perm.end(), 0);
  std::shuffle(perm.begin(), perm.end(), rng);
  st.tables.assign(size_t(st.S) * size_t(st.max_blocks), 0);
  const size_t slot_elems = size_t(2 * hd);
  st.cache_hnd.assign(size_t(st.num_blocks) * nkv * bs * slot_elems, 0.f);
  for (float& x : st.cache_hnd) x = round_to(draw(rng), c.kv_dtype);
  st.qsl = {0};
  for (int s = 0, next = 0; s < st.S; ++s) {
    const Seq& sq = c.seqs[size_t(s)];
    const int nb = (sq.ctx + bs - 1) / bs;
    for (int b = 0; b < nb; ++b) st.tables[size_t(s) * st.max_blocks + b] = perm[size_t(next++)];
    std::mt19937_64 srng(sq.id ? sq.id : seed * 7919 + uint64_t(s) + 1);
    for (int p = 0; p < sq.ctx; ++p)
      for (int h = 0; h < nkv; ++h) {
        const int32_t blk = st.tables[size_t(s) * st.max_blocks + p / bs];
        float* slot = st.cache_hnd.data() + ((size_t(blk) * nkv + h) * bs + p % bs) * slot_elems;
        for (size_t d = 0; d < slot_elems; ++d) slot[d] = round_to(draw(srng), c.kv_dtype);
      }
    for (int i = 0; i < sq.q_len * nq * hd; ++i) st.q.push_back(round_to(draw(srng), c.dtype));
    st.qsl.push_back(st.qsl.back() + sq.q_len);
    st.seq_lens.push_back(sq.ctx);
    st.q_lens.push_back(sq.q_len);
  }
  st.T = st.qsl.back();
  // Device layouts: q in c.dtype, token stride nq hd + q_pad (the padding NaN: never read); the cache in NHD
  // [blocks, bs, nkv, 2 hd] of c.kv_dtype.
  const size_t row = size_t(nq) * hd, stride = row + size_t(c.q_pad);
  st.q_dev_bytes.resize(size_t(st.T) * stride * dtype_size(c.dtype));
  for (size_t t = 0; t < size_t(st.T); ++t)
    for (size_t i = 0; i < stride; ++i)
      store_from_f32(st.q_dev_bytes.data(), c.dtype, t * stride + i,
                     i < row ? st.q[t * row + i] : std::numeric_limits<float>::quiet_NaN());
  st.cache_nhd_bytes.resize(st.cache_hnd.size() * dtype_size(c.kv_dtype));
  for (int b = 0; b < st.num_blocks; ++b)
    for (int h = 0; h < nkv; ++h)
      for (int o = 0; o < bs; ++o)
        for (size_t d = 0; d < slot_elems; ++d) {
          const size_t hnd = ((size_t(b) * nkv + h) * bs + o) * slot_elems + d;
          const size_t nhd = ((size_t(b) * bs + o) * nkv + h) * slot_elems + d;
          store_from_f32(st.cache_nhd_bytes.data(), c.kv_dtype, nhd, st.cache_hnd[hnd]);
        }
  return st;
}

// The oracle: flex_cpu_forward on the step (float32 cache in CPU_ATTN's order, holding the stored values).
inline std::vector<float> cpu_forward(const Step& st, const FlexMask& mask, const FlexScoreMod& mod) {
  const Case& c = st.c;
  FlexBlockPlan plan;
  plan.reserve(st.T, st.S, st.max_ctx, c.block_m, c.block_n);
  plan.build(mask, st.q_lens.data(), st.seq_lens.data(), st.S);
  std::vector<float> out(size_t(st.T) * c.num_q_heads * c.head_size, std::numeric_limits<float>::quiet_NaN());
  FlexCpuParams p;
  p.query = st.q.data();
  p.out = out.data();
  p.kv_cache = st.cache_hnd.data();
  p.cache_dtype = DType::kF32;
  p.num_blocks = st.num_blocks;
  p.seq_lens = st.seq_lens.data();
  p.block_tables = st.tables.data();
  p.max_blocks_per_seq = st.max_blocks;
  p.num_seqs = st.S;
  p.num_q_heads = c.num_q_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_size = c.head_size;
  p.block_size = c.block_size;
  p.mask = &mask;
  p.score_mod = &mod;
  p.plan = &plan;
  p.parallel_for = [](int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    const int threads = int(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
    std::vector<std::thread> pool;
    for (int i = 0; i < threads; ++i) pool.emplace_back([&, i] { body(n * i / threads, n * (i + 1) / threads); });
    for (auto& t : pool) t.join();
  };
  flex_cpu_forward(p);
  return out;
}

// The step's device arrays and the output (poisoned with 0xff bytes: NaN in every float format).
struct DeviceStep {
  DeviceBuffer<uint8_t> q, cache, out;
  DeviceBuffer<int32_t> qsl, seq_lens, tables;
  size_t out_bytes = 0;
  explicit DeviceStep(const Step& st)
      : q(st.q_dev_bytes.size()), cache(st.cache_nhd_bytes.size()),
        out(size_t(st.T) * st.c.num_q_heads * st.c.head_size * dtype_size(st.c.dtype)), qsl(st.qsl.size()),
        seq_lens(st.seq_lens.size()), tables(st.tables.size()) {
    out_bytes = out.n;
    upload(st);
  }
  void upload(const Step& st) {
    cudaMemcpy(q.p, st.q_dev_bytes.data(), st.q_dev_bytes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(cache.p, st.cache_nhd_bytes.data(), st.cache_nhd_bytes.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(qsl.p, st.qsl.data(), st.qsl.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(seq_lens.p, st.seq_lens.data(), st.seq_lens.size() * 4, cudaMemcpyHostToDevice);
    cudaMemcpy(tables.p, st.tables.data(), st.tables.size() * 4, cudaMemcpyHostToDevice);
    poison();
  }
  void poison() { cudaMemset(out.p, 0xff, out_bytes); }
  FlexCudaParams params(const Step& st) const {
    FlexCudaParams p;
    p.q = q.p;
    p.q_stride = st.c.q_pad > 0 ? int64_t(st.c.num_q_heads) * st.c.head_size + st.c.q_pad : 0;
    p.out = out.p;
    p.kv_cache = cache.p;
    p.dtype = st.c.dtype;
    p.kv_dtype = st.c.kv_dtype;
    p.num_q_heads = st.c.num_q_heads;
    p.num_kv_heads = st.c.num_kv_heads;
    p.head_size = st.c.head_size;
    p.block_size = st.c.block_size;
    p.max_blocks_per_seq = st.max_blocks;
    p.num_seqs = st.S;
    p.query_start_loc = qsl.p;
    p.seq_lens = seq_lens.p;
    p.block_tables = tables.p;
    return p;
  }
  std::vector<uint8_t> download_bytes() const {
    std::vector<uint8_t> b(out_bytes);
    cudaMemcpy(b.data(), out.p, out_bytes, cudaMemcpyDeviceToHost);
    return b;
  }
};

inline std::vector<float> to_floats(const std::vector<uint8_t>& bytes, DType t) {
  std::vector<float> v(bytes.size() / dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) v[i] = load_as_f32(bytes.data(), t, i);
  return v;
}

// Checks every output element of `gpu` against `cpu` with the row's derived tolerance (header comment).
inline void check_outputs(const Step& st, const FlexMask& mask, const FlexScoreMod& mod, const std::vector<float>& gpu,
                          const std::vector<float>& cpu) {
  const Case& c = st.c;
  const int hd = c.head_size, nq = c.num_q_heads, nkv = c.num_kv_heads, G = nq / nkv, bs = c.block_size;
  const double scale = 1.0 / std::sqrt(double(hd)), uT = unit_roundoff(c.dtype);
  ASSERT_EQ(gpu.size(), cpu.size());
  double worst = 0;
  int bad = 0;
  for (int s = 0; s < st.S; ++s) {
    const int ctx = st.seq_lens[size_t(s)], ql = st.q_lens[size_t(s)];
    for (int i = 0; i < ql; ++i) {
      const int pos = ctx - ql + i, t = st.qsl[size_t(s)] + i;
      for (int h = 0; h < nq; ++h) {
        const float* qv = st.q.data() + (size_t(t) * nq + h) * hd;
        double ds = 0, vmax = 0;
        int L = 0;
        for (int k = 0; k < ctx; ++k) {
          if (!mask.allows(s, pos, k)) continue;
          const int32_t blk = st.tables[size_t(s) * st.max_blocks + k / bs];
          const float* slot = st.cache_hnd.data() + ((size_t(blk) * nkv + h / G) * bs + k % bs) * size_t(2 * hd);
          double dabs = 0, dot = 0;
          for (int d = 0; d < hd; ++d) {
            dabs += std::fabs(double(qv[d]) * slot[d]);
            dot += double(qv[d]) * slot[d];
            vmax = std::max(vmax, double(std::fabs(slot[hd + d])));
          }
          double extra = std::fabs(dot * scale);
          if (mod.softcap > 0) extra += mod.softcap;
          if (!mod.alibi_slopes.empty()) extra += std::fabs(double(mod.alibi_slopes[size_t(h)]) * (k - pos));
          if (!mod.rel_bias.empty()) extra += 1.0;  // the test's tables hold values in [-1, 1]
          ds = std::max(ds, (hd + 2) * kU * dabs * scale + 16 * kU * extra);
          ++L;
        }
        const double tol = L == 0 ? 0.0 : 2 * vmax * (2 * ds + (2.0 * L + 16) * kU) + 2 * uT * vmax;
        for (int d = 0; d < hd; ++d) {
          const size_t e = (size_t(t) * nq + h) * hd + d;
          const double err = std::fabs(double(gpu[e]) - double(cpu[e]));
          if (!(err <= tol)) {  // NaN fails too
            if (++bad <= 5)
              ADD_FAILURE() << c.str(mask) << ": seq " << s << " token " << i << " head " << h << " dim " << d << ": gpu "
                            << gpu[e] << " cpu " << cpu[e] << " tol " << tol << " keys " << L;
          }
          if (tol > 0) worst = std::max(worst, err / tol);
        }
      }
    }
  }
  EXPECT_EQ(bad, 0) << c.str(mask) << ": " << bad << " elements out of tolerance";
  std::printf("%-100s worst err/tol %.3f\n", c.str(mask).c_str(), worst);
}

// Plans and runs the step on the GPU (an eager workspace), returning the output's bytes.
inline std::vector<uint8_t> gpu_forward(const Step& st, const FlexMask& mask, const FlexScoreMod& mod, DeviceStep& d) {
  FlexCudaWorkspace ws;
  FlexCudaLimits l;
  l.max_tokens = st.T;
  l.max_seqs = st.S;
  l.max_model_len = st.max_ctx;
  l.block_m = st.c.block_m;
  l.block_n = st.c.block_n;
  l.num_q_heads = st.c.num_q_heads;
  l.num_kv_heads = st.c.num_kv_heads;
  ws.reserve(l);
  ws.plan(mask, mod, st.q_lens.data(), st.seq_lens.data(), st.S, nullptr);
  d.poison();
  flex_cuda_forward(d.params(st), ws, nullptr);
  const cudaError_t e = cudaDeviceSynchronize();
  EXPECT_EQ(e, cudaSuccess) << cudaGetErrorString(e);
  return d.download_bytes();
}

// The whole check of one case: fresh inputs, GPU and oracle, element-wise comparison.
inline void run_case(const Case& c, const FlexMask& mask, const FlexScoreMod& mod = {}, uint64_t seed = 1) {
  SCOPED_TRACE(c.str(mask));
  const Step st = make_step(c, seed);
  DeviceStep d(st);
  const std::vector<float> gpu = to_floats(gpu_forward(st, mask, mod, d), c.dtype);
  check_outputs(st, mask, mod, gpu, cpu_forward(st, mask, mod));
}

}  // namespace pagoda::flex_test
