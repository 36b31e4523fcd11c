// Spec §1.2 backend names and §9.1-§9.2 AttentionConfig parsing with the exact validation errors.
#include <gtest/gtest.h>

#include "pagoda/config/attention_config.h"
#include "pagoda/core/error.h"

namespace pagoda {
namespace {

std::string error_of(const std::string& json) {
  try {
    parse_attention_config_json(json);
  } catch (const Error& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  return "";
}

std::string validation(const std::string& field, const std::string& message) {
  return "1 validation error for AttentionConfig\n" + field + "\n  " + message;
}

TEST(BackendName, CaseInsensitiveAndAuto) {
  EXPECT_EQ(parse_backend_name("flashinfer"), BackendName::kFlashInfer);
  EXPECT_EQ(parse_backend_name("Triton_Attn"), BackendName::kTritonAttn);
  EXPECT_EQ(parse_backend_name("AUTO"), std::nullopt);
  EXPECT_EQ(parse_backend_name("auto"), std::nullopt);
  EXPECT_EQ(parse_backend_name("", true), std::nullopt);
  EXPECT_EQ(parse_backend_name("None", true), std::nullopt);
}

TEST(BackendName, UnknownNamesExactError) {
  for (std::string name : {"torch_sdpa", "FLASHMLA", "CUSTOM", "xformers"}) {
    try {
      parse_backend_name(name);
      FAIL() << name;
    } catch (const Error& e) {
      std::string upper;
      for (char c : name) upper += char(std::toupper(c));
      EXPECT_EQ(std::string(e.what()), "Unknown attention backend: '" + upper + "'. Valid options are: FLASH_ATTN, "
                                       "FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, TURBOQUANT, CPU_ATTN");
      EXPECT_EQ(e.exit_code(), 2);
    }
  }
  EXPECT_THROW(parse_backend_name(""), Error);  // empty is automatic only for --attention-backend
}

TEST(AttentionConfig, Defaults) {
  AttentionConfig c = parse_attention_config_json("{}");
  EXPECT_FALSE(c.backend);
  EXPECT_TRUE(c.backend_per_kind.empty());
  EXPECT_FALSE(c.flash_attn_version);
  EXPECT_FALSE(c.use_prefill_decode_attention);
  EXPECT_EQ(c.flash_attn_max_num_splits_for_cuda_graph, 32);
  EXPECT_FALSE(c.use_trtllm_attention);
  EXPECT_FALSE(c.disable_flashinfer_q_quantization);
  EXPECT_FALSE(c.use_non_causal);
  EXPECT_FALSE(c.flex_attn_block_m);
  EXPECT_FALSE(c.flex_attn_block_n);
  EXPECT_EQ(c.tq_max_kv_splits_for_cuda_graph, 32);
  EXPECT_FALSE(c.use_cascade_attention);
}

TEST(AttentionConfig, EveryField) {
  AttentionConfig c = parse_attention_config_json(
      R"({"backend": "flash_attn", "backend_per_kind": {"sliding_window": "TRITON_ATTN", "full_attention": "auto"},
          "flash_attn_version": 3, "use_prefill_decode_attention": "yes", "flash_attn_max_num_splits_for_cuda_graph": "16",
          "use_trtllm_attention": 0, "disable_flashinfer_q_quantization": "On", "use_non_causal": 1,
          "flex_attn_block_m": 64.0, "flex_attn_block_n": null, "tq_max_kv_splits_for_cuda_graph": 8,
          "use_cascade_attention": "yes"})");
  EXPECT_EQ(c.backend, BackendName::kFlashAttn);
  ASSERT_EQ(c.backend_per_kind.size(), 2u);
  EXPECT_EQ(c.backend_per_kind[0].first, "sliding_window");
  EXPECT_EQ(c.backend_per_kind[0].second, BackendName::kTritonAttn);
  EXPECT_EQ(c.backend_per_kind[1].second, std::nullopt);
  EXPECT_EQ(c.forced_backend_for_kind("full_attention"), std::nullopt);
  EXPECT_EQ(c.forced_backend_for_kind("cross_attention"), BackendName::kFlashAttn);
  EXPECT_EQ(c.flash_attn_version, 3);
  EXPECT_TRUE(c.use_prefill_decode_attention);
  EXPECT_EQ(c.flash_attn_max_num_splits_for_cuda_graph, 16);
  EXPECT_EQ(c.use_trtllm_attention, false);
  EXPECT_TRUE(c.disable_flashinfer_q_quantization);
  EXPECT_TRUE(c.use_non_causal);
  EXPECT_EQ(c.flex_attn_block_m, 64);
  EXPECT_FALSE(c.flex_attn_block_n);
  EXPECT_EQ(c.tq_max_kv_splits_for_cuda_graph, 8);
  EXPECT_TRUE(c.use_cascade_attention);
  EXPECT_NE(c.to_json().find("\"use_cascade_attention\":true"), std::string::npos);
  EXPECT_EQ(error_of(R"({"use_cascade_attention": 2})"), validation("use_cascade_attention", "Input should be a valid boolean"));
}

TEST(AttentionConfig, LenientBooleans) {
  for (const char* t : {"true", "1", "\"TRUE\"", "\"yes\"", "\"on\"", "\"t\"", "\"Y\"", "\"1\""})
    EXPECT_TRUE(parse_attention_config_json(std::string("{\"use_non_causal\": ") + t + "}").use_non_causal) << t;
  for (const char* f : {"false", "0", "\"False\"", "\"no\"", "\"off\"", "\"f\"", "\"n\"", "\"0\""})
    EXPECT_FALSE(parse_attention_config_json(std::string("{\"use_non_causal\": ") + f + "}").use_non_causal) << f;
  for (const char* bad : {"2", "\"maybe\"", "null", "[]", "{}", "0.5"})
    EXPECT_EQ(error_of(std::string("{\"use_non_causal\": ") + bad + "}"), validation("use_non_causal", "Input should be a valid boolean")) << bad;
}

TEST(AttentionConfig, LenientIntegers) {
  EXPECT_EQ(parse_attention_config_json(R"({"tq_max_kv_splits_for_cuda_graph": 16.0})").tq_max_kv_splits_for_cuda_graph, 16);
  EXPECT_EQ(parse_attention_config_json(R"({"tq_max_kv_splits_for_cuda_graph": "64"})").tq_max_kv_splits_for_cuda_graph, 64);
  for (const char* bad : {"true", "16.5", "\"sixteen\"", "\"-3\"", "null", "[1]"})
    EXPECT_EQ(error_of(std::string("{\"tq_max_kv_splits_for_cuda_graph\": ") + bad + "}"),
              validation("tq_max_kv_splits_for_cuda_graph", "Input should be a valid integer")) << bad;
  EXPECT_EQ(error_of(R"({"flex_attn_block_m": false})"), validation("flex_attn_block_m", "Input should be a valid integer"));
}

TEST(AttentionConfig, HumanReadableIntegers) {
  EXPECT_EQ(parse_attention_config_json(R"({"flash_attn_max_num_splits_for_cuda_graph": 1k})").flash_attn_max_num_splits_for_cuda_graph, 1000);
  EXPECT_EQ(parse_attention_config_json(R"({"flash_attn_max_num_splits_for_cuda_graph": 2K})").flash_attn_max_num_splits_for_cuda_graph, 2048);
  EXPECT_EQ(replace_human_readable_ints(R"({"a": "1k", "b": 1M, "c": 3g})"), R"({"a": "1k", "b": 1048576, "c": 3000000000})");
}

TEST(AttentionConfig, FlashAttnVersion) {
  for (int v : {2, 3, 4}) EXPECT_EQ(parse_attention_config_json("{\"flash_attn_version\": " + std::to_string(v) + "}").flash_attn_version, v);
  for (const char* bad : {"1", "5", "\"3\"", "3.0", "true"})
    EXPECT_EQ(error_of(std::string("{\"flash_attn_version\": ") + bad + "}"), validation("flash_attn_version", "Input should be 2, 3 or 4")) << bad;
}

TEST(AttentionConfig, Errors) {
  EXPECT_EQ(error_of(R"({"use_cudnn_prefill": true})"), validation("use_cudnn_prefill", "Extra inputs are not permitted"));
  EXPECT_EQ(error_of(R"({"disable_flashinfer_prefill": true})"), validation("disable_flashinfer_prefill", "Extra inputs are not permitted"));
  EXPECT_EQ(error_of(R"({"backend": 3})"), validation("backend", "Input should be a valid string"));
  EXPECT_EQ(error_of(R"({"backend_per_kind": [1]})"), validation("backend_per_kind", "Input should be a valid dictionary"));
  EXPECT_EQ(error_of(R"({"backend_per_kind": {"full_attention": 7}})"),
            validation("backend_per_kind.full_attention", "Input should be a valid string"));
  EXPECT_EQ(error_of(R"([1, 2])"), validation("attention_config", "Input should be a valid dictionary"));
  EXPECT_EQ(error_of(R"("FLASH_ATTN")"), validation("attention_config", "Input should be a valid dictionary"));
  EXPECT_EQ(error_of(R"({"backend": "FLASH_ATTN",)").rfind(validation("attention_config", "Invalid JSON: "), 0), 0u);
  EXPECT_EQ(error_of(R"({"backend": "sdpa"})"),
            "Unknown attention backend: 'SDPA'. Valid options are: FLASH_ATTN, FLASHINFER, TRITON_ATTN, FLEX_ATTENTION, TURBOQUANT, CPU_ATTN");
  EXPECT_EQ(error_of(R"({"backend_per_kind": {"mla": "FLASH_ATTN"}})"),
            "Unknown KV cache group kind 'mla' in backend_per_kind. Valid kinds are: cross_attention, "
            "encoder_only_attention, full_attention, sliding_window.");
  // Only the first failure, left to right.
  EXPECT_EQ(error_of(R"({"use_non_causal": "x", "bogus": 1})"), validation("use_non_causal", "Input should be a valid boolean"));
  EXPECT_EQ(error_of(R"({"bogus": 1, "use_non_causal": "x"})"), validation("bogus", "Extra inputs are not permitted"));
}

}  // namespace
}  // namespace pagoda
