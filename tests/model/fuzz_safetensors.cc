// Fuzz target for the safetensors header parser. Built as a libFuzzer binary with clang (-DPAGODA_FUZZ=ON),
// and driven over mutated headers by safetensors_fuzz_test.cc in every build.
//
// Contract checked: any input either parses into tensors whose bytes lie inside the input and match their
// shape, or throws pagoda::Error. Anything else (a crash, another exception, a broken invariant) traps.
#include <cstddef>
#include <cstdint>
#include <exception>

#include "pagoda/core/error.h"
#include "pagoda/model/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const pagoda::SafetensorsHeader h = pagoda::parse_safetensors_header(data, size, "fuzz.safetensors");
    for (const auto& t : h.tensors) {
      uint64_t numel = 1;
      for (int64_t d : t.shape) numel *= uint64_t(d);
      if (t.begin > t.end || h.data_offset + t.end > size || numel * t.element_size != t.end - t.begin) __builtin_trap();
      // Touch the first and last byte: out-of-bounds reads show up under ASan.
      if (t.end > t.begin) {
        volatile uint8_t first = data[h.data_offset + t.begin];
        volatile uint8_t last = data[h.data_offset + t.end - 1];
        (void)first;
        (void)last;
      }
    }
  } catch (const pagoda::Error&) {
    // Expected for malformed input.
  } catch (...) {
    __builtin_trap();
  }
  return 0;
}
