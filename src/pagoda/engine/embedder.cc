#include "pagoda/engine/embedder.h"

#include <algorithm>
#include <fstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "pagoda/attention/startup.h"
#include "pagoda/config/engine_args.h"
#include "pagoda/core/error.h"
#include "pagoda/core/logging.h"
#include "pagoda/model/builtin_models.h"

namespace pagoda {

bool is_embedding_model_folder(const std::filesystem::path& folder) {
  std::error_code ec;
  const auto cfg = folder / "config.json";
  if (!std::filesystem::is_regular_file(cfg, ec)) return false;
  std::ifstream in(cfg);
  const nlohmann::json j = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  return is_bert_config(j);
}

std::optional<std::filesystem::path> find_embedding_model(const std::string& model) {
  if (model.empty()) return std::nullopt;
  std::error_code ec;
  for (const std::filesystem::path& p : {std::filesystem::path(model), model_cache_dir() / model})
    if (std::filesystem::is_directory(p, ec) && is_embedding_model_folder(p)) return p;
  return std::nullopt;
}

EmbedderOptions embedder_options_from_args(const EngineArgs& args, const ValidatedArgs& validated) {
  const EngineArgs defaults;
  auto refuse = [](const std::string& flag, const std::string& why) {
    throw_config_error(flag, ": ", why, " (encoder models run in float32 on the CPU)");
  };
  if (args.device.device == "cuda") refuse("--device cuda", "the BERT encoder has no CUDA path yet");
  if (validated.dtype != DTypeChoice::kAuto && validated.dtype != DTypeChoice::kFloat32)
    refuse("--dtype " + args.model.dtype, "only auto and float32 are supported");
  if (!args.model.tokenizer.empty() && args.model.tokenizer != args.model.model)
    refuse("--tokenizer", "the tokenizer is the model folder's own");
  if (args.model.revision != defaults.model.revision) refuse("--revision", "encoder models are loaded from a local folder");
  if (args.model.load_format != "auto" && args.model.load_format != "safetensors")
    refuse("--load-format " + args.model.load_format, "encoder weights are read from safetensors");
  if (validated.kv_cache_dtype != "auto")
    refuse("--kv-cache-dtype " + validated.kv_cache_dtype, "an encoder keeps the K/V of one step only, in float32");
  if (!args.cache.kv_cache_dtype_skip_layers.empty()) refuse("--kv-cache-dtype-skip-layers", "the KV cache is not quantized");
  if (args.cache.gpu_memory_utilization != defaults.cache.gpu_memory_utilization)
    refuse("--gpu-memory-utilization", "nothing runs on a GPU");
  if (args.cache.num_gpu_blocks_override) refuse("--num-gpu-blocks-override", "nothing runs on a GPU");
  if (args.cache.kv_cache_space_gib != defaults.cache.kv_cache_space_gib)
    refuse("--kv-cache-space", "the cache is sized by --max-num-batched-tokens (one step's K/V)");
  if (args.cache.enable_prefix_caching || args.scheduler.enable_chunked_prefill)
    PAGODA_LOG_INFO("Encoder model: chunked prefill and prefix caching are off (bidirectional attention computes "
                    "each sequence whole, and a prefix's K/V depend on the tokens after it).");

  const ResolvedAttentionSettings s = resolve_attention_settings(validated, DeviceKind::kCpu);
  EmbedderOptions o;
  o.encoder.attention = s.attention;
  o.encoder.block_size = s.user_block_size;
  o.encoder.batch_invariant = s.batch_invariant;
  o.encoder.env_layout = s.env_layout;
  o.encoder.num_threads = args.device.cpu_threads > 0 ? args.device.cpu_threads
                                                      : int(std::max(1u, std::thread::hardware_concurrency()));
  o.max_num_seqs = args.scheduler.max_num_seqs;
  o.max_num_batched_tokens = args.scheduler.max_num_batched_tokens.value_or(0);
  o.max_model_len = args.model.max_model_len.value_or(0);
  return o;
}

Embedder::Embedder(const std::filesystem::path& folder, int num_threads)
    : Embedder(folder, [&] {
        EmbedderOptions o;
        o.encoder.num_threads = num_threads;
        return o;
      }()) {}

Embedder::Embedder(const std::filesystem::path& folder, const EmbedderOptions& options)
    : tokenizer_(Tokenizer::from_file(folder)), encoder_(BertEncoder::load(folder, options.encoder)) {
  // The default is sentence-transformers' max_seq_length; up to the position table on request.
  const int positions = encoder_->config().max_position_embeddings;
  if (options.max_model_len < 0 || options.max_model_len > positions)
    throw_config_error("--max-model-len ", options.max_model_len, " is outside 1..", positions,
                       " for this encoder (its position table)");
  max_tokens_ = options.max_model_len > 0 ? options.max_model_len : encoder_->max_tokens_per_sequence();
  SchedulerConfig sc;
  sc.max_num_seqs = options.max_num_seqs;
  sc.max_num_batched_tokens = options.max_num_batched_tokens > 0 ? options.max_num_batched_tokens : std::max(8192, max_tokens_);
  // Every sequence is computed whole in one step, so one step must hold the longest (vLLM's rule for models
  // without chunked prefill).
  if (sc.max_num_batched_tokens < max_tokens_)
    throw_config_error("--max-num-batched-tokens ", sc.max_num_batched_tokens, " is below the longest sequence, ", max_tokens_,
                       " tokens: an encoder computes a sequence in one step (lower --max-model-len or raise it)");
  sc.enable_chunked_prefill = false;
  sc.enable_prefix_caching = false;
  sc.max_model_len = max_tokens_ + 1;  // the scheduler's room for one generated token, which an encoder never makes
  sc.block_size = encoder_->block_size();
  // A full step: its tokens, plus at most one partly filled block per sequence.
  sc.num_blocks = int32_t((int64_t(sc.max_num_batched_tokens) + sc.block_size - 1) / sc.block_size +
                          std::max(sc.max_num_seqs, 0));
  scheduler_ = std::make_unique<Scheduler>(sc);  // refuses a non-positive --max-num-seqs
  // Uninitialized: the pages of blocks no step reaches are never touched (each step writes its K/V first).
  const int64_t cache_floats = int64_t(sc.num_blocks) * encoder_->kv_block_floats();
  kv_cache_.reset(new float[size_t(cache_floats)]);
  PAGODA_LOG_INFO("Embedding scheduler: max_num_seqs=", sc.max_num_seqs, ", max_num_batched_tokens=", sc.max_num_batched_tokens,
                  ", max_model_len=", max_tokens_, ", KV cache of one step: ", sc.num_blocks, " blocks of ", sc.block_size,
                  " tokens (at most ", (cache_floats * int64_t(sizeof(float))) >> 20, " MiB)");
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
  if (ids.size() > size_t(max_tokens_)) {
    const std::vector<int>& suffix = tokenizer_.special_suffix_ids();
    ids.resize(size_t(max_tokens_) - suffix.size());
    ids.insert(ids.end(), suffix.begin(), suffix.end());
  }
  return ids;
}

std::vector<std::vector<float>> Embedder::embed(const std::vector<std::vector<int>>& sequences) {
  if (sequences.empty()) return {};
  for (size_t s = 0; s < sequences.size(); ++s) {
    if (sequences[s].empty() || int(sequences[s].size()) > max_tokens_)
      throw_config_error("input ", s, " has ", sequences[s].size(), " tokens; this model takes 1 to ", max_tokens_);
    for (int id : sequences[s])
      if (id < 0 || id >= encoder_->config().vocab_size)
        throw_config_error("input ", s, " has token id ", id, ", outside 0..", encoder_->config().vocab_size - 1);
  }
  auto job = std::make_shared<Job>();
  job->sequences = sequences;
  job->vectors.resize(sequences.size());
  job->remaining = sequences.size();
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
  struct Owner {
    std::shared_ptr<Job> job;
    size_t index = 0;
  };
  std::unordered_map<RequestId, Owner> owners;
  RequestId next_id = 1;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty() || scheduler_->has_unfinished(); });
      if (queue_.empty() && !scheduler_->has_unfinished()) return;  // stopping, nothing left
      // Requests join between steps: every sequence queued now is a request of the scheduler.
      for (; !queue_.empty(); queue_.pop_front()) {
        const std::shared_ptr<Job>& job = queue_.front();
        for (size_t i = 0; i < job->sequences.size(); ++i) {
          const RequestId id = next_id++;
          scheduler_->add_request(id, std::vector<int32_t>(job->sequences[i].begin(), job->sequences[i].end()), 1);
          owners[id] = Owner{job, i};
        }
      }
    }
    const SchedulerOutput out = scheduler_->schedule();
    // The cache holds a full step and nothing outlives a step, so the head of the queue is always admitted.
    PAGODA_CHECK(!out.empty(), "embedding scheduler: ", scheduler_->num_waiting(), " waiting requests and no step");
    std::vector<std::vector<int>> batch;
    std::vector<std::span<const BlockId>> step_tables;
    int stride = 1;
    int64_t tokens = 0;
    for (const ScheduledChunk& c : out.chunks) {
      const Owner& o = owners.at(c.id);
      PAGODA_CHECK(c.start == 0 && size_t(c.num_tokens) == o.job->sequences[o.index].size(),
                   "embedding scheduler: request ", c.id, " was split (chunked prefill is off)");
      batch.push_back(o.job->sequences[o.index]);
      tokens += c.num_tokens;
      step_tables.push_back(scheduler_->kv_cache().block_table(c.id));
      stride = std::max(stride, int(step_tables.back().size()));
    }
    std::vector<int32_t> tables(out.chunks.size() * size_t(stride), 0);
    for (size_t i = 0; i < step_tables.size(); ++i)
      std::copy(step_tables[i].begin(), step_tables[i].end(), tables.begin() + long(i * size_t(stride)));
    EncoderStepBlocks blocks;
    blocks.cache = kv_cache_.get();
    blocks.num_blocks = scheduler_->kv_cache().num_blocks();
    blocks.block_tables = tables.data();
    blocks.block_table_stride = stride;
    try {
      std::vector<std::vector<float>> vecs = encoder_->embed(batch, &blocks);
      {
        std::lock_guard<std::mutex> lock(mu_);
        ++stats_.steps;
        stats_.sequences += int64_t(batch.size());
        stats_.tokens += tokens;
        stats_.max_batch = std::max(stats_.max_batch, int(batch.size()));
        stats_.recent_batches.push_back(int(batch.size()));
        if (stats_.recent_batches.size() > 256) stats_.recent_batches.erase(stats_.recent_batches.begin());
      }
      PAGODA_LOG_DEBUG("embedding step: ", batch.size(), " sequences, ", tokens, " tokens, ", scheduler_->num_waiting(),
                       " waiting");
      for (size_t i = 0; i < out.chunks.size(); ++i) {
        const RequestId id = out.chunks[i].id;
        Owner o = std::move(owners.at(id));
        owners.erase(id);
        scheduler_->finish_request(id);
        o.job->vectors[o.index] = std::move(vecs[i]);
        if (--o.job->remaining == 0) o.job->done.set_value(std::move(o.job->vectors));
      }
    } catch (...) {
      // The jobs of this step fail whole: their other sequences leave the scheduler too.
      const std::exception_ptr error = std::current_exception();
      std::vector<std::shared_ptr<Job>> failed;
      for (const ScheduledChunk& c : out.chunks) {
        const std::shared_ptr<Job>& j = owners.at(c.id).job;
        if (std::find(failed.begin(), failed.end(), j) == failed.end()) failed.push_back(j);
      }
      for (auto it = owners.begin(); it != owners.end();) {
        if (std::find(failed.begin(), failed.end(), it->second.job) != failed.end()) {
          scheduler_->finish_request(it->first);
          it = owners.erase(it);
        } else {
          ++it;
        }
      }
      for (const std::shared_ptr<Job>& j : failed) j->done.set_exception(error);
    }
  }
}

}  // namespace pagoda
