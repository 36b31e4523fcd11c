// CUDA device detection through the CUDA runtime (built only with CUDA).
#include <cuda_runtime_api.h>

#include "pagoda/platform/device.h"

#include <algorithm>
#include <vector>

namespace pagoda {

bool cuda_runtime_built() { return true; }

double measure_cuda_copy_bandwidth() {
  const size_t n = size_t(1) << 30;
  void *a = nullptr, *b = nullptr;
  if (cudaMalloc(&a, n) != cudaSuccess || cudaMalloc(&b, n) != cudaSuccess) {
    cudaFree(a);
    cudaGetLastError();
    return 0.0;
  }
  cudaMemset(a, 1, n);
  cudaEvent_t e0, e1;
  cudaEventCreate(&e0);
  cudaEventCreate(&e1);
  std::vector<float> ms;
  for (int i = 0; i < 8; ++i) {
    cudaEventRecord(e0);
    cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice);
    cudaEventRecord(e1);
    cudaEventSynchronize(e1);
    float t = 0;
    cudaEventElapsedTime(&t, e0, e1);
    if (i >= 2) ms.push_back(t);  // the first copies warm up
  }
  std::sort(ms.begin(), ms.end());
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return 2.0 * double(n) / (double(ms[ms.size() / 2]) * 1e-3) / 1e12;
}

std::optional<DeviceInfo> detect_cuda_device(int index) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count <= index) {
    cudaGetLastError();  // clear the sticky "no device" error
    return std::nullopt;
  }
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, index) != cudaSuccess) return std::nullopt;
  DeviceInfo d;
  d.kind = DeviceKind::kCuda;
  d.name = prop.name;
  d.cc = ComputeCapability{prop.major, prop.minor};
  d.sm_count = prop.multiProcessorCount;
  d.total_memory = prop.totalGlobalMem;
  size_t free_b = 0, total_b = 0;
  if (cudaSetDevice(index) == cudaSuccess && cudaMemGetInfo(&free_b, &total_b) == cudaSuccess) d.free_memory = free_b;
  d.cpu = detect_cpu();
  return d;
}

}  // namespace pagoda
