// The quantized GEMV's CTA body (ops/cuda/quant_gemv_kernel.cuh) run on the host: one thread per lane, the
// warp collectives of ../cuda_emulation.h (mma.m16n8k16 from the PTX fragment layouts, barriers for
// __syncwarp and __syncthreads), cp.async as a copy. It checks the kernel's own code (the staging of
// misaligned rows, the fragment mapping of every block format, the scale algebra, the cross-warp sum) against
// a float64 reference on machines without a GPU; the GPU test (quant_gemv_test.cc) runs the compiled kernel.
#include <gtest/gtest.h>

#include <atomic>
#include <memory>

#include "../cuda_emulation.h"
#include "gpu_test_util.h"
#include "pagoda/ops/cuda/quant_gemv_kernel.cuh"
#include "quant_reference.h"

namespace pagoda {
namespace {

using namespace quant_gemv_detail;

thread_local uint8_t* t_smem = nullptr;  // the CTA's shared memory: "shared addresses" are offsets into it

// W's bytes: a global read outside them (the device's out-of-bounds access) counts in g_w_overreads.
const uint8_t* g_w_begin = nullptr;
const uint8_t* g_w_end = nullptr;
std::atomic<int> g_w_overreads{0};

void check_w_read(const void* p, size_t bytes) {
  const uint8_t* b = static_cast<const uint8_t*>(p);
  if (b < g_w_begin || b + bytes > g_w_end) ++g_w_overreads;
}

// The host's Ops: the warp collectives of ../cuda_emulation.h (mma, shuffles, barriers); shared memory as
// offsets into the CTA's buffer, global reads of W checked against its bytes, cp.async as a copy.
struct HostOps : emu::Ops {
  static uint2 load8(const void* p) {
    uint2 v;
    std::memcpy(&v, p, 8);
    return v;
  }
  static uint32_t shared_addr(const void* p) { return uint32_t(static_cast<const uint8_t*>(p) - t_smem); }
  static void copy16(uint32_t smem, const void* gmem) {
    check_w_read(gmem, 16);
    std::memcpy(t_smem + smem, gmem, 16);
  }
  static void copy16_upto(uint32_t smem, const void* gmem, uint32_t bytes) {
    EXPECT_TRUE(bytes >= 1 && bytes <= 16) << bytes;
    check_w_read(gmem, bytes);
    std::memcpy(t_smem + smem, gmem, bytes);
    std::memset(t_smem + smem + bytes, 0, 16 - bytes);
  }
};

// Runs `ctas` CTAs one after the other, each looping over its row tiles as on the device.
template <QuantType Q, typename T, int NT, int S = 0>
void emulate_nt(const T* x, const uint8_t* w, const T* bias, T* y, int m, int n, int k, int ldy, int ctas) {
  for (int cta = 0; cta < ctas; ++cta) {
    std::unique_ptr<uint8_t[]> smem_owner(new uint8_t[Cfg<Q, NT, S>::kSmemBytes + 16]);
    uint8_t* smem = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_owner.get()) + 15) & ~uintptr_t(15));
    static_assert(kThreads == 32 * kWarps);
    emu::run_cta(kThreads, [&](int tid) {
      t_smem = smem;
      gemv_cta<Q, T, NT, S, HostOps>(x, w, bias, y, m, n, k, ldy, cta, ctas, tid, smem);
    });
  }
}

// The kernel the launch picks for m (quant_gemv_kernel.cuh's launch_quant_gemv).
template <QuantType Q, typename T>
void emulate(const T* x, const uint8_t* w, const T* bias, T* y, int m, int n, int k, int ldy, int ctas) {
  if (m == 1) emulate_nt<Q, T, 0>(x, w, bias, y, m, n, k, ldy, ctas);
  else if (m <= 8) emulate_nt<Q, T, 1>(x, w, bias, y, m, n, k, ldy, ctas);
  else emulate_nt<Q, T, kMaxTiles>(x, w, bias, y, m, n, k, ldy, ctas);
}

template <typename T>
void run_case(QuantType q, const T* x, const uint8_t* w, const T* bias, T* y, int m, int n, int k, int ldy, int ctas) {
  switch (q) {
    case QuantType::kQ4_0: return emulate<QuantType::kQ4_0>(x, w, bias, y, m, n, k, ldy, ctas);
    case QuantType::kQ4_1: return emulate<QuantType::kQ4_1>(x, w, bias, y, m, n, k, ldy, ctas);
    case QuantType::kQ5_0: return emulate<QuantType::kQ5_0>(x, w, bias, y, m, n, k, ldy, ctas);
    case QuantType::kQ5_1: return emulate<QuantType::kQ5_1>(x, w, bias, y, m, n, k, ldy, ctas);
    case QuantType::kQ8_0: return emulate<QuantType::kQ8_0>(x, w, bias, y, m, n, k, ldy, ctas);
    case QuantType::kQ4_K: return emulate<QuantType::kQ4_K>(x, w, bias, y, m, n, k, ldy, ctas);
    case QuantType::kQ5_K: return emulate<QuantType::kQ5_K>(x, w, bias, y, m, n, k, ldy, ctas);
    case QuantType::kQ6_K: return emulate<QuantType::kQ6_K>(x, w, bias, y, m, n, k, ldy, ctas);
    case QuantType::kNone: break;
  }
}

struct Shape {
  int m, n, k;
  bool bias;
  int ctas = 0;  // CTAs of the launch (0: one per 16-row tile); fewer loop over several tiles each
};

// The 32-weight formats: k = 32 x odd (rows 2-byte aligned for Q4_0, Q5_0, Q8_0), a partial last slab, a
// warp with more slabs than ring stages (k = 8192), m across the 8-token tiles, n not a multiple of 16
// with rows both 16-byte aligned (k = 512) and not.
// A CTA looping over tiles (ctas < tiles): its ring runs across tile ends, the last tile partial, with one
// token (m = 1: the one-token kernel) and more.
const Shape kLegacyShapes[] = {{1, 16, 256, false}, {3, 37, 416, true}, {8, 20, 224, false}, {9, 16, 288, false},
                               {32, 17, 96, true},  {2, 16, 8192, false}, {4, 21, 512, true},
                               {1, 50, 416, true, 2}, {9, 37, 2048, false, 1}};
// The k-quants: k = 256 x odd (Q6_K rows of 210 x odd bytes), 40 blocks (5 slabs a warp).
const Shape kKShapes[] = {{1, 16, 256, false}, {5, 33, 768, true}, {8, 16, 10240, false},
                          {17, 18, 512, false}, {32, 16, 256, true}, {1, 50, 2816, true, 2}, {3, 37, 768, false, 1}};

template <typename T>
void check_type(QuantType q, DType dt) {
  SCOPED_TRACE(std::string(quant_traits(q).name) + " " + std::string(dtype_name(dt)) + " " + test::seed_note());
  test::Rng rng(uint64_t(q) * 7 + uint64_t(dt));
  const bool kq = quant_traits(q).block_elems == 256;
  for (const Shape& s : kq ? std::vector<Shape>(std::begin(kKShapes), std::end(kKShapes))
                           : std::vector<Shape>(std::begin(kLegacyShapes), std::end(kLegacyShapes))) {
    SCOPED_TRACE("m=" + std::to_string(s.m) + " n=" + std::to_string(s.n) + " k=" + std::to_string(s.k) +
                 " ctas=" + std::to_string(s.ctas));
    const int ctas = s.ctas > 0 ? s.ctas : (s.n + kTileRows - 1) / kTileRows;
    const size_t row_bytes = quant_row_bytes(q, s.k);
    std::vector<uint8_t> wq = test::random_blocks(q, rng.gen(), s.n, s.k);
    // 16-byte aligned (the kernel's PRECOND); no read may pass its last byte (checked by HostOps)
    std::unique_ptr<uint8_t[]> w_owner(new uint8_t[wq.size() + 16]);
    uint8_t* w = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(w_owner.get()) + 15) & ~uintptr_t(15));
    std::memcpy(w, wq.data(), wq.size());
    g_w_begin = w, g_w_end = w + wq.size(), g_w_overreads = 0;
    const test::HostArray x = test::random_array(rng, dt, size_t(s.m) * s.k);
    const test::HostArray b = test::random_array(rng, dt, size_t(s.n), 0.1f);
    const int ldy = s.bias ? s.n + 3 : s.n;  // a row stride past n: the gaps must stay poisoned
    test::HostArray y(dt, size_t(s.m) * ldy);
    std::fill(y.bytes.begin(), y.bytes.end(), uint8_t(test::kPoisonByte));
    run_case<T>(q, reinterpret_cast<const T*>(x.bytes.data()), w, s.bias ? reinterpret_cast<const T*>(b.bytes.data()) : nullptr,
                reinterpret_cast<T*>(y.bytes.data()), s.m, s.n, s.k, ldy, ctas);
    if (s.m == 1 && (q == QuantType::kQ4_K || q == QuantType::kQ8_0) && std::is_same_v<T, bf16>) {
      // The ring depths the benchmark may pick (QuantGemvParams::stages) give the same bits.
      for (int stages : {2, 3, 4}) {
        test::HostArray ys(dt, size_t(ldy));
        const T* bp = s.bias ? reinterpret_cast<const T*>(b.bytes.data()) : nullptr;
        const T* xp = reinterpret_cast<const T*>(x.bytes.data());
        T* yp = reinterpret_cast<T*>(ys.bytes.data());
        auto go = [&](auto qc) {
          constexpr QuantType kQ = decltype(qc)::value;
          if (stages == 2) emulate_nt<kQ, T, 0, 2>(xp, w, bp, yp, 1, s.n, s.k, ldy, ctas);
          else if (stages == 3) emulate_nt<kQ, T, 0, 3>(xp, w, bp, yp, 1, s.n, s.k, ldy, ctas);
          else emulate_nt<kQ, T, 0, 4>(xp, w, bp, yp, 1, s.n, s.k, ldy, ctas);
        };
        if (q == QuantType::kQ4_K) go(std::integral_constant<QuantType, QuantType::kQ4_K>{});
        else go(std::integral_constant<QuantType, QuantType::kQ8_0>{});
        EXPECT_EQ(std::memcmp(ys.bytes.data(), y.bytes.data(), size_t(s.n) * dtype_size(dt)), 0)
            << stages << " stages differ from the default";
      }
    }
    if (s.m > 1) {
      // Batch invariance: token 0 alone (the one-token kernel) gives row 0's bits.
      test::HostArray y1(dt, size_t(ldy));
      run_case<T>(q, reinterpret_cast<const T*>(x.bytes.data()), w,
                  s.bias ? reinterpret_cast<const T*>(b.bytes.data()) : nullptr, reinterpret_cast<T*>(y1.bytes.data()),
                  1, s.n, s.k, ldy, ctas);
      EXPECT_EQ(std::memcmp(y1.bytes.data(), y.bytes.data(), size_t(s.n) * dtype_size(dt)), 0)
          << "token 0 differs between m = 1 and m = " << s.m;
    }
    for (int j = 0; j < s.m; ++j)
      for (int c = s.n; c < ldy; ++c) EXPECT_TRUE(std::isnan(y.get(size_t(j) * ldy + c))) << "gap written";
    EXPECT_EQ(g_w_overreads.load(), 0) << "copies of W read outside its bytes";

    std::vector<double> wr(size_t(s.k)), mag(size_t(s.k));
    int failures = 0;
    double worst = 0;
    for (int r = 0; r < s.n; ++r) {
      test::ref_decode_row(q, w + r * row_bytes, s.k, wr.data(), mag.data());
      for (int j = 0; j < s.m; ++j) {
        double ref = s.bias ? b.get(size_t(r)) : 0.0, sum_mag = std::fabs(ref);
        for (int i = 0; i < s.k; ++i) {
          const double xv = x.get(size_t(j) * s.k + i);
          ref += wr[size_t(i)] * xv;
          sum_mag += mag[size_t(i)] * std::fabs(xv);
        }
        const double got = y.get(size_t(j) * ldy + r);
        const double tol = test::gemv_error_bound(sum_mag, s.k, std::ldexp(1.0, -24)) +
                           test::unit_roundoff(dt) * std::fabs(ref) + test::half_min_subnormal(dt);
        const double err = std::fabs(got - ref);
        worst = std::max(worst, err / tol);
        if (!(err <= tol) && ++failures <= 5)
          ADD_FAILURE() << "y[" << j << ", " << r << "] = " << got << ", reference " << ref << ", |err| " << err
                        << " > tol " << tol;
      }
    }
    std::printf("%s %s m=%d n=%d k=%d: max |err| / tol = %.3f\n", std::string(quant_traits(q).name).c_str(),
                std::string(dtype_name(dt)).c_str(), s.m, s.n, s.k, worst);
  }
}

class QuantGemvEmulation : public ::testing::TestWithParam<QuantType> {};

TEST_P(QuantGemvEmulation, Bf16MatchesFloat64Reference) { check_type<bf16>(GetParam(), DType::kBF16); }
TEST_P(QuantGemvEmulation, Fp16MatchesFloat64Reference) { check_type<f16>(GetParam(), DType::kF16); }

INSTANTIATE_TEST_SUITE_P(AllFormats, QuantGemvEmulation, ::testing::ValuesIn(test::kAllQuantTypes),
                         [](const auto& info) { return std::string(quant_traits(info.param).name); });

}  // namespace
}  // namespace pagoda
