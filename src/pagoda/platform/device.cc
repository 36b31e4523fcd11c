#include "pagoda/platform/device.h"

#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "pagoda/core/strings.h"

namespace pagoda {

std::optional<ComputeCapability> parse_compute_capability(const std::string& s) {
  auto dot = s.find('.');
  if (dot == std::string::npos) return std::nullopt;
  long long major = 0, minor = 0;
  if (!parse_int64(s.substr(0, dot), &major) || !parse_int64(s.substr(dot + 1), &minor)) return std::nullopt;
  if (major < 0 || minor < 0 || major > 99 || minor > 99) return std::nullopt;
  return ComputeCapability{int(major), int(minor)};
}

std::string CpuInfo::isa_summary() const {
  std::vector<std::string> f;
  if (avx2) f.push_back("AVX2");
  if (fma) f.push_back("FMA");
  if (avx512f) f.push_back("AVX512F");
  if (avx512bf16) f.push_back("AVX512_BF16");
  if (amx) f.push_back("AMX");
  if (neon) f.push_back("NEON");
  return f.empty() ? "scalar" : join(f, " ");
}

CpuInfo detect_cpu() {
  CpuInfo c;
  c.logical_cores = int(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__x86_64__) || defined(__i386__)
  c.arch = "x86_64";
  __builtin_cpu_init();
  c.avx2 = __builtin_cpu_supports("avx2");
  c.fma = __builtin_cpu_supports("fma");
  c.avx512f = __builtin_cpu_supports("avx512f");
#elif defined(__aarch64__)
  c.arch = "aarch64";
  c.neon = true;
#else
  c.arch = "unknown";
#endif
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key(trim(line.substr(0, colon)));
    std::string value(trim(line.substr(colon + 1)));
    if (c.model_name.empty() && (key == "model name" || key == "Model")) c.model_name = value;
    if (key == "flags") {
      std::istringstream fs(value);
      std::string flag;
      while (fs >> flag) {
        if (flag == "avx512_bf16") c.avx512bf16 = true;
        if (flag == "amx_bf16") c.amx = true;
      }
    }
  }
  if (c.model_name.empty()) c.model_name = c.arch + " CPU";
  return c;
}

uint64_t host_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES), page_size = ::sysconf(_SC_PAGESIZE);
  return pages > 0 && page_size > 0 ? uint64_t(pages) * uint64_t(page_size) : 0;
}

DeviceInfo cpu_device() {
  DeviceInfo d;
  d.kind = DeviceKind::kCpu;
  d.cpu = detect_cpu();
  d.name = d.cpu.model_name;
  d.total_memory = host_memory_bytes();
  return d;
}

DeviceInfo simulated_cuda_device(ComputeCapability cc) {
  DeviceInfo d;
  d.kind = DeviceKind::kCuda;
  d.name = "CUDA device";
  d.cc = cc;
  d.simulated = true;
  d.cpu = detect_cpu();
  return d;
}

#ifndef PAGODA_WITH_CUDA
double measure_cuda_copy_bandwidth() { return 0.0; }
bool cuda_runtime_built() { return false; }
std::optional<DeviceInfo> detect_cuda_device(int) { return std::nullopt; }
#endif

DeviceInfo detect_default_device() {
  if (auto d = detect_cuda_device()) return *d;
  return cpu_device();
}

std::string describe(const DeviceInfo& d) {
  if (d.kind == DeviceKind::kCpu)
    return str_cat("cpu (", d.cpu.model_name, ", ", d.cpu.logical_cores, " threads, ", d.cpu.isa_summary(), ")");
  std::string s = str_cat("cuda (", d.name, ", compute capability ", d.cc ? d.cc->str() : "?");
  if (d.simulated) return s + ", simulated)";
  return str_cat(s, ", ", d.sm_count, " SMs, ", format_bytes(double(d.total_memory)), ")");
}

}  // namespace pagoda
