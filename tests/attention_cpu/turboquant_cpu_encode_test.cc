// TURBOQUANT CPU encode (attention/turboquant/turboquant_cpu.h) against the float64 model of the format
// (core/turboquant.h): value codes and every fp16 field bit for bit; key codes bit for bit except where the
// exact coordinate lies within the float32 rotation's rounding margin of a decision boundary (such cases are
// counted and must be rare); the reconstruction error of the written keys against the codebook's distortion.
// Also the vector conversions of the slot fields against the core scalar ones, exhaustively.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <thread>

#include <gtest/gtest.h>

#include "pagoda/attention/turboquant/turboquant_cpu.h"
#include "pagoda/attention/turboquant/turboquant_cpu_simd.h"
#include "pagoda/core/dtype.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

constexpr double kU = 0x1p-24;  // float32 unit roundoff

TEST(TurboQuantCpuConvert, SlotFieldConversions) {
  for (uint32_t h = 0; h < 65536; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;  // Inf / NaN: never written
    const uint16_t b = uint16_t(h);
    ASSERT_EQ(tq_cpu::f16_field(reinterpret_cast<const uint8_t*>(&b)), f16_to_f32(b)) << h;
  }
  uint8_t all[256];
  for (int i = 0; i < 256; ++i) all[i] = uint8_t(i);
  for (int i = 0; i < 256; i += 8) {
    const tq_cpu::v8f f = tq_cpu::e4m3x8(all + i);
    for (int k = 0; k < 8; ++k)
      if ((all[i + k] & 0x7f) != 0x7f) {
        ASSERT_EQ(f[k], f8e4m3_to_f32(all[i + k])) << i + k;
      }
  }
  // Every float whose magnitude is in E4M3's range and beyond, sampled densely, and the midpoints exactly.
  std::mt19937_64 rng(1);
  for (int i = 0; i < 2000000; ++i) {
    const uint32_t bits = uint32_t(rng()) & 0xc7ffffffu;  // exponents up to 2^16 (and tiny ones)
    float f;
    std::memcpy(&f, &bits, 4);
    ASSERT_EQ(tq_cpu::f32_to_e4m3_sat(f), f32_to_f8e4m3(f)) << f;
  }
  for (int c = 0; c < 0x7e; ++c) {
    const float mid = 0.5f * (f8e4m3_to_f32(uint8_t(c)) + f8e4m3_to_f32(uint8_t(c + 1)));
    for (float f : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1000.0f), -mid})
      ASSERT_EQ(tq_cpu::f32_to_e4m3_sat(f), f32_to_f8e4m3(f)) << f;
  }
  EXPECT_EQ(tq_cpu::f32_to_e4m3_sat(1e30f), 0x7e);
  EXPECT_EQ(tq_cpu::f32_to_e4m3_sat(-500.0f), 0xfe);
}

unsigned read_code(const uint8_t* field, int i, int bits) {
  unsigned got = 0;
  for (int bit = 0; bit < bits; ++bit) got |= unsigned((field[(i * bits + bit) / 8] >> ((i * bits + bit) % 8)) & 1) << bit;
  return got;
}

struct EncodeStats {
  int64_t codes = 0, mismatches = 0, near_boundary = 0;
};

// Encodes `tokens` tokens of 2 KV heads with the fast path (two threads, slots scattered over the cache and one
// padding token) and checks every slot against the float64 model. Keys: Gaussian with a per-token scale, a
// few with an outlier coordinate, one all-zero; values: uniform with a per-token offset, one constant.
void check_encode(const TurboQuantPreset& preset, int d, int tokens, uint64_t seed, EncodeStats* st) {
  SCOPED_TRACE(std::string(preset.name) + " d " + std::to_string(d));
  const int nkv = 2, bs = 16, layer = 7;
  const TurboQuantCpuShape sh = turboquant_cpu_shape(std::string(preset.name), d, nkv, nkv, bs, 0.0f);
  const TurboQuantLayout& L = sh.layout;
  TurboQuantCpuWorkspace ws(sh, 2);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g;
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int row = nkv * d;
  std::vector<float> k(size_t(tokens + 1) * row), v(size_t(tokens + 1) * row);
  for (int t = 0; t < tokens; ++t) {
    const float ks = std::exp(u(rng)), off = 3 * u(rng);
    for (int i = 0; i < row; ++i) {
      k[size_t(t * row + i)] = ks * g(rng);
      v[size_t(t * row + i)] = off + u(rng);
    }
    if (t % 5 == 0) k[size_t(t * row + int(rng() % unsigned(row)))] *= 40.0f;
  }
  std::fill(k.begin() + row, k.begin() + row + d, 0.0f);  // token 1, head 0: a zero key
  std::fill(v.begin() + 2 * row, v.begin() + 2 * row + d, 0.3f);  // token 2, head 0: a constant value
  // Slots: token t at a shuffled slot; the last token is padding (slot -1).
  const int num_blocks = (tokens + bs - 1) / bs + 2;
  std::vector<int64_t> slots(size_t(num_blocks * bs));
  for (size_t i = 0; i < slots.size(); ++i) slots[i] = int64_t(i);
  std::shuffle(slots.begin(), slots.end(), rng);
  slots.resize(size_t(tokens));
  slots.push_back(-1);
  std::vector<uint8_t> cache(size_t(num_blocks) * nkv * bs * L.slot_bytes, 0xFF);
  std::vector<uint8_t> untouched = cache;
  TurboQuantCpuWriteKvParams p;
  p.key = k.data();
  p.value = v.data();
  p.slot_mapping = slots.data();
  p.num_tokens = tokens + 1;
  p.kv_cache = cache.data();
  p.num_blocks = num_blocks;
  p.layer = layer;
  p.parallel_for = [](int64_t n, const std::function<void(int64_t, int64_t)>& body) {
    std::thread t([&] { body(0, n / 2); });
    body(n / 2, n);
    t.join();
  };
  turboquant_cpu_write_kv(sh, p, ws);

  std::vector<uint8_t> ref(size_t(L.slot_bytes));
  std::vector<double> kd(static_cast<size_t>(d)), vd(static_cast<size_t>(d)), kr(static_cast<size_t>(d));
  const int n_bounds = L.key_bits == 8 ? 0 : (1 << L.key_bits) - 1;
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < nkv; ++h) {
      SCOPED_TRACE("token " + std::to_string(t) + " head " + std::to_string(h));
      const float* kf = k.data() + size_t(t * row + h * d);
      const float* vf = v.data() + size_t(t * row + h * d);
      for (int i = 0; i < d; ++i) {
        kd[size_t(i)] = kf[i];
        vd[size_t(i)] = vf[i];
      }
      turboquant_encode_reference(L, sh.codebook, layer, kd.data(), vd.data(), ref.data());
      const int64_t s = slots[size_t(t)];
      const uint8_t* got = cache.data() + ((s / bs * nkv + h) * bs + s % bs) * L.slot_bytes;
      // Values and the padding: identical bytes.
      ASSERT_EQ(0, std::memcmp(got + L.value_offset, ref.data() + L.value_offset, size_t(L.slot_bytes - L.value_offset)));
      kr = kd;
      turboquant_rotate_reference(layer, kr.data(), d);
      // Margin of a rotated coordinate (see turboquant_cpu_simd.h): the float transform of chunk c errs by at
      // most gamma_log2(n) sum_{j in c} |k_j| before its scaling; the scale factor and the product round once
      // each (2u |x|). With f the exact factor of the chunk (sqrt(d) / (sqrt(n) ||k||), or 1 / sqrt(n) for FP8),
      // |x_fast - x| <= f gamma_log2(n) ||k_c||_1 + 2.01 u |x| (x the exact coordinate).
      double sq = 0;
      for (double x : kd) sq += x * x;
      const double norm = std::sqrt(sq);
      std::vector<double> margin(static_cast<size_t>(d));
      for (int c = 0; c < turboquant_num_chunks(d); ++c) {
        int b0, n;
        turboquant_chunk(d, c, &b0, &n);
        double l1 = 0;
        for (int i = b0; i < b0 + n; ++i) l1 += std::abs(kd[size_t(i)]);
        const int depth = std::bit_width(unsigned(n)) - 1;
        const double gamma = depth * kU / (1 - depth * kU);
        const double f = (L.key_bits == 8 ? 1.0 : (norm > 0 ? std::sqrt(double(d)) / norm : 0.0)) / std::sqrt(double(n));
        for (int i = b0; i < b0 + n; ++i) {
          const double x = kr[size_t(i)] * f * std::sqrt(double(n));
          margin[size_t(i)] = 1.01 * (f * gamma * l1 + 2.01 * kU * std::abs(x));
        }
      }
      if (L.key_bits == 8) {
        for (int i = 0; i < d; ++i) {
          ++st->codes;
          // Near: the exact value is within the margin of the midpoint to a neighbour of its E4M3 value.
          const int mag = ref[size_t(i)] & 0x7f;
          const double x = std::abs(kr[size_t(i)]), at = f8e4m3_to_f32(uint8_t(mag));
          bool near = false;
          if (mag < 0x7e) near |= std::abs(0.5 * (at + f8e4m3_to_f32(uint8_t(mag + 1))) - x) <= margin[size_t(i)];
          if (mag > 0) near |= std::abs(0.5 * (at + f8e4m3_to_f32(uint8_t(mag - 1))) - x) <= margin[size_t(i)];
          st->near_boundary += near;
          if (got[i] == ref[size_t(i)]) continue;
          ++st->mismatches;
          // Neighbouring E4M3 values whose midpoint lies within the margin of the exact coordinate.
          const double a = f8e4m3_to_f32(got[i]), b = f8e4m3_to_f32(ref[size_t(i)]);
          ASSERT_LE(std::abs(int(got[i] & 0x7f) - int(ref[size_t(i)] & 0x7f)), 1) << i;
          ASSERT_LE(std::abs(0.5 * (a + b) - kr[size_t(i)]), margin[size_t(i)]) << i;
        }
      } else {
        ASSERT_EQ(0, std::memcmp(got + L.key_norm_offset, ref.data() + L.key_norm_offset, 2));
        for (int i = 0; i < d; ++i) {
          const double x = norm > 0 ? kr[size_t(i)] * std::sqrt(double(d)) / norm : 0.0;
          bool near = false;  // a zero key is exact (x = 0 on both sides), not near
          for (int b = 0; b < n_bounds; ++b) near |= norm > 0 && std::abs(x - sh.boundaries[size_t(b)]) <= margin[size_t(i)];
          st->near_boundary += near;
          ++st->codes;
          const unsigned cg = read_code(got, i, L.key_bits), cr = read_code(ref.data(), i, L.key_bits);
          if (cg == cr) continue;
          ++st->mismatches;
          ASSERT_EQ(std::abs(int(cg) - int(cr)), 1) << i;
          ASSERT_LE(std::abs(x - sh.boundaries[std::min(cg, cr)]), margin[size_t(i)]) << i;
        }
        // Bits past the last code are zero.
        if (d * L.key_bits % 8) {
          ASSERT_EQ(got[L.key_code_bytes - 1] >> (d * L.key_bits % 8), 0);
        }
      }
    }
  // The padding token wrote nothing: every byte outside the written slots is untouched.
  std::vector<bool> written(size_t(num_blocks * bs * nkv));
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < nkv; ++h) written[size_t((slots[size_t(t)] / bs * nkv + h) * bs + slots[size_t(t)] % bs)] = true;
  for (size_t s = 0; s < written.size(); ++s)
    if (!written[s]) {
      ASSERT_EQ(0, std::memcmp(cache.data() + s * size_t(L.slot_bytes), untouched.data(), size_t(L.slot_bytes))) << s;
    }
}

// The margin above is a worst case; a coordinate lands within it of one of the 2^b - 1 boundaries with
// probability ~ 2 margin sum_b f(b) ~ 1e-5 (margin ~ 4e-6 at d = 128, densities <= 0.4), so 1e-3 of the
// codes is a generous ceiling that a systematic error (a wrong boundary, a mis-scaled coordinate) exceeds.
TEST(TurboQuantCpuEncode, MatchesTheFloat64Model) {
  uint64_t seed = 10;
  for (const auto& preset : kTurboQuantPresets) {
    EncodeStats st;
    for (int d : {64, 80, 96, 128, 36}) check_encode(preset, d, 300, seed++, &st);
    std::printf("[ turboquant ] %s: %lld key codes, %lld differ from the model, %lld within the margin of a boundary\n",
                std::string(preset.name).c_str(), (long long)st.codes, (long long)st.mismatches, (long long)st.near_boundary);
    EXPECT_LE(st.mismatches, st.near_boundary);
    EXPECT_LE(double(st.near_boundary), 1e-3 * double(st.codes));
    EXPECT_LE(double(st.mismatches), 1e-3 * double(st.codes));
  }
}

// The keys the fast path writes, decoded by the model, against the codebook's distortion (as the format test
// does for the model's own encode): isotropic Gaussian keys make x exactly of the codebook's density, so the
// mean per-coordinate error of the codes lies within 5 sample standard deviations / sqrt(N) of
// turboquant_codebook_mse.
TEST(TurboQuantCpuEncode, ReconstructionErrorMatchesTheCodebook) {
  for (const auto& preset : kTurboQuantPresets) {
    if (preset.key_bits == 8) continue;
    for (int d : {64, 128}) {
      SCOPED_TRACE(std::string(preset.name) + " d " + std::to_string(d));
      const int nkv = 1, bs = 16, N = 4096, layer = 1;
      const TurboQuantCpuShape sh = turboquant_cpu_shape(std::string(preset.name), d, nkv, nkv, bs, 0.0f);
      TurboQuantCpuWorkspace ws(sh, 1);
      std::mt19937_64 rng(uint64_t(d) * 31 + uint64_t(preset.key_bits));
      std::normal_distribution<float> g;
      std::vector<float> k(size_t(N) * d), v(size_t(N) * d);
      for (auto& x : k) x = g(rng);
      for (auto& x : v) x = g(rng);
      std::vector<int64_t> slots(static_cast<size_t>(N));
      for (int t = 0; t < N; ++t) slots[size_t(t)] = t;
      std::vector<uint8_t> cache(size_t(N) * sh.layout.slot_bytes);
      TurboQuantCpuWriteKvParams p;
      p.key = k.data();
      p.value = v.data();
      p.slot_mapping = slots.data();
      p.num_tokens = N;
      p.kv_cache = cache.data();
      p.num_blocks = N / bs;
      p.layer = layer;
      turboquant_cpu_write_kv(sh, p, ws);
      double se = 0, se2 = 0;
      std::vector<double> kr(static_cast<size_t>(d));
      for (int t = 0; t < N; ++t) {
        double sq = 0;
        for (int i = 0; i < d; ++i) {
          kr[size_t(i)] = k[size_t(t * d + i)];
          sq += kr[size_t(i)] * kr[size_t(i)];
        }
        turboquant_rotate_reference(layer, kr.data(), d);
        const uint8_t* slot = cache.data() + size_t(t) * sh.layout.slot_bytes;
        double e = 0;
        for (int i = 0; i < d; ++i) {
          const double x = kr[size_t(i)] * std::sqrt(double(d) / sq) - sh.codebook[read_code(slot, i, preset.key_bits)];
          e += x * x;
        }
        se += e / d;
        se2 += (e / d) * (e / d);
      }
      const double mean = se / N, sd = std::sqrt(std::max(0.0, se2 / N - mean * mean));
      EXPECT_NEAR(mean, turboquant_codebook_mse(preset.key_bits, d), 5 * sd / std::sqrt(double(N)));
    }
  }
}

TEST(TurboQuantCpuEncode, RejectsSlotsOutsideTheCache) {
  const TurboQuantCpuShape sh = turboquant_cpu_shape("turboquant_4bit_nc", 64, 1, 1, 16, 0.0f);
  TurboQuantCpuWorkspace ws(sh, 1);
  std::vector<float> k(64, 0.5f);
  std::vector<uint8_t> cache(size_t(2 * 16) * sh.layout.slot_bytes);
  int64_t slot = 32;
  TurboQuantCpuWriteKvParams p;
  p.key = p.value = k.data();
  p.slot_mapping = &slot;
  p.num_tokens = 1;
  p.kv_cache = cache.data();
  p.num_blocks = 2;
  EXPECT_THROW(turboquant_cpu_write_kv(sh, p, ws), Error);
  EXPECT_THROW(turboquant_cpu_shape("turboquant_k2v2", 64, 1, 1, 16, 0.0f), Error);
}

}  // namespace
}  // namespace pagoda
