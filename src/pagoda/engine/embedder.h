// Sentence embeddings from an encoder model folder (BERT family, model/bert.h): texts or token ids in,
// pooled vectors out, batched by the engine's continuous-batching Scheduler (scheduler/scheduler.h).
//
// Every sequence is a request of the scheduler: first come, first served, admitted under --max-num-seqs and
// --max-num-batched-tokens, its K/V in blocks of a paged cache that the scheduler allots. Requests that
// arrive while a step runs join the next one, so concurrent callers share forward passes. An encoder
// attends bidirectionally, so a sequence is computed whole in one step: chunked prefill and prefix caching
// are off (a prefix's K/V depend on the tokens after it), and every request finishes in the step it runs in.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <filesystem>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "pagoda/model/bert.h"
#include "pagoda/scheduler/scheduler.h"
#include "pagoda/tokenizer/tokenizer.h"

namespace pagoda {

struct EngineArgs;
struct ValidatedArgs;

// True when `folder` holds a config.json of an encoder model the Embedder runs.
bool is_embedding_model_folder(const std::filesystem::path& folder);
// The folder of the encoder model `model` names: a path, or a folder's name in pagoda's model cache
// (all-MiniLM-L6-v2 after scripts/fetch-models.sh); nullopt when neither holds one.
std::optional<std::filesystem::path> find_embedding_model(const std::string& model);

struct EmbedderOptions {
  BertLoadOptions encoder;          // threads and attention settings
  int max_num_seqs = 256;           // sequences per step at most
  int max_num_batched_tokens = 0;   // tokens per step at most; 0 = max(8192, the longest sequence)
  int max_model_len = 0;            // longest sequence (<= the position table); 0 = max_seq_length
};

// The options of an encoder model from the engine's flags. Flags that mean nothing for an encoder on the CPU
// are refused with a config error naming them (--device cuda, --dtype other than float32/auto, a quantized
// KV cache, GPU memory settings, another tokenizer or load format), never ignored; chunked prefill and prefix
// caching, on by default for generative models, are logged as off.
EmbedderOptions embedder_options_from_args(const EngineArgs& args, const ValidatedArgs& validated);

struct EmbeddingStats {
  int64_t steps = 0;       // forward passes run
  int64_t sequences = 0;   // sequences embedded
  int64_t tokens = 0;      // tokens embedded
  int max_batch = 0;       // most sequences in one step
  std::vector<int> recent_batches;  // sequences per step of the last 256 steps, oldest first
};

class Embedder {
 public:
  // Loads the encoder and the tokenizer of `folder` and starts the step thread.
  Embedder(const std::filesystem::path& folder, const EmbedderOptions& options);
  Embedder(const std::filesystem::path& folder, int num_threads);
  ~Embedder();
  Embedder(const Embedder&) = delete;
  Embedder& operator=(const Embedder&) = delete;

  const Tokenizer& tokenizer() const { return tokenizer_; }
  const BertEncoder& encoder() const { return *encoder_; }
  int dimensions() const { return encoder_->dimensions(); }
  // The longest sequence embed() takes, and the one tokenize() truncates to.
  int max_tokens() const { return max_tokens_; }

  // [CLS] text [SEP], truncated to max_tokens() (the last kept id is [SEP], as sentence-transformers'
  // truncation).
  std::vector<int> tokenize(const std::string& text) const;
  // Embeds the sequences through the scheduler (thread-safe; blocks until done). Throws a config error for
  // an empty sequence, one longer than max_tokens() or an id outside the vocabulary, before running any.
  std::vector<std::vector<float>> embed(const std::vector<std::vector<int>>& sequences);
  EmbeddingStats stats() const;

 private:
  struct Job {
    std::vector<std::vector<int>> sequences;
    std::vector<std::vector<float>> vectors;
    size_t remaining = 0;
    std::promise<std::vector<std::vector<float>>> done;
  };
  void worker();

  Tokenizer tokenizer_;
  std::unique_ptr<BertEncoder> encoder_;
  std::unique_ptr<Scheduler> scheduler_;  // the step thread's only
  std::unique_ptr<float[]> kv_cache_;     // one layer's blocks: every layer rewrites the step's K/V
  int max_tokens_ = 0;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stop_ = false;
  EmbeddingStats stats_;
  std::thread thread_;
};

}  // namespace pagoda
