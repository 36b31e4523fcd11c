// The quantized built-ins' CPU side: names, and quantize_matrices on a small model (every linear layer
// stored in the format, rows equal to quantize_row's, the model still runs).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "pagoda/core/error.h"
#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/model/load_model.h"
#include "pagoda/model/quantize_weights.h"
#include "pagoda/ops/quant/quant.h"

namespace pagoda {
namespace {

TEST(QuantizedBuiltins, NamesGiveLlama3ShapesAndTheirFormat) {
  for (const char* name : {kDummyLlama3_8B_Q4K, kDummyLlama3_8B_Q8_0}) {
    const auto c = builtin_model_config(name);
    ASSERT_TRUE(c.has_value()) << name;
    EXPECT_EQ(c->hidden_size, 4096);
    EXPECT_EQ(c->intermediate_size, 14336);
    EXPECT_EQ(c->num_layers, 32);
  }
  EXPECT_EQ(builtin_model_quant(kDummyLlama3_8B_Q4K), QuantType::kQ4_K);
  EXPECT_EQ(builtin_model_quant(kDummyLlama3_8B_Q8_0), QuantType::kQ8_0);
  EXPECT_EQ(builtin_model_quant(kDummyLlama3_8B), QuantType::kNone);
  EXPECT_EQ(builtin_model_quant(kDummyTinyModel), QuantType::kNone);
}

TEST(QuantizeMatrices, EveryLinearLayerInTheFormatAndTheModelRuns) {
  const ModelConfig c = dummy_tiny_config();  // hidden 256, ffn 512, untied lm_head
  ModelWeights w = make_random_weights(c, 3, DType::kF32);
  // The dense rows, to compare with quantize_row's bytes.
  std::vector<float> q0(static_cast<size_t>(w.layers[0].q.cols));
  std::copy_n(static_cast<const float*>(w.layers[0].q.data), q0.size(), q0.begin());
  const void* embed = w.embed.data;
  quantize_matrices(w, QuantType::kQ4_K);
  EXPECT_EQ(w.embed.data, embed);
  EXPECT_EQ(w.embed.quant, QuantType::kNone);
  EXPECT_EQ(w.lm_head.quant, QuantType::kQ4_K);
  for (const LayerWeights& l : w.layers)
    for (const WeightMatrix* m : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down}) EXPECT_EQ(m->quant, QuantType::kQ4_K);
  std::vector<uint8_t> row(quant_row_bytes(QuantType::kQ4_K, int64_t(q0.size())));
  quantize_row(QuantType::kQ4_K, q0.data(), row.data(), int64_t(q0.size()));
  EXPECT_EQ(std::memcmp(row.data(), w.layers[0].q.data, row.size()), 0);

  LoadedModel m;
  m.config = c;
  m.weights = std::make_shared<const ModelWeights>(std::move(w));
  CpuModelRunner runner(m, {.num_blocks = 4, .block_size = 16}, 2);
  ForwardBatch b;
  b.token_ids = {1, 5, 9, 300};
  b.query_start_loc = {0, 4};
  b.seq_lens = {4};
  b.block_tables = {0};
  b.max_blocks_per_seq = 1;
  b.logits_indices = {3};
  const std::vector<float> logits = runner.forward(b);
  ASSERT_EQ(int(logits.size()), c.vocab_size);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

TEST(QuantizeMatrices, RefusesRowsThatAreNotWholeBlocks) {
  ModelConfig c = dummy_tiny_config();
  c.intermediate_size = 384;  // down's rows of 384 weights: not whole 256-weight blocks
  ModelWeights w = make_random_weights(c, 3, DType::kF32);
  EXPECT_THROW(quantize_matrices(w, QuantType::kQ4_K), Error);
}

}  // namespace
}  // namespace pagoda
