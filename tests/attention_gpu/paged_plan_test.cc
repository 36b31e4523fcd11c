// The paged-attention planner's host half (plan_paged_work), no device needed: the batch-invariant rule
// gives a sequence the same work items (row tiles, one KV split) and the general kernel whatever else the
// step holds, where the default rule's split count and kernel follow the step.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <vector>

#include "pagoda/attention/paged/paged_attention.h"

namespace pagoda {
namespace {

constexpr int kNumQHeads = 32, kNumKvHeads = 8;  // GQA 4: a decode token is a 4-row tile

struct Planned {
  PagedWorkPlan plan;
  std::vector<std::array<int, 3>> items_of_seq;  // {row_start, split, num_splits} of one sequence, sorted
};

// Plans `batch` with a workspace as reserve(tokens, seqs, 32 heads, 128, 64 splits) sizes it, and returns the
// plan and the work items of sequence `seq`.
Planned plan_step(const AttentionBatchInfo& batch, const PagedAttentionOptions& opt, int seq) {
  int tokens = 0;
  for (int q : batch.query_lens) tokens += q;
  const int max_splits = 64;
  PagedWorkLimits limits;
  limits.max_splits = max_splits;
  limits.split_tokens = std::min(tokens, PagedAttentionWorkspace::kMaxSplitTokens);
  limits.capacity = ((tokens * kNumQHeads) / 64 + int(batch.query_lens.size()) + 1) * max_splits;
  std::vector<int4> items(size_t(limits.capacity));
  Planned out;
  out.plan = plan_paged_work(batch, kNumQHeads, kNumKvHeads, opt, limits, items.data());
  for (int i = 0; i < out.plan.num_items; ++i) {
    const int4 w = items[size_t(i)];
    if (w.x == seq) out.items_of_seq.push_back({w.y, w.z, w.w});
  }
  std::sort(out.items_of_seq.begin(), out.items_of_seq.end());
  return out;
}

// The sequence under test, first alone, then at position `at` of steps of 2, 7 and 33 sequences that mix
// decode tokens and prefill chunks of other lengths.
struct Steps {
  std::vector<AttentionBatchInfo> batches;
  std::vector<int> position;
};
Steps steps_around(int q_len, int ctx) {
  Steps st;
  const std::vector<std::pair<int, int>> others = {{1, 700},   {300, 3000}, {1, 40},  {17, 2000}, {1, 5000},
                                                   {129, 129}, {1, 1},      {64, 64}, {1, 4099},  {5, 900}};
  for (int n : {1, 2, 7, 33}) {
    AttentionBatchInfo b;
    const int at = n / 2;
    for (int i = 0; i < n; ++i) {
      const std::pair<int, int> s = i == at ? std::make_pair(q_len, ctx) : others[size_t(i) % others.size()];
      b.query_lens.push_back(s.first);
      b.seq_lens.push_back(s.second);
    }
    st.batches.push_back(b);
    st.position.push_back(at);
  }
  return st;
}

void expect_invariant(int q_len, int ctx, PagedAttentionOptions opt) {
  SCOPED_TRACE("q_len " + std::to_string(q_len) + " ctx " + std::to_string(ctx));
  opt.batch_invariant = true;
  const Steps st = steps_around(q_len, ctx);
  const Planned alone = plan_step(st.batches[0], opt, st.position[0]);
  ASSERT_FALSE(alone.items_of_seq.empty());
  const int rows = q_len * (kNumQHeads / kNumKvHeads);
  EXPECT_EQ(int(alone.items_of_seq.size()), (rows + 63) / 64);  // one item per 64-row tile, unsplit
  for (size_t i = 0; i < st.batches.size(); ++i) {
    SCOPED_TRACE("step of " + std::to_string(st.batches[i].query_lens.size()) + " sequences");
    const Planned p = plan_step(st.batches[i], opt, st.position[i]);
    EXPECT_EQ(p.plan.num_splits, 1);
    EXPECT_FALSE(p.plan.all_decode);  // the general kernel, never the decode-only one
    EXPECT_FALSE(p.plan.work_is_seq);
    EXPECT_FALSE(p.plan.merge_in_kernel || p.plan.merge_in_cluster);
    EXPECT_EQ(p.items_of_seq, alone.items_of_seq);
  }
}

TEST(PagedPlanBatchInvariant, DecodeSequence) {
  PagedAttentionOptions opt;
  expect_invariant(1, 3000, opt);
  opt.fp8_kv = true;
  expect_invariant(1, 3000, opt);
  opt.force_splits = true;  // as a captured decode step asks: ignored
  opt.max_splits = 16;
  expect_invariant(1, 3000, opt);
}

TEST(PagedPlanBatchInvariant, PrefillChunk) {
  PagedAttentionOptions opt;
  opt.num_sms = 16;  // few SMs: the default rule would split the lone chunk's KV
  expect_invariant(200, 1000, opt);
  opt.fp8_kv = true;
  expect_invariant(200, 1000, opt);
}

TEST(PagedPlanBatchInvariant, SeparatePrefillAndDecodePlans) {
  PagedAttentionOptions opt;
  opt.sequences = SeqFilter::kDecode;
  expect_invariant(1, 3000, opt);
  opt.sequences = SeqFilter::kPrefill;
  expect_invariant(200, 1000, opt);
}

// What the rule changes: under the default rule the same lone decode sequence splits its KV and runs the
// decode-only kernel, and inside the step of 33 it does neither (the split count follows the step).
TEST(PagedPlanBatchInvariant, DefaultRuleFollowsTheStep) {
  PagedAttentionOptions opt;
  const Steps st = steps_around(1, 3000);
  const Planned alone = plan_step(st.batches[0], opt, st.position[0]);
  EXPECT_TRUE(alone.plan.all_decode);
  EXPECT_GT(alone.plan.num_splits, 1);
  const Planned in_step = plan_step(st.batches.back(), opt, st.position.back());
  EXPECT_FALSE(in_step.plan.all_decode);
  EXPECT_NE(in_step.items_of_seq, alone.items_of_seq);
}

// SeqFilter: a plan covers exactly the sequences of its filter.
TEST(PagedPlan, SequenceFilter) {
  const AttentionBatchInfo b{{1, 9, 1, 200}, {100, 9, 50, 300}};
  auto seqs = [&](SeqFilter f) {
    PagedAttentionOptions opt;
    opt.sequences = f;
    std::vector<int> covered;
    for (int s = 0; s < 4; ++s)
      if (!plan_step(b, opt, s).items_of_seq.empty()) covered.push_back(s);
    return covered;
  };
  EXPECT_EQ(seqs(SeqFilter::kAll), (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(seqs(SeqFilter::kDecode), (std::vector<int>{0, 2}));
  EXPECT_EQ(seqs(SeqFilter::kPrefill), (std::vector<int>{1, 3}));
}

}  // namespace
}  // namespace pagoda
