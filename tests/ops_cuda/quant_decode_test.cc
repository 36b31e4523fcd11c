// The device dequantizer's per-weight arithmetic (ops/cuda/quant_decode.cuh, host and device code) run on
// the host: every weight equals the float64 transcription of the format rounded once to float32 (the exact
// value rounds to ggml's float32 result: its products are exact but Q6_K's last, and each weight rounds
// once). Compared as values: ggml's 0 * d is -0 for a negative d where the transcription has +0; the GPU
// test compares with ops/quant's dequantize_row bit for bit, zero signs included.
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/quant_decode.cuh"
#include "quant_reference.h"

namespace pagoda {
namespace {

template <QuantType Q>
void check_units(std::mt19937_64& gen) {
  constexpr int kBlocks = 64;
  const int64_t k = int64_t(kBlocks) * quant_traits(Q).block_elems;
  const std::vector<uint8_t> row = test::random_blocks(Q, gen, 1, k);
  std::vector<double> w(static_cast<size_t>(k)), mag(static_cast<size_t>(k));
  test::ref_decode_row(Q, row.data(), k, w.data(), mag.data());
  int failures = 0;
  for (int u = 0; u < k / 32; ++u) {
    float v[32];
    quant_decode::dequant_unit<Q>(row.data(), u, v);
    for (int l = 0; l < 32; ++l) {
      const float want = float(w[size_t(32 * u + l)]);
      if (!(v[l] == want) && ++failures <= 5)
        ADD_FAILURE() << quant_traits(Q).name << " weight " << 32 * u + l << ": " << v[l] << ", want " << want;
    }
  }
}

TEST(QuantDecode, EveryFormatMatchesTheFloat64TranscriptionBitForBit) {
  SCOPED_TRACE(test::seed_note());
  test::Rng rng(11);
  check_units<QuantType::kQ4_0>(rng.gen());
  check_units<QuantType::kQ4_1>(rng.gen());
  check_units<QuantType::kQ5_0>(rng.gen());
  check_units<QuantType::kQ5_1>(rng.gen());
  check_units<QuantType::kQ8_0>(rng.gen());
  check_units<QuantType::kQ4_K>(rng.gen());
  check_units<QuantType::kQ5_K>(rng.gen());
  check_units<QuantType::kQ6_K>(rng.gen());
}

}  // namespace
}  // namespace pagoda
