// Batch invariance of a model runner: a sequence's logits are bitwise identical whether it runs alone or
// inside a batch, at prefill (a step of whole prompts) and at decode (a step that mixes decode tokens with
// other sequences' prefill chunks). Shared by the CPU test and the GPU one (label gpu).
#pragma once

#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "pagoda/model/model_runner.h"

namespace pagoda::test {

struct InvarianceSeq {
  std::vector<int32_t> prompt;
  int first_chunk = 0;   // prompt tokens prefilled in step 1; the rest in step 2
  int first_block = 0;   // its blocks: [first_block, first_block + blocks_per_seq)
};

// Runs steps 1 and 2 of `seqs` (step 1: the first chunk of every prompt; step 2: the rest of every prompt
// still prefilling and one decode token `next` of every sequence whose prompt is done) and returns the
// logits of sequence `target` at its last token of each step.
inline std::pair<std::vector<float>, std::vector<float>> run_two_steps(ModelRunner& runner,
                                                                       const std::vector<InvarianceSeq>& seqs,
                                                                       size_t target, int32_t next, int blocks_per_seq) {
  const int vocab = runner.config().vocab_size;
  std::vector<float> out[2];
  for (int step = 0; step < 2; ++step) {
    ForwardBatch b;
    b.max_blocks_per_seq = blocks_per_seq;
    b.query_start_loc.push_back(0);
    int target_row = -1;
    for (size_t i = 0; i < seqs.size(); ++i) {
      const InvarianceSeq& s = seqs[i];
      const int total = int(s.prompt.size());
      std::vector<int32_t> ids;
      int ctx = 0;
      if (step == 0) {
        ids.assign(s.prompt.begin(), s.prompt.begin() + s.first_chunk);
        ctx = s.first_chunk;
      } else if (s.first_chunk < total) {
        ids.assign(s.prompt.begin() + s.first_chunk, s.prompt.end());
        ctx = total;
      } else {
        ids.push_back(next);
        ctx = total + 1;
      }
      b.token_ids.insert(b.token_ids.end(), ids.begin(), ids.end());
      b.query_start_loc.push_back(int32_t(b.token_ids.size()));
      b.seq_lens.push_back(ctx);
      for (int k = 0; k < blocks_per_seq; ++k) b.block_tables.push_back(s.first_block + k);
      if (i == target) target_row = int(b.logits_indices.size());
      b.logits_indices.push_back(int32_t(b.token_ids.size()) - 1);
    }
    std::vector<float> logits = runner.forward(b);
    out[step].assign(logits.begin() + size_t(target_row) * vocab, logits.begin() + size_t(target_row + 1) * vocab);
  }
  return {out[0], out[1]};
}

// The target prompt alone, then inside batches of each size in `batch_sizes` with random other prompts
// (1-40 tokens, some prefilled in two chunks so the target's decode step shares the step with prefill
// work); the target's logits must match bitwise. The cache needs batch * blocks_per_seq blocks.
inline void expect_batch_invariant(ModelRunner& runner, const std::vector<int>& batch_sizes, int blocks_per_seq,
                                   uint32_t seed) {
  std::mt19937 rng(seed);
  const int vocab = runner.config().vocab_size;
  auto random_prompt = [&](int len) {
    std::vector<int32_t> p(static_cast<size_t>(len));
    for (auto& t : p) t = int32_t(rng() % uint32_t(vocab));
    return p;
  };
  InvarianceSeq target{random_prompt(13), 13, 0};
  const int32_t next = int32_t(rng() % uint32_t(vocab));
  const auto alone = run_two_steps(runner, {target}, 0, next, blocks_per_seq);
  for (int n : batch_sizes) {
    std::vector<InvarianceSeq> seqs;
    const size_t at = size_t(n / 2);
    for (int i = 0; i < n; ++i) {
      if (size_t(i) == at) {
        seqs.push_back(target);
      } else {
        const int len = 1 + int(rng() % 40);
        seqs.push_back({random_prompt(len), i % 2 ? len : std::max(1, len / 2), 0});
      }
      seqs.back().first_block = i * blocks_per_seq;
    }
    const auto batched = run_two_steps(runner, seqs, at, next, blocks_per_seq);
    ASSERT_EQ(batched.first.size(), alone.first.size());
    EXPECT_EQ(std::memcmp(batched.first.data(), alone.first.data(), alone.first.size() * sizeof(float)), 0)
        << "prefill logits differ in a batch of " << n;
    EXPECT_EQ(std::memcmp(batched.second.data(), alone.second.data(), alone.second.size() * sizeof(float)), 0)
        << "decode logits differ in a batch of " << n;
  }
}

}  // namespace pagoda::test
