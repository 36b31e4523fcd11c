// `pagoda serve` as a subprocess: the startup line with the chosen port, --api-key, --served-model-name,
// the positional model's error, and SIGTERM (also during a stream) ending the process with status 0.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <chrono>
#include <regex>

#include "server_test_util.h"

namespace pagoda::test {
namespace {

// `pagoda serve ARGS` with its output in a log file; the port is read from the startup line.
class ServeProcess {
 public:
  explicit ServeProcess(const std::string& args) {
    static int counter = 0;
    log_ = "/tmp/pagoda_serve_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + ".log";
    std::string cmd = "exec '" + pagoda_bin() + "' serve " + args;
    pid_ = ::fork();
    if (pid_ == 0) {
      int fd = ::open(log_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    const std::regex line("Starting pagoda API server on http://127\\.0\\.0\\.1:([0-9]+)");
    for (int i = 0; i < 600 && port_ == 0; ++i) {
      std::smatch m;
      std::string text = slurp(log_);
      if (std::regex_search(text, m, line)) port_ = std::stoi(m[1]);
      else if (::waitpid(pid_, &status_, WNOHANG) == pid_) { exited_ = true; break; }
      else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~ServeProcess() {
    if (!exited_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
    }
    std::remove(log_.c_str());
  }
  int port() const { return port_; }
  std::string log() const { return slurp(log_); }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }
  // Sends SIGTERM and waits up to `timeout_s` for the exit; returns the exit status (-1: did not exit).
  int terminate(int timeout_s) {
    ::kill(pid_, SIGTERM);
    for (int i = 0; i < timeout_s * 20; ++i) {
      if (::waitpid(pid_, &status_, WNOHANG) == pid_) {
        exited_ = true;
        return WIFEXITED(status_) ? WEXITSTATUS(status_) : -1;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

 private:
  std::string log_;
  pid_t pid_ = -1;
  int port_ = 0;
  int status_ = 0;
  bool exited_ = false;
};

TEST(ServeCli, ApiKeyModelNamesAndSigterm) {
  ServeProcess p("'" + stories_dir() + "/hf' --host 127.0.0.1 --port 0 --api-key sekret --served-model-name a,b");
  ASSERT_GT(p.port(), 0) << p.log();
  auto c = p.client();
  auto r = c.Get("/v1/models");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], 401);
  r = c.Get("/v1/models", {{"Authorization", "Bearer wrong"}});
  EXPECT_EQ(r->status, 401);
  r = c.Post("/v1/completions", R"({"prompt": "", "max_tokens": 4})", "application/json");
  EXPECT_EQ(r->status, 401);
  httplib::Headers auth = {{"Authorization", "Bearer sekret"}};
  r = c.Get("/v1/models", auth);
  ASSERT_EQ(r->status, 200);
  Json models = Json::parse(r->body);
  ASSERT_EQ(models["data"].size(), 2u);
  EXPECT_EQ(models["data"][0]["id"], "a");
  EXPECT_EQ(models["data"][1]["id"], "b");
  r = c.Post("/v1/completions", auth, R"({"model": "b", "prompt": "", "max_tokens": 4, "temperature": 0})", "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(Json::parse(r->body)["model"], "b");
  EXPECT_EQ(c.Get("/health")->status, 200);  // outside /v1: no key needed
  EXPECT_EQ(p.terminate(30), 0) << p.log();
}

TEST(ServeCli, SigtermDuringAStreamExitsCleanly) {
  ServeProcess p("'" + stories_dir() + "/hf' --host 127.0.0.1 --port 0");
  ASSERT_GT(p.port(), 0) << p.log();
  std::atomic<int> chunks{0};
  std::atomic<bool> got_first{false};
  std::thread client([&] {
    auto c = p.client();
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.set_header("Content-Type", "application/json");
    req.body = R"({"prompt": "", "max_tokens": 500, "ignore_eos": true, "stream": true})";
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      ++chunks;
      got_first = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a slow reader keeps the request running
      return true;
    };
    c.send(req);
  });
  for (int i = 0; i < 400 && !got_first; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  EXPECT_TRUE(got_first.load());
  EXPECT_EQ(p.terminate(30), 0) << p.log();
  client.join();
  EXPECT_THAT(p.log(), testing::HasSubstr("Received SIGTERM"));
}

// With no model, serve takes the built-in one; when it is not fetched, one line says how to fetch it.
TEST(ServeCli, NoModelServesTheBuiltinOne) {
  std::string out = "/tmp/pagoda_serve_nomodel_" + std::to_string(::getpid());
  int st = std::system(("PAGODA_MODEL_CACHE=/nonexistent/pagoda-models '" + pagoda_bin() + "' serve --port 0 >" + out +
                        " 2>&1 </dev/null").c_str());
  EXPECT_EQ(WEXITSTATUS(st), 2);
  EXPECT_THAT(slurp(out), testing::HasSubstr("No model given: serving the built-in smollm2:135m"));
  EXPECT_THAT(slurp(out), testing::HasSubstr("the built-in model smollm2:135m is not downloaded"));
  std::remove(out.c_str());
}

}  // namespace
}  // namespace pagoda::test

namespace pagoda::test {
namespace {

// `pagoda bench serve` against `pagoda serve`: every request completes and the report has the percentiles.
TEST(ServeCli, BenchServeAgainstTheServer) {
  ServeProcess p("'" + stories_dir() + "/hf' --host 127.0.0.1 --port 0");
  ASSERT_GT(p.port(), 0) << p.log();
  std::string out_file = "/tmp/pagoda_bench_serve_" + std::to_string(::getpid()) + ".txt";
  std::string trace_file = "/tmp/pagoda_bench_serve_trace_" + std::to_string(::getpid()) + ".json";
  std::string cmd = "'" + pagoda_bin() + "' bench serve --port " + std::to_string(p.port()) +
                    " --num-prompts 24 --random-input-len 12 --random-output-len 16 --request-rate 200 "
                    "--max-concurrency 8 --save-trace " + trace_file + " >" + out_file + " 2>/dev/null";
  int status = std::system(cmd.c_str());
  std::string out = slurp(out_file);
  std::remove(out_file.c_str());
  EXPECT_EQ(WEXITSTATUS(status), 0) << out;
  EXPECT_NE(out.find("Successful requests:                     24"), std::string::npos) << out;
  EXPECT_NE(out.find("Total generated tokens:                  384"), std::string::npos) << out;
  EXPECT_NE(out.find("P99 TTFT (ms):"), std::string::npos) << out;
  EXPECT_NE(out.find("Mean ITL (ms):"), std::string::npos) << out;
  // --save-trace: every request's arrival, first token, end and lengths (what bench attention replays).
  Json trace = load_json(trace_file);
  std::remove(trace_file.c_str());
  ASSERT_EQ(trace["requests"].size(), 24u) << trace.dump();
  for (const Json& r : trace["requests"]) {
    EXPECT_EQ(r["prompt_tokens"], 12) << r.dump();
    EXPECT_EQ(r["output_tokens"], 16) << r.dump();
    EXPECT_GE(r["arrival_s"].get<double>(), 0.0) << r.dump();
    EXPECT_GT(r["ttft_s"].get<double>(), 0.0) << r.dump();
    EXPECT_GE(r["e2e_s"].get<double>(), r["ttft_s"].get<double>()) << r.dump();
  }
  EXPECT_EQ(p.terminate(20), 0);
  // No server: a clear error, exit status 1.
  status = std::system(("'" + pagoda_bin() + "' bench serve --port 1 --num-prompts 1 >/dev/null 2>&1").c_str());
  EXPECT_EQ(WEXITSTATUS(status), 1);
}

}  // namespace
}  // namespace pagoda::test

namespace pagoda::test {
namespace {

// A client that gives up on a non-streamed completion: the server notices at a heartbeat write, aborts the
// request and frees its blocks. qwen3-tiny (token ids only) generating 4 x 3000 tokens takes seconds on a CPU.
TEST(ServeCli, ClientHangingUpOnANonStreamedCompletionAbortsIt) {
  ServeProcess p("'" + test_data_dir() + "/reference/qwen3-tiny' --host 127.0.0.1 --port 0 --served-model-name tiny");
  ASSERT_GT(p.port(), 0) << p.log();
  auto c = p.client();
  c.set_read_timeout(0, 500000);  // give up after half a second
  auto r = c.Post("/v1/completions", R"({"prompt": [1, 2, 3], "max_tokens": 3000, "n": 4, "ignore_eos": true})",
                  "application/json");
  EXPECT_FALSE(r);  // timed out
  auto m = p.client();
  std::string text;
  for (int i = 0; i < 300; ++i) {
    auto res = m.Get("/metrics");
    ASSERT_TRUE(res);
    text = res->body;
    if (metric_value(text, "pagoda_request_success_total", "finished_reason=\"abort\"") >= 4 &&
        metric_value(text, "pagoda_num_requests_running") == 0)
      break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(metric_value(text, "pagoda_request_success_total", "finished_reason=\"abort\""), 4) << text;
  EXPECT_EQ(metric_value(text, "pagoda_request_success_total", "finished_reason=\"length\""), 0) << text;
  EXPECT_EQ(metric_value(text, "pagoda_kv_cache_usage_perc"), 0) << text;
  EXPECT_EQ(p.terminate(20), 0);
}

}  // namespace
}  // namespace pagoda::test
