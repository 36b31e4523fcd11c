// Models from GGUF: the config from {arch}.* keys and the tensor map (the llama q/k permutation undone,
// views, conversions, refusals), on small files the test writes.
#include "pagoda/model/gguf_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf_tiny_model.h"
#include "pagoda/core/error.h"
#include "safetensors_writer.h"

namespace pagoda::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

TEST(GgufConfig, ReadsTheLlamaKeys) {
  Tiny t;
  t.kv.push_back({"tokenizer.ggml.eot_token_id", gv::u32(3)});
  const ModelConfig c = config_of(t);
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_EQ(c.architecture_name, "LlamaForCausalLM");
  EXPECT_EQ(c.num_layers, kL);
  EXPECT_EQ(c.hidden_size, kH);
  EXPECT_EQ(c.intermediate_size, kF);
  EXPECT_EQ(c.num_heads, kHeads);
  EXPECT_EQ(c.num_kv_heads, kKv);
  EXPECT_EQ(c.head_dim, kHd);
  EXPECT_EQ(c.vocab_size, kV);
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_EQ(c.rms_norm_eps, double(1e-5f));
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_EQ(c.rope_scaling.type, "default");
  EXPECT_TRUE(c.rope_scaling.freq_factors.empty());
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_FALSE(c.o_proj_bias);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.sliding_window, 0);
  EXPECT_EQ(c.layer_uses_sliding_window, std::vector<bool>(kL, false));
  EXPECT_EQ(c.checkpoint_dtype, DType::kF32);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int>{2, 3}));  // eos, then eot
  t.tied = false;
  t.type = kGgmlQ8_0;
  const ModelConfig q = config_of(t);
  EXPECT_FALSE(q.tie_word_embeddings);
  EXPECT_FALSE(q.checkpoint_dtype);  // quantized: no plain dtype
}

TEST(GgufConfig, Qwen2BiasesAndQwen3NormsComeFromTheTensors) {
  Tiny q2;
  q2.arch = "qwen2";
  q2.biases = true;
  const ModelConfig c2 = config_of(q2);
  EXPECT_EQ(c2.arch, Architecture::kQwen2);
  EXPECT_TRUE(c2.attention_bias);
  EXPECT_FALSE(c2.o_proj_bias);
  EXPECT_FALSE(c2.qk_norm);
  Tiny q3;
  q3.arch = "qwen3";
  const ModelConfig c3 = config_of(q3);
  EXPECT_EQ(c3.arch, Architecture::kQwen3);
  EXPECT_TRUE(c3.qk_norm);
  EXPECT_FALSE(c3.attention_bias);
}

TEST(GgufConfig, VocabSizeFallsBackToTheTokensThenTheEmbedding) {
  Tiny t;
  t.arch = "qwen2";  // no qwen2.vocab_size, as llama.cpp writes it
  EXPECT_EQ(config_of(t).vocab_size, kV);
  t.drop = {"tokenizer.ggml.tokens", "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
  EXPECT_EQ(config_of(t).vocab_size, kV);  // token_embd.weight's rows
  t.drop.insert("token_embd.weight");
  expect_config_error([&] { config_of(t); }, "no vocabulary size");
}

TEST(GgufConfig, HeadSizeFromKeyLengthOrEmbeddingOverHeads) {
  Tiny t;
  t.kv = {{"llama.attention.key_length", gv::u32(32)}, {"llama.attention.value_length", gv::u32(32)},
          {"llama.rope.dimension_count", gv::u32(32)}};
  EXPECT_EQ(config_of(t).head_dim, 32);
  t.kv = {{"llama.attention.value_length", gv::u32(8)}};
  expect_config_error([&] { config_of(t); }, "attention.value_length 8 differs from the key length 16");
  t.kv = {{"llama.rope.dimension_count", gv::u32(8)}};
  expect_config_error([&] { config_of(t); }, "partial rotary embeddings are not supported");
  t.kv = {{"llama.attention.key_length", gv::u32(15)}};
  expect_config_error([&] { config_of(t); }, "head size must be even");
  t.kv = {{"llama.attention.head_count", gv::u32(5)}, {"llama.attention.head_count_kv", gv::u32(5)}};
  expect_config_error([&] { config_of(t); }, "embedding length 64 is not a multiple of the head count 5");
}

TEST(GgufConfig, RefusesMissingOrMistypedKeys) {
  for (const char* key : {"general.architecture", "llama.block_count", "llama.embedding_length", "llama.feed_forward_length",
                          "llama.attention.head_count", "llama.context_length", "llama.attention.layer_norm_rms_epsilon"}) {
    Tiny t;
    t.drop = {key};
    expect_config_error([&] { config_of(t); }, std::string("missing key '") + key + "'");
  }
  Tiny s;
  s.kv = {{"llama.block_count", gv::str("2")}};
  expect_config_error([&] { config_of(s); }, "key 'llama.block_count' must be an integer, not a string");
  Tiny f;
  f.kv = {{"llama.rope.freq_base", gv::str("1e4")}};
  expect_config_error([&] { config_of(f); }, "key 'llama.rope.freq_base' must be a number");
}

TEST(GgufConfig, RefusesSizesOutsideTheBounds) {
  const std::pair<const char*, GgufVal> cases[] = {
      {"llama.block_count", gv::u32(0)},
      {"llama.block_count", gv::u32(kMaxNumLayers + 1)},
      {"llama.embedding_length", gv::u64(uint64_t(1) << 40)},
      {"llama.feed_forward_length", gv::i32(-5)},
      {"llama.attention.head_count", gv::u32(kMaxNumHeads + 1)},
      {"llama.attention.head_count_kv", gv::u32(8)},  // above the head count
      {"llama.context_length", gv::u32(kMaxPositionEmbeddings + 1)},
      {"llama.vocab_size", gv::u32(kMaxVocabSize + 1)},
  };
  for (const auto& [key, v] : cases) {
    Tiny t;
    t.kv = {{key, v}};
    expect_config_error([&] { config_of(t); }, std::string("key '") + key + "' is ");
  }
  Tiny kv;
  kv.kv = {{"llama.attention.head_count_kv", gv::u32(3)}};
  expect_config_error([&] { config_of(kv); }, "head count 4 is not a multiple of the KV head count 3");
  Tiny eps;
  eps.kv = {{"llama.attention.layer_norm_rms_epsilon", gv::f32(0)}};
  expect_config_error([&] { config_of(eps); }, "layer_norm_rms_epsilon' must be positive");
  Tiny theta;
  theta.kv = {{"llama.rope.freq_base", gv::f32(-1)}};
  expect_config_error([&] { config_of(theta); }, "rope.freq_base' must be positive");
  Tiny eos;
  eos.kv = {{"tokenizer.ggml.eos_token_id", gv::u32(kV)}};
  expect_config_error([&] { config_of(eos); }, "'tokenizer.ggml.eos_token_id' is 40, not a token id of this model");
}

TEST(GgufConfig, ArchitecturesAndFeaturesPagodaDoesNotRun) {
  Tiny t;
  t.kv = {{"general.architecture", gv::str("gpt2")}};
  expect_config_error([&] { config_of(t); }, "architecture 'gpt2' (general.architecture) is not supported (supported: llama, qwen2, qwen3)");
  Tiny moe;
  moe.kv = {{"llama.expert_count", gv::u32(8)}};
  expect_config_error([&] { config_of(moe); }, "mixture-of-experts models are not supported");
  Tiny yarn;
  yarn.kv = {{"llama.rope.scaling.type", gv::str("yarn")}, {"llama.rope.scaling.factor", gv::f32(4)}};
  expect_config_error([&] { config_of(yarn); }, "RoPE scaling 'yarn'");
}

TEST(GgufConfig, PerLayerSizesMustAgree) {
  Tiny t;
  t.kv = {{"llama.feed_forward_length", gv::array(kGgufU32, {gv::u32(kF), gv::u32(kF)})}};
  EXPECT_EQ(config_of(t).intermediate_size, kF);
  t.kv = {{"llama.attention.head_count_kv", gv::array(kGgufU32, {gv::u32(2), gv::u32(4)})}};
  expect_config_error([&] { config_of(t); }, "'llama.attention.head_count_kv' differs between layers");
}

TEST(GgufConfig, LinearRopeScaling) {
  Tiny t;
  t.kv = {{"llama.rope.scaling.type", gv::str("linear")}, {"llama.rope.scaling.factor", gv::f32(4)}};
  ModelConfig c = config_of(t);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 4.0);
  t.kv = {{"llama.rope.scale_linear", gv::f32(2)}};  // the old key, type defaulting to linear as in llama.cpp
  c = config_of(t);
  EXPECT_EQ(c.rope_scaling.type, "linear");
  EXPECT_EQ(c.rope_scaling.factor, 2.0);
  t.kv = {{"llama.rope.scaling.type", gv::str("none")}, {"llama.rope.scaling.factor", gv::f32(8)}};
  EXPECT_EQ(config_of(t).rope_scaling.type, "default");
}

TEST(GgufConfig, RopeFreqsBecomeFrequencyFactors) {
  Tiny t;
  const std::vector<float> ff = {1, 1, 1, 1.5f, 2, 4, 8, 8};
  t.tensors = {{"rope_freqs.weight", {kHd / 2}, kGgmlF32, f32_le(ff)}};
  const ModelConfig c = config_of(t);
  EXPECT_EQ(c.rope_scaling.freq_factors, ff);
  EXPECT_THAT(model_config_summary(c), HasSubstr("per-frequency factors"));
  t.tensors = {{"rope_freqs.weight", {kHd}, kGgmlF32, f32_le(std::vector<float>(kHd, 1))}};
  expect_config_error([&] { config_of(t); }, "tensor 'rope_freqs.weight' has 1 dims (ne[0] 16), expected [8]");
  std::vector<float> bad = ff;
  bad[2] = 0;
  t.tensors = {{"rope_freqs.weight", {kHd / 2}, kGgmlF32, f32_le(bad)}};
  expect_config_error([&] { config_of(t); }, "'rope_freqs.weight' [2] is 0, not a positive number");
}

TEST(GgufConfig, SlidingWindow) {
  Tiny t;
  t.kv = {{"llama.attention.sliding_window", gv::u32(128)}};
  ModelConfig c = config_of(t);
  EXPECT_EQ(c.sliding_window, 128);
  EXPECT_EQ(c.layer_uses_sliding_window, std::vector<bool>(kL, true));
  t.kv.push_back({"llama.attention.sliding_window_pattern", gv::array(kGgufBool, {gv::boolean(true), gv::boolean(false)})});
  c = config_of(t);
  EXPECT_EQ(c.layer_uses_sliding_window, (std::vector<bool>{true, false}));
  EXPECT_TRUE(c.uses_sliding_window(0));
  EXPECT_FALSE(c.uses_sliding_window(1));
  t.kv.back().second = gv::u32(4);
  expect_config_error([&] { config_of(t); }, "sliding_window_pattern' must be an array of one bool per layer");
}

// ---- weights ----------------------------------------------------------------------------------------

// Row r of a loaded float matrix equals the Hugging Face row r of tensor `name` (rounded to float16 when
// the file held float16).
void expect_hf_rows(const WeightMatrix& m, const std::string& name, int64_t rows, int64_t cols, bool f16_file = false) {
  ASSERT_EQ(m.rows, rows);
  ASSERT_EQ(m.cols, cols);
  ASSERT_EQ(m.quant, QuantType::kNone);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; c += 7) {
      const float v = value(seed_of(name), r, c);
      const float want = f16_file ? load_as_f32(encode({v}, kGgmlF16).data(), DType::kF16, 0) : v;
      ASSERT_EQ(load_as_f32(m.data, m.dtype, size_t(r * cols + c)), want) << name << " row " << r << " col " << c;
    }
}

TEST(GgufWeights, LlamaQAndKRowsReturnToHuggingFaceOrder) {
  Tiny t;
  t.biases = true;
  t.tied = false;
  Image im = open_tiny(t);
  const ModelConfig c = gguf_model_config(*im.file);
  const ModelWeights w = load_gguf_weights(c, im.file, std::nullopt);
  ASSERT_EQ(w.layers.size(), size_t(kL));
  for (int l = 0; l < kL; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    const LayerWeights& lw = w.layers[size_t(l)];
    expect_hf_rows(lw.q, b + "attn_q.weight", kHeads * kHd, kH);
    expect_hf_rows(lw.k, b + "attn_k.weight", kKv * kHd, kH);
    expect_hf_rows(lw.v, b + "attn_v.weight", kKv * kHd, kH);
    expect_hf_rows(lw.o, b + "attn_output.weight", kH, kHeads * kHd);
    expect_hf_rows(lw.down, b + "ffn_down.weight", kH, kF);
    ASSERT_EQ(lw.q_bias.size(), size_t(kHeads * kHd));
    for (int r = 0; r < kHeads * kHd; ++r) EXPECT_EQ(lw.q_bias[size_t(r)], value(seed_of(b + "attn_q.bias"), r, 0)) << r;
    for (int r = 0; r < kKv * kHd; ++r) EXPECT_EQ(lw.k_bias[size_t(r)], value(seed_of(b + "attn_k.bias"), r, 0)) << r;
    EXPECT_EQ(lw.input_norm[5], value(seed_of(b + "attn_norm.weight"), 5, 0));
  }
  expect_hf_rows(w.embed, "token_embd.weight", kV, kH);
  expect_hf_rows(w.lm_head, "output.weight", kV, kH);
  EXPECT_EQ(w.final_norm.size(), size_t(kH));
  // Unpermuted matrices are views of the file; permuted ones live in owned memory.
  const uint8_t* lo = im.bytes.data();
  const uint8_t* hi = lo + im.bytes.size();
  auto in_file = [&](const void* p) { return p >= lo && p < hi; };
  EXPECT_TRUE(in_file(w.layers[0].v.data));
  EXPECT_TRUE(in_file(w.embed.data));
  EXPECT_FALSE(in_file(w.layers[0].q.data));
  EXPECT_FALSE(in_file(w.layers[0].k.data));
  EXPECT_EQ(w.gguf, im.file);
}

TEST(GgufWeights, QwenFilesAreNotPermuted) {
  for (const char* arch : {"qwen2", "qwen3"}) {
    Tiny t;
    t.arch = arch;
    t.biases = true;
    Image im = open_tiny(t);
    const ModelWeights w = load_gguf_weights(gguf_model_config(*im.file), im.file, std::nullopt);
    expect_hf_rows(w.layers[1].q, "blk.1.attn_q.weight", kHeads * kHd, kH);
    expect_hf_rows(w.layers[1].k, "blk.1.attn_k.weight", kKv * kHd, kH);
    EXPECT_EQ(w.layers[1].k_bias[3], value(seed_of("blk.1.attn_k.bias"), 3, 0));
    EXPECT_EQ(w.layers[1].q.data, im.file->tensor_data(*im.file->find("blk.1.attn_q.weight")));  // a view
    if (std::string(arch) == "qwen3") {
      EXPECT_EQ(w.layers[0].q_norm.size(), size_t(kHd));
    }
    EXPECT_EQ(w.lm_head.data, w.embed.data);  // tied
  }
}

TEST(GgufWeights, QuantizedRowsStayQuantizedAndArePermutedWhole) {
  Tiny t;
  t.type = kGgmlQ8_0;
  Image im = open_tiny(t);
  const ModelWeights w = load_gguf_weights(gguf_model_config(*im.file), im.file, DType::kBF16);
  const WeightMatrix& q = w.layers[0].q;
  EXPECT_EQ(q.quant, QuantType::kQ8_0);
  EXPECT_EQ(q.rows, kHeads * kHd);
  EXPECT_EQ(q.cols, kH);
  const std::vector<uint8_t> want = q8_rows(seed_of("blk.0.attn_q.weight"), kHeads * kHd, kH);
  EXPECT_EQ(std::memcmp(q.data, want.data(), want.size()), 0);  // Hugging Face row order, byte for byte
  const std::vector<uint8_t> kwant = q8_rows(seed_of("blk.0.attn_k.weight"), kKv * kHd, kH);
  EXPECT_EQ(std::memcmp(w.layers[0].k.data, kwant.data(), kwant.size()), 0);
  EXPECT_EQ(w.layers[0].up.quant, QuantType::kQ8_0);
  EXPECT_EQ(w.layers[0].up.data, im.file->tensor_data(*im.file->find("blk.0.ffn_up.weight")));
  EXPECT_EQ(w.embed.quant, QuantType::kQ8_0);
  EXPECT_EQ(w.lm_head.data, w.embed.data);
}

TEST(GgufWeights, DtypeOverrideConverts) {
  Tiny t;
  t.type = kGgmlF16;
  Image im = open_tiny(t);
  const ModelConfig c = gguf_model_config(*im.file);
  EXPECT_EQ(c.checkpoint_dtype, DType::kF16);
  const ModelWeights as_is = load_gguf_weights(c, im.file, std::nullopt);
  EXPECT_EQ(as_is.layers[0].up.dtype, DType::kF16);
  const ModelWeights f32 = load_gguf_weights(c, im.file, DType::kF32);
  EXPECT_EQ(f32.layers[0].up.dtype, DType::kF32);
  EXPECT_EQ(f32.layers[0].q.dtype, DType::kF32);
  for (int64_t i : {0, 17, 1000})
    EXPECT_EQ(load_as_f32(f32.layers[0].up.data, DType::kF32, size_t(i)), load_as_f32(as_is.layers[0].up.data, DType::kF16, size_t(i)));
  expect_hf_rows(f32.layers[1].q, "blk.1.attn_q.weight", kHeads * kHd, kH, true);
  expect_hf_rows(as_is.layers[1].k, "blk.1.attn_k.weight", kKv * kHd, kH, true);
  EXPECT_THROW(load_gguf_weights(c, im.file, DType::kI32), Error);
}

TEST(GgufWeights, MisalignedTensorsAreCopied) {
  Tiny t;
  t.alignment = 1;
  t.tensors = {{"rope_freqs.weight", {kHd / 2}, kGgmlF32, f32_le(std::vector<float>(kHd / 2, 1))}};
  Image im = open_tiny(t);
  const ModelWeights w = load_gguf_weights(gguf_model_config(*im.file), im.file, std::nullopt);
  int copied = 0;
  for (const LayerWeights& l : w.layers)
    for (const WeightMatrix* m : {&l.v, &l.o, &l.gate, &l.up, &l.down}) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(m->data) % 4, 0u);
      copied += m->data < static_cast<const void*>(im.bytes.data()) ||
                m->data >= static_cast<const void*>(im.bytes.data() + im.bytes.size());
    }
  EXPECT_GT(copied, 0);  // alignment 1 leaves some of them misaligned
  expect_hf_rows(w.layers[1].down, "blk.1.ffn_down.weight", kH, kF);
  expect_hf_rows(w.layers[0].gate, "blk.0.ffn_gate.weight", kF, kH);
}

TEST(GgufWeights, RefusesMissingTensorsAndWrongDims) {
  Tiny t;
  t.drop = {"blk.1.ffn_up.weight"};
  Image im = open_tiny(t);
  expect_config_error([&] { load_gguf_weights(gguf_model_config(*im.file), im.file, std::nullopt); },
                      "missing tensor 'blk.1.ffn_up.weight'");
  Tiny d;
  d.drop = {"blk.0.attn_v.weight"};
  d.tensors = {{"blk.0.attn_v.weight", {kH, kHeads * kHd}, kGgmlF32, f32_le(std::vector<float>(kH * kHeads * kHd))}};
  Image di = open_tiny(d);
  expect_config_error([&] { load_gguf_weights(gguf_model_config(*di.file), di.file, std::nullopt); },
                      "tensor 'blk.0.attn_v.weight' in GGUF file 'tiny.gguf' has dims [64, 64] but the metadata implies [64, 32]");
  Tiny b;  // a q bias without the k and v biases
  b.tensors = {{"blk.0.attn_q.bias", {kHeads * kHd}, kGgmlF32, f32_le(std::vector<float>(kHeads * kHd))}};
  Image bi = open_tiny(b);
  expect_config_error([&] { load_gguf_weights(gguf_model_config(*bi.file), bi.file, std::nullopt); },
                      "missing tensor 'blk.0.attn_k.bias'");
}

TEST(GgufWeights, RefusesTensorsPagodaWouldIgnore) {
  for (const char* name : {"blk.0.ffn_up.bias", "blk.1.attn_qkv.weight", "blk.0.attn_q_norm.weight", "output.bias"}) {
    Tiny t;
    t.tensors = {{name, {16}, kGgmlF32, f32_le(std::vector<float>(16))}};
    Image im = open_tiny(t);
    expect_config_error([&] { load_gguf_weights(gguf_model_config(*im.file), im.file, std::nullopt); },
                        std::string("tensor '") + name + "' in GGUF file 'tiny.gguf' is not part of pagoda's LlamaForCausalLM");
  }
}

}  // namespace
}  // namespace pagoda::test
