// Logprobs of /v1/completions and /v1/chat/completions, streaming and whole, on stories260K run by the
// CPU engine: each token's logprob and its top logprobs equal a log-softmax computed here, in double, from
// the logits of a separate prefill of prompt + generated tokens; the tokens' strings (completions) and
// bytes (chat) rebuild the returned text, and text_offset indexes it. Partial UTF-8 tokens are checked on
// synthetic outputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "openai_test_util.h"
#include "pagoda/engine/engine.h"
#include "pagoda/model/cpu_model_runner.h"

namespace pagoda {
namespace {

using test::stories_served;
using Json = nlohmann::ordered_json;

const LoadedModel& stories_model() {
  static const LoadedModel m = load_model(test::stories_hf_dir());
  return m;
}

// One generated token as the response reports it, streaming or not.
struct Token {
  std::string token, bytes;
  double logprob = 0;
  int64_t offset = -1;
  std::vector<double> top;  // top logprob values, in response order
};
struct Choice {
  std::string text;
  std::vector<Token> tokens;
  std::vector<int32_t> ids;  // from the engine, for the reference
};

std::string bytes_text(const Json& b) {
  std::string s;
  for (const auto& x : b) s += char(x.get<int>());
  return s;
}

void collect(const Json& choice, bool chat, Choice& c) {
  if (chat) {
    if (choice.contains("message")) c.text += choice["message"]["content"].get<std::string>();
    else if (choice["delta"].contains("content")) c.text += choice["delta"]["content"].get<std::string>();
  } else {
    c.text += choice["text"].get<std::string>();
  }
  const Json& lp = choice["logprobs"];
  if (lp.is_null()) return;
  if (chat) {
    for (const auto& e : lp["content"]) {
      Token t{e["token"], bytes_text(e["bytes"]), e["logprob"].get<double>(), -1, {}};
      for (const auto& x : e["top_logprobs"]) t.top.push_back(x["logprob"].get<double>());
      c.tokens.push_back(std::move(t));
    }
  } else {
    for (size_t i = 0; i < lp["tokens"].size(); ++i) {
      Token t{lp["tokens"][i], "", lp["token_logprobs"][i].get<double>(), lp["text_offset"][i].get<int64_t>(), {}};
      for (const auto& [k, v] : lp["top_logprobs"][i].items()) t.top.push_back(v.get<double>());
      std::sort(t.top.rbegin(), t.top.rend());  // a JSON object: order is the writer's
      c.tokens.push_back(std::move(t));
    }
  }
}

// Runs a request through the engine and the response writer; returns its choices.
std::vector<Choice> run(const std::string& body, bool chat, bool stream) {
  const ServedModel& m = stories_served();
  const CompletionJob job = parse_completion_request(body, chat, m);
  CpuModelRunner runner(stories_model(), {.num_blocks = 64, .block_size = 16}, 1);
  Engine engine(runner, *m.tokenizer, {});
  CompletionResponse resp(job, m);
  std::vector<Choice> choices(job.prompts.size());
  std::vector<GenerateRequest> reqs;
  for (size_t i = 0; i < job.prompts.size(); ++i) reqs.push_back({job.prompts[i], job.params[i]});
  std::string events;
  engine.generate(reqs, [&](size_t i, const RequestOutput& o) {
    choices[i].ids.insert(choices[i].ids.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    if (stream) events += resp.stream_events(int(i), o);
    else resp.add(int(i), o);
  });
  if (!stream) {
    const Json j = Json::parse(resp.body());
    for (const auto& ch : j["choices"]) collect(ch, chat, choices[ch["index"].get<size_t>()]);
    return choices;
  }
  events += resp.stream_end();
  for (size_t pos = 0; pos < events.size();) {
    const size_t end = events.find("\n\n", pos);
    const std::string ev = events.substr(pos + 6, end - pos - 6);  // after "data: "
    pos = end + 2;
    if (ev == "[DONE]") break;
    const Json j = Json::parse(ev);
    for (const auto& ch : j["choices"]) collect(ch, chat, choices[ch["index"].get<size_t>()]);
  }
  return choices;
}

// log-softmax rows, in double, of the logits a single prefill of prompt + ids[0..n-2] gives at the
// positions that predicted ids.
std::vector<std::vector<double>> reference_logprobs(const std::vector<int32_t>& prompt, const std::vector<int32_t>& ids,
                                                    double* max_abs_logit) {
  CpuModelRunner runner(stories_model(), {.num_blocks = 64, .block_size = 16}, 1);
  ForwardBatch b;
  b.token_ids = prompt;
  b.token_ids.insert(b.token_ids.end(), ids.begin(), ids.end() - 1);
  const int32_t len = int32_t(b.token_ids.size());
  b.query_start_loc = {0, len};
  b.seq_lens = {len};
  b.max_blocks_per_seq = (len + 15) / 16;
  for (int i = 0; i < b.max_blocks_per_seq; ++i) b.block_tables.push_back(i);
  for (size_t i = 0; i < ids.size(); ++i) b.logits_indices.push_back(int32_t(prompt.size() + i) - 1);
  const std::vector<float> logits = runner.forward(b);
  const size_t vocab = size_t(runner.config().vocab_size);
  std::vector<std::vector<double>> out;
  for (size_t r = 0; r < ids.size(); ++r) {
    const float* row = logits.data() + r * vocab;
    double mx = -std::numeric_limits<double>::infinity();
    for (size_t v = 0; v < vocab; ++v) {
      mx = std::max(mx, double(row[v]));
      *max_abs_logit = std::max(*max_abs_logit, std::abs(double(row[v])));
    }
    double sum = 0;
    for (size_t v = 0; v < vocab; ++v) sum += std::exp(double(row[v]) - mx);
    std::vector<double> lp(vocab);
    for (size_t v = 0; v < vocab; ++v) lp[v] = double(row[v]) - mx - std::log(sum);
    out.push_back(std::move(lp));
  }
  return out;
}

size_t code_points(const std::string& s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80;
  return n;
}

void check_choices(const std::string& body, bool chat, bool stream, int top) {
  SCOPED_TRACE(std::string(chat ? "chat" : "completions") + (stream ? " streaming" : "") + ": " + body);
  const CompletionJob job = parse_completion_request(body, chat, stories_served());
  const std::vector<Choice> choices = run(body, chat, stream);
  for (size_t c = 0; c < choices.size(); ++c) {
    const Choice& ch = choices[c];
    ASSERT_EQ(ch.tokens.size(), ch.ids.size());
    ASSERT_FALSE(ch.ids.empty());
    double max_abs = 0;
    const auto ref = reference_logprobs(job.prompts[c], ch.ids, &max_abs);
    // The engine's logits come from decode steps and its log-softmax is in float; the reference's from one
    // prefill, in double. A float log-softmax of logits of magnitude L over V entries is off by a few ulps of
    // (L + log V); the decode and prefill logits agree to a few ulps of L (same kernels, other reduction
    // lengths). 16 ulps of (L + log V) covers both with room, and is far below any logprob gap that matters.
    const double tol = 16 * std::numeric_limits<float>::epsilon() * (max_abs + std::log(double(ref[0].size())));
    std::string rebuilt;
    for (size_t i = 0; i < ch.tokens.size(); ++i) {
      const Token& t = ch.tokens[i];
      std::vector<double> row = ref[i];
      EXPECT_NEAR(t.logprob, row[size_t(ch.ids[i])], tol) << "token " << i;
      std::sort(row.rbegin(), row.rend());
      ASSERT_EQ(t.top.size(), size_t(top));
      for (int k = 0; k < top; ++k) EXPECT_NEAR(t.top[size_t(k)], row[size_t(k)], tol) << "token " << i << " top " << k;
      if (chat) {
        EXPECT_EQ(t.token, t.bytes) << "a whole-character token's string is its bytes";
        EXPECT_FALSE(t.bytes.empty()) << "token " << i;
        rebuilt += t.bytes;
      } else {
        EXPECT_EQ(t.offset, int64_t(code_points(rebuilt))) << "token " << i;
        rebuilt += t.token;
      }
    }
    EXPECT_EQ(rebuilt, ch.text);
  }
}

TEST(OpenAiLogprobs, MatchTheModelsLogSoftmaxAndRebuildTheText) {
  const std::string common = R"("max_tokens": 24, "ignore_eos": true, "seed": 3, "n": 2, "temperature": 1.0)";
  for (bool stream : {false, true}) {
    for (int top : {0, 3}) {
      check_choices(std::string(R"({"prompt": ["Once upon", "Lily"], "logprobs": )") + std::to_string(top) + ", " +
                        common + ", \"stream\": " + (stream ? "true" : "false") + "}",
                    false, stream, top);
      const std::string top_field = top ? ", \"top_logprobs\": " + std::to_string(top) : "";
      check_choices(std::string(R"({"messages": [{"role": "user", "content": "Tell me a story"}], "logprobs": true)") +
                        top_field + ", " + common + ", \"stream\": " + (stream ? "true" : "false") + "}",
                    true, stream, top);
    }
  }
}

TEST(OpenAiLogprobs, GreedyWithoutTopLogprobsIsNotZero) {
  const std::vector<Choice> c =
      run(R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "max_tokens": 8, "temperature": 0})",
          true, false);
  ASSERT_EQ(c[0].tokens.size(), 8u);
  int nonzero = 0;
  for (const Token& t : c[0].tokens) nonzero += t.logprob < 0;
  EXPECT_GT(nonzero, 0);
  EXPECT_FALSE(c[0].tokens[0].bytes.empty());
}

// Tokens that are parts of one character (stories260K's byte-fallback tokens <0xC3> <0xA9>, "é"): each
// gets its bytes and a "bytes:\xNN" string, as vLLM writes them, and the offsets point at the character.
TEST(OpenAiLogprobs, PartialCharacterTokens) {
  const ServedModel& m = stories_served();
  const Tokenizer& tok = *m.tokenizer;
  const int32_t c3 = *tok.token_to_id("<0xC3>"), a9 = *tok.token_to_id("<0xA9>");
  const int32_t a = tok.encode("a", false)[0];
  for (bool chat : {false, true}) {
    const std::string body = chat ? R"({"messages": [{"role": "user", "content": "x"}], "logprobs": true, "top_logprobs": 1})"
                                  : R"({"prompt": "x", "logprobs": 1})";
    const CompletionJob job = parse_completion_request(body, chat, m);
    CompletionResponse resp(job, m);
    RequestOutput o;
    for (int32_t id : {a, c3, a9, a}) {
      o.new_token_ids.push_back(id);
      o.logprobs.push_back({id, -1.0f, {{id, -1.0f}}});
    }
    IncrementalDetokenizer detok(tok, true, std::span<const int>(job.prompts[0].data(), job.prompts[0].size()));
    for (int32_t id : o.new_token_ids) o.text_delta += detok.add(id);  // as the engine writes the text
    o.text_delta += detok.finish();
    o.finished = true;
    o.finish_reason = FinishReason::kLength;
    resp.add(0, o);
    const Json j = Json::parse(resp.body());
    const Json& lp = j["choices"][0]["logprobs"];
    const std::string text = j["choices"][0][chat ? "message" : "text"].is_string()
                                 ? j["choices"][0]["text"].get<std::string>()
                                 : j["choices"][0]["message"]["content"].get<std::string>();
    EXPECT_NE(text.find("\xc3\xa9"), std::string::npos);
    if (chat) {
      const Json& content = lp["content"];
      ASSERT_EQ(content.size(), 4u);
      EXPECT_EQ(content[1]["token"], "bytes:\\xc3");
      EXPECT_EQ(content[1]["bytes"], Json::array({0xc3}));
      EXPECT_EQ(content[2]["token"], "bytes:\\xa9");
      EXPECT_EQ(content[2]["bytes"], Json::array({0xa9}));
      EXPECT_EQ(content[2]["top_logprobs"][0]["bytes"], Json::array({0xa9}));
      std::string all;
      for (const auto& e : content) all += bytes_text(e["bytes"]);
      EXPECT_EQ(all, text);
    } else {
      EXPECT_EQ(lp["tokens"][1], "bytes:\\xc3");
      const int64_t at = int64_t(code_points(text.substr(0, text.find("\xc3\xa9"))));
      EXPECT_EQ(lp["text_offset"][1], at);
      EXPECT_EQ(lp["text_offset"][2], at);  // inside the same character
      EXPECT_EQ(lp["text_offset"][3], at + 1);
    }
  }
}

TEST(OpenAiLogprobs, TokensAsTokenIds) {
  const std::vector<Choice> c = run(
      R"({"prompt": "Once", "logprobs": 1, "max_tokens": 3, "temperature": 0, "return_tokens_as_token_ids": true})",
      false, false);
  ASSERT_EQ(c[0].tokens.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(c[0].tokens[i].token, "token_id:" + std::to_string(c[0].ids[i]));
}

}  // namespace
}  // namespace pagoda
