// server/openai_request: parse_completion_request, tokenize_body and detokenize_body called directly, no
// HTTP. Per class of defect: errors name the field and its JSON type and never echo the value; integers are
// range-checked at 64 bits before narrowing; every field of the table works or is refused by name;
// request limits refuse costly requests before anything is allocated per engine request; deep bodies are a
// 400.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "openai_test_util.h"

namespace pagoda {
namespace {

using test::stories_served;
using Json = nlohmann::ordered_json;

CompletionJob parse(const std::string& body, bool chat = false, const ServedModel& m = stories_served()) {
  return parse_completion_request(body, chat, m);
}

// The ApiError of a body that must be refused.
ApiError refusal(const std::string& body, bool chat = false, const ServedModel& m = stories_served()) {
  try {
    parse(body, chat, m);
  } catch (const ApiError& e) {
    return e;
  }
  ADD_FAILURE() << "accepted: " << body.substr(0, 200);
  return {};
}

std::string completion(const std::string& fields) { return R"({"prompt": "Once", )" + fields + "}"; }
std::string chat_body(const std::string& fields) {
  return R"({"messages": [{"role": "user", "content": "hi"}], )" + fields + "}";
}

// --- Errors name the field and the JSON type, never the value.

TEST(OpenAiRequest, WrongTypesNameFieldAndType) {
  struct Case {
    std::string fields, param, type;
  } cases[] = {
      {R"("max_tokens": [1, 2])", "max_tokens", "must be an integer, got an array"},
      {R"("n": "2")", "n", "must be an integer, got a string"},
      {R"("temperature": {"a": 1})", "temperature", "must be a number, got an object"},
      {R"("stream": 1)", "stream", "must be a boolean, got an integer"},
      {R"("top_k": true)", "top_k", "must be an integer, got a boolean"},
      {R"("stop": 5)", "stop", "must be a string or a list of strings, got an integer"},
      {R"("seed": 1.5)", "seed", "must be an integer, got a fractional number"},
      {R"("user": 7)", "user", "must be a string, got an integer"},
      {R"("logprobs": true)", "logprobs", "must be an integer, got a boolean"},
  };
  for (const Case& c : cases) {
    ApiError e = refusal(completion(c.fields));
    EXPECT_EQ(e.status, 400);
    EXPECT_EQ(e.param, c.param) << c.fields;
    EXPECT_EQ(e.message, "'" + c.param + "' " + c.type) << c.fields;
  }
  ApiError e = refusal(chat_body(R"("logprobs": 1)"), true);
  EXPECT_EQ(e.message, "'logprobs' must be a boolean, got an integer");
}

// A value nested deep inside a field (a megabyte long or 100,000 deep) is never printed back or walked.
TEST(OpenAiRequest, DeepAndHugeValuesAreNotEchoed) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  for (const std::string& body : {completion(R"("max_tokens": )" + deep), R"({"prompt": )" + deep + "}", deep}) {
    ApiError e = refusal(body);
    EXPECT_EQ(e.status, 400);
    EXPECT_LT(e.message.size(), 300u);
  }
  // Within the depth bound but big: the message stays short.
  const std::string big = "[" + std::string(1 << 20, ' ') + R"("x"])";
  ApiError e = refusal(completion(R"("max_tokens": )" + big));
  EXPECT_EQ(e.message, "'max_tokens' must be an integer, got an array");
  for (const char* ep : {"tokenize", "detokenize"}) {
    const std::string body = std::string(R"({"prompt": )") + deep + R"(, "tokens": )" + deep + "}";
    try {
      if (std::string(ep) == "tokenize") tokenize_body(body, stories_served());
      else detokenize_body(body, stories_served());
      ADD_FAILURE() << ep << " accepted a deep body";
    } catch (const ApiError& err) {
      EXPECT_EQ(err.status, 400);
      EXPECT_NE(err.message.find("nest"), std::string::npos) << err.message;
    }
  }
  try {
    tokenize_body(R"({"prompt": [[[1]]]})", stories_served());
    ADD_FAILURE();
  } catch (const ApiError& err) {
    EXPECT_EQ(err.message, "'prompt' must be a string, got an array");
  }
}

// --- Integers at 64 bits, checked before they are narrowed.

TEST(OpenAiRequest, IntegersAreCheckedBeforeNarrowing) {
  // 2^32 + 1 once wrapped to 1.
  EXPECT_EQ(refusal(completion(R"("n": 4294967297)")).param, "n");
  EXPECT_EQ(refusal(completion(R"("max_tokens": 4294967297)")).message,
            "'max_tokens' is too large: 4294967297. This model's maximum context length is 256 tokens and your "
            "request has 2 input tokens (4294967297 > 256 - 2).");
  EXPECT_EQ(refusal(completion(R"("max_tokens": -4294967295)")).message, "'max_tokens' must be >= 1, got -4294967295");
  EXPECT_EQ(refusal(completion(R"("logprobs": 4294967297)")).message, "'logprobs' must be in [0, 20], got 4294967297");
  // len + max_tokens once overflowed past the context check and narrowed to -1.
  for (const char* big : {"9223372036854775807", "9223372036854775806", "2147483648"}) {
    ApiError e = refusal(completion(std::string(R"("max_tokens": )") + big));
    EXPECT_EQ(e.param, "max_tokens") << big;
    EXPECT_NE(e.message.find(std::string("is too large: ") + big), std::string::npos) << e.message;
    EXPECT_EQ(refusal(chat_body(std::string(R"("max_completion_tokens": )") + big), true).param, "max_completion_tokens");
  }
  EXPECT_EQ(refusal(completion(R"("n": 18446744073709551615)")).message,
            "'n' is out of range: 18446744073709551615 does not fit in 64 bits");
  EXPECT_EQ(refusal(completion(R"("seed": 1e300)")).param, "seed");
  EXPECT_EQ(refusal(completion(R"("stop_token_ids": [4294967297])")).param, "stop_token_ids");
  EXPECT_EQ(refusal(completion(R"("prompt": [4294967297])")).param, "prompt");
  EXPECT_EQ(refusal(completion(R"("top_k": -4294967297)")).param, "top_k");
  // top_k beyond int32 is refused (not wrapped to 1); up to int32 it keeps every token past the vocabulary.
  EXPECT_EQ(refusal(completion(R"("top_k": 4294967297)")).message,
            "'top_k' must be -1 or 0 (disabled) or in [1, 2147483647], got 4294967297");
  EXPECT_EQ(parse(completion(R"("top_k": 2147483647)")).params[0].sampling.top_k, 2147483647);
  // Integral floats are integers (pydantic's lax mode).
  EXPECT_EQ(parse(completion(R"("n": 2.0)")).n, 2);
  EXPECT_EQ(parse(completion(R"("max_tokens": 1e1)")).params[0].max_tokens, 10);
  // Any int64 seed.
  EXPECT_EQ(parse(completion(R"("seed": -9223372036854775808)")).params[0].sampling.seed, uint64_t(1) << 63);
  EXPECT_EQ(parse(completion(R"("seed": 9223372036854775807)")).params[0].sampling.seed, (uint64_t(1) << 63) - 1);
}

TEST(OpenAiRequest, RangesAsVllm) {
  const char* refused[] = {
      R"("n": 0)", R"("max_tokens": 0)", R"("top_k": -2)", R"("temperature": -0.5)", R"("top_p": 0)",
      R"("top_p": 1.0000001)", R"("min_p": -0.1)", R"("min_p": 1.5)", R"("presence_penalty": 2.5)",
      R"("frequency_penalty": -2.1)", R"("repetition_penalty": 0)", R"("logprobs": 21)", R"("logprobs": -1)",
      R"("stop_token_ids": [512])", R"("stop_token_ids": [-1])", R"("prompt": [1, 512])", R"("temperature": 1e400)",
  };
  for (const char* f : refused) EXPECT_EQ(refusal(completion(f)).status, 400) << f;
  EXPECT_EQ(refusal(chat_body(R"("max_completion_tokens": 0)"), true).param, "max_completion_tokens");
  EXPECT_EQ(refusal(chat_body(R"("logprobs": true, "top_logprobs": 21)"), true).param, "top_logprobs");
  EXPECT_EQ(refusal(chat_body(R"("top_logprobs": 2)"), true).param, "top_logprobs");  // without logprobs
  const char* accepted[] = {
      R"("top_k": -1)", R"("top_k": 0)", R"("top_k": 1)", R"("temperature": 0)", R"("top_p": 1)", R"("min_p": 1)",
      R"("presence_penalty": -2)", R"("frequency_penalty": 2)", R"("repetition_penalty": 100)", R"("logprobs": 0)",
      R"("logprobs": 20)", R"("stop_token_ids": [0, 511])", R"("max_tokens": 1)",
  };
  for (const char* f : accepted) EXPECT_NO_THROW(parse(completion(f))) << f;
}

// --- The field table: each field works, is informational, or is refused by name unless off.

TEST(OpenAiRequest, EveryFieldOfTheTable) {
  int implemented = 0, refused = 0;
  for (const RequestField& f : request_fields()) {
    for (bool chat : {false, true}) {
      if (!(f.endpoints & (chat ? kChatEndpoint : kCompletionsEndpoint)) || !f.example) continue;
      const std::string name = f.name;
      if (name == "prompt" || name == "messages") continue;
      const std::string field = "\"" + name + "\": " + f.example;
      const std::string body = chat ? chat_body(field) : completion(field);
      SCOPED_TRACE(body);
      switch (f.support) {
        case FieldSupport::kImplemented:
        case FieldSupport::kInformational:
          EXPECT_NO_THROW(parse(body, chat));
          ++implemented;
          break;
        case FieldSupport::kOffOnly: {
          ApiError e = refusal(body, chat);
          EXPECT_EQ(e.status, 400);
          EXPECT_EQ(e.message, "'" + name + "' is not supported by pagoda yet");
          EXPECT_EQ(e.param, name);
          // Null and every off value are accepted.
          const std::string null_body = chat ? chat_body("\"" + name + "\": null") : completion("\"" + name + "\": null");
          EXPECT_NO_THROW(parse(null_body, chat));
          for (const char* off : f.off) {
            if (!off) break;
            const std::string off_field = "\"" + name + "\": " + off;
            EXPECT_NO_THROW(parse(chat ? chat_body(off_field) : completion(off_field), chat)) << off_field;
          }
          ++refused;
          break;
        }
      }
    }
  }
  EXPECT_GT(implemented, 40);
  EXPECT_GT(refused, 60);
  // best_of: off when equal to n.
  EXPECT_NO_THROW(parse(completion(R"("n": 2, "best_of": 2)")));
  EXPECT_EQ(refusal(completion(R"("n": 2, "best_of": 3)")).param, "best_of");
  // Chat-only fields are unknown to completions: ignored (with a warning), as vLLM does.
  EXPECT_NO_THROW(parse(completion(R"("tools": [{"type": "function"}], "made_up_field": {"x": [1]})")));
  EXPECT_NO_THROW(parse(chat_body(R"("suffix": "x", "made_up_field": 1)"), true));
}

TEST(OpenAiRequest, ImplementedFieldsTakeEffect) {
  CompletionJob j = parse(completion(
      R"("n": 3, "max_tokens": 5, "temperature": 0.5, "top_p": 0.5, "top_k": 7, "min_p": 0.25, "seed": 11,
         "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.5, "stop": ["a", ""],
         "stop_token_ids": [3], "ignore_eos": true, "skip_special_tokens": false, "logprobs": 0,
         "request_id": "r1", "return_tokens_as_token_ids": true)"));
  ASSERT_EQ(j.params.size(), 3u);
  const RequestParams& p = j.params[2];
  EXPECT_EQ(j.id, "cmpl-r1");
  EXPECT_EQ(p.max_tokens, 5);
  EXPECT_EQ(p.sampling.temperature, 0.5f);
  EXPECT_EQ(p.sampling.top_p, 0.5f);
  EXPECT_EQ(p.sampling.top_k, 7);
  EXPECT_EQ(p.sampling.min_p, 0.25f);
  EXPECT_EQ(p.sampling.seed, 13u);
  EXPECT_EQ(p.sampling.presence_penalty, 0.5f);
  EXPECT_EQ(p.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(p.sampling.repetition_penalty, 1.5f);
  EXPECT_EQ(p.stop, std::vector<std::string>{"a"});
  EXPECT_EQ(p.stop_token_ids, std::vector<int32_t>{3});
  EXPECT_TRUE(p.ignore_eos);
  EXPECT_FALSE(p.skip_special_tokens);
  EXPECT_TRUE(p.sampling.logprobs);
  EXPECT_EQ(p.sampling.num_logprobs, 0);
  EXPECT_TRUE(j.return_tokens_as_token_ids);

  // add_special_tokens: completions add BOS by default, chat does not.
  const auto with = parse(completion("\"max_tokens\": 1")).prompts[0];
  const auto without = parse(completion(R"("max_tokens": 1, "add_special_tokens": false)")).prompts[0];
  EXPECT_EQ(with.size(), without.size() + 1);
  EXPECT_EQ(with[0], 1);
  EXPECT_NE(parse(chat_body(R"("add_special_tokens": true)"), true).prompts[0][0],
            parse(chat_body(R"("add_special_tokens": false)"), true).prompts[0][0]);

  // truncate_prompt_tokens keeps the last tokens.
  const std::string long_prompt = R"({"prompt": [1, 2, 3, 4, 5, 6], "max_tokens": 1, "truncate_prompt_tokens": 4})";
  EXPECT_EQ(parse(long_prompt).prompts[0], (std::vector<int32_t>{3, 4, 5, 6}));
  EXPECT_EQ(refusal(R"({"prompt": [1], "truncate_prompt_tokens": 0})").param, "truncate_prompt_tokens");

  // Chat: add_generation_prompt, continue_final_message, documents and chat_template_kwargs reach the template.
  const Tokenizer& tok = *stories_served().tokenizer;
  auto text = [&](const CompletionJob& job) {
    return tok.decode(std::vector<int>(job.prompts[0].begin(), job.prompts[0].end()), false);
  };
  EXPECT_EQ(text(parse(chat_body("\"n\": 1"), true)), "user: hi\nassistant:");
  EXPECT_EQ(text(parse(chat_body(R"("add_generation_prompt": false)"), true)), "user: hi\n");
  const std::string cont = R"({"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "Once upon"}],
                                "continue_final_message": true})";
  EXPECT_EQ(text(parse(cont, true)), "user: hi\nassistant: Once upon");
  EXPECT_EQ(refusal(R"({"messages": [{"role": "user", "content": "hi"}], "continue_final_message": true,
                        "add_generation_prompt": true})", true).param, "continue_final_message");
  ServedModel m = stories_served();
  m.chat_template = std::make_shared<ChatTemplate>("{{ documents[0]['text'] }}|{{ flavour }}");
  EXPECT_EQ(text(parse(chat_body(R"("documents": [{"title": "t", "text": "doc"}], "chat_template_kwargs": {"flavour": "x"})"),
                       true, m)),
            "doc|x");
}

// --- Admission limits: refused before any per-engine-request copy is made.

TEST(OpenAiRequest, LimitsBoundTheCostOfARequest) {
  // The attack: 400 prompts x n 128 x 1000 stop strings in 16 KB.
  std::string prompts = "[";
  for (int i = 0; i < 400; ++i) prompts += std::string(i ? "," : "") + "\"a\"";
  prompts += "]";
  std::string stops = "[";
  for (int i = 0; i < 1000; ++i) stops += std::string(i ? "," : "") + "\"s" + std::to_string(i) + "\"";
  stops += "]";
  ApiError e = refusal(R"({"prompt": )" + prompts + R"(, "n": 128, "stop": )" + stops + "}");
  EXPECT_EQ(e.status, 400);
  EXPECT_NE(e.message.find("limit"), std::string::npos) << e.message;

  ServedModel m = stories_served();
  m.limits.max_prompts_per_request = 3;
  m.limits.max_n = 4;
  m.limits.max_engine_requests = 6;
  m.limits.max_stop_strings = 2;
  m.limits.max_stop_string_bytes = 4;
  m.limits.max_stop_token_ids = 2;
  m.limits.max_messages = 2;
  m.limits.max_total_tokens = 100;
  m.limits.max_logprobs = 5;
  struct Case {
    std::string body;
    bool chat;
    std::string param, words;
  } cases[] = {
      {R"({"prompt": ["a", "b", "c", "d"]})", false, "prompt", "4 prompts, more than the limit of 3"},
      {R"({"prompt": ["a", "b"], "n": 4})", false, "n", "8 generations"},
      {R"({"prompt": "a", "n": 5})", false, "n", "must be in [1, 4]"},
      {R"({"prompt": "a", "stop": ["a", "b", "c"]})", false, "stop", "3 strings, more than the limit of 2"},
      {R"({"prompt": "a", "stop": "abcde"})", false, "stop", "5 bytes"},
      {R"({"prompt": "a", "stop_token_ids": [1, 2, 3]})", false, "stop_token_ids", "3 token ids"},
      {R"({"prompt": "a", "logprobs": 6})", false, "logprobs", "[0, 5]"},
      {R"({"prompt": ["a", "b"], "n": 3, "max_tokens": 20})", false, "max_tokens", "tokens in all"},
      {R"({"messages": [{"role": "user"}, {"role": "user"}, {"role": "user"}]})", true, "messages", "3 messages"},
      {R"({"messages": [{"role": "user", "content": "hi"}], "n": 2})", true, "max_tokens", "tokens in all"},
  };
  for (const Case& c : cases) {
    ApiError err = refusal(c.body, c.chat, m);
    EXPECT_EQ(err.param, c.param) << c.body;
    EXPECT_NE(err.message.find(c.words), std::string::npos) << c.body << " -> " << err.message;
  }
  EXPECT_NO_THROW(parse(R"({"prompt": ["a", "b", "c"], "n": 2, "max_tokens": 10, "stop": ["abcd", "b"]})", false, m));
}

TEST(OpenAiRequest, PromptShapes) {
  EXPECT_EQ(parse(R"({"prompt": [[1, 2], [1, 3, 4]], "max_tokens": 1, "n": 2})").prompts.size(), 4u);
  EXPECT_EQ(refusal(R"({"prompt": []})").param, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": [[]]})").message, "the prompt is empty (no tokens)");
  EXPECT_EQ(refusal(R"({"prompt": ["a", 1]})").message, "'prompt' is a list of strings but holds an integer");
  EXPECT_EQ(refusal(R"({"prompt": [[1], "a"]})").message, "'prompt' is a list of token id lists but holds a string");
  EXPECT_EQ(refusal(R"({"prompt": [1, "a"]})").message, "'prompt' must hold token ids (integers), got a string");
  EXPECT_EQ(refusal(R"({"prompt": {"a": 1}})").param, "prompt");
  EXPECT_EQ(refusal(R"({"prompt": null})").message, "'prompt' is required");
  EXPECT_EQ(refusal(R"([1])").message, "the request body must be a JSON object, got an array");
  EXPECT_EQ(refusal(R"({"messages": [1]})", true).message, "each message must be an object, got an integer");
  EXPECT_EQ(refusal(R"({"messages": [{"role": 1}]})", true).param, "messages");
  EXPECT_EQ(refusal(R"({"messages": "hi"})", true).message, "'messages' must be a list of messages, got a string");
  EXPECT_EQ(refusal(R"({"prompt": "a", "model": "other"})").status, 404);
}

TEST(OpenAiRequest, TokenizeAndDetokenize) {
  const ServedModel& m = stories_served();
  Json t = Json::parse(tokenize_body(R"({"prompt": "Once upon", "return_token_strs": true})", m));
  EXPECT_EQ(t["count"], t["tokens"].size());
  EXPECT_EQ(t["token_strs"].size(), t["tokens"].size());
  Json d = Json::parse(detokenize_body(Json{{"tokens", t["tokens"]}}.dump(), m));
  EXPECT_EQ(d["prompt"], "<s> Once upon");  // special tokens kept, as vLLM's /detokenize
  auto refused = [&](const std::string& body, bool tokenize) {
    try {
      tokenize ? tokenize_body(body, m) : detokenize_body(body, m);
    } catch (const ApiError& e) {
      return e;
    }
    ADD_FAILURE() << body;
    return ApiError{};
  };
  EXPECT_EQ(refused(R"({"tokens": [512]})", false).param, "tokens");
  EXPECT_EQ(refused(R"({"tokens": [1.5]})", false).message, "'tokens' must be an integer, got a fractional number");
  EXPECT_EQ(refused(R"({"tokens": "x"})", false).message, "'tokens' must be a list of token ids, got a string");
  EXPECT_EQ(refused(R"({"prompt": 5})", true).message, "'prompt' must be a string, got an integer");
  EXPECT_EQ(refused(R"({"prompt": "a", "add_special_tokens": "yes"})", true).param, "add_special_tokens");
}

}  // namespace
}  // namespace pagoda
