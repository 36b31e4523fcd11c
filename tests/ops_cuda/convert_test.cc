// dtype conversion: bit-exact against the host conversions of pagoda/core (round to nearest even).
#include <gtest/gtest.h>

#include <limits>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/convert.h"

namespace pagoda {
namespace {

using test::HostArray;
using test::Rng;

TEST(ConvertCuda, AllPairsBitExact) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(1);
  for (DType from : test::model_dtypes()) {
    for (DType to : test::model_dtypes()) {
      for (int64_t n : {1, 7, 4099, 1 << 20}) {
        for (int lead : {0, 1}) {  // lead 1: misaligned pointers, element path
          SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + std::string(dtype_name(to)) + " n=" + std::to_string(n) +
                       " lead=" + std::to_string(lead));
          std::vector<float> v(size_t(n + lead));
          for (size_t i = 0; i < v.size(); ++i) {
            // Wide magnitudes: fp16 overflow (> 65504 -> inf) and subnormals, bf16 subnormals, exact halves.
            const float mag = std::ldexp(1.0f, int(rng.integer(-30, 20)));
            v[i] = rng.normal(mag);
          }
          if (n > 8) {
            v[lead + 0] = std::numeric_limits<float>::infinity();
            v[lead + 1] = -std::numeric_limits<float>::infinity();
            v[lead + 2] = 65520.f;      // rounds to fp16 inf
            v[lead + 3] = 1.00390625f;  // 1 + 2^-8: a bf16 tie, rounds to even (1.0)
            v[lead + 4] = -0.0f;
          }
          const HostArray in = HostArray::from_floats(from, v);
          DeviceBuffer din = test::to_device(in);
          const size_t es = dtype_size(to);
          DeviceBuffer dout = test::poisoned((n + lead) * es + 64);
          ConvertParams p;
          p.in = din.as<char>() + lead * dtype_size(from), p.in_dtype = from;
          p.out = dout.as<char>() + lead * es, p.out_dtype = to, p.n = n;
          convert(p, nullptr);
          test::sync_and_check();
          const HostArray out = test::from_device(dout, to, size_t(n + lead) + 64 / es);
          int failures = 0;
          for (int64_t i = 0; i < n; ++i) {
            HostArray want(to, 1);
            want.set(0, in.get(size_t(lead + i)));
            if (std::memcmp(want.bytes.data(), out.bytes.data() + (lead + i) * es, es) != 0 && ++failures <= 5)
              ADD_FAILURE() << "element " << i << ": " << in.get(size_t(lead + i)) << " -> " << out.get(size_t(lead + i))
                            << ", want " << want.get(0);
          }
          for (size_t i = size_t(lead + n); i < out.n; ++i)
            if (!std::isnan(out.get(i)) && ++failures <= 5) ADD_FAILURE() << "wrote past the end at " << i;
        }
      }
    }
  }
}

}  // namespace
}  // namespace pagoda
