// Fuzz target for the GGUF reader and the model built from it (config, weights, vocabulary). Built as a
// libFuzzer binary with clang (-DPAGODA_FUZZ=ON, which defines PAGODA_LIBFUZZER), and driven over mutated
// images by gguf_fuzz_test.cc in every build.
//
// Contract checked: any input either parses into tensors whose bytes lie inside the input and match their
// dims and type, or throws pagoda::Error; a parsed file either yields a config, weights and a vocabulary or
// throws pagoda::Error. Anything else (a crash, another exception, a broken invariant) traps.
#include <cstddef>
#include <cstdint>
#include <exception>

#include "pagoda/core/error.h"
#include "fuzz_gguf.h"
#include "pagoda/model/gguf_model.h"

namespace pagoda::test {

int fuzz_gguf(const uint8_t* data, size_t size) {
  try {
    auto file = GgufFile::view(data, size, "fuzz.gguf");
    const GgufHeader& h = file->header();
    if (h.data_offset % h.alignment != 0) __builtin_trap();
    for (const GgufTensorInfo& t : h.tensors) {
      uint64_t numel = 1;
      for (int64_t d : t.dims) numel *= uint64_t(d);
      const uint64_t want = t.dtype ? numel * dtype_size(*t.dtype)
                                    : numel / uint64_t(quant_traits(t.quant).block_elems) * uint64_t(quant_traits(t.quant).block_bytes);
      if (int64_t(numel) != t.numel || want != t.nbytes || t.offset % h.alignment != 0 ||
          h.data_offset + t.offset + t.nbytes > size)
        __builtin_trap();
      // Touch the first and last byte: out-of-bounds reads show up under ASan.
      if (t.nbytes > 0) {
        volatile uint8_t first = file->tensor_data(t)[0];
        volatile uint8_t last = file->tensor_data(t)[t.nbytes - 1];
        (void)first;
        (void)last;
      }
    }
    (void)read_gguf_vocab(*file);
    const ModelConfig c = gguf_model_config(*file);
    const ModelWeights w = load_gguf_weights(c, file, std::nullopt);
    if (w.layers.size() != size_t(c.num_layers) || !w.embed.data || !w.lm_head.data) __builtin_trap();
  } catch (const Error&) {
    // Expected for malformed input.
  } catch (...) {
    __builtin_trap();
  }
  return 0;
}

}  // namespace pagoda::test

#ifdef PAGODA_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) { return pagoda::test::fuzz_gguf(data, size); }
#endif
