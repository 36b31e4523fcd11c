// What the engine drives: one forward step over a batch of sequences on a paged KV cache, on the CPU or a
// GPU. The runner owns the cache; the engine owns the block tables.
#pragma once

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
  virtual const ModelConfig& config() const = 0;
  virtual const KvCacheOptions& cache_options() const = 0;
};

}  // namespace pagoda
