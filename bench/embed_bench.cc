// Sentence embeddings on the CPU: pagoda's BERT encoder (model/bert.h) on a model folder, batches of B
// sequences of exactly L tokens ([CLS], L - 2 random word-piece ids, [SEP]), repeated for at least
// --min-time seconds. Prints one JSON line per (batch, length): embeddings/s, ms per batch, embeddings per
// second of the process's CPU time (all threads; steadier than wall time on a loaded machine) and the
// forward pass's GFLOP/s.
// bench/embed_bench.py runs it beside sentence-transformers on the same inputs and threads.
//
// usage: embed_bench --model DIR [--batches 1,32] [--lengths 16,128,512] [--threads N] [--min-time 2] [--seed 1]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "pagoda/core/logging.h"
#include "pagoda/model/bert.h"

namespace {

double process_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
  return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

std::vector<int> ints(const std::string& s) {
  std::vector<int> out;
  size_t pos = 0;
  while (pos <= s.size()) {
    const size_t comma = s.find(',', pos);
    out.push_back(std::atoi(s.substr(pos, comma - pos).c_str()));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model;
  std::vector<int> batches = {1, 32}, lengths = {16, 128, 512};
  int threads = 1;
  double min_time = 2.0;
  unsigned seed = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--model") model = v;
    else if (a == "--batches") batches = ints(v);
    else if (a == "--lengths") lengths = ints(v);
    else if (a == "--threads") threads = std::atoi(v.c_str());
    else if (a == "--min-time") min_time = std::atof(v.c_str());
    else if (a == "--seed") seed = unsigned(std::atoi(v.c_str()));
    else {
      std::fprintf(stderr, "usage: embed_bench --model DIR [--batches 1,32] [--lengths 16,128,512] [--threads N] "
                           "[--min-time 2] [--seed 1]\n");
      return 2;
    }
  }
  if (model.empty() || threads < 1) {
    std::fprintf(stderr, "embed_bench: give --model DIR (and --threads >= 1)\n");
    return 2;
  }
  pagoda::set_log_level(pagoda::LogLevel::kWarning);
  const auto enc = pagoda::BertEncoder::load(model, threads);
  std::mt19937 rng(seed);
  // Word pieces of the BERT uncased vocabulary live above the special and unused ids (< 1000).
  std::uniform_int_distribution<int> piece(1000, enc->config().vocab_size - 1);
  for (int L : lengths) {
    for (int B : batches) {
      std::vector<std::vector<int>> seqs(static_cast<size_t>(B), std::vector<int>(static_cast<size_t>(L)));
      for (auto& s : seqs) {
        for (int& id : s) id = piece(rng);
        s.front() = 101;  // [CLS]
        s.back() = 102;   // [SEP]
      }
      enc->embed(seqs);  // warm-up
      int reps = 0;
      const double cpu0 = process_cpu_seconds();
      const auto t0 = std::chrono::steady_clock::now();
      double elapsed = 0;
      do {
        enc->embed(seqs);
        ++reps;
        elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      } while (elapsed < min_time);
      // Multiply-adds x 2 of one sequence: the linear layers per token, attention's q.k and p.v per pair.
      const pagoda::BertConfig& c = enc->config();
      const double h = c.hidden_size, inter = c.intermediate_size;
      const double flops = c.num_layers * (2.0 * L * (4 * h * h + 2 * h * inter) + 4.0 * L * L * h);
      std::printf("{\"engine\": \"pagoda\", \"batch\": %d, \"length\": %d, \"threads\": %d, \"embeddings_per_s\": %.2f, "
                  "\"ms_per_batch\": %.3f, \"embeddings_per_cpu_s\": %.2f, \"gflop_per_s\": %.1f}\n",
                  B, L, threads, double(B) * reps / elapsed, 1e3 * elapsed / reps,
                  double(B) * reps / (process_cpu_seconds() - cpu0), flops * B * reps / elapsed * 1e-9);
      std::fflush(stdout);
    }
  }
  return 0;
}
