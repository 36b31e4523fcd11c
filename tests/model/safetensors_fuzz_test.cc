// Runs the fuzz entry point over a few thousand mutated safetensors images (bit flips, truncations, lying
// offsets and sizes, spliced JSON), so every CI run exercises the parser's error paths.
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "pagoda/core/error.h"
#include "pagoda/model/safetensors.h"
#include "safetensors_writer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace pagoda::test {
namespace {

std::vector<uint8_t> seed_image() {
  std::vector<StTensor> t = {{"model.embed_tokens.weight", "BF16", {8, 4}, std::vector<uint8_t>(64, 0x3c)},
                             {"model.norm.weight", "F32", {4}, f32_bytes({1, 2, 3, 4})},
                             {"lm_head.weight", "F16", {2, 4}, std::vector<uint8_t>(16, 0x11)}};
  return st_image(t);
}

// Replaces the n-th run of digits in the header text by `repl`, keeping the length prefix correct.
std::vector<uint8_t> replace_number(const std::vector<uint8_t>& img, int which, const std::string& repl) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | img[size_t(i)];
  std::string header(img.begin() + 8, img.begin() + 8 + long(n));
  std::vector<uint8_t> data(img.begin() + 8 + long(n), img.end());
  int count = 0;
  for (size_t i = 0; i < header.size(); ++i) {
    if (!isdigit(static_cast<unsigned char>(header[i])) || (i > 0 && isdigit(static_cast<unsigned char>(header[i - 1])))) continue;
    size_t j = i;
    while (j < header.size() && isdigit(static_cast<unsigned char>(header[j]))) ++j;
    if (count++ == which) {
      header.replace(i, j - i, repl);
      break;
    }
  }
  return st_image(header, data);
}

TEST(SafetensorsFuzz, SeedParses) {
  auto img = seed_image();
  auto h = parse_safetensors_header(img.data(), img.size(), "seed");
  EXPECT_EQ(h.tensors.size(), 3u);
}

TEST(SafetensorsFuzz, MutatedHeadersNeverCrash) {
  const std::vector<uint8_t> seed = seed_image();
  std::mt19937_64 rng(20240601);
  auto pick = [&](uint64_t n) { return n ? rng() % n : 0; };
  const std::vector<std::string> numbers = {"0", "1", "7", "8", "16", "63", "64", "65", "112", "4294967295", "4294967296",
                                            "18446744073709551615", "18446744073709551616", "-1", "1e3", "0.5", "99999999999"};
  const std::vector<std::string> splices = {"{", "}", "[", "]", ",", ":", "\"", "null", "true", "\"F64\"", "\"BF16\"",
                                            "[0,0]", "{}", "\\u0000", "\xff", "\"__metadata__\"", "[[[[[[[[[[[[[[[[[[[["};
  int parsed = 0, rejected = 0;
  for (int iter = 0; iter < 4000; ++iter) {
    std::vector<uint8_t> img = seed;
    const int kind = int(pick(6));
    const int rounds = 1 + int(pick(3));
    for (int r = 0; r < rounds; ++r) {
      switch (kind) {
        case 0:  // bit flips anywhere (mostly in the header, which is what matters)
          for (int i = 0; i < 1 + int(pick(4)); ++i) {
            const size_t at = pick(std::min<size_t>(img.size(), 8 + 300));
            if (at < img.size()) img[at] ^= uint8_t(1u << pick(8));
          }
          break;
        case 1:  // truncation
          img.resize(pick(img.size() + 1));
          break;
        case 2:  // a lying number: offsets, shapes or the size of the header
          img = replace_number(img, int(pick(30)), numbers[pick(numbers.size())]);
          break;
        case 3: {  // a spliced JSON token inside the header
          uint64_t n = 0;
          for (int i = 7; i >= 0; --i) n = (n << 8) | img[size_t(i)];
          if (img.size() < 8 || n > img.size() - 8) break;
          std::string header(img.begin() + 8, img.begin() + 8 + long(n));
          std::vector<uint8_t> data(img.begin() + 8 + long(n), img.end());
          header.insert(pick(header.size() + 1), splices[pick(splices.size())]);
          img = st_image(header, data);
          break;
        }
        case 4:  // the 8-byte length lies
          if (img.size() >= 8) img[pick(8)] = uint8_t(rng());
          break;
        case 5:  // random bytes overwrite a window
          for (size_t i = pick(img.size()), e = std::min(img.size(), i + 1 + pick(8)); i < e; ++i) img[i] = uint8_t(rng());
          break;
      }
    }
    LLVMFuzzerTestOneInput(img.data(), img.size());
    try {
      parse_safetensors_header(img.data(), img.size(), "m");
      ++parsed;
    } catch (const Error& e) {
      ++rejected;
      EXPECT_NE(std::string(e.what()).find("'m'"), std::string::npos) << e.what();
    }
  }
  // Both outcomes must be common, or the mutations are not exercising the parser.
  EXPECT_GT(parsed, 100);
  EXPECT_GT(rejected, 1000);
  std::printf("[ fuzz ] 4000 mutated images: %d parsed, %d rejected with pagoda::Error\n", parsed, rejected);
}

}  // namespace
}  // namespace pagoda::test
