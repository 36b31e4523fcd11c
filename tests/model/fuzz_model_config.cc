// Fuzz target for config.json + generation_config.json parsing. Built as a libFuzzer binary with clang
// (-DPAGODA_FUZZ=ON, which defines PAGODA_LIBFUZZER) and driven over mutated configs by
// model_config_fuzz_test.cc in every build.
//
// Input: config.json's text, optionally followed by kFuzzGenerationSeparator and generation_config.json's
// text. Contract checked: the parse either returns a config inside the documented bounds (sizes, their
// divisibility, token ids below vocab_size, one sliding-window flag per layer, a parameter count that
// does not overflow) or throws pagoda::Error. Anything else (a crash, another exception, a broken
// invariant) traps.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_model_config.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/model/model_config.h"
#include "pagoda/model/model_weights.h"

namespace pagoda::test {

int fuzz_model_config(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find(kFuzzGenerationSeparator);
  const std::string config(input.substr(0, sep));
  const std::string gen = sep == std::string_view::npos ? std::string()
                                                        : std::string(input.substr(sep + kFuzzGenerationSeparator.size()));
  try {
    const ModelConfig c = parse_model_config_text(config, "config.json", gen);
    auto in = [](int64_t v, int64_t lo, int64_t hi) { return v >= lo && v <= hi; };
    if (!in(c.vocab_size, 1, kMaxVocabSize) || !in(c.hidden_size, 1, kMaxHiddenSize) ||
        !in(c.intermediate_size, 1, kMaxIntermediateSize) || !in(c.num_layers, 1, kMaxNumLayers) ||
        !in(c.num_heads, 1, kMaxNumHeads) || !in(c.num_kv_heads, 1, c.num_heads) || c.num_heads % c.num_kv_heads != 0 ||
        !in(c.head_dim, 2, kMaxHeadDim) || c.head_dim % 2 != 0 || !in(c.max_position_embeddings, 1, kMaxPositionEmbeddings))
      __builtin_trap();
    if (c.layer_uses_sliding_window.size() != size_t(c.num_layers) || c.sliding_window < 0) __builtin_trap();
    if (c.bos_token_id != -1 && !in(c.bos_token_id, 0, c.vocab_size - 1)) __builtin_trap();
    for (int id : c.eos_token_ids)
      if (!in(id, 0, c.vocab_size - 1)) __builtin_trap();
    if (!(c.rms_norm_eps > 0) || !(c.rope_theta > 0) || !(c.rope_scaling.factor > 0)) __builtin_trap();
    if (model_parameter_count(c) <= 0) __builtin_trap();
  } catch (const Error&) {
    // Expected for malformed input.
  } catch (...) {
    __builtin_trap();
  }
  return 0;
}

}  // namespace pagoda::test

#ifdef PAGODA_LIBFUZZER
// Warnings about odd but accepted values would flood the fuzzer's output.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  pagoda::set_log_level(pagoda::LogLevel::kError);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return pagoda::test::fuzz_model_config(data, size);
}
#endif
