// Host-side decisions of the CUDA model runner and the decode split planner; no device needed.
#include <gtest/gtest.h>

#include "pagoda/attention/triton_attn/triton_attn.h"
#include "pagoda/model/cuda/cuda_model_runner.h"

namespace pagoda {
namespace {

// A decode step's KV splits: one CTA per SM with 16-bit KV, three with fp8 (rounded to the nearest count),
// at least 2 KV tiles per split, at most max_splits.
TEST(DecodeKvSplits, OneCtaPerSmOrThreeForFp8) {
  // 132 SMs, 8 KV heads.
  EXPECT_EQ(decode_kv_splits(8, 512, 132, false, 64), 17);   // 1 x 32k: 132 / 8 = 16.5 -> 17
  EXPECT_EQ(decode_kv_splits(8, 512, 132, true, 64), 50);    // fp8: 396 / 8 = 49.5 -> 50
  EXPECT_EQ(decode_kv_splits(8, 16, 132, false, 64), 8);     // 1 x 1k: 16 tiles, 2 per split
  EXPECT_EQ(decode_kv_splits(128, 64, 132, false, 64), 1);   // 16 x 4k: 128 CTAs already give each SM one
  EXPECT_EQ(decode_kv_splits(128, 64, 132, true, 64), 3);    // fp8: 396 / 128 = 3.1 -> 3
  EXPECT_EQ(decode_kv_splits(512, 32, 132, true, 64), 1);    // 64 x 2k fp8: 396 / 512 rounds to 1
  EXPECT_EQ(decode_kv_splits(8, 512, 132, true, 32), 32);    // the cap wins
  EXPECT_EQ(decode_kv_splits(8, 1, 132, false, 64), 1);      // a single tile is never split
  EXPECT_EQ(decode_kv_splits(0, 64, 132, false, 64), 1);
}

// The KV split count a captured decode step fixes: the eager rule for a context of any length, capped by
// the configured maximum (flash_attn_max_num_splits_for_cuda_graph) and by the eager workspace's 64.
TEST(GraphDecodeSplits, FillsTheGpuUpToTheCap) {
  EXPECT_EQ(graph_decode_splits(1, 8, 132, false, 32), 17);    // (132 + 4) / 8
  EXPECT_EQ(graph_decode_splits(1, 8, 132, true, 32), 32);     // fp8: 50 would fill it; the cap wins
  EXPECT_EQ(graph_decode_splits(1, 8, 132, true, 64), 50);
  EXPECT_EQ(graph_decode_splits(8, 8, 132, false, 32), 2);     // (132 + 32) / 64
  EXPECT_EQ(graph_decode_splits(16, 8, 132, false, 32), 1);    // 128 CTAs
  EXPECT_EQ(graph_decode_splits(32, 8, 132, true, 32), 2);     // (396 + 128) / 256
  EXPECT_EQ(graph_decode_splits(256, 8, 132, true, 32), 1);
  EXPECT_EQ(graph_decode_splits(1, 1, 132, true, 1000), 64);   // never past the eager workspace's 64
}

TEST(GraphDecodeSplits, NonPositiveCapMeansUnsplit) {
  EXPECT_EQ(graph_decode_splits(1, 8, 132, false, 0), 1);
  EXPECT_EQ(graph_decode_splits(1, 8, 132, true, -5), 1);
}

}  // namespace
}  // namespace pagoda
