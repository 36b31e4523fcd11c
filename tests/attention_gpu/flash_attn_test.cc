// FLASH_ATTN (plan_flash_attention + run_flash_attention) against the float64 CPU reference of
// paged_attention_reference.h (derived tolerance, poisoned output, random inputs) on the shapes that break
// kernels, for FlashAttention version 2 and version 3. Version 3 sends prefill chunks of head size
// 64/128/256 to the FA3 kernel on an SM 9.0 device that has it, and everything else (decode tokens, other
// head sizes, fp8 KV, ALiBi; every token on other devices or without the kernel) to the FA2 kernels in the
// same step: both versions must pass the same cases whichever path ran. Version 3 runs twice: reading the
// paged cache directly (whole-tile TMA or the 16-token gather), and with a KV staging buffer (the step's
// prefill context copied into contiguous blocks first; fp8 KV then also reaches the FA3 kernel).
#include <cuda_runtime_api.h>

#include <gtest/gtest.h>

#include "paged_attention_reference.h"
#include "pagoda/attention/flash_attn/flash_attn.h"

namespace pagoda {
namespace {

using attention_test::Case;

struct Mode {
  int version;
  bool kv_stage;  // reserve a KV staging buffer (FA3 steps stage their context)
};

class FlashAttnGpu : public ::testing::TestWithParam<Mode> {
 protected:
  void run_case(const Case& c) const {
    const int v = GetParam().version;
    const bool stage = GetParam().kv_stage;
    auto launch = [v, stage](const PagedAttentionParams& p, const AttentionBatchInfo& info, const Case& cs,
                             int num_sms) {
      FlashAttnOptions opt;
      opt.version = v;
      opt.num_sms = num_sms;
      if (cs.force_splits > 0) {  // as a captured decode step: a fixed split count
        opt.max_splits = cs.force_splits;
        opt.force_splits = true;
      }
      opt.in_kernel_merge_min_splits = cs.merge_in_kernel_from;
      opt.cluster_merge = cs.cluster_merge;
      opt.batch_invariant = cs.batch_invariant;
      FlashAttnWorkspace ws;
      ws.reserve(p.num_tokens, p.num_seqs, p.num_q_heads, p.head_size, opt.max_splits);
      if (stage) {
        int tokens = 0;
        for (int ctx : info.seq_lens) tokens += ctx;
        ws.reserve_kv_stage(tokens, p.num_seqs, p.num_kv_heads, p.head_size, p.dtype);
      }
      plan_flash_attention(info, p.num_q_heads, p.num_kv_heads, p.head_size, p.dtype, p.kv_dtype,
                           p.alibi_slopes != nullptr, opt, ws, nullptr);
      for (int i = 0; i < cs.launches; ++i) {
        if (i > 0) attention_test::repoison_output(p);
        run_flash_attention(p, ws, nullptr);
      }
      CUDA_OK(cudaDeviceSynchronize());
    };
    attention_test::run_case(c, "FA" + std::to_string(v) + (stage ? "-staged" : ""), launch);
  }
};

constexpr DType kHalfTypes[] = {DType::kBF16, DType::kF16};

// Single causal prefills of the lengths that break kernels, every head size class: 8 (stories260K; FA2 pads
// it to 32), 64/128/256 (FA3's), 96 (FA2 pads it to 128).
TEST_P(FlashAttnGpu, PrefillLengthsAndHeads) {
  SKIP_WITHOUT_GPU();
  for (DType t : kHalfTypes) {
    for (int L : {1, 7, 17, 97, 513}) {
      for (int D : {8, 64, 96, 128, 256}) {
        Case c;
        c.query_lens = {L};
        c.seq_lens = {L};
        c.head_size = D;
        c.dtype = c.kv_dtype = t;
        c.seed = unsigned(L * 1000 + D);
        run_case(c);
      }
    }
  }
}

TEST_P(FlashAttnGpu, LongPrefill4099) {
  SKIP_WITHOUT_GPU();
  for (DType t : kHalfTypes) {
    Case c;
    c.query_lens = {4099};
    c.seq_lens = {4099};
    c.head_size = 128;
    c.dtype = c.kv_dtype = t;
    c.check_every = 41;
    run_case(c);
  }
}

// Two long prefills (GQA 4) and a chunk of a prefill over a cached prefix (q_len 300 < context 2000) in one
// step: several FA3 tiles per sequence, the longest first.
TEST_P(FlashAttnGpu, LongPrefillsAndAChunkedPrefill) {
  SKIP_WITHOUT_GPU();
  for (int D : {64, 128, 256}) {
    Case c;
    c.query_lens = {1000, 3000, 300};
    c.seq_lens = {1000, 3000, 2000};
    c.num_q_heads = 16;
    c.num_kv_heads = 4;
    c.head_size = D;
    c.check_every = 37;
    c.seed = unsigned(D);
    run_case(c);
  }
}

TEST_P(FlashAttnGpu, GqaRatiosAndBlockSizes) {
  SKIP_WITHOUT_GPU();
  for (auto [hq, hk] : std::vector<std::pair<int, int>>{{8, 8}, {16, 4}, {32, 4}}) {  // GQA 1, 4, 8
    for (int bs : {16, 32, 64}) {
      for (int D : {8, 128}) {
        Case c;
        c.query_lens = {33, 1, 5};
        c.seq_lens = {97, 300, 5};
        c.num_q_heads = hq;
        c.num_kv_heads = hk;
        c.block_size = bs;
        c.head_size = D;
        c.seed = unsigned(hq * 100 + hk * 10 + bs + D);
        run_case(c);
      }
    }
  }
}

// Both FA3 load paths: block sizes holding whole tiles (128 keys; 80 at head 256) take TMA tile loads, the
// others the cp.async page gather (staged: TMA tiles straddling staged blocks); causal and non-causal (FA2:
// the same kernels with the causal bound lifted).
TEST_P(FlashAttnGpu, WholeTileLoadsAndNonCausal) {
  SKIP_WITHOUT_GPU();
  struct Shape {
    int head_size, block_size;
    KvLayout layout;
  };
  const std::vector<Shape> shapes{{128, 128, KvLayout::kNHD}, {128, 256, KvLayout::kHND}, {64, 128, KvLayout::kNHD},
                                  {256, 80, KvLayout::kNHD},  {256, 160, KvLayout::kHND}, {256, 64, KvLayout::kNHD},
                                  {128, 16, KvLayout::kNHD}};
  for (const Shape& sh : shapes) {
    for (bool causal : {true, false}) {
      Case c;
      c.query_lens = {300, 129, 1, 64};
      c.seq_lens = {300, 1000, 50, 64};
      c.head_size = sh.head_size;
      c.block_size = sh.block_size;
      c.layout = sh.layout;
      c.causal = causal;
      c.seed = unsigned(sh.head_size + sh.block_size + (causal ? 1 : 0));
      run_case(c);
    }
  }
}

// Decode tokens and prefill chunks over cached prefixes in one step: under FA3 the prefill chunks run the
// FA3 kernel and the decode tokens the FA2 decode plan.
TEST_P(FlashAttnGpu, MixedPrefillDecodeBatch) {
  SKIP_WITHOUT_GPU();
  for (DType t : kHalfTypes) {
    for (int D : {64, 128, 256}) {
      Case c;
      c.query_lens = {1, 1, 129, 1, 17, 1, 7};
      c.seq_lens = {1, 4099, 513, 33, 17, 700, 100};
      c.head_size = D;
      c.dtype = c.kv_dtype = t;
      c.seed = unsigned(D);
      run_case(c);
    }
  }
}

// The decode split-KV plan: forced split counts (what a captured decode step uses) and the planner's own.
TEST_P(FlashAttnGpu, DecodeSplitKv) {
  SKIP_WITHOUT_GPU();
  for (const Case& c : attention_test::decode_split_kv_cases()) run_case(c);
}

// q as a slice of a fused qkv row, as the CUDA model runner passes it.
TEST_P(FlashAttnGpu, StridedQuery) {
  SKIP_WITHOUT_GPU();
  for (int D : {8, 128}) {
    Case c;
    c.query_lens = {9, 200, 1};
    c.seq_lens = {9, 200, 300};
    c.head_size = D;
    c.q_pad = 2 * c.num_kv_heads * D;  // the k and v of a fused qkv row follow each token's q
    run_case(c);
  }
}

TEST_P(FlashAttnGpu, SlidingWindowSoftcapSinksAlibiHnd) {
  SKIP_WITHOUT_GPU();
  for (int D : {64, 128}) {
    Case c;
    c.query_lens = {100, 1, 3, 300};
    c.seq_lens = {300, 500, 3, 700};
    c.head_size = D;
    for (const Case& one : attention_test::one_feature_cases(c)) run_case(one);  // ALiBi: FA2 under either version
    c.layout = KvLayout::kHND;
    c.sliding_window = 50;  // every feature at once but ALiBi, fp16
    c.softcap = 10.f;
    c.sinks = true;
    c.dtype = c.kv_dtype = DType::kF16;
    run_case(c);
  }
}

// FP8 KV (e4m3, the one the FLASH_ATTN declaration accepts, with FA3): FA2 dequantizes it in its kernels;
// with staging, the FA3 kernel reads the widened copy and applies k_scale/v_scale.
TEST_P(FlashAttnGpu, Fp8KvCache) {
  SKIP_WITHOUT_GPU();
  for (DType t : kHalfTypes) {
    Case c;
    c.query_lens = {1, 40, 1};
    c.seq_lens = {1000, 40, 77};
    c.dtype = t;
    c.kv_dtype = DType::kF8E4M3;
    run_case(c);
    Case chunk;  // a chunk of 300 after 700 cached tokens: 8 staged blocks, the last one partial
    chunk.query_lens = {300};
    chunk.seq_lens = {1000};
    chunk.dtype = t;
    chunk.kv_dtype = DType::kF8E4M3;
    run_case(chunk);
  }
}

// The batch-invariant plan against the reference: the FA2 plan with one KV split and no decode-only kernel
// (forced splits ignored), and fp8 KV never staged (version 3 runs its fp8 prefill chunks on FA2); 16-bit
// prefill chunks still run FA3, staged or gathered. attention_batch_invariance_gpu_test checks the
// invariance itself.
TEST_P(FlashAttnGpu, BatchInvariantPlan) {
  SKIP_WITHOUT_GPU();
  Case mixed;
  mixed.query_lens = {1, 1, 129, 1, 17, 1, 7};
  mixed.seq_lens = {1, 4099, 513, 33, 17, 700, 100};
  Case decode;
  decode.query_lens = {1, 1, 1};
  decode.seq_lens = {4099, 1, 1000};
  decode.num_q_heads = 32;
  decode.num_kv_heads = 8;
  Case chunk;  // a chunk of 300 after 700 cached tokens
  chunk.query_lens = {300};
  chunk.seq_lens = {1000};
  for (Case c : {mixed, decode, chunk}) {
    c.batch_invariant = true;
    for (DType kv : {DType::kBF16, DType::kF8E4M3}) {
      c.kv_dtype = kv;
      c.force_splits = 0;
      run_case(c);
      c.force_splits = 8;
      run_case(c);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Versions, FlashAttnGpu, ::testing::Values(Mode{2, false}, Mode{3, false}, Mode{3, true}),
                         [](const ::testing::TestParamInfo<Mode>& info) {
                           return "FA" + std::to_string(info.param.version) + (info.param.kv_stage ? "Staged" : "");
                         });

}  // namespace
}  // namespace pagoda
