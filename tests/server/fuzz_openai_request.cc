// Fuzz target for the OpenAI request layer: the input is a request body given to
// parse_completion_request (completions and chat), tokenize_body and detokenize_body, on stories260K's
// tokenizer and a chat template (loaded from PAGODA_TEST_DATA on the first call). A parsed job is checked
// against its invariants and then answered with synthetic engine outputs (the prompt's ids as generated
// tokens, with logprobs), streaming and whole, so the response writer sees arbitrary token ids too.
// Built as a libFuzzer binary with clang (-DPAGODA_FUZZ=ON) and driven over mutated real requests by
// openai_fuzz_test.cc in every build.
//
// Contract checked: every input is answered or refused with ApiError 400/404 (or pagoda::Error); anything
// else (a crash, another exception, a broken invariant, a response that is not JSON) traps.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/ops/sample.h"
#include "pagoda/server/openai_api.h"
#include "pagoda/tokenizer/chat_template.h"

namespace {

using pagoda::ApiError;
using pagoda::CompletionJob;
using pagoda::ServedModel;

const ServedModel& fuzz_model() {
  static const ServedModel m = [] {
    const char* env = std::getenv("PAGODA_TEST_DATA");
    const std::string dir = std::string(env && *env ? env : PAGODA_TEST_DATA_DEFAULT) + "/models/stories260K/hf";
    ServedModel s;
    s.names = {"stories"};
    s.root = dir;
    s.max_model_len = 256;
    s.tokenizer = pagoda::Tokenizer::from_file(dir);
    s.chat_template = std::make_shared<pagoda::ChatTemplate>(
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}");
    // Small limits keep each input cheap; the checks are the same code as with the defaults.
    s.limits.max_engine_requests = 64;
    s.limits.max_total_tokens = 1 << 14;
    return s;
  }();
  return m;
}

// Names the broken invariant on stderr, then traps (libFuzzer keeps the input).
#define check(cond)                                                         \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "fuzz_openai_request: %s broken\n", #cond);     \
      __builtin_trap();                                                     \
    }                                                                       \
  } while (0)

void check_job(const CompletionJob& job, const ServedModel& m) {
  const auto& lim = m.limits;
  check(job.n >= 1 && job.n <= lim.max_n);
  check(job.prompts.size() == job.params.size() && !job.prompts.empty());
  check(int64_t(job.prompts.size()) <= lim.max_engine_requests && job.prompts.size() % size_t(job.n) == 0);
  check(job.logprobs >= -1 && job.logprobs <= lim.max_logprobs);
  int64_t total = 0;
  for (size_t i = 0; i < job.prompts.size(); ++i) {
    const auto& ids = job.prompts[i];
    const auto& p = job.params[i];
    check(!ids.empty() && p.max_tokens >= 1 && int64_t(ids.size()) + p.max_tokens <= m.max_model_len);
    for (int32_t id : ids) check(id >= 0 && id < m.tokenizer->vocab_size());
    for (int32_t id : p.stop_token_ids) check(id >= 0 && id < m.tokenizer->vocab_size());
    check(int64_t(p.stop.size()) <= lim.max_stop_strings && int64_t(p.stop_token_ids.size()) <= lim.max_stop_token_ids);
    for (const auto& s : p.stop) check(!s.empty() && int64_t(s.size()) <= lim.max_stop_string_bytes);
    check(p.sampling.num_logprobs == std::max(job.logprobs, 0) && p.sampling.logprobs == (job.logprobs >= 0));
    pagoda::Sampler sampler(p.sampling);  // the engine's own validation must agree
    total += int64_t(ids.size()) + p.max_tokens;
  }
  check(total <= lim.max_total_tokens);
}

// Answers the first choices with the prompt's ids as generated tokens, a few per output.
void answer(const CompletionJob& job, const ServedModel& m) {
  pagoda::CompletionResponse whole(job, m), stream(job, m);
  const int32_t vocab = m.tokenizer->vocab_size();
  std::string events;
  const size_t choices = std::min<size_t>(job.prompts.size(), 2);
  for (size_t c = 0; c < choices; ++c) {
    const auto& ids = job.prompts[c];
    const size_t n = std::min<size_t>(ids.size(), 24);
    for (size_t i = 0; i < n;) {
      pagoda::RequestOutput out;
      for (size_t k = 0; k < 1 + i % 3 && i < n; ++k, ++i) {
        pagoda::SampleResult r;
        r.token = ids[i];
        r.logprob = -float(i) * 0.5f;
        for (int t = 0; t < job.params[c].sampling.num_logprobs; ++t)
          r.top.push_back({int32_t((ids[i] + t * 37) % vocab), -float(t)});
        out.new_token_ids.push_back(r.token);
        out.logprobs.push_back(std::move(r));
        out.text_delta += "x";
      }
      out.num_generated_tokens = int64_t(i);
      out.num_prompt_tokens = int64_t(ids.size());
      if (i == n) {
        out.finished = true;
        out.finish_reason = pagoda::FinishReason::kLength;
      }
      whole.add(int(c), out);
      events += stream.stream_events(int(c), out);
    }
  }
  const std::string body = whole.body();
  check(nlohmann::json::accept(body));
  events += stream.stream_end();
  check(events.size() >= 14 && events.compare(events.size() - 14, 14, "data: [DONE]\n\n") == 0);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const ServedModel& m = fuzz_model();
  const std::string body(reinterpret_cast<const char*>(data), size);
  for (int endpoint = 0; endpoint < 4; ++endpoint) {
    try {
      if (endpoint < 2) {
        const CompletionJob job = pagoda::parse_completion_request(body, endpoint == 1, m);
        check_job(job, m);
        answer(job, m);
      } else if (endpoint == 2) {
        check(nlohmann::json::accept(pagoda::tokenize_body(body, m)));
      } else {
        check(nlohmann::json::accept(pagoda::detokenize_body(body, m)));
      }
    } catch (const ApiError& e) {
      check(e.status == 400 || e.status == 404);
      check(e.message.size() < 4096);  // messages name values, never print them
    } catch (const pagoda::Error&) {
      // Expected for what the tokenizer or template refuses.
    } catch (...) {
      __builtin_trap();
    }
  }
  return 0;
}
