// Quantized GEMV (ops/cuda/quant_gemv.h) at Llama-3-8B's decode shapes beside the bf16 cuBLASLt GEMM on the
// same shapes, in one run: microseconds, weight bytes read per second, the fraction of the device-to-device
// copy bandwidth measured first (bytes read + written), and the speedup over bf16. The last table sums a
// decode step's matrices (32 layers of q|k|v, o, gate|up, down, and the lm_head): the GEMV part of batch-1
// decode, whose ratio to bf16 bounds the end-to-end speedup.
//
//   quant_gemv_bench [--iters N]
//   quant_gemv_bench --profile TYPE SHAPE M [--ctas C] [--stages S] [--16bit]   (a few launches of one
//                                                          case, for a profiler; --16bit: the 16-bit kernel)
//
// A third table runs Q4_K and Q8_0 at m = 1 with each kernel: the default (the int8 kernel), the 16-bit one
// (batch_invariant), and the 16-bit one with the launch knobs of QuantGemvParams (ring depth, CTAs); its last
// lines sum a decode step's GEMVs per column.
//
// Weights are rotated among enough copies to exceed the L2 cache twice, so every launch reads DRAM; inputs
// are random (quantized from N(0, 0.05^2) by the device quantizer), never zeros.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string>
#include <strings.h>
#include <vector>

#include "pagoda/ops/cuda/device_buffer.h"
#include "pagoda/ops/cuda/gemm.h"
#include "pagoda/ops/cuda/quant_gemv.h"
#include "pagoda/ops/cuda/quant_quantize.h"
#include "pagoda/ops/cuda/random_fill.h"

using namespace pagoda;

namespace {

void fill(void* data, int64_t n, DType dt, uint64_t seed, float std) {
  RandomFillParams p;
  p.data = data;
  p.n = n;
  p.dtype = dt;
  p.seed = seed;
  p.std = std;
  random_fill(p, nullptr);
}

struct Shape {
  const char* name;
  int n, k, per_step;  // per_step: how many a decode step runs (32 layers, or 1 lm_head)
};
const Shape kShapes[] = {{"qkv", 6144, 4096, 32}, {"o", 4096, 4096, 32}, {"gate_up", 28672, 4096, 32},
                         {"down", 4096, 14336, 32}, {"lm_head", 128256, 4096, 1}};
const QuantType kTypes[] = {QuantType::kQ4_K, QuantType::kQ8_0, QuantType::kQ6_K, QuantType::kQ5_K,
                            QuantType::kQ4_0, QuantType::kQ4_1, QuantType::kQ5_0, QuantType::kQ5_1};

double median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Median milliseconds of `iters` launches of f(i), each timed with events after 5 warm-up launches.
template <typename F>
double time_ms(int iters, F&& f) {
  for (int i = 0; i < 5; ++i) f(i);
  cudaEvent_t a, b;
  PAGODA_CUDA_CHECK(cudaEventCreate(&a));
  PAGODA_CUDA_CHECK(cudaEventCreate(&b));
  std::vector<float> ms;
  for (int i = 0; i < iters; ++i) {
    PAGODA_CUDA_CHECK(cudaEventRecord(a));
    f(i);
    PAGODA_CUDA_CHECK(cudaEventRecord(b));
    PAGODA_CUDA_CHECK(cudaEventSynchronize(b));
    float t = 0;
    PAGODA_CUDA_CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  PAGODA_CUDA_CHECK(cudaEventDestroy(a));
  PAGODA_CUDA_CHECK(cudaEventDestroy(b));
  return median(ms);
}

// `copies` buffers of `bytes` each, filled with type q's blocks of N(0, 0.05^2) (or bf16 values for kNone).
std::vector<DeviceBuffer> make_weights(QuantType q, const Shape& s, int copies) {
  std::vector<DeviceBuffer> out;
  const size_t elems = size_t(s.n) * s.k;
  DeviceBuffer f32(q == QuantType::kNone ? 0 : elems * 4);
  for (int c = 0; c < copies; ++c) {
    if (q == QuantType::kNone) {
      out.emplace_back(elems * 2);
      fill(out.back().data(), int64_t(elems), DType::kBF16, uint64_t(c) + 1, 0.05f);
    } else {
      out.emplace_back(size_t(s.n) * quant_row_bytes(q, s.k));
      fill(f32.data(), int64_t(elems), DType::kF32, uint64_t(c) + 1, 0.05f);
      QuantQuantizeParams qp;
      qp.x = f32.as<float>();
      qp.out = out.back().data();
      qp.type = q;
      qp.rows = s.n;
      qp.cols = s.k;
      quant_quantize(qp, nullptr);
    }
  }
  PAGODA_CUDA_CHECK(cudaDeviceSynchronize());
  return out;
}

}  // namespace

QuantType type_named(const char* s) {
  for (QuantType q : kTypes)
    if (strcasecmp(std::string(quant_traits(q).name).c_str(), s) == 0) return q;
  return QuantType::kNone;
}

// --profile: 3 launches of one case on rotating weights (after one warm-up), nothing timed.
int profile(QuantType q, const Shape& s, int m, int ctas, int stages, bool bits16) {
  DeviceBuffer x(size_t(32) * s.k * 2), y(size_t(32) * s.n * 2);
  fill(x.data(), int64_t(32) * s.k, DType::kBF16, 99, 1.0f);
  std::vector<DeviceBuffer> w = make_weights(q, s, 4);
  for (int i = 0; i < 4; ++i) {
    QuantGemvParams qp;
    qp.x = x.data(), qp.w = w[size_t(i)].data(), qp.type = q, qp.y = y.data(), qp.m = m, qp.n = s.n, qp.k = s.k;
    qp.dtype = DType::kBF16, qp.ctas = ctas, qp.stages = stages, qp.batch_invariant = bits16;
    quant_gemv(qp, nullptr);
  }
  PAGODA_CUDA_CHECK(cudaDeviceSynchronize());
  std::printf("profiled %s %s m=%d ctas=%d stages=%d %s\n", std::string(quant_traits(q).name).c_str(), s.name, m, ctas,
              stages, bits16 ? "16-bit" : "default");
  return 0;
}

int main(int argc, char** argv) {
  int iters = 50, prof_m = 0, prof_ctas = 0, prof_stages = 0;
  bool prof_16bit = false;
  const char *prof_type = nullptr, *prof_shape = nullptr;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--iters") == 0 && i + 1 < argc) {
      iters = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--profile") == 0 && i + 3 < argc) {
      prof_type = argv[++i], prof_shape = argv[++i], prof_m = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--ctas") == 0 && i + 1 < argc) {
      prof_ctas = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--stages") == 0 && i + 1 < argc) {
      prof_stages = std::atoi(argv[++i]);
    } else if (std::strcmp(argv[i], "--16bit") == 0) {
      prof_16bit = true;
    } else {
      std::fprintf(stderr, "usage: quant_gemv_bench [--iters N] | --profile TYPE SHAPE M [--ctas C] [--stages S] [--16bit]\n");
      return std::strcmp(argv[i], "--help") == 0 ? 0 : 2;
    }
  }
  if (iters < 1) {
    std::fprintf(stderr, "--iters needs a positive count\n");
    return 2;
  }
  if (prof_type) {
    const QuantType q = type_named(prof_type);
    const Shape* sh = nullptr;
    for (const Shape& s : kShapes)
      if (std::strcmp(s.name, prof_shape) == 0) sh = &s;
    if (q == QuantType::kNone || !sh || prof_m < 1 || prof_m > kQuantGemvMaxRows) {
      std::fprintf(stderr, "--profile: unknown type or shape, or m out of 1..%d\n", kQuantGemvMaxRows);
      return 2;
    }
    return profile(q, *sh, prof_m, prof_ctas, prof_stages, prof_16bit);
  }
  int dev = 0, l2 = 0;
  cudaDeviceProp prop{};
  PAGODA_CUDA_CHECK(cudaGetDevice(&dev));
  PAGODA_CUDA_CHECK(cudaGetDeviceProperties(&prop, dev));
  PAGODA_CUDA_CHECK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  std::printf("device: %s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, l2 >> 20);

  // Copy bandwidth: a 1 GiB device-to-device copy, bytes read + written.
  const size_t copy_bytes = size_t(1) << 30;
  DeviceBuffer src(copy_bytes), dst(copy_bytes);
  src.fill_bytes(1);
  const double copy_ms = time_ms(20, [&](int) {
    PAGODA_CUDA_CHECK(cudaMemcpyAsync(dst.data(), src.data(), copy_bytes, cudaMemcpyDeviceToDevice));
  });
  const double peak = 2.0 * copy_bytes / (copy_ms * 1e-3);
  std::printf("copy bandwidth (read + write): %.0f GB/s\n\n", peak * 1e-9);
  src.reset();
  dst.reset();

  GemmRunner gemm;
  const int ms_list[] = {1, 2, 8, 32};
  // step_us[type index or bf16 last][m index]: summed decode-step GEMV time.
  std::vector<std::vector<double>> step_us(std::size(kTypes) + 1, std::vector<double>(std::size(ms_list), 0.0));
  std::printf("%-8s %-7s %6s %3s %10s %9s %7s %8s\n", "shape", "type", "n x k", "m", "us", "GB/s", "of copy",
              "vs bf16");
  for (const Shape& s : kShapes) {
    DeviceBuffer x(size_t(32) * s.k * 2), y(size_t(32) * s.n * 2);
    fill(x.data(), int64_t(32) * s.k, DType::kBF16, 99, 1.0f);
    double bf16_us[std::size(ms_list)];
    for (int ti = -1; ti < int(std::size(kTypes)); ++ti) {
      const QuantType q = ti < 0 ? QuantType::kNone : kTypes[ti];
      const size_t bytes = q == QuantType::kNone ? size_t(s.n) * s.k * 2 : size_t(s.n) * quant_row_bytes(q, s.k);
      const int copies = int(std::max<size_t>(2, (size_t(4) * l2 + bytes - 1) / bytes));
      std::vector<DeviceBuffer> w = make_weights(q, s, copies);
      for (size_t mi = 0; mi < std::size(ms_list); ++mi) {
        const int m = ms_list[mi];
        const double ms = time_ms(iters, [&](int i) {
          const void* wi = w[size_t(i) % w.size()].data();
          if (q == QuantType::kNone) {
            GemmParams gp;
            gp.x = x.data(), gp.w = wi, gp.y = y.data(), gp.m = m, gp.n = s.n, gp.k = s.k, gp.dtype = DType::kBF16;
            gemm.run(gp, nullptr);
          } else {
            QuantGemvParams qp;
            qp.x = x.data(), qp.w = wi, qp.type = q, qp.y = y.data(), qp.m = m, qp.n = s.n, qp.k = s.k;
            qp.dtype = DType::kBF16;
            quant_gemv(qp, nullptr);
          }
        });
        PAGODA_CUDA_CHECK(cudaGetLastError());
        const double us = ms * 1e3, gbs = bytes / (ms * 1e-3) * 1e-9;
        if (q == QuantType::kNone) bf16_us[mi] = us;
        step_us[ti < 0 ? std::size(kTypes) : size_t(ti)][mi] += us * s.per_step;
        std::printf("%-8s %-7s %6dx%-5d %3d %10.1f %9.0f %6.0f%% %7.2fx\n", s.name,
                    q == QuantType::kNone ? "bf16" : std::string(quant_traits(q).name).c_str(), s.n, s.k, m, us, gbs,
                    100.0 * gbs * 1e9 / peak, bf16_us[mi] / us);
      }
    }
  }
  // m = 1 by kernel: the int8 kernel (the default), the 16-bit one, and the 16-bit one's launch knobs: ring
  // depths 2, 3, 4 (one CTA per tile), and fixed CTAs (2 or 3 an SM) that loop over the tiles.
  std::printf("\nm = 1 by kernel (us; 16-bit: one CTA per 16-row tile unless the column says):\n%-8s %-5s %9s %9s %9s "
              "%9s %9s %9s %9s\n", "shape", "type", "int8", "16-bit", "2 stages", "3 stages", "4 stages", "2/SM", "3/SM");
  for (QuantType q : {QuantType::kQ4_K, QuantType::kQ8_0}) {
    std::vector<double> step(7, 0.0);
    for (const Shape& s : kShapes) {
      DeviceBuffer x(size_t(s.k) * 2), y(size_t(s.n) * 2);
      fill(x.data(), s.k, DType::kBF16, 98, 1.0f);
      const size_t bytes = size_t(s.n) * quant_row_bytes(q, s.k);
      std::vector<DeviceBuffer> w = make_weights(q, s, int(std::max<size_t>(2, (size_t(4) * l2 + bytes - 1) / bytes)));
      std::printf("%-8s %-5s", s.name, std::string(quant_traits(q).name).c_str());
      const int sms = prop.multiProcessorCount;
      // {stages, ctas, batch_invariant}: the knobs select the 16-bit kernel.
      const struct { int stages, ctas; bool invariant; } knobs[] = {
          {0, 0, false}, {0, 0, true}, {2, 0, true}, {3, 0, true}, {4, 0, true}, {0, 2 * sms, true}, {0, 3 * sms, true}};
      for (size_t ki = 0; ki < std::size(knobs); ++ki) {
        const double ms = time_ms(iters, [&](int i) {
          QuantGemvParams qp;
          qp.x = x.data(), qp.w = w[size_t(i) % w.size()].data(), qp.type = q, qp.y = y.data(), qp.m = 1;
          qp.n = s.n, qp.k = s.k, qp.dtype = DType::kBF16, qp.ctas = knobs[ki].ctas, qp.stages = knobs[ki].stages;
          qp.batch_invariant = knobs[ki].invariant;
          quant_gemv(qp, nullptr);
        });
        std::printf(" %9.1f", ms * 1e3);
        step[ki] += ms * 1e3 * s.per_step;
      }
      std::printf("\n");
    }
    std::printf("%-8s %-5s", "step(ms)", std::string(quant_traits(q).name).c_str());
    for (double us : step) std::printf(" %9.3f", us * 1e-3);
    std::printf("\n");
  }

  std::printf("\ndecode step, GEMV part (32 layers + lm_head), ms and speedup over bf16:\n%-7s", "type");
  for (int m : ms_list) std::printf("      m=%-2d        ", m);
  std::printf("\n");
  for (size_t ti = 0; ti <= std::size(kTypes); ++ti) {
    std::printf("%-7s", ti == std::size(kTypes) ? "bf16" : std::string(quant_traits(kTypes[ti]).name).c_str());
    for (size_t mi = 0; mi < std::size(ms_list); ++mi)
      std::printf("  %8.3f (%5.2fx)", step_us[ti][mi] * 1e-3, step_us[std::size(kTypes)][mi] / step_us[ti][mi]);
    std::printf("\n");
  }
  return 0;
}
