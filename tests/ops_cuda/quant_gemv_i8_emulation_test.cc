// The int8-activation GEMV's CTA body (ops/cuda/quant_gemv_i8.cuh) run on the host, a thread per lane with
// the warp collectives of ../cuda_emulation.h, against the CPU's quantized matmul (ops/quant, the same
// activation codes and per-block terms): the prologue's quantization, the Q4_K/Q5_K lane mapping and its
// reduce-scatter, the staging of the 2-byte-aligned blocks of Q6_K and the 32-weight formats, the grid-stride over rows, bias, non-finite
// inputs. The GPU test (quant_test.cc) runs the compiled kernel.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <limits>
#include <memory>

#include "../cuda_emulation.h"
#include "gpu_test_util.h"
#include "pagoda/core/quant_visit.h"
#include "pagoda/ops/cuda/quant_gemv_i8.cuh"
#include "pagoda/ops/gemm.h"
#include "pagoda/ops/quant/quant_blocks.h"
#include "quant_i8_reference.h"
#include "quant_reference.h"

namespace pagoda {
namespace {

using namespace quant_gemv_i8_detail;

// Global reads must stay inside W or x (the device's out-of-bounds access): counted here.
struct Span {
  const uint8_t* begin = nullptr;
  const uint8_t* end = nullptr;
};
Span g_w, g_x;
std::atomic<int> g_overreads{0};
// The float each output had before its rounding to the dtype, by output index.
float* g_y_float = nullptr;
const void* g_y_base = nullptr;

struct HostOps : emu::Ops {
  static uint4 ldg16(const void* p) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    const bool in_w = b >= g_w.begin && b + 16 <= g_w.end, in_x = b >= g_x.begin && b + 16 <= g_x.end;
    if (!in_w && !in_x) ++g_overreads;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u) << "misaligned 16-byte global load";
    uint4 v;
    std::memcpy(&v, p, 16);
    return v;
  }
  static void wait_for_prior_grid() {}
  static void prefetch_l2(const void* p) {
    const uint8_t* b = static_cast<const uint8_t*>(p);
    if (b < g_w.begin || b >= g_w.end) ++g_overreads;
  }
  static uint4 lds16(const void* p) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u) << "misaligned 16-byte shared load";
    uint4 v;
    std::memcpy(&v, p, 16);
    return v;
  }
  static uint32_t lds4(const uint32_t* p) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 4, 0u);
    return *p;
  }
  static uint32_t lds_u16(const uint8_t* p) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 2, 0u);
    uint16_t h;
    std::memcpy(&h, p, 2);
    return h;
  }
  static float lds_f16(const uint8_t* p) {
    uint16_t h;
    std::memcpy(&h, p, 2);
    return f16_to_f32(h);
  }
  static void sts16(void* p, uint4 v) { std::memcpy(p, &v, 16); }
  static int dp4a(uint32_t a, uint32_t b, int c) {
    for (int i = 0; i < 4; ++i) c += int(int8_t(uint8_t(a >> (8 * i)))) * int(int8_t(uint8_t(b >> (8 * i))));
    return c;
  }
  static int shfl_xor_i(int v, int m) {
    float f;
    std::memcpy(&f, &v, 4);
    f = shfl_xor(f, m);
    std::memcpy(&v, &f, 4);
    return v;
  }
  template <typename T>
  static void store_out(T* p, T v, float f) {
    *p = v;
    g_y_float[p - static_cast<const T*>(g_y_base)] = f;
  }
};

// Runs `ctas` CTAs one after the other, each looping over its rows as on the device.
template <QuantType Q, typename T>
void emulate(const T* x, const uint8_t* w, const T* bias, T* y, int n, int k, int ctas) {
  for (int cta = 0; cta < ctas; ++cta) {
    std::unique_ptr<uint8_t[]> owner(new uint8_t[Smem<Q>::bytes(k) + 16]);
    uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(owner.get()) + 15) & ~uintptr_t(15));
    std::memset(smem, 0xA5, Smem<Q>::bytes(k));  // poison: every byte read must have been written
    emu::run_cta(kThreads, [&](int tid) { gemv_i8_cta<Q, T, HostOps>(x, w, bias, y, n, k, cta, ctas, tid, smem); });
  }
}

struct Shape {
  int n, k, ctas;
  bool bias;
};
// Q4_K, Q5_K: one group of 16 super-blocks, fewer than a step (3), a second partial group (17), 56 (k = 14336).
const Shape kQ4KShapes[] = {{16, 256, 2, false}, {37, 768, 3, true}, {20, 4352, 1, false},
                            {9, 4096, 2, true},  {5, 14336, 1, false}};
// Q6_K (k % 2048 == 0): one round of 8 blocks, two, 56 (k = 14336).
const Shape kQ6KShapes[] = {{16, 2048, 2, true}, {37, 4096, 3, false}, {5, 14336, 1, true}};
// The 32-weight formats: 8 blocks (a partial step), 72 (a partial second group), 128, 448.
const Shape kQ80Shapes[] = {{16, 256, 2, true}, {37, 2304, 3, false}, {20, 4096, 1, true}, {5, 14336, 1, false}};

template <typename T>
void check(QuantType q, DType dt, bool non_finite) {
  SCOPED_TRACE(std::string(quant_traits(q).name) + " " + std::string(dtype_name(dt)) + " " + test::seed_note());
  test::Rng rng(uint64_t(q) * 13 + uint64_t(dt) + (non_finite ? 5 : 0));
  const bool kq = quant_traits(q).block_elems == 256;
  const std::vector<Shape> shapes = q == QuantType::kQ6_K ? std::vector<Shape>(std::begin(kQ6KShapes), std::end(kQ6KShapes))
                                    : kq ? std::vector<Shape>(std::begin(kQ4KShapes), std::end(kQ4KShapes))
                                         : std::vector<Shape>(std::begin(kQ80Shapes), std::end(kQ80Shapes));
  for (const Shape& s : shapes) {
    SCOPED_TRACE("n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) + " ctas=" + std::to_string(s.ctas));
    const size_t row_bytes = quant_row_bytes(q, s.k);
    const std::vector<uint8_t> wq = test::random_blocks(q, rng.gen(), s.n, s.k);
    std::unique_ptr<uint8_t[]> w_owner(new uint8_t[wq.size() + 16]);
    uint8_t* w = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(w_owner.get()) + 15) & ~uintptr_t(15));
    std::memcpy(w, wq.data(), wq.size());
    test::HostArray x = test::random_array(rng, dt, size_t(s.k));
    // A block of zeros (scale 0) and, in the non-finite case, an infinity in another block.
    for (int i = 32; i < 64; ++i) x.set(size_t(i), 0.f);
    if (non_finite) x.set(size_t(s.k - 3), std::numeric_limits<float>::infinity());
    const test::HostArray b = test::random_array(rng, dt, size_t(s.n), 0.1f);
    g_w = {w, w + wq.size()};
    g_x = {x.bytes.data(), x.bytes.data() + x.nbytes()};
    g_overreads = 0;
    test::HostArray y(dt, size_t(s.n) + 8);
    std::fill(y.bytes.begin(), y.bytes.end(), uint8_t(test::kPoisonByte));
    std::vector<float> yf(size_t(s.n), std::numeric_limits<float>::quiet_NaN());
    g_y_float = yf.data();
    g_y_base = y.bytes.data();
    const T* xp = reinterpret_cast<const T*>(x.bytes.data());
    const T* bp = s.bias ? reinterpret_cast<const T*>(b.bytes.data()) : nullptr;
    T* yp = reinterpret_cast<T*>(y.bytes.data());
    visit_quant_type(q, [&](auto qc) { emulate<decltype(qc)::value, T>(xp, w, bp, yp, s.n, s.k, s.ctas); });
    EXPECT_EQ(g_overreads.load(), 0) << "global loads outside W and x";
    for (int c = s.n; c < s.n + 8; ++c) EXPECT_TRUE(std::isnan(y.get(size_t(c)))) << "written past n";

    const test::I8Reference ref = test::i8_reference(q, w, row_bytes, x, s.bias ? &b : nullptr, s.n, s.k);
    int failures = 0;
    double worst = 0;
    for (int r = 0; r < s.n; ++r) {
      const float got = yf[size_t(r)];
      if (non_finite) {
        EXPECT_TRUE(std::isnan(got) && std::isnan(ref.y[size_t(r)])) << "row " << r << ": " << got;
        continue;
      }
      const double err = std::fabs(double(got) - double(ref.y[size_t(r)])), tol = ref.tol[size_t(r)];
      worst = std::max(worst, err / tol);
      if (!(err <= tol) && ++failures <= 5)
        ADD_FAILURE() << "y[" << r << "] = " << got << ", CPU " << ref.y[size_t(r)] << ", |err| " << err << " > tol "
                      << tol;
      // The output is the float rounded to the dtype.
      EXPECT_EQ(y.get(size_t(r)), test::HostArray::from_floats(dt, {got}).get(0)) << "row " << r;
    }
    std::printf("int8 gemv %s %s n=%d k=%d ctas=%d%s: max |err| / tol = %.3f\n",
                std::string(quant_traits(q).name).c_str(), std::string(dtype_name(dt)).c_str(), s.n, s.k, s.ctas,
                non_finite ? " (non-finite x)" : "", worst);
  }
}

class QuantGemvI8Emulation : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantGemvI8Emulation, Bf16MatchesCpuMatmul) { check<__nv_bfloat16>(GetParam(), DType::kBF16, false); }
TEST_P(QuantGemvI8Emulation, Fp16MatchesCpuMatmul) { check<__half>(GetParam(), DType::kF16, false); }
TEST_P(QuantGemvI8Emulation, NonFiniteXGivesNaNAsOnTheCpu) { check<__nv_bfloat16>(GetParam(), DType::kBF16, true); }

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantGemvI8Emulation, ::testing::ValuesIn(test::kAllQuantTypes),
                         [](const auto& info) { return std::string(quant_traits(info.param).name); });

}  // namespace
}  // namespace pagoda
