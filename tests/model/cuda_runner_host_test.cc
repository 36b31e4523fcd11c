// Host-side decisions of the paged kernels' runners: the decode split planner; no device needed.
#include <gtest/gtest.h>

#include "pagoda/attention/paged/paged_runner_common.h"

namespace pagoda {
namespace {

// A decode step's KV splits. 16-bit KV: at most one CTA per SM, at least 2 KV tiles per split. fp8 KV: the
// shortest critical path in waves of three CTAs per SM x (tiles per split + a CTA's fixed cost), at most 32
// splits.
TEST(DecodeKvSplits, OneCtaPerSmFor16BitKv) {
  // 132 SMs, 8 KV heads.
  EXPECT_EQ(decode_kv_splits(8, 512, 132, false, 64), 16);   // 1 x 32k: 132 / 8 = 16.5 -> 16 (136 CTAs would
                                                             // put two on 4 SMs)
  EXPECT_EQ(decode_kv_splits(8, 16, 132, false, 64), 8);     // 1 x 1k: 16 tiles, 2 per split
  EXPECT_EQ(decode_kv_splits(64, 64, 132, false, 64), 2);
  EXPECT_EQ(decode_kv_splits(128, 64, 132, false, 64), 1);   // 16 x 4k: 128 CTAs already give each SM one
  EXPECT_EQ(decode_kv_splits(140, 64, 132, false, 64), 1);
  EXPECT_EQ(decode_kv_splits(8, 512, 132, false, 8), 8);     // the cap wins
  // fp8 (and TURBOQUANT) at 1 x 32k: 396 slots; the default cap of 32 gives 256 CTAs of 16 tiles; a cap of 64
  // lets 47 splits (376 CTAs, one wave, 11 tiles each) shorten the path from 16 + 2 to 11 + 2 tiles.
  EXPECT_EQ(decode_kv_splits(8, 512, 132, true, 64), 32);
  EXPECT_EQ(decode_kv_splits(8, 512, 132, true, 64, 64), 47);
  EXPECT_EQ(decode_kv_splits(8, 1, 132, false, 64), 1);      // a single tile is never split
  EXPECT_EQ(decode_kv_splits(0, 64, 132, false, 64), 1);
}

TEST(DecodeKvSplits, ShortestPathInWavesOfThreeCtasPerSmForFp8) {
  EXPECT_EQ(decode_kv_splits(128, 64, 132, true, 64), 3);    // 16 x 4k: 384 of 396 slots
  EXPECT_EQ(decode_kv_splits(512, 32, 132, true, 64), 3);    // 64 x 2k: 1536 CTAs = 3.9 waves
  EXPECT_EQ(decode_kv_splits(256, 128, 132, true, 64), 3);   // 32 x 8k
  EXPECT_EQ(decode_kv_splits(1024, 64, 132, true, 64), 1);   // 128 x 4k: 2.6 waves unsplit
  EXPECT_EQ(decode_kv_splits(8, 512, 132, true, 64), 32);    // 1 x 32k: up to 32 splits
  EXPECT_EQ(decode_kv_splits(8, 128, 132, true, 64), 32);    // 1 x 8k: 4 tiles per split (31 would cost 5)
  EXPECT_EQ(decode_kv_splits(8, 16, 132, true, 64), 8);      // 1 x 1k: 2 tiles per split
}

// The KV split count a captured decode step fixes: the eager rule for a context of any length, capped by
// the configured maximum (flash_attn_max_num_splits_for_cuda_graph) and by the eager workspace's 64.
TEST(GraphDecodeSplits, FillsTheGpuUpToTheCap) {
  EXPECT_EQ(graph_decode_splits(1, 8, 132, false, 32), 16);
  EXPECT_EQ(graph_decode_splits(1, 8, 132, true, 32), 32);
  EXPECT_EQ(graph_decode_splits(1, 8, 132, true, 64), 43);  // a cap past 32 is the user's, not clamped to 32
  EXPECT_EQ(graph_decode_splits(1, 8, 132, false, 8), 8);      // the cap wins
  EXPECT_EQ(graph_decode_splits(8, 8, 132, false, 32), 2);
  EXPECT_EQ(graph_decode_splits(16, 8, 132, false, 32), 1);    // 128 CTAs
  EXPECT_EQ(graph_decode_splits(32, 8, 132, true, 32), 3);
  EXPECT_EQ(graph_decode_splits(256, 8, 132, true, 32), 1);
  EXPECT_EQ(graph_decode_splits(1, 1, 132, false, 1000), 64);  // never past the eager workspace's 64
}

TEST(GraphDecodeSplits, NonPositiveCapMeansUnsplit) {
  EXPECT_EQ(graph_decode_splits(1, 8, 132, false, 0), 1);
  EXPECT_EQ(graph_decode_splits(1, 8, 132, true, -5), 1);
}

}  // namespace
}  // namespace pagoda
