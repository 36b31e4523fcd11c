// FP8 KV-cache scales from safetensors checkpoints: every name vLLM reads, per-tensor and per-head shapes,
// the 1.0 fallback for missing layers, and the errors for scales no kernel can use.
#include "pagoda/model/kv_scales.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/model/load_model.h"
#include "safetensors_writer.h"

namespace pagoda::test {
namespace {

using ::testing::AllOf;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using nlohmann::json;

constexpr int kLayers = 3;
constexpr int kKvHeads = 2;

// A scale tensor of `dtype` ("F32", "BF16", "F16") holding `v`.
StTensor scale_tensor(const std::string& name, const std::string& dtype, std::vector<int64_t> shape,
                      const std::vector<float>& v) {
  const DType t = dtype == "F32" ? DType::kF32 : dtype == "BF16" ? DType::kBF16 : DType::kF16;
  std::vector<uint8_t> b(v.size() * dtype_size(t));
  for (size_t i = 0; i < v.size(); ++i) store_from_f32(b.data(), t, i, v[i]);
  return {name, dtype, std::move(shape), b};
}

// What a value reads back as after storing it in `dtype`.
float rounded(const std::string& dtype, float x) {
  const DType t = dtype == "F32" ? DType::kF32 : dtype == "BF16" ? DType::kBF16 : DType::kF16;
  uint8_t b[4];
  store_from_f32(b, t, 0, x);
  return load_as_f32(b, t, 0);
}

std::string attn(int layer, const std::string& what) { return "model.layers." + std::to_string(layer) + ".self_attn." + what; }

std::string quoted(const std::string& name) { return str_cat("'", name, "'"); }

int warnings(const LogCapture& cap) {
  int n = 0;
  for (const LogRecord& r : cap.records()) n += r.level == LogLevel::kWarning;
  return n;
}

std::string warning_text(const LogCapture& cap) {
  std::string s;
  for (const LogRecord& r : cap.records())
    if (r.level == LogLevel::kWarning) s += r.message;
  return s;
}

// A 3-layer Llama of 2 KV heads whose config.json declares an fp8 kv_cache_scheme (compressed-tensors).
class KvScalesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = temp_dir("kv_scales_" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    // Fresh values every run; the seed is printed so a failure can be replayed.
    const uint32_t seed = std::random_device{}();
    rng_.seed(seed);
    std::printf("kv scale seed %u\n", seed);
    cfg_ = {{"architectures", {"LlamaForCausalLM"}}, {"vocab_size", 16}, {"hidden_size", 8}, {"intermediate_size", 12},
            {"num_hidden_layers", kLayers}, {"num_attention_heads", 2}, {"num_key_value_heads", kKvHeads},
            {"tie_word_embeddings", true}};
    set_scheme("tensor");
    auto f = [](int64_t n) { return f32_bytes(std::vector<float>(size_t(n), 0.01f)); };
    tensors_ = {{"model.embed_tokens.weight", "F32", {16, 8}, f(128)}, {"model.norm.weight", "F32", {8}, f(8)}};
    for (int i = 0; i < kLayers; ++i) {
      const std::string p = "model.layers." + std::to_string(i) + ".";
      tensors_.push_back({p + "input_layernorm.weight", "F32", {8}, f(8)});
      tensors_.push_back({p + "post_attention_layernorm.weight", "F32", {8}, f(8)});
      tensors_.push_back({p + "self_attn.q_proj.weight", "F32", {8, 8}, f(64)});
      tensors_.push_back({p + "self_attn.k_proj.weight", "F32", {8, 8}, f(64)});
      tensors_.push_back({p + "self_attn.v_proj.weight", "F32", {8, 8}, f(64)});
      tensors_.push_back({p + "self_attn.o_proj.weight", "F32", {8, 8}, f(64)});
      tensors_.push_back({p + "mlp.gate_proj.weight", "F32", {12, 8}, f(96)});
      tensors_.push_back({p + "mlp.up_proj.weight", "F32", {12, 8}, f(96)});
      tensors_.push_back({p + "mlp.down_proj.weight", "F32", {8, 12}, f(96)});
    }
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  void set_scheme(const char* strategy) {
    if (strategy)
      cfg_["quantization_config"] = {{"quant_method", "compressed-tensors"},
                                     {"kv_cache_scheme", {{"num_bits", 8}, {"type", "float"}, {"strategy", strategy},
                                                          {"dynamic", false}, {"symmetric", true}}}};
    else
      cfg_.erase("quantization_config");
  }

  // A fresh random scale in (0.01, 4): never 1.0, so a fallback cannot pass for a loaded value.
  float fresh() { return std::uniform_real_distribution<float>(0.01f, 4.0f)(rng_); }

  // kv_cache_fp8: as the engine loads a model for an fp8 cache (the loader then logs about the scales).
  LoadedModel load(bool kv_cache_fp8 = true) {
    write_text(dir_ / "config.json", cfg_.dump());
    write_bytes(dir_ / "model.safetensors", st_image(tensors_));
    LoadOptions o;
    o.kv_cache_fp8 = kv_cache_fp8;
    return load_model(dir_.string(), o);
  }

  std::string load_error() {
    try {
      load();
    } catch (const Error& e) {
      EXPECT_EQ(e.exit_code(), 2);
      return e.what();
    }
    return "";
  }

  std::filesystem::path dir_;
  json cfg_;
  std::vector<StTensor> tensors_;
  std::mt19937 rng_;
};

TEST_F(KvScalesTest, PerTensorScalesOfEveryLayer) {
  // Every dtype and every one-element shape the writers use.
  const std::string dtypes[kLayers] = {"F32", "BF16", "F16"};
  const std::vector<int64_t> shapes[kLayers] = {{}, {1}, {1, 1, 1}};
  std::vector<float> want_k, want_v;
  for (int i = 0; i < kLayers; ++i) {
    const float k = fresh(), v = fresh();
    tensors_.push_back(scale_tensor(attn(i, "k_scale"), dtypes[i], shapes[i], {k}));
    tensors_.push_back(scale_tensor(attn(i, "v_scale"), dtypes[i], shapes[i], {v}));
    want_k.push_back(rounded(dtypes[i], k));
    want_v.push_back(rounded(dtypes[i], v));
  }
  LogCapture cap;
  LoadedModel m = load();
  EXPECT_EQ(warnings(cap), 0) << warning_text(cap);
  ASSERT_EQ(m.kv_scales.size(), size_t(kLayers));
  for (int i = 0; i < kLayers; ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(m.kv_scales[size_t(i)].k, want_k[size_t(i)]);
    EXPECT_EQ(m.kv_scales[size_t(i)].v, want_v[size_t(i)]);
    EXPECT_FALSE(m.kv_scales[size_t(i)].per_head());
    EXPECT_TRUE(m.kv_scales[size_t(i)].v_per_head.empty());
  }
}

// Scales are read when present even if config.json declares no kv_cache_scheme; without either, none.
TEST_F(KvScalesTest, SchemeUndeclared) {
  set_scheme(nullptr);
  {
    LogCapture cap;
    EXPECT_TRUE(load().kv_scales.empty());
    EXPECT_EQ(warnings(cap), 0);
  }
  std::vector<float> k;
  for (int i = 0; i < kLayers; ++i) {
    k.push_back(fresh());
    tensors_.push_back(scale_tensor(attn(i, "k_scale"), "F32", {}, {k.back()}));
    tensors_.push_back(scale_tensor(attn(i, "v_scale"), "F32", {}, {2 * k.back()}));
  }
  LoadedModel m = load();
  ASSERT_EQ(m.kv_scales.size(), size_t(kLayers));
  for (int i = 0; i < kLayers; ++i) {
    EXPECT_EQ(m.kv_scales[size_t(i)].k, k[size_t(i)]);
    EXPECT_EQ(m.kv_scales[size_t(i)].v, 2 * k[size_t(i)]);
  }
}

// The deprecated kv_scale is both scales; ModelOpt's k_proj.k_scale and compressed-tensors' k_proj.output_scale
// are the k scale (and likewise for v). One naming per layer here.
TEST_F(KvScalesTest, OtherNames) {
  const float kv = fresh(), mk = fresh(), mv = fresh(), ck = fresh(), cv = fresh();
  tensors_.push_back(scale_tensor(attn(0, "kv_scale"), "F32", {}, {kv}));
  tensors_.push_back(scale_tensor(attn(1, "k_proj.k_scale"), "F32", {}, {mk}));
  tensors_.push_back(scale_tensor(attn(1, "v_proj.v_scale"), "F32", {}, {mv}));
  tensors_.push_back(scale_tensor(attn(2, "k_proj.output_scale"), "F32", {1}, {ck}));
  tensors_.push_back(scale_tensor(attn(2, "v_proj.output_scale"), "F32", {1}, {cv}));
  LogCapture cap;
  LoadedModel m = load();
  EXPECT_EQ(warnings(cap), 0) << warning_text(cap);
  ASSERT_EQ(m.kv_scales.size(), size_t(kLayers));
  EXPECT_EQ(m.kv_scales[0].k, kv);
  EXPECT_EQ(m.kv_scales[0].v, kv);
  EXPECT_EQ(m.kv_scales[1].k, mk);
  EXPECT_EQ(m.kv_scales[1].v, mv);
  EXPECT_EQ(m.kv_scales[2].k, ck);
  EXPECT_EQ(m.kv_scales[2].v, cv);
}

// Two names of one scale: the same value is fine, different values are refused.
TEST_F(KvScalesTest, DuplicateNamesMustAgree) {
  const float a = fresh();
  for (int i = 0; i < kLayers; ++i) {
    tensors_.push_back(scale_tensor(attn(i, "k_scale"), "F32", {}, {a}));
    tensors_.push_back(scale_tensor(attn(i, "v_scale"), "F32", {}, {a}));
  }
  tensors_.push_back(scale_tensor(attn(1, "kv_scale"), "F32", {1}, {a}));
  EXPECT_EQ(load_error(), "");
  tensors_.back() = scale_tensor(attn(1, "kv_scale"), "F32", {1}, {a + 0.5f});
  EXPECT_THAT(load_error(), AllOf(HasSubstr("two different KV-cache scales"), HasSubstr(quoted(attn(1, "k_scale"))),
                                  HasSubstr(quoted(attn(1, "kv_scale")))));
}

// compressed-tensors' attn_head strategy: one scale per KV head, shape [heads, 1, 1] (or [heads]).
TEST_F(KvScalesTest, PerHead) {
  set_scheme("attn_head");
  std::vector<std::vector<float>> k(kLayers), v(kLayers);
  for (int i = 0; i < kLayers; ++i) {
    std::vector<float>& ki = k[size_t(i)];
    std::vector<float>& vi = v[size_t(i)];
    for (int h = 0; h < kKvHeads; ++h) ki.push_back(fresh());
    const std::vector<int64_t> k_shape = i == 0 ? std::vector<int64_t>{kKvHeads} : std::vector<int64_t>{kKvHeads, 1, 1};
    tensors_.push_back(scale_tensor(attn(i, "k_scale"), "F32", k_shape, ki));
    if (i < 2) {
      for (int h = 0; h < kKvHeads; ++h) vi.push_back(fresh());
      tensors_.push_back(scale_tensor(attn(i, "v_scale"), "F32", {kKvHeads, 1, 1}, vi));
    } else {
      // A per-tensor v next to a per-head k is repeated per head.
      const float x = fresh();
      tensors_.push_back(scale_tensor(attn(i, "v_scale"), "BF16", {}, {x}));
      vi.assign(kKvHeads, rounded("BF16", x));
    }
  }
  LogCapture cap;
  LoadedModel m = load();
  EXPECT_EQ(warnings(cap), 0) << warning_text(cap);
  ASSERT_EQ(m.kv_scales.size(), size_t(kLayers));
  for (int i = 0; i < kLayers; ++i) {
    SCOPED_TRACE(i);
    const KvScales& s = m.kv_scales[size_t(i)];
    ASSERT_TRUE(s.per_head());
    EXPECT_THAT(s.k_per_head, ElementsAreArray(k[size_t(i)]));
    EXPECT_THAT(s.v_per_head, ElementsAreArray(v[size_t(i)]));
    EXPECT_EQ(s.k, *std::max_element(k[size_t(i)].begin(), k[size_t(i)].end()));
    EXPECT_EQ(s.v, *std::max_element(v[size_t(i)].begin(), v[size_t(i)].end()));
  }
}

TEST_F(KvScalesTest, BadScalesAreRefused) {
  for (int i = 0; i < kLayers; ++i) {
    tensors_.push_back(scale_tensor(attn(i, "k_scale"), "F32", {}, {fresh()}));
    tensors_.push_back(scale_tensor(attn(i, "v_scale"), "F32", {}, {fresh()}));
  }
  const size_t v1 = tensors_.size() - 3;  // layer 1's v_scale
  ASSERT_EQ(tensors_[v1].name, attn(1, "v_scale"));
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  for (float bad : {-fresh(), 0.0f, nan, inf, -inf}) {
    SCOPED_TRACE(bad);
    tensors_[v1] = scale_tensor(attn(1, "v_scale"), "F32", {}, {bad});
    EXPECT_THAT(load_error(), AllOf(HasSubstr(quoted(attn(1, "v_scale"))), HasSubstr("model.safetensors"),
                                    HasSubstr("finite and positive")));
  }
  // One bad head of a per-head scale, in bf16.
  tensors_[v1] = scale_tensor(attn(1, "v_scale"), "BF16", {kKvHeads}, {fresh(), -1.0f});
  EXPECT_THAT(load_error(),
              AllOf(HasSubstr(quoted(attn(1, "v_scale"))), HasSubstr("KV head 1"), HasSubstr("finite and positive")));
  tensors_[v1] = scale_tensor(attn(1, "v_scale"), "F32", {kKvHeads + 1}, {1.0f, 2.0f, 3.0f});
  EXPECT_THAT(load_error(),
              AllOf(HasSubstr(quoted(attn(1, "v_scale"))), HasSubstr("shape (3,)"), HasSubstr("one per KV head (2")));
  tensors_[v1] = scale_tensor(attn(1, "v_scale"), "F32", {1, kKvHeads}, {1.0f, 2.0f});
  EXPECT_THAT(load_error(), HasSubstr("shape (1, 2)"));
  tensors_[v1] = {attn(1, "v_scale"), "I32", {}, std::vector<uint8_t>(4, 1)};
  EXPECT_THAT(load_error(), AllOf(HasSubstr(quoted(attn(1, "v_scale"))), HasSubstr("dtype I32")));
  // The deprecated name is checked too.
  tensors_[v1] = scale_tensor(attn(1, "kv_scale"), "F16", {1}, {nan});
  EXPECT_THAT(load_error(), AllOf(HasSubstr(quoted(attn(1, "kv_scale"))), HasSubstr("finite and positive")));
}

// A layer without scales gets 1.0, as vLLM does, with one warning naming the layers; the others keep theirs.
TEST_F(KvScalesTest, MissingLayersFallBackToOneWithOneWarning) {
  const float k0 = fresh(), v0 = fresh(), k2 = fresh();
  tensors_.push_back(scale_tensor(attn(0, "k_scale"), "F32", {}, {k0}));
  tensors_.push_back(scale_tensor(attn(0, "v_scale"), "F32", {}, {v0}));
  tensors_.push_back(scale_tensor(attn(2, "k_scale"), "F32", {}, {k2}));  // layer 2: no v scale
  LogCapture cap;
  LoadedModel m = load();
  ASSERT_EQ(m.kv_scales.size(), size_t(kLayers));
  EXPECT_EQ(m.kv_scales[0].k, k0);
  EXPECT_EQ(m.kv_scales[0].v, v0);
  EXPECT_EQ(m.kv_scales[1].k, 1.0f);
  EXPECT_EQ(m.kv_scales[1].v, 1.0f);
  EXPECT_EQ(m.kv_scales[2].k, k2);
  EXPECT_EQ(m.kv_scales[2].v, 1.0f);
  EXPECT_EQ(warnings(cap), 1);
  EXPECT_THAT(warning_text(cap), AllOf(HasSubstr("no k scale for layers 1 "), HasSubstr("no v scale for layers 1-2"),
                                       HasSubstr("those use 1.0"), HasSubstr(dir_.string())));
}

// For an unquantized cache the scales are still read and checked, but nothing is logged about them.
TEST_F(KvScalesTest, NotLoggedWithoutAnFp8Cache) {
  const float k0 = fresh();
  tensors_.push_back(scale_tensor(attn(0, "k_scale"), "F32", {}, {k0}));
  LogCapture cap;
  LoadedModel m = load(false);
  ASSERT_EQ(m.kv_scales.size(), size_t(kLayers));
  EXPECT_EQ(m.kv_scales[0].k, k0);
  EXPECT_EQ(m.kv_scales[2].v, 1.0f);
  for (const LogRecord& r : cap.records()) EXPECT_THAT(r.message, ::testing::Not(HasSubstr("KV-cache scale")));
  tensors_.back() = scale_tensor(attn(0, "k_scale"), "F32", {}, {-k0});
  write_bytes(dir_ / "model.safetensors", st_image(tensors_));
  LoadOptions o;
  EXPECT_THROW(load_model(dir_.string(), o), Error);
}

// A declared scheme with no scale tensor at all: 1.0 everywhere and one warning.
TEST_F(KvScalesTest, DeclaredButAbsent) {
  LogCapture cap;
  LoadedModel m = load();
  ASSERT_EQ(m.kv_scales.size(), size_t(kLayers));
  for (const KvScales& s : m.kv_scales) {
    EXPECT_EQ(s.k, 1.0f);
    EXPECT_EQ(s.v, 1.0f);
    EXPECT_FALSE(s.per_head());
  }
  EXPECT_EQ(warnings(cap), 1);
  EXPECT_THAT(warning_text(cap), AllOf(HasSubstr("declares a KV-cache quantization scheme (strategy 'tensor')"),
                                       HasSubstr("holds no KV-cache scales"), HasSubstr("1.0")));
}

// The other tensors of an fp8-calibrated attention layer (q scale, zero points) are not read and do no harm.
TEST_F(KvScalesTest, OtherQuantizationTensorsAreIgnored) {
  const float k = fresh(), v = fresh();
  for (int i = 0; i < kLayers; ++i) {
    tensors_.push_back(scale_tensor(attn(i, "k_scale"), "F32", {1}, {k}));
    tensors_.push_back(scale_tensor(attn(i, "v_scale"), "F32", {1}, {v}));
    tensors_.push_back(scale_tensor(attn(i, "q_scale"), "F32", {1}, {-3.0f}));
    tensors_.push_back(scale_tensor(attn(i, "k_zero_point"), "F32", {1}, {0.0f}));
    tensors_.push_back(scale_tensor(attn(i, "v_zero_point"), "F32", {1}, {0.0f}));
  }
  LoadedModel m = load();
  ASSERT_EQ(m.kv_scales.size(), size_t(kLayers));
  for (const KvScales& s : m.kv_scales) {
    EXPECT_EQ(s.k, k);
    EXPECT_EQ(s.v, v);
  }
}

// Random weights have no checkpoint, hence no scales, whatever config.json declares.
TEST_F(KvScalesTest, DummyWeightsHaveNone) {
  write_text(dir_ / "config.json", cfg_.dump());
  LoadOptions o;
  o.load_format = LoadFormat::kDummy;
  EXPECT_TRUE(load_model(dir_.string(), o).kv_scales.empty());
  EXPECT_TRUE(load_model(kDummyTinyModel).kv_scales.empty());
}

}  // namespace
}  // namespace pagoda::test
