// silu_and_mul against a float64 reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/activation.h"

namespace pagoda {
namespace {

using test::HostArray;
using test::Rng;

// One rounding to the output dtype (u_out * |ref|, or half a subnormal quantum below the normal range: a
// very negative gate gives a tiny silu) after fp32 arithmetic: expf (<= 2 ulp, and silu's
// relative sensitivity to exp(-g) is < 1), 1 + e, the division and the product: < 6 * 2^-24 relative;
// we allow 8.
double act_tolerance(DType t, double ref) {
  return (test::unit_roundoff(t) + 8 * std::ldexp(1.0, -24)) * std::fabs(ref) + test::half_min_subnormal(t);
}

void check(DType dt, int rows, int cols, bool misaligned, Rng& rng) {
  const std::string label = std::string(dtype_name(dt)) + " rows=" + std::to_string(rows) + " cols=" +
                            std::to_string(cols) + (misaligned ? " misaligned" : "");
  SCOPED_TRACE(label);
  const size_t es = dtype_size(dt), lead = misaligned ? 1 : 0;  // one element of offset: no 16-byte access
  const HostArray in = test::random_array(rng, dt, size_t(rows) * 2 * cols + lead, 3.f);
  DeviceBuffer din = test::to_device(in);
  DeviceBuffer dout = test::poisoned((size_t(rows) * cols + lead) * es + 64);
  SiluAndMulParams p;
  p.in = din.as<char>() + lead * es, p.out = dout.as<char>() + lead * es;
  p.rows = rows, p.cols = cols, p.dtype = dt;
  silu_and_mul(p, nullptr);
  test::sync_and_check();
  const HostArray out = test::from_device(dout, dt, size_t(rows) * cols + lead + 64 / es);
  int failures = 0;
  double worst = 0;
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < cols; ++c) {
      const double g = in.get(lead + size_t(r) * 2 * cols + c), u = in.get(lead + size_t(r) * 2 * cols + cols + c);
      const double ref = g / (1.0 + std::exp(-g)) * u;
      const double got = out.get(lead + size_t(r) * cols + c), tol = act_tolerance(dt, ref);
      if (!(std::fabs(got - ref) <= tol)) {
        if (++failures <= 5) ADD_FAILURE() << "out[" << r << ", " << c << "] = " << got << ", ref " << ref;
      } else {
        worst = std::max(worst, std::fabs(got - ref) / tol);
      }
    }
  }
  for (size_t i = lead + size_t(rows) * cols; i < out.n; ++i)
    if (!std::isnan(out.get(i)) && ++failures <= 5) ADD_FAILURE() << "wrote past the output at " << i;
  if (lead && !std::isnan(out.get(0))) ADD_FAILURE() << "wrote before the output";
  if (rows == 97) std::printf("silu_and_mul %-36s max |err|/tol %.3f\n", label.c_str(), worst);
}

TEST(ActivationCuda, SiluAndMulMatchesFloat64Reference) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(1);
  for (DType dt : test::model_dtypes())
    for (int cols : {8, 384, 1000, 14336})  // 1000: not a multiple of 8 for 16-bit types, element path
      for (int rows : {1, 7, 97}) check(dt, rows, cols, false, rng);
}

TEST(ActivationCuda, MisalignedPointersTakeTheElementPath) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(2);
  for (DType dt : test::model_dtypes()) check(dt, 7, 512, true, rng);
}

}  // namespace
}  // namespace pagoda
