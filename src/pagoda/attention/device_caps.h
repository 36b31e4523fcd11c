// PRIVATE to attention/: the compute capability of the device the attention host code launches on, asked
// once, for the features that depend on it (programmatic dependent launch and thread-block clusters from
// SM 9.0, the sm_90a-only FA3 kernel).
#pragma once

#include <cuda_runtime_api.h>

namespace pagoda::attention_host {

struct ComputeCapability {
  int major = 0, minor = 0;
};

// The calling thread's current device when first asked (pagoda drives one device per process); {0, 0}
// without one.
inline ComputeCapability device_compute_capability() {
  static const ComputeCapability cc = [] {
    ComputeCapability c;
    int dev = 0;
    if (cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&c.major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&c.minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess) {
      (void)cudaGetLastError();  // no device is an answer, not an error for the next check to find
      return ComputeCapability{};
    }
    return c;
  }();
  return cc;
}

}  // namespace pagoda::attention_host
