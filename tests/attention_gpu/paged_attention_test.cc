// TRITON_ATTN kernels against a float64 CPU reference on the shapes that break kernels (house style §5); the
// reference, the derived tolerance and the case runner are in paged_attention_reference.h.
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include "paged_attention_reference.h"
#include "pagoda/attention/paged/paged_attention.h"

namespace pagoda {
namespace {

using attention_test::Case;

// plan_paged_attention + run_paged_attention; `separate`: use_prefill_decode_attention (prefill and decode
// planned and launched separately).
void run_case(const Case& c, bool separate = false) {
  auto launch = [separate](const PagedAttentionParams& p, const AttentionBatchInfo& info, const Case& cs, int num_sms) {
    const int T = p.num_tokens, S = p.num_seqs, Hq = p.num_q_heads, Hk = p.num_kv_heads, D = p.head_size;
    PagedAttentionOptions opt;
    opt.num_sms = num_sms;
    if (cs.force_splits > 0) {
      opt.max_splits = cs.force_splits;
      opt.force_splits = true;
    }
    opt.in_kernel_merge_min_splits = cs.merge_in_kernel_from;
    opt.cluster_merge = cs.cluster_merge;
    opt.fp8_kv = dtype_is_fp8(cs.kv_dtype);
    opt.batch_invariant = cs.batch_invariant;
    PagedAttentionWorkspace ws, ws2;
    ws.reserve(T, S, Hq, D, opt.max_splits);
    if (separate) {
      ws2.reserve(T, S, Hq, D, opt.max_splits);
      PagedAttentionOptions pre = opt, dec = opt;
      pre.sequences = SeqFilter::kPrefill;
      dec.sequences = SeqFilter::kDecode;
      plan_paged_attention(info, Hq, Hk, D, cs.dtype, pre, ws, nullptr);
      plan_paged_attention(info, Hq, Hk, D, cs.dtype, dec, ws2, nullptr);
      run_paged_attention(p, ws, nullptr);
      run_paged_attention(p, ws2, nullptr);
    } else {
      plan_paged_attention(info, Hq, Hk, D, cs.dtype, opt, ws, nullptr);
      for (int i = 0; i < cs.launches; ++i) {
        if (i > 0) attention_test::repoison_output(p);
        run_paged_attention(p, ws, nullptr);
      }
    }
    CUDA_OK(cudaDeviceSynchronize());
  };
  attention_test::run_case(c, separate ? "TRITON-PD" : "TRITON", launch);
}

TEST(PagedAttentionGpu, PrefillLengthsAndHeads) {
  SKIP_WITHOUT_GPU();
  for (int L : {1, 7, 17, 97, 513}) {
    for (int D : {64, 128, 256}) {
      Case c;
      c.query_lens = {L};
      c.seq_lens = {L};
      c.head_size = D;
      c.seed = L * 1000 + D;
      run_case(c);
    }
  }
}

TEST(PagedAttentionGpu, LongPrefill4099) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.query_lens = {4099};
  c.seq_lens = {4099};
  c.num_q_heads = 4;
  c.num_kv_heads = 1;
  c.check_every = 41;
  run_case(c);
}

TEST(PagedAttentionGpu, GqaRatiosAndBlockSizes) {
  SKIP_WITHOUT_GPU();
  for (auto [hq, hk] : std::vector<std::pair<int, int>>{{8, 8}, {8, 2}, {16, 2}, {32, 4}}) {
    for (int bs : {16, 32, 64}) {
      Case c;
      c.query_lens = {33, 1, 5};
      c.seq_lens = {97, 300, 5};
      c.num_q_heads = hq;
      c.num_kv_heads = hk;
      c.block_size = bs;
      c.seed = hq * 100 + hk * 10 + bs;
      run_case(c);
    }
  }
}

TEST(PagedAttentionGpu, MixedPrefillDecodeBatch) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.query_lens = {1, 1, 129, 1, 17, 1, 7};
  c.seq_lens = {1, 4099, 513, 33, 17, 700, 100};  // decode tokens and prefill chunks over cached prefixes
  for (DType t : {DType::kBF16, DType::kF16}) {
    c.dtype = c.kv_dtype = t;
    run_case(c);
    run_case(c, /*separate=*/true);  // use_prefill_decode_attention
  }
}

TEST(PagedAttentionGpu, DecodeSplitKv) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : attention_test::decode_split_kv_cases()) run_case(c);
}

// The kernels compute their work item ({i, 0, 0, 1}) only when the planned list is exactly that: every
// sequence a single unsplit decode row group. Checked on the plan, then the computed-item batch on the GPU.
TEST(PagedAttentionGpu, DecodeComputedWorkItems) {
  SKIP_WITHOUT_GPU();
  auto plans_identity = [](const AttentionBatchInfo& info, int num_sms, SeqFilter sequences) {
    PagedAttentionOptions opt;
    opt.num_sms = num_sms;
    opt.sequences = sequences;
    PagedAttentionWorkspace ws;
    int tokens = 0;
    for (int q : info.query_lens) tokens += q;
    ws.reserve(tokens, int(info.query_lens.size()), 32, 128, opt.max_splits);
    plan_paged_attention(info, 32, 8, 128, DType::kBF16, opt, ws, nullptr);
    return ws.work_is_seq;
  };
  constexpr SeqFilter kAll = SeqFilter::kAll;
  EXPECT_TRUE(plans_identity({{1, 1, 1}, {900, 40, 3000}}, 8, kAll));    // 24 row groups on 8 SMs: no split
  EXPECT_FALSE(plans_identity({{1, 1, 1}, {900, 40, 3000}}, 132, kAll));  // split KV: several items per sequence
  EXPECT_FALSE(plans_identity({{1, 9, 1}, {900, 40, 3000}}, 8, kAll));    // a prefill chunk: 64-row tiles
  EXPECT_FALSE(plans_identity({{1, 9, 1}, {900, 40, 3000}}, 8, SeqFilter::kDecode));  // skips sequence 1
  Case c;
  c.query_lens = std::vector<int>(160, 1);  // 160 x 8 row groups on the GPU's SMs: one unsplit item each
  c.num_q_heads = 32;
  c.num_kv_heads = 8;
  for (int s = 0; s < 160; ++s) c.seq_lens.push_back(1 + (s * 97) % 700);
  c.seed = 31;
  run_case(c);
}

TEST(PagedAttentionGpu, StridedQuery) {
  SKIP_WITHOUT_GPU();
  for (DType t : {DType::kBF16, DType::kF32}) {
    Case c;
    c.query_lens = {9, 1};
    c.seq_lens = {9, 300};
    c.dtype = c.kv_dtype = t;
    c.q_pad = 2 * 2 * 128;  // the k and v of a fused qkv row follow each token's q
    run_case(c);
  }
}

TEST(PagedAttentionGpu, Fp8KvCache) {
  SKIP_WITHOUT_GPU();
  for (DType kv : {DType::kF8E4M3, DType::kF8E5M2}) {
    for (DType t : {DType::kBF16, DType::kF16}) {
      Case c;
      c.query_lens = {1, 40, 1};
      c.seq_lens = {1000, 40, 77};
      c.dtype = t;
      c.kv_dtype = kv;
      run_case(c);
    }
  }
}

// Decode-only steps over an fp8 cache: the decode kernel's fp8 path (raw copies, a per-warp conversion pass),
// with the planner's splits and forced ones, merged by the merge kernel or in the decode kernel, relaunched
// on a poisoned output.
TEST(PagedAttentionGpu, Fp8DecodeKernel) {
  SKIP_WITHOUT_GPU();
  for (DType kv : {DType::kF8E4M3, DType::kF8E5M2}) {
    struct Run {
      int splits;  // 0: the planner's
      bool in_kernel;
    };
    for (const Run run : {Run{0, false}, Run{1, false}, Run{5, false}, Run{5, true}}) {
      const int splits = run.splits;
      Case c;
      c.merge_in_kernel_from = run.in_kernel ? 2 : 0;
      c.query_lens = {1, 1, 1};
      c.seq_lens = {4099, 1, 1000};
      c.num_q_heads = 32;
      c.num_kv_heads = 8;
      c.kv_dtype = kv;
      c.dtype = kv == DType::kF8E4M3 ? DType::kBF16 : DType::kF16;
      c.head_size = splits == 5 ? 64 : 128;
      c.force_splits = splits;
      c.launches = 2;
      c.seed = 7 + splits + (run.in_kernel ? 100 : 0);
      run_case(c);
    }
  }
}

TEST(PagedAttentionGpu, Float32AndOddHeadSizes) {
  SKIP_WITHOUT_GPU();
  for (int D : {32, 64, 128, 256}) {
    Case c;
    c.query_lens = {17, 1};
    c.seq_lens = {17, 200};
    c.head_size = D;
    c.dtype = c.kv_dtype = DType::kF32;
    run_case(c);
  }
  for (int D : {32, 40, 80, 96, 192}) {  // padded to the next instantiated head dim
    Case c;
    c.query_lens = {17, 1};
    c.seq_lens = {33, 200};
    c.head_size = D;
    run_case(c);
  }
  Case odd;  // not a multiple of 8: CUDA-core kernel
  odd.query_lens = {9, 1};
  odd.seq_lens = {9, 50};
  odd.dtype = odd.kv_dtype = DType::kF16;
  odd.head_size = 44;
  run_case(odd);
}

// The batch-invariant plan (one KV split; decode tiles in the general kernel, not the decode-only one)
// against the reference: a mixed step, a decode-only step (which the default rule splits and gives the
// decode kernel), with forced splits that the rule ignores, fp8 KV, prefill and decode planned separately,
// and fp32 (the CUDA-core kernel). attention_batch_invariance_gpu_test checks the invariance itself.
TEST(PagedAttentionGpu, BatchInvariantPlan) {
  SKIP_WITHOUT_GPU();
  Case mixed;
  mixed.query_lens = {1, 1, 129, 1, 17, 1, 7};
  mixed.seq_lens = {1, 4099, 513, 33, 17, 700, 100};
  Case decode;
  decode.query_lens = {1, 1, 1};
  decode.seq_lens = {4099, 1, 1000};
  decode.num_q_heads = 32;
  decode.num_kv_heads = 8;
  for (Case c : {mixed, decode}) {
    c.batch_invariant = true;
    for (DType kv : {DType::kBF16, DType::kF8E4M3}) {
      c.kv_dtype = kv;
      c.force_splits = 0;
      run_case(c);
      c.force_splits = 8;
      run_case(c);
    }
    c.kv_dtype = c.dtype;
    c.force_splits = 0;
    run_case(c, /*separate=*/true);
    c.dtype = c.kv_dtype = DType::kF32;
    run_case(c);
  }
}

TEST(PagedAttentionGpu, SlidingWindowSoftcapAlibiSinksHnd) {
  SKIP_WITHOUT_GPU();
  Case c;
  c.query_lens = {100, 1, 3};
  c.seq_lens = {300, 500, 3};
  for (const Case& one : attention_test::one_feature_cases(c)) run_case(one);
  c.layout = KvLayout::kHND;
  c.dtype = c.kv_dtype = DType::kF32;  // the CUDA-core kernel with every feature
  c.sliding_window = 50;
  c.softcap = 10.f;
  c.alibi = c.sinks = true;
  run_case(c);
}

}  // namespace
}  // namespace pagoda
