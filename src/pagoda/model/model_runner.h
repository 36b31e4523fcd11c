// What the engine drives: one forward step over a batch of sequences on a paged KV cache, on the CPU or a
// GPU. The runner owns the cache; the engine owns the block tables.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "pagoda/model/model_config.h"

namespace pagoda {

struct ForwardBatch;
struct KvCacheOptions;

class ModelRunner {
 public:
  virtual ~ModelRunner() = default;
  // Writes the batch's K/V into the cache; returns fp32 logits [logits_indices.size(), vocab_size] on the host.
  virtual std::vector<float> forward(const ForwardBatch& batch) = 0;
  // The same step, returning only the argmax token of each logits row (ties -> lowest id), computed where
  // the logits are; nullopt when the runner has no such path (then call forward()).
  virtual std::optional<std::vector<int32_t>> forward_greedy(const ForwardBatch& batch) { return std::nullopt; }
  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheOptions& cache_options() const = 0;
};

}  // namespace pagoda
