// Host-side parts of the CUDA ops library; no device needed.
#include <gtest/gtest.h>

#include <cmath>
#include <numbers>
#include <string>

#include "pagoda/ops/cuda/device_buffer.h"
#include "pagoda/ops/cuda/philox.h"
#include "pagoda/ops/cuda/rope_kv.h"
#include "pagoda/ops/rope.h"

namespace pagoda {
namespace {

TEST(CudaCheck, ThrowsWithFileLineAndCudaMessage) {
  try {
    PAGODA_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL() << "no throw";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cudaErrorInvalidValue"), std::string::npos) << msg;
    EXPECT_NE(msg.find(cudaGetErrorString(cudaErrorInvalidValue)), std::string::npos) << msg;
    EXPECT_NE(msg.find("host_test.cc:"), std::string::npos) << msg;
    EXPECT_EQ(e.kind(), ErrorKind::kRuntime);
  }
  EXPECT_NO_THROW(PAGODA_CUDA_CHECK(cudaSuccess));
}

TEST(DeviceBufferHost, EmptyBufferNeedsNoDevice) {
  DeviceBuffer b;
  EXPECT_EQ(b.data(), nullptr);
  DeviceBuffer z(0);
  EXPECT_EQ(z.bytes(), 0u);
  DeviceBuffer m = std::move(z);
  EXPECT_EQ(m.data(), nullptr);
}

// Random123's published known-answer vectors (tests/kat_vectors of the reference distribution).
TEST(Philox, Random123KnownAnswers) {
  auto check = [](Philox4 c, uint32_t k0, uint32_t k1, Philox4 want) {
    const Philox4 got = philox4x32_10(c, k0, k1);
    for (int i = 0; i < 4; ++i) EXPECT_EQ(got.v[i], want.v[i]) << "word " << i;
  };
  check({{0, 0, 0, 0}}, 0, 0, {{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}});
  check({{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu,
        {{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}});
  check({{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u,
        {{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}});
}

TEST(Philox, UniformIsStrictlyInsideTheUnitInterval) {
  EXPECT_GT(uniform_from_word(0), 0.f);
  EXPECT_LT(uniform_from_word(0xffffffffu), 1.f);
  EXPECT_EQ(uniform_from_word(0xffffffffu), 1.f - 1.f / 16777216.f);
  EXPECT_EQ(uniform_from_word(0), 1.f / 16777216.f);
  EXPECT_EQ(uniform_from_word(0x80000000u), 0.5f + 1.f / 16777216.f);
  // -log(-log(u)) is finite at both ends, so a Gumbel score is never infinite.
  EXPECT_TRUE(std::isfinite(std::log(-std::log(uniform_from_word(0xffffffffu)))));
  EXPECT_TRUE(std::isfinite(std::log(-std::log(uniform_from_word(0)))));
}

TEST(RopeTable, InvFreqIsThetaPower) {
  const auto inv = rope_inv_freq(128, 1e6);
  ASSERT_EQ(inv.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    const double want = std::pow(1e6, -2.0 * i / 128);
    EXPECT_NEAR(inv[i], want, want * 6e-8) << i;  // one fp32 rounding: relative 2^-24
  }
}

// llama-tiny's rope_scaling (shared/reference/llama-tiny/config.json): theta 500000, factor 8, low 1,
// high 4, original 256, head_dim 32. Each frequency checked against the three-band formula of the README.
TEST(RopeTable, Llama3ScalingBands) {
  const Llama3RopeScaling s{8.0, 1.0, 4.0, 256};
  const auto plain = rope_inv_freq(32, 500000.0);
  const auto scaled = rope_inv_freq(32, 500000.0, &s);
  int low = 0, high = 0, mid = 0;
  for (int i = 0; i < 16; ++i) {
    const double f = plain[i], wavelen = 2 * std::numbers::pi / f;
    double want;
    if (wavelen > 256.0 / 1.0) want = f / 8, ++low;
    else if (wavelen < 256.0 / 4.0) want = f, ++high;
    else {
      const double sm = (256.0 / wavelen - 1.0) / (4.0 - 1.0);
      want = (1 - sm) * f / 8 + sm * f;
      ++mid;
    }
    EXPECT_NEAR(scaled[i], want, want * 6e-8) << i;
  }
  EXPECT_GT(low, 0);
  EXPECT_GT(high, 0);
  EXPECT_GT(mid, 0);  // all three bands are exercised by this configuration
}

// GGUF's rope_freqs divide each frequency; the table agrees with the CPU runner's inv_freq bit for bit.
TEST(RopeTable, FreqFactorsMatchTheCpu) {
  const std::vector<float> ff = {1.0f, 1.0f, 1.7f, 2.5f, 4.0f, 8.0f, 8.0f, 8.0f};
  const auto inv = rope_inv_freq(16, 500000.0, nullptr, ff.data());
  const auto cpu = rope_inv_freq(RopeFrequencyParams{.rotary_dim = 16, .theta = 500000.0, .freq_factors = ff.data()});
  ASSERT_EQ(inv.size(), 8u);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(inv[i], cpu[size_t(i)]) << i;
    EXPECT_EQ(inv[i], float(std::pow(500000.0, -2.0 * i / 16) / double(ff[size_t(i)]))) << i;
  }
}

TEST(RopeTable, CosSinOfPositionTimesFrequency) {
  const auto t = build_rope_table(4099, 64, 10000.0);
  const auto inv = rope_inv_freq(64, 10000.0);
  ASSERT_EQ(t.cos.size(), size_t(4099) * 32);
  for (int p : {0, 1, 17, 4098}) {
    for (int i = 0; i < 32; ++i) {
      const double a = double(p) * inv[i];
      EXPECT_NEAR(t.cos[size_t(p) * 32 + i], std::cos(a), 6e-8) << p << " " << i;
      EXPECT_NEAR(t.sin[size_t(p) * 32 + i], std::sin(a), 6e-8) << p << " " << i;
    }
  }
}

}  // namespace
}  // namespace pagoda
