// What pagoda runs on: a CUDA device (detected through the CUDA runtime, or simulated for the explain
// command and tests) or the host CPU with its ISA features.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace pagoda {

enum class DeviceKind { kCpu, kCuda };

struct ComputeCapability {
  int major = 0;
  int minor = 0;
  auto operator<=>(const ComputeCapability&) const = default;
  std::string str() const { return std::to_string(major) + "." + std::to_string(minor); }
};

// Parses "X.Y" (integers); nullopt when malformed.
std::optional<ComputeCapability> parse_compute_capability(const std::string& s);

struct CpuInfo {
  std::string model_name;  // from /proc/cpuinfo where available
  std::string arch;        // x86_64, aarch64, ...
  int logical_cores = 1;
  bool avx2 = false, fma = false, avx512f = false, avx512bf16 = false, amx = false, neon = false;
  std::string isa_summary() const;  // "AVX2 FMA" ...
};

struct DeviceInfo {
  DeviceKind kind = DeviceKind::kCpu;
  std::string name;                     // "NVIDIA H200", "CUDA device" when simulated, CPU model otherwise
  std::optional<ComputeCapability> cc;  // CUDA only
  int sm_count = 0;
  uint64_t total_memory = 0;
  uint64_t free_memory = 0;
  bool simulated = false;
  CpuInfo cpu;  // always filled: the host
};

CpuInfo detect_cpu();
// The host's physical memory in bytes; 0 when the system does not say.
uint64_t host_memory_bytes();
// The host CPU as a device (total_memory: host_memory_bytes()).
DeviceInfo cpu_device();
// True when this binary was built with the CUDA runtime.
bool cuda_runtime_built();
// The first CUDA device, when this binary has CUDA and a device is present.
std::optional<DeviceInfo> detect_cuda_device(int index = 0);
// A CUDA device that exists only in name (explain command, tests): every rule runs, nothing is touched.
DeviceInfo simulated_cuda_device(ComputeCapability cc);
// --device auto: the CUDA device when present, else the CPU.
DeviceInfo detect_default_device();
std::string describe(const DeviceInfo& d);
// Device-to-device copy bandwidth of the first CUDA device in TB/s (bytes read + written), median of several
// 1 GiB copies; 0 without CUDA. The ceiling memory-bound benchmarks report against.
double measure_cuda_copy_bandwidth();

}  // namespace pagoda
