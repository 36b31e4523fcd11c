// What the CUDA benchmarks of bench/ share: CK (a checked CUDA call that throws, so that one shape's failure
// is reported and the other shapes still run), DeviceBuffer (device memory freed on every path out of a
// shape), a hash for filling inputs with random device values (never zeros: an all-zero input can run faster
// than real data), and the device-to-device copy bandwidth, the ceiling of the memory-bound benchmarks.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#define CK(x)                                                                                              \
  do {                                                                                                     \
    cudaError_t e_ = (x);                                                                                  \
    if (e_ != cudaSuccess)                                                                                 \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + " " + #x + ": " + \
                               cudaGetErrorString(e_));                                                    \
  } while (0)

namespace pagoda::bench {

class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t bytes) { CK(cudaMalloc(&p_, std::max<size_t>(bytes, 1))); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }

 private:
  void* p_ = nullptr;
};

// 32 well-mixed bits of element i under `seed`.
__device__ __forceinline__ uint32_t mix(uint64_t i, uint32_t seed) {
  uint32_t x = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 0x85ebca6bu;
  x ^= x >> 13;
  x *= 0x5bd1e995u;
  return x ^ (x >> 15);
}

// Device-to-device copy bandwidth in TB/s, counting bytes read and written: the median of 11 copies of `bytes`.
inline double measure_copy_tbs(size_t bytes = size_t(4) << 30) {
  DeviceBuffer a(bytes), b(bytes);
  CK(cudaMemset(a.as<void>(), 1, bytes));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> t;
  for (int i = 0; i < 11; ++i) {
    CK(cudaEventRecord(e0));
    CK(cudaMemcpyAsync(b.as<void>(), a.as<void>(), bytes, cudaMemcpyDeviceToDevice));
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    t.push_back(ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(t.begin(), t.end());
  return 2.0 * double(bytes) / (t[t.size() / 2] * 1e-3) / 1e12;
}

}  // namespace pagoda::bench
