// Spec §4-§7: priority lists, automatic and forced selection, the exact log lines and errors, the CPU
// path, FlashAttention versions, block size, KV layout and construction checks.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pagoda/attention/backends.h"
#include "pagoda/attention/selector.h"
#include "pagoda/attention/startup.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/core/turboquant.h"

namespace pagoda {
namespace {

using testing::ElementsAre;

struct Outcome {
  std::optional<BackendName> selected;
  std::vector<BackendName> per_layer;
  std::string error;
  std::vector<LogRecord> log;
  AttentionPlan plan;
  SelectionTrace trace;
};

struct Env {
  DeviceKind device = DeviceKind::kCuda;
  ComputeCapability cc{9, 0};
  AttentionConfig attention;
  bool batch_invariant = false;
  std::optional<KvLayout> env_layout;
  std::string device_name = "CUDA device";
};

Outcome run(const Env& s, const std::vector<SelectorConfig>& layers,
            const BackendRegistry& reg = BackendRegistry::builtin(true)) {
  Outcome o;
  LogCapture cap;
  LogSilence quiet;
  AttentionSelector sel(reg, {s.device, s.cc, s.device_name}, s.attention, s.batch_invariant, s.env_layout);
  try {
    std::optional<int> user_block = layers.empty() ? std::nullopt : layers[0].block_size;
    auto r = select_attention(sel, layers, user_block);
    o.selected = r.per_layer.front();
    o.per_layer = r.per_layer;
    o.plan = r.plan;
  } catch (const Error& e) {
    o.error = e.what();
  }
  o.trace = sel.last_trace();
  o.log = cap.records();
  return o;
}

Outcome run1(const Env& s, SelectorConfig cfg = {}) { return run(s, {cfg}); }

std::vector<std::string> messages(const Outcome& o, LogLevel l) {
  std::vector<std::string> m;
  for (const auto& r : o.log) if (r.level == l) m.push_back(r.message);
  return m;
}

const char* kDefaultRepr =
    "AttentionSelectorConfig(head_size=128, dtype=bfloat16, kv_cache_dtype=auto, block_size=None, has_sink=False, "
    "use_per_head_quant_scales=False, attn_type=decoder, has_sliding_window=False, use_non_causal=False, "
    "use_batch_invariant=False)";

TEST(SelectorConfig, Repr) { EXPECT_EQ(SelectorConfig{}.repr(), kDefaultRepr); }

TEST(Priority, Lists) {
  using B = BackendName;
  EXPECT_THAT(cuda_priority_list({9, 0}, false), ElementsAre(B::kFlashAttn, B::kFlashInfer, B::kTritonAttn, B::kFlexAttention, B::kTurboQuant));
  EXPECT_THAT(cuda_priority_list({10, 0}, false), ElementsAre(B::kFlashInfer, B::kFlashAttn, B::kTritonAttn, B::kFlexAttention, B::kTurboQuant));
  EXPECT_THAT(cuda_priority_list({10, 3}, false), ElementsAre(B::kFlashInfer, B::kFlashAttn, B::kTritonAttn, B::kFlexAttention, B::kTurboQuant));
  EXPECT_THAT(cuda_priority_list({10, 0}, true), ElementsAre(B::kFlashAttn, B::kFlashInfer, B::kTritonAttn, B::kFlexAttention, B::kTurboQuant));
  EXPECT_EQ(cuda_priority_list({11, 0}, false).front(), B::kFlashAttn);
  EXPECT_EQ(cuda_priority_list({12, 1}, false).front(), B::kFlashAttn);
}

// The seed's DGX Spark line (SM 12.1, defaults).
TEST(Auto, DgxSparkDefaultLine) {
  auto o = run1({.cc = {12, 1}});
  EXPECT_EQ(o.selected, BackendName::kFlashAttn);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER', "
                          "'TRITON_ATTN', 'FLEX_ATTENTION'].",
                          "Using FlashAttention version 2"));
  EXPECT_THAT(messages(o, LogLevel::kDebug),
              ElementsAre(std::string("Some attention backends are not valid for cuda with ") + kDefaultRepr +
                          ". Reasons: {TURBOQUANT: [kv_cache_dtype not supported]}."));
  EXPECT_EQ(o.plan.flash_attn_version, 2);
  EXPECT_EQ(o.plan.block_size, 16);
  EXPECT_EQ(o.plan.kv_layout, KvLayout::kNHD);
}

// The seed's L4 with --kv-cache-dtype fp8: FLASH_ATTN leaves, with its reasons in the DEBUG line.
TEST(Auto, L4Fp8KvCache) {
  SelectorConfig c;
  c.kv_cache_dtype = "fp8";
  auto o = run1({.cc = {8, 9}}, c);
  EXPECT_EQ(o.selected, BackendName::kFlashInfer);
  EXPECT_THAT(messages(o, LogLevel::kDebug),
              ElementsAre("Some attention backends are not valid for cuda with AttentionSelectorConfig(head_size=128, "
                          "dtype=bfloat16, kv_cache_dtype=fp8, block_size=None, has_sink=False, "
                          "use_per_head_quant_scales=False, attn_type=decoder, has_sliding_window=False, "
                          "use_non_causal=False, use_batch_invariant=False). Reasons: {FLASH_ATTN: [kv_cache_dtype not "
                          "supported, FP8 KV cache requires FA3 on SM90 or FA4 on SM100], FLEX_ATTENTION: "
                          "[kv_cache_dtype not supported], TURBOQUANT: [kv_cache_dtype not supported]}."));
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN']."));
  EXPECT_TRUE(messages(o, LogLevel::kWarning).empty());
}

TEST(Auto, H100Fp8UsesFa3) {
  SelectorConfig c;
  c.kv_cache_dtype = "fp8";
  auto o = run1({.cc = {9, 0}}, c);
  EXPECT_EQ(o.selected, BackendName::kFlashAttn);
  EXPECT_EQ(o.plan.flash_attn_version, 3);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', 'FLASHINFER', 'TRITON_ATTN'].",
                          "Using FlashAttention version 3"));
  c.kv_cache_dtype = "fp8_e5m2";
  o = run1({.cc = {9, 0}}, c);
  EXPECT_EQ(o.selected, BackendName::kFlashInfer);
}

TEST(Auto, Sm10PriorityFlipAndHndLayout) {
  auto o = run1({.cc = {10, 0}});
  EXPECT_EQ(o.selected, BackendName::kFlashInfer);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'FLASH_ATTN', "
                          "'TRITON_ATTN', 'FLEX_ATTENTION'].",
                          "Using HND KV cache layout for FLASHINFER backend."));
  EXPECT_EQ(o.plan.kv_layout, KvLayout::kHND);
  // HND required overrides the environment variable, which then logs nothing.
  o = run1({.cc = {10, 3}, .env_layout = KvLayout::kNHD});
  EXPECT_EQ(o.plan.kv_layout, KvLayout::kHND);
  // Non-causal restores the usual order.
  Env nc{.cc = {10, 0}};
  nc.attention.use_non_causal = true;
  SelectorConfig c;
  c.use_non_causal = true;
  o = run1(nc, c);
  EXPECT_EQ(o.selected, BackendName::kFlashAttn);
  EXPECT_EQ(o.plan.flash_attn_version, 2);
  EXPECT_EQ(o.plan.kv_layout, KvLayout::kNHD);
}

TEST(Auto, Sm10BatchInvariant) {
  SelectorConfig c;
  c.use_batch_invariant = true;
  auto o = run1({.cc = {10, 0}, .batch_invariant = true}, c);
  EXPECT_EQ(o.selected, BackendName::kFlashAttn);
  EXPECT_EQ(o.trace.potential, (std::vector<BackendName>{BackendName::kFlashAttn, BackendName::kTritonAttn, BackendName::kFlexAttention}));
  ASSERT_GE(o.trace.rejected.size(), 1u);
  EXPECT_EQ(o.trace.rejected[0].first, BackendName::kFlashInfer);
  EXPECT_EQ(o.trace.rejected[0].second, std::vector<std::string>{"batch invariance not supported"});
  EXPECT_EQ(o.plan.flash_attn_version, 2);
  EXPECT_EQ(o.plan.kv_layout, KvLayout::kNHD);
}

TEST(Auto, Float32FallsBackToTriton) {
  SelectorConfig c;
  c.dtype = DType::kF32;
  for (ComputeCapability cc : {ComputeCapability{7, 5}, ComputeCapability{9, 0}, ComputeCapability{10, 0}}) {
    auto o = run1({.cc = cc}, c);
    EXPECT_EQ(o.selected, BackendName::kTritonAttn);
    EXPECT_EQ(o.trace.potential, (std::vector<BackendName>{BackendName::kTritonAttn, BackendName::kFlexAttention}));
  }
  c.head_size = 16;
  auto o = run1({.cc = {9, 0}}, c);
  EXPECT_EQ(o.selected, BackendName::kFlexAttention);
}

TEST(Auto, T4Float16) {
  SelectorConfig c;
  c.dtype = DType::kF16;
  auto o = run1({.cc = {7, 5}}, c);
  EXPECT_EQ(o.selected, BackendName::kTritonAttn);
  EXPECT_EQ(o.trace.potential, (std::vector<BackendName>{BackendName::kTritonAttn, BackendName::kFlexAttention}));
  EXPECT_EQ(o.trace.rejected[0].second, std::vector<std::string>{"compute capability not supported"});
  EXPECT_EQ(o.trace.rejected[1].second, std::vector<std::string>{"compute capability not supported"});
  // fp8 on a T4: TRITON_ATTN is selected, then construction fails.
  c.kv_cache_dtype = "fp8";
  o = run1({.cc = {7, 5}}, c);
  EXPECT_FALSE(o.selected.has_value());
  EXPECT_EQ(o.error, "FP8 KV cache is not supported by the Triton attention backend on CUDA device (compute capability "
                     "7.5); native FP8 (fp8e4nv) requires SM89+. Re-run with --kv-cache-dtype float16.");
  c.kv_cache_dtype = "bfloat16";
  o = run1({.cc = {7, 5}, .device_name = "Tesla T4"}, c);
  EXPECT_EQ(o.error, "bfloat16 KV cache is not supported on Tesla T4 (compute capability 7.5); bfloat16 requires "
                     "SM80+. Re-run with --kv-cache-dtype float16.");
  // An A10-class SM 8.6 with fp8 suggests bfloat16.
  c.kv_cache_dtype = "fp8_e5m2";
  c.dtype = DType::kBF16;
  Env forced{.cc = {8, 6}};
  forced.attention.backend = BackendName::kTritonAttn;
  o = run1(forced, c);
  EXPECT_EQ(o.selected, std::nullopt);
  EXPECT_THAT(o.error, testing::EndsWith("Re-run with --kv-cache-dtype bfloat16."));
}

TEST(Auto, HeadSize512) {
  SelectorConfig c;
  c.head_size = 512;
  auto o = run1({.cc = {9, 0}}, c);
  EXPECT_EQ(o.selected, BackendName::kFlashInfer);
  EXPECT_EQ(o.trace.rejected[0].second, std::vector<std::string>{"head_size not supported"});
}

TEST(Auto, BlockSizeWarning) {
  SelectorConfig c;
  c.block_size = 8;
  for (ComputeCapability cc : {ComputeCapability{8, 0}, ComputeCapability{9, 0}, ComputeCapability{12, 1}}) {
    auto o = run1({.cc = cc}, c);
    EXPECT_EQ(o.selected, BackendName::kFlashInfer);
    EXPECT_THAT(messages(o, LogLevel::kWarning),
                ElementsAre("--block-size 8 precluded higher-priority backend(s) FLASH_ATTN. Using FLASHINFER instead, "
                            "which may result in reduced performance. Consider removing --block-size to auto-select the "
                            "optimal block size."));
    EXPECT_EQ(o.plan.block_size, 8);
  }
  c.block_size = 24;
  auto o = run1({.cc = {9, 0}}, c);
  EXPECT_THAT(messages(o, LogLevel::kWarning), ElementsAre(testing::StartsWith("--block-size 24 precluded higher-priority backend(s) FLASH_ATTN.")));
  // SM 10.x: FLASHINFER is first, no WARNING.
  c.block_size = 8;
  o = run1({.cc = {10, 0}}, c);
  EXPECT_EQ(o.selected, BackendName::kFlashInfer);
  EXPECT_TRUE(messages(o, LogLevel::kWarning).empty());
  // FLASH_ATTN rejected for two reasons is not named.
  c.kv_cache_dtype = "fp8";
  o = run1({.cc = {8, 9}}, c);
  EXPECT_EQ(o.selected, BackendName::kFlashInfer);
  EXPECT_TRUE(messages(o, LogLevel::kWarning).empty());
  // A T4 has no FLASHINFER: nothing is left.
  c = SelectorConfig{};
  c.block_size = 8;
  c.dtype = DType::kF16;
  o = run1({.cc = {7, 5}}, c);
  EXPECT_EQ(o.error,
            "No valid attention backend found for cuda with AttentionSelectorConfig(head_size=128, dtype=float16, "
            "kv_cache_dtype=auto, block_size=8, has_sink=False, use_per_head_quant_scales=False, attn_type=decoder, "
            "has_sliding_window=False, use_non_causal=False, use_batch_invariant=False). Reasons: {FLASH_ATTN: "
            "[block_size not supported, compute capability not supported], FLASHINFER: [compute capability not "
            "supported], TRITON_ATTN: [block_size not supported], FLEX_ATTENTION: [block_size not supported], "
            "TURBOQUANT: [kv_cache_dtype not supported, block_size not supported]}.");
}

TEST(Auto, DebugLineAlsoWhenNothingRejected) {
  SelectorConfig c;
  c.kv_cache_dtype = "turboquant_k8v4";
  c.dtype = DType::kF32;  // TURBOQUANT rejects float32: nothing valid
  auto o = run1({.cc = {9, 0}}, c);
  EXPECT_THAT(o.error, testing::StartsWith("No valid attention backend found for cuda with"));
  // A synthetic registry where every backend accepts the configuration logs "Reasons: {}."
  c = SelectorConfig{};
  c.dtype = DType::kF16;
  c.kv_cache_dtype = "turboquant_k8v4";
  BackendRegistry reg = BackendRegistry::builtin(true);
  o = run({.cc = {9, 0}}, {c}, reg);
  EXPECT_EQ(o.selected, BackendName::kTurboQuant);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using TURBOQUANT attention backend out of potential backends: ['TURBOQUANT']."));
}

class AcceptAll final : public AttentionBackend {
 public:
  explicit AcceptAll(BackendName n, std::vector<BlockSizeRule> blocks) : name_(n), blocks_(std::move(blocks)) {}
  BackendName name() const override { return name_; }
  Capabilities capabilities(const SelectorConfig&, const SelectionEnv&) const override {
    Capabilities c;
    c.dtypes = {DType::kBF16};
    c.kv_cache_dtypes = {"auto"};
    c.block_sizes = blocks_;
    c.attn_types = {AttnType::kDecoder};
    return c;
  }

 private:
  BackendName name_;
  std::vector<BlockSizeRule> blocks_;
};

TEST(Auto, EmptyReasonsAndBlockSizeInfoWithSyntheticTable) {
  BackendRegistry reg = BackendRegistry::builtin(true);
  for (BackendName b : {BackendName::kFlashInfer, BackendName::kTritonAttn, BackendName::kFlexAttention, BackendName::kTurboQuant})
    reg.set(std::make_unique<AcceptAll>(b, std::vector<BlockSizeRule>{}), true);
  reg.set(std::make_unique<AcceptAll>(BackendName::kFlashAttn, std::vector<BlockSizeRule>{{64, false}}), true);
  auto o = run({.cc = {9, 0}}, {SelectorConfig{}}, reg);
  EXPECT_EQ(o.selected, BackendName::kFlashAttn);
  EXPECT_THAT(messages(o, LogLevel::kDebug), ElementsAre(testing::EndsWith(". Reasons: {}.")));
  EXPECT_EQ(o.plan.block_size, 64);
  EXPECT_THAT(messages(o, LogLevel::kInfo), testing::Contains("Setting kv cache block size to 64 for FLASH_ATTN backend."));
}

TEST(Forced, TritonAttn) {
  Env s{.cc = {8, 9}};
  s.attention.backend = BackendName::kTritonAttn;
  SelectorConfig c;
  c.kv_cache_dtype = "fp8";
  auto o = run1(s, c);
  EXPECT_EQ(o.selected, BackendName::kTritonAttn);
  EXPECT_THAT(messages(o, LogLevel::kInfo), ElementsAre("Using TRITON_ATTN backend."));
  EXPECT_TRUE(messages(o, LogLevel::kDebug).empty());  // the forced path prints no DEBUG line
  EXPECT_EQ(o.trace.potential, std::vector<BackendName>{BackendName::kTritonAttn});
}

TEST(Forced, InvalidStopsWithReasons) {
  Env s{.cc = {9, 0}};
  s.attention.backend = BackendName::kFlexAttention;
  SelectorConfig c;
  c.kv_cache_dtype = "fp8";
  auto o = run1(s, c);
  EXPECT_FALSE(o.selected.has_value());
  EXPECT_EQ(o.error, "Selected backend FLEX_ATTENTION is not valid for this configuration. Reason: ['kv_cache_dtype not supported']");
  s.attention.backend = BackendName::kFlashAttn;
  s.cc = {8, 9};
  o = run1(s, c);
  EXPECT_EQ(o.error, "Selected backend FLASH_ATTN is not valid for this configuration. Reason: ['kv_cache_dtype not "
                     "supported', 'FP8 KV cache requires FA3 on SM90 or FA4 on SM100']");
  s.attention.backend = BackendName::kCpuAttn;
  o = run1(s);
  EXPECT_EQ(o.error, "Selected backend CPU_ATTN is not valid for this configuration. Reason: ['compute capability not supported']");
  // A forced backend with an unsupported block size: no fallback and no WARNING.
  s.attention.backend = BackendName::kFlashAttn;
  s.cc = {9, 0};
  c = SelectorConfig{};
  c.block_size = 8;
  o = run1(s, c);
  EXPECT_EQ(o.error, "Selected backend FLASH_ATTN is not valid for this configuration. Reason: ['block_size not supported']");
  EXPECT_TRUE(messages(o, LogLevel::kWarning).empty());
}

// A CPU-only build holds no CUDA kernels; a CUDA build holds every backend's, so there the registry marks
// FLASHINFER's declaration not built.
TEST(Forced, NotBuiltInThisBinary) {
  Env s{.cc = {9, 0}};
  s.attention.backend = BackendName::kFlashInfer;
  BackendRegistry reg = BackendRegistry::builtin(false);
  EXPECT_EQ(reg.built(BackendName::kFlashInfer), bool(PAGODA_TEST_CUDA_BUILD));
  if (PAGODA_TEST_CUDA_BUILD) reg.set(make_flashinfer_backend(), false);
  auto o = run(s, {SelectorConfig{}}, reg);
  EXPECT_EQ(o.error, "Selected backend FLASHINFER is not valid for this configuration. Reason: ['not built in this binary']");
}

// This binary's own registry, as engine startup uses it: in a CUDA build FLASH_ATTN, FLASHINFER, TRITON_ATTN,
// FLEX_ATTENTION and TURBOQUANT are built (TURBOQUANT rejects an `auto` cache by its KV-cache dtypes);
// stories260K's head size 8 is FLASH_ATTN's (FLASHINFER takes 64 to 512, TRITON_ATTN needs >= 32). A CPU-only
// build has no CUDA backend at all.
TEST(Auto, ThisBinarysRegistry) {
  using B = BackendName;
  BackendRegistry reg = BackendRegistry::builtin(false);
  auto o = run({.cc = {9, 0}}, {SelectorConfig{}}, reg);
  SelectorConfig head8;
  head8.head_size = 8;
  auto small = run({.cc = {9, 0}}, {head8}, reg);
  if (PAGODA_TEST_CUDA_BUILD) {
    EXPECT_EQ(o.selected, B::kFlashAttn);
    EXPECT_EQ(o.plan.flash_attn_version, 3);
    EXPECT_EQ(o.trace.potential, (std::vector<B>{B::kFlashAttn, B::kFlashInfer, B::kTritonAttn, B::kFlexAttention}));
    EXPECT_EQ(o.trace.rejected,
              (std::vector<std::pair<B, std::vector<std::string>>>{{B::kTurboQuant, {"kv_cache_dtype not supported"}}}));
    EXPECT_EQ(small.selected, B::kFlashAttn) << small.error;
    ASSERT_GE(small.trace.rejected.size(), 2u);
    EXPECT_EQ(small.trace.rejected[0].first, B::kFlashInfer);
    EXPECT_EQ(small.trace.rejected[0].second, std::vector<std::string>{"head_size not supported"});
    EXPECT_EQ(small.trace.rejected[1].first, B::kTritonAttn);
    EXPECT_EQ(small.trace.rejected[1].second, std::vector<std::string>{"head_size not supported"});
    // The seed's example: --block-size 8 on SM 9.0 selects the built FLASHINFER.
    SelectorConfig block8;
    block8.block_size = 8;
    EXPECT_EQ(run({.cc = {9, 0}}, {block8}, reg).selected, B::kFlashInfer);
  } else {
    EXPECT_THAT(o.error, testing::StartsWith("No valid attention backend found for cuda"));
    EXPECT_THAT(o.error, testing::HasSubstr("FLASH_ATTN: [not built in this binary]"));
    EXPECT_THAT(small.error, testing::StartsWith("No valid attention backend found for cuda"));
  }
}

TEST(FaVersion, Resolution) {
  Env s{.cc = {10, 0}};
  s.attention.backend = BackendName::kFlashAttn;
  s.attention.flash_attn_version = 3;
  auto o = run1(s);
  EXPECT_EQ(o.plan.flash_attn_version, 2);
  EXPECT_THAT(messages(o, LogLevel::kWarning),
              ElementsAre("Cannot use FA version 3 on Blackwell platform, defaulting to FA version 4 if supported, otherwise FA2."));
  s.attention.flash_attn_version = 4;
  s.cc = {9, 0};
  o = run1(s);
  EXPECT_EQ(o.error, "FlashAttention version 4 cannot be used on this device: FA4 is unavailable due to: pagoda was "
                     "built without FlashAttention 4");
  EXPECT_THAT(messages(o, LogLevel::kError),
              ElementsAre("Cannot use FA version 4 is not supported due to FA4 is unavailable due to: pagoda was built "
                          "without FlashAttention 4"));
  s.batch_invariant = true;
  SelectorConfig bi;
  bi.use_batch_invariant = true;
  o = run1(s, bi);
  EXPECT_EQ(o.plan.flash_attn_version, 2);
  EXPECT_THAT(messages(o, LogLevel::kWarning), ElementsAre("Cannot use FA version 4 with batch invariance, defaulting to FA version 2."));
  s.batch_invariant = false;
  s.attention.flash_attn_version = 3;
  s.cc = {8, 0};
  o = run1(s);
  EXPECT_EQ(o.error, "FlashAttention version 3 cannot be used on this device: FA3 is only supported on devices with compute capability 9.x");
  // The setting has no visible effect when FLASH_ATTN is not selected.
  Env t{.cc = {10, 0}};
  t.attention.flash_attn_version = 4;
  o = run1(t);
  EXPECT_EQ(o.selected, BackendName::kFlashInfer);
  EXPECT_TRUE(messages(o, LogLevel::kError).empty());
  EXPECT_TRUE(messages(o, LogLevel::kWarning).empty());
}

TEST(Layers, OneSelectionPerDistinctConfiguration) {
  SelectorConfig full, sliding;
  sliding.has_sliding_window = true;
  Env s{.cc = {9, 0}};
  auto o = run(s, {full, full, sliding, full, sliding});
  // Both kinds select FLASH_ATTN: identical INFO texts are printed once; DEBUG texts differ.
  EXPECT_EQ(messages(o, LogLevel::kInfo).size(), 2u);  // the selection line and the FA version line
  EXPECT_EQ(messages(o, LogLevel::kDebug).size(), 2u);
  // backend_per_kind sends sliding-window layers elsewhere: two "Using" lines.
  s.attention.backend_per_kind = {{"sliding_window", BackendName::kTritonAttn}};
  o = run(s, {full, sliding, full, sliding});
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre(testing::StartsWith("Using FLASH_ATTN attention backend out of potential backends:"),
                          "Using TRITON_ATTN backend.", "Using FlashAttention version 3"));
  // "auto" in backend_per_kind overrides a forced backend for that kind.
  Env f{.cc = {9, 0}};
  f.attention.backend = BackendName::kTritonAttn;
  f.attention.backend_per_kind = {{"full_attention", std::nullopt}};
  o = run(f, {full, sliding});
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre(testing::StartsWith("Using FLASH_ATTN attention backend out of"), "Using TRITON_ATTN backend.",
                          "Using FlashAttention version 3"));
}

TEST(Cpu, Path) {
  auto o = run1({.device = DeviceKind::kCpu});
  EXPECT_EQ(o.selected, BackendName::kCpuAttn);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using CPU_ATTN attention backend out of potential backends: ['CPU_ATTN'].",
                          "Using HND KV cache layout for CPU_ATTN backend."));
  EXPECT_TRUE(messages(o, LogLevel::kDebug).empty());
  EXPECT_EQ(o.plan.block_size, 128);
  EXPECT_EQ(o.plan.kv_layout, KvLayout::kHND);
  Env forced{.device = DeviceKind::kCpu};
  forced.attention.backend = BackendName::kFlashAttn;
  o = run1(forced);
  EXPECT_EQ(o.selected, BackendName::kCpuAttn);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Cannot use FLASH_ATTN backend on CPU.",
                          "Using CPU_ATTN attention backend out of potential backends: ['CPU_ATTN'].",
                          "Using HND KV cache layout for CPU_ATTN backend."));
  // CPU never rejects a block size or head size; construction checks still apply.
  SelectorConfig c;
  c.block_size = 8;
  c.head_size = 8;
  o = run1({.device = DeviceKind::kCpu}, c);
  EXPECT_EQ(o.selected, BackendName::kCpuAttn);
  EXPECT_EQ(o.plan.block_size, 8);
  c.kv_cache_dtype = "fp8";
  c.head_size = 48;
  o = run1({.device = DeviceKind::kCpu}, c);
  EXPECT_EQ(o.error, "FP8 KV cache requires head_size divisible by 32 on CPU.");
}

// pagoda's addition to §5.4 (docs/architecture.md): on the CPU a TurboQuant layer runs on TURBOQUANT, with no KV
// layout line (its cache has no layout); the other layers stay on CPU_ATTN. Forcing CPU_ATTN keeps the spec's
// construction error; forcing another backend logs the spec's line first.
TEST(Cpu, TurboQuantLayersSelectTurboQuant) {
  SelectorConfig tq, boundary;
  tq.kv_cache_dtype = "turboquant_k3v4_nc";
  tq.head_size = boundary.head_size = 64;
  auto o = run1({.device = DeviceKind::kCpu}, tq);
  EXPECT_EQ(o.selected, BackendName::kTurboQuant);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using TURBOQUANT attention backend out of potential backends: ['TURBOQUANT']."));
  EXPECT_TRUE(messages(o, LogLevel::kDebug).empty());
  EXPECT_THAT(o.trace.potential, ElementsAre(BackendName::kTurboQuant));
  EXPECT_EQ(o.plan.block_size, 128);
  EXPECT_EQ(o.error, "");
  // A model: boundary layers (`auto`) on CPU_ATTN, the others on TURBOQUANT; one line per selection.
  o = run({.device = DeviceKind::kCpu}, {boundary, tq, tq, boundary});
  EXPECT_THAT(o.per_layer, ElementsAre(BackendName::kCpuAttn, BackendName::kTurboQuant, BackendName::kTurboQuant,
                                       BackendName::kCpuAttn));
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using CPU_ATTN attention backend out of potential backends: ['CPU_ATTN'].",
                          "Using HND KV cache layout for CPU_ATTN backend.",
                          "Using TURBOQUANT attention backend out of potential backends: ['TURBOQUANT']."));
  EXPECT_EQ(o.plan.kv_layout, KvLayout::kHND);
  // Forced TURBOQUANT: the TurboQuant layers take it silently, the `auto` ones cannot.
  Env forced{.device = DeviceKind::kCpu};
  forced.attention.backend = BackendName::kTurboQuant;
  o = run(forced, {tq, boundary});
  EXPECT_THAT(o.per_layer, ElementsAre(BackendName::kTurboQuant, BackendName::kCpuAttn));
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using TURBOQUANT attention backend out of potential backends: ['TURBOQUANT'].",
                          "Cannot use TURBOQUANT backend on CPU.",
                          "Using CPU_ATTN attention backend out of potential backends: ['CPU_ATTN'].",
                          "Using HND KV cache layout for CPU_ATTN backend."));
  // Another forced backend: the spec's line, then TURBOQUANT.
  forced.attention.backend = BackendName::kFlashAttn;
  o = run1(forced, tq);
  EXPECT_EQ(o.selected, BackendName::kTurboQuant);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Cannot use FLASH_ATTN backend on CPU.",
                          "Using TURBOQUANT attention backend out of potential backends: ['TURBOQUANT']."));
  // Forced CPU_ATTN: selected, then refused by its construction check (§6.4).
  forced.attention.backend = BackendName::kCpuAttn;
  for (const auto& p : kTurboQuantPresets) {
    tq.kv_cache_dtype = std::string(p.name);
    o = run1(forced, tq);
    EXPECT_EQ(o.error, str_cat("CPU_ATTN does not support ", p.name, " kv-cache."));
    EXPECT_THAT(messages(o, LogLevel::kInfo),
                ElementsAre("Using CPU_ATTN attention backend out of potential backends: ['CPU_ATTN'].",
                            "Using HND KV cache layout for CPU_ATTN backend."));
  }
}

// pagoda's second addition to §5.4 (docs/architecture.md): a forced FLEX_ATTENTION runs on the CPU (its CPU
// runner is in every build), with no KV layout line; TurboQuant layers still take TURBOQUANT; the automatic
// choice stays CPU_ATTN (Cpu.Path). Its construction checks (§6.4) apply.
TEST(Cpu, ForcedFlexAttention) {
  Env forced{.device = DeviceKind::kCpu};
  forced.attention.backend = BackendName::kFlexAttention;
  SelectorConfig c;
  c.head_size = 40;
  c.block_size = 8;
  auto o = run1(forced, c);
  EXPECT_EQ(o.selected, BackendName::kFlexAttention);
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.plan.block_size, 8);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using FLEX_ATTENTION attention backend out of potential backends: ['FLEX_ATTENTION']."));
  SelectorConfig tq;
  tq.kv_cache_dtype = "turboquant_k3v4_nc";
  tq.head_size = 64;
  o = run1(forced, tq);
  EXPECT_EQ(o.selected, BackendName::kTurboQuant);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Cannot use FLEX_ATTENTION backend on CPU.",
                          "Using TURBOQUANT attention backend out of potential backends: ['TURBOQUANT']."));
  forced.attention.flex_attn_block_m = 48;
  o = run1(forced, c);
  EXPECT_EQ(o.error, "flex_attn_block_m must be one of 16, 32, 64, 128, got 48.");
}

// The same for a forced FLASHINFER (its CPU runner executes its plan): no layout line, NHD unless the
// environment says HND (FLASHINFER requires HND only on SM 10.x).
TEST(Cpu, ForcedFlashInfer) {
  Env forced{.device = DeviceKind::kCpu};
  forced.attention.backend = BackendName::kFlashInfer;
  SelectorConfig c;
  c.block_size = 8;
  auto o = run1(forced, c);
  EXPECT_EQ(o.selected, BackendName::kFlashInfer);
  EXPECT_EQ(o.error, "");
  EXPECT_EQ(o.plan.kv_layout, KvLayout::kNHD);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre("Using FLASHINFER attention backend out of potential backends: ['FLASHINFER']."));
  forced.env_layout = KvLayout::kHND;
  EXPECT_EQ(run1(forced, c).plan.kv_layout, KvLayout::kHND);
}

// use_cascade_attention (pagoda's AttentionConfig addition) is served by FLASHINFER only: with any other
// selected backend it stops startup instead of being ignored.
TEST(Construction, CascadeNeedsFlashInfer) {
  Env e{.device = DeviceKind::kCpu};
  e.attention.use_cascade_attention = true;
  auto o = run1(e);
  EXPECT_EQ(o.error, "use_cascade_attention is served by the FLASHINFER attention backend only; CPU_ATTN was selected. "
                     "Force --attention-backend FLASHINFER or leave attention_config.use_cascade_attention false.");
  e.attention.backend = BackendName::kFlashInfer;
  EXPECT_EQ(run1(e).error, "");
  Env cuda;
  cuda.attention.use_cascade_attention = true;
  o = run1(cuda);
  EXPECT_EQ(o.selected, std::nullopt);
  EXPECT_THAT(o.error, testing::StartsWith("use_cascade_attention is served by the FLASHINFER attention backend only; FLASH_ATTN"));
}

TEST(Layout, EnvironmentVariable) {
  auto o = run1({.cc = {9, 0}, .env_layout = KvLayout::kHND});
  EXPECT_EQ(o.plan.kv_layout, KvLayout::kHND);
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              testing::Contains("`PAGODA_KV_CACHE_LAYOUT` environment variable detected. Setting KV cache layout to HND."));
}

TEST(Resolution, TurboQuantOverrideAndBoundaryLayers) {
  ValidatedArgs v;
  v.kv_cache_dtype = "turboquant_k8v4";
  LogCapture cap;
  LogSilence quiet;
  auto s = resolve_attention_settings(v, DeviceKind::kCuda);
  EXPECT_EQ(s.attention.flash_attn_version, 2);
  ASSERT_EQ(cap.records().size(), 1u);
  EXPECT_EQ(cap.records()[0].message,
            "TurboQuant is not yet compatible with FlashAttention >= 3. Overriding flash_attn_version to 2. To silence "
            "this warning, pass --attention-config.flash_attn_version=2");
  v.attention_config.flash_attn_version = 2;
  s = resolve_attention_settings(v, DeviceKind::kCuda);
  EXPECT_EQ(cap.records().size(), 1u);  // silenced
  // L = 6: n = 2 -> layers 0, 1, 4, 5 keep an uncompressed cache. L = 3: n = 1.
  std::vector<bool> b6, b3;
  for (int i = 0; i < 6; ++i) b6.push_back(is_turboquant_boundary_layer(i, 6));
  for (int i = 0; i < 3; ++i) b3.push_back(is_turboquant_boundary_layer(i, 3));
  EXPECT_EQ(b6, (std::vector<bool>{true, true, false, false, true, true}));
  EXPECT_EQ(b3, (std::vector<bool>{true, false, true}));
  // A TurboQuant model logs two selection lines: boundary layers select a normal backend.
  SelectorConfig tq, boundary;
  tq.kv_cache_dtype = "turboquant_k8v4";
  Env st{.cc = {9, 0}};
  st.attention = s.attention;
  auto o = run(st, {boundary, tq, tq, boundary});
  EXPECT_THAT(messages(o, LogLevel::kInfo),
              ElementsAre(testing::StartsWith("Using FLASH_ATTN attention backend out of potential backends:"),
                          "Using TURBOQUANT attention backend out of potential backends: ['TURBOQUANT'].",
                          "Using FlashAttention version 2"));
}

// Each layer's KV cache dtype: the model's, `auto` on TurboQuant's boundary layers (turboquant_* only) and on the
// --kv-cache-dtype-skip-layers ones (indices, or every sliding-window layer).
TEST(Resolution, LayerKvCacheDtypes) {
  using V = std::vector<std::string>;
  const std::vector<bool> sliding{false, true, false, true, false, true};
  EXPECT_EQ(layer_kv_cache_dtypes("turboquant_4bit_nc", 6, sliding, {}),
            (V{"auto", "auto", "turboquant_4bit_nc", "turboquant_4bit_nc", "auto", "auto"}));
  EXPECT_EQ(layer_kv_cache_dtypes("turboquant_4bit_nc", 6, sliding, {"sliding_window"}),
            (V{"auto", "auto", "turboquant_4bit_nc", "auto", "auto", "auto"}));
  // fp8 has no boundary layers; skipped layers keep `auto`.
  EXPECT_EQ(layer_kv_cache_dtypes("fp8", 6, sliding, {}), V(6, "fp8"));
  EXPECT_EQ(layer_kv_cache_dtypes("fp8_e5m2", 6, sliding, {"0", "sliding_window", "4"}),
            (V{"auto", "auto", "fp8_e5m2", "auto", "auto", "auto"}));
  EXPECT_EQ(layer_kv_cache_dtypes("fp8", 3, {}, {"sliding_window", "2"}), (V{"fp8", "fp8", "auto"}));
  // One layer: n = min(2, 0) = 0, no boundary layer.
  EXPECT_EQ(layer_kv_cache_dtypes("turboquant_k8v4", 1, {false}, {}), V{"turboquant_k8v4"});
  EXPECT_EQ(layer_kv_cache_dtypes("auto", 2, {}, {}), (V{"auto", "auto"}));
  auto error_of = [](const std::string& kv, const V& skip) {
    try {
      layer_kv_cache_dtypes(kv, 6, {}, skip);
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      return std::string(e.what());
    }
    return std::string();
  };
  for (const char* kv : {"auto", "bfloat16", "float16"})
    EXPECT_EQ(error_of(kv, {"1"}), str_cat("--kv-cache-dtype-skip-layers keeps some layers' KV cache unquantized, but the "
                                           "KV cache dtype ", kv, " is not quantized; give a quantized --kv-cache-dtype "
                                           "(fp8, fp8_e4m3, fp8_e5m2 or a turboquant_* preset) or drop "
                                           "--kv-cache-dtype-skip-layers"));
  EXPECT_EQ(error_of("fp8", {"6"}), "--kv-cache-dtype-skip-layers: layer 6 is not a layer of the model (it has 6 layers: 0-5)");
  EXPECT_EQ(error_of("turboquant_3bit_nc", {"-1"}),
            "--kv-cache-dtype-skip-layers: layer -1 is not a layer of the model (it has 6 layers: 0-5)");
  EXPECT_EQ(error_of("fp8_e4m3", {"sliding_window"}), "");  // no sliding layer: nothing to skip, no error
}

TEST(Resolution, Warnings) {
  ValidatedArgs v;
  v.kv_cache_dtype = "auto";
  v.attention_config.use_trtllm_attention = false;
  v.block_size = 48;
  LogCapture cap;
  LogSilence quiet;
  resolve_attention_settings(v, DeviceKind::kCpu);
  auto r = cap.records();
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].message, "attention_config.use_trtllm_attention has no effect in pagoda: TRT-LLM attention kernels are not built.");
  EXPECT_EQ(r[1].message, "CPU backend prefers block_size is multiples of 32, otherwise the performance is not optimized.");
  v.block_size = 64;
  v.attention_config.use_trtllm_attention.reset();
  resolve_attention_settings(v, DeviceKind::kCpu);
  EXPECT_EQ(cap.records().size(), 2u);
  EXPECT_EQ(effective_kv_cache_dtype("auto", true), "fp8");
  EXPECT_EQ(effective_kv_cache_dtype("bfloat16", true), "bfloat16");
}

}  // namespace
}  // namespace pagoda
