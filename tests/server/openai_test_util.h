// Helpers of the request/response tests: stories260K's tokenizer and a chat template as a ServedModel,
// without an HTTP server.
#pragma once

#include <cstdlib>
#include <memory>
#include <string>

#include "pagoda/model/load_model.h"
#include "pagoda/server/openai_api.h"
#include "pagoda/tokenizer/chat_template.h"

namespace pagoda::test {

inline std::string api_test_data_dir() {
  const char* env = std::getenv("PAGODA_TEST_DATA");
  return env && *env ? env : PAGODA_TEST_DATA_DEFAULT;
}
inline std::string stories_hf_dir() { return api_test_data_dir() + "/models/stories260K/hf"; }

// "role: content" lines, then "assistant:" (stories260K has no template of its own).
inline const char* kStoriesChatTemplate =
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

// stories260K served as "stories", max_model_len 256 (its context length).
inline const ServedModel& stories_served() {
  static const ServedModel m = [] {
    ServedModel s;
    s.names = {"stories"};
    s.root = stories_hf_dir();
    s.max_model_len = 256;
    s.tokenizer = Tokenizer::from_file(stories_hf_dir());
    s.chat_template = std::make_shared<ChatTemplate>(kStoriesChatTemplate);
    return s;
  }();
  return m;
}

}  // namespace pagoda::test
