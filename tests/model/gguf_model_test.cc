// Models from GGUF: the config from {arch}.* keys, the tensor map (the llama q/k permutation undone, views,
// conversions, refusals), the vocabulary hand-over and load_model's format detection, on small files the
// test writes.
#include "pagoda/model/gguf_model.h"

#include <map>
#include <random>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf_convert.h"
#include "gguf_writer.h"
#include "pagoda/core/error.h"
#include "pagoda/model/load_model.h"
#include "safetensors_writer.h"

namespace pagoda::test {
namespace {

using ::testing::AllOf;
using ::testing::HasSubstr;

// hidden 64, 4 q / 2 kv heads of 16, ffn 96, vocab 40, 2 layers.
struct Tiny {
  std::string arch = "llama";
  uint32_t type = kGgmlF32;  // of the matrices: kGgmlF32, kGgmlF16 or kGgmlQ8_0
  bool biases = false;       // q/k/v biases
  bool tied = true;
  std::set<std::string> drop;  // keys and tensors left out
  std::vector<std::pair<std::string, GgufVal>> kv;  // added or replacing
  std::vector<GgufTensorSpec> tensors;               // added
  uint32_t alignment = 0;    // general.alignment when non-zero
};

constexpr int kH = 64, kHeads = 4, kKv = 2, kHd = 16, kF = 96, kV = 40, kL = 2;

// Deterministic row-distinct values: element (r, c) of tensor `seed`.
float value(int seed, int64_t r, int64_t c) { return float(seed) + 0.01f * float(r) + 0.0001f * float(c); }

std::vector<float> matrix(int seed, int64_t rows, int64_t cols) {
  std::vector<float> m(size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) m[size_t(r * cols + c)] = value(seed, r, c);
  return m;
}

// Row r of a Q8_0 "matrix": every byte r's pattern, so rows are told apart after permutation.
std::vector<uint8_t> q8_rows(int seed, int64_t rows, int64_t cols) {
  const size_t row_bytes = size_t(cols / 32 * 34);
  std::vector<uint8_t> b(size_t(rows) * row_bytes);
  for (int64_t r = 0; r < rows; ++r)
    for (size_t i = 0; i < row_bytes; ++i) b[size_t(r) * row_bytes + i] = uint8_t(seed * 31 + r * 7 + int(i));
  return b;
}

std::vector<uint8_t> encode(const std::vector<float>& v, uint32_t type) {
  if (type == kGgmlF32) return f32_le(v);
  std::vector<uint8_t> b(v.size() * 2);
  for (size_t i = 0; i < v.size(); ++i) store_from_f32(b.data(), DType::kF16, i, v[i]);
  return b;
}

// Tensor seeds by name, so tests can recompute what a tensor holds.
int seed_of(const std::string& name) {
  int s = 0;
  for (char ch : name) s = (s * 131 + ch) % 97;
  return s + 1;
}

GgufWriter tiny_writer(const Tiny& t) {
  GgufWriter w;
  std::map<std::string, GgufVal> kv;
  const std::string a = t.arch + ".";
  kv["general.architecture"] = gv::str(t.arch);
  kv[a + "block_count"] = gv::u32(kL);
  kv[a + "context_length"] = gv::u32(512);
  kv[a + "embedding_length"] = gv::u32(kH);
  kv[a + "feed_forward_length"] = gv::u32(kF);
  kv[a + "attention.head_count"] = gv::u32(kHeads);
  kv[a + "attention.head_count_kv"] = gv::u32(kKv);
  kv[a + "rope.freq_base"] = gv::f32(10000.0f);
  kv[a + "attention.layer_norm_rms_epsilon"] = gv::f32(1e-5f);
  if (t.arch == "llama") kv[a + "vocab_size"] = gv::u32(kV);
  kv["tokenizer.ggml.model"] = gv::str("gpt2");
  std::vector<std::string> toks;
  for (int i = 0; i < kV; ++i) toks.push_back("t" + std::to_string(i));
  kv["tokenizer.ggml.tokens"] = gv::strings(toks);
  kv["tokenizer.ggml.bos_token_id"] = gv::u32(1);
  kv["tokenizer.ggml.eos_token_id"] = gv::u32(2);
  if (t.alignment) kv["general.alignment"] = gv::u32(t.alignment);
  for (const auto& [k, v] : t.kv) kv[k] = v;
  for (const auto& [k, v] : kv)
    if (!t.drop.count(k)) w.kv(k, v);

  auto add_matrix = [&](const std::string& name, int64_t rows, int64_t cols, int permute_heads) {
    if (t.drop.count(name)) return;
    if (t.type == kGgmlQ8_0) {
      std::vector<uint8_t> b = q8_rows(seed_of(name), rows, cols);
      if (permute_heads) {  // permute rows of bytes: via float row indices
        std::vector<float> idx(static_cast<size_t>(rows));
        for (int64_t r = 0; r < rows; ++r) idx[size_t(r)] = float(r);
        idx = llama_permute(idx, rows, 1, permute_heads);
        const size_t rb = b.size() / size_t(rows);
        std::vector<uint8_t> p(b.size());
        for (int64_t r = 0; r < rows; ++r) std::memcpy(&p[size_t(r) * rb], &b[size_t(idx[size_t(r)]) * rb], rb);
        b = p;
      }
      w.tensor(name, {uint64_t(cols), uint64_t(rows)}, kGgmlQ8_0, b);
      return;
    }
    std::vector<float> m = matrix(seed_of(name), rows, cols);
    if (permute_heads) m = llama_permute(m, rows, cols, permute_heads);
    w.tensor(name, {uint64_t(cols), uint64_t(rows)}, t.type, encode(m, t.type));
  };
  auto add_vector = [&](const std::string& name, int64_t n, int permute_heads) {
    if (t.drop.count(name)) return;
    std::vector<float> v = matrix(seed_of(name), n, 1);
    if (permute_heads) v = llama_permute(v, n, 1, permute_heads);
    w.tensor(name, {uint64_t(n)}, kGgmlF32, f32_le(v));
  };
  const bool llama = t.arch == "llama";
  add_matrix("token_embd.weight", kV, kH, 0);
  add_vector("output_norm.weight", kH, 0);
  if (!t.tied) add_matrix("output.weight", kV, kH, 0);
  for (int l = 0; l < kL; ++l) {
    const std::string b = "blk." + std::to_string(l) + ".";
    add_vector(b + "attn_norm.weight", kH, 0);
    add_vector(b + "ffn_norm.weight", kH, 0);
    add_matrix(b + "attn_q.weight", kHeads * kHd, kH, llama ? kHeads : 0);
    add_matrix(b + "attn_k.weight", kKv * kHd, kH, llama ? kKv : 0);
    add_matrix(b + "attn_v.weight", kKv * kHd, kH, 0);
    add_matrix(b + "attn_output.weight", kH, kHeads * kHd, 0);
    if (t.biases) {
      add_vector(b + "attn_q.bias", kHeads * kHd, llama ? kHeads : 0);
      add_vector(b + "attn_k.bias", kKv * kHd, llama ? kKv : 0);
      add_vector(b + "attn_v.bias", kKv * kHd, 0);
    }
    if (t.arch == "qwen3") {
      add_vector(b + "attn_q_norm.weight", kHd, 0);
      add_vector(b + "attn_k_norm.weight", kHd, 0);
    }
    add_matrix(b + "ffn_gate.weight", kF, kH, 0);
    add_matrix(b + "ffn_up.weight", kF, kH, 0);
    add_matrix(b + "ffn_down.weight", kH, kF, 0);
  }
  for (const auto& s : t.tensors) w.tensor(s);
  return w;
}

// The image must outlive the file: tests keep both.
struct Image {
  std::vector<uint8_t> bytes;
  std::shared_ptr<const GgufFile> file;
};
Image open_tiny(const Tiny& t) {
  Image im{tiny_writer(t).image(), nullptr};
  im.file = GgufFile::view(im.bytes.data(), im.bytes.size(), "tiny.gguf");
  return im;
}
ModelConfig config_of(const Tiny& t) { return gguf_model_config(*open_tiny(t).file); }

template <typename F>
void expect_config_error(F&& f, const std::string& what, const std::string& file = "tiny.gguf") {
  try {
    f();
    ADD_FAILURE() << "no error; expected " << what;
  } catch (const Error& e) {
    EXPECT_EQ(e.kind(), ErrorKind::kConfig) << e.what();
    EXPECT_THAT(e.what(), AllOf(HasSubstr(file), HasSubstr(what)));
  }
}

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
    if (std::string(arch) == "qwen3") EXPECT_EQ(w.layers[0].q_norm.size(), size_t(kHd));
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

// ---- vocabulary -------------------------------------------------------------------------------------

TEST(GgufVocab, ReadsTheTokenizerKeys) {
  Tiny t;
  t.kv = {{"tokenizer.ggml.pre", gv::str("smollm")},
          {"tokenizer.ggml.scores", gv::f32s(std::vector<float>(kV, -1.5f))},
          {"tokenizer.ggml.token_type", gv::i32s(std::vector<int32_t>(kV, 3))},
          {"tokenizer.ggml.merges", gv::strings({"t 1", "t1 0"})},
          {"tokenizer.ggml.unknown_token_id", gv::u32(0)},
          {"tokenizer.ggml.padding_token_id", gv::u32(2)},
          {"tokenizer.ggml.eot_token_id", gv::i32(5)},
          {"tokenizer.ggml.add_bos_token", gv::boolean(false)},
          {"tokenizer.ggml.add_eos_token", gv::boolean(true)},
          {"tokenizer.ggml.add_space_prefix", gv::boolean(false)},
          {"tokenizer.chat_template", gv::str("{{ messages }}")}};
  Image im = open_tiny(t);
  const std::optional<GgufVocab> v = read_gguf_vocab(*im.file);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->label, "tiny.gguf");
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre, "smollm");
  ASSERT_EQ(v->tokens.size(), size_t(kV));
  EXPECT_EQ(v->tokens[7], "t7");
  EXPECT_EQ(v->scores, std::vector<float>(kV, -1.5f));
  EXPECT_EQ(v->token_types, std::vector<int32_t>(kV, 3));
  EXPECT_EQ(v->merges, (std::vector<std::string>{"t 1", "t1 0"}));
  EXPECT_EQ(v->bos_id, 1);
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_EQ(v->unk_id, 0);
  EXPECT_EQ(v->pad_id, 2);
  EXPECT_EQ(v->eot_id, 5);
  EXPECT_EQ(v->add_bos, false);
  EXPECT_EQ(v->add_eos, true);
  EXPECT_EQ(v->add_space_prefix, false);
  EXPECT_EQ(v->chat_template, "{{ messages }}");

  Tiny bare;
  bare.drop = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id"};
  Image bi = open_tiny(bare);
  const std::optional<GgufVocab> b = read_gguf_vocab(*bi.file);
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->bos_id);
  EXPECT_FALSE(b->add_bos);
  EXPECT_TRUE(b->scores.empty());
  EXPECT_EQ(b->chat_template, "");
  bare.drop.insert("tokenizer.ggml.tokens");
  EXPECT_FALSE(read_gguf_vocab(*open_tiny(bare).file));
}

TEST(GgufVocab, RefusesMistypedKeys) {
  const std::pair<const char*, GgufVal> cases[] = {
      {"tokenizer.ggml.model", gv::u32(1)},
      {"tokenizer.ggml.merges", gv::f32s({1})},
      {"tokenizer.ggml.scores", gv::strings({"a"})},
      {"tokenizer.ggml.add_bos_token", gv::u8(1)},
      {"tokenizer.ggml.unknown_token_id", gv::i32(-1)},
      {"tokenizer.ggml.padding_token_id", gv::u64(uint64_t(1) << 40)},
      {"tokenizer.ggml.token_type", gv::array(kGgufI64, {gv::i64(int64_t(1) << 40)})},
      {"tokenizer.chat_template", gv::strings({"x"})},
  };
  for (const auto& [key, v] : cases) {
    Tiny t;
    t.kv = {{key, v}};
    Image im = open_tiny(t);
    expect_config_error([&] { read_gguf_vocab(*im.file); }, std::string("key '") + key + "'");
  }
}

// ---- load_model -------------------------------------------------------------------------------------

TEST(GgufLoad, LoadModelDetectsGgufFiles) {
  const auto dir = temp_dir("gguf_load");
  Tiny t;
  t.arch = "qwen3";
  const auto img = tiny_writer(t).image();
  write_bytes(dir / "model.gguf", img);
  write_bytes(dir / "model.bin", img);  // no .gguf: found by its magic
  for (const char* name : {"model.gguf", "model.bin"}) {
    const std::string path = (dir / name).string();
    EXPECT_TRUE(is_gguf_path(path));
    LoadedModel m = load_model(path);
    EXPECT_EQ(m.config.arch, Architecture::kQwen3);
    ASSERT_TRUE(m.weights);
    EXPECT_TRUE(m.weights->gguf);
    ASSERT_TRUE(m.gguf_vocab);
    EXPECT_EQ(m.gguf_vocab->tokens.size(), size_t(kV));
    EXPECT_EQ(m.gguf_vocab->label, path);
    LoadOptions g;
    g.load_format = LoadFormat::kGguf;
    EXPECT_EQ(load_model(path, g).config.hidden_size, kH);
  }
  // --load-format dummy: the GGUF's config, random weights.
  LoadOptions d;
  d.load_format = LoadFormat::kDummy;
  LoadedModel dm = load_model((dir / "model.gguf").string(), d);
  EXPECT_FALSE(dm.weights->gguf);
  EXPECT_EQ(dm.weights->layers[0].q_norm.size(), size_t(kHd));
  LoadOptions s;
  s.load_format = LoadFormat::kSafetensors;
  expect_config_error([&] { load_model((dir / "model.gguf").string(), s); }, "is a GGUF file, not safetensors", "model.gguf");
  EXPECT_FALSE(is_gguf_path(dir.string()));
  write_text(dir / "config.json", "{}");
  EXPECT_FALSE(is_gguf_path((dir / "config.json").string()));
  LoadOptions g;
  g.load_format = LoadFormat::kGguf;
  EXPECT_THROW(load_model((dir / "config.json").string(), g), Error);  // not a GGUF file
  EXPECT_THROW(load_model(kDummyTinyModel, g), Error);
  EXPECT_EQ(parse_load_format("gguf"), LoadFormat::kGguf);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagoda::test
