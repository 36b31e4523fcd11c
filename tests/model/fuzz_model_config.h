// The config.json fuzz entry point (fuzz_model_config.cc), shared by the libFuzzer binary and the CTest
// mutation driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pagoda::test {

// Separates config.json from generation_config.json in one fuzz input.
inline constexpr std::string_view kFuzzGenerationSeparator = "\n//generation_config.json\n";

// Parses one input; traps on a crash, a non-pagoda exception or a config outside the bounds. Returns 0.
int fuzz_model_config(const uint8_t* data, size_t size);

}  // namespace pagoda::test
