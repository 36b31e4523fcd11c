// The device quantizer's code (ops/cuda/quant_encode.cuh, host and device code) run on the host: the same
// bytes as ops/quant's quantize_row for every format, on random rows of three magnitudes and rows with
// zeros, constant runs and one-sided values (the branches of each scale search).
#include <gtest/gtest.h>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/quant_encode.cuh"
#include "pagoda/ops/quant/quant.h"
#include "quant_reference.h"

namespace pagoda {
namespace {

template <QuantType Q>
void check_rows(test::Rng& rng) {
  const QuantTraits tr = quant_traits(Q);
  constexpr int kBlocks = 48;
  const int64_t n = int64_t(kBlocks) * tr.block_elems;
  for (int variant = 0; variant < 6; ++variant) {
    std::vector<float> x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) {
      switch (variant) {
        case 0: x[i] = rng.normal(0.02f); break;
        case 1: x[i] = rng.normal(1.0f); break;
        case 2: x[i] = rng.normal(30.0f); break;
        case 3: x[i] = (i / 7) % 3 == 0 ? 0.0f : rng.normal(0.5f); break;   // zero runs
        case 4: x[i] = std::fabs(rng.normal(0.1f)); break;                   // all positive
        default: x[i] = (i / 32) % 2 ? -0.25f : rng.uniform(-1.f, 0.f); break;  // constant / negative blocks
      }
    }
    std::vector<uint8_t> want(quant_row_bytes(Q, n)), got(want.size());
    quantize_row(Q, x.data(), want.data(), n);
    for (int b = 0; b < kBlocks; ++b)
      quant_encode::quantize_block<Q>(x.data() + int64_t(b) * tr.block_elems, got.data() + size_t(b) * tr.block_bytes);
    for (int b = 0; b < kBlocks; ++b)
      if (std::memcmp(want.data() + size_t(b) * tr.block_bytes, got.data() + size_t(b) * tr.block_bytes,
                      size_t(tr.block_bytes)) != 0) {
        ADD_FAILURE() << tr.name << " variant " << variant << ": block " << b << " differs from quantize_row's";
        break;
      }
  }
}

TEST(QuantEncode, EveryFormatMakesQuantizeRowsBytes) {
  SCOPED_TRACE(test::seed_note());
  test::Rng rng(5);
  check_rows<QuantType::kQ4_0>(rng);
  check_rows<QuantType::kQ4_1>(rng);
  check_rows<QuantType::kQ5_0>(rng);
  check_rows<QuantType::kQ5_1>(rng);
  check_rows<QuantType::kQ8_0>(rng);
  check_rows<QuantType::kQ4_K>(rng);
  check_rows<QuantType::kQ5_K>(rng);
  check_rows<QuantType::kQ6_K>(rng);
}

}  // namespace
}  // namespace pagoda
