// The tokenizer.json fuzz entry point (fuzz_tokenizer.cc), shared by the libFuzzer binary and the CTest
// mutation driver.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace pagoda::test {

// Separates tokenizer.json from tokenizer_config.json in one fuzz input.
inline constexpr std::string_view kFuzzTokenizerConfigSeparator = "\n//tokenizer_config.json\n";

// Loads one input and, when it loads, encodes and decodes a few texts with it; traps on a crash, a
// non-pagoda exception or a broken invariant. Returns 0.
int fuzz_tokenizer(const uint8_t* data, size_t size);

}  // namespace pagoda::test
