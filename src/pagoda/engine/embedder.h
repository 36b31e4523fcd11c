// Sentence embeddings from an encoder model folder (BERT family, model/bert.h): texts or token ids in,
// pooled vectors out. The Embedder tokenizes and truncates; its batcher runs the requests of many callers
// as shared steps: whatever is queued when a step starts (up to max_batch_tokens tokens) is packed into
// one forward pass, so concurrent requests batch together.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "pagoda/model/bert.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

// True when `folder` holds a config.json of an encoder model the Embedder runs.
bool is_embedding_model_folder(const std::filesystem::path& folder);

struct EmbeddingStats {
  int64_t steps = 0;       // forward passes run
  int64_t sequences = 0;   // sequences embedded
  int64_t tokens = 0;      // tokens embedded
  int max_batch = 0;       // most sequences in one step
  std::vector<int> recent_batches;  // sequences per step of the last 256 steps, oldest first
};

class Embedder {
 public:
  // Loads the encoder and the tokenizer of `folder`. max_batch_tokens bounds one step (>= the longest
  // sequence the model takes).
  Embedder(const std::filesystem::path& folder, int num_threads, int max_batch_tokens = 16384);
  ~Embedder();
  Embedder(const Embedder&) = delete;
  Embedder& operator=(const Embedder&) = delete;

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const BertEncoder& encoder() const { return *encoder_; }
  int dimensions() const { return encoder_->dimensions(); }

  // [CLS] text [SEP], truncated to encoder().max_tokens_per_sequence() (the last kept id is [SEP], as
  // sentence-transformers' truncation).
  std::vector<int> tokenize(const std::string& text) const;
  // Embeds the sequences through the batcher (thread-safe; blocks until done). Throws the encoder's errors
  // for an empty sequence, one too long or an id outside the vocabulary, without running the others.
  std::vector<std::vector<float>> embed(const std::vector<std::vector<int>>& sequences);
  EmbeddingStats stats() const;

 private:
  struct Job {
    std::vector<std::vector<int>> sequences;
    std::promise<std::vector<std::vector<float>>> done;
  };
  void worker();

  Tokenizer tokenizer_;
  std::unique_ptr<BertEncoder> encoder_;
  int max_batch_tokens_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stop_ = false;
  EmbeddingStats stats_;
  std::thread thread_;
};

}  // namespace pagoda
