// Spec §3: every backend's declared capabilities, the order of reasons, and the KV cache shapes of §10.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pagoda/attention/backends.h"
#include "pagoda/attention/registry.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

using Reasons = std::vector<std::string>;

Reasons why(BackendName b, SelectorConfig cfg, ComputeCapability cc, AttentionConfig ac = {}, bool bi = false) {
  static BackendRegistry reg = BackendRegistry::builtin(true);
  cfg.use_batch_invariant = bi;
  SelectionEnv env{cc, &ac, bi};
  return reg.get(b).why_not(cfg, env);
}

SelectorConfig base() { return SelectorConfig{}; }
const ComputeCapability kH100{9, 0}, kL4{8, 9}, kA100{8, 0}, kT4{7, 5}, kB200{10, 0}, kSpark{12, 1}, kRtx50{12, 0};

TEST(Validate, DefaultConfigOnH100) {
  EXPECT_THAT(why(BackendName::kFlashAttn, base(), kH100), testing::IsEmpty());
  EXPECT_THAT(why(BackendName::kFlashInfer, base(), kH100), testing::IsEmpty());
  EXPECT_THAT(why(BackendName::kTritonAttn, base(), kH100), testing::IsEmpty());
  EXPECT_THAT(why(BackendName::kFlexAttention, base(), kH100), testing::IsEmpty());
  EXPECT_EQ(why(BackendName::kTurboQuant, base(), kH100), Reasons{"kv_cache_dtype not supported"});
  EXPECT_EQ(why(BackendName::kCpuAttn, base(), kH100), Reasons{"compute capability not supported"});
}

TEST(Validate, FlashAttnHeadSizes) {
  auto c = base();
  for (int h : {8, 64, 72, 128, 256}) {
    c.head_size = h;
    EXPECT_THAT(why(BackendName::kFlashAttn, c, kH100), testing::IsEmpty()) << h;
  }
  for (int h : {4, 12, 260, 512}) {
    c.head_size = h;
    EXPECT_EQ(why(BackendName::kFlashAttn, c, kH100), Reasons{"head_size not supported"}) << h;
  }
}

TEST(Validate, FlashAttnFp8OnlyWithFa3OnSm9x) {
  auto c = base();
  for (const char* kv : {"fp8", "fp8_e4m3"}) {
    c.kv_cache_dtype = kv;
    EXPECT_THAT(why(BackendName::kFlashAttn, c, kH100), testing::IsEmpty()) << kv;
    for (auto cc : {kL4, kA100, kB200, kSpark}) {
      EXPECT_EQ(why(BackendName::kFlashAttn, c, cc),
                (Reasons{"kv_cache_dtype not supported", "FP8 KV cache requires FA3 on SM90 or FA4 on SM100"}));
    }
    AttentionConfig fa2;
    fa2.flash_attn_version = 2;  // FA2 forced on an H100: no FP8
    EXPECT_EQ(why(BackendName::kFlashAttn, c, kH100, fa2).size(), 2u);
  }
  c.kv_cache_dtype = "fp8_e5m2";  // never
  EXPECT_EQ(why(BackendName::kFlashAttn, c, kH100),
            (Reasons{"kv_cache_dtype not supported", "FP8 KV cache requires FA3 on SM90 or FA4 on SM100"}));
}

TEST(Validate, FlashAttnSinks) {
  auto c = base();
  c.has_sink = true;
  EXPECT_THAT(why(BackendName::kFlashAttn, c, kH100), testing::IsEmpty());
  EXPECT_EQ(why(BackendName::kFlashAttn, c, kA100),
            (Reasons{"attention sinks not supported", "sink not supported on compute capability < 9.0"}));
  c.use_per_head_quant_scales = true;
  EXPECT_THAT(why(BackendName::kFlashAttn, c, kH100), testing::IsEmpty());
  EXPECT_EQ(why(BackendName::kFlashAttn, c, kB200),  // FA2 on SM 10.x: no sinks nor per-head scales
            (Reasons{"attention sinks not supported", "per-head quant scales not supported"}));
}

TEST(Validate, FlashAttnComputeCapabilityAndDtype) {
  auto c = base();
  EXPECT_EQ(why(BackendName::kFlashAttn, c, kT4), Reasons{"compute capability not supported"});
  c.dtype = DType::kF32;
  EXPECT_EQ(why(BackendName::kFlashAttn, c, kH100), Reasons{"dtype not supported"});
}

TEST(Validate, EveryCheckIsEvaluatedInOrder) {
  SelectorConfig c;
  c.head_size = 12;
  c.dtype = DType::kF32;
  c.kv_cache_dtype = "fp8_e5m2";
  c.block_size = 8;
  c.has_sink = true;
  c.use_per_head_quant_scales = true;
  c.attn_type = AttnType::kEncoder;
  c.has_sliding_window = true;
  c.use_non_causal = true;
  c.use_batch_invariant = true;
  EXPECT_EQ(why(BackendName::kFlashInfer, c, kT4, {}, true),
            (Reasons{"head_size not supported", "dtype not supported", "attention sinks not supported",
                     "per-head quant scales not supported", "compute capability not supported",
                     "attention type encoder not supported", "batch invariance not supported"}));
  EXPECT_EQ(why(BackendName::kTurboQuant, c, kH100, {}, true),
            (Reasons{"dtype not supported", "kv_cache_dtype not supported", "block_size not supported",
                     "attention sinks not supported", "per-head quant scales not supported",
                     "attention type encoder not supported", "sliding window not supported",
                     "non-causal attention not supported", "batch invariance not supported"}));
  EXPECT_EQ(why(BackendName::kFlashAttn, c, kA100, {}, true),
            (Reasons{"head_size not supported", "dtype not supported", "kv_cache_dtype not supported",
                     "block_size not supported", "attention sinks not supported",
                     "per-head quant scales not supported", "sink not supported on compute capability < 9.0"}));
}

TEST(Validate, FlashInfer) {
  auto c = base();
  for (int h : {64, 128, 256, 512}) {
    c.head_size = h;
    EXPECT_THAT(why(BackendName::kFlashInfer, c, kH100), testing::IsEmpty());
  }
  c.head_size = 96;
  EXPECT_EQ(why(BackendName::kFlashInfer, c, kH100), Reasons{"head_size not supported"});
  c = base();
  for (int bs : {1, 8, 24, 48, 4096}) {
    c.block_size = bs;
    EXPECT_THAT(why(BackendName::kFlashInfer, c, kH100), testing::IsEmpty()) << bs;
  }
  c = base();
  EXPECT_THAT(why(BackendName::kFlashInfer, c, kSpark), testing::IsEmpty());
  EXPECT_EQ(why(BackendName::kFlashInfer, c, ComputeCapability{12, 2}), Reasons{"compute capability not supported"});
  EXPECT_EQ(why(BackendName::kFlashInfer, c, kT4), Reasons{"compute capability not supported"});
  c.attn_type = AttnType::kEncoderOnly;
  EXPECT_EQ(why(BackendName::kFlashInfer, c, kH100), Reasons{"attention type encoder_only not supported"});
  c = base();
  c.kv_cache_dtype = "fp8_e5m2";
  EXPECT_THAT(why(BackendName::kFlashInfer, c, kL4), testing::IsEmpty());
  static BackendRegistry reg = BackendRegistry::builtin(true);
  EXPECT_EQ(reg.get(BackendName::kFlashInfer).required_kv_layout(kB200), KvLayout::kHND);
  EXPECT_EQ(reg.get(BackendName::kFlashInfer).required_kv_layout(kH100), std::nullopt);
}

TEST(Validate, TritonAttn) {
  auto c = base();
  c.dtype = DType::kF32;
  EXPECT_THAT(why(BackendName::kTritonAttn, c, kT4), testing::IsEmpty());
  c.head_size = 16;
  EXPECT_EQ(why(BackendName::kTritonAttn, c, kH100), Reasons{"head_size not supported"});
  c = base();
  c.kv_cache_dtype = "fp8";  // stays valid below SM 8.9; fails at construction
  EXPECT_THAT(why(BackendName::kTritonAttn, c, kT4), testing::IsEmpty());
  c.block_size = 24;
  EXPECT_EQ(why(BackendName::kTritonAttn, c, kH100), Reasons{"block_size not supported"});
  c.block_size = 48;
  EXPECT_THAT(why(BackendName::kTritonAttn, c, kH100), testing::IsEmpty());
  c = base();
  c.use_per_head_quant_scales = true;
  EXPECT_EQ(why(BackendName::kTritonAttn, c, kH100), Reasons{"per-head quant scales not supported"});
}

TEST(Validate, FlexAttention) {
  auto c = base();
  c.head_size = 16;
  c.dtype = DType::kF32;
  EXPECT_THAT(why(BackendName::kFlexAttention, c, kT4), testing::IsEmpty());
  c.kv_cache_dtype = "fp8";
  EXPECT_EQ(why(BackendName::kFlexAttention, c, kH100), Reasons{"kv_cache_dtype not supported"});
  c = base();
  c.attn_type = AttnType::kEncoderOnly;
  EXPECT_THAT(why(BackendName::kFlexAttention, c, kH100), testing::IsEmpty());
  c.attn_type = AttnType::kEncoderDecoder;
  EXPECT_EQ(why(BackendName::kFlexAttention, c, kH100), Reasons{"attention type encoder_decoder not supported"});
  c = base();
  c.has_sink = true;
  EXPECT_EQ(why(BackendName::kFlexAttention, c, kH100), Reasons{"attention sinks not supported"});
}

TEST(Validate, TurboQuant) {
  auto c = base();
  c.kv_cache_dtype = "turboquant_k8v4";
  c.head_size = 20;
  EXPECT_THAT(why(BackendName::kTurboQuant, c, kT4), testing::IsEmpty());
  for (int bs : {16, 48, 80, 4096}) {
    c.block_size = bs;
    EXPECT_THAT(why(BackendName::kTurboQuant, c, kH100), testing::IsEmpty()) << bs;
  }
  c.block_size = 8;
  EXPECT_EQ(why(BackendName::kTurboQuant, c, kH100), Reasons{"block_size not supported"});
  for (BackendName b : {BackendName::kFlashAttn, BackendName::kFlashInfer, BackendName::kTritonAttn,
                        BackendName::kFlexAttention}) {
    auto d = base();
    d.kv_cache_dtype = "turboquant_3bit_nc";
    EXPECT_THAT(why(b, d, kH100), testing::Contains("kv_cache_dtype not supported"));
  }
  EXPECT_EQ(turboquant_slot_size("turboquant_k8v4", 128), 196);
  EXPECT_EQ(turboquant_slot_size("turboquant_4bit_nc", 128), 134);
  EXPECT_EQ(turboquant_slot_size("turboquant_k3v4_nc", 128), 118);
  EXPECT_EQ(turboquant_slot_size("turboquant_3bit_nc", 128), 102);
}

TEST(Validate, CpuAttnForcedOnCuda) {
  auto c = base();
  EXPECT_EQ(why(BackendName::kCpuAttn, c, kH100), Reasons{"compute capability not supported"});
  c.head_size = 48;
  EXPECT_EQ(why(BackendName::kCpuAttn, c, kH100), (Reasons{"head_size not supported", "compute capability not supported"}));
}

TEST(Validate, NotBuiltInThisBinary) {
  BackendRegistry reg = BackendRegistry::builtin(false);
  EXPECT_TRUE(reg.built(BackendName::kCpuAttn));
  // The CUDA builds hold the FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION and TURBOQUANT CUDA kernels.
  constexpr bool kCudaBuild = PAGODA_TEST_CUDA_BUILD;
  EXPECT_EQ(reg.built(BackendName::kFlashInfer), kCudaBuild);
  EXPECT_EQ(reg.built(BackendName::kFlexAttention), kCudaBuild);
  EXPECT_EQ(reg.built(BackendName::kFlashAttn), kCudaBuild);
  EXPECT_EQ(reg.built(BackendName::kTritonAttn), kCudaBuild);
  EXPECT_EQ(reg.built(BackendName::kTurboQuant), kCudaBuild);
}

TEST(KvCacheShape, Layouts) {
  BackendRegistry reg = BackendRegistry::builtin(true);
  auto s = reg.get(BackendName::kFlashAttn).kv_cache_shape(10, 16, 8, 128, "auto", DType::kBF16, KvLayout::kNHD);
  EXPECT_EQ(s.logical, (std::vector<int64_t>{10, 8, 16, 256}));
  EXPECT_EQ(s.physical, (std::vector<int64_t>{10, 16, 8, 256}));
  EXPECT_EQ(s.element_bytes, 2);
  s = reg.get(BackendName::kTritonAttn).kv_cache_shape(10, 16, 8, 128, "fp8", DType::kBF16, KvLayout::kHND);
  EXPECT_EQ(s.physical, (std::vector<int64_t>{10, 8, 16, 256}));
  EXPECT_EQ(s.element_bytes, 1);
  s = reg.get(BackendName::kFlexAttention).kv_cache_shape(10, 16, 8, 128, "auto", DType::kF32, KvLayout::kHND);
  EXPECT_EQ(s.physical, (std::vector<int64_t>{10, 16, 8, 256}));  // always NHD
  s = reg.get(BackendName::kTurboQuant).kv_cache_shape(10, 16, 8, 128, "turboquant_k8v4", DType::kBF16, KvLayout::kNHD);
  EXPECT_EQ(s.logical, (std::vector<int64_t>{10, 8, 16, 196}));
  s = reg.get(BackendName::kCpuAttn).kv_cache_shape(10, 128, 2, 64, "auto", DType::kF32, KvLayout::kHND);
  EXPECT_EQ(s.physical, (std::vector<int64_t>{10, 2, 128, 128}));
  try {
    reg.get(BackendName::kFlashAttn).kv_cache_shape(10, 8, 8, 128, "auto", DType::kBF16, KvLayout::kNHD);
    FAIL();
  } catch (const Error& e) {
    EXPECT_STREQ(e.what(), "Block size must be a multiple of 16.");
  }
}

}  // namespace
}  // namespace pagoda
