// Helpers of the server tests: an in-process server on stories260K, SSE parsing, test data.
#pragma once

#include <httplib.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "../cli/cli_runner.h"  // pagoda_bin, slurp, test_data_dir
#include "pagoda/config/attention_config.h"
#include "pagoda/engine/model_setup.h"
#include "pagoda/server/api_server.h"

namespace pagoda::test {

using Json = nlohmann::ordered_json;

inline std::string stories_dir() { return test_data_dir() + "/models/stories260K"; }

inline Json load_json(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return Json::parse(ss.str());
}

// A chat template for stories260K (which has none): "role: content" lines, then "assistant:".
inline const char* kTestChatTemplate =
    "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}assistant:{% endif %}";

// stories260K served in-process on 127.0.0.1, a free port, as "stories".
class InProcessServer {
 public:
  InProcessServer() {
    EngineArgs args;
    args.model.model = stories_dir() + "/hf";
    ValidatedArgs v = validate_engine_args(args);
    setup_ = std::make_unique<EngineSetup>(setup_engine(args, v));
    engine_ = std::make_unique<Engine>(*setup_->runner, setup_->tokenizer,
                                       engine_options_from_args(args, setup_->max_model_len));
    ServerOptions o;
    o.host = "127.0.0.1";
    o.port = 0;
    o.model_names = {"stories"};
    o.model_root = args.model.model;
    o.attention_backend = std::string(backend_name_str(setup_->layer_backends.front()));
    o.chat_template = kTestChatTemplate;
    server_ = std::make_unique<ApiServer>(*engine_, o);
    port_ = server_->bind();
    thread_ = std::thread([this] { server_->run(); });
  }
  ~InProcessServer() {
    server_->stop();
    thread_.join();
  }
  int port() const { return port_; }
  const Tokenizer& tokenizer() const { return *setup_->tokenizer; }
  std::unique_ptr<httplib::Client> client() const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port_);
    c->set_read_timeout(60, 0);
    return c;
  }

 private:
  std::unique_ptr<EngineSetup> setup_;
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<ApiServer> server_;
  int port_ = 0;
  std::thread thread_;
};

// The JSON payloads of an SSE body; "[DONE]" becomes a string.
inline std::vector<Json> sse_events(const std::string& body) {
  std::vector<Json> out;
  size_t pos = 0;
  while (pos < body.size()) {
    size_t end = body.find("\n\n", pos);
    if (end == std::string::npos) end = body.size();
    std::string ev = body.substr(pos, end - pos);
    pos = end + 2;
    if (ev.rfind("data: ", 0) != 0) continue;
    std::string data = ev.substr(6);
    out.push_back(data == "[DONE]" ? Json("[DONE]") : Json::parse(data));
  }
  return out;
}

// The value of the first sample line of `name` whose labels contain `label` ("" = any).
inline double metric_value(const std::string& text, const std::string& name, const std::string& label = "") {
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(name, 0) != 0 || (line.size() > name.size() && line[name.size()] != '{' && line[name.size()] != ' '))
      continue;
    if (!label.empty() && line.find(label) == std::string::npos) continue;
    return std::stod(line.substr(line.rfind(' ') + 1));
  }
  return -1;
}

}  // namespace pagoda::test
