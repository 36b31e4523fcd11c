// Test helpers: a tiny driver that runs sequences through CpuModelRunner with a block allocator,
// prefilling in chunks and decoding one token at a time, several sequences per forward call.
#pragma once

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "pagoda/kv_cache/block_allocator.h"
#include "pagoda/model/cpu_model_runner.h"
#include "pagoda/ops/sample.h"

namespace pagoda::test {

inline std::string data_dir() {
  const char* env = std::getenv("PAGODA_TEST_DATA");
  return env && *env ? env : PAGODA_TEST_DATA_DEFAULT;
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Sequence {
  std::vector<int32_t> prompt;
  int max_new_tokens = 0;
  std::vector<int32_t> output;
  std::vector<std::vector<float>> prompt_logits;  // every prompt position, when keep_prompt_logits
  std::vector<float> last_prompt_logits;
  // driver state
  int32_t cached = 0;  // tokens already in the KV cache
  SequenceBlocks blocks;
  bool keep_prompt_logits = false;

  int32_t total() const { return int32_t(prompt.size() + output.size()); }
};

// Greedy generation for all `seqs` together: each step takes up to `chunk` prompt tokens of every sequence
// still prefilling and one token of every decoding sequence, in one forward call.
inline void run_greedy(CpuModelRunner& runner, BlockAllocator& alloc, std::vector<Sequence>& seqs, int chunk) {
  const int bs = runner.cache_options().block_size;
  const int vocab = runner.config().vocab_size;
  for (;;) {
    ForwardBatch b;
    b.query_start_loc.push_back(0);
    struct Entry {
      Sequence* s;
      int32_t first_pos, n;
      int sample_row;  // logits row of the token after which the sequence emits, or -1
      int first_row;   // first logits row of prompt positions (keep_prompt_logits), or -1
    };
    std::vector<Entry> entries;
    for (auto& s : seqs) {
      const int32_t total = s.total();
      const bool wants_token = int(s.output.size()) < s.max_new_tokens;
      if (s.cached >= total) continue;
      if (!wants_token && s.cached >= int32_t(s.prompt.size())) continue;
      const int32_t prompt_len = int32_t(s.prompt.size());
      const int32_t n = s.cached < prompt_len ? std::min<int32_t>(chunk, prompt_len - s.cached) : 1;
      Entry e{&s, s.cached, n, -1, -1};
      const int32_t start = b.num_tokens();
      for (int32_t i = 0; i < n; ++i) {
        const int32_t pos = s.cached + i;
        b.token_ids.push_back(pos < prompt_len ? s.prompt[size_t(pos)] : s.output[size_t(pos - prompt_len)]);
      }
      if (s.keep_prompt_logits && s.cached < prompt_len) {
        e.first_row = int(b.logits_indices.size());
        for (int32_t i = 0; i < n; ++i) b.logits_indices.push_back(start + i);
      }
      if (s.cached + n == total && wants_token) {
        if (e.first_row >= 0) {
          e.sample_row = e.first_row + n - 1;
        } else {
          e.sample_row = int(b.logits_indices.size());
          b.logits_indices.push_back(start + n - 1);
        }
      }
      s.blocks.reserve(alloc, s.cached + n, bs);
      b.seq_lens.push_back(s.cached + n);
      b.query_start_loc.push_back(b.num_tokens());
      entries.push_back(e);
    }
    if (entries.empty()) return;
    int max_blocks = 0;
    for (auto& e : entries) max_blocks = std::max(max_blocks, int(e.s->blocks.blocks().size()));
    b.max_blocks_per_seq = max_blocks;
    b.block_tables.assign(entries.size() * size_t(max_blocks), 0);
    for (size_t i = 0; i < entries.size(); ++i)
      std::copy(entries[i].s->blocks.blocks().begin(), entries[i].s->blocks.blocks().end(),
                b.block_tables.begin() + long(i) * max_blocks);
    const std::vector<float> logits = runner.forward(b);
    for (auto& e : entries) {
      Sequence& s = *e.s;
      if (e.first_row >= 0)
        for (int32_t i = 0; i < e.n; ++i)
          s.prompt_logits.emplace_back(logits.begin() + long(e.first_row + i) * vocab, logits.begin() + long(e.first_row + i + 1) * vocab);
      s.cached += e.n;
      if (e.sample_row >= 0) {
        std::span<const float> row(logits.data() + size_t(e.sample_row) * size_t(vocab), size_t(vocab));
        if (s.output.empty()) s.last_prompt_logits.assign(row.begin(), row.end());
        s.output.push_back(argmax(row));
      }
    }
  }
}

}  // namespace pagoda::test
