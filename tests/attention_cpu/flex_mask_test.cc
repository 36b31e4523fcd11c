// FLEX_ATTENTION masks and block-mask plans against brute force: every predicate and several compositions
// classify rectangles exactly (the class equals what evaluating the predicate on every pair of the rectangle
// gives), and each predicate meets full, partial and empty rectangles; the plan lists exactly the non-empty
// key blocks of every tile, in ascending order, with their class.
#include <algorithm>
#include <random>
#include <set>

#include <gtest/gtest.h>

#include "pagoda/attention/flex_attention/flex_mask.h"
#include "pagoda/attention/flex_attention/flex_plan.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

FlexTile brute(const FlexMask& m, int seq, int32_t q0, int32_t q1, int32_t k0, int32_t k1) {
  bool any = false, all = true;
  for (int32_t q = q0; q < q1; ++q)
    for (int32_t k = k0; k < k1; ++k) {
      const bool a = m.allows(seq, q, k);
      any |= a;
      all &= a;
    }
  return all ? FlexTile::kFull : any ? FlexTile::kPartial : FlexTile::kEmpty;
}

// Three sequences: prefix-LM spans / multimodal placeholders, and packed documents.
FlexMask test_spans() { return FlexMask::spans({{{0, 40}}, {{5, 9}, {9, 30}, {70, 130}}, {}}); }
FlexMask test_docs() { return FlexMask::documents({{17, 60, 61}, {}, {100}}); }

std::vector<FlexMask> masks() {
  const FlexMask c = FlexMask::causal();
  return {FlexMask::full(),
          c,
          FlexMask::sliding_window(24),
          FlexMask::chunked_local(32),
          test_spans(),
          test_docs(),
          ~c,
          c & FlexMask::sliding_window(24),
          c & FlexMask::sliding_window(40),
          c & FlexMask::sliding_window(1),
          c & FlexMask::chunked_local(32),
          c | test_spans(),
          c & test_docs(),
          c & test_docs() & FlexMask::sliding_window(40),
          (c & FlexMask::sliding_window(8)) | ~FlexMask::chunked_local(16),
          c & ~c,                          // empty everywhere: & of two partial children
          c | ~c,                          // full everywhere: | of two partial children
          FlexMask::sliding_window(64) & ~FlexMask::sliding_window(16)};
}

TEST(FlexMask, ClassifyEqualsBruteForce) {
  std::mt19937 rng(7);
  for (const FlexMask& m : masks()) {
    SCOPED_TRACE(m.str());
    std::set<FlexTile> seen;
    for (int seq = 0; seq < 3; ++seq) {
      // Every tile of a grid of 16 x 16 over positions [0, 160), then random rectangles.
      for (int32_t q0 = 0; q0 < 160; q0 += 16)
        for (int32_t k0 = 0; k0 < 160; k0 += 16) {
          const FlexTile c = m.classify(seq, q0, q0 + 16, k0, k0 + 16);
          ASSERT_EQ(int(c), int(brute(m, seq, q0, q0 + 16, k0, k0 + 16))) << "seq " << seq << " q0 " << q0 << " k0 " << k0;
          seen.insert(c);
        }
      for (int i = 0; i < 400; ++i) {
        const int32_t q0 = int32_t(rng() % 150), k0 = int32_t(rng() % 150);
        const uint32_t most = i % 2 ? 4 : 70;  // small rectangles too: some patterns are full only there
        const int32_t q1 = q0 + 1 + int32_t(rng() % most), k1 = k0 + 1 + int32_t(rng() % most);
        const FlexTile c = m.classify(seq, q0, q1, k0, k1);
        seen.insert(c);
        ASSERT_EQ(int(c), int(brute(m, seq, q0, q1, k0, k1)))
            << "seq " << seq << " q [" << q0 << "," << q1 << ") k [" << k0 << "," << k1 << ")";
      }
      // Single pairs on the diagonal (a band of width 1 is full only there).
      for (int32_t q = 0; q < 160; q += 7) {
        const FlexTile c = m.classify(seq, q, q + 1, q, q + 1);
        seen.insert(c);
        ASSERT_EQ(int(c), int(brute(m, seq, q, q + 1, q, q + 1))) << "q = k = " << q;
      }
      // eval_row is allows() over a row.
      for (int i = 0; i < 100; ++i) {
        const int32_t q = int32_t(rng() % 160), k0 = int32_t(rng() % 160);
        const int n = 1 + int(rng() % kFlexMaxRow);
        uint8_t row[kFlexMaxRow];
        m.eval_row(seq, q, k0, n, row);
        for (int j = 0; j < n; ++j) ASSERT_EQ(bool(row[j]), m.allows(seq, q, k0 + j)) << "q " << q << " k " << k0 + j;
      }
    }
    const std::string s = m.str();
    const bool only_full = s == "full" || s == "(causal | ~causal)";
    const bool only_empty = s == "(causal & ~causal)";
    if (!only_full && !only_empty) {
      EXPECT_TRUE(seen.count(FlexTile::kFull)) << "no full tile";
      EXPECT_TRUE(seen.count(FlexTile::kPartial)) << "no partial tile";
      EXPECT_TRUE(seen.count(FlexTile::kEmpty)) << "no empty tile";
    } else {
      EXPECT_EQ(seen, std::set<FlexTile>{only_full ? FlexTile::kFull : FlexTile::kEmpty});
    }
  }
}

TEST(FlexMask, PrimitiveSemantics) {
  EXPECT_TRUE(FlexMask::causal().allows(0, 5, 5));
  EXPECT_FALSE(FlexMask::causal().allows(0, 5, 6));
  const FlexMask w = FlexMask::causal() & FlexMask::sliding_window(3);  // keys 3, 4, 5 for query 5
  EXPECT_FALSE(w.allows(0, 5, 2));
  EXPECT_TRUE(w.allows(0, 5, 3));
  const FlexMask ch = FlexMask::chunked_local(4);
  EXPECT_TRUE(ch.allows(0, 7, 4));
  EXPECT_FALSE(ch.allows(0, 8, 7));
  const FlexMask prefix = FlexMask::causal() | FlexMask::spans({{{0, 4}}});  // prefix-LM over the first 4
  EXPECT_TRUE(prefix.allows(0, 1, 3));
  EXPECT_FALSE(prefix.allows(0, 4, 5));
  EXPECT_FALSE(prefix.allows(1, 1, 3));  // sequence 1 has no span
  const FlexMask docs = FlexMask::documents({{3}});
  EXPECT_TRUE(docs.allows(0, 2, 0));
  EXPECT_FALSE(docs.allows(0, 3, 2));
  EXPECT_TRUE(docs.allows(0, 3, 1000));
  EXPECT_THROW(FlexMask::spans({{{5, 9}, {8, 12}}}), Error);
  EXPECT_THROW(FlexMask::documents({{4, 4}}), Error);
}

TEST(FlexPlan, ListsExactlyTheNonEmptyBlocks) {
  // Prefill, decode, chunked prefill and a 513-token prefill; seq 1 of the masks has spans, seq 2 documents.
  const std::vector<int32_t> q_lens = {1, 7, 17, 1, 40, 513}, ctx = {1, 7, 97, 513, 300, 513};
  const int S = int(q_lens.size());
  int T = 0;
  for (int q : q_lens) T += q;
  for (int bm : {16, 64})
    for (int bn : {16, 64})
      for (const FlexMask& m : masks()) {
        SCOPED_TRACE(m.str() + " bm " + std::to_string(bm) + " bn " + std::to_string(bn));
        FlexBlockPlan plan;
        plan.reserve(T, S, 513, bm, bn);
        plan.build(m, q_lens.data(), ctx.data(), S);
        int tile = 0, row = 0;
        int64_t full = 0, partial = 0, skipped = 0;
        for (int s = 0; s < S; ++s)
          for (int32_t i = 0; i < q_lens[size_t(s)]; i += bm, ++tile) {
            ASSERT_LT(tile, plan.num_tiles());
            const FlexPlanTile& t = plan.tile(tile);
            const int rows = std::min(bm, q_lens[size_t(s)] - i);
            ASSERT_EQ(t.seq, s);
            ASSERT_EQ(t.t_begin, row);
            ASSERT_EQ(t.t_end, row + rows);
            ASSERT_EQ(t.pos_begin, ctx[size_t(s)] - q_lens[size_t(s)] + i);
            row += rows;
            int32_t e = t.first;
            for (int32_t b = 0; b * bn < ctx[size_t(s)]; ++b) {
              const FlexTile c = brute(m, s, t.pos_begin, t.pos_begin + rows, b * bn, std::min((b + 1) * bn, ctx[size_t(s)]));
              if (c == FlexTile::kEmpty) {
                ++skipped;
                continue;
              }
              ASSERT_LT(e, t.first + t.count) << "block " << b << " missing from tile " << tile;
              ASSERT_EQ(plan.entry_block(e), b) << "tile " << tile;
              ASSERT_EQ(plan.entry_partial(e), c == FlexTile::kPartial) << "tile " << tile << " block " << b;
              (c == FlexTile::kPartial ? partial : full) += 1;
              ++e;
            }
            ASSERT_EQ(e, t.first + t.count) << "tile " << tile << " lists blocks the mask leaves empty";
          }
        ASSERT_EQ(tile, plan.num_tiles());
        EXPECT_EQ(plan.num_full(), full);
        EXPECT_EQ(plan.num_partial(), partial);
        EXPECT_EQ(plan.num_skipped(), skipped);
      }
}

TEST(FlexPlan, RefusesStepsPastItsReserve) {
  FlexBlockPlan plan;
  plan.reserve(17, 2, 64, 16, 16);
  const FlexMask m = FlexMask::causal();
  std::vector<int32_t> q = {16, 1}, c = {64, 65};
  EXPECT_THROW(plan.build(m, q.data(), c.data(), 2), Error);  // context 65 > 64
  c = {64, 64};
  q = {17, 1};
  EXPECT_THROW(plan.build(m, q.data(), c.data(), 2), Error);  // 18 tokens, reserved 17
  q = {16, 1};
  EXPECT_THROW(plan.build(m, q.data(), c.data(), 3), Error);  // 3 sequences
  plan.build(m, q.data(), c.data(), 2);
  EXPECT_EQ(plan.num_tiles(), 2);
}

}  // namespace
}  // namespace pagoda
