// Host-side decisions of the CUDA model runner; no device needed.
#include <gtest/gtest.h>

#include "pagoda/model/cuda/cuda_model_runner.h"

namespace pagoda {
namespace {

// The KV split count a captured decode step fixes: enough CTAs for three per SM, capped by the configured
// maximum (flash_attn_max_num_splits_for_cuda_graph) and by the eager workspace's 64.
TEST(GraphDecodeSplits, FillsTheGpuUpToTheCap) {
  // 132 SMs -> 396 CTA slots; 8 KV heads.
  EXPECT_EQ(graph_decode_splits(1, 8, 132, 32), 32);    // 50 would fill it; the cap wins
  EXPECT_EQ(graph_decode_splits(1, 8, 132, 64), 50);    // ceil(396 / 8)
  EXPECT_EQ(graph_decode_splits(8, 8, 132, 32), 7);     // ceil(396 / 64)
  EXPECT_EQ(graph_decode_splits(32, 8, 132, 32), 2);    // ceil(396 / 256)
  EXPECT_EQ(graph_decode_splits(64, 8, 132, 32), 1);    // 512 CTAs already fill it
  EXPECT_EQ(graph_decode_splits(256, 8, 132, 32), 1);
  EXPECT_EQ(graph_decode_splits(1, 1, 132, 1000), 64);  // never past the eager workspace's 64
}

TEST(GraphDecodeSplits, NonPositiveCapMeansUnsplit) {
  EXPECT_EQ(graph_decode_splits(1, 8, 132, 0), 1);
  EXPECT_EQ(graph_decode_splits(1, 8, 132, -5), 1);
}

}  // namespace
}  // namespace pagoda
