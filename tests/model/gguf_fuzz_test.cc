// Runs the GGUF fuzz entry point over a few thousand mutants of a small valid model file (bit flips,
// truncations, lying counts, lengths, dims, types and offsets, random windows), so every CI run exercises the
// reader's and the model builder's error paths.
#include <cstdio>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "fuzz_gguf.h"
#include "gguf_writer.h"
#include "pagoda/core/error.h"
#include "pagoda/model/gguf_model.h"

namespace pagoda::test {
namespace {

// One llama layer: hidden 32, 2 q / 1 kv heads of 16, ffn 64, vocab 8; Q8_0 and F16 matrices, F32 norms,
// and metadata of most types (nested array included).
std::vector<uint8_t> seed_image(GgufLayout* layout) {
  GgufWriter w;
  w.kv("general.architecture", gv::str("llama"));
  w.kv("llama.block_count", gv::u32(1)).kv("llama.context_length", gv::u32(64)).kv("llama.embedding_length", gv::u32(32));
  w.kv("llama.feed_forward_length", gv::u32(64)).kv("llama.attention.head_count", gv::u32(2));
  w.kv("llama.attention.head_count_kv", gv::u32(1)).kv("llama.rope.freq_base", gv::f32(10000));
  w.kv("llama.attention.layer_norm_rms_epsilon", gv::f32(1e-5f)).kv("llama.vocab_size", gv::u64(8));
  w.kv("tokenizer.ggml.model", gv::str("gpt2"));
  w.kv("tokenizer.ggml.tokens", gv::strings({"a", "b", "c", "d", "e", "f", "g", "h"}));
  w.kv("tokenizer.ggml.token_type", gv::i32s({1, 1, 1, 1, 1, 1, 3, 3}));
  w.kv("tokenizer.ggml.scores", gv::f32s({0, -1, -2, -3, -4, -5, -6, -7}));
  w.kv("tokenizer.ggml.bos_token_id", gv::u32(6)).kv("tokenizer.ggml.add_bos_token", gv::boolean(true));
  w.kv("x.nested", gv::array(kGgufArray, {gv::i32s({1, 2}), gv::strings({"z"})}));
  auto q8 = [](int rows, int cols) { return std::vector<uint8_t>(size_t(rows * cols / 32 * 34), 0x11); };
  auto f16 = [](int n) { return std::vector<uint8_t>(size_t(2 * n), 0x2c); };
  w.tensor("token_embd.weight", {32, 8}, kGgmlQ8_0, q8(8, 32));
  w.tensor("output_norm.weight", {32}, kGgmlF32, f32_le(std::vector<float>(32, 1)));
  w.tensor("blk.0.attn_norm.weight", {32}, kGgmlF32, f32_le(std::vector<float>(32, 1)));
  w.tensor("blk.0.ffn_norm.weight", {32}, kGgmlF32, f32_le(std::vector<float>(32, 1)));
  w.tensor("blk.0.attn_q.weight", {32, 32}, kGgmlQ8_0, q8(32, 32));
  w.tensor("blk.0.attn_k.weight", {32, 16}, kGgmlF16, f16(512));
  w.tensor("blk.0.attn_v.weight", {32, 16}, kGgmlF16, f16(512));
  w.tensor("blk.0.attn_output.weight", {32, 32}, kGgmlQ8_0, q8(32, 32));
  w.tensor("blk.0.ffn_gate.weight", {32, 64}, kGgmlQ8_0, q8(64, 32));
  w.tensor("blk.0.ffn_up.weight", {32, 64}, kGgmlQ8_0, q8(64, 32));
  w.tensor("blk.0.ffn_down.weight", {64, 32}, kGgmlQ8_0, q8(32, 64));
  return w.image(layout);
}

TEST(GgufFuzz, SeedLoads) {
  GgufLayout l;
  const auto img = seed_image(&l);
  auto f = GgufFile::view(img.data(), img.size(), "seed.gguf");
  const ModelConfig c = gguf_model_config(*f);
  EXPECT_EQ(c.vocab_size, 8);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(load_gguf_weights(c, f, std::nullopt).layers.size(), 1u);
  EXPECT_TRUE(read_gguf_vocab(*f));
}

TEST(GgufFuzz, MutatedImagesNeverCrash) {
  GgufLayout l;
  const std::vector<uint8_t> seed = seed_image(&l);
  std::vector<size_t> u64_fields = {l.tensor_count, l.kv_count}, u32_fields = {l.version};
  for (size_t p : l.kv_key) u64_fields.push_back(p);
  for (size_t p : l.kv_type) u32_fields.push_back(p);
  for (size_t i = 0; i < l.t_name.size(); ++i) {
    u64_fields.insert(u64_fields.end(), {l.t_name[i], l.t_dims[i], l.t_offset[i]});
    u32_fields.insert(u32_fields.end(), {l.t_ndims[i], l.t_type[i]});
  }
  const uint64_t numbers[] = {0, 1, 2, 3, 7, 8, 16, 31, 32, 33, 64, 100, 255, 256, 4096, 65535, 1u << 20, 0x7fffffff,
                              0xffffffff, uint64_t(1) << 32, uint64_t(1) << 40, uint64_t(1) << 62, INT64_MAX,
                              uint64_t(INT64_MAX) + 1, UINT64_MAX};
  std::mt19937_64 rng(20250117);
  auto pick = [&](uint64_t n) { return n ? rng() % n : 0; };
  const size_t header_end = l.data;
  int parsed = 0, loaded = 0, rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> img = seed;
    const int kind = int(pick(6));
    for (int r = 0, rounds = 1 + int(pick(3)); r < rounds; ++r) {
      switch (kind) {
        case 0:  // bit flips, mostly in the header
          for (int i = 0; i < 1 + int(pick(4)); ++i) {
            const size_t at = pick(std::min(img.size(), header_end));
            if (at < img.size()) img[at] ^= uint8_t(1u << pick(8));
          }
          break;
        case 1:  // truncation
          img.resize(pick(img.size() + 1));
          break;
        case 2: {  // a lying u64: a count, a length, a dim or an offset
          const size_t at = u64_fields[pick(u64_fields.size())];
          if (at + 8 <= img.size()) patch<uint64_t>(img, at, numbers[pick(std::size(numbers))]);
          break;
        }
        case 3: {  // a lying u32: the version, a value type, n_dims or a tensor type
          const size_t at = u32_fields[pick(u32_fields.size())];
          if (at + 4 <= img.size()) patch<uint32_t>(img, at, uint32_t(pick(2) ? pick(45) : numbers[pick(std::size(numbers))]));
          break;
        }
        case 4:  // random bytes overwrite a window of the header
          for (size_t i = pick(header_end), e = std::min(img.size(), i + 1 + pick(8)); i < e; ++i) img[i] = uint8_t(rng());
          break;
        case 5:  // a small value written over a dim (shapes that disagree with the metadata)
          if (const size_t at = l.t_dims[pick(l.t_dims.size())]; at + 8 <= img.size())
            patch<uint64_t>(img, at, 16 * (1 + pick(4)));
          break;
      }
    }
    fuzz_gguf(img.data(), img.size());
    try {
      auto f = GgufFile::view(img.data(), img.size(), "m.gguf");
      ++parsed;
      const ModelConfig c = gguf_model_config(*f);
      (void)load_gguf_weights(c, f, std::nullopt);
      (void)read_gguf_vocab(*f);
      ++loaded;
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find("'m.gguf'"), std::string::npos) << e.what();
    }
  }
  // Every outcome must be common, or the mutations are not exercising the code.
  EXPECT_GT(parsed, 200);
  EXPECT_GT(loaded, 100);
  EXPECT_GT(rejected, 1000);
  std::printf("[ fuzz ] 4000 mutated GGUF images: %d parsed (%d loaded as a model), %d rejected with pagoda::Error\n",
              parsed, loaded, rejected);
}

}  // namespace
}  // namespace pagoda::test
