// The quantized-weight kernels on the GPU (label gpu) against the CPU reference (ops/quant): quant_gemv's
// 16-bit kernel for every format against dequantize_row's weights times x in float64, its int8 kernel
// against the CPU's quantized matmul; quant_dequant bit for bit, also as an embedding lookup; dequantize +
// cuBLASLt GEMM for prefill shapes; the device quantizer byte for byte.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <utility>

#include "gpu_test_util.h"
#include "pagoda/ops/cuda/gemm.h"
#include "pagoda/ops/cuda/quant_dequant.h"
#include "pagoda/ops/cuda/quant_gemv.h"
#include "pagoda/ops/cuda/quant_quantize.h"
#include "pagoda/ops/quant/quant.h"
#include "quant_i8_reference.h"
#include "quant_reference.h"

namespace pagoda {
namespace {

using test::HostArray;
using test::Rng;

std::string tname(QuantType q) { return std::string(quant_traits(q).name); }

// n rows of k weights: quantized from N(0, 0.05^2) floats by quantize_row (what models hold), or random
// blocks (every code and scale bit pattern).
std::vector<uint8_t> make_weights(QuantType q, Rng& rng, int n, int k, bool from_floats) {
  if (!from_floats) return test::random_blocks(q, rng.gen(), n, k);
  std::vector<float> f(size_t(n) * size_t(k));
  for (auto& v : f) v = rng.normal(0.05f);
  std::vector<uint8_t> bytes(size_t(n) * quant_row_bytes(q, k));
  quantize_row(q, f.data(), bytes.data(), int64_t(n) * k);
  return bytes;
}

// The CPU's weights of each row (dequantize_row) and the magnitudes quant_gemv's arithmetic handles.
struct RefWeights {
  std::vector<float> w;
  std::vector<double> mag;
};
RefWeights ref_weights(QuantType q, const std::vector<uint8_t>& bytes, int n, int k) {
  RefWeights r;
  r.w.resize(size_t(n) * k);
  r.mag.resize(size_t(n) * k);
  std::vector<double> w64(static_cast<size_t>(k));
  const size_t rb = quant_row_bytes(q, k);
  for (int i = 0; i < n; ++i) {
    dequantize_row(q, bytes.data() + i * rb, r.w.data() + size_t(i) * k, k);
    test::ref_decode_row(q, bytes.data() + i * rb, k, w64.data(), r.mag.data() + size_t(i) * k);
  }
  return r;
}

// Tolerance of one quant_gemv output, from its arithmetic (quant_reference.h: the tensor cores truncate, so
// u = 2^-23), plus dequantize_row's own float32 rounding of each weight the reference multiplies
// (2^-24 |w x|, one rounding per weight), plus the output's rounding to dtype.
double gemv_tolerance(DType dt, double ref, double sum_mag, double sum_abs, int k) {
  return test::gemv_error_bound(sum_mag, k, std::ldexp(1.0, -23)) + std::ldexp(1.0, -24) * sum_abs +
         test::unit_roundoff(dt) * std::fabs(ref) + test::half_min_subnormal(dt);
}

void run_gemv(const QuantGemvParams& p) {
  quant_gemv(p, nullptr);
  test::sync_and_check();
}

void check_gemv_type(QuantType q, DType dt) {
  SCOPED_TRACE(tname(q) + " " + std::string(dtype_name(dt)) + " " + test::seed_note());
  Rng rng(uint64_t(q) * 31 + uint64_t(dt));
  const bool kq = quant_traits(q).block_elems == 256;
  // k = 256 j for every format; k = 32 x odd (rows 2-byte aligned for Q4_0/Q5_0/Q8_0) for the 32-weight
  // formats; k = 256 x odd for the k-quants (Q6_K rows of 210 x odd bytes). n: one CTA, not a multiple of
  // 16, several hundred rows.
  const std::vector<int> ks = kq ? std::vector<int>{256, 768, 4096, 14336} : std::vector<int>{224, 416, 4096, 14336};
  const int ns[] = {16, 37, 300};
  int ni = 0;
  for (int k : ks) {
    const int n = ns[ni++ % 3];
    const bool from_floats = ni % 2 == 0;
    const std::vector<uint8_t> wq = make_weights(q, rng, n, k, from_floats);
    const RefWeights rw = ref_weights(q, wq, n, k);
    DeviceBuffer dw = test::to_device(wq);
    const HostArray bias = test::random_array(rng, dt, size_t(n), 0.1f);
    DeviceBuffer dbias = test::to_device(bias);
    const HostArray x = test::random_array(rng, dt, size_t(kQuantGemvMaxRows) * k);
    DeviceBuffer dx = test::to_device(x);
    HostArray y_single[2];  // the m = 1 run without and with bias
    const std::pair<int, bool> runs[] = {{1, false}, {1, true}, {2, false}, {7, true},
                                         {8, false}, {9, false}, {32, true}};
    for (const auto& [m, with_bias] : runs) {
      SCOPED_TRACE("m=" + std::to_string(m) + " n=" + std::to_string(n) + " k=" + std::to_string(k) +
                   (from_floats ? " quantized floats" : " random blocks") + (with_bias ? " +bias" : ""));
      DeviceBuffer dy = test::poisoned(size_t(m) * n * dtype_size(dt) + 256);
      QuantGemvParams p;
      p.x = dx.data(), p.w = dw.data(), p.type = q, p.bias = with_bias ? dbias.data() : nullptr;
      p.y = dy.data(), p.m = m, p.n = n, p.k = k, p.dtype = dt;
      p.batch_invariant = true;  // the 16-bit kernel at every m (the int8 one: Int8KernelMatchesCpuMatmul)
      run_gemv(p);
      const HostArray y = test::from_device(dy, dt, size_t(m) * n);
      std::vector<uint8_t> guard(256);
      dy.download(guard.data(), 256, size_t(m) * n * dtype_size(dt));
      EXPECT_TRUE(std::all_of(guard.begin(), guard.end(), [](uint8_t v) { return v == test::kPoisonByte; }))
          << "write past the end of y";
      int failures = 0;
      double worst = 0;
      for (int j = 0; j < m; ++j)
        for (int r = 0; r < n; ++r) {
          double ref = with_bias ? bias.get(size_t(r)) : 0.0, sum_abs = std::fabs(ref), sum_mag = sum_abs;
          for (int i = 0; i < k; ++i) {
            const double xv = x.get(size_t(j) * k + i), wv = rw.w[size_t(r) * k + i];
            ref += wv * xv;
            sum_abs += std::fabs(wv * xv);
            sum_mag += rw.mag[size_t(r) * k + i] * std::fabs(xv);
          }
          const double got = y.get(size_t(j) * n + r);
          const double tol = gemv_tolerance(dt, ref, sum_mag, sum_abs, k), err = std::fabs(got - ref);
          worst = std::max(worst, err / tol);
          if (!(err <= tol) && ++failures <= 5)
            ADD_FAILURE() << "y[" << j << ", " << r << "] = " << got << ", reference " << ref << ", |err| " << err
                          << " > tol " << tol;
        }
      // Batch invariance: token 0's outputs are the same bits whatever m is (compared with the m = 1 run of
      // the same bias: the bias changes them).
      if (m == 1) y_single[with_bias] = y;
      else
        EXPECT_EQ(std::memcmp(y.bytes.data(), y_single[with_bias].bytes.data(), size_t(n) * dtype_size(dt)), 0)
            << "row 0 differs from the m = 1 run";
      std::printf("quant_gemv %s %s m=%d n=%d k=%d: max |err|/tol %.3f\n", tname(q).c_str(),
                  std::string(dtype_name(dt)).c_str(), m, n, k, worst);
    }
  }
}

class QuantGemvCuda : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantGemvCuda, Bf16MatchesCpuReference) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  check_gemv_type(GetParam(), DType::kBF16);
}

TEST_P(QuantGemvCuda, F16MatchesCpuReference) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  check_gemv_type(GetParam(), DType::kF16);
}

// quant_dequant: every weight is dequantize_row's float rounded to the dtype, bit for bit (zero signs too).
TEST_P(QuantGemvCuda, DequantIsDequantizeRowBitForBit) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  const QuantType q = GetParam();
  SCOPED_TRACE(tname(q) + " " + test::seed_note());
  Rng rng(uint64_t(q) + 100);
  const int k = quant_traits(q).block_elems == 256 ? 768 : 416, n = 37;
  for (bool from_floats : {false, true}) {
    const std::vector<uint8_t> wq = make_weights(q, rng, n, k, from_floats);
    DeviceBuffer dw = test::to_device(wq);
    std::vector<float> ref(size_t(n) * k);
    for (int r = 0; r < n; ++r) dequantize_row(q, wq.data() + r * quant_row_bytes(q, k), ref.data() + size_t(r) * k, k);
    for (DType dt : test::model_dtypes()) {
      SCOPED_TRACE(std::string(dtype_name(dt)));
      DeviceBuffer dout = test::poisoned(size_t(n) * k * dtype_size(dt));
      QuantDequantParams p;
      p.w = dw.data(), p.type = q, p.rows = n, p.cols = k, p.out_rows = n, p.out = dout.data(), p.dtype = dt;
      quant_dequant(p, nullptr);
      test::sync_and_check();
      const HostArray got = test::from_device(dout, dt, size_t(n) * k);
      const HostArray want = HostArray::from_floats(dt, ref);
      EXPECT_EQ(std::memcmp(got.bytes.data(), want.bytes.data(), got.nbytes()), 0);
    }
  }
}

// As an embedding lookup: rows by id; an id outside the table zero-fills its row and raises the flag.
TEST_P(QuantGemvCuda, DequantRowsById) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  const QuantType q = GetParam();
  SCOPED_TRACE(tname(q) + " " + test::seed_note());
  Rng rng(uint64_t(q) + 200);
  const int k = quant_traits(q).block_elems == 256 ? 512 : 576, vocab = 50;
  const std::vector<uint8_t> wq = make_weights(q, rng, vocab, k, true);
  DeviceBuffer dw = test::to_device(wq);
  const std::vector<int32_t> ids = {3, 0, vocab - 1, vocab, -1, 3, 17};
  DeviceBuffer dids = test::to_device(ids);
  DeviceBuffer dflag(4);
  dflag.fill_bytes(0);
  const DType dt = DType::kBF16;
  DeviceBuffer dout = test::poisoned(ids.size() * k * dtype_size(dt));
  QuantDequantParams p;
  p.w = dw.data(), p.type = q, p.rows = vocab, p.cols = k, p.row_ids = dids.as<int32_t>(), p.error_flag = dflag.as<int>();
  p.out_rows = int64_t(ids.size()), p.out = dout.data(), p.dtype = dt;
  quant_dequant(p, nullptr);
  test::sync_and_check();
  const HostArray got = test::from_device(dout, dt, ids.size() * k);
  EXPECT_EQ(test::from_device<int>(dflag, 1)[0], 1);
  std::vector<float> row(static_cast<size_t>(k));
  for (size_t t = 0; t < ids.size(); ++t) {
    const bool valid = ids[t] >= 0 && ids[t] < vocab;
    if (valid) dequantize_row(q, wq.data() + size_t(ids[t]) * quant_row_bytes(q, k), row.data(), k);
    else std::fill(row.begin(), row.end(), 0.0f);
    const HostArray want = HostArray::from_floats(dt, row);
    EXPECT_EQ(std::memcmp(got.bytes.data() + t * k * 2, want.bytes.data(), want.nbytes()), 0) << "token " << t;
  }
}

// Prefill: dequantize to the compute dtype, then the cuBLASLt GEMM. Tolerance: the GEMM's (gemm_test.cc's
// derivation: output rounding, and fp32 accumulation 2^-23 s (8 sqrt(k) + k / 8) with s the root sum of
// squared products) plus each weight's rounding to the dtype, u |w x| summed.
TEST_P(QuantGemvCuda, DequantThenGemmMatchesCpuReference) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  const QuantType q = GetParam();
  SCOPED_TRACE(tname(q) + " " + test::seed_note());
  Rng rng(uint64_t(q) + 300);
  GemmRunner gemm;
  for (DType dt : {DType::kBF16, DType::kF16}) {
    const int n = 300, k = quant_traits(q).block_elems == 256 ? 4096 : 1120;
    const std::vector<uint8_t> wq = make_weights(q, rng, n, k, true);
    std::vector<float> w(size_t(n) * k);
    for (int r = 0; r < n; ++r) dequantize_row(q, wq.data() + r * quant_row_bytes(q, k), w.data() + size_t(r) * k, k);
    DeviceBuffer dw = test::to_device(wq), dwd(size_t(n) * k * dtype_size(dt));
    QuantDequantParams dp;
    dp.w = dw.data(), dp.type = q, dp.rows = n, dp.cols = k, dp.out_rows = n, dp.out = dwd.data(), dp.dtype = dt;
    for (int m : {33, 200}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " m=" + std::to_string(m));
      const HostArray x = test::random_array(rng, dt, size_t(m) * k);
      DeviceBuffer dx = test::to_device(x), dy = test::poisoned(size_t(m) * n * dtype_size(dt));
      quant_dequant(dp, nullptr);
      gemm.run({.x = dx.data(), .w = dwd.data(), .y = dy.data(), .m = m, .n = n, .k = k, .dtype = dt}, nullptr);
      test::sync_and_check();
      const HostArray y = test::from_device(dy, dt, size_t(m) * n);
      int failures = 0;
      for (int j = 0; j < m; ++j)
        for (int r = 0; r < n; r += (j % 7) + 1) {
          double ref = 0, s2 = 0, sum_abs = 0;
          for (int i = 0; i < k; ++i) {
            const double p = double(x.get(size_t(j) * k + i)) * w[size_t(r) * k + i];
            ref += p;
            s2 += p * p;
            sum_abs += std::fabs(p);
          }
          const double u = test::unit_roundoff(dt);
          const double tol = u * std::fabs(ref) + test::half_min_subnormal(dt) + u * sum_abs +
                             std::ldexp(1.0, -23) * std::sqrt(s2) * (8.0 * std::sqrt(double(k)) + k / 8.0);
          const double got = y.get(size_t(j) * n + r);
          if (!(std::fabs(got - ref) <= tol) && ++failures <= 5)
            ADD_FAILURE() << "y[" << j << ", " << r << "] = " << got << ", reference " << ref << ", tol " << tol;
        }
    }
  }
}

// The device quantizer makes quantize_row's bytes.
TEST_P(QuantGemvCuda, DeviceQuantizerMatchesQuantizeRow) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  const QuantType q = GetParam();
  SCOPED_TRACE(tname(q) + " " + test::seed_note());
  Rng rng(uint64_t(q) + 400);
  const int rows = 64, cols = quant_traits(q).block_elems == 256 ? 1024 : 288;
  for (float scale : {0.02f, 1.0f, 30.0f}) {
    const std::vector<float> x = test::random_floats(rng, size_t(rows) * cols, scale);
    std::vector<uint8_t> want(size_t(rows) * quant_row_bytes(q, cols));
    quantize_row(q, x.data(), want.data(), int64_t(rows) * cols);
    DeviceBuffer dx = test::to_device(x), dout = test::poisoned(want.size());
    quant_quantize({.x = dx.as<float>(), .out = dout.data(), .type = q, .rows = rows, .cols = cols}, nullptr);
    test::sync_and_check();
    const std::vector<uint8_t> got = test::from_device<uint8_t>(dout, want.size());
    EXPECT_EQ(std::memcmp(got.data(), want.data(), want.size()), 0) << "scale " << scale;
  }
}

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantGemvCuda, ::testing::ValuesIn(test::kAllQuantTypes),
                         [](const auto& info) { return tname(info.param); });

// The int8 kernel (m = 1 without batch invariance) against the CPU's quantized matmul: the same activation
// codes and block terms, so the bound is the order of the float additions (quant_i8_reference.h) plus the
// output's rounding. Llama-3-8B's shapes (k = 4096 and 14336), a partial last group of loads, n not a
// multiple of the CTA's 8 rows, and more rows than the resident CTAs cover (every warp loops).
void check_int8_gemv(QuantType q, DType dt) {
  SCOPED_TRACE(tname(q) + " " + std::string(dtype_name(dt)) + " " + test::seed_note());
  Rng rng(uint64_t(q) * 97 + uint64_t(dt));
  const std::vector<std::pair<int, int>> shapes =
      q == QuantType::kQ6_K ? std::vector<std::pair<int, int>>{{13, 2048}, {4096, 4096}, {1027, 14336}, {40000, 2048}}
                            : std::vector<std::pair<int, int>>{{13, 256}, {301, 2304}, {4096, 4096}, {1027, 14336},
                                                               {40000, 512}};
  int si = 0;
  for (const auto& [n, k] : shapes) {
    const bool with_bias = si++ % 2 == 1;
    SCOPED_TRACE("n=" + std::to_string(n) + " k=" + std::to_string(k) + (with_bias ? " +bias" : ""));
    const std::vector<uint8_t> wq = make_weights(q, rng, n, k, si % 2 == 0);
    DeviceBuffer dw = test::to_device(wq);
    const HostArray x = test::random_array(rng, dt, size_t(k));
    const HostArray bias = test::random_array(rng, dt, size_t(n), 0.1f);
    DeviceBuffer dx = test::to_device(x), dbias = test::to_device(bias);
    DeviceBuffer dy = test::poisoned(size_t(n) * dtype_size(dt) + 256);
    QuantGemvParams p;
    p.x = dx.data(), p.w = dw.data(), p.type = q, p.bias = with_bias ? dbias.data() : nullptr;
    p.y = dy.data(), p.m = 1, p.n = n, p.k = k, p.dtype = dt;
    ASSERT_TRUE(quant_gemv_i8_applies(p));
    run_gemv(p);
    const HostArray y = test::from_device(dy, dt, size_t(n));
    std::vector<uint8_t> guard(256);
    dy.download(guard.data(), 256, size_t(n) * dtype_size(dt));
    EXPECT_TRUE(std::all_of(guard.begin(), guard.end(), [](uint8_t v) { return v == test::kPoisonByte; }))
        << "write past the end of y";
    const test::I8Reference ref =
        test::i8_reference(q, wq.data(), quant_row_bytes(q, k), x, with_bias ? &bias : nullptr, n, k);
    int failures = 0;
    double worst = 0;
    for (int r = 0; r < n; ++r) {
      const double want = ref.y[size_t(r)], got = y.get(size_t(r));
      const double tol = ref.tol[size_t(r)] * (1 + test::unit_roundoff(dt)) + test::unit_roundoff(dt) * std::fabs(want) +
                         test::half_min_subnormal(dt);
      const double err = std::fabs(got - want);
      worst = std::max(worst, err / tol);
      if (!(err <= tol) && ++failures <= 5)
        ADD_FAILURE() << "y[" << r << "] = " << got << ", CPU " << want << ", |err| " << err << " > tol " << tol;
    }
    // The batch-invariant flag takes the 16-bit kernel instead: different arithmetic, the same product.
    p.batch_invariant = true;
    ASSERT_FALSE(quant_gemv_i8_applies(p));
    std::printf("quant_gemv int8 %s %s n=%d k=%d: max |err|/tol %.3f\n", tname(q).c_str(),
                std::string(dtype_name(dt)).c_str(), n, k, worst);
  }
}

class QuantGemvInt8Cuda : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantGemvInt8Cuda, Bf16MatchesCpuMatmul) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  check_int8_gemv(GetParam(), DType::kBF16);
}
TEST_P(QuantGemvInt8Cuda, F16MatchesCpuMatmul) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  check_int8_gemv(GetParam(), DType::kF16);
}
INSTANTIATE_TEST_SUITE_P(AllFormats, QuantGemvInt8Cuda, ::testing::ValuesIn(test::kAllQuantTypes),
                         [](const auto& info) { return tname(info.param); });

// Captured in a CUDA graph after a first eager call (which sets the kernel's shared-memory limit): replays
// give the eager bits.
TEST(QuantGemvCudaGraph, ReplayEqualsEagerRun) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  SCOPED_TRACE(test::seed_note());
  Rng rng(500);
  const QuantType q = QuantType::kQ4_K;
  const int n = 4096, k = 4096;
  const DType dt = DType::kBF16;
  const std::vector<uint8_t> wq = make_weights(q, rng, n, k, true);
  DeviceBuffer dw = test::to_device(wq);
  for (int m : {4, 1}) {  // the 16-bit kernel, the int8 one
    SCOPED_TRACE("m=" + std::to_string(m));
    const HostArray x = test::random_array(rng, dt, size_t(m) * k);
    DeviceBuffer dx = test::to_device(x), dy = test::poisoned(size_t(m) * n * 2);
    QuantGemvParams p;
    p.x = dx.data(), p.w = dw.data(), p.type = q, p.y = dy.data(), p.m = m, p.n = n, p.k = k, p.dtype = dt;
    cudaStream_t stream;
    PAGODA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    quant_gemv(p, stream);
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));
    const HostArray eager = test::from_device(dy, dt, size_t(m) * n);
    cudaGraph_t graph;
    PAGODA_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal));
    quant_gemv(p, stream);
    PAGODA_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
    cudaGraphExec_t exec;
    PAGODA_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
    dy.fill_bytes(test::kPoisonByte);
    PAGODA_CUDA_CHECK(cudaGraphLaunch(exec, stream));
    PAGODA_CUDA_CHECK(cudaStreamSynchronize(stream));
    const HostArray replay = test::from_device(dy, dt, size_t(m) * n);
    EXPECT_EQ(std::memcmp(eager.bytes.data(), replay.bytes.data(), eager.nbytes()), 0);
    PAGODA_CUDA_CHECK(cudaGraphExecDestroy(exec));
    PAGODA_CUDA_CHECK(cudaGraphDestroy(graph));
    PAGODA_CUDA_CHECK(cudaStreamDestroy(stream));
  }
}

TEST(QuantGemvCudaChecks, RejectsBadShapesAndDtypes) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  DeviceBuffer a(1 << 16), b(1 << 16), c(1 << 16);
  QuantGemvParams p;
  p.x = a.data(), p.w = b.data(), p.y = c.data(), p.type = QuantType::kQ4_K, p.m = 1, p.n = 16, p.k = 300;
  EXPECT_THROW(quant_gemv(p, nullptr), Error);  // k not a multiple of 256
  p.k = 256;
  p.m = kQuantGemvMaxRows + 1;
  EXPECT_THROW(quant_gemv(p, nullptr), Error);
  p.m = 1;
  p.dtype = DType::kF32;
  EXPECT_THROW(quant_gemv(p, nullptr), Error);
  p.dtype = DType::kBF16;
  p.w = b.as<uint8_t>() + 8;
  EXPECT_THROW(quant_gemv(p, nullptr), Error);  // misaligned weights
}

}  // namespace
}  // namespace pagoda
