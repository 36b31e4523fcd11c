// Batch invariance of the paged-attention plans (PagedAttentionOptions / FlashAttnOptions::batch_invariant):
// one sequence's output computed alone and inside steps of 2, 7 and 33 sequences that mix decode tokens and
// prefill chunks must be bitwise identical -- for plan_paged_attention (TRITON_ATTN) and plan_flash_attention
// version 2 and 3, a decode sequence and a prefill chunk, bf16 and fp8 e4m3 KV. Version 3 gets a KV staging
// buffer that holds the lone sequence's context and not the larger steps', so its bf16 prefill chunk is
// staged alone and gathered from the paged cache in the larger steps. The largest step also asks for forced
// KV splits, as a captured decode step does, which the rule ignores. Outputs are checked for NaN (the output
// is poisoned before each launch); their accuracy is the reference tests' (BatchInvariantPlan there).
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "paged_attention_reference.h"
#include "pagoda/attention/flash_attn/flash_attn.h"
#include "pagoda/attention/paged/paged_attention.h"

namespace pagoda {
namespace {

constexpr int kHq = 8, kHk = 2, kD = 128, kBs = 16;
constexpr DType kDtype = DType::kBF16;

struct Seq {
  int q_len, ctx;
};

// Every sequence the steps use (index 0: the sequence under test): its KV in one shuffled pool of blocks on
// the device, its query rows on the host.
struct Universe {
  std::vector<Seq> seqs;
  DType kv_dtype = DType::kBF16;
  std::vector<std::vector<int>> blocks;  // per sequence
  std::vector<std::vector<uint8_t>> q;   // per sequence: [q_len][kHq][kD] in kDtype
  int max_blocks = 0;
  attention_test::DeviceAllocations dev;
  void* cache = nullptr;
};

void make_universe(Universe& u, const std::vector<Seq>& seqs, DType kv_dtype, unsigned seed) {
  u.seqs = seqs;
  u.kv_dtype = kv_dtype;
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  int total = 0;
  for (const Seq& s : seqs) {
    const int nb = (s.ctx + kBs - 1) / kBs;
    u.max_blocks = std::max(u.max_blocks, nb);
    total += nb;
  }
  std::vector<int> perm(size_t(total) + 3);
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = int(i);
  std::shuffle(perm.begin(), perm.end(), rng);
  int next = 0;
  for (const Seq& s : seqs) {
    std::vector<int> b;
    for (int i = 0; i < (s.ctx + kBs - 1) / kBs; ++i) b.push_back(perm[size_t(next++)]);
    u.blocks.push_back(b);
    std::vector<uint8_t> q(size_t(s.q_len) * kHq * kD * dtype_size(kDtype));
    for (size_t i = 0; i < size_t(s.q_len) * kHq * kD; ++i) store_from_f32(q.data(), kDtype, i, nd(rng));
    u.q.push_back(q);
  }
  const size_t elems = perm.size() * kBs * kHk * 2 * kD;
  std::vector<uint8_t> cache(elems * dtype_size(kv_dtype));
  for (size_t i = 0; i < elems; ++i) store_from_f32(cache.data(), kv_dtype, i, nd(rng));
  CUDA_OK(u.dev.alloc(&u.cache, cache.size()));
  CUDA_OK(cudaMemcpy(u.cache, cache.data(), cache.size(), cudaMemcpyHostToDevice));
}

enum class Planner { kPaged, kFlash2, kFlash3 };

std::string planner_name(Planner p) {
  switch (p) {
    case Planner::kPaged: return "paged";
    case Planner::kFlash2: return "FA2";
    case Planner::kFlash3: return "FA3";
  }
  return "?";
}

// Runs one step over the sequences `order` of `u` with the batch-invariant plan of `planner` and returns the
// output rows of sequence 0 (which `order` holds once) in `out`. force_splits: ask for 16 forced KV splits.
void run_step(const Universe& u, const std::vector<int>& order, Planner planner, bool force_splits,
              std::vector<uint8_t>& out) {
  const int S = int(order.size());
  std::vector<int> qsl(size_t(S) + 1, 0), seq_lens, btab(size_t(S) * u.max_blocks, 0);
  AttentionBatchInfo info;
  std::vector<uint8_t> q;
  int target_row = -1;
  for (int i = 0; i < S; ++i) {
    const int s = order[size_t(i)];
    const Seq& sq = u.seqs[size_t(s)];
    if (s == 0) target_row = qsl[size_t(i)];
    qsl[size_t(i) + 1] = qsl[size_t(i)] + sq.q_len;
    seq_lens.push_back(sq.ctx);
    info.query_lens.push_back(sq.q_len);
    info.seq_lens.push_back(sq.ctx);
    std::copy(u.blocks[size_t(s)].begin(), u.blocks[size_t(s)].end(), btab.begin() + size_t(i) * u.max_blocks);
    q.insert(q.end(), u.q[size_t(s)].begin(), u.q[size_t(s)].end());
  }
  ASSERT_GE(target_row, 0);
  const int T = qsl[size_t(S)];
  const size_t row_bytes = size_t(kHq) * kD * dtype_size(kDtype);

  attention_test::DeviceAllocations dev;
  void *dq = nullptr, *dout = nullptr;
  int *dqsl = nullptr, *dsl = nullptr, *dbt = nullptr;
  CUDA_OK(dev.alloc(&dq, q.size()));
  CUDA_OK(dev.alloc(&dout, q.size()));
  CUDA_OK(dev.alloc(&dqsl, sizeof(int) * qsl.size()));
  CUDA_OK(dev.alloc(&dsl, sizeof(int) * seq_lens.size()));
  CUDA_OK(dev.alloc(&dbt, sizeof(int) * btab.size()));
  CUDA_OK(cudaMemcpy(dq, q.data(), q.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dout, 0xff, q.size()));  // NaN: a row left unwritten shows
  CUDA_OK(cudaMemcpy(dqsl, qsl.data(), sizeof(int) * qsl.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dsl, seq_lens.data(), sizeof(int) * seq_lens.size(), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dbt, btab.data(), sizeof(int) * btab.size(), cudaMemcpyHostToDevice));

  PagedAttentionParams p;
  p.q = dq;
  p.out = dout;
  p.kv_cache = u.cache;
  p.dtype = kDtype;
  p.kv_dtype = u.kv_dtype;
  p.num_tokens = T;
  p.num_seqs = S;
  p.num_q_heads = kHq;
  p.num_kv_heads = kHk;
  p.head_size = kD;
  p.block_size = kBs;
  p.max_blocks_per_seq = u.max_blocks;
  p.query_start_loc = dqsl;
  p.seq_lens = dsl;
  p.block_tables = dbt;
  p.scale = 1.f / std::sqrt(float(kD));
  p.k_scale = u.kv_dtype == kDtype ? 1.f : 0.75f;
  p.v_scale = u.kv_dtype == kDtype ? 1.f : 1.25f;

  cudaDeviceProp prop;
  CUDA_OK(cudaGetDeviceProperties(&prop, 0));
  constexpr int kMaxSeqs = 33;
  if (planner == Planner::kPaged) {
    PagedAttentionOptions opt;
    opt.num_sms = prop.multiProcessorCount;
    opt.fp8_kv = dtype_is_fp8(u.kv_dtype);
    opt.batch_invariant = true;
    if (force_splits) {
      opt.force_splits = true;
      opt.max_splits = 16;
    }
    PagedAttentionWorkspace ws;
    ws.reserve(T, S, kHq, kD, opt.max_splits);
    plan_paged_attention(info, kHq, kHk, kD, kDtype, opt, ws, nullptr);
    run_paged_attention(p, ws, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
  } else {
    FlashAttnOptions opt;
    opt.version = planner == Planner::kFlash3 ? 3 : 2;
    opt.num_sms = prop.multiProcessorCount;
    opt.batch_invariant = true;
    if (force_splits) {
      opt.force_splits = true;
      opt.max_splits = 16;
    }
    FlashAttnWorkspace ws;
    ws.reserve(T, S, kHq, kD, opt.max_splits);
    // Room for the lone sequence's context (plus the partial last blocks of up to 32 sequences), not for
    // the prefill contexts of the larger steps.
    if (planner == Planner::kFlash3) ws.reserve_kv_stage(u.seqs[0].ctx, kMaxSeqs, kHk, kD, kDtype);
    plan_flash_attention(info, kHq, kHk, kD, kDtype, u.kv_dtype, /*alibi=*/false, opt, ws, nullptr);
    run_flash_attention(p, ws, nullptr);
    CUDA_OK(cudaDeviceSynchronize());
  }
  std::vector<uint8_t> all(q.size());
  CUDA_OK(cudaMemcpy(all.data(), dout, all.size(), cudaMemcpyDeviceToHost));
  const size_t begin = size_t(target_row) * row_bytes;
  out.assign(all.begin() + long(begin), all.begin() + long(begin + size_t(u.seqs[0].q_len) * row_bytes));
}

// The sequence under test alone, then in steps of 2, 7 and 33 (at different positions) with sequences of
// other lengths: decode tokens over short and long contexts, and prefill chunks whose contexts (3000 + 2000
// tokens in the step of 7) overflow the FA3 staging buffer.
void check_invariant(Seq target, DType kv_dtype, Planner planner) {
  SCOPED_TRACE(planner_name(planner) + " q_len " + std::to_string(target.q_len) + " ctx " +
               std::to_string(target.ctx) + " kv " + std::string(dtype_name(kv_dtype)));
  std::vector<Seq> seqs{target};
  const std::vector<Seq> others{{1, 700},    {300, 3000}, {1, 40},  {1, 5000}, {17, 2000}, {129, 129},
                                {1, 1},      {64, 64},    {1, 4099}, {5, 900}, {1, 2500}};
  for (int i = 0; i < 32; ++i) seqs.push_back(others[size_t(i) % others.size()]);
  Universe u;
  make_universe(u, seqs, kv_dtype, unsigned(target.q_len * 7 + target.ctx));
  if (::testing::Test::HasFatalFailure()) return;

  std::vector<uint8_t> alone;
  run_step(u, {0}, planner, false, alone);
  if (::testing::Test::HasFatalFailure()) return;
  size_t nan_count = 0;
  for (size_t i = 0; i < alone.size() / 2; ++i)
    if (std::isnan(load_as_f32(alone.data(), kDtype, i))) ++nan_count;
  EXPECT_EQ(nan_count, 0u) << "unwritten or NaN outputs of the lone sequence";

  struct Step {
    std::vector<int> order;
    bool force_splits;
  };
  std::vector<Step> steps;
  steps.push_back({{1, 0}, false});
  steps.push_back({{2, 3, 4, 0, 5, 6, 7}, false});
  std::vector<int> all;
  for (int i = 1; i <= 32; ++i) {
    if (i == 17) all.push_back(0);
    all.push_back(i);
  }
  steps.push_back({all, true});
  for (const Step& st : steps) {
    SCOPED_TRACE("step of " + std::to_string(st.order.size()) + " sequences");
    std::vector<uint8_t> in_step;
    run_step(u, st.order, planner, st.force_splits, in_step);
    if (::testing::Test::HasFatalFailure()) return;
    ASSERT_EQ(in_step.size(), alone.size());
    size_t differ = 0;
    for (size_t i = 0; i < alone.size() / 2; ++i)
      if (std::memcmp(&alone[2 * i], &in_step[2 * i], 2) != 0) ++differ;
    EXPECT_EQ(differ, 0u) << differ << " of " << alone.size() / 2 << " outputs differ from the lone sequence's";
  }
}

class AttentionBatchInvariance : public ::testing::TestWithParam<Planner> {};

TEST_P(AttentionBatchInvariance, DecodeSequence) {
  SKIP_WITHOUT_GPU();
  for (DType kv : {DType::kBF16, DType::kF8E4M3}) check_invariant({1, 3000}, kv, GetParam());
}

TEST_P(AttentionBatchInvariance, PrefillChunk) {
  SKIP_WITHOUT_GPU();
  for (DType kv : {DType::kBF16, DType::kF8E4M3}) check_invariant({200, 1000}, kv, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Planners, AttentionBatchInvariance,
                         ::testing::Values(Planner::kPaged, Planner::kFlash2, Planner::kFlash3),
                         [](const ::testing::TestParamInfo<Planner>& info) { return planner_name(info.param); });

}  // namespace
}  // namespace pagoda
