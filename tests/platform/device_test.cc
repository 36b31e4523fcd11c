#include "pagoda/platform/device.h"

#include <gtest/gtest.h>

namespace pagoda {
namespace {

TEST(Platform, ComputeCapabilityParsing) {
  EXPECT_EQ(parse_compute_capability("8.9"), (ComputeCapability{8, 9}));
  EXPECT_EQ(parse_compute_capability("10.0"), (ComputeCapability{10, 0}));
  EXPECT_FALSE(parse_compute_capability("9"));
  EXPECT_FALSE(parse_compute_capability("nine.0"));
  EXPECT_FALSE(parse_compute_capability("9.0.1"));
  EXPECT_LT((ComputeCapability{8, 9}), (ComputeCapability{9, 0}));
  EXPECT_LT((ComputeCapability{9, 0}), (ComputeCapability{10, 0}));
  EXPECT_EQ((ComputeCapability{12, 1}).str(), "12.1");
}

TEST(Platform, Cpu) {
  DeviceInfo d = cpu_device();
  EXPECT_EQ(d.kind, DeviceKind::kCpu);
  EXPECT_GE(d.cpu.logical_cores, 1);
  EXPECT_FALSE(d.cpu.arch.empty());
  EXPECT_FALSE(d.name.empty());
  EXPECT_NE(describe(d).find("cpu ("), std::string::npos);
}

TEST(Platform, SimulatedDevice) {
  DeviceInfo d = simulated_cuda_device({8, 9});
  EXPECT_EQ(d.kind, DeviceKind::kCuda);
  EXPECT_TRUE(d.simulated);
  EXPECT_EQ(d.name, "CUDA device");
  EXPECT_EQ(describe(d), "cuda (CUDA device, compute capability 8.9, simulated)");
}

TEST(Platform, DefaultDeviceIsCudaOnlyWhenOneExists) {
  DeviceInfo d = detect_default_device();
  EXPECT_EQ(d.kind == DeviceKind::kCuda, detect_cuda_device().has_value());
}

}  // namespace
}  // namespace pagoda
