// Runs the pagoda binary in a test and captures stdout, stderr and the exit status.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <unistd.h>

namespace pagoda::test {

struct CliResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline std::string pagoda_bin() {
  if (const char* b = std::getenv("PAGODA_BIN")) return b;
  return std::string(PAGODA_BINARY_DIR) + "/pagoda";
}

inline std::string test_data_dir() {
  if (const char* d = std::getenv("PAGODA_TEST_DATA")) return d;
  return PAGODA_TEST_DATA_DEFAULT;
}

inline std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// `args` is a shell fragment (quote as needed); `env` a prefix like "PAGODA_X=1 ".
inline CliResult run_pagoda(const std::string& args, const std::string& env = "") {
  static int counter = 0;
  std::string base = "/tmp/pagoda_cli_" + std::to_string(::getpid()) + "_" + std::to_string(counter++);
  std::string cmd = env + "'" + pagoda_bin() + "' " + args + " >" + base + ".out 2>" + base + ".err </dev/null";
  int status = std::system(cmd.c_str());
  CliResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = slurp(base + ".out");
  r.err = slurp(base + ".err");
  std::remove((base + ".out").c_str());
  std::remove((base + ".err").c_str());
  return r;
}

}  // namespace pagoda::test
