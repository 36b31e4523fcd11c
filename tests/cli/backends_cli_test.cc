// `pagoda backends select` and `pagoda backends list` through the binary: the JSON contract of spec §11,
// exit statuses, log lines, config files and --model.
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli_runner.h"

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
  EXPECT_EQ(j[3]["built"], false);  // FLEX_ATTENTION kernels do not exist yet
  EXPECT_EQ(j[2]["name"], "TRITON_ATTN");
  EXPECT_EQ(j[0]["built"], j[2]["built"]);  // FLASH_ATTN and TRITON_ATTN: both in CUDA builds, neither in CPU-only ones
  EXPECT_EQ(j[2]["head_sizes"], ">= 32");
  EXPECT_EQ(j[1]["block_sizes"], "any");
  r = run_pagoda("backends list");
  EXPECT_THAT(r.out, testing::HasSubstr("FLEX_ATTENTION  [cuda]  not built in this binary"));
  EXPECT_THAT(r.out, testing::HasSubstr("CPU_ATTN  [cpu]  built into this binary"));
}

}  // namespace
}  // namespace pagoda
