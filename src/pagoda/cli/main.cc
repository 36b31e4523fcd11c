// pagoda: an LLM inference engine with pluggable attention backends and vLLM-compatible command lines.
#include <cstdio>
#include <string>
#include <vector>

#include "pagoda/cli/commands.h"
#include "pagoda/cli/command_line.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace {

constexpr const char* kUsage =
    "usage: pagoda <command> [options]\n"
    "\n"
    "commands:\n"
    "  serve [MODEL]       serve a model over an OpenAI-compatible HTTP API\n"
    "  embed MODEL         sentence embeddings of texts with an encoder model (JSON on stdout)\n"
    "  generate            run a model on a prompt and stream the text (default model: the built-in smollm2:135m)\n"
    "  bench latency       time one batch of fixed-length requests (tokens/s, decode bandwidth)\n"
    "  bench throughput    offline throughput of many requests (requests/s, tokens/s)\n"
    "  bench serve         load a running server: throughput, TTFT / TPOT / ITL percentiles\n"
    "  bench perplexity    perplexity over a text file, and KL divergence of KV cache dtypes against auto\n"
    "  bench attention     time every attention backend valid here on a model and load; recommend one, with its flags\n"
    "  backends list       the attention backends, what each supports, whether it is built into this binary\n"
    "  backends select     which attention backend pagoda would choose for a GPU, a model and settings, and why\n"
    "\n"
    "Run `pagoda <command> --help` for the options of a command.\n";

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help") {
    std::fputs(kUsage, args.empty() ? stderr : stdout);
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::puts("pagoda 0.1.0");
    return 0;
  }
  const std::string cmd = args[0];
  std::vector<std::string> rest(args.begin() + 1, args.end());
  try {
    if (cmd == "generate") return pagoda::run_generate(rest);
    if (cmd == "embed") return pagoda::run_embed(rest);
    if (cmd == "serve") return pagoda::run_serve(rest);
    if (cmd == "bench") {
      std::vector<std::string> sub(rest.empty() ? rest.end() : rest.begin() + 1, rest.end());
      if (!rest.empty() && rest[0] == "latency") return pagoda::run_bench_latency(sub);
      if (!rest.empty() && rest[0] == "throughput") return pagoda::run_bench_throughput(sub);
      if (!rest.empty() && rest[0] == "serve") return pagoda::run_bench_serve(sub);
      if (!rest.empty() && rest[0] == "perplexity") return pagoda::run_bench_perplexity(sub);
      if (!rest.empty() && rest[0] == "attention") return pagoda::run_bench_attention(sub);
      pagoda::report_error("usage: pagoda bench {latency,throughput,serve,perplexity,attention} [options] (see pagoda bench latency --help)");
      return 2;
    }
    if (cmd == "backends") {
      if (rest.empty() || rest[0] == "-h" || rest[0] == "--help") {
        std::fputs("usage: pagoda backends {list,select} [options]\n", rest.empty() ? stderr : stdout);
        return rest.empty() ? 2 : 0;
      }
      std::vector<std::string> sub(rest.begin() + 1, rest.end());
      if (rest[0] == "list") return pagoda::run_backends_list(sub);
      if (rest[0] == "select") return pagoda::run_backends_select(sub);
      pagoda::report_error("unknown command: backends " + rest[0] + " (expected list or select)");
      return 2;
    }
    pagoda::report_error("unknown command: " + cmd + "\n" + kUsage);
    return 2;
  } catch (const pagoda::Error& e) {
    pagoda::report_error(e.what());
    return e.exit_code();
  } catch (const std::exception& e) {
    pagoda::report_error(std::string("internal error: ") + e.what());
    return 1;
  }
}
