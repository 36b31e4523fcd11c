// The TurboQuant format (core/turboquant.h): the codebook generator against what a Lloyd-Max quantizer must
// satisfy (its two conditions, the Gaussian limit, the uniform case d = 3), the format's roundings, the
// rotation against the Hadamard matrix written out, and the float64 model's slots field by field.
#include "pagoda/core/turboquant.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include <gtest/gtest.h>

#include "pagoda/core/dtype.h"

namespace pagoda {
namespace {

constexpr double kU = 0x1p-24;  // float32 unit roundoff

// Published Lloyd-Max centroids of the standard normal (positive half; Max 1960), to 4 decimals.
constexpr double kGauss3[] = {0.2451, 0.7560, 1.3440, 2.1520};
constexpr double kGauss4[] = {0.1284, 0.3881, 0.6568, 0.9424, 1.2562, 1.6181, 2.0690, 2.7326};

// The Gaussian Lloyd-Max quantizer computed independently of the generator: Lloyd's iteration with the cell
// moments in closed form (mass Phi(b) - Phi(a), first moment phi(a) - phi(b)). Positive centroids and the
// distortion 1 - sum c_k^2 P_k (the centroid condition makes the cross term vanish).
struct GaussLloydMax {
  std::vector<double> c;
  double mse = 0;
  explicit GaussLloydMax(int bits) {
    const int h = 1 << (bits - 1);
    auto phi = [](double x) { return std::isinf(x) ? 0.0 : std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI); };
    auto Phi = [](double x) { return 0.5 * std::erfc(-x / std::sqrt(2.0)); };
    for (int k = 0; k < h; ++k) c.push_back((k + 0.5) / h * 3);
    std::vector<double> b(static_cast<size_t>(h + 1));
    for (int it = 0; it < 100000; ++it) {
      b[0] = 0;
      for (int k = 1; k < h; ++k) b[size_t(k)] = 0.5 * (c[size_t(k - 1)] + c[size_t(k)]);
      b[size_t(h)] = INFINITY;
      double moved = 0;
      for (int k = 0; k < h; ++k) {
        const double next = (phi(b[size_t(k)]) - phi(b[size_t(k + 1)])) / (Phi(b[size_t(k + 1)]) - Phi(b[size_t(k)]));
        moved = std::max(moved, std::abs(next - c[size_t(k)]));
        c[size_t(k)] = next;
      }
      if (moved < 1e-14) break;
    }
    mse = 1;
    for (int k = 0; k < h; ++k) mse -= 2 * c[size_t(k)] * c[size_t(k)] * (Phi(b[size_t(k + 1)]) - Phi(b[size_t(k)]));
  }
};

TEST(TurboQuantCodebook, SymmetricAscending) {
  for (int bits : {3, 4})
    for (int d : {1, 2, 3, 4, 8, 64, 80, 96, 128, 256, 4096}) {
      const auto c = turboquant_codebook(bits, d);
      ASSERT_EQ(c.size(), size_t(1) << bits);
      for (size_t i = 0; i < c.size(); ++i) {
        EXPECT_EQ(c[i], -c[c.size() - 1 - i]) << "bits " << bits << " d " << d;
        if (i) {
          EXPECT_LT(c[i - 1], c[i]) << "bits " << bits << " d " << d;
        }
      }
      const auto b = turboquant_boundaries(c);
      ASSERT_EQ(b.size(), c.size() - 1);
      EXPECT_EQ(b[b.size() / 2], 0.0f);
      for (size_t i = 0; i < b.size(); ++i) EXPECT_TRUE(c[i] < b[i] && b[i] < c[i + 1]);
    }
}

// d <= 2 is the Gaussian itself: the generator's centroids are the closed-form iteration's rounded to float,
// and those are Max's published values to their 4 decimals (1.3439 where Max prints 1.344).
// As d grows the coordinate density tends to N(0, 1): log f(x) = -x^2/2 + (3 x^2/2 - x^4/4) / d + O(1/d^2), a
// relative change of ~x^4 / (4d) that moves the outer centroid (x ~ 3) by ~1e-3 at d = 4096 and 16x less at
// d = 65536; the inner ones move far less.
TEST(TurboQuantCodebook, GaussianLimit) {
  for (int bits : {3, 4}) {
    SCOPED_TRACE("bits " + std::to_string(bits));
    const GaussLloydMax g(bits);
    const int h = 1 << (bits - 1);
    const double* published = bits == 3 ? kGauss3 : kGauss4;
    const auto c2 = turboquant_codebook(bits, 2), c1 = turboquant_codebook(bits, 1);
    const auto c4096 = turboquant_codebook(bits, 4096), c65536 = turboquant_codebook(bits, 65536);
    for (int k = 0; k < h; ++k) {
      const size_t i = size_t(h + k);
      EXPECT_NEAR(c2[i], g.c[size_t(k)], 2 * kU * g.c[size_t(k)] + 1e-12) << k;  // float rounding
      EXPECT_EQ(c1[i], c2[i]);
      EXPECT_NEAR(g.c[size_t(k)], published[k], 1.01e-4) << k;
      EXPECT_NEAR(c4096[i], g.c[size_t(k)], 2e-3) << k;
      EXPECT_NEAR(c65536[i], g.c[size_t(k)], 2e-3 / 16) << k;
      EXPECT_LT(std::abs(c65536[i] - g.c[size_t(k)]), std::abs(c4096[i] - g.c[size_t(k)]) + 2 * kU * 3) << k;
    }
    // The distortion of the float codebook: second order in the centroids' rounding, so to ~1e-12.
    EXPECT_NEAR(turboquant_codebook_mse(bits, 2), g.mse, 1e-10);
  }
}

// d = 3: x is uniform on [-sqrt 3, sqrt 3] (Archimedes), whose Lloyd-Max quantizer is the uniform one.
TEST(TurboQuantCodebook, UniformAtThreeDimensions) {
  for (int bits : {3, 4}) {
    const int n = 1 << bits;
    const auto c = turboquant_codebook(bits, 3);
    for (int i = 0; i < n; ++i) EXPECT_NEAR(c[size_t(i)], std::sqrt(3.0) * (2 * i + 1 - n) / n, 1e-6) << i;
  }
}

// The Lloyd conditions, checked independently of the generator's quadrature: each centroid is the conditional
// mean of its cell (cells split at the float boundaries). Numerator in closed form,
//   integral_a^b x (1 - x^2/d)^((d-3)/2) dx = d/(d-1) [(1 - a^2/d)^((d-1)/2) - (1 - b^2/d)^((d-1)/2)],
// denominator by composite Simpson (2^16 intervals per cell: relative error < 1e-10 for d >= 8); for the
// Gaussian (d <= 2) both in closed form. Tolerance: the centroids are rounded to float (|dc| <= u |c|), the
// boundaries too (<= u |b| each), and a conditional mean moves by at most ~|db| (its derivative in a boundary
// is f(b) |b - mean| / mass <= 1 for these cells), so 4 u max|c| plus the quadrature's 1e-9.
TEST(TurboQuantCodebook, CentroidsAreConditionalMeans) {
  for (int bits : {3, 4})
    for (int d : {2, 8, 64, 80, 128, 4096}) {
      const auto c = turboquant_codebook(bits, d);
      const auto b = turboquant_boundaries(c);
      const double R = d <= 2 ? INFINITY : std::sqrt(double(d));
      const double tol = 4 * kU * c.back() + 1e-9;
      for (size_t k = c.size() / 2; k < c.size(); ++k) {
        const double lo = k == c.size() / 2 ? 0.0 : b[k - 1], hi = k + 1 == c.size() ? R : b[k];
        double mean;
        if (d <= 2) {
          auto phi = [](double x) { return std::isinf(x) ? 0.0 : std::exp(-0.5 * x * x); };
          const double mass = 0.5 * std::sqrt(2 * M_PI) * (std::erfc(lo / std::sqrt(2.0)) - std::erfc(hi / std::sqrt(2.0)));
          mean = (phi(lo) - phi(hi)) / mass;
        } else {
          auto f = [d](double x) { const double t = 1 - x * x / d; return t <= 0 ? 0.0 : std::pow(t, 0.5 * (d - 3)); };
          auto g = [d](double x) { const double t = 1 - x * x / d; return t <= 0 ? 0.0 : std::pow(t, 0.5 * (d - 1)); };
          const double top = std::min(hi, 40.0);  // f(40) / f(0) < 1e-300 at d = 4096
          const int n = 1 << 16;
          const double h = (top - lo) / n;
          double mass = f(lo) + f(top);
          for (int i = 1; i < n; ++i) mass += (i & 1 ? 4 : 2) * f(lo + i * h);
          mass *= h / 3;
          mean = double(d) / (d - 1) * (g(lo) - g(hi)) / mass;
        }
        EXPECT_NEAR(c[k], mean, tol) << "bits " << bits << " d " << d << " centroid " << k;
      }
    }
}

TEST(TurboQuantFormat, Roundings) {
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<float> u(-70000.0f, 70000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float x = u(rng) * std::ldexp(1.0f, -int(rng() % 30));
    const uint16_t want = std::abs(x) >= 65520.0f ? uint16_t(x < 0 ? 0xfbff : 0x7bff) : f32_to_f16(x);
    ASSERT_EQ(turboquant_f16_from_double(x), want) << x;
    ASSERT_EQ(turboquant_e4m3_from_double(x / 100), f32_to_f8e4m3(x / 100)) << x / 100;
  }
  // Rounded once from the double: 1 + 2^-11 is a tie (even: 1), a hair above it is not (a float conversion
  // first would make it the tie).
  EXPECT_EQ(turboquant_f16_from_double(1 + 0x1p-11), 0x3c00);
  EXPECT_EQ(turboquant_f16_from_double(1 + 0x1p-11 + 0x1p-40), 0x3c01);
  EXPECT_EQ(turboquant_e4m3_from_double(1 + 0x1p-4 + 0x1p-40), f32_to_f8e4m3(1.125f));
  EXPECT_EQ(turboquant_e4m3_from_double(1 + 0x1p-4), f32_to_f8e4m3(1.0f));
  EXPECT_EQ(turboquant_f16_from_double(1e9), 0x7bff);  // saturated, not Inf
  EXPECT_EQ(turboquant_e4m3_from_double(-1e9), f32_to_f8e4m3(-448.0f));
  EXPECT_EQ(f16_to_f32(turboquant_f16_from_double(0x1p-25 + 0x1p-40)), 0x1p-24f);  // subnormal, rounded up
}

// The rotation is H (s . x) with H the chunked Sylvester Hadamard matrix, entries (-1)^popcount(i & j) / sqrt(n).
TEST(TurboQuantFormat, RotationIsSignedHadamard) {
  std::mt19937_64 rng(11);
  std::normal_distribution<double> g;
  for (int d : {64, 80, 96, 128, 7}) {
    for (int layer : {0, 5}) {
      std::vector<double> x(static_cast<size_t>(d)), r;
      for (auto& e : x) e = g(rng);
      r = x;
      turboquant_rotate_reference(layer, r.data(), d);
      for (int c = 0; c < turboquant_num_chunks(d); ++c) {
        int b, n;
        turboquant_chunk(d, c, &b, &n);
        for (int i = 0; i < n; ++i) {
          double want = 0;
          for (int j = 0; j < n; ++j) {
            const double s = turboquant_sign_negative(layer, b + j) ? -1 : 1;
            want += (std::popcount(unsigned(i & j)) & 1 ? -1 : 1) * s * x[size_t(b + j)];
          }
          EXPECT_NEAR(r[size_t(b + i)], want / std::sqrt(double(n)), 1e-12);
        }
      }
      turboquant_unrotate_reference(layer, r.data(), d);
      for (int i = 0; i < d; ++i) EXPECT_NEAR(r[size_t(i)], x[size_t(i)], 1e-12);
    }
  }
  // Different layers rotate differently.
  EXPECT_NE(turboquant_sign_word(0, 0), turboquant_sign_word(1, 0));
}

unsigned read_code(const uint8_t* field, int i, int bits) {  // bit n of the stream is bit n % 8 of byte n / 8
  unsigned got = 0;
  for (int bit = 0; bit < bits; ++bit) got |= unsigned((field[(i * bits + bit) / 8] >> ((i * bits + bit) % 8)) & 1) << bit;
  return got;
}

// One slot of every preset, field by field: a key whose rotated coordinates spread over every cell (or are
// exact in E4M3), values uniform in [-2, 5].
TEST(TurboQuantFormat, ReferenceSlotFields) {
  std::mt19937_64 rng(3);
  for (const auto& p : kTurboQuantPresets) {
    for (int d : {64, 80, 36}) {
      SCOPED_TRACE(std::string(p.name) + " d " + std::to_string(d));
      const TurboQuantLayout L = turboquant_layout(p, d);
      const int layer = 2;
      const int n = p.key_bits == 8 ? 0 : 1 << p.key_bits;
      const auto cb = n ? turboquant_codebook(p.key_bits, d) : std::vector<float>{};
      const auto bd = n ? turboquant_boundaries(cb) : std::vector<float>{};
      // 3/4-bit keys: x = k~ sqrt(d) / ||k|| cycles through the centroids (every code) while sum x^2 < d, the
      // remaining coordinates share what is left so that ||x||^2 = d; k~ = 0.37 x.
      std::vector<double> kr(static_cast<size_t>(d)), v(static_cast<size_t>(d));
      if (n) {
        double sq = 0;
        int m = 0;
        while (m < d - 1 && sq + double(cb[size_t(m % n)]) * cb[size_t(m % n)] < d - 1e-3) {
          kr[size_t(m)] = cb[size_t(m % n)];
          sq += kr[size_t(m)] * kr[size_t(m)];
          ++m;
        }
        ASSERT_GE(m, n);
        for (int i = m; i < d; ++i) kr[size_t(i)] = std::sqrt((d - sq) / (d - m)) * (i & 1 ? -1 : 1);
        for (auto& x : kr) x *= 0.37;
      } else {
        for (int i = 0; i < d; ++i) kr[size_t(i)] = std::ldexp(1.0 + (i % 8) / 8.0, i % 9 - 4) * (i & 1 ? -1 : 1);
      }
      std::vector<double> k = kr;
      turboquant_unrotate_reference(layer, k.data(), d);
      for (auto& x : v) x = std::uniform_real_distribution<double>(-2, 5)(rng);
      std::vector<uint8_t> slot(static_cast<size_t>(L.slot_bytes), 0xAB);
      turboquant_encode_reference(L, cb, layer, k.data(), v.data(), slot.data());
      std::vector<double> kd(static_cast<size_t>(d)), krd(static_cast<size_t>(d)), vd(static_cast<size_t>(d));
      turboquant_decode_reference(L, cb, layer, slot.data(), krd.data(), kd.data(), vd.data());

      if (n) {
        double sq = 0;
        for (double x : kr) sq += x * x;
        const double norm = std::sqrt(sq);
        uint16_t nh;
        std::memcpy(&nh, slot.data() + L.key_norm_offset, 2);
        EXPECT_EQ(nh, turboquant_f16_from_double(norm));
        // Codes: the number of boundaries strictly below x_i = kr_i sqrt(d) / ||k||.
        std::vector<int> seen(static_cast<size_t>(n));
        double cs = 0;
        for (int i = 0; i < d; ++i) {
          const double x = kr[size_t(i)] * std::sqrt(double(d)) / norm;
          unsigned want = 0;
          for (float b : bd) want += b < x;
          ASSERT_EQ(read_code(slot.data(), i, p.key_bits), want) << i;
          seen[want] = 1;
          cs += double(cb[want]) * cb[want];
        }
        EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), n);  // every cell used: the packing is exercised
        // Bits past the last code are zero.
        if (d * p.key_bits % 8) {
          EXPECT_EQ(slot[size_t(L.key_code_bytes - 1)] >> (d * p.key_bits % 8), 0);
        }
        // Decoded: norm * c / ||c|| (norm correction) or norm * c / sqrt(d).
        const double f = f16_to_f32(nh) / (p.norm_correction ? std::sqrt(cs) : std::sqrt(double(d)));
        for (int i = 0; i < d; ++i)
          EXPECT_DOUBLE_EQ(krd[size_t(i)], f * cb[read_code(slot.data(), i, p.key_bits)]) << i;
      } else {
        for (int i = 0; i < d; ++i) ASSERT_EQ(f8e4m3_to_f32(slot[size_t(i)]), float(kr[size_t(i)])) << i;
        for (int i = 0; i < d; ++i) EXPECT_EQ(krd[size_t(i)], kr[size_t(i)]) << i;
      }
      // Values: zero = fp16(min), scale = fp16((max - zero) / (2^b - 1)), codes round to nearest.
      const double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
      uint16_t sh, zh;
      std::memcpy(&sh, slot.data() + L.value_scale_offset, 2);
      std::memcpy(&zh, slot.data() + L.value_zero_offset, 2);
      EXPECT_EQ(zh, turboquant_f16_from_double(lo));
      const double zero = f16_to_f32(zh);
      const int qmax = (1 << p.value_bits) - 1;
      EXPECT_EQ(sh, turboquant_f16_from_double((hi - zero) / qmax));
      const double scale = f16_to_f32(sh);
      for (int i = 0; i < d; ++i) {
        const unsigned code = read_code(slot.data() + L.value_offset, i, p.value_bits);
        EXPECT_EQ(double(code), std::clamp(std::nearbyint((v[size_t(i)] - zero) / scale), 0.0, double(qmax))) << i;
        EXPECT_EQ(vd[size_t(i)], zero + scale * code) << i;
      }
      if (d * p.value_bits % 8) {
        EXPECT_EQ(slot[size_t(L.value_offset + L.value_code_bytes - 1)] >> (d * p.value_bits % 8), 0);
      }
      if (L.slot_bytes > L.key_bytes + L.value_bytes) {
        EXPECT_EQ(slot.back(), 0);  // padding
      }
      // The model-coordinate key is the un-rotation of the rotated one.
      std::vector<double> back = krd;
      turboquant_unrotate_reference(layer, back.data(), d);
      for (int i = 0; i < d; ++i) EXPECT_NEAR(kd[size_t(i)], back[size_t(i)], 1e-12);
    }
  }
}

// Reconstruction error on isotropic Gaussian keys. Their rotation is isotropic too, so x = k~ sqrt(d) / ||k||
// has exactly the codebook's density and the per-coordinate error e = ||x - c||^2 / d of the codes (before
// the norm's fp16 rounding) has mean turboquant_codebook_mse. The sample mean of N vectors lies within
// 5 sample standard deviations / sqrt(N) of it (a 5-sigma two-sided test: fails by chance with p < 1e-6).
// With norm correction the decoded key is norm * c / ||c||; per vector its error is (e - (1 - a)^2) / a with
// a = ||c|| / sqrt(d) (expand ||x - c / a||^2 with ||x||^2 = d), so its mean is at most mean(e) / min(a).
TEST(TurboQuantFormat, ReconstructionErrorMatchesTheCodebook) {
  std::mt19937_64 rng(5);
  std::normal_distribution<double> g;
  for (int bits : {3, 4})
    for (int d : {64, 80, 128}) {
      SCOPED_TRACE("bits " + std::to_string(bits) + " d " + std::to_string(d));
      const auto cb = turboquant_codebook(bits, d);
      const TurboQuantLayout L = turboquant_layout(bits, 4, true, d), Lp = turboquant_layout(bits, 4, false, d);
      const double mse = turboquant_codebook_mse(bits, d);
      const int N = 4000;
      double se = 0, se2 = 0, snc = 0, min_a = 1e9, splain = 0;
      std::vector<double> k(static_cast<size_t>(d)), v(static_cast<size_t>(d), 1.0), kr(static_cast<size_t>(d)),
          dec(static_cast<size_t>(d));
      std::vector<uint8_t> slot(static_cast<size_t>(L.slot_bytes)), slot_p(static_cast<size_t>(Lp.slot_bytes));
      for (int t = 0; t < N; ++t) {
        double sq = 0;
        for (auto& x : k) {
          x = g(rng);
          sq += x * x;
        }
        const double norm = std::sqrt(sq);
        kr = k;
        turboquant_rotate_reference(1, kr.data(), d);
        turboquant_encode_reference(L, cb, 1, k.data(), v.data(), slot.data());
        double e = 0, cs = 0;
        for (int i = 0; i < d; ++i) {
          const double c = cb[read_code(slot.data(), i, bits)];
          const double x = kr[size_t(i)] * std::sqrt(double(d)) / norm;
          e += (x - c) * (x - c);
          cs += c * c;
        }
        e /= d;
        se += e;
        se2 += e * e;
        min_a = std::min(min_a, std::sqrt(cs / d));
        // The decoded keys (fp16 norm included) of both flavours, relative squared error per coordinate.
        turboquant_decode_reference(L, cb, 1, slot.data(), dec.data(), nullptr, nullptr);
        double r = 0;
        for (int i = 0; i < d; ++i) r += (dec[size_t(i)] - kr[size_t(i)]) * (dec[size_t(i)] - kr[size_t(i)]);
        snc += r / sq;
        turboquant_encode_reference(Lp, cb, 1, k.data(), v.data(), slot_p.data());
        turboquant_decode_reference(Lp, cb, 1, slot_p.data(), dec.data(), nullptr, nullptr);
        r = 0;
        for (int i = 0; i < d; ++i) r += (dec[size_t(i)] - kr[size_t(i)]) * (dec[size_t(i)] - kr[size_t(i)]);
        splain += r / sq;
      }
      const double mean = se / N, sd = std::sqrt(std::max(0.0, se2 / N - mean * mean));
      const double margin = 5 * sd / std::sqrt(double(N));
      EXPECT_NEAR(mean, mse, margin);
      // The decoded keys' ||k~^ - k~||^2 / ||k||^2 is e (plain) and the norm-corrected error, up to the fp16
      // norm, which scales the decoded vector by 1 + delta, |delta| <= 2^-11: at most delta^2 + 2 delta sqrt(e).
      const double fp16 = 0x1p-22 + 2 * 0x1p-11 * std::sqrt(mse + margin);
      EXPECT_LE(splain / N, mse + margin + fp16);
      EXPECT_LE(snc / N, (mse + margin) / min_a + fp16);
      std::printf("[ turboquant ] bits %d d %d: mse %.6f, sample %.6f +- %.6f, decoded plain %.6f, nc %.6f\n", bits, d,
                  mse, mean, margin, splain / N, snc / N);
    }
}

}  // namespace
}  // namespace pagoda
