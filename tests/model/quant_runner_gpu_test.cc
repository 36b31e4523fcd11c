// The GPU forward pass over quantized weights (label gpu) against the CPU runner on the same model: small
// random models whose linear layers are stored in GGML formats (uniform Q4_K; Q8_0 with a tied Q8_0
// embedding as SmolLM2's GGUF has; a fused q|k|v of Q4_K, Q4_K and Q6_K parts with biases), a prompt of 40
// tokens (prefill: dequantize + GEMM) and one of 20 (prefill by the quantized GEMV), then 24 decode steps
// each (the GEMV, replayed from a CUDA graph). Both runners are fed the CPU's greedy tokens, so every step
// compares logits of the same context.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <cstdio>

#include "pagoda/attention/registry.h"
#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/model/cuda/cuda_model_runner.h"
#include "pagoda/model/load_model.h"
#include "pagoda/ops/quant/quant.h"
#include "pagoda/platform/device.h"

namespace pagoda {
namespace {

constexpr int kBlockSize = 16, kBlocks = 8;

void quantize(ModelWeights& w, WeightMatrix& m, QuantType q) {
  const size_t rb = quant_row_bytes(q, m.cols);
  std::vector<uint8_t> out(size_t(m.rows) * rb);
  std::vector<float> row(static_cast<size_t>(m.cols));
  for (int64_t r = 0; r < m.rows; ++r) {
    for (int64_t i = 0; i < m.cols; ++i) row[size_t(i)] = load_as_f32(m.data, m.dtype, size_t(r * m.cols + i));
    quantize_row(q, row.data(), out.data() + size_t(r) * rb, m.cols);
  }
  w.owned.push_back(std::move(out));
  m.data = w.owned.back().data();
  m.quant = q;
}

// Multiplies a dense float32 matrix by s: logits of a N(0, 0.02^2) lm_head are too small to rank tokens
// with a margin; 50x gives them a spread of several units.
void scale(WeightMatrix& m, float s) {
  float* p = static_cast<float*>(const_cast<void*>(m.data));
  for (int64_t i = 0; i < m.rows * m.cols; ++i) p[i] *= s;
}

struct Case {
  std::string name;
  ModelConfig config;
  QuantType q, k, v, other;  // formats of q, k, v and of the other linear layers
  QuantType embed;           // the tied embedding's format, or kNone (untied, lm_head in `other`)
};

LoadedModel make_model(const Case& c) {
  ModelWeights w = make_random_weights(c.config, 7, DType::kF32);
  if (c.embed != QuantType::kNone) {
    scale(w.embed, 50.f);
    quantize(w, w.embed, c.embed);
    w.lm_head = w.embed;
  } else {
    scale(w.lm_head, 50.f);
    quantize(w, w.lm_head, c.other);
  }
  for (LayerWeights& l : w.layers) {
    quantize(w, l.q, c.q);
    quantize(w, l.k, c.k);
    quantize(w, l.v, c.v);
    for (WeightMatrix* m : {&l.o, &l.gate, &l.up, &l.down}) quantize(w, *m, c.other);
  }
  LoadedModel lm;
  lm.config = c.config;
  lm.weights = std::make_shared<const ModelWeights>(std::move(w));
  return lm;
}

// Runs `prompt` then one decode step per token of `fed` (or, with fed empty, `steps` greedy tokens chosen
// here, returned in `chosen`); returns the logits of every step.
std::vector<std::vector<float>> run(ModelRunner& r, const std::vector<int32_t>& prompt, const std::vector<int32_t>& fed,
                                    int steps, std::vector<int32_t>* chosen) {
  const int V = r.config().vocab_size;
  std::vector<std::vector<float>> out;
  ForwardBatch b;
  b.token_ids = prompt;
  b.query_start_loc = {0, int32_t(prompt.size())};
  b.seq_lens = {int32_t(prompt.size())};
  for (int i = 0; i < kBlocks; ++i) b.block_tables.push_back(i);
  b.max_blocks_per_seq = kBlocks;
  b.logits_indices = {int32_t(prompt.size()) - 1};
  for (int s = 0; s <= steps; ++s) {
    out.push_back(r.forward(b));
    EXPECT_EQ(int(out.back().size()), V);
    if (s == steps) break;
    int32_t next;
    if (fed.empty()) {
      next = int32_t(std::max_element(out.back().begin(), out.back().end()) - out.back().begin());
      chosen->push_back(next);
    } else {
      next = fed[size_t(s)];
    }
    b.token_ids = {next};
    b.query_start_loc = {0, 1};
    b.seq_lens = {b.seq_lens[0] + 1};
    b.logits_indices = {0};
  }
  return out;
}

// Tolerance on the logits, from the activations' rounding: the GPU rounds every activation to bf16
// (2^-9 relative), the CPU's quantized matmuls round their inputs to int8 blocks (at most 1/254 of a block's
// largest value, ~2^-8). About 8 such roundings a layer (norm output, q|k|v, attention output, o projection
// and residual, norm, gate|up, SiLU-and-mul, down and residual) plus 4 (embedding, final norm, its
// gather, lm_head), each moving the logits by up to ~2^-8 of their scale, summed linearly:
// tau = (8 L + 4) 2^-8 max |logit|. A wrong weight, part or offset moves them by their whole scale.
double logit_tolerance(int layers, const std::vector<float>& ref) {
  double mx = 0;
  for (float v : ref) mx = std::max(mx, double(std::fabs(v)));
  return (8.0 * layers + 4.0) * std::ldexp(1.0, -8) * mx;
}

TEST(QuantRunnerGpu, GreedyTokensAndLogitsMatchTheCpuRunner) {
  const auto device = detect_cuda_device();
  if (!device) GTEST_SKIP() << "skipped: no CUDA device";
  ModelConfig qwen3 = dummy_tiny_config();  // hidden 256, ffn 512: whole k-quant blocks
  qwen3.num_layers = 2;
  qwen3.layer_uses_sliding_window.assign(2, false);
  ModelConfig tied = qwen3;
  tied.tie_word_embeddings = true;
  ModelConfig llama = dummy_tiny_config();
  llama.arch = Architecture::kLlama;
  llama.architecture_name = "LlamaForCausalLM";
  llama.qk_norm = false;
  llama.attention_bias = true;
  llama.o_proj_bias = true;
  llama.num_layers = 2;
  llama.layer_uses_sliding_window.assign(2, false);
  const Case cases[] = {
      {"q4_k", qwen3, QuantType::kQ4_K, QuantType::kQ4_K, QuantType::kQ4_K, QuantType::kQ4_K, QuantType::kNone},
      {"q8_0 tied q8_0 embedding", tied, QuantType::kQ8_0, QuantType::kQ8_0, QuantType::kQ8_0, QuantType::kQ8_0,
       QuantType::kQ8_0},
      {"q4_k/q4_k/q6_k qkv, q5_0 rest, biases", llama, QuantType::kQ4_K, QuantType::kQ4_K, QuantType::kQ6_K,
       QuantType::kQ5_0, QuantType::kNone},
  };
  const BackendRegistry registry = BackendRegistry::builtin(false);
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const LoadedModel model = make_model(c);
    CpuModelRunner cpu(model, {.num_blocks = kBlocks, .block_size = kBlockSize, .dtype = DType::kF32}, 2);
    CudaRunnerOptions o;
    o.dtype = DType::kBF16;
    o.kv_dtype = DType::kBF16;
    o.block_size = kBlockSize;
    RunnerOptions ro;
    ro.flash_attn_version = 2;
    o.attention = group_attention_layers(
        model.config,
        std::vector<std::shared_ptr<const AttentionBackend>>(size_t(model.config.num_layers),
                                                             registry.shared(BackendName::kFlashAttn)),
        o.dtype, o.kv_dtype, o.layout, o.block_size, true, ro);
    o.num_blocks_override = kBlocks;
    o.max_num_tokens = 128;
    o.max_num_seqs = 4;
    o.max_model_len = kBlocks * kBlockSize;
    CudaModelRunner gpu(model, o);
    std::mt19937 gen(11);
    for (int prompt_len : {40, 20}) {
      std::vector<int32_t> prompt(static_cast<size_t>(prompt_len));
      for (auto& t : prompt) t = int32_t(gen() % uint32_t(model.config.vocab_size));
      std::vector<int32_t> tokens;
      const auto ref = run(cpu, prompt, {}, 24, &tokens);
      const auto got = run(gpu, prompt, tokens, 24, nullptr);
      int compared = 0;
      double worst = 0;
      for (size_t s = 0; s < ref.size(); ++s) {
        const double tol = logit_tolerance(model.config.num_layers, ref[s]);
        double err = 0;
        for (size_t i = 0; i < ref[s].size(); ++i) err = std::max(err, double(std::fabs(got[s][i] - ref[s][i])));
        worst = std::max(worst, err / tol);
        EXPECT_LE(err, tol) << "prompt " << prompt_len << " step " << s;
        std::vector<float> sorted = ref[s];
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        if (sorted[0] - sorted[1] > 2 * tol) {  // the CPU's choice cannot flip within the tolerance
          ++compared;
          const int32_t gpu_top = int32_t(std::max_element(got[s].begin(), got[s].end()) - got[s].begin());
          const int32_t cpu_top = int32_t(std::max_element(ref[s].begin(), ref[s].end()) - ref[s].begin());
          EXPECT_EQ(gpu_top, cpu_top) << "prompt " << prompt_len << " step " << s;
        }
      }
      std::printf("[ %s, prompt %d ] max |logit err| / tol %.3f; greedy token compared at %d of %zu steps\n",
                  c.name.c_str(), prompt_len, worst, compared, ref.size());
    }
  }
}

}  // namespace
}  // namespace pagoda
