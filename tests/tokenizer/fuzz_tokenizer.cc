// Fuzz target for tokenizer.json + tokenizer_config.json loading. Built as a libFuzzer binary with clang
// (-DPAGODA_FUZZ=ON, which defines PAGODA_LIBFUZZER) and driven over mutated files by
// tokenizer_fuzz_test.cc in every build.
//
// Input: tokenizer.json's text, optionally followed by kFuzzTokenizerConfigSeparator and
// tokenizer_config.json's text. Contract checked: loading either throws pagoda::Error or gives a
// tokenizer whose encode() returns ids below vocab_size(), whose decode() returns valid UTF-8, and whose
// streaming detokenizer does not fail; encoding may also throw pagoda::Error (a regex over its limits).
// Anything else (a crash, another exception, a broken invariant) traps.
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "fuzz_tokenizer.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda::test {
namespace {

bool valid_utf8(std::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    const size_t n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || i + n > s.size()) return false;
    for (size_t k = 1; k < n; ++k)
      if ((static_cast<unsigned char>(s[i + k]) & 0xC0) != 0x80) return false;
    i += n;
  }
  return true;
}

// Texts that reach the components: spaces, digits, non-ASCII, a special-looking token, invalid UTF-8.
constexpr std::string_view kTexts[] = {"Hello world", " leading  spaces\tand\nnewlines", "12345 x=3.14",
                                       "caf\xC3\xA9 \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80", "<s>a</s><|im_end|>",
                                       "\xFF\xFE broken", ""};

void exercise(const Tokenizer& t) {
  const int vocab = t.vocab_size();
  for (std::string_view text : kTexts) {
    for (bool add_special : {false, true}) {
      const std::vector<int> ids = t.encode(text, add_special, /*parse_special=*/add_special);
      for (int id : ids)
        if (id < 0 || id >= vocab) __builtin_trap();
      if (!valid_utf8(t.decode(ids, false)) || !valid_utf8(t.decode(ids, true))) __builtin_trap();
      IncrementalDetokenizer stream(t);
      std::string streamed;
      for (int id : ids) streamed += stream.add(id);
      streamed += stream.finish();
      if (!valid_utf8(streamed)) __builtin_trap();
    }
  }
  // Ids that name no token are skipped, not trusted.
  const std::vector<int> odd = {-1, 0, vocab - 1, vocab, 1 << 30};
  if (!valid_utf8(t.decode(odd, false))) __builtin_trap();
}

}  // namespace

int fuzz_tokenizer(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t sep = input.find(kFuzzTokenizerConfigSeparator);
  const std::string_view tokenizer_json = input.substr(0, sep);
  const std::string_view config =
      sep == std::string_view::npos ? std::string_view() : input.substr(sep + kFuzzTokenizerConfigSeparator.size());
  try {
    exercise(Tokenizer::from_json_text(tokenizer_json, config));
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
  return pagoda::test::fuzz_tokenizer(data, size);
}
#endif
