// Fused RoPE + paged KV-cache write against float64 references; FP8 caches bit-exact against the host
// conversions and within the FP8 error bound of the exact values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <numeric>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/rope_kv.h"

namespace pagoda {
namespace {

using test::HostArray;
using test::Rng;

struct Case {
  int head_dim, kv_heads, gqa, block_size;
  KvLayout layout;
  int tokens;
  bool fused_qkv;  // q, k, v slices of one [tokens, (q + 2 kv) * head_dim] buffer, else three buffers
};

// Covers head sizes 32..256 (72: a multiple of 8 but not 16, the 8-byte path), GQA 1/4/8, block sizes 16
// and 32, both layouts, 1..4099 tokens, strided and contiguous q/k/v.
const Case kCases[] = {
    {64, 2, 4, 16, KvLayout::kNHD, 97, true},   {128, 8, 1, 32, KvLayout::kHND, 513, false},
    {256, 1, 8, 16, KvLayout::kHND, 7, true},   {128, 2, 8, 16, KvLayout::kNHD, 4099, true},
    {72, 2, 4, 32, KvLayout::kNHD, 17, false},  {32, 4, 1, 16, KvLayout::kHND, 1, true},
};

constexpr int kMaxPosition = 8192;

double fp8_max(DType t) { return t == DType::kF8E4M3 ? 448.0 : 57344.0; }

// Tolerance of a rotated element o = a*c -/+ b*s computed in fp32 and rounded once to the dtype: the
// rounding, u_out * |o| (half a subnormal quantum when cancellation leaves o below the normal range), plus
// the fp32 arithmetic (two products and a sum, each 2^-24 relative to its own magnitude): 2^-23 (|ac| + |bs|).
double rope_tolerance(DType t, double ref, double mag) {
  return test::unit_roundoff(t) * std::fabs(ref) + test::half_min_subnormal(t) + 2 * std::ldexp(1.0, -24) * mag;
}

int64_t cache_row(KvLayout layout, int64_t slot, int h, int kv_heads, int block_size) {
  return layout == KvLayout::kNHD ? slot * kv_heads + h
                                  : ((slot / block_size) * kv_heads + h) * block_size + slot % block_size;
}

void run_case(DType dt, DType cache_dt, const Case& c, Rng& rng) {
  const int hd = c.head_dim, half = hd / 2, nkv = c.kv_heads, nq = c.kv_heads * c.gqa, T = c.tokens;
  const std::string label = std::string(dtype_name(dt)) + "/" + std::string(dtype_name(cache_dt)) +
                            " hd=" + std::to_string(hd) + " q=" + std::to_string(nq) + " kv=" + std::to_string(nkv) +
                            " bs=" + std::to_string(c.block_size) +
                            (c.layout == KvLayout::kNHD ? " NHD" : " HND") + " tokens=" + std::to_string(T);
  SCOPED_TRACE(label);
  const bool fp8 = cache_dt != dt;
  const size_t es = dtype_size(dt), ces = dtype_size(cache_dt);

  // Table: Llama-3 scaled for head_dim 128, plain otherwise.
  const Llama3RopeScaling llama3{8.0, 1.0, 4.0, 8192};
  const RopeTable table = build_rope_table(kMaxPosition, hd, hd == 128 ? 500000.0 : 1e6, hd == 128 ? &llama3 : nullptr);

  // Inputs. Some v entries are large so that FP8 stores saturate.
  const int64_t row = int64_t(nq + 2 * nkv) * hd;
  const int64_t qs = c.fused_qkv ? row : int64_t(nq) * hd, ks = c.fused_qkv ? row : int64_t(nkv) * hd,
                vs = ks;
  // Host copies indexed like the device tensors: token t, head h, element i at t * stride + h * hd + i.
  HostArray q_in(dt, size_t(T) * qs), k_in(dt, size_t(T) * ks), v_in(dt, size_t(T) * vs);
  for (int t = 0; t < T; ++t) {
    for (int64_t i = 0; i < int64_t(nq) * hd; ++i) q_in.set(size_t(t) * qs + i, rng.normal());
    for (int64_t i = 0; i < int64_t(nkv) * hd; ++i) k_in.set(size_t(t) * ks + i, rng.normal());
    for (int64_t i = 0; i < int64_t(nkv) * hd; ++i) v_in.set(size_t(t) * vs + i, rng.normal());
  }
  for (int t = 0; t < T; t += 3) v_in.set(size_t(t) * vs + 1, t % 2 ? 60.f : -60.f);

  std::vector<int64_t> positions(T);
  for (auto& p : positions) p = rng.integer(0, kMaxPosition - 1);
  const int num_blocks = (T + T / 4) / c.block_size + 2;
  const int64_t num_slots = int64_t(num_blocks) * c.block_size;
  std::vector<int64_t> all(num_slots);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), rng.gen());
  std::vector<int64_t> slots(all.begin(), all.begin() + T);  // distinct, random
  for (int t = 0; t < T; ++t)
    if (rng.integer(0, 9) == 0) slots[t] = -1;  // ~10% padding tokens
  if (T > 1) slots[T - 1] = -1;

  // Device buffers: in the fused layout q, k, v live in one buffer at offsets 0, nq*hd, (nq+nkv)*hd.
  DeviceBuffer dqkv, dq, dk, dv;
  void *q, *k, *v;
  if (c.fused_qkv) {
    HostArray qkv(dt, size_t(T) * row);
    for (int t = 0; t < T; ++t)
      for (int64_t i = 0; i < row; ++i) {
        const float val = i < nq * hd ? q_in.get(size_t(t) * qs + i)
                        : i < (nq + nkv) * hd ? k_in.get(size_t(t) * ks + i - nq * hd)
                                              : v_in.get(size_t(t) * vs + i - (nq + nkv) * hd);
        qkv.set(size_t(t) * row + i, val);
      }
    dqkv = test::to_device(qkv);
    q = dqkv.data();
    k = dqkv.as<char>() + size_t(nq) * hd * es;
    v = dqkv.as<char>() + size_t(nq + nkv) * hd * es;
  } else {
    dq = test::to_device(q_in), dk = test::to_device(k_in), dv = test::to_device(v_in);
    q = dq.data(), k = dk.data(), v = dv.data();
  }
  DeviceBuffer dpos = test::to_device(positions), dslots = test::to_device(slots);
  DeviceBuffer dcos = test::to_device(table.cos), dsin = test::to_device(table.sin);
  const size_t cache_elems = size_t(num_slots) * nkv * 2 * hd;
  DeviceBuffer dcache = test::poisoned(cache_elems * ces);
  const float k_scale = 0.0125f, v_scale = 0.02f;
  DeviceBuffer dks = test::to_device(std::vector<float>{k_scale}), dvs = test::to_device(std::vector<float>{v_scale});
  DeviceBuffer dflag = test::to_device(std::vector<int>{0});

  RopeKvParams p;
  p.q = q, p.k = k, p.v = v;
  p.q_stride = c.fused_qkv ? row : 0, p.k_stride = c.fused_qkv ? row : 0, p.v_stride = c.fused_qkv ? row : 0;
  p.positions = dpos.as<int64_t>(), p.cos = dcos.as<float>(), p.sin = dsin.as<float>(), p.max_position = kMaxPosition;
  p.num_tokens = T, p.num_q_heads = nq, p.num_kv_heads = nkv, p.head_dim = hd, p.dtype = dt;
  p.kv_cache = dcache.data(), p.slot_mapping = dslots.as<int64_t>(), p.num_blocks = num_blocks;
  p.block_size = c.block_size, p.layout = c.layout, p.cache_dtype = cache_dt;
  p.k_scale = fp8 ? dks.as<float>() : nullptr, p.v_scale = fp8 ? dvs.as<float>() : nullptr;
  p.error_flag = dflag.as<int>();
  rope_kv(p, nullptr);
  test::sync_and_check();

  // Read back q, k (and v, which must be unchanged) through their strides.
  auto read = [&](const void* base, int64_t stride) {
    HostArray out(dt, size_t(T) * stride);
    const DeviceBuffer& owner = c.fused_qkv ? dqkv : (base == dq.data() ? dq : base == dk.data() ? dk : dv);
    const size_t offset = static_cast<const char*>(base) - static_cast<const char*>(owner.data());
    owner.download(out.bytes.data(), std::min(out.nbytes(), owner.bytes() - offset), offset);
    return out;
  };
  const HostArray q_out = read(q, qs), k_out = read(k, ks), v_out = read(v, vs);
  const HostArray cache = test::from_device(dcache, cache_dt, cache_elems);
  EXPECT_EQ(test::from_device<int>(dflag, 1)[0], 0);

  int failures = 0;
  double worst = 0, worst_fp8 = 0;
  auto fail = [&](const std::string& what) {
    if (++failures <= 8) ADD_FAILURE() << what;
  };
  // RoPE of q and k.
  for (int t = 0; t < T; ++t) {
    const float* cs = table.cos.data() + size_t(positions[t]) * half;
    const float* sn = table.sin.data() + size_t(positions[t]) * half;
    for (int which = 0; which < 2; ++which) {
      const HostArray& in = which == 0 ? q_in : k_in;
      const HostArray& out = which == 0 ? q_out : k_out;
      const int64_t stride = which == 0 ? qs : ks;
      for (int h = 0; h < (which == 0 ? nq : nkv); ++h) {
        const size_t base = size_t(t) * stride + size_t(h) * hd;
        for (int i = 0; i < half; ++i) {
          const double a = in.get(base + i), b = in.get(base + half + i), co = cs[i], si = sn[i];
          const double r1 = a * co - b * si, r2 = b * co + a * si;
          // Each output's own products bound its rounding: |a co| + |b si| for r1, |b co| + |a si| for r2.
          const double mag1 = std::fabs(a * co) + std::fabs(b * si), mag2 = std::fabs(b * co) + std::fabs(a * si);
          const double g1 = out.get(base + i), g2 = out.get(base + half + i);
          const double t1 = rope_tolerance(dt, r1, mag1), t2 = rope_tolerance(dt, r2, mag2);
          if (!(std::fabs(g1 - r1) <= t1) || !(std::fabs(g2 - r2) <= t2))
            fail(label + (which ? " k" : " q") + " token " + std::to_string(t) + " head " + std::to_string(h) +
                 " i " + std::to_string(i) + " pos " + std::to_string(positions[t]) + ": |err|/tol " +
                 std::to_string(std::fabs(g1 - r1) / t1) + ", " + std::to_string(std::fabs(g2 - r2) / t2) +
                 " (got " + std::to_string(g1) + ", " + std::to_string(g2) + "; want " + std::to_string(r1) + ", " +
                 std::to_string(r2) + ")");
          else
            worst = std::max({worst, std::fabs(g1 - r1) / t1, std::fabs(g2 - r2) / t2});
        }
      }
    }
    for (int64_t i = 0; i < int64_t(nkv) * hd; ++i)
      if (v_out.get(size_t(t) * vs + i) != v_in.get(size_t(t) * vs + i)) fail(label + ": v modified");
  }

  // Cache: written slots hold exactly the converted k (as left in k) and v; all other slots untouched.
  std::vector<int> writer(num_slots, -1);
  for (int t = 0; t < T; ++t)
    if (slots[t] >= 0) writer[slots[t]] = t;
  const uint8_t* cb = cache.bytes.data();
  HostArray want(cache_dt, 1);
  for (int64_t s = 0; s < num_slots; ++s) {
    for (int h = 0; h < nkv; ++h) {
      const size_t off = size_t(cache_row(c.layout, s, h, nkv, c.block_size)) * 2 * hd;
      const int t = writer[s];
      if (t < 0) {
        for (size_t b = off * ces; b < (off + 2 * hd) * ces; ++b)
          if (cb[b] != test::kPoisonByte) {
            fail(label + ": unwritten slot " + std::to_string(s) + " modified");
            break;
          }
        continue;
      }
      for (int d = 0; d < 2 * hd; ++d) {
        const bool is_k = d < hd;
        const float val = is_k ? k_out.get(size_t(t) * ks + size_t(h) * hd + d)
                               : v_in.get(size_t(t) * vs + size_t(h) * hd + d - hd);
        want.set(0, fp8 ? val / (is_k ? k_scale : v_scale) : val);
        if (std::memcmp(want.bytes.data(), cb + (off + d) * ces, ces) != 0) {
          fail(label + ": cache slot " + std::to_string(s) + " head " + std::to_string(h) + " d " + std::to_string(d) +
               " = " + std::to_string(cache.get(off + d)) + ", want " + std::to_string(want.get(0)));
          continue;
        }
        if (fp8) {
          // Round trip: dequantised value against the exact one (float64 RoPE for k, the input for v).
          const double scale = is_k ? k_scale : v_scale;
          double exact, prior_tol = 0;
          if (is_k) {
            const int i = d % half;
            const size_t base = size_t(t) * ks + size_t(h) * hd;
            const double a = k_in.get(base + i), b = k_in.get(base + half + i);
            const double co = table.cos[size_t(positions[t]) * half + i], si = table.sin[size_t(positions[t]) * half + i];
            exact = d < half ? a * co - b * si : b * co + a * si;
            prior_tol = rope_tolerance(dt, exact, d < half ? std::fabs(a * co) + std::fabs(b * si)
                                                           : std::fabs(b * co) + std::fabs(a * si));
          } else {
            exact = val;
          }
          const double clamped = std::clamp(exact, -fp8_max(cache_dt) * scale, fp8_max(cache_dt) * scale);
          // FP8 rounding: u8 relative in the normal range, half a subnormal quantum (times scale) below it;
          // plus the error already in the model-dtype k, grown by the FP8 rounding (1 + u8 <= 1.125), and
          // the fp32 division by the scale (2^-24, doubled for margin).
          const double tol = test::unit_roundoff(cache_dt) * std::fabs(clamped) * (1 + 1e-6) +
                             test::half_min_subnormal(cache_dt) * scale + prior_tol * 1.2 +
                             std::ldexp(std::fabs(exact), -23);
          const double deq = double(cache.get(off + d)) * scale;
          if (!(std::fabs(deq - clamped) <= tol))
            fail(label + ": fp8 round trip slot " + std::to_string(s) + " d " + std::to_string(d) + ": " +
                 std::to_string(deq) + " vs " + std::to_string(clamped));
          else
            worst_fp8 = std::max(worst_fp8, std::fabs(deq - clamped) / tol);
        }
      }
    }
  }
  std::printf("rope_kv %-60s max |err|/tol %.3f%s\n", label.c_str(), worst,
              fp8 ? (", fp8 round trip " + std::to_string(worst_fp8)).c_str() : "");
}

void run_all(DType dt) {
  SCOPED_TRACE(test::seed_note());
  Rng rng(uint64_t(dt) + 100);
  for (DType cache_dt : {dt, DType::kF8E4M3, DType::kF8E5M2})
    for (const Case& c : kCases) run_case(dt, cache_dt, c, rng);
}

TEST(RopeKvCuda, Bf16) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  run_all(DType::kBF16);
}
TEST(RopeKvCuda, F16) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  run_all(DType::kF16);
}
TEST(RopeKvCuda, F32) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  run_all(DType::kF32);
}

// A position outside the table or a slot outside the cache sets the flag and leaves that token alone;
// the other tokens are processed. Without a cache, only RoPE is applied.
TEST(RopeKvCuda, BadPositionOrSlotSetsTheFlag) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(7);
  const DType dt = DType::kBF16;
  const int T = 4, nq = 2, nkv = 1, hd = 64, bs = 16, blocks = 2;
  const RopeTable table = build_rope_table(128, hd, 10000.0);
  const HostArray q = test::random_array(rng, dt, size_t(T) * nq * hd), k = test::random_array(rng, dt, size_t(T) * nkv * hd);
  const HostArray v = test::random_array(rng, dt, size_t(T) * nkv * hd);
  const std::vector<int64_t> positions{3, 128, 5, 6};  // token 1: position == max_position
  const std::vector<int64_t> slots{0, 1, 32, 2};       // token 2: slot == num_blocks * block_size
  DeviceBuffer dq = test::to_device(q), dk = test::to_device(k), dv = test::to_device(v);
  DeviceBuffer dpos = test::to_device(positions), dslots = test::to_device(slots);
  DeviceBuffer dcos = test::to_device(table.cos), dsin = test::to_device(table.sin);
  DeviceBuffer dcache = test::poisoned(size_t(blocks) * bs * nkv * 2 * hd * 2);
  DeviceBuffer dflag = test::to_device(std::vector<int>{0});
  RopeKvParams p;
  p.q = dq.data(), p.k = dk.data(), p.v = dv.data();
  p.positions = dpos.as<int64_t>(), p.cos = dcos.as<float>(), p.sin = dsin.as<float>(), p.max_position = 128;
  p.num_tokens = T, p.num_q_heads = nq, p.num_kv_heads = nkv, p.head_dim = hd, p.dtype = dt;
  p.kv_cache = dcache.data(), p.slot_mapping = dslots.as<int64_t>(), p.num_blocks = blocks, p.block_size = bs;
  p.cache_dtype = dt, p.error_flag = dflag.as<int>();
  rope_kv(p, nullptr);
  test::sync_and_check();
  EXPECT_EQ(test::from_device<int>(dflag, 1)[0], 1);
  const HostArray q2 = test::from_device(dq, dt, q.n);
  for (int t : {1, 2})
    for (int i = 0; i < nq * hd; ++i) EXPECT_EQ(q2.get(size_t(t) * nq * hd + i), q.get(size_t(t) * nq * hd + i));
  for (int t : {0, 3}) EXPECT_NE(q2.get(size_t(t) * nq * hd + 1), q.get(size_t(t) * nq * hd + 1));
  const HostArray cache = test::from_device(dcache, dt, size_t(blocks) * bs * nkv * 2 * hd);
  EXPECT_TRUE(std::isnan(cache.get(size_t(1) * 2 * hd)));   // slot 1 (token 1) not written
  EXPECT_FALSE(std::isnan(cache.get(size_t(2) * 2 * hd)));  // slot 2 (token 3) written

  // RoPE only.
  DeviceBuffer dq3 = test::to_device(q), dk3 = test::to_device(k);
  const std::vector<int64_t> good{0, 1, 2, 127};
  DeviceBuffer dgood = test::to_device(good);
  p.q = dq3.data(), p.k = dk3.data(), p.v = nullptr, p.positions = dgood.as<int64_t>(), p.kv_cache = nullptr;
  p.slot_mapping = nullptr;
  rope_kv(p, nullptr);
  test::sync_and_check();
  const HostArray q3 = test::from_device(dq3, dt, q.n);
  for (int i = 0; i < nq * hd; ++i) EXPECT_EQ(q3.get(i), q.get(i)) << "position 0 is the identity";
  EXPECT_NE(q3.get(size_t(3) * nq * hd + 1), q.get(size_t(3) * nq * hd + 1));
}

}  // namespace
}  // namespace pagoda
