// RMSNorm, fused add + RMSNorm and per-head RMSNorm against float64 references.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/rmsnorm.h"

namespace pagoda {
namespace {

using test::HostArray;
using test::Rng;

// Tolerance of one output y = w * x * inv_rms, from the arithmetic:
// * one rounding to the output dtype: u_out * |ref| (+ half a subnormal quantum below the normal range);
// * fp32 work before it: each thread sums the squares of at most 32 elements (4 packs of <= 8) in order,
//   then a tree of depth <= 10 (1024 partials): a sum of positive terms errs by at most (32 + 10) * 2^-24
//   relative; the mean, + eps, sqrt and division add 3 roundings, and sqrt halves the error of its argument;
//   the two products add 2. Bounded by 48 * 2^-24 relative to |ref|; we allow 64.
double norm_tolerance(DType out, double ref) {
  return (test::unit_roundoff(out) + 64 * std::ldexp(1.0, -24)) * std::fabs(ref) + test::half_min_subnormal(out);
}

// Reference of one row: y_i = w_i * v_i / sqrt(mean(v^2) + eps) in float64.
std::vector<double> reference_row(const HostArray& v, size_t off, const HostArray& w, int cols, float eps) {
  double ss = 0;
  for (int i = 0; i < cols; ++i) ss += double(v.get(off + i)) * v.get(off + i);
  const double inv = 1.0 / std::sqrt(ss / cols + double(eps));
  std::vector<double> y(cols);
  for (int i = 0; i < cols; ++i) y[i] = double(w.get(i)) * v.get(off + i) * inv;
  return y;
}

// Compares a row of y with the reference; counts failures, tracks the worst |err| / tol.
void compare_row(const HostArray& y, size_t off, const std::vector<double>& ref, const std::string& label,
                 int& failures, double& worst) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const double got = y.get(off + i), tol = norm_tolerance(y.dtype, ref[i]), err = std::fabs(got - ref[i]);
    if (!(err <= tol)) {  // NaN (unwritten poison) fails here too
      if (++failures <= 5) ADD_FAILURE() << label << ": element " << off + i << " = " << got << ", ref " << ref[i];
    } else {
      worst = std::max(worst, err / tol);
    }
  }
}

TEST(RmsNormCuda, RowsMatchFloat64Reference) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(1);
  for (DType dt : test::model_dtypes()) {
    // 128..1024 take the warp-per-row kernel (fp32 up to 512), larger the block-per-row one; 1032 and 520
    // sit just past the switch; 8192 bf16 fills 4 packs per thread of a 256-thread block.
    for (int cols : {128, 520, 1024, 1032, 2048, 4096, 5120, 8192}) {
      for (int rows : {1, 7, 97, 513}) {
        const int64_t stride = cols + (rows % 2 ? 0 : 64);  // odd row counts contiguous, even ones strided
        const float eps = rows == 7 ? 1e-5f : 1e-6f;
        // Rows of different magnitude: the norm must not depend on the scale.
        std::vector<float> xv(size_t(rows) * stride);
        for (int r = 0; r < rows; ++r) {
          const float scale = r % 3 == 0 ? 0.01f : r % 3 == 1 ? 1.f : 30.f;
          for (int64_t c = 0; c < stride; ++c) xv[size_t(r) * stride + c] = rng.normal(scale);
        }
        const HostArray x = HostArray::from_floats(dt, xv);
        std::vector<float> wv(cols);
        for (auto& v : wv) v = 1.f + rng.normal(0.1f);
        const HostArray w = HostArray::from_floats(dt, wv);
        DeviceBuffer dx = test::to_device(x), dw = test::to_device(w);
        DeviceBuffer dy = test::poisoned(x.nbytes());
        RmsNormParams p;
        p.x = dx.data(), p.w = dw.data(), p.y = dy.data();
        p.rows = rows, p.cols = cols, p.x_stride = stride, p.y_stride = stride, p.eps = eps, p.dtype = dt;
        rmsnorm(p, nullptr);
        test::sync_and_check();
        const HostArray y = test::from_device(dy, dt, x.n);
        const std::string label = std::string(dtype_name(dt)) + " rows=" + std::to_string(rows) +
                                  " cols=" + std::to_string(cols);
        int failures = 0;
        double worst = 0;
        for (int r = 0; r < rows; ++r) {
          compare_row(y, size_t(r) * stride, reference_row(x, size_t(r) * stride, w, cols, eps), label, failures, worst);
          for (int64_t c = cols; c < stride; ++c)  // the gap between strided rows is not written
            if (!std::isnan(y.get(size_t(r) * stride + c)) && ++failures <= 5)
              ADD_FAILURE() << label << ": wrote the row gap at row " << r;
        }
        if (rows == 513) std::printf("rmsnorm %-28s max |err|/tol %.3f\n", label.c_str(), worst);
      }
    }
  }
}

TEST(RmsNormCuda, InPlace) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(2);
  const DType dt = DType::kBF16;
  const int rows = 33, cols = 4096;
  const HostArray x = test::random_array(rng, dt, size_t(rows) * cols), w = test::random_array(rng, dt, cols);
  DeviceBuffer dx = test::to_device(x), dw = test::to_device(w);
  RmsNormParams p;
  p.x = dx.data(), p.w = dw.data(), p.y = dx.data(), p.rows = rows, p.cols = cols, p.dtype = dt;
  rmsnorm(p, nullptr);
  test::sync_and_check();
  const HostArray y = test::from_device(dx, dt, x.n);
  int failures = 0;
  double worst = 0;
  for (int r = 0; r < rows; ++r)
    compare_row(y, size_t(r) * cols, reference_row(x, size_t(r) * cols, w, cols, 1e-6f), "in place", failures, worst);
}

// residual' = round(residual + x), bit-exact (an fp32 add, as the kernel does, then one rounding);
// y = rmsnorm(residual') against float64. y written over x, as vLLM calls it.
TEST(RmsNormCuda, FusedAddMatchesReference) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(3);
  for (DType dt : test::model_dtypes()) {
    for (int cols : {128, 1024, 4096, 8192}) {
      for (int rows : {1, 7, 513}) {
        const size_t n = size_t(rows) * cols;
        const HostArray x = test::random_array(rng, dt, n), res = test::random_array(rng, dt, n, 3.f);
        std::vector<float> wv(cols);
        for (auto& v : wv) v = 1.f + rng.normal(0.1f);
        const HostArray w = HostArray::from_floats(dt, wv);
        HostArray want_res(dt, n);
        for (size_t i = 0; i < n; ++i) want_res.set(i, res.get(i) + x.get(i));  // fp32 add, then rounding
        DeviceBuffer dx = test::to_device(x), dres = test::to_device(res), dw = test::to_device(w);
        FusedAddRmsNormParams p;
        p.x = dx.data(), p.residual = dres.data(), p.w = dw.data(), p.y = dx.data();
        p.rows = rows, p.cols = cols, p.eps = 1e-6f, p.dtype = dt;
        fused_add_rmsnorm(p, nullptr);
        test::sync_and_check();
        const HostArray got_res = test::from_device(dres, dt, n), y = test::from_device(dx, dt, n);
        const std::string label = std::string(dtype_name(dt)) + " fused rows=" + std::to_string(rows) +
                                  " cols=" + std::to_string(cols);
        int failures = 0;
        double worst = 0;
        for (size_t i = 0; i < n; ++i)
          if (got_res.get(i) != want_res.get(i) && ++failures <= 5)
            ADD_FAILURE() << label << ": residual[" << i << "] = " << got_res.get(i) << ", want " << want_res.get(i);
        for (int r = 0; r < rows; ++r)
          compare_row(y, size_t(r) * cols, reference_row(want_res, size_t(r) * cols, w, cols, 1e-6f), label, failures,
                      worst);
      }
    }
  }
}

// Qwen3 q/k norm: x is the q slice of a fused qkv row (token stride > heads * head_dim), normalised in
// place per head; the k and v parts of the row must stay untouched.
TEST(RmsNormCuda, PerHeadOnAQkvSlice) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(4);
  for (DType dt : test::model_dtypes()) {
    for (int head_dim : {64, 128, 256}) {
      for (int tokens : {1, 7, 513}) {
        const int heads = 16, kv_heads = 4;
        const int64_t stride = int64_t(heads + 2 * kv_heads) * head_dim;
        const HostArray qkv = test::random_array(rng, dt, size_t(tokens) * stride, 2.f);
        std::vector<float> wv(head_dim);
        for (auto& v : wv) v = 1.f + rng.normal(0.1f);
        const HostArray w = HostArray::from_floats(dt, wv);
        DeviceBuffer d = test::to_device(qkv), dw = test::to_device(w);
        RmsNormHeadsParams p;
        p.x = d.data(), p.y = d.data(), p.w = dw.data();
        p.tokens = tokens, p.heads = heads, p.head_dim = head_dim, p.x_token_stride = stride, p.y_token_stride = stride;
        p.eps = 1e-6f, p.dtype = dt;
        rmsnorm_heads(p, nullptr);
        test::sync_and_check();
        const HostArray y = test::from_device(d, dt, qkv.n);
        const std::string label = std::string(dtype_name(dt)) + " heads hd=" + std::to_string(head_dim) +
                                  " tokens=" + std::to_string(tokens);
        int failures = 0;
        double worst = 0;
        for (int t = 0; t < tokens; ++t) {
          for (int h = 0; h < heads; ++h) {
            const size_t off = size_t(t) * stride + size_t(h) * head_dim;
            compare_row(y, off, reference_row(qkv, off, w, head_dim, 1e-6f), label, failures, worst);
          }
          for (int64_t c = int64_t(heads) * head_dim; c < stride; ++c) {
            const size_t i = size_t(t) * stride + c;
            if (y.get(i) != qkv.get(i) && ++failures <= 5) ADD_FAILURE() << label << ": k/v part changed at " << i;
          }
        }
      }
    }
  }
}

TEST(RmsNormCuda, RejectsUnalignedShapes) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer a(1 << 16), w(1 << 12);
  RmsNormParams p;
  p.x = a.data(), p.y = a.data(), p.w = w.data(), p.rows = 2, p.cols = 100, p.dtype = DType::kBF16;
  EXPECT_THROW(rmsnorm(p, nullptr), Error);  // 100 is not a multiple of 8
  p.cols = 128;
  p.x = a.as<char>() + 2;
  EXPECT_THROW(rmsnorm(p, nullptr), Error);
}

}  // namespace
}  // namespace pagoda
