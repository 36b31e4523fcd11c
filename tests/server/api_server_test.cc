// The OpenAI-compatible server over HTTP, in-process on stories260K: the golden greedy text through
// /v1/completions (whole and streamed), chat, errors, /v1/models, /health, /metrics, /tokenize and
// /detokenize, a client that hangs up mid-stream, and 64 concurrent streaming clients.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>

#include "pagoda/core/strings.h"

#include "server_test_util.h"

namespace pagoda::test {
namespace {

class ApiServerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() { server_ = new InProcessServer(); }
  static void TearDownTestSuite() {
    delete server_;
    server_ = nullptr;
  }
  static httplib::Result post(const std::string& path, const std::string& body) {
    return server_->client()->Post(path.c_str(), body, "application/json");
  }
  static std::string get(const std::string& path) {
    auto r = server_->client()->Get(path.c_str());
    return r ? r->body : "";
  }
  // The golden greedy text's first n tokens, decoded.
  static std::string golden_prefix(size_t n) {
    Json golden = load_json(stories_dir() + "/golden.json");
    std::vector<int> ids = golden["hf_reference"]["greedy_token_ids"].get<std::vector<int>>();
    ids.resize(n);
    return server_->tokenizer().decode(ids, true);
  }
  static InProcessServer* server_;
};
InProcessServer* ApiServerTest::server_ = nullptr;

const char* kGreedy64 = R"({"model": "stories", "prompt": "", "max_tokens": 64, "temperature": 0})";

TEST_F(ApiServerTest, CompletionGreedyMatchesGolden) {
  auto r = post("/v1/completions", kGreedy64);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "stories");
  ASSERT_EQ(j["choices"].size(), 1u);
  const std::string text = j["choices"][0]["text"];
  EXPECT_EQ(text, golden_prefix(64));
  EXPECT_EQ(load_json(stories_dir() + "/golden.json")["greedy"]["text"].get<std::string>().rfind(text, 0), 0u);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 1);
  EXPECT_EQ(j["usage"]["completion_tokens"], 64);
  EXPECT_EQ(j["usage"]["total_tokens"], 65);
  // The prompt as token ids (BOS) gives the same text.
  r = post("/v1/completions", R"({"prompt": [1], "max_tokens": 64, "temperature": 0})");
  ASSERT_TRUE(r);
  EXPECT_EQ(Json::parse(r->body)["choices"][0]["text"], text);
}

TEST_F(ApiServerTest, StreamedCompletionConcatenatesToTheSameText) {
  auto r = post("/v1/completions",
                R"({"prompt": "", "max_tokens": 64, "temperature": 0, "stream": true, "stream_options": {"include_usage": true}})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_THAT(r->get_header_value("Content-Type"), testing::HasSubstr("text/event-stream"));
  auto events = sse_events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text, finish;
  for (size_t i = 0; i + 2 < events.size(); ++i) {
    ASSERT_EQ(events[i]["choices"].size(), 1u);
    text += events[i]["choices"][0]["text"].get<std::string>();
    if (!events[i]["choices"][0]["finish_reason"].is_null()) finish = events[i]["choices"][0]["finish_reason"];
  }
  EXPECT_EQ(text, golden_prefix(64));
  EXPECT_EQ(finish, "length");
  const Json& usage = events[events.size() - 2];
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["completion_tokens"], 64);
}

TEST_F(ApiServerTest, CompletionOptions) {
  // n > 1 with a seed: n choices; a batch of prompts; stop strings; logprobs.
  auto r = post("/v1/completions", R"({"prompt": "Once upon a time", "max_tokens": 8, "n": 3, "seed": 7})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  ASSERT_EQ(j["choices"].size(), 3u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(j["choices"][i]["index"], i);
  EXPECT_EQ(j["usage"]["completion_tokens"], 24);
  r = post("/v1/completions", R"({"prompt": ["", "Once"], "max_tokens": 4, "temperature": 0})");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["choices"].size(), 2u);
  r = post("/v1/completions", R"({"prompt": "", "max_tokens": 64, "temperature": 0, "stop": ["Lily"]})");
  ASSERT_TRUE(r);
  j = Json::parse(r->body);
  EXPECT_EQ(j["choices"][0]["text"], "Once upon a time, there was a little girl named ");
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(j["choices"][0]["stop_reason"], "Lily");
  r = post("/v1/completions", R"({"prompt": "", "max_tokens": 3, "temperature": 0, "logprobs": 2})");
  ASSERT_TRUE(r);
  j = Json::parse(r->body);
  const Json& lp = j["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 3u);
  ASSERT_EQ(lp["top_logprobs"].size(), 3u);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_LE(lp["token_logprobs"][0].get<double>(), 0.0);
}

TEST_F(ApiServerTest, ChatCompletion) {
  const char* body = R"({"model": "stories", "messages": [{"role": "user", "content": "Tell me a story"}],
                         "max_tokens": 16, "temperature": 0, "logprobs": true, "top_logprobs": 2})";
  auto r = post("/v1/chat/completions", body);
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200) << r->body;
  Json j = Json::parse(r->body);
  EXPECT_EQ(j["object"], "chat.completion");
  EXPECT_EQ(j["choices"][0]["message"]["role"], "assistant");
  const std::string content = j["choices"][0]["message"]["content"];
  EXPECT_FALSE(content.empty());
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"].size(), 16u);
  EXPECT_EQ(j["choices"][0]["logprobs"]["content"][0]["top_logprobs"].size(), 2u);
  // The prompt is the template's rendering, encoded without special tokens.
  auto t = post("/tokenize", R"({"messages": [{"role": "user", "content": "Tell me a story"}]})");
  ASSERT_TRUE(t);
  EXPECT_EQ(j["usage"]["prompt_tokens"], Json::parse(t->body)["count"]);
  // Streamed: a role chunk, content deltas that concatenate to the same text, [DONE].
  Json sj = Json::parse(body);
  sj["stream"] = true;
  r = post("/v1/chat/completions", sj.dump());
  ASSERT_TRUE(r);
  auto events = sse_events(r->body);
  ASSERT_GE(events.size(), 3u);
  EXPECT_EQ(events.front()["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(events.front()["object"], "chat.completion.chunk");
  EXPECT_EQ(events.back(), "[DONE]");
  std::string text;
  for (size_t i = 0; i + 1 < events.size(); ++i)
    if (events[i]["choices"][0]["delta"].contains("content")) text += events[i]["choices"][0]["delta"]["content"].get<std::string>();
  EXPECT_EQ(text, content);
}

TEST_F(ApiServerTest, Errors) {
  struct Case {
    const char* path;
    const char* body;
    int status;
  };
  const Case cases[] = {
      {"/v1/completions", "{not json", 400},
      {"/v1/completions", "[1, 2]", 400},
      {"/v1/completions", R"({"max_tokens": 4})", 400},                            // no prompt
      {"/v1/completions", R"({"prompt": "x", "temperature": -1})", 400},
      {"/v1/completions", R"({"prompt": "x", "top_p": 0})", 400},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": -1})", 400},
      {"/v1/completions", R"({"prompt": "x", "n": 0})", 400},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": "many"})", 400},
      {"/v1/completions", R"({"prompt": "x", "logprobs": 50})", 400},
      {"/v1/completions", R"({"prompt": [1, 99999]})", 400},                        // outside the vocabulary
      {"/v1/completions", R"({"prompt": [], "max_tokens": 4})", 400},
      {"/v1/completions", R"({"prompt": "x", "max_tokens": 100000})", 400},         // over max_model_len
      {"/v1/completions", R"({"model": "gpt-4", "prompt": "x"})", 404},
      {"/v1/chat/completions", R"({"max_tokens": 4})", 400},                       // no messages
      {"/v1/chat/completions", R"({"messages": "hi"})", 400},
      {"/v1/chat/completions", R"({"model": "nope", "messages": [{"role": "user", "content": "hi"}]})", 404},
      {"/v1/nothing", "{}", 404},
      {"/detokenize", R"({"tokens": [99999]})", 400},
      {"/tokenize", "{", 400},
  };
  for (const Case& c : cases) {
    auto r = post(c.path, c.body);
    ASSERT_TRUE(r) << c.body;
    EXPECT_EQ(r->status, c.status) << c.path << " " << c.body << " -> " << r->body;
    Json j = Json::parse(r->body, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << r->body;
    ASSERT_TRUE(j.contains("error")) << r->body;
    EXPECT_TRUE(j["error"]["message"].is_string());
    EXPECT_TRUE(j["error"]["type"].is_string());
    EXPECT_TRUE(j["error"].contains("param"));
    EXPECT_EQ(j["error"]["code"], c.status);
  }
  auto r = server_->client()->Get("/no/such/route");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], 404);
  // The too-long message names the limit.
  r = post("/v1/completions", R"({"prompt": "x", "max_tokens": 100000})");
  EXPECT_THAT(r->body, testing::HasSubstr("maximum context length is 512 tokens"));
}

TEST_F(ApiServerTest, ModelsHealthTokenize) {
  Json models = Json::parse(get("/v1/models"));
  EXPECT_EQ(models["object"], "list");
  ASSERT_EQ(models["data"].size(), 1u);
  EXPECT_EQ(models["data"][0]["id"], "stories");
  EXPECT_EQ(models["data"][0]["max_model_len"], 512);
  auto h = server_->client()->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  auto t = post("/tokenize", R"({"prompt": "Once upon a time", "add_special_tokens": false})");
  ASSERT_TRUE(t);
  ASSERT_EQ(t->status, 200) << t->body;
  Json tj = Json::parse(t->body);
  EXPECT_EQ(tj["count"], tj["tokens"].size());
  EXPECT_EQ(tj["max_model_len"], 512);
  auto d = post("/detokenize", Json{{"tokens", tj["tokens"]}}.dump());
  ASSERT_TRUE(d);
  ASSERT_EQ(d->status, 200) << d->body;
  EXPECT_EQ(Json::parse(d->body)["prompt"], "Once upon a time");
  t = post("/tokenize", R"({"prompt": ""})");
  EXPECT_EQ(Json::parse(t->body)["tokens"], Json::parse("[1]"));
}

TEST_F(ApiServerTest, MetricsCountRequests) {
  std::string before = get("/metrics");
  EXPECT_THAT(before, testing::HasSubstr("pagoda_attention_backend_info{backend=\"CPU_ATTN\"} 1"));
  for (const char* name : {"pagoda_num_requests_running", "pagoda_num_requests_waiting", "pagoda_kv_cache_usage_perc",
                           "pagoda_prefix_cache_hit_rate", "pagoda_time_to_first_token_seconds_bucket",
                           "pagoda_inter_token_latency_seconds_count", "pagoda_e2e_request_latency_seconds_sum"})
    EXPECT_THAT(before, testing::HasSubstr(name));
  const double gen0 = metric_value(before, "pagoda_generation_tokens_total");
  const double prompt0 = metric_value(before, "pagoda_prompt_tokens_total");
  const double len0 = metric_value(before, "pagoda_request_success_total", "finished_reason=\"length\"");
  const double e2e0 = metric_value(before, "pagoda_e2e_request_latency_seconds_count");
  ASSERT_GE(gen0, 0);
  ASSERT_TRUE(post("/v1/completions", kGreedy64));
  std::string after = get("/metrics");
  EXPECT_EQ(metric_value(after, "pagoda_generation_tokens_total"), gen0 + 64);
  EXPECT_EQ(metric_value(after, "pagoda_prompt_tokens_total"), prompt0 + 1);
  EXPECT_EQ(metric_value(after, "pagoda_request_success_total", "finished_reason=\"length\""), len0 + 1);
  EXPECT_EQ(metric_value(after, "pagoda_e2e_request_latency_seconds_count"), e2e0 + 1);
  EXPECT_EQ(metric_value(after, "pagoda_num_requests_running"), 0);
  EXPECT_EQ(metric_value(after, "pagoda_kv_cache_usage_perc"), 0);
}

TEST_F(ApiServerTest, ClientHangingUpMidStreamAbortsItsRequest) {
  const double abort0 = metric_value(get("/metrics"), "pagoda_request_success_total", "finished_reason=\"abort\"");
  auto c = server_->client();
  int chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.set_header("Content-Type", "application/json");
  req.body = R"({"prompt": "", "max_tokens": 500, "ignore_eos": true, "stream": true})";
  req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) { return ++chunks < 2; };  // hang up
  auto r = c->send(req);
  EXPECT_GE(chunks, 2);
  c->stop();
  // The server notices at its next write, aborts the request and frees its blocks.
  std::string m;
  for (int i = 0; i < 200; ++i) {
    m = get("/metrics");
    if (metric_value(m, "pagoda_request_success_total", "finished_reason=\"abort\"") > abort0 &&
        metric_value(m, "pagoda_num_requests_running") == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric_value(m, "pagoda_request_success_total", "finished_reason=\"abort\""), abort0 + 1) << m;
  EXPECT_EQ(metric_value(m, "pagoda_kv_cache_usage_perc"), 0);
  auto h = server_->client()->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
}

TEST_F(ApiServerTest, SixtyFourConcurrentStreamingClients) {
  constexpr int kClients = 64;
  std::atomic<int> complete{0};
  std::mutex failures_mu;
  std::vector<std::string> failures;
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      Json body = {{"prompt", "Once upon a time"}, {"max_tokens", 24}, {"seed", i}, {"stream", true}, {"ignore_eos", true}};
      auto r = post("/v1/completions", body.dump());
      if (!r || r->status != 200) {
        std::lock_guard<std::mutex> lock(failures_mu);
        failures.push_back(r ? str_cat("HTTP ", r->status, ": ", r->body) : httplib::to_string(r.error()));
        return;
      }
      auto events = sse_events(r->body);
      if (events.empty() || events.back() != "[DONE]") return;
      std::string finish;
      for (size_t k = 0; k + 1 < events.size(); ++k)
        if (!events[k]["choices"][0]["finish_reason"].is_null()) finish = events[k]["choices"][0]["finish_reason"];
      if (finish == "length") ++complete;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(complete.load(), kClients) << join(failures, "\n");
  auto h = server_->client()->Get("/health");
  ASSERT_TRUE(h);
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(metric_value(get("/metrics"), "pagoda_kv_cache_usage_perc"), 0);
}

}  // namespace
}  // namespace pagoda::test
