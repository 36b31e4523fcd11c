// PRIVATE to attention/: the compute capability and launch limits of the device the attention host code
// launches on, asked once, for the features that depend on them (programmatic dependent launch and
// thread-block clusters from SM 9.0, the sm_90a-only FA3 kernel, CTAs given an SM each).
#pragma once

#include <cuda_runtime_api.h>

#include <utility>

namespace pagoda::attention_host {

struct ComputeCapability {
  int major = 0, minor = 0;
  int sm_count = 0;         // multiprocessors
  int smem_block_optin = 0;  // the most dynamic shared memory a block may ask for, in bytes
};

// The calling thread's current device when first asked (pagoda drives one device per process); {0, 0}
// without one.
inline ComputeCapability device_compute_capability() {
  static const ComputeCapability cc = [] {
    ComputeCapability c;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&c.major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&c.minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&c.sm_count, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&c.smem_block_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) {
      (void)cudaGetLastError();  // no device is an answer, not an error for the next check to find
      return ComputeCapability{};
    }
    return c;
  }();
  return cc;
}

// Programmatic dependent launch (SM 9.0): a kernel launched with programmatic stream serialization may
// place its CTAs before the previous kernel of the stream ends, and waits in griddepcontrol.wait.
inline bool pdl_supported() { return device_compute_capability().major >= 9; }

// The launch attribute that asks for it (cudaLaunchKernelEx).
inline cudaLaunchAttribute programmatic_serialization() {
  cudaLaunchAttribute a = {};
  a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  a.val.programmaticStreamSerializationAllowed = 1;
  return a;
}

#ifdef __CUDACC__
// kernel<<<grid, block, 0, stream>>>(args...), with programmatic stream serialization where the device has it
// (pdl_supported()): for a kernel that waits in griddepcontrol.wait before it reads what the stream's previous
// kernel wrote, so that its launch and CTA placement overlap that kernel's tail.
template <typename... Params, typename... Args>
cudaError_t launch_programmatic(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.stream = stream;
  cudaLaunchAttribute attr[1] = {programmatic_serialization()};
  cfg.attrs = attr;
  cfg.numAttrs = pdl_supported() ? 1 : 0;
  return cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
}
#endif  // __CUDACC__

}  // namespace pagoda::attention_host
