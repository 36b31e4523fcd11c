// cuBLASLt GEMM y = x W^T (+ b) against a float64 reference on the same (rounded) inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/gemm.h"

namespace pagoda {
namespace {

using test::HostArray;
using test::Rng;

// Tolerance of one output, from the arithmetic:
// * rounding of the fp32 accumulator to the output dtype: u_out * |ref| (half a subnormal quantum below
//   the normal range);
// * fp32 accumulation: products of bf16/fp16 inputs are exact in fp32 (at most 11 + 11 significant bits),
//   fp32 products round once (2^-24). Each of the ~K additions errs by at most one fp32 ulp of the partial
//   sum, 2^-23 relative (not half an ulp: tensor cores truncate). With random-sign terms the partial sums
//   stay of the order of s = sqrt(sum_k (x_k w_k)^2), and independent errors grow like a random walk,
//   sqrt(K) * 2^-23 * s; we allow 8 standard deviations. Truncation also biases the errors the same way:
//   tensor cores add the K/16 chunk sums of their 16-wide MMAs with one truncation each, a linear term
//   (K/16) * 2^-23 * s, which we allow twice (K/8).
double gemm_tolerance(DType out, double ref, double s, int k) {
  const double acc = std::ldexp(1.0, -23) * s * (8.0 * std::sqrt(double(k)) + k / 8.0);
  return test::unit_roundoff(out) * std::fabs(ref) + test::half_min_subnormal(out) + acc;
}

// Checks y against the float64 reference: every output when M*N*K is small, else the four corners and 2048
// random outputs (a wrong tile of 128x128 outputs is hit with probability > 1 - 1e-3 even at 513 x 14336).
// Every output is checked for being written (not the NaN poison). Returns the largest |err| / tol.
double check_gemm(const HostArray& x, const HostArray& w, const HostArray* bias, const HostArray& y, int m, int n,
                  int k, Rng& rng, const std::string& label) {
  for (size_t i = 0; i < y.n; ++i) {
    if (std::isnan(y.get(i))) {
      ADD_FAILURE() << label << ": output " << i << " (row " << i / n << ", col " << i % n << ") not written";
      return 1e30;
    }
  }
  std::vector<std::pair<int, int>> points;
  if (int64_t(m) * n * k <= (int64_t(1) << 26)) {
    for (int r = 0; r < m; ++r)
      for (int c = 0; c < n; ++c) points.emplace_back(r, c);
  } else {
    points = {{0, 0}, {0, n - 1}, {m - 1, 0}, {m - 1, n - 1}};
    for (int i = 0; i < 2048; ++i) points.emplace_back(int(rng.integer(0, m - 1)), int(rng.integer(0, n - 1)));
  }
  double worst = 0;
  int failures = 0;
  for (auto [r, c] : points) {
    double acc = 0, s2 = 0;
    for (int i = 0; i < k; ++i) {
      const double p = double(x.get(size_t(r) * k + i)) * double(w.get(size_t(c) * k + i));
      acc += p;
      s2 += p * p;
    }
    if (bias) {
      acc += bias->get(c);
      s2 += double(bias->get(c)) * bias->get(c);
    }
    const double got = y.get(size_t(r) * n + c), tol = gemm_tolerance(y.dtype, acc, std::sqrt(s2), k);
    const double err = std::fabs(got - acc);
    worst = std::max(worst, err / tol);
    if (!(err <= tol) && ++failures <= 5)
      ADD_FAILURE() << label << ": y[" << r << ", " << c << "] = " << got << ", reference " << acc << ", |err| "
                    << err << " > tol " << tol;
  }
  return worst;
}

void run_shapes(DType dt) {
  SCOPED_TRACE(test::seed_note());
  Rng rng(uint64_t(dt) + 1);
  GemmRunner runner;
  const std::pair<int, int> nks[] = {{64, 64}, {64, 4096}, {4096, 64}, {4096, 4096}, {14336, 4096}, {4096, 14336}};
  for (auto [n, k] : nks) {
    const HostArray w = test::random_array(rng, dt, size_t(n) * k, 0.05f);
    const HostArray b = test::random_array(rng, dt, size_t(n), 0.5f);
    DeviceBuffer dw = test::to_device(w), db = test::to_device(b);
    for (int m : {1, 7, 128, 513}) {
      const bool with_bias = m == 7 || m == 513;
      const HostArray x = test::random_array(rng, dt, size_t(m) * k);
      DeviceBuffer dx = test::to_device(x);
      const size_t ybytes = size_t(m) * n * dtype_size(dt);
      DeviceBuffer dy = test::poisoned(ybytes + 256);  // + a guard zone that must stay poisoned
      GemmParams p;
      p.x = dx.data();
      p.w = dw.data();
      p.bias = with_bias ? db.data() : nullptr;
      p.y = dy.data();
      p.m = m, p.n = n, p.k = k, p.dtype = dt;
      runner.run(p, nullptr);
      test::sync_and_check();
      const HostArray y = test::from_device(dy, dt, size_t(m) * n);
      std::vector<uint8_t> guard(256);
      dy.download(guard.data(), 256, ybytes);
      EXPECT_TRUE(std::all_of(guard.begin(), guard.end(), [](uint8_t v) { return v == test::kPoisonByte; }))
          << "write past the end of y";
      const std::string label = std::string(dtype_name(dt)) + " m=" + std::to_string(m) + " n=" + std::to_string(n) +
                                " k=" + std::to_string(k) + (with_bias ? " +bias" : "");
      const double worst = check_gemm(x, w, with_bias ? &b : nullptr, y, m, n, k, rng, label);
      std::printf("gemm %-40s max |err|/tol %.3f\n", label.c_str(), worst);
    }
  }
}

TEST(GemmCuda, Bf16MatchesFloat64Reference) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  run_shapes(DType::kBF16);
}

TEST(GemmCuda, F16MatchesFloat64Reference) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  run_shapes(DType::kF16);
}

TEST(GemmCuda, F32MatchesFloat64Reference) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  run_shapes(DType::kF32);
}

// prepare() then capture run() in a CUDA graph: the capture must succeed (no allocation, no sync inside
// run) and replays must compute the product; no new plan appears.
TEST(GemmCuda, PreparedRunIsGraphCapturable) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(11);
  const int m = 7, n = 4096, k = 4096;
  const DType dt = DType::kBF16;
  GemmRunner runner;
  runner.prepare(m, n, k, dt, /*with_bias=*/true);
  ASSERT_EQ(runner.cached_plans(), 1u);
  const HostArray x = test::random_array(rng, dt, size_t(m) * k), w = test::random_array(rng, dt, size_t(n) * k, 0.05f);
  const HostArray b = test::random_array(rng, dt, n, 0.5f);
  DeviceBuffer dx = test::to_device(x), dw = test::to_device(w), db = test::to_device(b);
  DeviceBuffer dy = test::poisoned(size_t(m) * n * dtype_size(dt));
  cudaStream_t stream;
  PAGODA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  GemmParams p;
  p.x = dx.data(), p.w = dw.data(), p.bias = db.data(), p.y = dy.data();
  p.m = m, p.n = n, p.k = k, p.dtype = dt;
  cudaGraph_t graph;
  PAGODA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
  runner.run(p, stream);
  PAGODA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec;
  PAGODA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
  for (int replay = 0; replay < 2; ++replay) {
    dy.fill_bytes(test::kPoisonByte);
    PAGODA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));
    const HostArray y = test::from_device(dy, dt, size_t(m) * n);
    check_gemm(x, w, &b, y, m, n, k, rng, "graph replay " + std::to_string(replay));
  }
  EXPECT_EQ(runner.cached_plans(), 1u);
  PAGODA_CUDA_CHECK(cudaGraphExecDestroy(exec));
  PAGODA_CUDA_CHECK(cudaGraphDestroy(graph));
  PAGODA_CUDA_CHECK(cudaStreamDestroy(stream));
}

TEST(GemmCuda, RejectsMisalignedOperandsAndSkipsEmptyBatches) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  GemmRunner runner;
  DeviceBuffer a(1 << 16), b(1 << 16), c(1 << 16);
  GemmParams p;
  p.x = a.as<char>() + 2, p.w = b.data(), p.y = c.data();
  p.m = 4, p.n = 64, p.k = 64, p.dtype = DType::kBF16;
  EXPECT_THROW(runner.run(p, nullptr), Error);
  p.x = a.data();
  p.m = 0;
  EXPECT_NO_THROW(runner.run(p, nullptr));
  EXPECT_EQ(runner.cached_plans(), 0u);
  p.m = 4;
  p.dtype = DType::kF8E4M3;
  EXPECT_THROW(runner.run(p, nullptr), Error);
}

}  // namespace
}  // namespace pagoda
