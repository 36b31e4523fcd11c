// Embedding lookup: bit-exact rows, and out-of-range ids flagged without reading the table.
#include <gtest/gtest.h>

#include <algorithm>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/embedding.h"

namespace pagoda {
namespace {

using test::HostArray;
using test::Rng;

void check(const HostArray& table, const DeviceBuffer& dtable, int vocab, int hidden, std::vector<int32_t> ids,
           bool expect_flag) {
  const DType dt = table.dtype;
  const std::string label = std::string(dtype_name(dt)) + " vocab=" + std::to_string(vocab) +
                            " hidden=" + std::to_string(hidden) + " tokens=" + std::to_string(ids.size());
  SCOPED_TRACE(label);
  const int T = int(ids.size());
  DeviceBuffer dids = test::to_device(ids);
  const size_t row_bytes = size_t(hidden) * dtype_size(dt);
  DeviceBuffer dout = test::poisoned(T * row_bytes + 64);
  DeviceBuffer dflag = test::to_device(std::vector<int>{0});
  EmbeddingParams p;
  p.ids = dids.as<int32_t>(), p.table = dtable.data(), p.out = dout.data();
  p.tokens = T, p.hidden = hidden, p.vocab = vocab, p.dtype = dt, p.error_flag = dflag.as<int>();
  embedding(p, nullptr);
  test::sync_and_check();
  std::vector<uint8_t> out(T * row_bytes + 64);
  dout.download(out.data(), out.size());
  EXPECT_EQ(test::from_device<int>(dflag, 1)[0], expect_flag ? 1 : 0);
  for (int t = 0; t < T; ++t) {
    const uint8_t* got = out.data() + t * row_bytes;
    if (ids[t] >= 0 && ids[t] < vocab) {
      EXPECT_EQ(std::memcmp(got, table.bytes.data() + size_t(ids[t]) * row_bytes, row_bytes), 0) << "token " << t;
    } else {
      EXPECT_TRUE(std::all_of(got, got + row_bytes, [](uint8_t b) { return b == 0; })) << "token " << t << " not zeroed";
    }
  }
  EXPECT_TRUE(std::all_of(out.end() - 64, out.end(), [](uint8_t b) { return b == test::kPoisonByte; }))
      << "wrote past the output";
}

TEST(EmbeddingCuda, CopiesRowsBitForBit) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(1);
  for (DType dt : test::model_dtypes()) {
    // hidden 100 (bf16/fp16: 200-byte rows, not a multiple of 16) takes the byte path.
    for (int hidden : {64, 100, 4096}) {
      const HostArray table = test::random_array(rng, dt, size_t(5000) * hidden);
      const DeviceBuffer dtable = test::to_device(table);
      for (int T : {1, 7, 513}) {
        std::vector<int32_t> ids(T);
        for (auto& id : ids) id = int32_t(rng.integer(0, 4999));
        if (T > 2) ids[1] = ids[0];  // repeated ids
        check(table, dtable, 5000, hidden, ids, false);
      }
    }
  }
}

TEST(EmbeddingCuda, OutOfRangeIdsAreFlaggedAndZeroed) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(2);
  const HostArray a = test::random_array(rng, DType::kBF16, size_t(1000) * 256);
  check(a, test::to_device(a), 1000, 256, {5, -1, 999, 1000, 2147483647, 0}, true);
  const HostArray b = test::random_array(rng, DType::kF32, size_t(1000) * 100);
  check(b, test::to_device(b), 1000, 100, {1000, 3}, true);
}

}  // namespace
}  // namespace pagoda
