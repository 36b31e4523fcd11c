// Declarations are true: every configuration a backend's declaration accepts (why_not empty, construction
// checks passed) gets a runner from that backend, and a backend whose kernels are not in this binary says so
// the same way to the selector and to make_runner().
#include <gtest/gtest.h>

#include "pagoda/attention/registry.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

LayerShape shape_of(const SelectorConfig& c, KvLayout layout, int block_size) {
  LayerShape s;
  s.num_q_heads = 8;
  s.num_kv_heads = 2;
  s.head_size = c.head_size;
  s.dtype = c.dtype;
  s.kv_dtype = kv_cache_element_dtype(c.kv_cache_dtype, c.dtype);
  s.layout = layout;
  s.block_size = block_size;
  s.sliding_window = c.has_sliding_window ? 128 : 0;
  s.causal = !c.use_non_causal;
  return s;
}

TEST(AttentionRunner, EveryDeclaredConfigurationGetsARunner) {
  const BackendRegistry registry = BackendRegistry::builtin(false);
  int accepted = 0, runners = 0;
  for (BackendName b : {BackendName::kTritonAttn, BackendName::kFlashAttn, BackendName::kFlashInfer,
                        BackendName::kFlexAttention, BackendName::kCpuAttn}) {
    const AttentionBackend& backend = registry.get(b);
    for (ComputeCapability cc : {ComputeCapability{8, 0}, ComputeCapability{8, 9}, ComputeCapability{9, 0}})
      for (DType dtype : {DType::kF16, DType::kBF16, DType::kF32})
        for (const char* kv : {"auto", "float16", "bfloat16", "fp8", "fp8_e4m3", "fp8_e5m2"})
          for (int head : {32, 64, 80, 96, 128, 160, 256, 512})
            for (bool window : {false, true})
              for (bool non_causal : {false, true})
                for (bool invariant : {false, true}) {
                  SelectorConfig c;
                  c.head_size = head;
                  c.dtype = dtype;
                  c.kv_cache_dtype = kv;
                  c.has_sliding_window = window;
                  c.use_non_causal = non_causal;
                  c.use_batch_invariant = invariant;
                  AttentionConfig ac;
                  const bool cpu = b == BackendName::kCpuAttn;
                  // CPU_ATTN is validated on the CPU only (spec §5.4): its runner computes in float32.
                  if (cpu) c.dtype = DType::kF32;
                  if (!cpu && !backend.why_not(c, {cc, &ac, invariant}).empty()) continue;
                  ConstructionEnv env{cpu ? DeviceKind::kCpu : DeviceKind::kCuda, cc, "test device", &ac, invariant};
                  try {
                    backend.check_construction(c, env);
                  } catch (const Error&) {
                    continue;
                  }
                  ++accepted;
                  if (!backend.kernels_built()) continue;
                  RunnerOptions o;
                  o.num_sms = 132;
                  o.batch_invariant = invariant;
                  o.flash_attn_version = cc.major == 9 ? 3 : 2;
                  const KvLayout layout = backend.required_kv_layout(cc).value_or(KvLayout::kNHD);
                  const LayerShape shape = shape_of(c, layout, 16);
                  EXPECT_NO_THROW(backend.make_runner(shape, o))
                      << backend_name_str(b) << " on " << cc.str() << ": " << c.repr() << " -> " << shape.str();
                  ++runners;
                }
  }
  EXPECT_GT(accepted, 100);
  std::printf("[ runners ] %d declared configurations, %d runners built\n", accepted, runners);
}

TEST(AttentionRunner, NotBuiltIsOneError) {
  const BackendRegistry registry = BackendRegistry::builtin(false);
  for (BackendName b : {BackendName::kFlashInfer, BackendName::kFlexAttention, BackendName::kTurboQuant,
                        BackendName::kTritonAttn, BackendName::kFlashAttn}) {
    const AttentionBackend& backend = registry.get(b);
    EXPECT_EQ(backend.kernels_built(), registry.built(b));
    EXPECT_EQ(backend.kernels_built(), backend_kernels_built(b));
    if (backend.kernels_built()) continue;
    try {
      backend.make_runner(LayerShape{}, RunnerOptions{});
      ADD_FAILURE() << backend_name_str(b) << " made a runner without kernels";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("not built in this binary"), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(registry.get(BackendName::kCpuAttn).kernels_built());
}

// TURBOQUANT's CPU runner is in every build: options.cpu picks it, whatever kernels_built() (the CUDA kernels)
// says. Its cache is one slot of bytes per (block, KV head, token), whatever the layout (spec §10).
TEST(AttentionRunner, TurboQuantCpuRunnerInEveryBuild) {
  const BackendRegistry registry = BackendRegistry::builtin(false);
  const AttentionBackend& tq = registry.get(BackendName::kTurboQuant);
  LayerShape s;
  s.num_q_heads = 8;
  s.num_kv_heads = 2;
  s.head_size = 128;
  s.dtype = DType::kF32;
  s.kv_dtype = DType::kU8;
  s.kv_preset = "turboquant_k3v4_nc";
  RunnerOptions o;
  o.cpu = true;
  std::unique_ptr<AttentionRunner> runner;
  ASSERT_NO_THROW(runner = tq.make_runner(s, o));
  EXPECT_FALSE(runner->describe().empty());
  // What the declaration refuses (§3.7) the CPU runner refuses too, with an error at startup.
  LayerShape window = s, non_causal = s;
  window.sliding_window = 64;
  non_causal.causal = false;
  EXPECT_THROW(tq.make_runner(window, o), Error);
  EXPECT_THROW(tq.make_runner(non_causal, o), Error);
  for (KvLayout layout : {KvLayout::kNHD, KvLayout::kHND}) {
    const KvCacheShape shape = tq.kv_cache_shape(3, 16, 2, 128, "turboquant_k3v4_nc", DType::kBF16, layout);
    EXPECT_EQ(shape.logical, (std::vector<int64_t>{3, 2, 16, 118}));  // spec §3.7: head 128, k3v4_nc = 118 bytes
    EXPECT_EQ(shape.physical, shape.logical);
    EXPECT_EQ(shape.element_bytes, 1);
  }
}

}  // namespace
}  // namespace pagoda
