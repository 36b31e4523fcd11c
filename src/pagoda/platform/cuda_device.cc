// CUDA device detection through the CUDA runtime (built only with CUDA).
#include <cuda_runtime_api.h>

#include "pagoda/platform/device.h"

namespace pagoda {

bool cuda_runtime_built() { return true; }

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
