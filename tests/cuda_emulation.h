// Host emulation of a CUDA CTA for the emulation tests of kernels written against an `Ops` policy
// (attention/turboquant, attention/flashinfer, ops/cuda quant_gemv): one host thread per lane, the warp
// collectives emulated from the PTX definitions. A test runs the kernel's CTA body with run_cta() and passes
// an Ops struct derived from emu::Ops, adding what is its own (copies into its shared memory, checks).
//
// - mma.m16n8k16 (bf16 or fp16) and mma.m16n8k32 (e4m3): each lane posts its fragments, then computes its own
//   four outputs from everyone's. m16n8k16: A (16 x 16, row) element (r, k) in lane 4 (r % 8) + (k % 8) / 2,
//   register (r >= 8) + 2 (k >= 8), half k % 2; B (16 x 8) element (k, n) in lane 4 n + (k % 8) / 2, register
//   k >= 8, half k % 2. m16n8k32 e4m3: A element (r, k) in lane 4 (r % 8) + (k % 16) / 4, register (r >= 8) +
//   2 (k >= 16), byte k % 4; B element (k, n) in lane 4 n + (k % 16) / 4, register k >= 16, byte k % 4. C: lane
//   4 (r % 8) + n / 2, element 2 (r >= 8) + n % 2. The products are exact in float; the sum is float32, in k
//   order.
// - ldmatrix.x4 (.b16): lane 8 m + r posts the address of row r of matrix m; lane L receives in register m the
//   elements (L / 4, 2 (L % 4)) and (L / 4, 2 (L % 4) + 1) of matrix m, or with .trans (2 (L % 4), L / 4) and
//   (2 (L % 4) + 1, L / 4).
// - Shuffles through a per-warp exchange; __syncwarp and __syncthreads as barriers of the warp's and the CTA's
//   threads; cp.async groups complete at once (the copies themselves are the test's).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <barrier>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

namespace pagoda::emu {

struct Warp {
  std::barrier<> bar{32};
  uint32_t a[32][4];
  uint32_t b[32][2];
  float x[32];
  const uint8_t* addr[32];
};

struct Cta {
  explicit Cta(int threads) : bar(threads), warps(new Warp[size_t(threads / 32)]) {}
  std::barrier<> bar;
  std::unique_ptr<Warp[]> warps;
};

inline thread_local Cta* t_cta = nullptr;
inline thread_local int t_tid = 0;

// Runs body(tid) for tid in [0, threads) on as many host threads, as the lanes of one CTA.
template <typename Body>
void run_cta(int threads, Body&& body) {
  Cta cta(threads);
  std::vector<std::thread> lanes;
  lanes.reserve(size_t(threads));
  for (int tid = 0; tid < threads; ++tid)
    lanes.emplace_back([&, tid] {
      t_cta = &cta;
      t_tid = tid;
      body(tid);
    });
  for (auto& l : lanes) l.join();
}

inline float half_bits(uint32_t bits, bool f16) {
  uint16_t h = uint16_t(bits & 0xffff);
  if (f16) {
    __half_raw r;
    r.x = h;
    return __half2float(__half(r));
  }
  __nv_bfloat16_raw r;
  r.x = h;
  return __bfloat162float(__nv_bfloat16(r));
}
inline float e4m3_bits(uint32_t bits) {
  __nv_fp8_e4m3 v;
  v.__x = uint8_t(bits & 0xff);
  return float(v);
}

struct Ops {
  // c += A B with `kdim` products per output; product(w, r, k, n) reads the posted fragments.
  template <typename Product>
  static void mma_posted(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1, int kdim, Product product) {
    Warp& w = t_cta->warps[t_tid >> 5];
    const int lane = t_tid & 31;
    std::memcpy(w.a[lane], a, sizeof(a));
    w.b[lane][0] = b0;
    w.b[lane][1] = b1;
    w.bar.arrive_and_wait();
    const int g = lane >> 2, t = lane & 3;
    float out[4];
    for (int e = 0; e < 4; ++e) {
      const int r = g + 8 * (e >> 1), n = 2 * t + (e & 1);
      float s = c[e];
      for (int k = 0; k < kdim; ++k) s += product(w, r, k, n);
      out[e] = s;
    }
    w.bar.arrive_and_wait();  // nobody posts the next fragments before everyone has read these
    for (int e = 0; e < 4; ++e) c[e] = out[e];
  }
  // m16n8k16 with P = __half or __nv_bfloat16 operands.
  template <typename P>
  static void mma(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    constexpr bool kF16 = std::is_same_v<P, __half>;
    mma_posted(c, a, b0, b1, 16, [](const Warp& w, int r, int k, int n) {
      const uint32_t ra = w.a[4 * (r % 8) + (k % 8) / 2][(r >= 8) + 2 * (k >= 8)];
      const uint32_t rb = w.b[4 * n + (k % 8) / 2][k >= 8];
      return half_bits(k % 2 ? ra >> 16 : ra, kF16) * half_bits(k % 2 ? rb >> 16 : rb, kF16);
    });
  }
  // m16n8k32 with e4m3 operands.
  static void mma_e4m3(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
    mma_posted(c, a, b0, b1, 32, [](const Warp& w, int r, int k, int n) {
      const uint32_t ra = w.a[4 * (r % 8) + (k % 16) / 4][(r >= 8) + 2 * (k >= 16)];
      const uint32_t rb = w.b[4 * n + (k % 16) / 4][k >= 16];
      return e4m3_bits(ra >> (8 * (k % 4))) * e4m3_bits(rb >> (8 * (k % 4)));
    });
  }
  static void ldsm(uint32_t (&r)[4], const uint8_t* p, bool trans) {
    Warp& w = t_cta->warps[t_tid >> 5];
    const int lane = t_tid & 31;
    w.addr[lane] = p;
    w.bar.arrive_and_wait();
    for (int m = 0; m < 4; ++m) {
      uint16_t lo, hi;
      if (trans) {
        std::memcpy(&lo, w.addr[8 * m + 2 * (lane % 4)] + 2 * (lane / 4), 2);
        std::memcpy(&hi, w.addr[8 * m + 2 * (lane % 4) + 1] + 2 * (lane / 4), 2);
      } else {
        std::memcpy(&lo, w.addr[8 * m + lane / 4] + 4 * (lane % 4), 2);
        std::memcpy(&hi, w.addr[8 * m + lane / 4] + 4 * (lane % 4) + 2, 2);
      }
      r[m] = uint32_t(lo) | uint32_t(hi) << 16;
    }
    w.bar.arrive_and_wait();
  }
  static void ldsm_x4(uint32_t (&r)[4], const uint8_t* p) { ldsm(r, p, false); }
  static void ldsm_x4_trans(uint32_t (&r)[4], const uint8_t* p) { ldsm(r, p, true); }
  static float shfl(float v, int src_lane) {
    Warp& w = t_cta->warps[t_tid >> 5];
    w.x[t_tid & 31] = v;
    w.bar.arrive_and_wait();
    const float r = w.x[src_lane & 31];
    w.bar.arrive_and_wait();
    return r;
  }
  static float shfl_xor(float v, int mask) { return shfl(v, (t_tid & 31) ^ mask); }
  static void commit() {}
  template <int N>
  static void wait() {}
  static void sync_warp() { t_cta->warps[t_tid >> 5].bar.arrive_and_wait(); }
  static void sync_cta() { t_cta->bar.arrive_and_wait(); }
};

}  // namespace pagoda::emu
