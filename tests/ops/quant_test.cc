// The block formats: dequantize_row against the float64 transcription of quant_test_util.h, quantize_row's
// round trip, and the embedding lookup of quantized rows.
#include "pagoda/ops/quant/quant.h"

#include <gtest/gtest.h>

#include <bit>

#include "pagoda/core/error.h"
#include "pagoda/ops/embedding.h"
#include "quant_test_util.h"

namespace pagoda::test {
namespace {

// Every element's float32 is the float64 value rounded once: ggml's float32 operations are exact up to
// their last one (the products have <= 25 significant bits, so d * q is exact, and (d * sc) * q is rounded
// once), and the float64 sum of the two exact parts is exact (lowest bit >= 2^-24, magnitudes < 2^13).
TEST(QuantFormats, DequantizeMatchesFloat64TranscriptionBitForBit) {
  for (QuantType t : kAllQuantTypes) {
    const QuantTraits tr = quant_traits(t);
    const int64_t nb = 300;
    const auto blocks = random_blocks(t, nb, 11 + uint64_t(t));
    std::vector<float> out(static_cast<size_t>(nb * tr.block_elems), NAN);
    dequantize_row(t, blocks.data(), out.data(), nb * tr.block_elems);
    std::vector<double> a(256), c(256);
    for (int64_t i = 0; i < nb; ++i) {
      ref_decode_block(t, blocks.data() + i * tr.block_bytes, a.data(), c.data());
      for (int e = 0; e < tr.block_elems; ++e) {
        const float want = float(has_min(t) ? a[size_t(e)] + c[size_t(e)] : a[size_t(e)]);  // keeps -0 = d<0 * 0
        const float got = out[size_t(i * tr.block_elems + e)];
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << tr.name << " block " << i << " element " << e << ": " << got << " vs " << want;
      }
    }
  }
}

// Inputs of several kinds: both signs, one sign only, a constant block, zeros, large and small scales.
std::vector<float> roundtrip_inputs(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t blk = 0; blk < n / 256; ++blk) {
    const int kind = int(blk % 6);
    const float scale = std::ldexp(1.0f, int(rng() % 16) - 10);
    for (int64_t e = 0; e < 256; ++e) {
      float v = normal(rng) * scale;
      if (kind == 1) v = std::fabs(v) + scale;
      if (kind == 2) v = -std::fabs(v);
      if (kind == 3) v = scale;
      if (kind == 4) v = 0;
      x[size_t(blk * 256 + e)] = v;
    }
  }
  return x;
}

// The quantizer picks scales whose grid spans every weight (quant.h): the error is at most half a step, or
// a whole step for Q4_0/Q5_0 (their grid ends one code short on the positive side), where the step is the
// block's d (d * sc for the k-quants) as stored. Float32 evaluation adds a few roundings of the terms
// involved: 4u (|x| + |d q| + |m|).
TEST(QuantFormats, QuantizeRoundTripWithinAStep) {
  const double u = 0x1p-24;
  for (QuantType t : kAllQuantTypes) {
    const QuantTraits tr = quant_traits(t);
    const int64_t n = 256 * 24;
    const auto x = roundtrip_inputs(n, 5);
    std::vector<uint8_t> q(quant_row_bytes(t, n));
    quantize_row(t, x.data(), q.data(), n);
    std::vector<float> back(static_cast<size_t>(n));
    dequantize_row(t, q.data(), back.data(), n);
    const bool full_step = t == QuantType::kQ4_0 || t == QuantType::kQ5_0;
    std::vector<double> a(256), c(256);
    for (int64_t i = 0; i < n / tr.block_elems; ++i) {
      const uint8_t* blk = q.data() + i * tr.block_bytes;
      ref_decode_block(t, blk, a.data(), c.data());
      for (int e = 0; e < tr.block_elems; ++e) {
        const int64_t at = i * tr.block_elems + e;
        // The step of this element: the value one code up minus this one, from the decoded scale.
        double step = 0;
        switch (t) {
          case QuantType::kQ4_0: case QuantType::kQ4_1: case QuantType::kQ5_0: case QuantType::kQ5_1: case QuantType::kQ8_0:
            step = std::fabs(half_at(blk));
            break;
          case QuantType::kQ4_K: case QuantType::kQ5_K: {
            const int s = e / 32;
            const uint8_t* sc = blk + 4;
            const int scale = s < 4 ? sc[s] % 64 : sc[s + 4] % 16 + 16 * (sc[s - 4] / 64);
            step = half_at(blk) * scale;
            break;
          }
          case QuantType::kQ6_K: step = half_at(blk + 208) * std::abs(int8_t(blk[192 + e / 16])); break;
          case QuantType::kNone: break;
        }
        const double err = std::fabs(double(back[size_t(at)]) - double(x[size_t(at)]));
        const double tol = (full_step ? 1.0 : 0.5) * step +
                           4 * u * (std::fabs(x[size_t(at)]) + std::fabs(a[size_t(e)]) + std::fabs(c[size_t(e)]));
        ASSERT_LE(err, tol) << tr.name << " element " << at << " x " << x[size_t(at)] << " back " << back[size_t(at)]
                            << " step " << step;
      }
    }
    // Zero blocks stay exactly zero.
    std::vector<float> zeros(static_cast<size_t>(tr.block_elems), 0.0f), z(static_cast<size_t>(tr.block_elems), 1.0f);
    std::vector<uint8_t> zq(static_cast<size_t>(tr.block_bytes));
    quantize_row(t, zeros.data(), zq.data(), tr.block_elems);
    dequantize_row(t, zq.data(), z.data(), tr.block_elems);
    for (float v : z) ASSERT_EQ(v, 0.0f) << tr.name;
  }
}

TEST(QuantFormats, EmbeddingLooksUpDequantizedRows) {
  for (QuantType t : kAllQuantTypes) {
    const QuantTraits tr = quant_traits(t);
    const int64_t vocab = 7, hidden = 512;
    const auto table = random_blocks(t, vocab * hidden / tr.block_elems, 3);
    const std::vector<int32_t> ids = {4, 0, 6, 4};
    std::vector<float> out(ids.size() * size_t(hidden), NAN), want(static_cast<size_t>(hidden));
    EmbeddingParams p{.table = table.data(), .quant = t, .vocab = vocab, .hidden = hidden, .ids = ids.data(),
                      .num_tokens = int64_t(ids.size()), .out = out.data()};
    ThreadPool pool(2);
    embedding_lookup(p, &pool);
    for (size_t tok = 0; tok < ids.size(); ++tok) {
      dequantize_row(t, table.data() + size_t(ids[tok]) * quant_row_bytes(t, hidden), want.data(), hidden);
      for (int64_t e = 0; e < hidden; ++e)
        ASSERT_EQ(std::bit_cast<uint32_t>(out[tok * size_t(hidden) + size_t(e)]), std::bit_cast<uint32_t>(want[size_t(e)]))
            << tr.name << " token " << tok << " element " << e;
    }
    const int32_t bad = 7;
    p.ids = &bad;
    p.num_tokens = 1;
    EXPECT_THROW(embedding_lookup(p, &pool), Error) << tr.name;
  }
}

}  // namespace
}  // namespace pagoda::test
