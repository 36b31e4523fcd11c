// The GGUF fuzz entry point (fuzz_gguf.cc), shared by the libFuzzer binary and the CTest mutation driver.
#pragma once

#include <cstddef>
#include <cstdint>

namespace pagoda::test {

// Reads one file image as a model; traps on a crash, a non-pagoda exception or a broken invariant. Returns 0.
int fuzz_gguf(const uint8_t* data, size_t size);

}  // namespace pagoda::test
