// `pagoda generate` through the binary: the stories260K golden text, the reference models' greedy tokens,
// the --output-json contract, streaming, and errors.
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "pagoda/model/builtin_models.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
using test::run_pagoda;
using test::test_data_dir;

Json load_json(const std::string& path) {
  std::ifstream in(path);
  return Json::parse(in);
}

std::string join_ids(const Json& ids) {
  std::string s;
  for (const auto& x : ids) s += (s.empty() ? "" : ",") + std::to_string(x.get<int>());
  return s;
}

// The acceptance test of the CPU path: greedy from BOS reproduces the published text exactly.
TEST(GenerateCli, Stories260KGoldenText) {
  std::string dir = test_data_dir() + "/models/stories260K";
  Json golden = load_json(dir + "/golden.json");
  auto r = run_pagoda("generate --model " + dir + "/hf --prompt '' --temperature 0 --max-tokens 256");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out, golden["greedy"]["text"].get<std::string>() + "\n");  // streamed text, then a newline
  EXPECT_THAT(r.err, testing::HasSubstr("Using CPU_ATTN attention backend out of potential backends: ['CPU_ATTN']."));
  EXPECT_THAT(r.err, testing::HasSubstr("Prompt tokens: 1, generated tokens: 256 (length)"));
  // The same through --output-json, with the token ids.
  r = run_pagoda("generate --model " + dir + "/hf --prompt '' --temperature 0 --max-tokens 256 --output-json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["text"], golden["greedy"]["text"]);
  EXPECT_EQ(j["prompt_token_ids"], Json::parse("[1]"));
  EXPECT_EQ(j["token_ids"], golden["hf_reference"]["greedy_token_ids"]);
}

// fp32 greedy continuations of the reference models, through the CLI (weights upcast from bf16).
TEST(GenerateCli, ReferenceModelsGreedyFloat32) {
  for (const char* model : {"qwen3-tiny", "llama-tiny", "qwen2-tiny"}) {
    std::string dir = test_data_dir() + "/reference/" + model;
    Json ref = load_json(dir + "/reference.json");
    for (const auto& p : ref["prompts"]) {
      auto r = run_pagoda("generate --model " + dir + " --dtype float32 --temperature 0 --ignore-eos --max-tokens " +
                          std::to_string(p["float32"]["greedy"].size()) + " --output-json --prompt-token-ids " +
                          join_ids(p["input_ids"]));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      Json j = Json::parse(r.out);
      EXPECT_EQ(j["token_ids"], p["float32"]["greedy"]) << model << " " << p["name"];
      EXPECT_EQ(j["prompt_token_ids"], p["input_ids"]);
    }
  }
}

TEST(GenerateCli, OutputJsonLogprobs) {
  std::string dir = test_data_dir() + "/reference/qwen3-tiny";
  auto r = run_pagoda("generate --model " + dir + " --dtype float32 --temperature 0 --max-tokens 4 --logprobs 3 "
                      "--output-json --prompt-token-ids 1,2,3");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_EQ(j["logprobs"].size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    const auto& pos = j["logprobs"][i];
    ASSERT_EQ(pos.size(), 3u);
    EXPECT_EQ(pos[0]["token_id"], j["token_ids"][i]);  // greedy: the top logprob is the chosen token
    EXPECT_LE(pos[1]["logprob"].get<double>(), pos[0]["logprob"].get<double>());
    EXPECT_LT(pos[0]["logprob"].get<double>(), 0.0);
  }
  // Without --logprobs the key is absent; the stdout holds exactly one JSON object.
  r = run_pagoda("generate --model " + dir + " --max-tokens 2 --output-json --prompt-token-ids 5");
  j = Json::parse(r.out);
  EXPECT_FALSE(j.contains("logprobs"));
  EXPECT_EQ(j["token_ids"].size(), 2u);
}

TEST(GenerateCli, SeededSamplingIsReproducible) {
  std::string dir = test_data_dir() + "/models/stories260K/hf";
  std::string cmd = "generate --model " + dir + " --prompt 'Once upon' --temperature 1.0 --top-p 0.9 --seed 7 --max-tokens 40 --output-json";
  auto a = run_pagoda(cmd), b = run_pagoda(cmd);
  ASSERT_EQ(a.exit_code, 0) << a.err;
  EXPECT_EQ(Json::parse(a.out)["token_ids"], Json::parse(b.out)["token_ids"]);
  auto c = run_pagoda("generate --model " + dir + " --prompt 'Once upon' --temperature 1.0 --top-p 0.9 --seed 8 --max-tokens 40 --output-json");
  EXPECT_NE(Json::parse(a.out)["token_ids"], Json::parse(c.out)["token_ids"]);
}

TEST(GenerateCli, StopStringsAndMaxTokens) {
  std::string dir = test_data_dir() + "/models/stories260K/hf";
  auto r = run_pagoda("generate --model " + dir + " --prompt '' --temperature 0 --max-tokens 256 --stop 'Lily' --output-json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["text"], "Once upon a time, there was a little girl named ");
  EXPECT_EQ(j["finish_reason"], "stop");
  r = run_pagoda("generate --model " + dir + " --prompt '' --temperature 0 --max-tokens 5 --output-json");
  j = Json::parse(r.out);
  EXPECT_EQ(j["token_ids"].size(), 5u);
  EXPECT_EQ(j["finish_reason"], "length");
}

TEST(GenerateCli, DummyTinyMainJob) {
  auto r = run_pagoda("generate --model dummy:tiny --max-tokens 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("model=dummy:tiny, architecture=Qwen3ForCausalLM"));
  EXPECT_THAT(r.err, testing::HasSubstr("generated tokens: 8"));
  r = run_pagoda("generate --model dummy:tiny --max-tokens 3 --output-json --prompt 'hi'");
  Json j = Json::parse(r.out);
  EXPECT_EQ(j["prompt_token_ids"], Json::parse("[1, 107, 108]"));  // <s>, then the bytes 'h' 'i' (+3)
}

// The default model is the built-in SmolLM2-135M-Instruct (Q4_1 GGUF): with no --model and no prompt it is
// asked a question as a chat. Its greedy answer was checked against llama.cpp on the same file and against
// tests/python/gguf_reference.py (float32 and with pagoda's roundings emulated), whose every step leads by
// more than 0.85 nats: "The capital of Japan is Tokyo." then <|im_end|>.
TEST(GenerateCli, BuiltinModelAnswersAsAChat) {
  if (!std::filesystem::exists(model_cache_dir() / kDefaultModelFile))
    GTEST_SKIP() << "the built-in model is not in the model cache: run scripts/fetch-models.sh";
  auto r = run_pagoda("generate --temperature 0 --output-json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("SmolLM2-135M-Instruct.Q4_1.gguf, architecture=LlamaForCausalLM"));
  Json j = Json::parse(r.out);
  // The chat template's system turn, then the question, then the assistant's turn (ids of SmolLM2's vocabulary).
  EXPECT_EQ(j["prompt_token_ids"], Json::parse("[1, 9690, 198, 2683, 359, 253, 5356, 5646, 11173, 3365, 3511, 308, 34519, 28, "
                                               "7018, 411, 407, 19712, 8182, 2, 198, 1, 4093, 198, 1780, 314, 260, 3575, 282, "
                                               "3085, 47, 2, 198, 1, 520, 9531, 198]"));
  EXPECT_EQ(j["token_ids"], Json::parse("[504, 3575, 282, 3085, 314, 19081, 30, 2]"));
  EXPECT_EQ(j["text"], "The capital of Japan is Tokyo.");
  EXPECT_EQ(j["finish_reason"], "stop");
  // --no-chat sends the text as it is; --chat with token ids is refused.
  r = run_pagoda("generate --no-chat --prompt 'The capital of Japan is' --temperature 0 --max-tokens 2 --output-json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(Json::parse(r.out)["prompt_token_ids"], Json::parse("[504, 3575, 282, 3085, 314]"));
  r = run_pagoda("generate --chat --prompt-token-ids 1,2");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("--chat renders a text prompt"));
}

TEST(GenerateCli, MissingBuiltinModelSaysHowToFetchIt) {
  auto r = run_pagoda("generate --max-tokens 1", "PAGODA_MODEL_CACHE=/nonexistent/pagoda-models ");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("the built-in model smollm2:135m is not downloaded"));
  EXPECT_THAT(r.err, testing::HasSubstr("scripts/fetch-models.sh"));
}

// --cpu-threads sets the CPU forward pass's threads (results do not depend on it); negative counts are refused.
// --tokenizer names a folder that must hold a tokenizer.json.
TEST(GenerateCli, CpuThreadsAndTokenizerOptions) {
  const std::string data = test_data_dir();
  const std::string common = " --model " + data + "/models/stories260K/hf --prompt '' --temperature 0 --max-tokens 16 --output-json";
  auto one = run_pagoda("generate --cpu-threads 1" + common), two = run_pagoda("generate --cpu-threads 2" + common);
  ASSERT_EQ(one.exit_code, 0) << one.err;
  ASSERT_EQ(two.exit_code, 0) << two.err;
  EXPECT_EQ(Json::parse(one.out)["token_ids"], Json::parse(two.out)["token_ids"]);
  auto r = run_pagoda("generate --model dummy:tiny --cpu-threads -1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("--cpu-threads must be >= 0, got -1"));
  r = run_pagoda("generate --model dummy:tiny --max-tokens 1 --tokenizer " + data + "/reference/qwen3-tiny");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("no tokenizer.json in"));
  // A GGUF model with another tokenizer: the stories260K folder's replaces the file's vocabulary.
  if (std::filesystem::exists(model_cache_dir() / kDefaultModelFile)) {
    r = run_pagoda("generate --no-chat --prompt 'Once' --max-tokens 1 --output-json --tokenizer " + data + "/models/stories260K/hf");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(Json::parse(r.out)["prompt_token_ids"], Json::parse(run_pagoda("generate --model " + data +
              "/models/stories260K/hf --prompt 'Once' --max-tokens 1 --output-json").out)["prompt_token_ids"]);
  }
}

TEST(GenerateCli, Errors) {
  std::string data = test_data_dir();
  auto r = run_pagoda("generate --model /nonexistent/model-dir --max-tokens 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, testing::HasSubstr("/nonexistent/model-dir"));
  r = run_pagoda("generate --prompt-token-ids 1,x");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("invalid token id 'x'"));
  r = run_pagoda("generate --model dummy:tiny --prompt-token-ids 100000 --max-tokens 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, testing::HasSubstr("outside the vocabulary"));
  r = run_pagoda("generate --model " + data + "/models/stories260K/hf --prompt-file /nonexistent.txt");
  EXPECT_EQ(r.exit_code, 2);
  r = run_pagoda("generate --prompt a --prompt-token-ids 1");
  EXPECT_EQ(r.exit_code, 2);
  r = run_pagoda("generate --temperature -1");
  EXPECT_EQ(r.exit_code, 2);
  r = run_pagoda("generate --model " + data + "/models/stories260K/hf --max-model-len 8 --prompt 'Once upon a time there was a big dog'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, testing::HasSubstr("maximum context"));
  // stories260K has 5 layers: layers 0, 1, 3, 4 are TurboQuant boundary layers, layer 2 is not; forcing CPU_ATTN
  // makes layer 2 fail CPU_ATTN's construction check (spec §6.4).
  r = run_pagoda("generate --model " + data + "/models/stories260K/hf --kv-cache-dtype turboquant_k8v4 "
                 "--attention-backend CPU_ATTN --max-tokens 1");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, testing::HasSubstr("CPU_ATTN does not support turboquant_k8v4 kv-cache."));
  // dummy:tiny has 4 layers, all of them boundary layers: it runs with an uncompressed cache.
  r = run_pagoda("generate --model dummy:tiny --kv-cache-dtype turboquant_k8v4 --max-tokens 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_pagoda("generate --device cuda --max-tokens 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, testing::HasSubstr("--device cuda"));
}

// A TurboQuant cache on the CPU: stories260K's 5 layers keep boundary layers 0, 1, 3, 4 on CPU_ATTN (bfloat16)
// and run layer 2 on TURBOQUANT. Startup reports both selections and the capacity (from the slot of spec §3.7:
// head 8, 4 KV heads); greedy decoding follows the golden text for its first tokens (32 with FP8 keys, 16 with
// 3/4-bit keys of head size 8), the goldens of this model checked when the runner was written.
TEST(GenerateCli, TurboQuantOnTheCpu) {
  std::string dir = test_data_dir() + "/models/stories260K";
  const Json golden = load_json(dir + "/golden.json")["hf_reference"]["greedy_token_ids"];
  struct Preset {
    const char* name;
    int key_bits, value_bits;
    size_t golden_prefix;
  };
  for (const Preset& p : {Preset{"turboquant_k8v4", 8, 4, 32}, Preset{"turboquant_4bit_nc", 4, 4, 16},
                          Preset{"turboquant_k3v4_nc", 3, 4, 16}, Preset{"turboquant_3bit_nc", 3, 3, 16}}) {
    auto r = run_pagoda("generate --device cpu --model " + dir + "/hf --kv-cache-dtype " + p.name +
                        " --prompt '' --temperature 0 --max-tokens 64 --num-gpu-blocks-override 4 --output-json");
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_THAT(r.err, testing::HasSubstr("Using CPU_ATTN attention backend out of potential backends: ['CPU_ATTN']."));
    EXPECT_THAT(r.err, testing::HasSubstr("Using TURBOQUANT attention backend out of potential backends: ['TURBOQUANT']."));
    // Bytes per token: 4 boundary layers of 4 KV heads x (K + V of 8 bfloat16), 1 layer of 4 slots.
    const int key = p.key_bits == 8 ? 8 : (8 * p.key_bits + 7) / 8 + 2, value = (8 * p.value_bits + 7) / 8 + 4;
    const int slot = (key + value + 1) / 2 * 2;
    const int per_token = 4 * 4 * 32 + 4 * slot, bf16_per_token = 5 * 4 * 32;
    char expect[256];
    std::snprintf(expect, sizeof expect, "CPU KV cache: 4 blocks of 128 tokens (512 tokens, %.2f KiB; %s on 1 of 5 "
                  "layers: %.2fx the tokens of a bfloat16 cache)", 512.0 * per_token / 1024, p.name,
                  double(bf16_per_token) / per_token);
    EXPECT_THAT(r.err, testing::HasSubstr(expect));
    const Json ids = Json::parse(r.out)["token_ids"];
    ASSERT_EQ(ids.size(), 64u);
    for (size_t i = 0; i < p.golden_prefix; ++i) EXPECT_EQ(ids[i], golden[i]) << p.name << " token " << i;
  }
  // The built-in SmolLM2-135M (30 layers, 26 of them TurboQuant) still answers the question.
  if (!std::filesystem::exists(model_cache_dir() / kDefaultModelFile)) return;
  auto r = run_pagoda("generate --device cpu --kv-cache-dtype turboquant_k3v4_nc --temperature 0 --max-tokens 8 "
                      "--num-gpu-blocks-override 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, testing::StartsWith("The capital of Japan is Tokyo"));
  EXPECT_THAT(r.err, testing::HasSubstr("turboquant_k3v4_nc on 26 of 30 layers: 2.91x the tokens of a bfloat16 cache"));
}

// A forced FLEX_ATTENTION on the CPU (docs/architecture.md, "Where pagoda goes beyond the spec"): its CPU runner
// serves every layer; greedy decoding reproduces stories260K's golden text and the reference models' float32
// continuations, as CPU_ATTN does. An fp8 cache is not one of its KV dtypes: startup stops with the runner's error.
TEST(GenerateCli, FlexAttentionOnTheCpu) {
  std::string dir = test_data_dir() + "/models/stories260K";
  Json golden = load_json(dir + "/golden.json");
  auto r = run_pagoda("generate --model " + dir + "/hf --attention-backend FLEX_ATTENTION --prompt '' --temperature 0 "
                      "--max-tokens 256 --output-json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("Using FLEX_ATTENTION attention backend out of potential backends: ['FLEX_ATTENTION']."));
  EXPECT_THAT(r.err, testing::Not(testing::HasSubstr("CPU_ATTN")));
  EXPECT_EQ(Json::parse(r.out)["token_ids"], golden["hf_reference"]["greedy_token_ids"]);
  for (const char* model : {"qwen3-tiny", "llama-tiny", "qwen2-tiny"}) {
    std::string mdir = test_data_dir() + "/reference/" + model;
    Json ref = load_json(mdir + "/reference.json");
    for (const auto& p : ref["prompts"]) {
      r = run_pagoda("generate --model " + mdir + " --attention-backend FLEX_ATTENTION --dtype float32 --temperature 0 "
                     "--ignore-eos --max-tokens " + std::to_string(p["float32"]["greedy"].size()) +
                     " --output-json --prompt-token-ids " + join_ids(p["input_ids"]));
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(Json::parse(r.out)["token_ids"], p["float32"]["greedy"]) << model << " " << p["name"];
    }
  }
  r = run_pagoda("generate --model " + dir + "/hf --attention-backend FLEX_ATTENTION --kv-cache-dtype fp8 --max-tokens 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, testing::HasSubstr("is not supported by FLEX_ATTENTION"));
}

// A forced FLASHINFER on the CPU (docs/architecture.md): its CPU runner executes its plan over NHD pages of
// any size; greedy decoding reproduces stories260K's golden text and the reference models' float32
// continuations, as CPU_ATTN does, with cascade on or off, at block size 8 or 128 and in HND.
TEST(GenerateCli, FlashInferOnTheCpu) {
  std::string dir = test_data_dir() + "/models/stories260K";
  Json golden = load_json(dir + "/golden.json");
  auto r = run_pagoda("generate --model " + dir + "/hf --attention-backend FLASHINFER --block-size 8 --prompt '' "
                      "--temperature 0 --max-tokens 256 --output-json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("Using FLASHINFER attention backend out of potential backends: ['FLASHINFER']."));
  EXPECT_THAT(r.err, testing::Not(testing::HasSubstr("CPU_ATTN")));
  EXPECT_EQ(Json::parse(r.out)["token_ids"], golden["hf_reference"]["greedy_token_ids"]);
  for (const char* model : {"qwen3-tiny", "llama-tiny", "qwen2-tiny"}) {
    std::string mdir = test_data_dir() + "/reference/" + model;
    Json ref = load_json(mdir + "/reference.json");
    int variant = 0;
    for (const auto& p : ref["prompts"]) {
      const char* extra[] = {"", " --block-size 8 -ac.use_cascade_attention true", " --block-size 1"};
      r = run_pagoda("generate --model " + mdir + " --attention-backend FLASHINFER --dtype float32 --temperature 0 "
                     "--ignore-eos --max-tokens " + std::to_string(p["float32"]["greedy"].size()) +
                     " --output-json --prompt-token-ids " + join_ids(p["input_ids"]) + extra[variant++ % 3]);
      ASSERT_EQ(r.exit_code, 0) << r.err;
      EXPECT_EQ(Json::parse(r.out)["token_ids"], p["float32"]["greedy"]) << model << " " << p["name"];
    }
  }
  r = run_pagoda("generate --model " + dir + "/hf --attention-backend FLASHINFER -ac.use_cascade_attention true "
                 "--max-tokens 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  r = run_pagoda("generate --model " + dir + "/hf -ac.use_cascade_attention true --max-tokens 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.err, testing::HasSubstr("use_cascade_attention is served by the FLASHINFER attention backend only; CPU_ATTN"));
}

// --kv-cache-dtype-skip-layers keeps the named layers' cache unquantized: llama-tiny (3 layers, head size 32) with
// an fp8 cache on layers 0 and 2 only, or on none; the option needs a quantized dtype and layers the model has.
TEST(GenerateCli, KvCacheDtypeSkipLayers) {
  const std::string model = " --model " + test_data_dir() + "/reference/llama-tiny --prompt-token-ids 1,2,3 "
                            "--max-tokens 2 --num-gpu-blocks-override 4";
  // 512 tokens x 4 KV heads x (K + V of 32 elements): 128 KiB per layer in fp8, 256 KiB in bfloat16.
  auto r = run_pagoda("generate --kv-cache-dtype fp8 --kv-cache-dtype-skip-layers 1" + model);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("CPU KV cache: 4 blocks of 128 tokens (512 tokens, 512.00 KiB; fp8 on 2 of 3 layers: "
                                        "1.50x the tokens of a bfloat16 cache)"));
  r = run_pagoda("generate --kv-cache-dtype fp8 --kv-cache-dtype-skip-layers=0,1,2" + model);
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("CPU KV cache: 4 blocks of 128 tokens (512 tokens, 768.00 KiB, bfloat16)"));
  r = run_pagoda("generate --kv-cache-dtype-skip-layers 1" + model);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("the KV cache dtype auto is not quantized"));
  r = run_pagoda("generate --kv-cache-dtype fp8_e5m2 --kv-cache-dtype-skip-layers 3" + model);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("--kv-cache-dtype-skip-layers: layer 3 is not a layer of the model (it has 3 layers: 0-2)"));
  r = run_pagoda("generate --kv-cache-dtype fp8 --kv-cache-dtype-skip-layers 1,first" + model);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_THAT(r.err, testing::HasSubstr("argument --kv-cache-dtype-skip-layers: invalid item 'first'"));
}

// A checkpoint that declares a KV-cache quantization scheme gets an fp8 cache; its scales are not loaded,
// which startup must say (and an explicit 16-bit cache needs no scales, so no warning then).
TEST(GenerateCli, KvCacheSchemeWithoutLoadedScalesWarns) {
  namespace fs = std::filesystem;
  const fs::path src = test_data_dir() + "/reference/llama-tiny";  // head size 32: the CPU's fp8 cache takes it
  const fs::path dir = fs::temp_directory_path() / ("pagoda_kv_scheme_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::copy(src, dir, fs::copy_options::recursive);
  Json cfg = load_json((dir / "config.json").string());
  cfg["quantization_config"] = Json::parse(R"({"quant_method": "compressed-tensors",
      "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "attn_head"}})");
  std::ofstream((dir / "config.json").string()) << cfg.dump(2);
  auto r = run_pagoda("generate --model " + dir.string() + " --prompt-token-ids 1,2,3 --temperature 0 --max-tokens 4");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, testing::HasSubstr("kv_cache_dtype=fp8"));
  EXPECT_THAT(r.err, testing::HasSubstr("holds no KV-cache scales (model.layers.{i}.self_attn.k_scale / v_scale): "
                                        "every layer uses k_scale = v_scale = 1.0, as vLLM does"));
  r = run_pagoda("generate --model " + dir.string() + " --kv-cache-dtype bfloat16 --prompt-token-ids 1,2,3 --max-tokens 1");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.err, testing::Not(testing::HasSubstr("KV-cache scales")));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace pagoda

namespace pagoda {
namespace {

TEST(BenchCli, LatencyAndThroughputRunAndReport) {
  auto r = test::run_pagoda("bench latency --model dummy:tiny --batch-size 3 --input-len 8 --output-len 6 --num-iters 2 --num-iters-warmup 1");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, testing::HasSubstr("model dummy:tiny  batch 3  input 8  output 6"));
  EXPECT_THAT(r.out, testing::ContainsRegex("output tokens/s: [0-9]"));
  r = test::run_pagoda("bench throughput --model dummy:tiny --num-prompts 12 --input-len 9 --output-len 5 --random-range-ratio 0.5");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, testing::HasSubstr("requests 12"));
  EXPECT_THAT(r.out, testing::ContainsRegex("Throughput: [0-9.]+ requests/s"));
  r = test::run_pagoda("bench throughput --num-prompts 0");
  EXPECT_EQ(r.exit_code, 2);
  r = test::run_pagoda("bench nonsense");
  EXPECT_EQ(r.exit_code, 2);
}

}  // namespace
}  // namespace pagoda
