// The vocabulary hand-over (tokenizer.ggml.* into a GgufVocab) and load_model's detection of GGUF files.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gguf_tiny_model.h"
#include "pagoda/model/load_model.h"
#include "safetensors_writer.h"

namespace pagoda::test {
namespace {

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
