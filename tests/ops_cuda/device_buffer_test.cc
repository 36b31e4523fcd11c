// DeviceBuffer / PinnedBuffer on a device.
#include <gtest/gtest.h>

#include <numeric>

#include "gpu_test_util.h"

namespace pagoda {
namespace {

TEST(DeviceBufferCuda, RoundTripAndMove) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  std::vector<int> v(1000);
  std::iota(v.begin(), v.end(), 7);
  DeviceBuffer d(v.size() * sizeof(int));
  d.upload(v.data(), v.size() * sizeof(int));
  DeviceBuffer moved = std::move(d);
  EXPECT_EQ(d.data(), nullptr);
  std::vector<int> back(v.size());
  moved.download(back.data(), back.size() * sizeof(int));
  EXPECT_EQ(back, v);
  std::vector<int> tail(10);
  moved.download(tail.data(), 10 * sizeof(int), 990 * sizeof(int));
  EXPECT_EQ(tail[0], 997);
  EXPECT_THROW(moved.download(tail.data(), 11 * sizeof(int), 990 * sizeof(int)), Error);
  moved.fill_bytes(0);
  moved.download(back.data(), back.size() * sizeof(int));
  EXPECT_EQ(back, std::vector<int>(1000, 0));
}

TEST(DeviceBufferCuda, PinnedAsyncCopyAndAllocationFailure) {
  PAGODA_REQUIRE_CUDA_DEVICE();
  PinnedBuffer h(4096);
  std::iota(h.as<uint8_t>(), h.as<uint8_t>() + 4096, 0);
  DeviceBuffer d(4096);
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(d.data(), h.data(), 4096, cudaMemcpyHostToDevice, nullptr));
  PinnedBuffer back(4096);
  PAGODA_CUDA_CHECK(cudaMemcpyAsync(back.data(), d.data(), 4096, cudaMemcpyDeviceToHost, nullptr));
  PAGODA_CUDA_CHECK(cudaStreamSynchronize(nullptr));
  EXPECT_EQ(std::memcmp(h.data(), back.data(), 4096), 0);
  // An impossible allocation throws pagoda::Error naming the CUDA error, and the context stays usable.
  EXPECT_THROW(DeviceBuffer(size_t(1) << 62), Error);
  cudaGetLastError();
  DeviceBuffer ok(16);
  EXPECT_NE(ok.data(), nullptr);
}

}  // namespace
}  // namespace pagoda
