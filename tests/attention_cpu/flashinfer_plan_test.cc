// FLASHINFER's planner and cascade grouping, by their invariants: every (query token, key) pair the mask
// allows is covered by exactly one task, and through a block table whose block for that key is the token's
// own; a token covered once is written directly, a token covered more often is merged from exactly the
// slabs of its tasks, each slab used once; no task costs more than the chunk cost plus one alignment step,
// and the chunk cost is the target's share of the step. Random steps (decode, prefill chunks, mixed, window,
// non-causal, shared prefixes) and the two balance cases of the issue (batch 1 at 32k, a 32k sequence
// among short ones).
#include <gtest/gtest.h>

#include <map>
#include <queue>

#include "flashinfer_test_util.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

using fi_test::Layer;
using fi_test::Step;
using fi_test::StepSpec;

FiPlanLimits limits_for(const Step& st, int target, bool cascade) {
  FiPlanLimits l;
  l.max_tokens = st.tokens;
  l.max_seqs = st.num_seqs();
  l.max_model_len = *std::max_element(st.ctx.begin(), st.ctx.end());
  l.target_ctas = target;
  l.cascade = cascade;
  return l;
}

// Checks every invariant of the file comment; returns the number of pairs covered.
int64_t check_plan(const Layer& L, const Step& st, const FiPlan& plan) {
  const int T = st.tokens, g = L.num_q_heads / L.num_kv_heads;
  std::vector<int> seq_of(static_cast<size_t>(T));
  for (int s = 0; s < st.num_seqs(); ++s)
    for (int t = st.qsl[size_t(s)]; t < st.qsl[size_t(s + 1)]; ++t) seq_of[size_t(t)] = s;
  std::vector<std::vector<uint8_t>> count(static_cast<size_t>(T));
  for (int t = 0; t < T; ++t) count[size_t(t)].assign(size_t(st.ctx[size_t(seq_of[size_t(t)])]), 0);
  std::vector<std::vector<int>> tasks_of(static_cast<size_t>(T));
  std::vector<int> slab_uses(static_cast<size_t>(plan.max_slabs()), 0);
  for (int i = 0; i < plan.num_tasks(); ++i) {
    const FiTask& k = plan.tasks()[i];
    EXPECT_LT(k.row_begin, k.row_end);
    EXPECT_LE(k.row_end, plan.num_rows());
    if (k.kind == FiTaskKind::kDecode) EXPECT_EQ(k.row_end - k.row_begin, 1);
    else EXPECT_LE(int64_t(k.row_end - k.row_begin) * g, std::max(g, kFiTileRows));
    if (plan.chunk_cost() > 0) {
      EXPECT_LE(FiPlan::task_cost(k.kv_end - k.kv_begin, int64_t(k.row_end - k.row_begin) * g),
                plan.chunk_cost() + FiPlan::task_cost(kFiKvAlign, int64_t(k.row_end - k.row_begin) * g) + 1)
          << "task " << i;
    }
    if (k.slab >= 0) {
      EXPECT_LE(k.slab + (k.row_end - k.row_begin), plan.num_slabs());
      for (int r = 0; r < k.row_end - k.row_begin; ++r) ++slab_uses[size_t(k.slab + r)];
    }
    for (int r = k.row_begin; r < k.row_end; ++r) {
      const int t = plan.row_token()[r], s = plan.row_seq()[r];
      EXPECT_EQ(s, seq_of[size_t(t)]);
      tasks_of[size_t(t)].push_back(i);
      const int pos = st.ctx[size_t(s)] - st.q_lens[size_t(s)] + (t - st.qsl[size_t(s)]);
      int kb = k.kv_begin, ke = k.kv_end;
      if (k.num_splits > 0) {
        int lo, hi;
        fi_visible_range(pos, st.ctx[size_t(s)], L.window, L.causal, &lo, &hi);
        fi_split_range(lo, hi, k.split, k.num_splits, &kb, &ke);
      }
      EXPECT_LE(ke, st.ctx[size_t(s)]);
      for (int key = kb; key < ke; ++key) {
        if (!fi_visible(pos, key, L.window, L.causal)) continue;
        // The task reads the key through its own table: the block must be the token's sequence's.
        EXPECT_EQ(st.tables[size_t(k.seq) * st.stride + key / L.block_size], st.tables[size_t(s) * st.stride + key / L.block_size]);
        ++count[size_t(t)][size_t(key)];
      }
    }
  }
  int64_t pairs = 0;
  for (int t = 0; t < T; ++t) {
    const int s = seq_of[size_t(t)];
    const int pos = st.ctx[size_t(s)] - st.q_lens[size_t(s)] + (t - st.qsl[size_t(s)]);
    for (int key = 0; key < st.ctx[size_t(s)]; ++key) {
      const int want = fi_visible(pos, key, L.window, L.causal) ? 1 : 0;
      if (count[size_t(t)][size_t(key)] != want) {
        ADD_FAILURE() << "token " << t << " key " << key << " covered " << int(count[size_t(t)][size_t(key)]) << " times";
        return pairs;
      }
      pairs += want;
    }
  }
  // Outputs: direct when covered once, else merged from exactly its tasks' slabs.
  std::map<int, std::vector<int>> merged;
  for (int m = 0; m < plan.num_merged(); ++m) {
    auto& v = merged[plan.merge_token()[m]];
    for (int e = plan.merge_indptr()[m]; e < plan.merge_indptr()[m + 1]; ++e) v.push_back(plan.merge_slab()[e]);
  }
  for (int t = 0; t < T; ++t) {
    const auto& ts = tasks_of[size_t(t)];
    if (ts.size() == 1) {
      EXPECT_LT(plan.tasks()[ts[0]].slab, 0) << "token " << t;
      EXPECT_EQ(merged.count(t), 0u) << "token " << t;
      continue;
    }
    if (merged.count(t) != 1) {
      ADD_FAILURE() << "token " << t << " is covered " << ts.size() << " times but not merged";
      continue;
    }
    std::vector<int> want;
    for (int i : ts) {
      const FiTask& k = plan.tasks()[i];
      EXPECT_GE(k.slab, 0);
      for (int r = k.row_begin; r < k.row_end; ++r)
        if (plan.row_token()[r] == t) want.push_back(k.slab + (r - k.row_begin));
    }
    std::sort(want.begin(), want.end());
    auto got = merged[t];
    std::sort(got.begin(), got.end());
    EXPECT_EQ(got, want) << "token " << t;
  }
  for (int i = 0; i < plan.num_slabs(); ++i) EXPECT_EQ(slab_uses[size_t(i)], 1) << "slab " << i;
  return pairs;
}

StepSpec random_spec(std::mt19937_64& rng, int block_size, bool shared) {
  const int lens[] = {1, 7, 17, 97, 513, 4099};
  StepSpec sp;
  const int S = 1 + int(rng() % 9);
  if (shared) sp.group_keys = {block_size * int(2 + rng() % 6), block_size * int(1 + rng() % 40)};
  for (int s = 0; s < S; ++s) {
    int ctx = lens[rng() % 6] + int(rng() % 3);
    int q = rng() % 2 ? 1 : std::min(ctx, lens[rng() % 4]);
    int grp = shared ? int(rng() % 3) - 1 : -1;
    if (grp >= 0) ctx = std::max(ctx, sp.group_keys[size_t(grp)] + q + int(rng() % 40));
    sp.ctx.push_back(ctx);
    sp.q_lens.push_back(q);
    sp.group.push_back(grp);
  }
  return sp;
}

TEST(FlashInferPlan, RandomStepsCoverEveryPairOnce) {
  std::mt19937_64 rng(20261204);
  for (int iter = 0; iter < 120; ++iter) {
    Layer L;
    const int bss[] = {1, 8, 16, 64, 128};
    const int gqa[] = {1, 4, 8};
    L.block_size = bss[iter % 5];
    L.num_kv_heads = 1 + int(rng() % 4);
    L.num_q_heads = L.num_kv_heads * gqa[rng() % 3];
    L.causal = iter % 7 != 3;
    L.window = iter % 5 == 2 ? 1 + int(rng() % 600) : 0;
    const bool cascade = iter % 2 == 0;
    Step st = fi_test::make_step(random_spec(rng, L.block_size, cascade), L.block_size, rng);
    FiPlan plan;
    const int target = 1 + int(rng() % 300);
    plan.reserve(L.plan_shape(), limits_for(st, target, cascade));
    plan.build(st.fi());
    SCOPED_TRACE(testing::Message() << "iter " << iter << " block " << L.block_size << " heads " << L.num_q_heads << "/"
                                    << L.num_kv_heads << " window " << L.window << " causal " << L.causal << " target " << target);
    EXPECT_GT(check_plan(L, st, plan), 0);
    // The chunk is the target's share or (few CTAs, FiPlan's wave rule) a coarser one, unless grouped prefill
    // chunks outgrew the reserved slabs (which without cascade hold every plan).
    if (!cascade) {
      EXPECT_FALSE(plan.fell_back());
    }
    if (!plan.fell_back() && plan.chunk_cost() > 0) {
      EXPECT_GE(plan.chunk_cost(), std::max(kFiMinChunkCost, (plan.total_cost() * L.num_kv_heads + target - 1) / target));
    }
  }
}

// The greedy makespan of the tasks x KV heads over `slots` (the GPU block scheduler's behaviour).
int64_t greedy_makespan(const FiPlan& plan, int heads, int slots) {
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<>> q;
  for (int i = 0; i < slots; ++i) q.push(0);
  const int g = plan.group_size();
  for (int i = 0; i < plan.num_tasks(); ++i)
    for (int h = 0; h < heads; ++h) {
      const FiTask& k = plan.tasks()[i];
      int64_t t = q.top() + FiPlan::task_cost(k.kv_end - k.kv_begin, int64_t(k.row_end - k.row_begin) * g);
      q.pop();
      q.push(t);
    }
  int64_t m = 0;
  while (!q.empty()) m = std::max(m, q.top()), q.pop();
  return m;
}

TEST(FlashInferPlan, Batch1At32kFillsTheSms) {
  Layer L{.num_q_heads = 32, .num_kv_heads = 8, .head_size = 128, .block_size = 16};
  std::mt19937_64 rng(1);
  Step st = fi_test::make_step({{1}, {32768}, {}, {}}, L.block_size, rng);
  const int target = 132 * 2;  // H100/H200: 132 SMs, two decode CTAs each
  FiPlan plan;
  plan.reserve(L.plan_shape(), limits_for(st, target, false));
  plan.build(st.fi());
  check_plan(L, st, plan);
  const int ctas = plan.num_tasks() * L.num_kv_heads;
  EXPECT_GE(ctas, target * 9 / 10);
  EXPECT_LE(ctas, target + L.num_kv_heads);
  const double ideal = double(plan.total_cost()) * L.num_kv_heads / target;
  EXPECT_LE(double(greedy_makespan(plan, L.num_kv_heads, target)), 1.1 * ideal);
}

// Batch 16 at 8k: the target's share cuts each sequence in three, 384 CTAs in two waves of 264 slots; two
// pieces are 256 CTAs in one wave, a third shorter. At 1 x 32k the share (33 pieces, 264 CTAs) and 32 pieces
// (256 CTAs) are one wave each, the latter 1.4% longer: within 2%, the fewer splits.
TEST(FlashInferPlan, FewCtasRunInWholeWaves) {
  Layer L{.num_q_heads = 32, .num_kv_heads = 8, .head_size = 128, .block_size = 16};
  std::mt19937_64 rng(3);
  const int target = 264;
  for (auto [batch, ctx, pieces] : {std::tuple{16, 8192, 2}, {1, 32768, 32}, {1, 1024, 5}, {64, 4096, 1}}) {
    SCOPED_TRACE(testing::Message() << batch << " x " << ctx);
    StepSpec sp;
    for (int s = 0; s < batch; ++s) sp.q_lens.push_back(1), sp.ctx.push_back(ctx);
    Step st = fi_test::make_step(sp, L.block_size, rng);
    FiPlan plan;
    plan.reserve(L.plan_shape(), limits_for(st, target, false));
    plan.build(st.fi());
    check_plan(L, st, plan);
    EXPECT_EQ(plan.num_tasks(), batch * pieces);
    const int64_t share = std::max(kFiMinChunkCost, (plan.total_cost() * L.num_kv_heads + target - 1) / target);
    if (pieces > 1) {
      EXPECT_GE(plan.chunk_cost(), share);
    }
  }
}

TEST(FlashInferPlan, UnequalLengthsLeaveNoStraggler) {
  Layer L{.num_q_heads = 32, .num_kv_heads = 8, .head_size = 128, .block_size = 16};
  std::mt19937_64 rng(2);
  StepSpec sp;
  for (int s = 0; s < 500; ++s) sp.q_lens.push_back(1), sp.ctx.push_back(100 + int(rng() % 50));
  sp.q_lens.push_back(1), sp.ctx.push_back(32768);
  sp.q_lens.push_back(64), sp.ctx.push_back(9000);  // and a prefill chunk
  Step st = fi_test::make_step(sp, L.block_size, rng);
  const int target = 264;
  FiPlan plan;
  plan.reserve(L.plan_shape(), limits_for(st, target, false));
  plan.build(st.fi());
  check_plan(L, st, plan);
  // List scheduling bound: makespan <= total / slots + the largest task; the planner keeps the largest
  // within the slots' share (plus one alignment step), so at most twice the ideal.
  const double ideal = double(plan.total_cost()) * L.num_kv_heads / target;
  EXPECT_LE(double(greedy_makespan(plan, L.num_kv_heads, target)), 2.0 * ideal);
  int64_t biggest = 0;
  for (int i = 0; i < plan.num_tasks(); ++i) {
    const FiTask& k = plan.tasks()[i];
    biggest = std::max(biggest, FiPlan::task_cost(k.kv_end - k.kv_begin, int64_t(k.row_end - k.row_begin) * 4));
  }
  EXPECT_LE(double(biggest), ideal + FiPlan::task_cost(kFiKvAlign, kFiTileRows) + 1);
}

TEST(FlashInferPlan, GraphDecodeGridCoversAnyContext) {
  Layer L{.num_q_heads = 16, .num_kv_heads = 4, .head_size = 64, .block_size = 8};
  std::mt19937_64 rng(3);
  for (int splits : {1, 3, 16}) {
    Step st = fi_test::make_step({{1, 1, 1, 1, 1}, {1, 9, 17, 600, 4099}, {}, {}}, L.block_size, rng);
    FiPlanLimits lim = limits_for(st, 64, false);
    lim.graph_splits = splits;
    FiPlan plan;
    plan.reserve(L.plan_shape(), lim);
    plan.build_graph_decode(st.num_seqs(), splits);
    check_plan(L, st, plan);
    L.window = 100;  // the same grid under a window: the pieces follow the visible range
    check_plan(L, st, plan);
    L.window = 0;
  }
}

TEST(FlashInferPlan, TooSmallReservationCoarsensInsteadOfFailing) {
  Layer L{.num_q_heads = 8, .num_kv_heads = 1, .head_size = 64, .block_size = 16};
  std::mt19937_64 rng(4);
  StepSpec sp{{512, 512, 1, 1}, {4099, 4000, 3000, 2000}, {0, 0, 0, 0}, {1024}};
  Step st = fi_test::make_step(sp, L.block_size, rng);
  FiPlan plan;
  plan.reserve(L.plan_shape(), limits_for(st, 1000, true));  // wants many splits of 512-token tiles
  plan.build(st.fi());
  check_plan(L, st, plan);
  EXPECT_LE(plan.num_slabs(), plan.max_slabs());
}

TEST(FlashInferPlan, RefusesStepsPastTheReservation) {
  Layer L;
  std::mt19937_64 rng(5);
  Step st = fi_test::make_step({{3}, {10}, {}, {}}, L.block_size, rng);
  FiPlan plan;
  FiPlanLimits lim = limits_for(st, 4, false);
  lim.max_tokens = 2;
  plan.reserve(L.plan_shape(), lim);
  EXPECT_THROW(plan.build(st.fi()), Error);
  Step bad = st;
  bad.q_lens[0] = 11;  // a query longer than its context
  plan.reserve(L.plan_shape(), limits_for(bad, 4, false));
  EXPECT_THROW(plan.build(bad.fi()), Error);
}

// ---- cascade grouping ----

FiCascade groups_of(const Layer& L, const Step& st) {
  FiCascade c;
  std::vector<int32_t> scratch;
  fi_cascade_groups(L.plan_shape(), st.q_lens.data(), st.ctx.data(), st.num_seqs(), st.tables.data(), st.stride, &c, &scratch);
  return c;
}

TEST(FlashInferCascade, GroupsSequencesThatShareFullPrefixBlocks) {
  Layer L{.block_size = 16};
  std::mt19937_64 rng(6);
  // 0, 2, 3 share 8 blocks; 1 and 4 share 3 blocks; 5 shares nothing.
  StepSpec sp{{1, 1, 1, 1, 5, 1}, {300, 100, 129, 400, 70, 50}, {0, 1, 0, 0, 1, -1}, {128, 48}};
  Step st = fi_test::make_step(sp, L.block_size, rng);
  FiCascade c = groups_of(L, st);
  ASSERT_EQ(c.groups.size(), 2u);
  std::map<int, std::pair<std::vector<int>, int>> by_first;
  for (const auto& g : c.groups)
    by_first[c.members[size_t(g.first_member)]] = {std::vector<int>(c.members.begin() + g.first_member,
                                                                    c.members.begin() + g.first_member + g.num_members),
                                                   g.shared_keys};
  EXPECT_EQ(by_first[0].first, (std::vector<int>{0, 2, 3}));
  EXPECT_EQ(by_first[0].second, 128);
  EXPECT_EQ(by_first[1].first, (std::vector<int>{1, 4}));
  EXPECT_EQ(by_first[1].second, 48);
}

TEST(FlashInferCascade, OnlyFullBlocksBeforeTheNewTokensAreShared) {
  Layer L{.block_size = 16};
  std::mt19937_64 rng(7);
  // Sequence 1's new tokens start at 40, inside the shared blocks: its full blocks before them are 2.
  StepSpec sp{{1, 24}, {200, 64}, {0, 0}, {64}};
  Step st = fi_test::make_step(sp, L.block_size, rng);
  FiCascade c = groups_of(L, st);
  ASSERT_EQ(c.groups.size(), 1u);
  EXPECT_EQ(c.groups[0].shared_keys, 32);
  // Below kFiMinCascadeKeys keys: no group.
  sp = {{1, 1}, {200, 100}, {0, 0}, {16}};
  st = fi_test::make_step(sp, L.block_size, rng);
  EXPECT_TRUE(groups_of(L, st).groups.empty());
  // A window that hides part of the prefix from a member: no group.
  sp = {{1, 1}, {200, 100}, {0, 0}, {64}};
  st = fi_test::make_step(sp, L.block_size, rng);
  L.window = 150;
  EXPECT_TRUE(groups_of(L, st).groups.empty());
  L.window = 250;
  EXPECT_EQ(groups_of(L, st).groups.size(), 1u);
}

TEST(FlashInferCascade, GroupsOfOneTo256Requests) {
  Layer L{.num_q_heads = 8, .num_kv_heads = 2, .head_size = 64, .block_size = 16};
  std::mt19937_64 rng(8);
  for (int n : {1, 2, 3, 17, 256}) {
    StepSpec sp;
    sp.group_keys = {1024};
    for (int s = 0; s < n; ++s) sp.q_lens.push_back(1), sp.ctx.push_back(1024 + 1 + int(rng() % 300)), sp.group.push_back(0);
    Step st = fi_test::make_step(sp, L.block_size, rng);
    FiCascade c = groups_of(L, st);
    if (n == 1) {
      EXPECT_TRUE(c.groups.empty());
    } else {
      ASSERT_EQ(c.groups.size(), 1u);
      EXPECT_EQ(c.groups[0].num_members, n);
      EXPECT_GE(c.groups[0].shared_keys, 1024);  // a member's own next blocks may be shared by chance: never
      EXPECT_LE(c.groups[0].shared_keys, 1024);
    }
    FiPlan plan;
    plan.reserve(L.plan_shape(), limits_for(st, 264, true));
    plan.build(st.fi());
    check_plan(L, st, plan);
    EXPECT_EQ(plan.cascade().groups.size(), c.groups.size());
    if (n > 1) {
      // The shared keys are read once per KV head for the whole group, not once per member.
      int64_t prefix_keys = 0;
      for (int i = 0; i < plan.num_tasks(); ++i)
        if (plan.tasks()[i].kv_end <= 1024) prefix_keys += plan.tasks()[i].kv_end - plan.tasks()[i].kv_begin;
      EXPECT_EQ(prefix_keys, 1024 * ((n * plan.group_size() + kFiTileRows - 1) / kFiTileRows));
    }
  }
}

// fi_step_has_cascade (the CUDA runner's wants_eager) on random steps built with known shared prefixes: a
// step has cascade exactly when some prefix group has two members that are eligible (new tokens past the
// first block and, under a window, every shared key visible) and the prefix they all share in full blocks
// before their new tokens is at least kFiMinCascadeKeys keys.
TEST(FlashInferCascade, StepHasCascadeExactlyWhenMembersShareEnoughFullBlocks) {
  std::mt19937_64 rng(9);
  int with = 0, without = 0;
  for (int bs : {1, 8, 16, 64})
    for (int iter = 0; iter < 200; ++iter) {
      Layer L{.block_size = bs};
      L.window = iter % 5 == 0 ? 64 + int(rng() % 256) : 0;
      StepSpec sp;
      const int num_groups = 1 + int(rng() % 3);
      // Shared prefixes around kFiMinCascadeKeys: 1 to 6 blocks (bs 1: 16 to 48 keys).
      for (int g = 0; g < num_groups; ++g)
        sp.group_keys.push_back(bs == 1 ? 16 + int(rng() % 33) : bs * (1 + int(rng() % 6)));
      const int S = 1 + int(rng() % 10);
      for (int s = 0; s < S; ++s) {
        const int g = int(rng() % (num_groups + 1)) - 1;
        const int gk = g >= 0 ? sp.group_keys[size_t(g)] : 64;
        const int q = rng() % 4 == 0 ? 1 + int(rng() % 40) : 1;
        // Mostly past the prefix; sometimes new tokens start inside it.
        const int ctx = rng() % 4 == 0 ? q + int(rng() % (gk + 1)) : gk + q + int(rng() % 100);
        sp.q_lens.push_back(q), sp.ctx.push_back(ctx), sp.group.push_back(g);
      }
      Step st = fi_test::make_step(sp, bs, rng);
      bool expected = false;
      for (int g = 0; g < num_groups; ++g) {
        int eligible = 0, shared = sp.group_keys[size_t(g)] / bs;
        for (int s = 0; s < S; ++s) {
          const int first_new = st.ctx[size_t(s)] - st.q_lens[size_t(s)];
          if (sp.group[size_t(s)] != g || first_new < bs) continue;
          if (L.window > 0 && st.ctx[size_t(s)] - 1 >= L.window) continue;
          ++eligible;
          shared = std::min(shared, first_new / bs);
        }
        if (eligible >= 2 && shared * bs >= kFiMinCascadeKeys) expected = true;
      }
      FiCascade scratch;
      std::vector<int32_t> order;
      scratch.groups.reserve(size_t(S)), scratch.members.reserve(size_t(S)), order.reserve(size_t(S));
      const int32_t* members_before = scratch.members.data();
      EXPECT_EQ(fi_step_has_cascade(L.plan_shape(), st.fi(), &scratch, &order), expected)
          << "block " << bs << ", iteration " << iter;
      EXPECT_EQ(scratch.members.data(), members_before);  // reserved scratch: no allocation
      FiStep no_tables = st.fi();
      no_tables.block_tables = nullptr;
      EXPECT_FALSE(fi_step_has_cascade(L.plan_shape(), no_tables, &scratch, &order));
      (expected ? with : without) += 1;
    }
  // Both answers are common, so neither is true by construction of the cases alone.
  EXPECT_GT(with, 100);
  EXPECT_GT(without, 100);
}

}  // namespace
}  // namespace pagoda
