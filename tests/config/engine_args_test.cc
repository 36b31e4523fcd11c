// Spec §9.3, §9.4 step 7, §9.6 and §9.7: option parsing, values, environment and the order of errors.
#include <cstdlib>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pagoda/config/arg_preprocess.h"
#include "pagoda/config/engine_args.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {
namespace {

struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }
  const char* name_;
  std::optional<std::string> old_;
};

struct Parsed {
  EngineArgs args;
  ValidatedArgs v;
};

Parsed parse(const std::vector<std::string>& raw) {
  Parsed p;
  ArgParser parser("t", "t");
  register_engine_options(parser, p.args, EngineOptionSet::kServe);
  LogSilence quiet;
  auto pre = preprocess_args(raw, [&](std::string_view n) { return parser.takes_value(n); });
  parser.parse(pre.args);
  p.v = validate_engine_args(p.args);
  return p;
}

std::string error_of(const std::vector<std::string>& raw) {
  try {
    parse(raw);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2) << e.what();
    return e.what();
  }
  return "";
}

TEST(EngineArgs, LaterOptionReplacesEarlier) {
  auto p = parse({"--attention-config", R"({"backend": "FLEX_ATTENTION"})", "--attention-config.use_non_causal", "true"});
  EXPECT_FALSE(p.v.attention_config.backend);
  EXPECT_TRUE(p.v.attention_config.use_non_causal);
  // Mixing prefixes keeps only the object of the prefix that appeared last.
  p = parse({"-ac.use_non_causal", "true", "--attention-config.flash_attn_version", "2"});
  EXPECT_FALSE(p.v.attention_config.use_non_causal);
  EXPECT_EQ(p.v.attention_config.flash_attn_version, 2);
  p = parse({"--attention-config.flash_attn_version", "2", "-ac.use_non_causal", "true"});
  EXPECT_TRUE(p.v.attention_config.use_non_causal);
  EXPECT_FALSE(p.v.attention_config.flash_attn_version);
  p = parse({"--block-size", "16", "--block-size", "32"});
  EXPECT_EQ(p.v.block_size, 32);
}

TEST(EngineArgs, AttentionBackendForms) {
  EXPECT_EQ(parse({"--attention-backend", "flashinfer"}).v.attention_config.backend, BackendName::kFlashInfer);
  EXPECT_EQ(parse({"--attention-backend", "auto"}).v.attention_config.backend, std::nullopt);
  EXPECT_EQ(parse({"--attention-backend", ""}).v.attention_config.backend, std::nullopt);
  EXPECT_EQ(parse({"--attention-backend", "None"}).v.attention_config.backend, std::nullopt);
  EXPECT_EQ(parse({"--attention-config.backend", "TRITON_ATTN"}).v.attention_config.backend, BackendName::kTritonAttn);
  EXPECT_EQ(parse({"-ac", R"({"backend":"triton_attn"})"}).v.attention_config.backend, BackendName::kTritonAttn);
  EXPECT_EQ(parse({"--attention_config.backend=FLEX_ATTENTION"}).v.attention_config.backend, BackendName::kFlexAttention);
  // None in the dotted form is the raw string "None": not a backend name.
  EXPECT_THAT(error_of({"--attention-backend", "TORCH_SDPA"}), testing::StartsWith("Unknown attention backend: 'TORCH_SDPA'"));
}

TEST(EngineArgs, MutualExclusion) {
  const char* msg = "attention_backend and attention_config.backend are mutually exclusive";
  EXPECT_EQ(error_of({"--attention-backend", "FLASH_ATTN", "--attention-config.backend", "FLASH_ATTN"}), msg);
  EXPECT_EQ(error_of({"--attention-backend", "auto", "-ac.backend", "TRITON_ATTN"}), msg);
  // Mutual exclusion comes before the --attention-backend name check.
  EXPECT_EQ(error_of({"--attention-backend", "BOGUS", "-ac.backend", "TRITON_ATTN"}), msg);
  // attention_config.backend null or auto is no conflict.
  EXPECT_EQ(parse({"--attention-backend", "FLASH_ATTN", "-ac.backend", "auto"}).v.attention_config.backend, BackendName::kFlashAttn);
}

TEST(EngineArgs, Values) {
  EXPECT_EQ(error_of({"--kv-cache-dtype", "FP8"}),
            "Invalid kv_cache_dtype: FP8. Valid values are: ('auto', 'float16', 'bfloat16', 'fp8', 'fp8_e4m3', "
            "'fp8_e5m2', 'turboquant_k8v4', 'turboquant_4bit_nc', 'turboquant_k3v4_nc', 'turboquant_3bit_nc')");
  for (const char* bad : {"fp8_inc", "nvfp4", "int8_per_token_head", "fp8_ds_mla"})
    EXPECT_THAT(error_of({"--kv-cache-dtype", bad}), testing::StartsWith(std::string("Invalid kv_cache_dtype: ") + bad + "."));
  EXPECT_EQ(error_of({"--block-size", "abc"}), "argument --block-size: invalid int value: 'abc'");
  EXPECT_THAT(error_of({"--block-size", "0"}), testing::StartsWith("Invalid block_size: 0."));
  EXPECT_THAT(error_of({"--dtype", "float64"}), testing::StartsWith("Invalid dtype: float64."));
  EXPECT_EQ(error_of({"--bogus", "1"}), "unrecognized arguments: --bogus 1");
  EXPECT_EQ(error_of({"--block-size"}), "argument --block-size: expected one argument");
  EXPECT_EQ(parse({"--dtype", "half"}).v.dtype, DTypeChoice::kFloat16);
  EXPECT_EQ(parse({"--dtype", "float"}).v.dtype, DTypeChoice::kFloat32);
  EXPECT_TRUE(parse({"--batch-invariant"}).v.batch_invariant);
  EXPECT_FALSE(parse({"--no-enable-prefix-caching"}).args.cache.enable_prefix_caching);
}

TEST(EngineArgs, OrderOfErrors) {
  // Argument syntax before AttentionConfig validation before option values before environment.
  ScopedEnv e("PAGODA_KV_CACHE_LAYOUT", "nhd");
  EXPECT_EQ(error_of({"-ac.bogus", "1", "--kv-cache-dtype", "x", "--block-size", "y"}), "argument --block-size: invalid int value: 'y'");
  EXPECT_EQ(error_of({"-ac.bogus", "1", "--kv-cache-dtype", "x"}),
            "1 validation error for AttentionConfig\nbogus\n  Extra inputs are not permitted");
  EXPECT_THAT(error_of({"--kv-cache-dtype", "x", "--attention-backend", "FLASH_ATTN", "-ac.backend", "X"}),
              testing::StartsWith("Unknown attention backend: 'X'"));  // AttentionConfig validation first
  EXPECT_THAT(error_of({"--kv-cache-dtype", "x"}), testing::StartsWith("Invalid kv_cache_dtype: x."));
  EXPECT_EQ(error_of({"--attention-backend", "FLASH_ATTN", "-ac.backend", "FLASH_ATTN"}),
            "Invalid value 'nhd' for PAGODA_KV_CACHE_LAYOUT. Valid options: ['NHD', 'HND'].");
}

TEST(EngineArgs, Environment) {
  {
    ScopedEnv e("PAGODA_BATCH_INVARIANT", "1");
    EXPECT_TRUE(parse({}).v.batch_invariant);
  }
  {
    ScopedEnv e("PAGODA_BATCH_INVARIANT", "true");
    EXPECT_EQ(error_of({}), "Invalid value 'true' for PAGODA_BATCH_INVARIANT. Valid options: ['0', '1'].");
  }
  {
    ScopedEnv e("PAGODA_KV_CACHE_LAYOUT", "HND");
    EXPECT_EQ(parse({}).v.env.kv_cache_layout, KvLayout::kHND);
  }
  {
    ScopedEnv e("PAGODA_LOGGING_LEVEL", "LOUD");
    EXPECT_EQ(error_of({}), "Invalid value 'LOUD' for PAGODA_LOGGING_LEVEL. Valid options: ['DEBUG', 'INFO', 'WARNING', 'ERROR'].");
  }
  {
    ScopedEnv e("VLLM_ATTENTION_BACKEND", "FLASHINFER");  // no effect
    EXPECT_FALSE(parse({}).v.attention_config.backend);
  }
}

TEST(EngineArgs, DtypeResolution) {
  EXPECT_EQ(resolve_model_dtype(DTypeChoice::kAuto, DType::kF16, false), DType::kF16);
  EXPECT_EQ(resolve_model_dtype(DTypeChoice::kAuto, DType::kF32, false), DType::kBF16);
  EXPECT_EQ(resolve_model_dtype(DTypeChoice::kAuto, std::nullopt, false), DType::kBF16);
  EXPECT_EQ(resolve_model_dtype(DTypeChoice::kAuto, DType::kBF16, true), DType::kF16);
  EXPECT_EQ(resolve_model_dtype(DTypeChoice::kBFloat16, DType::kF16, true), DType::kBF16);
  EXPECT_EQ(resolve_model_dtype(DTypeChoice::kFloat32, DType::kBF16, false), DType::kF32);
}

// --kv-cache-dtype-skip-layers: comma-separated, or the items of a config file's list (`--x a b`, up to the next
// option); each a layer index or sliding_window, anything else refused while parsing.
TEST(EngineArgs, KvCacheDtypeSkipLayers) {
  using V = std::vector<std::string>;
  EXPECT_EQ(parse({}).args.cache.kv_cache_dtype_skip_layers, V{});
  EXPECT_EQ(parse({"--kv-cache-dtype-skip-layers", "0, 7,sliding_window"}).args.cache.kv_cache_dtype_skip_layers,
            (V{"0", "7", "sliding_window"}));
  auto p = parse({"--kv-cache-dtype-skip-layers", "3", "sliding_window", "12", "--block-size", "32"});
  EXPECT_EQ(p.args.cache.kv_cache_dtype_skip_layers, (V{"3", "sliding_window", "12"}));
  EXPECT_EQ(p.v.block_size, 32);
  EXPECT_EQ(parse({"--kv_cache_dtype_skip_layers=007"}).args.cache.kv_cache_dtype_skip_layers, V{"7"});
  EXPECT_EQ(parse_kv_cache_dtype_skip_layers(""), V{});
  for (const char* bad : {"x", "-1", "1.5", "sliding-window", "0,,first"}) {
    EXPECT_THAT(error_of({"--kv-cache-dtype-skip-layers=" + std::string(bad)}),
                testing::StartsWith("argument --kv-cache-dtype-skip-layers: invalid item")) << bad;
  }
  EXPECT_THAT(error_of({"--kv-cache-dtype-skip-layers", "99999999999"}), testing::HasSubstr("is out of range"));
  EXPECT_THAT(error_of({"--kv-cache-dtype-skip-layers"}), testing::HasSubstr("expected one argument"));
}

TEST(EngineArgs, HelpListsEveryOption) {
  EngineArgs a;
  ArgParser parser("pagoda serve", "serve");
  register_engine_options(parser, a, EngineOptionSet::kServe);
  std::string help = parser.help();
  for (const char* opt : {"--model", "--dtype", "--block-size", "--kv-cache-dtype", "--attention-backend",
                          "--attention-config, -ac", "--batch-invariant", "--port", "--api-key", "--max-num-seqs",
                          "--gpu-memory-utilization", "--enforce-eager", "--kv-cache-dtype-skip-layers LAYERS"})
    EXPECT_NE(help.find(opt), std::string::npos) << opt;
}

}  // namespace
}  // namespace pagoda
