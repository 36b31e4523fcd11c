// `pagoda backends select` and `pagoda backends list` through the binary: the JSON contract of spec §11,
// exit statuses, log lines, config files and --model.
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"
#include "pagoda/core/strings.h"
#include "pagoda/model/builtin_models.h"

namespace pagoda {
namespace {

using Json = nlohmann::json;
using test::run_pagoda;

Json select_json(const std::string& args, int expected_exit, const std::string& env = "") {
  auto r = run_pagoda("backends select --json " + args, env);
  EXPECT_EQ(r.exit_code, expected_exit) << args << "\n" << r.out << r.err;
  try {
    return Json::parse(r.out);
  } catch (const std::exception& e) {
    ADD_FAILURE() << "stdout is not one JSON object: " << r.out;
    return Json::object();
  }
}

std::vector<std::string> strings(const Json& a) {
  std::vector<std::string> v;
  for (const auto& x : a) v.push_back(x.get<std::string>());
  return v;
}

TEST(BackendsSelect, DefaultH100) {
  Json j = select_json("", 0);
  EXPECT_EQ(j["device"], "cuda");
  EXPECT_EQ(j["device_capability"], "9.0");
  EXPECT_EQ(j["selected"], "FLASH_ATTN");
  EXPECT_EQ(strings(j["potential"]), (std::vector<std::string>{"FLASH_ATTN", "FLASHINFER", "TRITON_ATTN", "FLEX_ATTENTION"}));
  EXPECT_EQ(j["rejected"], Json::parse(R"({"TURBOQUANT": ["kv_cache_dtype not supported"]})"));
  EXPECT_TRUE(j["error"].is_null());
  EXPECT_EQ(j["flash_attn_version"], 3);
  EXPECT_EQ(j["kv_cache_layout"], "NHD");
  EXPECT_EQ(j["block_size"], 16);
  ASSERT_EQ(j["log"].size(), 3u);
  EXPECT_EQ(j["log"][0]["level"], "DEBUG");  // DEBUG included whatever the log level
  EXPECT_EQ(j["log"][1]["message"], "Using FLASH_ATTN attention backend out of potential backends: ['FLASH_ATTN', "
                                    "'FLASHINFER', 'TRITON_ATTN', 'FLEX_ATTENTION'].");
  EXPECT_EQ(j["log"][2]["message"], "Using FlashAttention version 3");
  // Key order of the contract.
  std::vector<std::string> keys;
  auto r = run_pagoda("backends select --json");
  for (const char* k : {"device", "device_capability", "selected", "potential", "rejected", "error", "flash_attn_version",
                        "kv_cache_layout", "block_size", "log"})
    keys.push_back(k);
  size_t pos = 0;
  for (const auto& k : keys) {
    size_t p = r.out.find("\"" + k + "\":");
    ASSERT_NE(p, std::string::npos) << k;
    EXPECT_GT(p + 1, pos) << k;
    pos = p;
  }
}

TEST(BackendsSelect, SpecExampleL4Fp8) {
  Json j = select_json("--device-capability 8.9 --kv-cache-dtype fp8", 0);
  EXPECT_EQ(j["selected"], "FLASHINFER");
  EXPECT_EQ(strings(j["potential"]), (std::vector<std::string>{"FLASHINFER", "TRITON_ATTN"}));
  EXPECT_EQ(j["rejected"], Json::parse(R"({"FLASH_ATTN": ["kv_cache_dtype not supported", "FP8 KV cache requires FA3 on SM90 or FA4 on SM100"],
      "FLEX_ATTENTION": ["kv_cache_dtype not supported"], "TURBOQUANT": ["kv_cache_dtype not supported"]})"));
  EXPECT_TRUE(j["flash_attn_version"].is_null());
}

TEST(BackendsSelect, CompleteLogOfSm100) {
  Json j = select_json("--device-capability 10.0", 0);
  EXPECT_EQ(j["log"], Json::parse(R"([
    {"level": "DEBUG", "message": "Some attention backends are not valid for cuda with AttentionSelectorConfig(head_size=128, dtype=bfloat16, kv_cache_dtype=auto, block_size=None, has_sink=False, use_per_head_quant_scales=False, attn_type=decoder, has_sliding_window=False, use_non_causal=False, use_batch_invariant=False). Reasons: {TURBOQUANT: [kv_cache_dtype not supported]}."},
    {"level": "INFO", "message": "Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'FLASH_ATTN', 'TRITON_ATTN', 'FLEX_ATTENTION']."},
    {"level": "INFO", "message": "Using HND KV cache layout for FLASHINFER backend."}])"));
  EXPECT_EQ(j["kv_cache_layout"], "HND");
}

TEST(BackendsSelect, ForcedBackends) {
  Json j = select_json("--device-capability 8.9 --kv-cache-dtype fp8 --attention-backend TRITON_ATTN", 0);
  EXPECT_EQ(j["selected"], "TRITON_ATTN");
  EXPECT_EQ(strings(j["potential"]), std::vector<std::string>{"TRITON_ATTN"});
  EXPECT_EQ(j["rejected"], Json::object());
  EXPECT_EQ(j["log"][0]["message"], "Using TRITON_ATTN backend.");
  j = select_json("--attention-backend FLEX_ATTENTION --kv-cache-dtype fp8", 1);
  EXPECT_TRUE(j["selected"].is_null());
  EXPECT_EQ(j["potential"], Json::array());
  EXPECT_EQ(j["rejected"], Json::parse(R"({"FLEX_ATTENTION": ["kv_cache_dtype not supported"]})"));
  EXPECT_EQ(j["error"], "Selected backend FLEX_ATTENTION is not valid for this configuration. Reason: ['kv_cache_dtype not supported']");
}

TEST(BackendsSelect, BlockSizeWarningAndNoValidBackend) {
  Json j = select_json("--block-size 8", 0);
  EXPECT_EQ(j["selected"], "FLASHINFER");
  EXPECT_EQ(j["block_size"], 8);
  EXPECT_EQ(j["log"][1], Json::parse(R"({"level": "WARNING", "message": "--block-size 8 precluded higher-priority backend(s) FLASH_ATTN. Using FLASHINFER instead, which may result in reduced performance. Consider removing --block-size to auto-select the optimal block size."})"));
  j = select_json("--block-size 8 --device-capability 7.5 --dtype float16", 1);
  EXPECT_THAT(j["error"].get<std::string>(), testing::StartsWith("No valid attention backend found for cuda with AttentionSelectorConfig(head_size=128, dtype=float16"));
  EXPECT_EQ(j["rejected"].size(), 5u);
}

TEST(BackendsSelect, T4AndConstructionErrors) {
  Json j = select_json("--device-capability 7.5 --dtype float16", 0);
  EXPECT_EQ(j["selected"], "TRITON_ATTN");
  // --dtype auto on a T4: the bfloat16 default becomes float16.
  j = select_json("--device-capability 7.5", 0);
  EXPECT_THAT(j["log"][0]["message"].get<std::string>(), testing::HasSubstr("dtype=float16"));
  j = select_json("--device-capability 7.5 --dtype float16 --kv-cache-dtype fp8", 1);
  EXPECT_TRUE(j["selected"].is_null());
  EXPECT_EQ(strings(j["potential"]), std::vector<std::string>{"TRITON_ATTN"});
  EXPECT_EQ(j["error"], "FP8 KV cache is not supported by the Triton attention backend on CUDA device (compute capability "
                        "7.5); native FP8 (fp8e4nv) requires SM89+. Re-run with --kv-cache-dtype float16.");
  j = select_json("-ac.flash_attn_version 4", 1);
  EXPECT_EQ(j["error"], "FlashAttention version 4 cannot be used on this device: FA4 is unavailable due to: pagoda was built without FlashAttention 4");
  EXPECT_TRUE(j["flash_attn_version"].is_null());
}

TEST(BackendsSelect, Fp32HeadSizeAndTurboQuant) {
  Json j = select_json("--dtype float32", 0);
  EXPECT_EQ(j["selected"], "TRITON_ATTN");
  j = select_json("--dtype float32 --head-size 16", 0);
  EXPECT_EQ(j["selected"], "FLEX_ATTENTION");
  j = select_json("--head-size 512", 0);
  EXPECT_EQ(j["selected"], "FLASHINFER");
  j = select_json("--kv-cache-dtype turboquant_k8v4", 0);
  EXPECT_EQ(j["selected"], "TURBOQUANT");
  EXPECT_EQ(strings(j["potential"]), std::vector<std::string>{"TURBOQUANT"});
  EXPECT_EQ(j["log"][0]["level"], "WARNING");
  EXPECT_THAT(j["log"][0]["message"].get<std::string>(), testing::StartsWith("TurboQuant is not yet compatible with FlashAttention >= 3."));
}

TEST(BackendsSelect, Cpu) {
  Json j = select_json("--device cpu", 0);
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_TRUE(j["device_capability"].is_null());
  EXPECT_EQ(j["selected"], "CPU_ATTN");
  EXPECT_EQ(strings(j["potential"]), std::vector<std::string>{"CPU_ATTN"});
  EXPECT_EQ(j["rejected"], Json::object());
  EXPECT_EQ(j["kv_cache_layout"], "HND");
  EXPECT_EQ(j["block_size"], 128);
  EXPECT_EQ(j["log"], Json::parse(R"([{"level": "INFO", "message": "Using CPU_ATTN attention backend out of potential backends: ['CPU_ATTN']."},
                                      {"level": "INFO", "message": "Using HND KV cache layout for CPU_ATTN backend."}])"));
  j = select_json("--device cpu --attention-backend FLASH_ATTN", 0);
  EXPECT_EQ(j["log"][0]["message"], "Cannot use FLASH_ATTN backend on CPU.");
  j = select_json("--device cpu --block-size 48", 0);
  EXPECT_EQ(j["log"][0]["message"], "CPU backend prefers block_size is multiples of 32, otherwise the performance is not optimized.");
  j = select_json("--device cpu --device-capability 9.0", 2);
  EXPECT_EQ(j["error"], "--device-capability requires --device cuda");
}

TEST(BackendsSelect, ConfigurationErrorsExitTwoWithJson) {
  Json j = select_json("--kv-cache-dtype FP8", 2);
  EXPECT_THAT(j["error"].get<std::string>(), testing::StartsWith("Invalid kv_cache_dtype: FP8."));
  EXPECT_TRUE(j["selected"].is_null());
  EXPECT_EQ(j["potential"], Json::array());
  j = select_json("--attention-backend torch_sdpa", 2);
  EXPECT_EQ(j["error"], "Unknown attention backend: 'TORCH_SDPA'. Valid options are: FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, TURBOQUANT, CPU_ATTN");
  j = select_json("-ac.use_cudnn_prefill true", 2);
  EXPECT_EQ(j["error"], "1 validation error for AttentionConfig\nuse_cudnn_prefill\n  Extra inputs are not permitted");
  j = select_json("--attention-config '{bad'", 2);
  EXPECT_THAT(j["error"].get<std::string>(), testing::StartsWith("1 validation error for AttentionConfig\nattention_config\n  Invalid JSON: "));
  j = select_json("--bogus", 2);
  EXPECT_EQ(j["error"], "unrecognized arguments: --bogus");
  j = select_json("", 2, "PAGODA_KV_CACHE_LAYOUT=hnd ");
  EXPECT_EQ(j["error"], "Invalid value 'hnd' for PAGODA_KV_CACHE_LAYOUT. Valid options: ['NHD', 'HND'].");
  EXPECT_EQ(j["kv_cache_layout"], "NHD");
  j = select_json("", 0, "PAGODA_KV_CACHE_LAYOUT=HND ");
  EXPECT_EQ(j["kv_cache_layout"], "HND");
  EXPECT_EQ(j["log"].back()["message"], "`PAGODA_KV_CACHE_LAYOUT` environment variable detected. Setting KV cache layout to HND.");
  j = select_json("--device-capability nine", 2);
  j = select_json("--attention-backend FLASH_ATTN -ac.backend TRITON_ATTN", 2);
  EXPECT_EQ(j["error"], "attention_backend and attention_config.backend are mutually exclusive");
}

TEST(BackendsSelect, DuplicateWarningInLog) {
  Json j = select_json("--attention-config.use_non_causal true --attention-config.use_non_causal false --device-capability 10.0", 0);
  EXPECT_EQ(j["log"][0], Json::parse(R"({"level": "WARNING", "message": "Found duplicate keys --attention-config.use_non_causal"})"));
  EXPECT_EQ(j["selected"], "FLASHINFER");  // the last value (false) won
  j = select_json("--attention-config.use_non_causal true --device-capability 10.0", 0);
  EXPECT_EQ(j["selected"], "FLASH_ATTN");
  EXPECT_EQ(j["flash_attn_version"], 2);
}

TEST(BackendsSelect, BatchInvariantEnvAndFlag) {
  Json j = select_json("--device-capability 10.0 --batch-invariant", 0);
  EXPECT_EQ(j["selected"], "FLASH_ATTN");
  j = select_json("--device-capability 10.0", 0, "PAGODA_BATCH_INVARIANT=1 ");
  EXPECT_EQ(j["selected"], "FLASH_ATTN");
  EXPECT_EQ(j["rejected"]["FLASHINFER"], Json::parse(R"(["batch invariance not supported"])"));
}

TEST(BackendsSelect, ConfigFiles) {
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("pagoda_cli_cfg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "a.yaml") << "kv-cache-dtype: fp8\ndevice-capability: 8.9\n";
  std::ofstream(dir / "b.json") << R"({"attention_config": {"backend": "TRITON_ATTN"}})";
  Json j = select_json("--config " + (dir / "a.yaml").string(), 0);
  EXPECT_EQ(j["selected"], "FLASHINFER");
  j = select_json("--config " + (dir / "a.yaml").string() + " --json-config " + (dir / "b.json").string(), 0);
  EXPECT_EQ(j["selected"], "TRITON_ATTN");
  // The command line overrides the file (and the repeat is reported).
  j = select_json("--config " + (dir / "a.yaml").string() + " --kv-cache-dtype auto", 0);
  EXPECT_EQ(j["selected"], "FLASH_ATTN");
  EXPECT_EQ(j["log"][0]["message"], "Found duplicate keys --kv-cache-dtype");
  j = select_json("--config " + (dir / "b.json").string(), 2);
  EXPECT_EQ(j["error"], "Config file must be of a yaml/yml type. json supplied");
  fs::remove_all(dir);
}

TEST(BackendsSelect, ModelConfig) {
  std::string data = test::test_data_dir();
  // qwen3-tiny: head_dim 64, bf16 checkpoint.
  Json j = select_json("--model " + data + "/reference/qwen3-tiny", 0);
  EXPECT_THAT(j["log"][0]["message"].get<std::string>(), testing::HasSubstr("head_size=64, dtype=bfloat16"));
  // stories260K: head size 8, float32 checkpoint -> auto is bfloat16; FLASHINFER rejects head 8.
  j = select_json("--model " + data + "/models/stories260K/hf", 0);
  EXPECT_THAT(j["log"][0]["message"].get<std::string>(), testing::HasSubstr("head_size=8, dtype=bfloat16"));
  EXPECT_EQ(j["selected"], "FLASH_ATTN");
  EXPECT_EQ(j["rejected"]["FLASHINFER"], Json::parse(R"(["head_size not supported"])"));
  EXPECT_EQ(j["rejected"]["TRITON_ATTN"], Json::parse(R"(["head_size not supported"])"));
  // A Mistral-style config with a sliding window, and a checkpoint with a kv_cache_scheme.
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("pagoda_cli_model_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["MistralForCausalLM"], "hidden_size": 4096,
      "num_attention_heads": 32, "sliding_window": 4096, "torch_dtype": "float16",
      "quantization_config": {"kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "attn_head"}}})";
  j = select_json("--model " + dir.string(), 0);
  EXPECT_THAT(j["log"][0]["message"].get<std::string>(),
              testing::HasSubstr("head_size=128, dtype=float16, kv_cache_dtype=fp8, block_size=None, has_sink=False, "
                                 "use_per_head_quant_scales=True, attn_type=decoder, has_sliding_window=True"));
  EXPECT_EQ(j["selected"], "FLASH_ATTN");
  j = select_json("--model " + (dir / "missing").string(), 2);
  fs::remove_all(dir);
}

// Spec §3.7's slot of one (token, KV head), written out here from the spec's words: key = head_size bytes of
// FP8 (8-bit keys) or ceil(head_size * bits / 8) codes + a 2-byte norm; value = ceil(head_size * bits / 8) codes +
// 2-byte scale + 2-byte zero; the sum rounded up to even.
struct SpecPreset {
  const char* name;
  int key_bits, value_bits;
};
constexpr SpecPreset kSpecPresets[] = {{"turboquant_k8v4", 8, 4}, {"turboquant_4bit_nc", 4, 4},
                                       {"turboquant_k3v4_nc", 3, 4}, {"turboquant_3bit_nc", 3, 3}};
int spec_slot_bytes(const SpecPreset& p, int head) {
  const int key = p.key_bits == 8 ? head : (head * p.key_bits + 7) / 8 + 2;
  const int value = (head * p.value_bits + 7) / 8 + 4;
  return (key + value + 1) / 2 * 2;
}

// On the CPU a TurboQuant layer selects TURBOQUANT (pagoda's addition to §5.4), without a KV layout line; the
// capacity field gives its slot against bfloat16's 2 x head_size x 2 bytes.
TEST(BackendsSelect, CpuTurboQuant) {
  EXPECT_EQ(spec_slot_bytes(kSpecPresets[0], 128), 196);  // the spec's own figures for head 128
  EXPECT_EQ(spec_slot_bytes(kSpecPresets[1], 128), 134);
  EXPECT_EQ(spec_slot_bytes(kSpecPresets[2], 128), 118);
  EXPECT_EQ(spec_slot_bytes(kSpecPresets[3], 128), 102);
  Json j = select_json("--device cpu --kv-cache-dtype turboquant_k3v4_nc", 0);
  EXPECT_EQ(j["selected"], "TURBOQUANT");
  EXPECT_EQ(strings(j["potential"]), std::vector<std::string>{"TURBOQUANT"});
  EXPECT_EQ(j["rejected"], Json::object());
  EXPECT_EQ(j["block_size"], 128);
  ASSERT_EQ(j["log"].size(), 2u);
  EXPECT_THAT(j["log"][0]["message"].get<std::string>(), testing::StartsWith("TurboQuant is not yet compatible"));
  EXPECT_EQ(j["log"][1], Json::parse(R"({"level": "INFO", "message": "Using TURBOQUANT attention backend out of potential backends: ['TURBOQUANT']."})"));
  for (const auto& p : kSpecPresets) {
    for (int head : {64, 80, 128, 256}) {
      j = select_json(str_cat("--device cpu --head-size ", head, " --kv-cache-dtype ", p.name), 0);
      const Json& c = j["kv_cache_capacity"];
      EXPECT_EQ(c["kv_cache_dtype"], p.name);
      EXPECT_EQ(c["bytes_per_token_head"], spec_slot_bytes(p, head)) << p.name << " head " << head;
      EXPECT_EQ(c["bfloat16_bytes_per_token_head"], 4 * head);
      EXPECT_DOUBLE_EQ(c["tokens_vs_bfloat16"].get<double>(), 4.0 * head / spec_slot_bytes(p, head));
      EXPECT_TRUE(c["model"].is_null());  // no --model
    }
  }
  // Forced: CPU_ATTN keeps the spec's construction error; another backend logs the spec's line first.
  j = select_json("--device cpu --kv-cache-dtype turboquant_k3v4_nc --attention-backend CPU_ATTN", 1);
  EXPECT_EQ(j["error"], "CPU_ATTN does not support turboquant_k3v4_nc kv-cache.");
  EXPECT_TRUE(j["selected"].is_null());
  EXPECT_TRUE(j["kv_cache_capacity"].is_null());
  j = select_json("--device cpu --kv-cache-dtype turboquant_k8v4 --attention-backend FLASH_ATTN", 0);
  EXPECT_EQ(j["log"][1]["message"], "Cannot use FLASH_ATTN backend on CPU.");
  EXPECT_EQ(j["selected"], "TURBOQUANT");
  j = select_json("--device cpu --kv-cache-dtype turboquant_k8v4 --attention-backend TURBOQUANT", 0);
  EXPECT_EQ(j["selected"], "TURBOQUANT");
  EXPECT_EQ(j["log"].size(), 2u);  // no "Cannot use" line
  // An unquantized cache: the same field, 1x (2x fewer tokens for float32).
  j = select_json("--device cpu --dtype float32", 0);
  EXPECT_EQ(j["kv_cache_capacity"]["bytes_per_token_head"], 2 * 128 * 4);
  EXPECT_DOUBLE_EQ(j["kv_cache_capacity"]["tokens_vs_bfloat16"].get<double>(), 0.5);
  auto r = run_pagoda("backends select --device cpu --kv-cache-dtype turboquant_4bit_nc --head-size 64");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_THAT(r.out, testing::HasSubstr("1   TURBOQUANT      SELECTED"));
  EXPECT_THAT(r.out, testing::HasSubstr("KV cache slot:        70 bytes per token and KV head (turboquant_4bit_nc; "
                                        "bfloat16: 256): 3.66x the tokens of a bfloat16 cache"));
}

// --model takes a built-in name or a GGUF file (their config; no weights read) as well as a folder, and then
// the capacity covers the whole model: TurboQuant's boundary layers (n = min(2, L / 2) at each end) and the
// --kv-cache-dtype-skip-layers ones at bfloat16.
TEST(BackendsSelect, KvCapacityOfAModel) {
  // dummy:llama3-8b: 32 layers, 8 KV heads of 128.
  for (const char* device : {"--device cpu", "--device-capability 9.0"}) {
    for (const auto& p : kSpecPresets) {
      Json j = select_json(str_cat(device, " --model dummy:llama3-8b --kv-cache-dtype ", p.name), 0);
      EXPECT_EQ(j["selected"], "TURBOQUANT");
      const Json& m = j["kv_cache_capacity"]["model"];
      const int64_t slot = spec_slot_bytes(p, 128), bf16 = 4 * 128;
      EXPECT_EQ(m["num_layers"], 32);
      EXPECT_EQ(m["quantized_layers"], 28);
      EXPECT_EQ(m["bytes_per_token"], 8 * (4 * bf16 + 28 * slot)) << p.name;
      EXPECT_EQ(m["bfloat16_bytes_per_token"], 8 * 32 * bf16);
      EXPECT_DOUBLE_EQ(m["tokens_vs_bfloat16"].get<double>(), 32.0 * bf16 / (4 * bf16 + 28 * slot));
    }
  }
  auto r = run_pagoda("backends select --model dummy:llama3-8b --kv-cache-dtype turboquant_k3v4_nc");
  EXPECT_THAT(r.out, testing::HasSubstr("model KV cache:       42816 bytes per token (bfloat16: 131072); "
                                        "turboquant_k3v4_nc on 28 of 32 layers: 3.06x the tokens of a bfloat16 cache"));
  // fp8: every layer, 2x.
  Json j = select_json("--model dummy:llama3-8b --kv-cache-dtype fp8", 0);
  EXPECT_EQ(j["kv_cache_capacity"]["model"]["quantized_layers"], 32);
  EXPECT_DOUBLE_EQ(j["kv_cache_capacity"]["model"]["tokens_vs_bfloat16"].get<double>(), 2.0);
  // Skipped layers join the boundary layers; a layer the model lacks, or an unquantized cache, is refused.
  j = select_json("--device cpu --model dummy:llama3-8b --kv-cache-dtype turboquant_k8v4 --kv-cache-dtype-skip-layers 1,5,9", 0);
  EXPECT_EQ(j["kv_cache_capacity"]["model"]["quantized_layers"], 26);  // layer 1 is a boundary layer already
  j = select_json("--model dummy:llama3-8b --kv-cache-dtype fp8 --kv-cache-dtype-skip-layers 32", 2);
  EXPECT_EQ(j["error"], "--kv-cache-dtype-skip-layers: layer 32 is not a layer of the model (it has 32 layers: 0-31)");
  j = select_json("--kv-cache-dtype-skip-layers 0", 2);
  EXPECT_THAT(j["error"].get<std::string>(), testing::StartsWith("--kv-cache-dtype-skip-layers keeps some layers' KV "
                                                                 "cache unquantized, but the KV cache dtype auto is not quantized"));
  // A model folder: llama-tiny has 3 layers (n = 1: layers 0 and 2 keep bfloat16), 4 KV heads of 32.
  const std::string data = test::test_data_dir();
  j = select_json("--device cpu --model " + data + "/reference/llama-tiny --kv-cache-dtype turboquant_3bit_nc", 0);
  const int64_t tiny_slot = spec_slot_bytes(kSpecPresets[3], 32);
  EXPECT_EQ(j["kv_cache_capacity"]["model"]["quantized_layers"], 1);
  EXPECT_EQ(j["kv_cache_capacity"]["model"]["bytes_per_token"], 4 * (2 * 128 + tiny_slot));
  // sliding_window skips every sliding-window layer (a config whose layers 1 and 3 of 6 slide).
  namespace fs = std::filesystem;
  fs::path dir = fs::temp_directory_path() / ("pagoda_cli_sliding_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::ofstream(dir / "config.json") << R"({"architectures": ["Qwen2ForCausalLM"], "hidden_size": 256,
      "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 6, "sliding_window": 64,
      "use_sliding_window": true, "layer_types": ["full_attention", "sliding_attention", "full_attention",
      "sliding_attention", "full_attention", "full_attention"]})";
  j = select_json("--device cpu --model " + dir.string() + " --kv-cache-dtype turboquant_4bit_nc", 0);
  EXPECT_EQ(j["kv_cache_capacity"]["model"]["quantized_layers"], 2);  // layers 2 and 3
  j = select_json("--device cpu --model " + dir.string() + " --kv-cache-dtype turboquant_4bit_nc "
                  "--kv-cache-dtype-skip-layers sliding_window", 0);
  EXPECT_EQ(j["kv_cache_capacity"]["model"]["quantized_layers"], 1);  // layer 2
  // A config file's list is the option's list.
  std::ofstream(dir / "skip.yaml") << "kv_cache_dtype_skip_layers: [sliding_window, 2]\n";
  j = select_json("--device cpu --model " + dir.string() + " --kv-cache-dtype turboquant_4bit_nc --config " +
                  (dir / "skip.yaml").string(), 0);
  EXPECT_EQ(j["kv_cache_capacity"]["model"]["quantized_layers"], 0);
  fs::remove_all(dir);
}

// The built-in real model by name and as a GGUF file: SmolLM2-135M has 30 layers, 3 KV heads of 64.
TEST(BackendsSelect, KvCapacityOfTheBuiltinModel) {
  const std::string file = (model_cache_dir() / kDefaultModelFile).string();
  if (!std::filesystem::exists(file)) GTEST_SKIP() << "the built-in model is not in the model cache: run scripts/fetch-models.sh";
  for (const std::string& model : {std::string("smollm2:135m"), file}) {
    Json j = select_json("--device cpu --kv-cache-dtype turboquant_k3v4_nc --model " + model, 0);
    EXPECT_THAT(j["log"][1]["message"].get<std::string>(), testing::HasSubstr("Using TURBOQUANT"));
    const Json& m = j["kv_cache_capacity"]["model"];
    const int64_t slot = spec_slot_bytes(kSpecPresets[2], 64), bf16 = 4 * 64;
    EXPECT_EQ(j["kv_cache_capacity"]["bytes_per_token_head"], slot);
    EXPECT_EQ(m["num_layers"], 30);
    EXPECT_EQ(m["quantized_layers"], 26);
    EXPECT_EQ(m["bytes_per_token"], 3 * (4 * bf16 + 26 * slot));
    EXPECT_DOUBLE_EQ(m["tokens_vs_bfloat16"].get<double>(), 30.0 * bf16 / (4 * bf16 + 26 * slot));
  }
}

TEST(BackendsSelect, TableOutput) {
  auto r = run_pagoda("backends select --device-capability 8.9 --kv-cache-dtype fp8");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, testing::HasSubstr("FLASH_ATTN      rejected  kv_cache_dtype not supported; FP8 KV cache requires FA3 on SM90 or FA4 on SM100"));
  EXPECT_THAT(r.out, testing::HasSubstr("FLASHINFER      SELECTED"));
  EXPECT_THAT(r.err, testing::HasSubstr("] Using FLASHINFER attention backend out of potential backends: ['FLASHINFER', 'TRITON_ATTN']."));
  EXPECT_THAT(r.err, testing::Not(testing::HasSubstr("DEBUG")));  // the DEBUG line only at DEBUG level
  r = run_pagoda("backends select --log-level DEBUG");
  EXPECT_THAT(r.err, testing::ContainsRegex(R"(DEBUG [0-9][0-9]-[0-9][0-9] [0-9][0-9]:[0-9][0-9]:[0-9][0-9] \[selector\.cc:[0-9]+\] Some attention backends)"));
  r = run_pagoda("backends select", "PAGODA_LOGGING_LEVEL=DEBUG ");
  EXPECT_THAT(r.err, testing::HasSubstr("Some attention backends are not valid"));
  r = run_pagoda("backends select --attention-backend FLEX_ATTENTION --kv-cache-dtype fp8");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.err, testing::HasSubstr("Selected backend FLEX_ATTENTION is not valid for this configuration. Reason: ['kv_cache_dtype not supported']"));
  r = run_pagoda("backends select --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_THAT(r.out, testing::HasSubstr("--device-capability X.Y"));
}

TEST(BackendsList, ShowsBuiltStatus) {
  auto r = run_pagoda("backends list --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  Json j = Json::parse(r.out);
  ASSERT_EQ(j.size(), 6u);
  EXPECT_EQ(j[0]["name"], "FLASH_ATTN");
  EXPECT_EQ(j[5]["name"], "CPU_ATTN");
  EXPECT_EQ(j[5]["built"], true);
  const bool cuda_build = j[0]["built"];  // FLASH_ATTN: built in CUDA builds only
  EXPECT_EQ(j[3]["built"], cuda_build);  // FLEX_ATTENTION: CUDA kernels in CUDA builds (a CPU runner in every build)
  EXPECT_EQ(j[1]["name"], "FLASHINFER");
  EXPECT_EQ(j[1]["built"], cuda_build);  // FLASHINFER: the same
  EXPECT_EQ(j[2]["name"], "TRITON_ATTN");
  EXPECT_EQ(j[0]["built"], j[2]["built"]);  // FLASH_ATTN and TRITON_ATTN: both in CUDA builds, neither in CPU-only ones
  EXPECT_EQ(j[2]["head_sizes"], ">= 32");
  EXPECT_EQ(j[1]["block_sizes"], "any");
  r = run_pagoda("backends list");
  EXPECT_THAT(r.out, testing::HasSubstr(cuda_build ? "FLEX_ATTENTION  [cuda]  built into this binary"
                                                   : "FLEX_ATTENTION  [cuda]  not built in this binary"));
  EXPECT_THAT(r.out, testing::HasSubstr("CPU_ATTN  [cpu]  built into this binary"));
  EXPECT_THAT(r.out, testing::HasSubstr("pagoda's own: a CPU runner, always built: on the CPU a turboquant_* layer "
                                        "selects TURBOQUANT"));
  EXPECT_THAT(r.out, testing::HasSubstr("pagoda's own: a CPU runner, always built: on the CPU a forced FLEX_ATTENTION "
                                        "serves the layers"));
}

}  // namespace
}  // namespace pagoda
