// The TurboQuant attention kernels (attention/turboquant/turboquant_cuda_attention.h) against two float64
// references, shared by the host emulation of the kernel (turboquant_emulation_test.cc) and the GPU test
// (turboquant_test.cc): random cases in a shuffled block pool, encoded by the float64 model of the format
// (core/turboquant.h), the pool's other bytes random (stale slots: NaN and inf in their fp16 fields), and the
// check of an output.
//
// The references. Both decode the stored slots exactly (values v^ = zero + scale q, keys from the codes).
// - format: q~ = H s q and k~^ in float64, as the format defines them.
// - kernel model: what the kernel computes on purpose: q~ rotated in float in the kernel's order (bitwise the
//   kernel's), scaled by its power of two and rounded to fp16; centroids rounded to fp16 (the kernel's lookup
//   table), norm correction with ||fp16(c)||.
// Tolerances, derived per output element (row, dim), with u16 = 2^-11 (fp16) and uT the output's unit
// roundoff. A logit error |delta_j| <= delta moves the softmax weights by at most e^{2 delta} - 1 in total, so
// the output by at most (e^{2 delta} - 1) * (max_j v_jd - min_j v_jd) / 2. The kernel rounds p_j * scale_j to
// fp16 (relative u16), which moves the output by at most u16 sum_j w_j |scale_j q_jd| (w: the softmax
// weights); the final rounding adds uT |O|; fp32 accumulation of the sums adds n 2^-24 of their magnitudes.
// - against the kernel model, delta_j = scale (D + 8) 2^-24 sum_i |q_i k_i| (fp32 sums of exact products) +
//   2^-20 |x_j| (the approximate reciprocal square root of the norm correction);
// - against the format, delta_j adds scale c u16 sum_i |q~_i k~^_i| (c = 3.01: fp16 q~ and centroids and
//   the norm correction's ||fp16(c)||, each within u16; c = 1.01 for FP8 keys, exact in fp16) and the float
//   rotation's 8 log2(D) 2^-24 ||q|| sum_i |k~^_i|.
// A wrong code, centroid, mask or index moves an output by O(|v|), far above both bounds.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "pagoda/core/dtype.h"
#include "pagoda/core/turboquant.h"

namespace pagoda::tq_test {

struct TqCase {
  std::vector<int> query_lens;
  std::vector<int> seq_lens;
  int num_q_heads = 8, num_kv_heads = 2, head_size = 128, block_size = 16;
  int preset = 1;  // index into kTurboQuantPresets
  DType dtype = DType::kBF16;
  int force_splits = 0;  // > 0: exactly this many KV splits
  int launches = 1;      // > 1: relaunch on a re-poisoned output (what a graph replay computes)
  int check_every = 1;   // reference on every n-th query token (long prefills)
  int q_pad = 0;         // extra elements after each token's q (q as a slice of a fused qkv row)
  int layer = 5;
  unsigned seed = 1;
};

inline const TurboQuantPreset& preset_of(const TqCase& c) { return kTurboQuantPresets[c.preset]; }

inline std::string describe(const TqCase& c) {
  std::string s = std::string(preset_of(c).name) + " seqs=" + std::to_string(c.query_lens.size()) +
                  " q0=" + std::to_string(c.query_lens[0]) + " ctx0=" + std::to_string(c.seq_lens[0]) +
                  " H=" + std::to_string(c.num_q_heads) + "/" + std::to_string(c.num_kv_heads) +
                  " D=" + std::to_string(c.head_size) + " bs=" + std::to_string(c.block_size) + " " +
                  std::string(dtype_name(c.dtype));
  if (c.force_splits > 0) s += " splits=" + std::to_string(c.force_splits);
  if (c.launches > 1) s += " launches=" + std::to_string(c.launches);
  if (c.q_pad > 0) s += " strided-q";
  return s;
}

// A case's inputs, as the device holds them.
struct TqInputs {
  int T = 0, S = 0, num_blocks = 0, max_blocks = 0;
  std::vector<int> qsl, btab;  // [S + 1], [S][max_blocks]
  size_t q_stride = 0;         // elements
  std::vector<uint8_t> q;      // [T][q_stride] of dtype; padding 0xff (NaN: never read)
  std::vector<uint8_t> cache;  // [num_blocks][Hk][block_size][slot_bytes]
  TurboQuantLayout layout;
  std::vector<float> codebook;  // 3/4-bit keys
  float scale = 0;
  size_t slot_offset(int s, int key, int kvh, int Hk, int bs) const {
    const int blk = btab[size_t(s) * max_blocks + key / bs];
    return ((size_t(blk) * Hk + kvh) * bs + key % bs) * size_t(layout.slot_bytes);
  }
};

inline TqInputs make_inputs(const TqCase& c) {
  TqInputs in;
  std::mt19937_64 rng(c.seed * 0x9E3779B97F4A7C15ull + 17);
  std::normal_distribution<double> nd(0.0, 1.0);
  const TurboQuantPreset& p = preset_of(c);
  const int Hq = c.num_q_heads, Hk = c.num_kv_heads, D = c.head_size, bs = c.block_size;
  in.layout = turboquant_layout(p, D);
  if (p.key_bits != 8) in.codebook = turboquant_codebook(p.key_bits, D);
  in.S = int(c.query_lens.size());
  in.qsl.assign(size_t(in.S) + 1, 0);
  for (int s = 0; s < in.S; ++s) in.qsl[size_t(s) + 1] = in.qsl[size_t(s)] + c.query_lens[size_t(s)];
  in.T = in.qsl[size_t(in.S)];
  int total = 0;
  for (int s = 0; s < in.S; ++s) {
    in.max_blocks = std::max(in.max_blocks, (c.seq_lens[size_t(s)] + bs - 1) / bs);
    total += (c.seq_lens[size_t(s)] + bs - 1) / bs;
  }
  in.max_blocks = std::max(in.max_blocks, 1);
  in.num_blocks = total + 3;
  std::vector<int> perm(static_cast<size_t>(in.num_blocks));
  for (int i = 0; i < in.num_blocks; ++i) perm[size_t(i)] = i;
  std::shuffle(perm.begin(), perm.end(), rng);
  in.btab.assign(size_t(in.S) * in.max_blocks, -1);
  int next = 0;
  for (int s = 0; s < in.S; ++s)
    for (int b = 0; b < (c.seq_lens[size_t(s)] + bs - 1) / bs; ++b) in.btab[size_t(s) * in.max_blocks + b] = perm[size_t(next++)];
  // Stale bytes everywhere, then the sequences' slots.
  in.cache.resize(size_t(in.num_blocks) * Hk * bs * in.layout.slot_bytes);
  for (auto& b : in.cache) b = uint8_t(rng());
  std::vector<double> k(static_cast<size_t>(D)), v(static_cast<size_t>(D));
  for (int s = 0; s < in.S; ++s)
    for (int key = 0; key < c.seq_lens[size_t(s)]; ++key)
      for (int h = 0; h < Hk; ++h) {
        for (int i = 0; i < D; ++i) {
          k[size_t(i)] = nd(rng);
          v[size_t(i)] = nd(rng);
        }
        turboquant_encode_reference(in.layout, in.codebook, c.layer, k.data(), v.data(),
                                    in.cache.data() + in.slot_offset(s, key, h, Hk, bs));
      }
  in.q_stride = size_t(Hq) * D + size_t(c.q_pad);
  const size_t es = dtype_size(c.dtype);
  in.q.assign(size_t(in.T) * in.q_stride * es, 0xff);
  for (int t = 0; t < in.T; ++t)
    for (int i = 0; i < Hq * D; ++i) store_from_f32(in.q.data(), c.dtype, size_t(t) * in.q_stride + size_t(i), float(nd(rng)));
  in.scale = 1.f / std::sqrt(float(D));
  return in;
}

// q~ as the kernel computes it (prepare_queries): float rotation in its butterfly order, scaled by 2^-e so that
// the largest coordinate lies in [2^13, 2^14), rounded to fp16; returned times 2^e, in double.
inline std::vector<double> kernel_q(const float* q, int layer, int D) {
  std::vector<float> x(q, q + D);
  for (int i = 0; i < D; ++i)
    if (turboquant_sign_negative(layer, i)) x[size_t(i)] = -x[size_t(i)];
  for (int h = 1; h < D; h *= 2)
    for (int i = 0; i < D; ++i)
      if (!(i & h)) {
        const float a = x[size_t(i)], b = x[size_t(i + h)];
        x[size_t(i)] = a + b;
        x[size_t(i + h)] = a - b;
      }
  const float inv = D == 64 ? 0.125f : D == 128 ? 0.088388347648318441f : 0.0625f;
  float mx = 0.f;
  for (auto& e : x) {
    e *= inv;
    mx = std::max(mx, std::fabs(e));
  }
  int ex = 0;
  if (mx > 0.f) {
    std::frexp(mx, &ex);
    ex -= 14;
  }
  std::vector<double> r(static_cast<size_t>(D));
  for (int i = 0; i < D; ++i) r[size_t(i)] = std::ldexp(double(f16_to_f32(f32_to_f16(std::ldexp(x[size_t(i)], -ex)))), ex);
  return r;
}

struct CheckStats {
  double worst_model = 0, worst_format = 0;  // max |err| / tolerance
  long unwritten = 0, failures = 0;
};

// Checks `out` ([T][Hq][D] of c.dtype) against both references for every check_every-th token of each
// sequence (and its last), on all host threads; prints one line. fp16_operands: the tensor-core kernel (its
// model rounds q~ and the centroids to fp16); false: the CUDA-core kernel (fp32 q~ and centroids: the kernel
// model is the format's).
inline void check_output(const TqCase& c, const TqInputs& in, const std::vector<uint8_t>& out, const std::string& kernel,
                         bool fp16_operands = true) {
  SCOPED_TRACE(kernel + " " + describe(c));
  const TurboQuantPreset& p = preset_of(c);
  const int Hq = c.num_q_heads, Hk = c.num_kv_heads, D = c.head_size, G = Hq / Hk, bs = c.block_size;
  const bool fp8 = p.key_bits == 8;
  const double u16 = std::ldexp(1.0, -11), u32 = std::ldexp(1.0, -24);
  const double uT = c.dtype == DType::kBF16 ? std::ldexp(1.0, -8) : u16;
  std::vector<double> c16;  // the kernel's centroids
  for (float x : in.codebook) c16.push_back(fp16_operands ? f16_to_f32(f32_to_f16(x)) : x);
  std::vector<std::pair<int, int>> rows;
  for (int s = 0; s < in.S; ++s)
    for (int t = 0; t < c.query_lens[size_t(s)]; ++t)
      if (t % c.check_every == 0 || t == c.query_lens[size_t(s)] - 1) rows.emplace_back(s, t);
  const int nthreads = int(std::clamp(std::thread::hardware_concurrency(), 1u, 16u));
  std::vector<CheckStats> stats(static_cast<size_t>(nthreads));
  std::vector<std::string> first_failure(static_cast<size_t>(nthreads));
  auto work = [&](int tid) {
    CheckStats& st = stats[size_t(tid)];
    std::vector<double> kr(static_cast<size_t>(D)), vv(static_cast<size_t>(D)), q(static_cast<size_t>(D)), qf(static_cast<size_t>(D));
    std::vector<float> qfl(static_cast<size_t>(D));
    for (size_t ri = size_t(tid); ri < rows.size(); ri += size_t(nthreads)) {
      const auto [s, t] = rows[ri];
      const int ctx = c.seq_lens[size_t(s)], pos = ctx - c.query_lens[size_t(s)] + t, tok = in.qsl[size_t(s)] + t;
      for (int h = 0; h < Hq; ++h) {
        const int kvh = h / G;
        for (int i = 0; i < D; ++i) {
          qfl[size_t(i)] = load_as_f32(in.q.data(), c.dtype, size_t(tok) * in.q_stride + size_t(h) * D + i);
          qf[size_t(i)] = qfl[size_t(i)];
        }
        double qnorm = 0;
        for (double x : qf) qnorm += x * x;
        qnorm = std::sqrt(qnorm);
        turboquant_rotate_reference(c.layer, qf.data(), D);  // format: q~ in float64
        q = fp16_operands ? kernel_q(qfl.data(), c.layer, D) : qf;  // kernel model
        const int n = pos + 1;
        std::vector<double> xm(static_cast<size_t>(n)), xf(static_cast<size_t>(n)), dm(static_cast<size_t>(n)), df(static_cast<size_t>(n));
        std::vector<std::vector<double>> vals(static_cast<size_t>(n));
        std::vector<double> vsc(static_cast<size_t>(n)), vzero(static_cast<size_t>(n));
        for (int key = 0; key < n; ++key) {
          const uint8_t* slot = in.cache.data() + in.slot_offset(s, key, kvh, Hk, bs);
          vals[size_t(key)].resize(size_t(D));
          turboquant_decode_reference(in.layout, in.codebook, c.layer, slot, kr.data(), nullptr, vals[size_t(key)].data());
          double mod = 0, fmt = 0, abs_m = 0, abs_f = 0, kabs = 0;
          for (int i = 0; i < D; ++i) {
            fmt += qf[size_t(i)] * kr[size_t(i)];
            abs_f += std::fabs(qf[size_t(i)] * kr[size_t(i)]);
            kabs += std::fabs(kr[size_t(i)]);
          }
          // The kernel model's key: FP8 values exactly; else norm * c16 / ||c16|| (norm correction).
          double k16sq = 0;
          if (!fp8) {
            for (int i = 0; i < D; ++i) {
              const unsigned code = [&] {
                unsigned v = 0;
                for (int b = 0; b < p.key_bits; ++b)
                  v |= unsigned((slot[(i * p.key_bits + b) / 8] >> ((i * p.key_bits + b) % 8)) & 1u) << b;
                return v;
              }();
              kr[size_t(i)] = c16[code];
              k16sq += kr[size_t(i)] * kr[size_t(i)];
            }
            uint16_t nb;
            std::memcpy(&nb, slot + in.layout.key_norm_offset, 2);
            const double f = double(f16_to_f32(nb)) / (p.norm_correction ? std::sqrt(k16sq) : std::sqrt(double(D)));
            for (auto& e : kr) e *= f;
          }
          for (int i = 0; i < D; ++i) {
            mod += q[size_t(i)] * kr[size_t(i)];
            abs_m += std::fabs(q[size_t(i)] * kr[size_t(i)]);
          }
          xm[size_t(key)] = mod * in.scale;
          xf[size_t(key)] = fmt * in.scale;
          const double rotation = in.scale * 8 * std::log2(double(D)) * u32 * qnorm * kabs;  // float q~
          dm[size_t(key)] = in.scale * (D + 8) * u32 * abs_m + std::ldexp(std::fabs(xm[size_t(key)]), -20) + rotation;
          df[size_t(key)] = dm[size_t(key)] + (fp16_operands ? in.scale * (fp8 ? 1.01 : 3.01) * u16 * abs_f : 0.0);
          uint16_t sb, zb;
          std::memcpy(&sb, slot + in.layout.value_scale_offset, 2);
          std::memcpy(&zb, slot + in.layout.value_zero_offset, 2);
          vsc[size_t(key)] = f16_to_f32(sb);
          vzero[size_t(key)] = f16_to_f32(zb);
        }
        auto softmax = [&](const std::vector<double>& x) {
          const double mx = *std::max_element(x.begin(), x.end());
          std::vector<double> w(x.size());
          double l = 0;
          for (size_t j = 0; j < x.size(); ++j) l += (w[j] = std::exp(x[j] - mx));
          for (auto& e : w) e /= l;
          return w;
        };
        const std::vector<double> wm = softmax(xm), wf = softmax(xf);
        const double dmax_m = *std::max_element(dm.begin(), dm.end()), dmax_f = *std::max_element(df.begin(), df.end());
        double smax = 0, zmax = 0;
        for (int key = 0; key < n; ++key) {
          smax = std::max(smax, vsc[size_t(key)]);
          for (int i = 0; i < D; ++i) zmax = std::max(zmax, std::fabs(vals[size_t(key)][size_t(i)]));
        }
        const double nacc = double(n) / 16 + 64;  // sequential fp32 additions along a row's sums, at most
        for (int i = 0; i < D; ++i) {
          // pq = sum_j w_j |scale_j q_jd| = sum_j w_j (v^_jd - zero_j) (v^ - zero >= 0).
          double om = 0, of = 0, vlo = INFINITY, vhi = -INFINITY, pq = 0;
          for (int key = 0; key < n; ++key) {
            const double v = vals[size_t(key)][size_t(i)];
            om += wm[size_t(key)] * v;
            of += wf[size_t(key)] * v;
            vlo = std::min(vlo, v);
            vhi = std::max(vhi, v);
            pq += wm[size_t(key)] * (v - vzero[size_t(key)]);
          }
          const double half_range = 0.5 * (vhi - vlo);
          const double common = u16 * pq * 1.01 + 64 * nacc * u32 * (smax + zmax) + half_range * 1e-6;
          const double tol_m = std::expm1(2 * dmax_m) * half_range + common + uT * std::fabs(om);
          const double tol_f = std::expm1(2 * dmax_f) * half_range + common + uT * std::fabs(of) + uT * std::fabs(om - of);
          const double got = load_as_f32(out.data(), c.dtype, (size_t(tok) * Hq + h) * D + i);
          if (std::isnan(got)) {
            ++st.unwritten;
            continue;
          }
          const double em = std::fabs(got - om) / tol_m, ef = std::fabs(got - of) / tol_f;
          st.worst_model = std::max(st.worst_model, em);
          st.worst_format = std::max(st.worst_format, ef);
          if (!(em <= 1 && ef <= 1) && st.failures++ == 0)
            first_failure[size_t(tid)] = "seq " + std::to_string(s) + " token " + std::to_string(t) + " head " +
                                         std::to_string(h) + " dim " + std::to_string(i) + ": got " +
                                         std::to_string(got) + ", model " + std::to_string(om) + " (tol " +
                                         std::to_string(tol_m) + "), format " + std::to_string(of) + " (tol " +
                                         std::to_string(tol_f) + ")";
        }
      }
    }
  };
  std::vector<std::thread> th;
  for (int i = 0; i < nthreads; ++i) th.emplace_back(work, i);
  for (auto& x : th) x.join();
  CheckStats all;
  std::string first;
  for (int i = 0; i < nthreads; ++i) {
    all.unwritten += stats[size_t(i)].unwritten;
    all.failures += stats[size_t(i)].failures;
    all.worst_model = std::max(all.worst_model, stats[size_t(i)].worst_model);
    all.worst_format = std::max(all.worst_format, stats[size_t(i)].worst_format);
    if (first.empty()) first = first_failure[size_t(i)];
  }
  EXPECT_EQ(all.unwritten, 0) << "unwritten or NaN outputs";
  EXPECT_EQ(all.failures, 0) << "outputs beyond the derived bounds; first: " << first;
  std::printf("[turboquant] %-10s %-80s err/tol: model %.3f format %.3f\n", kernel.c_str(), describe(c).c_str(),
              all.worst_model, all.worst_format);
}

}  // namespace pagoda::tq_test
