// Entry points of the pagoda subcommands. Each takes the arguments after its name and returns the exit
// status (0 success, 1 failure at run time, 2 invalid arguments or configuration).
#pragma once

#include <string>
#include <vector>

namespace pagoda {

int run_backends_list(const std::vector<std::string>& args);
int run_backends_select(const std::vector<std::string>& args);
int run_generate(const std::vector<std::string>& args);
int run_embed(const std::vector<std::string>& args);
int run_serve(const std::vector<std::string>& args);
int run_bench_latency(const std::vector<std::string>& args);
int run_bench_throughput(const std::vector<std::string>& args);
int run_bench_serve(const std::vector<std::string>& args);
int run_bench_perplexity(const std::vector<std::string>& args);
int run_bench_attention(const std::vector<std::string>& args);

}  // namespace pagoda
