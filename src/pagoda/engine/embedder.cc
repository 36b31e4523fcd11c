#include "pagoda/engine/embedder.h"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"

namespace pagoda {

bool is_embedding_model_folder(const std::filesystem::path& folder) {
  std::error_code ec;
  const auto cfg = folder / "config.json";
  if (!std::filesystem::is_regular_file(cfg, ec)) return false;
  std::ifstream in(cfg);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return is_bert_config(j);
}

Embedder::Embedder(const std::filesystem::path& folder, int num_threads, int max_batch_tokens)
    : tokenizer_(Tokenizer::from_file(folder)), encoder_(BertEncoder::load(folder, num_threads)),
      max_batch_tokens_(std::max(max_batch_tokens, encoder_->config().max_position_embeddings)) {
  thread_ = std::thread([this] { worker(); });
}

Embedder::~Embedder() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

std::vector<int> Embedder::tokenize(const std::string& text) const {
  std::vector<int> ids = tokenizer_.encode(text, /*add_special_tokens=*/true, /*parse_special=*/false);
  const size_t max_len = size_t(encoder_->max_tokens_per_sequence());
  if (ids.size() > max_len) {
    const std::vector<int>& suffix = tokenizer_.special_suffix_ids();
    ids.resize(max_len - suffix.size());
    ids.insert(ids.end(), suffix.begin(), suffix.end());
  }
  return ids;
}

std::vector<std::vector<float>> Embedder::embed(const std::vector<std::vector<int>>& sequences) {
  if (sequences.empty()) return {};
  const int max_len = encoder_->config().max_position_embeddings;
  for (size_t s = 0; s < sequences.size(); ++s) {
    if (sequences[s].empty() || int(sequences[s].size()) > max_len)
      throw_config_error("input ", s, " has ", sequences[s].size(), " tokens; this model takes 1 to ", max_len);
    for (int id : sequences[s])
      if (id < 0 || id >= encoder_->config().vocab_size)
        throw_config_error("input ", s, " has token id ", id, ", outside 0..", encoder_->config().vocab_size - 1);
  }
  auto job = std::make_unique<Job>();
  job->sequences = sequences;
  std::future<std::vector<std::vector<float>>> result = job->done.get_future();
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(job));
  }
  cv_.notify_one();
  return result.get();
}

EmbeddingStats Embedder::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

void Embedder::worker() {
  for (;;) {
    std::vector<std::unique_ptr<Job>> jobs;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      // Whole jobs while they fit the step's token budget; the first always goes (each sequence fits).
      int64_t tokens = 0;
      while (!queue_.empty()) {
        int64_t t = 0;
        for (const auto& s : queue_.front()->sequences) t += int64_t(s.size());
        if (!jobs.empty() && tokens + t > max_batch_tokens_) break;
        tokens += t;
        jobs.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
    }
    std::vector<std::vector<int>> batch;
    for (const auto& j : jobs) batch.insert(batch.end(), j->sequences.begin(), j->sequences.end());
    int64_t tokens = 0;
    for (const auto& s : batch) tokens += int64_t(s.size());
    try {
      std::vector<std::vector<float>> out = encoder_->embed(batch);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.steps;
        stats_.sequences += int64_t(batch.size());
        stats_.tokens += tokens;
        stats_.max_batch = std::max(stats_.max_batch, int(batch.size()));
        stats_.recent_batches.push_back(int(batch.size()));
        if (stats_.recent_batches.size() > 256) stats_.recent_batches.erase(stats_.recent_batches.begin());
      }
      PAGODA_LOG_DEBUG("embedding step: ", batch.size(), " sequences from ", jobs.size(), " requests, ", tokens, " tokens");
      size_t at = 0;
      for (auto& j : jobs) {
        std::vector<std::vector<float>> mine(std::make_move_iterator(out.begin() + long(at)),
                                             std::make_move_iterator(out.begin() + long(at + j->sequences.size())));
        at += j->sequences.size();
        j->done.set_value(std::move(mine));
      }
    } catch (...) {
      for (auto& j : jobs) j->done.set_exception(std::current_exception());
    }
  }
}

}  // namespace pagoda
