// Needs a CUDA device (label gpu): the runtime's view of it.
#include <gtest/gtest.h>

#include "pagoda/platform/device.h"

namespace pagoda {
namespace {

TEST(PlatformGpu, DetectsTheDevice) {
  auto d = detect_cuda_device();
  if (!d) GTEST_SKIP() << "skipped: no CUDA device";
  EXPECT_EQ(d->kind, DeviceKind::kCuda);
  ASSERT_TRUE(d->cc.has_value());
  EXPECT_GE(d->cc->major, 7);
  EXPECT_GT(d->sm_count, 0);
  EXPECT_GT(d->total_memory, 1ull << 30);
  EXPECT_GT(d->free_memory, 0ull);
  EXPECT_LE(d->free_memory, d->total_memory);
  EXPECT_FALSE(d->simulated);
  std::printf("device: %s\n", describe(*d).c_str());
}

}  // namespace
}  // namespace pagoda
