// Runs the request fuzz entry point (fuzz_openai_request.cc) over a few thousand mutations of real
// requests in every build: byte flips, truncations, spliced JSON, extreme numbers in every numeric slot,
// table fields with wrong-typed values, deep nesting. The entry point traps on anything but a clean answer
// or an ApiError; here each mutation must also come back.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "openai_test_util.h"
#include "pagoda/server/openai_api.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace pagoda {
namespace {

// Real requests, each carrying both 'prompt' and 'messages' so both endpoints parse it.
const std::vector<std::string>& seeds() {
  static const std::vector<std::string> s = {
      R"({"model": "stories", "prompt": "Once upon a time", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8, "temperature": 0})",
      R"({"prompt": ["Once", "Lily"], "messages": [{"role": "system", "content": "Be brief"}, {"role": "user", "content": "Tell a story"}], "n": 2, "max_tokens": 4, "seed": 7})",
      R"({"prompt": [1, 403, 407], "messages": [{"role": "user", "content": "x"}], "stream": true, "stream_options": {"include_usage": true}, "stop": ["the", "."], "stop_token_ids": [13]})",
      R"({"prompt": [[1, 2], [1, 3]], "messages": [{"role": "user", "content": "ü€😀"}], "top_p": 0.9, "top_k": 20, "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": 0.1, "repetition_penalty": 1.2, "tokens": [1, 2, 3]})",
      R"({"prompt": "Ti", "messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}], "continue_final_message": true, "add_generation_prompt": false, "echo": false, "best_of": 1, "response_format": {"type": "text"}, "tools": [], "tool_choice": "none", "user": "u"})",
      R"({"messages": [{"role": "user", "content": "Hi"}], "logprobs": true, "top_logprobs": 3, "max_completion_tokens": 5, "n": 3, "stream": true, "return_tokens_as_token_ids": false})",
  };
  return s;
}

std::string mutate(const std::string& seed, std::mt19937_64& rng) {
  auto pick = [&](size_t n) { return n ? size_t(rng() % n) : 0; };
  static const std::vector<std::string> splices = {
      "{", "}", "[", "]", ",", ":", "\"", "null", "true", "false", "0", "-1", "1e400", "-0", "1.5",
      "4294967297", "9223372036854775808", "-9223372036854775809", "18446744073709551616", "\"\\u0000\"",
      "\"\\ud800\"", "\xff\xfe", "[[[[[[[[[[[[[[[[", "{\"a\":{\"b\":{\"c\":", "\"<s>\"", "\"</s>\"", "[1,2,3]",
      "{\"type\":\"json_object\"}", "\"\xe4\xb8\"", "511", "512", "256", "255"};
  static const std::vector<std::string> numbers = {"0", "1", "-1", "20", "21", "128", "129", "255", "256", "511", "512",
                                                   "4294967297", "-4294967297", "9223372036854775807", "1e19", "1.5",
                                                   "NaN", "1e-400", "2.0", "true", "\"5\"", "[]", "{}", "null"};
  std::string s = seed;
  const int rounds = 1 + int(pick(4));
  for (int r = 0; r < rounds; ++r) {
    switch (pick(8)) {
      case 0:  // flip a byte
        if (!s.empty()) s[pick(s.size())] ^= char(1 << pick(8));
        break;
      case 1:  // truncate
        s.resize(pick(s.size() + 1));
        break;
      case 2:  // splice a token
        s.insert(pick(s.size() + 1), splices[pick(splices.size())]);
        break;
      case 3: {  // replace a number
        std::vector<size_t> starts;
        for (size_t i = 0; i < s.size(); ++i)
          if (isdigit(static_cast<unsigned char>(s[i])) && (i == 0 || !isdigit(static_cast<unsigned char>(s[i - 1]))))
            starts.push_back(i);
        if (starts.empty()) break;
        const size_t i = starts[pick(starts.size())];
        size_t j = i;
        while (j < s.size() && (isdigit(static_cast<unsigned char>(s[j])) || s[j] == '.')) ++j;
        s.replace(i, j - i, numbers[pick(numbers.size())]);
        break;
      }
      case 4: {  // add a table field with its example, an off value or a wrong-typed value
        const auto fields = request_fields();
        const RequestField& f = fields[pick(fields.size())];
        std::string v = f.example ? f.example : "1";
        if (pick(3) == 0 && f.off[0]) v = f.off[0];
        if (pick(4) == 0) v = numbers[pick(numbers.size())];
        const size_t brace = s.find('{');
        if (brace != std::string::npos) s.insert(brace + 1, "\"" + std::string(f.name) + "\": " + v + ", ");
        break;
      }
      case 5: {  // duplicate a slice
        if (s.empty()) break;
        const size_t a = pick(s.size()), len = pick(std::min<size_t>(64, s.size() - a) + 1);
        s.insert(pick(s.size() + 1), s.substr(a, len));
        break;
      }
      case 6: {  // nest a value deeply
        const size_t depth = pick(2) ? 100 + pick(60) : 2000;
        s = "{\"prompt\": " + std::string(depth, '[') + "1" + std::string(depth, ']') + ", \"x\": " + s + "}";
        break;
      }
      default:  // a long string
        s.insert(pick(s.size() + 1), "\"" + std::string(pick(5000), 'a') + "\"");
        break;
    }
  }
  return s;
}

// The mutations start from requests that work, so they reach past the first checks (chat's boolean
// 'logprobs' is an error for completions, so the last seed is chat's alone).
TEST(OpenAiFuzz, SeedsAreAccepted) {
  int accepted = 0;
  for (const std::string& s : seeds()) {
    for (bool chat : {false, true}) {
      try {
        parse_completion_request(s, chat, test::stories_served());
        ++accepted;
      } catch (const ApiError& e) {
        if (chat || &s != &seeds().back()) ADD_FAILURE() << (chat ? "chat: " : "completions: ") << e.message << " in " << s;
      }
    }
  }
  EXPECT_EQ(accepted, 2 * int(seeds().size()) - 1);
}

TEST(OpenAiFuzz, MutatedRequestsNeverCrash) {
  std::mt19937_64 rng(20261204);
  for (const std::string& s : seeds()) LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  int n = 0;
  for (int iter = 0; iter < 5000; ++iter) {
    const std::string& seed = seeds()[size_t(rng() % seeds().size())];
    const std::string input = mutate(seed, rng);
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    ++n;
  }
  EXPECT_EQ(n, 5000);
}

}  // namespace
}  // namespace pagoda
